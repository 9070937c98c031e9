#include "vmm/address_space.hpp"

#include <algorithm>
#include <cstdio>

#include "vmm/detail/check.hpp"

namespace tvmm::detail {

AddressSpace::AddressSpace(backend::DeviceBackend& dev, std::size_t bytes, std::size_t page_size)
    : dev_(dev),
      page_size_(page_size),
      bytes_(bytes),
      pages_(static_cast<std::uint32_t>(bytes / page_size)),
      free_pages_(pages_) {
  TVMM_CHECK(dev_.reserve(bytes_, &base_));
  free_.emplace(0, pages_);
}

AddressSpace::~AddressSpace() {
  if (auto s = dev_.release_reservation(base_, bytes_); !s.ok()) {
    std::fprintf(stderr, "tvmm: releasing the address reservation failed: %s\n", backend::errc_name(s.code));
  }
}

std::optional<std::uint32_t> AddressSpace::allocate(std::uint32_t pages) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < pages) continue;
    const std::uint32_t first = it->first;
    const std::uint32_t rest = it->second - pages;
    free_.erase(it);
    if (rest != 0) free_.emplace(first + pages, rest);
    free_pages_ -= pages;
    return first;
  }
  return std::nullopt;
}

void AddressSpace::free(std::uint32_t first, std::uint32_t pages) {
  free_pages_ += pages;
  auto next = free_.lower_bound(first);
  if (next != free_.end() && first + pages == next->first) {
    pages += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      prev->second += pages;
      return;
    }
  }
  free_.emplace(first, pages);
}

std::uint32_t AddressSpace::largest_free_run() const noexcept {
  std::uint32_t best = 0;
  for (const auto& [first, len] : free_) best = std::max(best, len);
  return best;
}

}  // namespace tvmm::detail
