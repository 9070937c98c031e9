#pragma once
// The one checking macro every backend call goes through: on failure it throws with the call's text,
// the backend's error name and the file:line that made the call.

#include "backends/device/device_backend.hpp"

namespace tvmm::vmm {

[[noreturn]] void throw_status(device::Status status, const char* call, const char* file, int line);

}  // namespace tvmm::vmm

#define TVMM_CHECK(call)                                                                                    \
  do {                                                                                                      \
    const ::tvmm::device::Status tvmm_check_status_ = (call);                                               \
    if (!tvmm_check_status_.ok()) ::tvmm::vmm::throw_status(tvmm_check_status_, #call, __FILE__, __LINE__); \
  } while (0)
