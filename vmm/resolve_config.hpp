#pragma once
// A Config resolved against the device it runs on, shared by the pager and the transparent heap.

#include "backends/device/device_backend.hpp"
#include "tvmm/config.hpp"

namespace tvmm::detail {

//! Resolves the page size, budgets and va_size against the backend (page_size 0 = granularity, budgets
//! rounded down to whole pages, va_size 0 = 4 x the tiers); throws config_error naming the fix.
Config resolve_config(Config cfg, const backend::DeviceProperties& props);

}  // namespace tvmm::detail
