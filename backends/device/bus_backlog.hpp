#pragma once
// The copies queued one way over the host link, as a clock (DeviceBackend::d2h_backlog): each copy
// occupies the bus for its slot (its bytes over the link's speed, plus any fixed cost per copy) from
// when it was queued, or from the end of the slot before it, whichever is later. An estimate from
// below: a copy that waits for a kernel starts later than it counts. Not thread-safe: the backend
// holds its lock around it.

#include <algorithm>
#include <chrono>

namespace tvmm::device {

class BusBacklog {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  //! A copy queued at `now` that keeps the bus busy for `slot`.
  void queued(time_point now, std::chrono::nanoseconds slot) noexcept { until_ = std::max(until_, now) + slot; }
  //! When the copies queued so far end.
  [[nodiscard]] time_point until() const noexcept { return until_; }
  //! How much longer they keep the bus busy, seen from `now` (0 once they have ended).
  [[nodiscard]] std::chrono::nanoseconds left(time_point now) const noexcept {
    return std::max<std::chrono::nanoseconds>(until_ - now, std::chrono::nanoseconds(0));
  }

 private:
  time_point until_{};
};

}  // namespace tvmm::device
