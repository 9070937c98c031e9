// PagerImpl, part 2: pin counts, pin (hit path and slow path), unpin, discard, and the prefetch loads.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "common/scope_guard.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

// --- pin counts ---------------------------------------------------------------------------------------

// pinned_pages_ and the words. The count goes up before a first pin shows in a word and down after a
// last pin has left one, so it never reads lower than the pages pinned: admission stays conservative,
// and check_invariants (which freezes the words) only has to wait for it to come down to the truth.
// Under mu_ both steps happen together (pin_page, unpin_page_locked); lock-free they are two steps.

bool PagerImpl::try_pin_resident(PageEntry& p, std::uint64_t dirty) noexcept {
  return p.try_pin_resident(dirty, [this](int step) {
    if (step > 0) {
      pinned_pages_.fetch_add(1);
    } else {
      pinned_pages_.fetch_sub(1);
      wake_waiters();  // an admission check may have seen the count this call took back
    }
  });
}

void PagerImpl::pin_page(PageEntry& p) noexcept {
  const auto old = p.add_pin();
  if (word::pins(old) == 0) pinned_pages_.fetch_add(1);
}

void PagerImpl::unpin_page_locked(PageEntry& p) noexcept {
  const auto old = p.remove_pin();
  if (word::pins(old) == 1) {
    pinned_pages_.fetch_sub(1);
    cv_.notify_all();
  }
}

void PagerImpl::unpin_page(PageEntry& p) noexcept {
  std::optional<std::uint64_t> w;
  while (!(w = p.try_unpin())) {
    { std::lock_guard lk(mu_); }  // check_invariants holds mu_ while the word is frozen
  }
  if (word::pins(*w) == 1) {
    pinned_pages_.fetch_sub(1);
    wake_waiters();
  }
}

void PagerImpl::wake_waiters() noexcept {
  // A waiter registers in waiters_ before testing its condition under mu_; taking mu_ here orders this
  // notification after that test, so the wake-up cannot be lost. With no waiter, unpin stays lock-free.
  if (waiters_.load() == 0) return;
  { std::lock_guard lk(mu_); }
  cv_.notify_all();
}

bool PagerImpl::wait_for_change(Lock& lk, Clock::time_point deadline) {
  if (Clock::now() >= deadline) return false;
  cv_.wait_until(lk, deadline);
  return true;
}

// --- pin ------------------------------------------------------------------------------------------------

PagerImpl::Range PagerImpl::range(const Allocation* a, std::size_t offset, std::size_t bytes, Access access) const {
  if (bytes == 0 || offset >= a->bytes || bytes > a->bytes - offset) {
    throw invalid_argument("tvmm::Tensor::pin_range: bytes [" + std::to_string(offset) + ", " + std::to_string(offset) +
                           " + " + std::to_string(bytes) + ") are not a non-empty range inside " + tensor_label(a) +
                           " (" + std::to_string(a->bytes) + " bytes); pass 0 < bytes <= size - offset");
  }
  if (a->arena != nullptr) return {whole(a), access};
  const std::size_t end = offset + bytes;
  const PageSpan span{static_cast<std::uint32_t>(offset / page_size_),
                      static_cast<std::uint32_t>((end - 1) / page_size_ - offset / page_size_ + 1)};
  // A write that covers a page only in part must not discard the rest of it.
  const bool whole_pages = offset % page_size_ == 0 && (end % page_size_ == 0 || end == a->bytes);
  return {span, access == Access::write && !whole_pages ? Access::read_write : access};
}

void PagerImpl::pin(Allocation* a, PageSpan span, Access access, device::StreamHandle stream) {
  observe_.counters.pins.fetch_add(1, std::memory_order_relaxed);
  if (a->arena != nullptr) {  // in the resident arena: nothing moves; a host pin still orders after uses
    if (stream == nullptr && a->use_count.load(std::memory_order_acquire) != 0) wait_for_uses(a);
    observe_.counters.hits.fetch_add(1, std::memory_order_relaxed);
    a->refs.fetch_add(1, std::memory_order_relaxed);
    prefetch_ahead(prefetch_.on_pin(a, span, access));
    observe_.pin(a->id, 0, access, true, stream);
    return;
  }
  PageEntry* pages = pages_of(a) + span.first;
  const std::uint32_t n = span.count;
  // Hit path: every page resident with its page-in complete. Only pin counts and recency change; the
  // caller's stream needs no ordering and the calling thread never blocks.
  const std::uint64_t dirty = access == Access::read ? 0 : word::kDirty;
  std::uint32_t i = 0;
  while (i < n && try_pin_resident(pages[i], dirty)) ++i;
  const bool hit = i == n;
  if (hit) {
    policy_->touch(table_.index_of(*pages), n);
    observe_.counters.hits.fetch_add(n, std::memory_order_relaxed);
  } else {
    while (i > 0) unpin_page(pages[--i]);
    pin_slow(a, span, access, stream);
  }
  if (stream == nullptr && a->use_count.load(std::memory_order_acquire) != 0) {
    try {
      wait_for_uses(a);
    } catch (...) {
      for (std::uint32_t k = 0; k < n; ++k) unpin_page(pages[k]);
      throw;
    }
  }
  a->refs.fetch_add(1, std::memory_order_relaxed);
  prefetch_ahead(prefetch_.on_pin(a, span, access));
  read_ahead();
  write_behind(a, access);
  observe_.pin(a->id, n, access, hit, stream);
  if (const auto next = prefetch_.after(a, span)) prefetch_after(a, *next);
}

// --- prefetch: what to load is prefetch_'s decision, the loading is the residency core's ----------------

void PagerImpl::mark_iteration() {
  observe_.iteration();
  if (cfg_.write_behind) {
    Lock lk(mu_);
    write_behind_.on_iteration(host_->fills());
  }
  prefetch_ahead(prefetch_.on_iteration());
  read_ahead();
}

void PagerImpl::prefetch_ahead(const std::vector<AccessTrace::Ahead>& ahead) noexcept {
  if (ahead.empty()) return;
  try {
    Lock lk(mu_);
    // Most targets are resident already (each pin adds one target `distance` pins ahead): reap, which
    // queries the oldest transfers' events (a driver call each on a GPU), only for a target with pages
    // on the host or on their way there.
    bool reaped = false, fresh = false;  // fresh: reaped, and nothing loaded since
    for (const auto& target : ahead) {
      auto it = by_id_.find(target.tensor);
      if (it == by_id_.end() || it->second->arena != nullptr) continue;
      Allocation* a = it->second;
      const PageSpan span{target.first, target.pages};
      if (!reaped && leaving_or_away(a, span)) {
        reap(lk);
        reaped = fresh = true;
      }
      std::vector<PageEntry*> todo = host_pages(a, span);
      if (todo.empty()) continue;
      const std::size_t horizon = prefetch_.horizon_of(target);
      auto needed_sooner = [&](const PageEntry& p) { return prefetch_.needed_sooner(p.owner->id, target, horizon); };
      const Protect protect(needed_sooner);  // refers to the lambda above
      // No waiting: load what free or evictable frames allow (load_pages does not unlock without may_wait).
      const auto loaded =
          load_pages(lk, todo, Access::read_write, Clock::now(), false, &protect, std::exchange(fresh, false));
      observe_.counters.prefetched.fetch_add(loaded, std::memory_order_relaxed);
      if (loaded < todo.size()) break;  // no room for this one: none for the ones after it either
    }
  } catch (const std::exception& ex) {
    // Prefetch is a hint: a failure leaves the pages where they were; the pin that needs them reports.
    std::fprintf(stderr, "tvmm: trace prefetch failed: %s\n", ex.what());
  }
}

void PagerImpl::prefetch_after(Allocation* a, PageSpan next) noexcept {
  // Lock-free look first: most pins of a sequential scan find the pages ahead already loaded.
  PageEntry* ahead = pages_of(a) + next.first;
  bool any = false;
  for (std::uint32_t i = 0; i < next.count && !any; ++i) any = ahead[i].state() == PageState::host;
  if (!any) return;
  try {
    Lock lk(mu_);
    reap(lk);
    std::vector<PageEntry*> todo = host_pages(a, next);
    if (todo.empty()) return;
    // Like any prefetch: no waiting, only free or evictable frames (never pinned pages).
    const auto loaded = load_pages(lk, todo, Access::read_write, Clock::now(), false, nullptr, true);
    observe_.counters.prefetched.fetch_add(loaded, std::memory_order_relaxed);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "tvmm: sequential prefetch failed: %s\n", ex.what());
  }
}

// A host pin sees the tensor as the device left it: wait for the work that stream pins queued on it.
void PagerImpl::wait_for_uses(Allocation* a) {
  std::vector<EventRef> waits;
  {
    std::lock_guard ul(a->uses_mu);
    prune_uses(*a, true);
    for (auto& u : a->uses) waits.push_back(u.point.done);
  }
  const auto t0 = observe_.now();
  for (auto& e : waits) events_.wait(e.get());
  observe_.stall(t0);
  std::lock_guard ul(a->uses_mu);
  prune_uses(*a, false);
}

void PagerImpl::prune_uses(Allocation& a, bool record) {
  for (auto& u : a.uses) releases_->resolve(u.point, record);
  // A point with neither event nor line is complete; one with no event yet (without `record`) stays.
  std::erase_if(a.uses, [&](const Allocation::Use& u) {
    return u.point.done ? events_.is_done(u.point.done.get()) : !u.point.line;
  });
  a.use_count.store(static_cast<std::uint32_t>(a.uses.size()), std::memory_order_release);
}

void PagerImpl::wait_for_last_uses(Allocation* a) noexcept {
  // No one else reads or changes the uses of an allocation no one references: a new use needs a pin,
  // and eviction prunes only the uses of its victims' tensors, which reclaim has claimed (or which live
  // in the always-resident arena). So each event is waited for in place, with no list to allocate.
  std::lock_guard ul(a->uses_mu);
  for (auto& u : a->uses) {
    releases_->resolve(u.point, true);  // noexcept: without an event it synchronizes the stream
    if (u.point.done && !wait_quietly(u.point.done.get(), a)) break;
  }
  a->uses.clear();  // keeps its capacity: frees nothing but the events' references
  a->use_count.store(0, std::memory_order_release);
}

bool PagerImpl::wait_quietly(Event* e, const Allocation* a) noexcept {
  try {
    events_.wait(e);
  } catch (const std::exception& ex) {
    if (dev_->lost()) return false;  // nothing completes any more: said once already
    try {
      std::fprintf(stderr, "tvmm: waiting for work on %s failed: %s\n", tensor_label(a).c_str(), ex.what());
    } catch (...) {  // the label could not be allocated
    }
  }
  return true;
}

std::vector<EventRef> PagerImpl::pending_page_ins(const Allocation* a, PageSpan span) {
  const PageEntry* pages = &table_[a->first_page + span.first];
  std::vector<EventRef> out;
  for (std::uint32_t i = 0; i < span.count; ++i) {
    Event* e = pages[i].ready;
    if (e == nullptr || e->known_done()) continue;
    // Of two events on one copy stream the later implies the earlier (Event::seq): only the later is
    // waited for. Events on other streams (a dropped page's last use, see evict) are kept.
    auto kept = std::find_if(out.begin(), out.end(),
                             [&](const EventRef& o) { return o.get()->implies(*e) || e->implies(*o.get()); });
    if (kept == out.end()) {
      out.emplace_back(e);
    } else if (!kept->get()->implies(*e)) {
      *kept = EventRef(e);  // implies the one it replaces
    }
  }
  return out;
}

bool PagerImpl::waits_for_oldest_load(const Allocation* a, PageSpan span) const noexcept {
  if (loads_.empty()) return false;
  const Event* oldest = loads_.front().done.get();
  const PageEntry* pages = &table_[a->first_page + span.first];
  for (std::uint32_t i = 0; i < span.count; ++i) {
    if (pages[i].ready == oldest) return true;
  }
  return false;
}

bool PagerImpl::leaving_or_away(const Allocation* a, PageSpan span) const noexcept {
  const PageEntry* pages = &table_[a->first_page + span.first];
  for (std::uint32_t i = 0; i < span.count; ++i) {
    const auto st = pages[i].state();
    if (st != PageState::device && st != PageState::fresh) return true;
  }
  return false;
}

std::vector<PageEntry*> PagerImpl::host_pages(const Allocation* a, PageSpan span, std::size_t limit) {
  PageEntry* pages = &table_[a->first_page + span.first];
  std::vector<PageEntry*> out;
  for (std::uint32_t i = 0; i < span.count && out.size() < limit; ++i) {
    if (pages[i].state() == PageState::host) out.push_back(&pages[i]);
  }
  return out;
}

void PagerImpl::pin_slow(Allocation* a, PageSpan span, Access access, device::StreamHandle stream) {
  const auto t0 = observe_.now();
  const auto deadline = t0.wall + cfg_.wait_timeout;
  PageEntry* pages = pages_of(a) + span.first;
  const std::uint32_t n = span.count;
  // Registered as a waiter for the whole slow path, before any condition is tested, so an unpin that
  // races with a test below always takes mu_ before notifying (see wake_waiters).
  waiters_.fetch_add(1);
  common::ScopeGuard unregister([&] { waiters_.fetch_sub(1); });
  Lock lk(mu_);
  // Retire finished transfers (a query per queue on a GPU) only when this pin has pages to bring back
  // or waits for some in transit, or when one of its pages waits for the oldest page-in batch: the
  // reap's first query is then about that batch, and once it is retired, pins of its pages hit. A pin
  // whose pages wait only for later batches orders its stream after them, and every kReapAfterPins-th
  // such pin reaps, so that pages whose page-ins ended unnoticed do not stay pending for good while
  // nothing else reaps (the oldest batch's pages may never be pinned again, or may be gone). A pin that
  // needs frames for fresh pages reaps at its first eviction (acquire_frames). `reaped`: reaped with
  // mu_ held since, so the first eviction need not reap again.
  bool reaped = leaving_or_away(a, span) || waits_for_oldest_load(a, span) || ++pins_since_reap_ >= kReapAfterPins;
  if (reaped) reap(lk);

  // 1. Admission: the pinned working set must fit the device budget (the frames there are, while the
  //    device is short of memory; read under mu_). A tensor larger than it never fits; otherwise wait
  //    (bounded) for other pins to be released.
  for (;;) {
    // Read on every pass: a device short of memory has fewer usable frames than its budget, and that
    // number may shrink while this call waits.
    const std::uint32_t budget = device_->usable();
    if (n > budget) {
      const bool short_now = device_->short_of_memory();
      throw out_of_memory("tvmm: cannot pin " + tensor_label(a) + ": it needs " + std::to_string(n) +
                          " device pages but " +
                          (short_now ? "the device has memory for only " + std::to_string(budget) + " pages (" +
                                           format_bytes(std::uint64_t{budget} * page_size_) + ") of the " +
                                           std::to_string(device_->budget()) +
                                           " budgeted now; free GPU memory held by other processes or split "
                                           "the tensor"
                                     : "the device budget is " + std::to_string(budget) + " pages (" +
                                           format_bytes(std::uint64_t{budget} * page_size_) +
                                           "); raise device.budget or split the tensor"));
    }
    std::uint64_t unpinned = 0;
    for (std::uint32_t i = 0; i < n; ++i) unpinned += word::pins(pages[i].word.load()) == 0 ? 1 : 0;
    if (pinned_pages_.load() + unpinned <= budget) break;
    reaped = false;
    if (!wait_for_change(lk, deadline)) {
      throw out_of_memory("tvmm: cannot pin " + tensor_label(a) + ": " + std::to_string(pinned_pages_.load()) +
                          " of the " + std::to_string(budget) + " device pages are pinned and " +
                          std::to_string(unpinned) + " more are needed; no pin was released within " +
                          std::to_string(cfg_.wait_timeout.count()) +
                          " ms. The pinned working set exceeds the device budget: release pins sooner or "
                          "raise device.budget" +
                          life_pins_note());
    }
  }

  // 2. Pin every page first, so none of them is chosen as a victim while the others are loaded.
  for (std::uint32_t i = 0; i < n; ++i) pin_page(pages[i]);
  common::ScopeGuard rollback([&] {
    for (std::uint32_t i = 0; i < n; ++i) unpin_page_locked(pages[i]);
  });

  // 3. Make every page resident; this may evict, and waits for transfers other threads run on them.
  std::uint64_t misses = 0;
  std::vector<EventRef> waits = make_resident(lk, a, span, access, deadline, misses, reaped);
  rollback.dismiss();
  if (access != Access::read) {
    for (std::uint32_t i = 0; i < n; ++i) {
      pages[i].mark_written();       // the contents live again
      host_copies_->drop(pages[i]);  // and change
    }
  }
  policy_->touch(table_.index_of(*pages), n);
  lk.unlock();
  observe_.counters.misses.fetch_add(misses, std::memory_order_relaxed);
  observe_.counters.hits.fetch_add(n - misses, std::memory_order_relaxed);

  // 4. Order the caller after the page-ins: its stream waits (the thread does not), or, for a
  //    host-synchronous pin, the thread waits.
  try {
    if (stream != nullptr) {
      releases_->order_after(stream, waits);
    } else {
      for (auto& e : waits) events_.wait(e.get());
    }
  } catch (...) {
    for (std::uint32_t i = 0; i < n; ++i) unpin_page(pages[i]);
    throw;
  }
  observe_.stall(t0);
}

std::vector<EventRef> PagerImpl::make_resident(Lock& lk, Allocation* a, PageSpan span, Access access,
                                               Clock::time_point deadline, std::uint64_t& misses, bool reaped) {
  loading_pins_.fetch_add(1, std::memory_order_relaxed);
  common::ScopeGuard loading([&] { loading_pins_.fetch_sub(1, std::memory_order_relaxed); });
  PageEntry* pages = pages_of(a) + span.first;
  std::vector<PageEntry*> todo;
  for (;;) {
    todo.clear();
    bool busy = false, on_nvme = false;
    for (std::uint32_t i = 0; i < span.count; ++i) {
      const auto s = pages[i].state();
      // An NVMe page the pin overwrites needs no data: it is mapped like a fresh one.
      const bool nvme_discard = s == PageState::nvme && access == Access::write;
      if (s == PageState::fresh || s == PageState::host || nvme_discard) todo.push_back(&pages[i]);
      on_nvme = on_nvme || (s == PageState::nvme && !nvme_discard);
      busy = busy || s == PageState::transit;
    }
    // Host pages first: their page-ins (asynchronous) then overlap the NVMe reads that follow.
    if (!todo.empty()) {
      misses += load_pages(lk, todo, access, deadline, true, nullptr, std::exchange(reaped, false));
      continue;
    }
    if (on_nvme) {
      misses += stage_in(lk, a, span, deadline);
      continue;
    }
    if (!busy) break;
    // Pages read ahead from NVMe: wait for what is left of their reads (the oldest first, as the drive
    // serves them), then load them from the host tier.
    if (reading_ahead(table_.index_of(*pages), span.count)) {
      finish_reads(lk, true);
      continue;
    }
    // Pages whose eviction's write-back still runs: a pin that reads them loads them back from that
    // copy's host slot, its page-in queued behind the copy, instead of waiting for the copy here (the
    // calling thread would lose its lead over the device: docs/architecture.md, "Eviction").
    if (access != Access::write) {
      std::vector<EventRef> arrivals;
      std::vector<PageEntry*> back = in_flight_write_backs(pages, span.count, arrivals);
      if (!back.empty()) {
        misses += load_pages(lk, back, access, deadline, true, nullptr, std::exchange(reaped, false), arrivals);
        continue;
      }
    }
    // Another thread is moving some of these pages (evicting them, or loading them for its own pin).
    if (!wait_progress(lk, deadline)) {
      throw timeout_error("tvmm: pinning " + tensor_label(a) + ": its pages stayed in transit for " +
                          std::to_string(cfg_.wait_timeout.count()) +
                          " ms, moved by another thread (its data is unchanged); try again, or raise "
                          "pager.wait_timeout_ms");
    }
  }
  return pending_page_ins(a, span);
}

// --- unpin and prefetch ---------------------------------------------------------------------------------

void PagerImpl::unpin(Allocation* a, PageSpan span, device::StreamHandle stream) noexcept {
  const Unpin one{a, span};
  unpin_together({&one, 1}, stream);
}

void PagerImpl::unpin_together(std::span<const Unpin> unpins, device::StreamHandle stream) noexcept {
  if (unpins.empty()) return;
  if (stream != nullptr) {
    // The release point: the stream's work queued so far, one point for every tensor released here,
    // its event recorded when something must follow it (release_points.hpp). Taken before the pin
    // counts drop, so an evictor that sees zero pins also sees this point.
    try {
      ReleaseTicket point = releases_->take(stream, observe_.counters.evictions.load(std::memory_order_relaxed));
      // No pin since this mark: released together with the tensors unpinned since the latest pin.
      const std::uint64_t mark = observe_.counters.pins.load(std::memory_order_relaxed);
      // Each tensor but the last gets a copy of its own; the last takes this one.
      for (std::size_t i = 0; i < unpins.size(); ++i)
        note_release(*unpins[i].alloc, stream, i + 1 == unpins.size() ? std::move(point) : point, mark);
      latest_release_.store(mark, std::memory_order_relaxed);
    } catch (const std::exception& ex) {
      // Without an event the only safe release point is now: wait for the stream. (The message is best
      // effort: this may be a bad_alloc, and the function is noexcept.)
      if (!dev_->lost()) {
        try {
          const std::string first = tensor_label(unpins.front().alloc);
          if (unpins.size() == 1) {
            std::fprintf(stderr, "tvmm: recording the release of %s failed (%s); synchronizing its stream\n",
                         first.c_str(), ex.what());
          } else {
            std::fprintf(stderr,
                         "tvmm: recording the release of %s and %zu more failed (%s); synchronizing "
                         "their stream\n",
                         first.c_str(), unpins.size() - 1, ex.what());
          }
        } catch (...) {
        }
      }
      try {
        const std::uint64_t taken = releases_->taken(stream);
        if (dev_->synchronize_stream(stream).ok() || dev_->lost()) releases_->synchronized(stream, taken);
      } catch (...) {
        (void)dev_->synchronize_stream(stream);
      }
    }
  }
  for (const Unpin& u : unpins) {
    Allocation* a = u.alloc;
    if (a->arena == nullptr) {
      PageEntry* pages = pages_of(a) + u.span.first;
      for (std::uint32_t i = 0; i < u.span.count; ++i) unpin_page(pages[i]);
    }
    if (a->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(a);
  }
}

void PagerImpl::note_release(Allocation& a, device::StreamHandle stream, ReleaseTicket point, std::uint64_t mark) {
  std::lock_guard ul(a.uses_mu);
  auto same = std::find_if(a.uses.begin(), a.uses.end(), [&](const Allocation::Use& u) { return u.stream == stream; });
  if (same != a.uses.end()) {
    same->point = std::move(point);
  } else {
    a.uses.push_back({stream, std::move(point)});
    a.use_count.store(static_cast<std::uint32_t>(a.uses.size()), std::memory_order_release);
  }
  a.released_at.store(mark, std::memory_order_relaxed);
}

void PagerImpl::prefetch(Allocation* a, device::StreamHandle stream) {
  if (a->arena != nullptr) return;  // always resident
  Lock lk(mu_);
  reap(lk);
  // Prefetch is a hint: it loads what fits beside the pinned pages, never waits for pins, and skips
  // pages that are fresh (no data) or already moving.
  const std::uint64_t room = device_->budget() - std::min<std::uint64_t>(device_->budget(), pinned_pages_.load());
  std::vector<PageEntry*> todo = host_pages(a, whole(a), room);
  std::size_t loaded = 0;
  if (!todo.empty()) loaded = load_pages(lk, todo, Access::read_write, Clock::now(), false, nullptr, true);
  const std::vector<EventRef> waits = pending_page_ins(a, whole(a));
  lk.unlock();
  observe_.counters.prefetched.fetch_add(loaded, std::memory_order_relaxed);
  releases_->order_after(stream, waits);
}

void PagerImpl::discard(Allocation* a) {
  if (a->arena != nullptr) return;  // a small tensor shares an always-resident arena page: nothing to free
  PageEntry* pages = pages_of(a);
  Lock lk(mu_);
  const auto deadline = Clock::now() + cfg_.wait_timeout;
  // 1. A pinned page may be in use: refuse, changing nothing. Then wait for transfers other threads run
  //    on these pages (evictions, prefetches, spills); pages leave transit only under mu_.
  // A tensor under policy.admission.min_bytes holds a pin of the pager's own on every page for its whole
  // life (its pages stay resident, so step 2 leaves them be): only pins beyond that one are the user's.
  const std::uint32_t own = a->pinned_for_life ? 1 : 0;
  for (;;) {
    bool busy = false;
    for (std::uint32_t i = 0; i < a->pages; ++i) {
      const std::uint64_t w = pages[i].word.load(std::memory_order_acquire);
      if (word::pins(w) > own) {
        throw invalid_argument("tvmm: cannot discard " + tensor_label(a) + ": page " + std::to_string(i) +
                               " is pinned; release every pin of the tensor first (its data is unchanged)");
      }
      busy = busy || word::state(w) == PageState::transit;
    }
    if (!busy) break;
    if (!wait_progress(lk, deadline)) {
      throw timeout_error("tvmm: cannot discard " + tensor_label(a) + ": transfers of its pages did not finish in " +
                          std::to_string(cfg_.wait_timeout.count()) +
                          " ms (its data is unchanged); try again, or raise pager.wait_timeout_ms");
    }
  }
  // 2. Let the copies go. Host and NVMe pages become fresh now. Resident pages stay mapped (work queued
  //    on earlier stream pins may still use them) and are marked: the next eviction takes them first and
  //    drops them, after those uses, without a write-back, unless a pin that may write comes first.
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = pages[i];
    const PageState s = p.state();
    if (s == PageState::fresh) continue;
    if (s == PageState::device) {
      // Marked only while unpinned: a pin another thread took since the check above (racing a discard
      // is a misuse) keeps its page, and its data, live.
      if (!p.mark_discarded_if_unpinned()) continue;
      host_copies_->drop(p);  // a copy of dead contents is worth nothing
      if (p.nvme_slot != kNoSlot) nvme_->release(std::exchange(p.nvme_slot, kNoSlot));
      discarded_.push_back(table_.index_of(p));
      continue;
    }
    if (p.nvme_slot != kNoSlot) nvme_->release(std::exchange(p.nvme_slot, kNoSlot));
    if (p.host_slot != kNoSlot) host_->release(std::exchange(p.host_slot, kNoSlot));
    p.clear_dirty();
    p.set_state(PageState::fresh);
  }
  compact_lazy(discarded_, device_->budget(), table_,
               [](const PageEntry& p) { return p.state() == PageState::device && word::discarded(p.word.load()); });
  lk.unlock();
  cv_.notify_all();  // host slots may have been freed
}

}  // namespace tvmm::vmm
