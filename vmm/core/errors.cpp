#include <string>
#include <system_error>

#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

void throw_status(device::Status status, const char* call, const char* file, int line) {
  std::string msg =
      std::string("tvmm: device backend call `") + call + "` failed with " + device::errc_name(status.code);
  if (status.sys_errno != 0 && (status.driver_code || status.code == device::Errc::driver_error)) {
    msg += " (";
    if (status.driver_name != nullptr) msg += std::string(status.driver_name) + ", ";
    msg += "driver code " + std::to_string(status.sys_errno) + ")";
  } else if (status.sys_errno != 0) {
    msg +=
        " (errno " + std::to_string(status.sys_errno) + ": " + std::generic_category().message(status.sys_errno) + ")";
  }
  msg += " at " + std::string(file) + ":" + std::to_string(line);
  if (status.code == device::Errc::out_of_memory) {
    // cuda.h, CUDA_ERROR_OUT_OF_MEMORY: "unable to allocate enough memory or other resources to perform
    // the requested operation". Not only device memory: an event, a stream or a queued copy that fails so
    // lacked host memory or the driver's own (the allocation-failure sweeps on the emulator reach those).
    throw out_of_memory(msg + "; the driver had no memory or other resources left for this call (device memory " +
                        "for a chunk; host or driver memory for an event, a stream or a copy)");
  }
  if (status.code == device::Errc::device_lost) {
    throw device_error(msg +
                           "; the device failed for good (a sticky error): every later call fails until the "
                           "process restarts",
                       device::errc_name(status.code));
  }
  throw device_error(msg, device::errc_name(status.code));
}

}  // namespace tvmm::vmm
