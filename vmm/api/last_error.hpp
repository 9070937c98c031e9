#pragma once
// The thread's last error text behind tvmm_last_error() (include/tvmm/tvmm.h), shared by the C API
// and the preload library's entry points.

#include <exception>
#include <string>

#include "tvmm/tvmm.h"

namespace tvmm::vmm {

//! Records `text` as this thread's last error.
void set_last_error(std::string text) noexcept;
//! The same for a constant text, where building a std::string at the call could throw (noexcept callers).
void set_last_error_text(const char* text) noexcept;
//! The status for the exception in flight (call inside a catch block), its text recorded as the last
//! error.
tvmm_status status_of_current_exception() noexcept;

}  // namespace tvmm::vmm
