#pragma once
// A simulated copy engine (one per direction). It is a lane with its own bus clock rather than a
// thread: the stream worker that issues a copy runs it while holding the lane, so copies of one
// direction are serialised across all streams while the two directions overlap, and a throttled copy
// reserves a slot on the bus clock (latency + bytes / bandwidth) and completes at its end. The bus
// clock is device time (see sim_stream.hpp).
// - Timing::wall: a slot starts when the issuing stream reaches the copy or when the previous slot
//   ends, whichever is later (first come, first served, in the order the workers get there).
// - Timing::model: copies take their slots in the order they were queued, across all streams (a
//   ticket per copy, taken by SimStream::enqueue), so the modelled times do not depend on which stream
//   worker the OS ran first. Each takes the earliest free stretch of the bus at or after its start,
//   before slots reserved already where it fits between them: a copy queued later but ready sooner
//   (a write-back queued after a write-behind copy that waits for a kernel) is not held behind the
//   earlier one's slot. A worker waits (in wall time) until the copies queued before its own have
//   reserved theirs. That cannot deadlock, since whatever an operation waits for was queued before it
//   (cuStreamWaitEvent waits for a record made before the call), unless a host function blocks until
//   a host thread acts (CUDA forbids API calls in one, cuLaunchHostFunc): the copies queued after
//   the ones behind it, on any stream, would wait too. So a test that holds a stream in a host step
//   (FaultyDevice's gates) keeps wall timing.
// A thread per engine modelled the same thing but cost two extra thread wake-ups per copy (measured:
// ~107 us fixed cost per copy on a 2-core VM, more than a 2 MiB memcpy).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace tvmm::device::sim {

//! Physical memory as the simulator holds it: a range of a memfd.
struct FileSpan {
  int fd = -1;
  std::int64_t offset = 0;
};

class CopyEngine {
 public:
  //! `ordered`: slots are taken in ticket order and fill gaps (Timing::model; see above).
  CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency, bool ordered = false);
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  //! The next copy's place in the order of slots (ordered engines; 0 otherwise). Taken once the copy
  //! is queued (SimStream::enqueue): every ticket must reach copy() exactly once, else the copies of
  //! later tickets wait for it forever.
  std::uint64_t take_ticket() noexcept;

  // Performs a copy that a stream issues at device time `start` (with its ticket, 0 for none);
  // returns its device end time, once the wall clock has reached it. Unthrottled, the copy takes the
  // memcpy's real time. With `from` and `to` set (a copy between two device addresses) the bytes move
  // between the physical memory behind them with copy_file_range, as a GPU's copy engine moves them,
  // untouched by any host thread. With both addresses null it moves nothing and takes the time (a
  // managed-memory prefetch).
  std::chrono::steady_clock::time_point copy(void* dst, const void* src, std::size_t bytes,
                                             std::chrono::steady_clock::time_point start, std::uint64_t ticket = 0,
                                             const FileSpan* from = nullptr, const FileSpan* to = nullptr);

  //! A throttled copy's time on the bus: the latency plus bytes / bandwidth (the latency alone without
  //! a bandwidth).
  [[nodiscard]] std::chrono::nanoseconds slot(std::size_t bytes) const noexcept;
  [[nodiscard]] double bandwidth() const noexcept { return bandwidth_; }

 private:
  using time_point = std::chrono::steady_clock::time_point;
  //! Reserves `length` on the bus at or after `start` (under mu_); returns the slot's begin.
  time_point reserve(time_point start, std::chrono::nanoseconds length);

  //! The reservations an ordered engine keeps (the newest): an older stretch of the bus counts as busy.
  static constexpr std::size_t kKeptSlots = 256;

  const double bandwidth_;
  const std::chrono::nanoseconds latency_;
  const bool ordered_;
  std::mutex mu_;  // the lane: one copy on the bus at a time
  std::condition_variable turn_cv_;
  std::uint64_t tickets_ = 0;               // the latest ticket taken (under mu_)
  std::uint64_t serving_ = 1;               // the ticket whose copy reserves next (under mu_)
  time_point busy_until_{};                 // unordered: the latest slot's end
  std::map<time_point, time_point> slots_;  // ordered: reserved slots, begin -> end, not overlapping
  time_point forgotten_{};                  // ordered: the bus counts as busy up to here (slots let go)
};

}  // namespace tvmm::device::sim
