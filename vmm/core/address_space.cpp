#include "vmm/core/address_space.hpp"

#include <cstdio>

#include <string>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

AddressSpace::AddressSpace(device::DeviceBackend& dev, std::size_t bytes, std::size_t page_size,
                           std::string_view origin)
    : dev_(dev),
      page_size_(page_size),
      bytes_(bytes),
      pages_(static_cast<std::uint32_t>(bytes / page_size)),
      runs_(pages_) {
  if (const auto st = dev_.reserve(bytes_, &base_); !st.ok()) {
    // Only a size the device will not reserve is the configuration's to fix; a device that failed
    // (lost, a driver error) is reported as what it is.
    if (st.code != device::Errc::out_of_memory && st.code != device::Errc::invalid_value) {
      throw_status(st, "reserve(device.va_size)", __FILE__, __LINE__);
    }
    throw config_error("cannot reserve " + format_bytes(bytes_) + " of device address space (the " +
                       dev_.properties().name + " backend refused: " + dev_.describe(st) + "); " + std::string(origin) +
                       ". Set device.va_size (TVMM_DEVICE_VA_SIZE) to the total size of the tensors you need "
                       "live at once, or lower the budgets it is computed from");
  }
}

AddressSpace::~AddressSpace() {
  dev_.warn_failed(dev_.release_reservation(base_, bytes_), "releasing the address reservation");
}

std::optional<std::uint32_t> AddressSpace::allocate(std::uint32_t pages) {
  runs_.prepare();  // so the run's free() cannot lose it to std::bad_alloc
  return runs_.allocate(pages);
}

void AddressSpace::free(std::uint32_t first, std::uint32_t pages) { runs_.free(first, pages); }

}  // namespace tvmm::vmm
