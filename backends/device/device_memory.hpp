#pragma once
// DeviceMemory: one granule of device memory outside any pager (reserved, created, mapped and made
// accessible through a backend), for what device work writes beside the pager's tensors: the mismatch
// counter of tvmm-bench's and the tests' byte checks. Released in the destructor, which never throws.

#include <cstddef>

#include "backends/device/device_backend.hpp"

namespace tvmm::device {

class DeviceMemory {
 public:
  explicit DeviceMemory(DeviceBackend& dev) noexcept : dev_(dev) {}
  ~DeviceMemory() { close(); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  //! Reserves, creates, maps and gives access to one granule. On failure, undoes the steps it made and
  //! names the one that failed in `*step` (when given). Once open, a second call is invalid_value.
  Status open(const char** step = nullptr);
  //! Releases the granule (done by the destructor too); failures are ignored, as on any release path.
  void close() noexcept;

  [[nodiscard]] DevPtr va() const noexcept { return va_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  DeviceBackend& dev_;
  DevPtr va_ = 0;
  std::size_t bytes_ = 0;  // 0 while closed
  ChunkHandle chunk_;
  bool created_ = false, mapped_ = false;
};

}  // namespace tvmm::device
