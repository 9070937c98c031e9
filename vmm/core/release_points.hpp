#pragma once
// Release points of stream pins, with their events recorded lazily.
//
// A stream pin's release point is the work its stream has queued when it is released: an eviction's
// write-back, a free or a host pin of the tensor must follow it. An event record is a
// driver call (1.6 us on an H200, 1.8 us on an H100; docs/gpu.md), made for every kernel a program
// runs through tvmm: on GPT-2 that was a fifth of a step held all in memory. Yet most release points
// are never waited for (a tensor that stays resident), or are superseded by the tensor's next use
// first. So a release on a stream the pager created only numbers the point; an event is recorded
// when something needs one (ReleasePoints::resolve), at every kRecordEvery-th point of the stream so
// that a point waited for late is covered by an event at most kRecordEvery - 1 points behind it, and
// at every point taken after the pager evicted since the stream's previous one (ReleasePoints::take).
// An event recorded late covers what was queued after the point too: a host pin or a free may wait
// for it as well, which only cuLaunchHostFunc's forbidden host functions (one that waits for a host
// thread) could turn into a deadlock.
//
// Why that is correct: cuEventRecord "captures in hEvent the contents of hStream at the time of this
// call", and a query or a stream wait then examines "the work that was captured" (cuda.h). Point q is
// taken after its kernel was queued, and an event
// recorded after point q was taken (both under the line's lock) covers it, later than needed at worst.
// Waiting for more than needed is never wrong, only possibly slower. A stream the pager synchronized
// (synchronize, destroy) has every point taken before the synchronization complete. A stream the
// pager did not create may be destroyed at any time: its points are recorded at once, as before.

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>

#include "backends/device/device_backend.hpp"
#include "vmm/core/event_pool.hpp"

namespace tvmm::vmm {

class TransferEngine;

//! One stream's release points (shared by the tickets that refer to it, so it outlives the stream).
struct ReleaseLine {
  std::mutex mu;
  device::StreamHandle stream = nullptr;
  std::uint64_t taken = 0;     //!< points taken so far (the latest point's number)
  std::uint64_t complete = 0;  //!< every point up to this one is known complete
  bool gone = false;           //!< the stream was destroyed: no event can be recorded on it any more
  //! Events recorded on the stream, oldest first: each covers every point up to its number.
  std::deque<std::pair<std::uint64_t, EventRef>> recorded;
  std::uint64_t evictions = 0;  //!< the pager's evictions at the latest point taken
  //! Per copy stream (the pager's, at most three), the latest of its events (Event::seq) this stream
  //! was made to wait for: its work queued since follows every earlier event there too.
  std::array<std::pair<device::StreamHandle, std::uint64_t>, 3> waited{};
};

//! A release point: a line and a point number, and the event chosen for it once one is.
//! `line` null: the event is `done` (a stream the pager did not create), or none is needed.
struct ReleaseTicket {
  std::shared_ptr<ReleaseLine> line;
  std::uint64_t point = 0;
  EventRef done;
};

class ReleasePoints {
 public:
  //! Points of a stream between recorded events, at most (1 = an event per point).
  static constexpr std::uint64_t kRecordEvery = 4;

  ReleasePoints(device::DeviceBackend& dev, TransferEngine& xfer) : dev_(dev), xfer_(xfer) {}

  //! A stream the pager created: its points are recorded lazily.
  void add_stream(device::StreamHandle s);
  //! The stream is about to be destroyed. `drained`: it was synchronized (or its device is lost), so
  //! every point taken is complete; otherwise an event is recorded now to cover them, the last one
  //! (if that fails too, nothing more can be done: the points count as complete).
  void remove_stream(device::StreamHandle s, bool drained) noexcept;
  //! The number of the latest point taken on `s` (0: none, or not a stream the pager created).
  [[nodiscard]] std::uint64_t taken(device::StreamHandle s);
  //! The stream was synchronized after point `upto` was taken: every point up to it is complete (at
  //! most every point taken on the stream's line now).
  void synchronized(device::StreamHandle s, std::uint64_t upto) noexcept;

  //! Takes a release point on `s` (after the work it must cover was queued). `evictions`: the pager's
  //! evictions so far. Where some happened since the stream's previous point, this one is recorded at
  //! once: under eviction pressure the pages just released are likely victims soon, and an event
  //! recorded when they are chosen would hold their write-backs behind every kernel queued since
  //! (on the quick suite's synthetic workloads, whose kernels are long, that cost up to 13%). Throws
  //! when a record it makes fails (the caller falls back to synchronizing the stream).
  [[nodiscard]] ReleaseTicket take(device::StreamHandle s, std::uint64_t evictions);
  //! Makes `t.done` the event the point needs, if any: an event already recorded that covers it, or
  //! with `record` a new one. Afterwards `t.done` is that event, or `t` is empty (the point is known
  //! complete), or (without `record`) unchanged: with `record` it always ends with an event or
  //! complete. Never throws: when a record fails, the stream is synchronized and the point is complete.
  void resolve(ReleaseTicket& t, bool record) noexcept;

  //! Makes `s` wait for each of `events` (without blocking the calling thread). A stream the pager
  //! created remembers the latest event of each copy stream it was made to wait for, and skips a wait
  //! for an earlier one there: its work already follows it (a copy stream runs in order, Event::seq).
  //! A stream's memory goes with it (remove_stream), so a new stream that gets its handle starts with
  //! none. Throws when a wait fails.
  void order_after(device::StreamHandle s, std::span<const EventRef> events);

 private:
  std::shared_ptr<ReleaseLine> line_of(device::StreamHandle s);
  //! Records an event covering every point taken on `line` (its lock held).
  void record_locked(ReleaseLine& line);

  device::DeviceBackend& dev_;
  TransferEngine& xfer_;
  std::mutex mu_;
  std::unordered_map<device::StreamHandle, std::shared_ptr<ReleaseLine>> lines_;
};

}  // namespace tvmm::vmm
