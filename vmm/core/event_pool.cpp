#include "vmm/core/event_pool.hpp"

#include "common/reserve_room.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

void EventRef::reset() noexcept {
  if (e_ != nullptr && e_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) e_->pool->recycle(e_);
  e_ = nullptr;
}

EventPool::~EventPool() {
  for (Event* e : all_) {
    (void)dev_.destroy_event(e->handle);
    delete e;
  }
}

EventRef EventPool::acquire() {
  Event* e = nullptr;
  {
    std::lock_guard lk(mu_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    }
  }
  if (e == nullptr) {
    auto fresh = std::make_unique<Event>();
    fresh->pool = this;
    TVMM_CHECK(dev_.create_event(&fresh->handle));
    std::lock_guard lk(mu_);
    // Room for this event in all_ and for every event in free_: recycle() runs in destructors and
    // must not allocate. (Only here does all_ grow.)
    try {
      common::reserve_room(all_, 1);
      free_.reserve(all_.capacity());
    } catch (...) {
      (void)dev_.destroy_event(fresh->handle);
      throw;
    }
    all_.push_back(fresh.get());
    e = fresh.release();
  }
  e->done.store(false, std::memory_order_relaxed);
  return EventRef(e);
}

bool EventPool::is_done(Event* e) {
  if (e->known_done()) return true;
  const auto s = dev_.query_event(e->handle);
  if (s.code == device::Errc::not_ready) return false;
  TVMM_CHECK(s);
  e->done.store(true, std::memory_order_release);
  return true;
}

void EventPool::wait(Event* e) {
  if (e->known_done()) return;
  TVMM_CHECK(dev_.synchronize_event(e->handle));
  e->done.store(true, std::memory_order_release);
}

void EventPool::recycle(Event* e) noexcept {
  std::lock_guard lk(mu_);
  free_.push_back(e);  // never allocates: acquire() keeps free_'s capacity at least all_.size()
}

}  // namespace tvmm::vmm
