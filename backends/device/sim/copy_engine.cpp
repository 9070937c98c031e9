#include "backends/device/sim/copy_engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace tvmm::device::sim {

CopyEngine::CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency)
    : bandwidth_(bandwidth_bytes_per_s), latency_(latency) {}

namespace {

void move_bytes(void* dst, const void* src, std::size_t bytes, const FileSpan* from, const FileSpan* to) {
  if (dst == nullptr && src == nullptr) return;  // a managed-memory prefetch: time, no data
  if (from == nullptr || to == nullptr) {
    std::memcpy(dst, src, bytes);
    return;
  }
  loff_t in = from->offset, out = to->offset;
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::copy_file_range(from->fd, &in, to->fd, &out, bytes - done, 0);
    if (n <= 0) {  // not expected between two memfds; fall back to the mapped addresses
      std::memcpy(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, bytes - done);
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::chrono::nanoseconds CopyEngine::slot(std::size_t bytes) const noexcept {
  const auto transfer =
      bandwidth_ > 0.0
          ? std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bandwidth_ * 1e9))
          : std::chrono::nanoseconds{0};
  return latency_ + transfer;
}

std::chrono::steady_clock::time_point CopyEngine::copy(void* dst, const void* src, std::size_t bytes,
                                                       std::chrono::steady_clock::time_point start,
                                                       const FileSpan* from, const FileSpan* to) {
  using clock = std::chrono::steady_clock;
  const bool throttled = bandwidth_ > 0.0 || latency_.count() > 0;
  clock::time_point finish{};
  {
    std::lock_guard lk(mu_);
    const auto begin = std::max(start, busy_until_);
    if (throttled) {
      // Reserve the next slot on the bus: it starts when the previous copy's slot ends (or at start).
      finish = begin + slot(bytes);
      move_bytes(dst, src, bytes, from, to);
    } else {
      const auto t0 = clock::now();
      move_bytes(dst, src, bytes, from, to);
      finish = begin + (clock::now() - t0);
    }
    busy_until_ = finish;
  }
  // The modelled completion; the lane is free for the next copy to reserve its own, later slot.
  std::this_thread::sleep_until(finish);
  return finish;
}

}  // namespace tvmm::device::sim
