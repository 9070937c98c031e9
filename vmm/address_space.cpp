#include "vmm/address_space.hpp"

#include <cstdio>

#include <string>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::detail {

AddressSpace::AddressSpace(backend::DeviceBackend& dev, std::size_t bytes, std::size_t page_size,
                           std::string_view origin)
    : dev_(dev),
      page_size_(page_size),
      bytes_(bytes),
      pages_(static_cast<std::uint32_t>(bytes / page_size)),
      runs_(pages_) {
  if (const auto st = dev_.reserve(bytes_, &base_); !st.ok()) {
    std::string why = backend::errc_name(st.code);
    if (st.sys_errno != 0) why += (st.code == backend::Errc::driver_error ? ", driver code " : ", errno ") + std::to_string(st.sys_errno);
    throw config_error("cannot reserve " + format_bytes(bytes_) + " of device address space (the " +
                       dev_.properties().name + " backend refused: " + why + "); " + std::string(origin) +
                       ". Set device.va_size (TVMM_DEVICE_VA_SIZE) to the total size of the tensors you need "
                       "live at once, or lower the budgets it is computed from");
  }
}

AddressSpace::~AddressSpace() {
  if (auto s = dev_.release_reservation(base_, bytes_); !s.ok() && !dev_.lost()) {
    std::fprintf(stderr, "tvmm: releasing the address reservation failed: %s\n", backend::errc_name(s.code));
  }
}

std::optional<std::uint32_t> AddressSpace::allocate(std::uint32_t pages) { return runs_.allocate(pages); }

void AddressSpace::free(std::uint32_t first, std::uint32_t pages) { runs_.free(first, pages); }

}  // namespace tvmm::detail
