#pragma once
// A Config resolved against the device it runs on, shared by the pager and the transparent heap.

#include <string>

#include "backends/device/device_backend.hpp"
#include "tvmm/config.hpp"

namespace tvmm::vmm {

//! Resolves the page size, budgets and va_size against the backend (page_size 0 = granularity, budgets
//! rounded down to whole pages, va_size 0 = auto, see default_va_size); throws config_error naming the fix.
Config resolve_config(Config cfg, const device::DeviceProperties& props);
//! va_size "auto": 4 x (device + host budgets) + the NVMe budget, at least 1 GiB, so that every page
//! the tiers can hold can be allocated even when the address range is fragmented.
[[nodiscard]] std::size_t default_va_size(const Config& resolved) noexcept;
//! How a resolved config's va_size was chosen, for errors: "device.va_size = 2 GiB" when `given` set
//! it, else the auto formula with its figures.
[[nodiscard]] std::string va_size_origin(const Config& given, const Config& resolved);

}  // namespace tvmm::vmm
