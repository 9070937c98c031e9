#pragma once
// A test's own device memory beside whatever else uses the backend: a mapped, accessible device range,
// a host buffer of the same size and a stream, for copies the test queues itself (to keep a bus busy,
// or to count them). Released at scope exit, each release expected to succeed.
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "backends/device/device_backend.hpp"

namespace tvmm::test {

class DeviceScratch {
 public:
  //! Throws std::runtime_error naming the call that failed (the test then fails with it).
  DeviceScratch(device::DeviceBackend& dev, std::size_t bytes) : dev_(dev), bytes_(bytes) {
    try {
      check(dev_.create_stream(&stream_), "create_stream");
      check(dev_.reserve(bytes_, &va_), "reserve");
      check(dev_.create_chunk(bytes_, &chunk_), "create_chunk");
      chunk_made_ = true;
      check(dev_.map(va_, bytes_, chunk_), "map");
      mapped_ = true;
      check(dev_.set_access(va_, bytes_), "set_access");
      check(dev_.alloc_host(bytes_, &host_), "alloc_host");
    } catch (...) {
      release();  // no destructor runs for a constructor that throws: give back what was made
      throw;
    }
  }
  ~DeviceScratch() { release(); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  //! The device range, as a pointer for memcpy_async.
  [[nodiscard]] void* device() const noexcept { return reinterpret_cast<void*>(va_); }
  [[nodiscard]] void* host() const noexcept { return host_; }
  [[nodiscard]] device::StreamHandle stream() const noexcept { return stream_; }

 private:
  void release() {
    if (host_ != nullptr) {
      EXPECT_TRUE(dev_.free_host(host_, bytes_).ok());
    }
    if (mapped_) {
      EXPECT_TRUE(dev_.unmap(va_, bytes_).ok());
    }
    if (chunk_made_) {
      EXPECT_TRUE(dev_.release_chunk(chunk_).ok());
    }
    if (va_ != 0) {
      EXPECT_TRUE(dev_.release_reservation(va_, bytes_).ok());
    }
    if (stream_ != nullptr) {
      EXPECT_TRUE(dev_.destroy_stream(stream_).ok());
    }
  }
  static void check(const device::Status& s, const char* call) {
    if (!s.ok())
      throw std::runtime_error(std::string("DeviceScratch: ") + call + " failed: " + device::errc_name(s.code));
  }
  device::DeviceBackend& dev_;
  std::size_t bytes_;
  device::StreamHandle stream_ = nullptr;
  device::DevPtr va_ = 0;
  device::ChunkHandle chunk_{};
  bool chunk_made_ = false;
  bool mapped_ = false;
  void* host_ = nullptr;
};

}  // namespace tvmm::test
