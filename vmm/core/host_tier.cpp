#include "vmm/core/host_tier.hpp"

#include <algorithm>
#include <cstdio>

#include "vmm/core/check.hpp"

namespace tvmm::vmm {

HostTier::HostTier(device::DeviceBackend& dev, void* base, std::size_t page_size, std::uint32_t slots)
    : dev_(dev), page_size_(page_size), slots_(slots), base_(static_cast<std::byte*>(base)) {
  TVMM_CHECK(dev_.register_host(base_, page_size_ * slots_));
  free_.reserve(slots_);
  for (std::uint32_t s = slots_; s-- > 0;) free_.push_back(s);  // hand out low slots first
}

HostTier::~HostTier() {
  dev_.warn_failed(dev_.unregister_host(base_, page_size_ * slots_), "unregistering the host tier");
}

std::optional<std::uint32_t> HostTier::try_acquire() noexcept {
  if (free_.empty()) return std::nullopt;
  const auto s = free_.back();
  free_.pop_back();
  ++in_use_;
  peak_ = std::max(peak_, in_use_);
  if (free_.empty()) ++fills_;
  return s;
}

void HostTier::release(std::uint32_t slot) noexcept {
  free_.push_back(slot);
  --in_use_;
}

}  // namespace tvmm::vmm
