#pragma once
// The launch gates: make every remap atomic with respect to all of the program's device work that may
// touch the memory being remapped.
//
// A remap moves a page while no device work may touch it: tvmm drains the device (waits for all work
// queued so far), then unmaps the page and maps it on its new chunk. Without a gate another thread of
// the program could queue a kernel between the drain and the remap, and that kernel would write to the
// page's old chunk (a lost write) or find it unmapped (an illegal address, fatal for the context).
// So every call that queues device work (kernel and graph launches, copies, memsets: the driver entry
// points the runtime reaches through cuGetProcAddress, and programs through dlsym) holds a gate shared
// while it queues, and a thread that remaps holds it exclusively from its drain to the end of the heap
// operation. Work queued before the exclusive hold is drained; work queued after it sees the new
// mapping.
//
// There is one gate per heap, that is per device with a heap of its own: a remap on one device never
// stops work queued on another (in a process driving several GPUs, one device's drain may wait for a
// kernel that needs another device's work, NCCL's collectives among them, and a single gate would
// deadlock them). A launch holds the gate of the device it runs on (tvmm's memory is accessible to its
// own device only); a copy or memset the gates of the heaps its addresses are in (ascending, so two
// holders never wait for each other), none when it touches no memory of tvmm's.
//
// Shared holds are cheap (one compare-and-swap and one decrement, no system call when nobody remaps)
// and reentrant per thread; the exclusive holder's own calls pass. Waits use futexes (atomic wait).

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

namespace tvmm::preload {

//! The most gates (one per heap slot, kMaxDevices in runtime.hpp).
inline constexpr int kMaxGates = 64;

class alignas(64) LaunchGate {  // a cache line each: devices never share one
 public:
  //! A shared hold, for the time one call queues device work (reentrant on a thread).
  void enter() noexcept;
  void leave() noexcept;
  //! enter() if the gate is open (or this thread holds it already); false, holding nothing, if a remap
  //! holds it or waits for it.
  bool try_enter() noexcept;
  //! Waits until no remap holds or waits for the gate (holding nothing meanwhile).
  void wait_open() noexcept;
  //! Takes the gate exclusively for this thread, unless it already holds it: waits for every shared
  //! holder to leave and keeps new ones out. Called before a drain that precedes a remap.
  void lock_for_remap() noexcept;
  //! Releases the exclusive hold if this thread has it (at the end of a heap operation).
  void unlock_if_held() noexcept;
  //! In a forked child (one thread): open, whatever the parent's threads held at the fork.
  void reset_after_fork() noexcept;

 private:
  friend LaunchGate& launch_gate(int slot) noexcept;
  static constexpr std::uint32_t kExclusive = 1u << 31;
  int slot_ = 0;                         // this gate's index in the thread's reentrancy counts
  std::atomic<std::uint32_t> state_{0};  // kExclusive | number of shared holders
  std::mutex exclusive_;                 // one exclusive holder at a time
};

//! The gate of heap slot `slot` (0 to kMaxGates - 1).
LaunchGate& launch_gate(int slot) noexcept;
//! Shared holds of the gates `slots[0..n)` (ascending), for one call: never holding one while waiting at
//! another (that would bring back the cross-device deadlock a gate per device avoids).
void enter_gates(const int* slots, int n) noexcept;
void leave_gates(const int* slots, int n) noexcept;
//! Releases every gate this thread holds exclusively (the end of a heap operation).
void unlock_gates_held() noexcept;
//! In a forked child: every gate open.
void reset_gates_after_fork() noexcept;

//! Shared holds of up to two gates for one hooked call (-1: none), taken in ascending order; none with
//! `bypass` (tvmm's own calls, made while a hook runs, are already ordered by the heap).
class GateEntry {
 public:
  GateEntry(bool bypass, int a, int b = -1) noexcept {
    if (bypass) return;
    if (a > b) std::swap(a, b);  // ascending, -1 first
    if (a == b) a = -1;
    if (a >= 0) slots_[n_++] = a;
    if (b >= 0) slots_[n_++] = b;
    if (n_ == 1) {
      launch_gate(slots_[0]).enter();  // one gate: waiting at it holds nothing else
    } else if (n_ == 2) {
      enter_gates(slots_, n_);
    }
  }
  ~GateEntry() { leave_gates(slots_, n_); }
  GateEntry(const GateEntry&) = delete;
  GateEntry& operator=(const GateEntry&) = delete;

 private:
  int slots_[2] = {-1, -1};
  int n_ = 0;
};

//! Shared holds of every gate, in ascending order (a graph capture's begin: a drain of any device during
//! it would invalidate a capture in global mode, whatever device the capture is on).
class AllGatesEntry {
 public:
  explicit AllGatesEntry(bool bypass) noexcept : held_(!bypass) {
    if (held_) enter_gates(all().slots, kMaxGates);
  }
  ~AllGatesEntry() {
    if (held_) leave_gates(all().slots, kMaxGates);
  }
  AllGatesEntry(const AllGatesEntry&) = delete;
  AllGatesEntry& operator=(const AllGatesEntry&) = delete;

 private:
  struct Slots {
    int slots[kMaxGates];
  };
  static const Slots& all() noexcept {
    static const Slots s = [] {
      Slots r{};
      for (int i = 0; i < kMaxGates; ++i) r.slots[i] = i;
      return r;
    }();
    return s;
  }
  bool held_;
};

//! Ends, when it goes out of scope, the exclusive holds a drain took during a heap operation.
class RemapScope {
 public:
  RemapScope() noexcept = default;
  ~RemapScope() { unlock_gates_held(); }
  RemapScope(const RemapScope&) = delete;
  RemapScope& operator=(const RemapScope&) = delete;
};

}  // namespace tvmm::preload
