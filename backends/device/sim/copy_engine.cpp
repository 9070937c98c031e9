#include "backends/device/sim/copy_engine.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

namespace tvmm::backend::sim {

CopyEngine::CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency)
    : bandwidth_(bandwidth_bytes_per_s), latency_(latency) {}

void CopyEngine::copy(void* dst, const void* src, std::size_t bytes) {
  using clock = std::chrono::steady_clock;
  const bool throttled = bandwidth_ > 0.0 || latency_.count() > 0;
  clock::time_point finish{};
  {
    std::lock_guard lk(mu_);
    if (throttled) {
      // Reserve the next slot on the bus: it starts when the previous copy's slot ends (or now).
      const auto transfer =
          bandwidth_ > 0.0
              ? std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bandwidth_ * 1e9))
              : std::chrono::nanoseconds{0};
      finish = std::max(clock::now(), busy_until_) + latency_ + transfer;
      busy_until_ = finish;
    }
    std::memcpy(dst, src, bytes);
  }
  // The modelled completion; the lane is free for the next copy to reserve its own, later slot.
  if (throttled) std::this_thread::sleep_until(finish);
}

}  // namespace tvmm::backend::sim
