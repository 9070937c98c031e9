#pragma once
// The launch gate: makes every remap atomic with respect to all of the program's device work.
//
// A remap moves a page while no device work may touch it: tvmm drains the device (waits for all work
// queued so far), then unmaps the page and maps it on its new chunk. Without the gate another thread
// of the program could queue a kernel between the drain and the remap, and that kernel would write to
// the page's old chunk (a lost write) or find it unmapped (an illegal address, fatal for the context).
// So every call that queues device work (kernel and graph launches, copies: the driver entry points
// the runtime reaches through cuGetProcAddress, and programs through dlsym) holds the gate shared while
// it queues, and a thread that remaps holds it exclusively from its drain to the end of the heap
// operation. Work queued before the exclusive hold is drained; work queued after it sees the new
// mapping.
//
// Shared holds are cheap (one compare-and-swap and one decrement, no system call when nobody remaps)
// and reentrant per thread; the exclusive holder's own calls pass. Waits use futexes (atomic wait).

#include <atomic>
#include <cstdint>
#include <mutex>

namespace tvmm::preload {

class LaunchGate {
 public:
  //! A shared hold, for the time one call queues device work (reentrant on a thread).
  void enter() noexcept;
  void leave() noexcept;
  //! Takes the gate exclusively for this thread, unless it already holds it: waits for every shared
  //! holder to leave and keeps new ones out. Called before a drain that precedes a remap.
  void lock_for_remap() noexcept;
  //! Releases the exclusive hold if this thread has it (at the end of a heap operation).
  void unlock_if_held() noexcept;
  //! In a forked child (one thread): open, whatever the parent's threads held at the fork.
  void reset_after_fork() noexcept;

 private:
  static constexpr std::uint32_t kExclusive = 1u << 31;
  std::atomic<std::uint32_t> state_{0};  // kExclusive | number of shared holders
  std::mutex exclusive_;                 // one exclusive holder at a time
};

//! The process's gate.
LaunchGate& launch_gate() noexcept;

//! A shared hold of the process's gate for one hooked call; none with `bypass` (tvmm's own calls, made
//! while a hook runs, are already ordered by the heap).
class GateEntry {
 public:
  explicit GateEntry(bool bypass) noexcept : held_(!bypass) {
    if (held_) launch_gate().enter();
  }
  ~GateEntry() {
    if (held_) launch_gate().leave();
  }
  GateEntry(const GateEntry&) = delete;
  GateEntry& operator=(const GateEntry&) = delete;

 private:
  bool held_;
};

//! Ends, when it goes out of scope, the exclusive hold a drain took during a heap operation.
class RemapScope {
 public:
  RemapScope() noexcept = default;
  ~RemapScope() { launch_gate().unlock_if_held(); }
  RemapScope(const RemapScope&) = delete;
  RemapScope& operator=(const RemapScope&) = delete;
};

}  // namespace tvmm::preload
