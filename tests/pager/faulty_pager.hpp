#pragma once
// A pager over the configured (simulated) device wrapped in a FaultyDevice, for tests that inject
// device failures or count the pager's device calls.

#include <memory>

#include "backends/device/faulty/faulty_device.hpp"
#include "tvmm/tvmm.hpp"
#include "vmm/api/make_pager.hpp"

namespace tvmm::test {

//! The pager; `dev` receives the FaultyDevice it owns.
inline Pager make_faulty_pager(const Config& c, device::FaultyDevice*& dev) {
  auto faulty = std::make_unique<device::FaultyDevice>(device::make_device_backend(c));
  dev = faulty.get();
  return vmm::make_pager(c, std::move(faulty));
}

}  // namespace tvmm::test
