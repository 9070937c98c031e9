#pragma once
// The device plug-point's one registry: every device backend's name, what it is and its factory
// (backends/device/registry.cpp). Read by make_device_backend and the config key `device.backend`
// (its choices and help), and the device conformance suite (tests/conformance/device_backend_test.cpp):
// a new backend is its own folder plus one line there.

#include <memory>
#include <span>
#include <string_view>

#include "backends/device/device_backend.hpp"
#include "tvmm/config.hpp"

namespace tvmm::device {

//! One registered device backend.
struct DeviceBackendInfo {
  std::string_view name;     //!< the value of `device.backend`
  std::string_view summary;  //!< what it is, for help texts
  //! It drives real hardware: its conformance suite runs in tvmm_gpu_tests (ctest label "gpu", and on
  //! the CUDA emulator), where a machine without the device skips it; the others run in tvmm_tests.
  bool needs_gpu;
  //! Makes the backend for `config`; throws tvmm::device_error when it cannot start (no driver, a
  //! build without it), tvmm::config_error for settings it refuses.
  std::unique_ptr<DeviceBackend> (*make)(const Config& config);
};

//! Every registered backend, in the order help texts list them.
std::span<const DeviceBackendInfo> device_backends() noexcept;
//! The backend named `name`, or null.
const DeviceBackendInfo* find_device_backend(std::string_view name) noexcept;

}  // namespace tvmm::device
