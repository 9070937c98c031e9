#include "preload/launch_gate.hpp"

#include <new>
#include <utility>

namespace tvmm::preload {

namespace {
thread_local int t_shared[kMaxGates] = {};   // this thread's nested shared holds, per gate
thread_local std::uint64_t t_exclusive = 0;  // the gates this thread holds exclusively (bit per slot)
}  // namespace

void LaunchGate::enter() noexcept {
  if ((t_exclusive >> slot_ & 1) != 0 || t_shared[slot_]++ > 0) return;
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

bool LaunchGate::try_enter() noexcept {
  if ((t_exclusive >> slot_ & 1) != 0) return true;  // as enter(): the exclusive holder's calls pass
  if (t_shared[slot_] > 0) {                         // nested
    ++t_shared[slot_];
    return true;
  }
  std::uint32_t s = state_.load(std::memory_order_acquire);
  while ((s & kExclusive) == 0) {
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_acquire)) {
      ++t_shared[slot_];
      return true;
    }
  }
  return false;
}

void LaunchGate::wait_open() noexcept {
  std::uint32_t s = state_.load(std::memory_order_acquire);
  while ((s & kExclusive) != 0) {
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
}

void LaunchGate::leave() noexcept {
  if ((t_exclusive >> slot_ & 1) != 0 || --t_shared[slot_] > 0) return;
  // The last shared holder out wakes a remap waiting for the gate.
  if (state_.fetch_sub(1, std::memory_order_release) == (kExclusive | 1)) state_.notify_all();
}

void LaunchGate::lock_for_remap() noexcept {
  if ((t_exclusive >> slot_ & 1) != 0) return;
  exclusive_.lock();
  // A thread inside a gated call cannot remap (tvmm's heap is reached only from allocation and
  // synchronisation hooks, never from a launch), so t_shared[slot_] is 0 here.
  std::uint32_t s = state_.fetch_or(kExclusive, std::memory_order_acq_rel) | kExclusive;
  while (s != kExclusive) {
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
  t_exclusive |= std::uint64_t{1} << slot_;
}

void LaunchGate::unlock_if_held() noexcept {
  if ((t_exclusive >> slot_ & 1) == 0) return;
  t_exclusive &= ~(std::uint64_t{1} << slot_);
  state_.fetch_and(~kExclusive, std::memory_order_release);
  state_.notify_all();
  exclusive_.unlock();
}

void LaunchGate::reset_after_fork() noexcept {
  state_.store(0);
  new (&exclusive_) std::mutex;  // another thread of the parent may have held it
  t_shared[slot_] = 0;           // the forking thread may have been inside a gated call
}

LaunchGate& launch_gate(int slot) noexcept {
  static LaunchGate* const gates = [] {
    static LaunchGate g[kMaxGates];
    for (int i = 0; i < kMaxGates; ++i) g[i].slot_ = i;
    return g;
  }();
  return gates[slot];
}

void enter_gates(const int* slots, int n) noexcept {
  // Never hold one gate while waiting at another: a remap that holds the second may wait (through the
  // device work its drain waits for) for a launch that needs the first. So take them all without waiting,
  // or let go of those taken, wait for the closed one to open, and start again.
  for (;;) {
    int taken = 0;
    while (taken < n && launch_gate(slots[taken]).try_enter()) ++taken;
    if (taken == n) return;
    for (int i = taken; i-- > 0;) launch_gate(slots[i]).leave();
    launch_gate(slots[taken]).wait_open();
  }
}

void leave_gates(const int* slots, int n) noexcept {
  for (int i = n; i-- > 0;) launch_gate(slots[i]).leave();
}

void unlock_gates_held() noexcept {
  for (std::uint64_t held = t_exclusive; held != 0; held &= held - 1) {
    launch_gate(__builtin_ctzll(held)).unlock_if_held();
  }
}

void reset_gates_after_fork() noexcept {
  for (int i = 0; i < kMaxGates; ++i) launch_gate(i).reset_after_fork();
  t_exclusive = 0;
}

}  // namespace tvmm::preload
