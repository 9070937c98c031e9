#include "vmm/device_tier.hpp"

#include <algorithm>
#include <cstdio>

#include "vmm/detail/check.hpp"

namespace tvmm::detail {

DeviceTier::DeviceTier(backend::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
                       backend::ChunkLocation where)
    : dev_(dev), page_size_(page_size), budget_(budget_frames), where_(where) {
  chunks_.reserve(budget_frames);
  free_.reserve(budget_frames);
}

DeviceTier::~DeviceTier() {
  for (auto c : chunks_) {
    if (auto s = dev_.release_chunk(c); !s.ok() && !dev_.lost()) {
      std::fprintf(stderr, "tvmm: releasing a %s frame failed: %s\n",
                   where_ == backend::ChunkLocation::host ? "host-located" : "device", backend::errc_name(s.code));
    }
  }
}

std::optional<std::uint32_t> DeviceTier::try_acquire() {
  std::uint32_t f;
  if (!free_.empty()) {
    f = free_.back();
    free_.pop_back();
  } else if (chunks_.size() < budget_) {
    backend::ChunkHandle c;
    TVMM_CHECK(dev_.create_chunk(page_size_, &c, where_));
    f = static_cast<std::uint32_t>(chunks_.size());
    chunks_.push_back(c);
  } else {
    return std::nullopt;
  }
  ++in_use_;
  peak_ = std::max(peak_, in_use_);
  return f;
}

void DeviceTier::release(std::uint32_t frame) noexcept {
  free_.push_back(frame);
  --in_use_;
}

}  // namespace tvmm::detail
