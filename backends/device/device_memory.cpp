#include "backends/device/device_memory.hpp"

namespace tvmm::device {

Status DeviceMemory::open(const char** step) {
  auto failed = [&](const char* what, Status s) {
    if (step != nullptr) *step = what;
    close();
    return s;
  };
  if (bytes_ != 0) {
    if (step != nullptr) *step = "open (already open)";
    return Status::fail(Errc::invalid_value);
  }
  const std::size_t g = dev_.properties().granularity;
  if (auto s = dev_.reserve(g, &va_); !s.ok()) return failed("reserve", s);
  bytes_ = g;
  if (auto s = dev_.create_chunk(g, &chunk_); !s.ok()) return failed("create_chunk", s);
  created_ = true;
  if (auto s = dev_.map(va_, g, chunk_); !s.ok()) return failed("map", s);
  mapped_ = true;
  if (auto s = dev_.set_access(va_, g); !s.ok()) return failed("set_access", s);
  return Status::success();
}

void DeviceMemory::close() noexcept {
  if (bytes_ == 0) return;
  if (mapped_) (void)dev_.unmap(va_, bytes_);
  if (created_) (void)dev_.release_chunk(chunk_);
  (void)dev_.release_reservation(va_, bytes_);
  mapped_ = created_ = false;
  bytes_ = 0;
  va_ = 0;
}

}  // namespace tvmm::device
