#include "preload/launch_gate.hpp"

#include <new>

namespace tvmm::preload {

namespace {
thread_local int t_shared = 0;          // this thread's nested shared holds
thread_local bool t_exclusive = false;  // this thread holds the gate exclusively
}  // namespace

void LaunchGate::enter() noexcept {
  if (t_exclusive || t_shared++ > 0) return;
  std::uint32_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((s & kExclusive) != 0) {
      state_.wait(s, std::memory_order_acquire);  // a remap is under way: wait for its end
      s = state_.load(std::memory_order_acquire);
      continue;
    }
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_acquire)) return;
  }
}

void LaunchGate::leave() noexcept {
  if (t_exclusive || --t_shared > 0) return;
  // The last shared holder out wakes a remap waiting for the gate.
  if (state_.fetch_sub(1, std::memory_order_release) == (kExclusive | 1)) state_.notify_all();
}

void LaunchGate::lock_for_remap() noexcept {
  if (t_exclusive) return;
  exclusive_.lock();
  // A thread inside a gated call cannot remap (tvmm's heap is reached only from allocation and
  // synchronisation hooks, never from a launch), so t_shared is 0 here.
  std::uint32_t s = state_.fetch_or(kExclusive, std::memory_order_acq_rel) | kExclusive;
  while (s != kExclusive) {
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
  t_exclusive = true;
}

void LaunchGate::unlock_if_held() noexcept {
  if (!t_exclusive) return;
  t_exclusive = false;
  state_.fetch_and(~kExclusive, std::memory_order_release);
  state_.notify_all();
  exclusive_.unlock();
}

void LaunchGate::reset_after_fork() noexcept {
  state_.store(0);
  new (&exclusive_) std::mutex;  // another thread of the parent may have held it
  t_shared = 0;                  // the forking thread may have been inside a gated call
  t_exclusive = false;
}

LaunchGate& launch_gate() noexcept {
  static LaunchGate gate;
  return gate;
}

}  // namespace tvmm::preload
