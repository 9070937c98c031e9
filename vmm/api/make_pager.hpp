#pragma once
// A Pager over backends the caller made (internal: for tvmm-bench and the tests, which wrap a backend in
// a fault-injecting adaptor or choose one themselves). Programs build a Pager from a Config.

#include <memory>

#include "backends/device/device_backend.hpp"
#include "backends/storage/storage_backend.hpp"
#include "tvmm/pager.hpp"

namespace tvmm::vmm {

//! As Pager(config), but over `backend` (null: the one the config names) and, when the config gives
//! the NVMe tier a budget, `storage` (null: the one the config names). Throws as Pager(config) does.
Pager make_pager(const Config& config, std::unique_ptr<device::DeviceBackend> backend,
                 std::unique_ptr<storage::StorageBackend> storage = nullptr);

}  // namespace tvmm::vmm
