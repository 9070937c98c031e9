#pragma once
//! @file errors.hpp
//! The exceptions thrown by the tvmm C++ API.
//!
//! Every tvmm exception derives from the mixin `tvmm::error` and from exactly one standard exception,
//! so both `catch (const tvmm::error&)` and `catch (const std::exception&)` catch all of them, and
//! `tvmm::out_of_memory` is also a `std::bad_alloc`. Messages say what failed, where, and how to fix it.

#include <new>
#include <stdexcept>
#include <string>

#include "tvmm/export.h"

namespace tvmm {

//! Base of every exception tvmm throws. Not itself a std::exception: each concrete error also
//! derives from the standard exception that fits it best.
class TVMM_API error {
 public:
  virtual ~error() = default;
  //! The message: what failed, the values involved, and how to fix it.
  [[nodiscard]] virtual const char* what() const noexcept = 0;

 protected:
  error() = default;
  error(const error&) = default;
  error& operator=(const error&) = default;
};

//! A caller passed a value the API cannot accept (zero size, a pointer tvmm did not allocate, ...).
//! Nothing was changed.
class TVMM_API invalid_argument : public std::invalid_argument, public error {
 public:
  explicit invalid_argument(const std::string& msg) : std::invalid_argument(msg) {}
  [[nodiscard]] const char* what() const noexcept override { return std::invalid_argument::what(); }
};

//! A tier cannot hold what was asked: an allocation larger than all tiers together, or a pinned
//! working set larger than the device budget. The message gives the size asked and what is free.
class TVMM_API out_of_memory : public std::bad_alloc, public error {
 public:
  explicit out_of_memory(std::string msg) : msg_(std::move(msg)) {}
  [[nodiscard]] const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

//! An invalid configuration (zero budget, page size not a multiple of the backend granularity, ...).
//! `location()` is "file:line:column" when the value came from a file, empty otherwise.
class TVMM_API config_error : public std::runtime_error, public error {
 public:
  explicit config_error(const std::string& msg, std::string location = {})
      : std::runtime_error(location.empty() ? msg : location + ": " + msg), location_(std::move(location)) {}
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
  //! Where the bad value came from ("file:line:column"), or empty.
  [[nodiscard]] const std::string& location() const noexcept { return location_; }

 private:
  std::string location_;
};

//! A device backend primitive failed (the simulator, or later the CUDA driver). The message names the
//! call, the backend's error name, and the tvmm source location that made the call.
class TVMM_API device_error : public std::runtime_error, public error {
 public:
  device_error(const std::string& msg, std::string error_name)
      : std::runtime_error(msg), error_name_(std::move(error_name)) {}
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
  //! The backend's name for the error, e.g. "invalid_value" (or a CUDA driver error name).
  [[nodiscard]] const std::string& error_name() const noexcept { return error_name_; }

 private:
  std::string error_name_;
};

//! Storage I/O failed: a page could not be written to or read back from the NVMe tier, or its data
//! failed its checksum. The message names the page and slot; the page stays readable where it was.
class TVMM_API io_error : public std::runtime_error, public error {
 public:
  explicit io_error(const std::string& msg, int sys_errno = 0) : std::runtime_error(msg), errno_(sys_errno) {}
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
  //! The operating system's error number (EIO, ...), or 0 for a checksum mismatch.
  [[nodiscard]] int sys_errno() const noexcept { return errno_; }

 private:
  int errno_;
};

//! A request could not complete in time, e.g. waiting for other threads to unpin pages.
class TVMM_API timeout_error : public std::runtime_error, public error {
 public:
  explicit timeout_error(const std::string& msg) : std::runtime_error(msg) {}
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
};

}  // namespace tvmm
