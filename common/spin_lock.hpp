#pragma once
// A small test-and-test-and-set lock for critical sections of a few pointer updates (the eviction
// policy's list), where std::mutex's unlock (an atomic read-modify-write) is a visible part of the
// cost. Yields after a short spin so a descheduled holder on a small machine is not starved.

#include <atomic>
#include <thread>

namespace tvmm::common {

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins >= 64) std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace tvmm::common
