// PagerImpl, part 4: eviction (victims, write-backs) and retiring completed transfers (reap).
#include <algorithm>
#include <cstdio>

#include "vmm/detail/check.hpp"
#include "vmm/detail/labels.hpp"
#include "vmm/detail/scope_guard.hpp"
#include "vmm/pager_impl.hpp"

namespace tvmm::detail {

std::vector<PageEntry*> PagerImpl::select_victims(std::size_t count) {
  std::vector<PageEntry*> victims;
  std::uint32_t slots = host_->free_count();
  policy_->select(count, [&](PageEntry& p) {
    if (protect_ != nullptr && (*protect_)(p)) return false;
    // A page with a current NVMe copy is dropped, not written back: it needs no host slot. The claim
    // compares the whole word, so `needs_slot` holds for the word the claim succeeds on.
    bool needs_slot = false;
    std::uint64_t w = p.word.load(std::memory_order_acquire);
    do {
      if (word::state(w) != PageState::device || word::pins(w) != 0) return false;
      needs_slot = p.host_slot == kNoSlot && !clean_on_nvme(p, w);
      if (needs_slot && slots == 0) return false;
    } while (!p.word.compare_exchange_weak(w, word::with_state(w, PageState::transit), std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    if (needs_slot) --slots;
    victims.push_back(&p);
    return true;
  });
  return victims;
}

// Starts evicting `victims` (claimed: in transit, unpinned, out of the policy) to the host tier (or,
// for a page whose NVMe copy is current, to nothing: it is dropped without a copy) and
// appends their frames to `frames` at once, without waiting: the returned event completes when the
// write-backs have, and every use of the frames must be ordered after it. The victims stay in transit,
// still mapped at their own addresses, until reap() sees the event complete and unmaps them.
EventRef PagerImpl::evict(std::vector<PageEntry*>& victims, std::vector<std::uint32_t>& frames) {
  std::size_t dropped = 0;
  for (PageEntry* v : victims) {
    if (v->host_slot != kNoSlot) continue;
    if (clean_on_nvme(*v, v->word.load(std::memory_order_acquire))) {
      ++dropped;
    } else {
      v->host_slot = *host_->try_acquire();  // select_victims counted free slots
    }
  }
  EventRef done;
  std::vector<EventRef> per_page;
  try {
    // 1. Order the write-backs after each victim's last uses (stream pins' release points) and after
    //    its own page-in, on the copy stream: the host does not wait for those.
    std::vector<Event*> after;
    for (PageEntry* v : victims) {
      if (v->ready != nullptr) after.push_back(v->ready);
      std::lock_guard ul(v->owner->uses_mu);
      prune_uses(*v->owner);
      for (auto& u : v->owner->uses) after.push_back(u.done.get());
    }
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    for (Event* e : after) {
      if (!events_.is_done(e)) xfer_->order_copy_out_after(e);
    }
    // 2. Queue the write-backs, with an event after each, so that each page can move on (to NVMe, see
    //    spill) as soon as its own copy is done. Dropped pages get one too: the frames' next users
    //    must follow the victims' last uses.
    //    Without an NVMe tier no page moves on alone: one event serves the whole batch.
    per_page.reserve(victims.size());
    for (PageEntry* v : victims) {
      if (v->host_slot != kNoSlot) xfer_->copy_out(host_->ptr(v->host_slot), va_of(*v));
      if (nvme_) per_page.push_back(xfer_->record_out());
    }
    if (!nvme_) per_page.assign(victims.size(), xfer_->record_out());
    done = per_page.back();
  } catch (...) {
    // The victims stay resident with their data. Each keeps its host slot: a write-back may already be
    // queued into it, so no other page may take it; the page's next eviction reuses it, after that copy.
    for (PageEntry* v : victims) {
      policy_->insert(*v);
      v->set_state(PageState::device, v->ready != nullptr);
    }
    cv_.notify_all();
    throw;
  }
  // 3. Hand the frames over now; the victims stay mapped (and in transit) until reap() retires them.
  EvictionBatch batch{{}, std::move(per_page)};
  for (PageEntry* v : victims) {
    frames.push_back(v->frame);
    v->frame = kNoFrame;
    if (v->ready != nullptr) EventRef::drop(std::exchange(v->ready, nullptr));
    batch.pages.push_back(table_.index_of(*v));
  }
  if (events_trace_) {
    const auto now = Clock::now();
    for (const std::uint32_t page : batch.pages) {
      events_trace_->instant(events_trace_->evictions, "evict", now, "\"page\": " + std::to_string(page));
    }
  }
  evictions_.push_back(std::move(batch));
  counters_.evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  counters_.clean_evictions.fetch_add(dropped, std::memory_order_relaxed);
  return done;
}

// Retires completed transfers, oldest first: page-ins release their host slots and clear their pages'
// pending flags; write-backs unmap their victims' old addresses and publish the victims on the host
// (or, for pages dropped without a copy, on NVMe).
bool PagerImpl::reap(Lock& /*lk*/) {
  bool retired = false;
  while (!loads_.empty() && events_.is_done(loads_.front().done.get())) {
    LoadBatch& b = loads_.front();
    for (auto idx : b.pages) {
      PageEntry& p = table_[idx];
      // A page evicted or freed since then no longer refers to this batch (its slot is in use again).
      if (p.ready != b.done.get() || p.state() != PageState::device) continue;
      if (p.host_slot != kNoSlot) {
        host_->release(p.host_slot);
        p.host_slot = kNoSlot;
      }
      EventRef::drop(std::exchange(p.ready, nullptr));
      std::uint64_t w = p.word.load(std::memory_order_relaxed);
      while (
          !p.word.compare_exchange_weak(w, w & ~word::kPending, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      }
    }
    loads_.pop_front();
    retired = true;
  }
  // Write-backs page by page (their events complete in the order they were recorded).
  while (!evictions_.empty()) {
    EvictionBatch& b = evictions_.front();
    for (; b.retired < b.pages.size() && events_.is_done(b.done[b.retired].get()); ++b.retired) {
      PageEntry& v = table_[b.pages[b.retired]];
      if (!dev_->unmap(va_of(v), page_size_).ok()) {
        // The data is safe on the host; the next load of this page unmaps before mapping again.
        std::fprintf(stderr, "tvmm: unmapping an evicted page at %s failed; retrying at its next page-in\n",
                     hex(va_of(v)).c_str());
        v.stale_mapping = true;
      }
      retired = true;
      if (v.spill != Spill::none) {
        v.spill = Spill::arrived;  // a spill is writing it to NVMe: it publishes the page
      } else if (v.host_slot != kNoSlot) {
        v.set_state(PageState::host);
        note_host(v);
      } else {
        v.set_state(PageState::nvme);
      }
    }
    if (b.retired < b.pages.size()) break;
    evictions_.pop_front();
  }
  if (retired) cv_.notify_all();
  return retired;
}

bool PagerImpl::wait_progress(Lock& lk, Clock::time_point deadline) {
  if (reap(lk)) return true;  // that was the progress: the caller re-checks its condition
  // Transfers in flight make progress by themselves: wait for the oldest, then retire it.
  EventRef oldest;
  if (!evictions_.empty()) {
    oldest = evictions_.front().done[evictions_.front().retired];
  } else if (!loads_.empty()) {
    oldest = loads_.front().done;
  }
  if (oldest) {
    lk.unlock();
    try {
      events_.wait(oldest.get());
    } catch (...) {
      lk.lock();
      throw;
    }
    lk.lock();
    reap(lk);
    return true;
  }
  return wait_for_change(lk, deadline);
}

}  // namespace tvmm::detail
