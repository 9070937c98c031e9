#include "backends/device/sim/copy_engine.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

namespace tvmm::backend::sim {

CopyEngine::CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency)
    : bandwidth_(bandwidth_bytes_per_s), latency_(latency) {}

std::chrono::steady_clock::time_point CopyEngine::copy(void* dst, const void* src, std::size_t bytes,
                                                       std::chrono::steady_clock::time_point start) {
  using clock = std::chrono::steady_clock;
  const bool throttled = bandwidth_ > 0.0 || latency_.count() > 0;
  clock::time_point finish{};
  {
    std::lock_guard lk(mu_);
    const auto begin = std::max(start, busy_until_);
    if (throttled) {
      // Reserve the next slot on the bus: it starts when the previous copy's slot ends (or at start).
      const auto transfer =
          bandwidth_ > 0.0
              ? std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bandwidth_ * 1e9))
              : std::chrono::nanoseconds{0};
      finish = begin + latency_ + transfer;
      std::memcpy(dst, src, bytes);
    } else {
      const auto t0 = clock::now();
      std::memcpy(dst, src, bytes);
      finish = begin + (clock::now() - t0);
    }
    busy_until_ = finish;
  }
  // The modelled completion; the lane is free for the next copy to reserve its own, later slot.
  std::this_thread::sleep_until(finish);
  return finish;
}

}  // namespace tvmm::backend::sim
