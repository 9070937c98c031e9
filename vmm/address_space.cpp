#include "vmm/address_space.hpp"

#include <cstdio>

#include "vmm/detail/check.hpp"

namespace tvmm::detail {

AddressSpace::AddressSpace(backend::DeviceBackend& dev, std::size_t bytes, std::size_t page_size)
    : dev_(dev),
      page_size_(page_size),
      bytes_(bytes),
      pages_(static_cast<std::uint32_t>(bytes / page_size)),
      runs_(pages_) {
  TVMM_CHECK(dev_.reserve(bytes_, &base_));
}

AddressSpace::~AddressSpace() {
  if (auto s = dev_.release_reservation(base_, bytes_); !s.ok()) {
    std::fprintf(stderr, "tvmm: releasing the address reservation failed: %s\n", backend::errc_name(s.code));
  }
}

std::optional<std::uint32_t> AddressSpace::allocate(std::uint32_t pages) { return runs_.allocate(pages); }

void AddressSpace::free(std::uint32_t first, std::uint32_t pages) { runs_.free(first, pages); }

}  // namespace tvmm::detail
