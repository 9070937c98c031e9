#pragma once
// Reference-counted device events recycled through a pool. A page-in batch, an eviction batch or a
// stream pin's release point is one Event; pages and allocations hold references to it.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/device/device_backend.hpp"

namespace tvmm::vmm {

class EventPool;

struct Event {
  device::EventHandle handle = nullptr;
  std::atomic<std::uint32_t> refs{0};
  std::atomic<bool> done{false};  // cached: once complete, a pooled event is not re-recorded until reused
  EventPool* pool = nullptr;
  // Set at each record by the transfer engine (record_on, record_copy), before anyone else sees the event (a held
  // reference keeps it from being recorded again):
  //! The stream it was recorded on.
  device::StreamHandle stream = nullptr;
  //! On one of the pager's copy streams: its place in the order of their records. A later event on the
  //! same stream implies this one: cuEventRecord "captures in hEvent the contents of hStream at the
  //! time of this call" (cuda.h), and a stream runs its work in order, so what the later one captured
  //! includes what this one did. 0 on any other stream.
  std::uint64_t seq = 0;
  //! Recorded on the pager's device-to-host stream (a write-back's event).
  bool write_back = false;
  //! Whether this event's completion implies `o`'s: the same event, or a later one on the same copy
  //! stream (seq above). Events on other streams imply nothing here.
  [[nodiscard]] bool implies(const Event& o) const noexcept {
    return this == &o || (o.seq != 0 && stream == o.stream && seq > o.seq);
  }
  //! Whether a query or wait has already found the event complete (no driver call).
  [[nodiscard]] bool known_done() const noexcept { return done.load(std::memory_order_acquire); }
};

//! An owning reference to a pooled Event (copyable; the last reference returns it to the pool).
class EventRef {
 public:
  EventRef() = default;
  explicit EventRef(Event* e) noexcept : e_(e) {
    if (e_) e_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  EventRef(const EventRef& o) noexcept : EventRef(o.e_) {}
  EventRef(EventRef&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  EventRef& operator=(EventRef o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~EventRef() { reset(); }
  void reset() noexcept;
  [[nodiscard]] Event* get() const noexcept { return e_; }
  //! Gives the reference to the caller (who must later call EventRef::drop).
  [[nodiscard]] Event* detach() noexcept { return std::exchange(e_, nullptr); }
  static void drop(Event* e) noexcept {
    EventRef r;
    r.e_ = e;
  }
  explicit operator bool() const noexcept { return e_ != nullptr; }

 private:
  Event* e_ = nullptr;
};

class EventPool {
 public:
  explicit EventPool(device::DeviceBackend& dev) : dev_(dev) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  //! An unrecorded event with one reference.
  EventRef acquire();
  //! True once the event's work has completed (queries the backend until it has, then caches).
  bool is_done(Event* e);
  //! Blocks until the event's work has completed.
  void wait(Event* e);

 private:
  friend class EventRef;
  void recycle(Event* e) noexcept;

  device::DeviceBackend& dev_;
  std::mutex mu_;
  std::vector<Event*> free_;
  std::vector<Event*> all_;
};

}  // namespace tvmm::vmm
