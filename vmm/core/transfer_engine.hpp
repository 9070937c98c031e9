#pragma once
// The transfer engine owns the pager's every map/unmap call, every event the paging records (release
// points, copy completions), and the copy streams: one per direction, so both copy engines work at
// once, and a second device-to-host stream for write-behind copies (created on first use), so that one
// waiting for the kernel that writes its page holds up no write-back of an eviction. Page moves are queued
// asynchronously; completion is tracked by events. (Transparent mode's remap heap is a mechanism of its own,
// vmm/remap_heap.*; the events of the public StreamTimer are the program's, recorded by PagerImpl::record_event.)

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>

#include "backends/device/device_backend.hpp"
#include "vmm/core/event_pool.hpp"
#include "vmm/observe/timeline.hpp"

namespace tvmm::vmm {

struct MapRequest {
  device::DevPtr va;
  device::ChunkHandle chunk;
};

class TransferEngine {
 public:
  TransferEngine(device::DeviceBackend& dev, EventPool& events, std::size_t page_size);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  //! Maps one frame per page, then grants access once per contiguous run of addresses (one
  //! set-access call per run, not per page). `reqs` must be sorted by address. All or nothing: on a
  //! failure it unmaps what it mapped and rethrows; `left_mapped` (reqs.size() entries, if given) then
  //! says which of those unmaps failed too, so those addresses are still mapped.
  void map(std::span<const MapRequest> reqs, std::span<std::uint8_t> left_mapped = {});
  //! Unmaps one page. Not stream-ordered: callers wait for every use of the page first.
  void unmap(device::DevPtr va);
  //! Unmaps the `pages` adjacent pages from `va`, each mapped on its own, with one call (cuMemUnmap
  //! takes whole mappings: docs/cuda-emulator.md); false if the device refuses (never throws), and
  //! then the caller retries page by page or keeps the address marked stale.
  [[nodiscard]] bool try_unmap(device::DevPtr va, std::size_t pages = 1) noexcept;

  //! Records every copy as a span on the trace's copy-engine lanes, from queued to completed (a host
  //! callback after each copy marks its completion). Null: no tracing (the default).
  void set_timeline(Timeline* trace) noexcept { trace_ = trace; }
  //! Queues a page-in of the page's first `bytes` (host slot -> device address; at most a page: the
  //! last page of a tensor moves only the bytes the tensor holds) on the host-to-device stream. The
  //! pager passes its frame's own address (DeviceTier::frame_addr), never a tensor's.
  void copy_in(device::DevPtr frame, const void* host, std::size_t bytes);
  //! Queues a write-back of the page's first `bytes` (device address -> host slot; the frame's own
  //! address) on the device-to-host stream.
  void copy_out(void* host, device::DevPtr frame, std::size_t bytes);
  //! Queues a write-behind copy of the page's first `bytes` (device address -> host slot; the page stays
  //! resident) on the write-behind stream, which is created on the first call.
  void copy_behind(void* host, device::DevPtr frame, std::size_t bytes);
  // The order_*_after calls make no driver call for an event recorded on the stream they order: its
  // later work runs after that event anyway.
  //! Makes later write-behind copies wait for `e` (a last use or a page-in).
  void order_behind_after(Event* e);
  //! An event that completes when the write-behind copies queued so far have completed.
  EventRef record_behind();
  //! Makes later write-backs wait for `e` (a last use, a page-in or a write-behind copy).
  void order_copy_out_after(Event* e);
  //! Makes later page-ins wait for `e` (the write-back of the frame's previous page).
  void order_copy_in_after(Event* e);
  //! An event that completes when the page-ins queued so far have completed.
  EventRef record_in();
  //! An event that completes when the write-backs queued so far have completed: the previous one
  //! returned, when nothing was queued on the device-to-host stream since (no copy, no wait).
  EventRef record_out();
  //! An event that completes when the work queued on `stream` (a program's stream) so far has
  //! completed: a release point.
  EventRef record_on(device::StreamHandle stream);
  //! Waits for every queued copy in both directions; false if the device cannot say (never throws).
  bool drain() noexcept;
  //! Makes `stream` wait for `e` without blocking the calling thread.
  void stream_wait(device::StreamHandle stream, Event* e);

  [[nodiscard]] std::uint64_t pages_in() const noexcept { return pages_in_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t pages_out() const noexcept { return pages_out_.load(std::memory_order_relaxed); }
  //! The bytes those copies moved (a tensor's last page counts the bytes the tensor holds in it).
  [[nodiscard]] std::uint64_t bytes_in() const noexcept { return bytes_in_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t bytes_out() const noexcept { return bytes_out_.load(std::memory_order_relaxed); }

 private:
  device::DeviceBackend& dev_;
  EventPool& events_;
  std::size_t page_size_;
  device::StreamHandle in_ = nullptr;
  device::StreamHandle out_ = nullptr;
  device::StreamHandle behind_ = nullptr;  // created by the first write-behind call
  std::mutex out_mu_;                      // the device-to-host stream's calls, and out_latest_
  std::mutex seq_mu_;                      // the copy streams' records, and seq_
  std::uint64_t seq_ = 0;                  // the copy streams' records so far (Event::seq)
  EventRef out_latest_;  // the event record_out() returned last, while nothing was queued on out_ since
  device::StreamHandle behind_stream();
  // An event on one of the copy streams, numbered (Event::seq).
  EventRef record_copy(device::StreamHandle stream);
  // Whether `e` was recorded on `s`, one of the copy streams (which live as long as the engine, so no
  // other stream's handle can equal theirs meanwhile; a program's stream may be destroyed while its
  // work still runs and its handle reused, which is why only copy-stream events, seq != 0, count).
  static bool recorded_on(const Event* e, device::StreamHandle s) noexcept { return e->seq != 0 && e->stream == s; }
  std::atomic<std::uint64_t> pages_in_{0};
  std::atomic<std::uint64_t> pages_out_{0};
  std::atomic<std::uint64_t> bytes_in_{0};
  std::atomic<std::uint64_t> bytes_out_{0};
  void mark(device::StreamHandle stream, std::uint32_t lane, const char* what, device::DevPtr va,
            Timeline::Clock::time_point queued) noexcept;
  Timeline* trace_ = nullptr;
};

}  // namespace tvmm::vmm
