// PagerImpl, part 5: retiring completed transfers (reap): page-ins become hits, write-backs publish their
// victims on the host; and unmapping pages' addresses, a call per run (unmap_pages).
#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/scope_guard.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

// Retires completed transfers, oldest first: page-ins release their host slots and clear their pages'
// pending flags; write-behind copies become host copies; write-backs publish their victims on the host
// (or, for pages dropped without a copy, on NVMe, or nowhere if their contents were discarded). The
// victims' addresses stay mapped to their old frames (PageEntry::mapped).
bool PagerImpl::reap(Lock& /*lk*/) {
  pins_since_reap_ = 0;
  bool retired = false;
  while (!loads_.empty() && events_.is_done(loads_.front().done.get())) {
    LoadBatch& b = loads_.front();
    for (auto idx : b.pages) {
      PageEntry& p = table_[idx];
      // A page evicted or freed since then no longer refers to this batch (its slot is in use again).
      if (p.ready != b.done.get() || p.state() != PageState::device) continue;
      if (p.host_slot != kNoSlot) host_copies_->keep_or_release(p);
      EventRef::drop(std::exchange(p.ready, nullptr));
      p.clear_pending();
    }
    loads_.pop_front();
    retired = true;
  }
  // Write-behind copies: each page's slot now holds its contents as of its last write before the copy.
  // A page evicted since (in transit or gone: its eviction ordered itself after the copy and owns the
  // slot), or still loading from that slot (the page-in's retirement keeps or lets go of it), needs
  // nothing more. A resident one keeps the slot as a host copy unless a write made it stale meanwhile.
  auto retire_behind = [&] {
    while (!behind_.empty() && events_.is_done(behind_.front().done.get())) {
      for (auto idx : behind_.front().pages) {
        PageEntry& p = table_[idx];
        const auto w = p.end_writing_behind();
        if (word::state(w) != PageState::device || word::pending(w) || p.host_slot == kNoSlot) continue;
        if (word::host_copy(w)) {
          host_copies_->keep(p);
        } else {
          host_->release(std::exchange(p.host_slot, kNoSlot));
        }
      }
      behind_.pop_front();
      retired = true;
    }
  };
  retire_behind();
  // Write-backs page by page, in order (those on the copy stream complete in the order recorded; a
  // dropped page's use or page-in may complete later than the next page's write-back, which then waits).
  while (!evictions_.empty()) {
    EvictionBatch& b = evictions_.front();
    std::size_t done = b.retired;
    while (done < b.pages.size() && (!b.done[done] || events_.is_done(b.done[done].get()))) ++done;
    for (; b.retired < done; ++b.retired) {
      if (b.pages[b.retired] == kNoPage) continue;  // taken back by a pin and resident again (left_in_flight)
      PageEntry& v = table_[b.pages[b.retired]];
      // Its eviction followed its write-behind copy (evict), whose batch is done too, then, although it
      // may not have been when queried above: retired first, it publishes no page off the device still
      // marked as written behind.
      if (word::writing_behind(v.word.load(std::memory_order_acquire))) retire_behind();
      retired = true;
      (void)v.clear_host_copy();  // off the device: its slot is the data
      if (word::discarded(v.word.load(std::memory_order_acquire))) {
        // Dropped with its contents: no tier holds data. A host slot kept from a failed eviction is
        // free now (the write-backs queued into it ran before this event).
        if (v.host_slot != kNoSlot) host_->release(std::exchange(v.host_slot, kNoSlot));
        v.clear_discarded();
        v.set_state(PageState::fresh);
      } else if (v.spill != Spill::none) {
        v.spill = Spill::arrived;  // a spill writes it to NVMe, or a pin loads it back: that one publishes it
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

std::vector<PageEntry*> PagerImpl::in_flight_write_backs(PageEntry* pages, std::uint32_t count,
                                                         std::vector<EventRef>& arrivals) {
  std::vector<PageEntry*> found;
  arrivals.clear();
  for (std::uint32_t i = 0; i < count; ++i) {
    PageEntry& p = pages[i];
    const auto w = p.word.load(std::memory_order_acquire);
    if (word::state(w) != PageState::transit || p.spill != Spill::none || p.host_slot == kNoSlot ||
        word::discarded(w) || word::writing_behind(w) || p.owner->host_only)
      continue;
    // Its write-back, if an eviction batch not yet retired holds the page (a page in transit for
    // another reason, a load or a spill, is in none).
    const InFlight entry = in_flight_entry(table_.index_of(p));
    if (entry.page == nullptr) continue;
    // Its address is remapped to the frame it comes back to, and cuMemUnmap is not stream-ordered: only
    // once every use of its tensor queued on a stream has completed (the write-back reads the frame
    // through the frame's own address, which stays mapped).
    {
      std::lock_guard ul(p.owner->uses_mu);
      prune_uses(*p.owner, false);
      if (!p.owner->uses.empty()) continue;
    }
    found.push_back(&p);
    arrivals.push_back(*entry.done);  // null for a page dropped with nothing pending: its slot holds its data
  }
  return found;
}

PagerImpl::InFlight PagerImpl::in_flight_entry(std::uint32_t page) noexcept {
  for (auto b = evictions_.rbegin(); b != evictions_.rend(); ++b) {
    for (std::size_t k = b->retired; k < b->pages.size(); ++k) {
      if (b->pages[k] == page) return {&b->pages[k], &b->done[k]};
    }
  }
  return {};
}

void PagerImpl::give_back_in_flight(PageEntry& p) noexcept {
  if (std::exchange(p.spill, Spill::none) == Spill::arrived) {
    // reap() retired its write-back meanwhile (clearing its host-copy bit) and left the page to the pin:
    // on the host now.
    p.set_state(PageState::host);
    note_host(p);
  }
  // Otherwise it is in transit as before, and reap() publishes it when its write-back completes.
}

void PagerImpl::left_in_flight(PageEntry& p) noexcept {
  if (std::exchange(p.spill, Spill::none) == Spill::arrived) return;  // its batch entry is retired
  // The write-back still orders the batch; the page is no longer its.
  if (const InFlight entry = in_flight_entry(table_.index_of(p)); entry.page != nullptr) *entry.page = kNoPage;
}

// One cuMemUnmap per run of adjacent addresses (it takes several whole mappings at once: cuda.h,
// cuMemUnmap, "The range must be the entire contiguous address range that was mapped to"; see
// docs/cuda-emulator.md): fewer driver calls, though the driver's time still grows with the number of
// mappings a range covers.
std::size_t PagerImpl::unmap_range(std::uint32_t first, std::uint32_t count) noexcept {
  std::size_t failed = 0;
  const std::uint32_t end = first + count;
  for (std::uint32_t i = first; i < end;) {
    if (table_[i].mapped == kNoFrame) {
      ++i;
      continue;
    }
    std::uint32_t j = i + 1;
    while (j < end && table_[j].mapped != kNoFrame) ++j;
    if (xfer_->try_unmap(va_.addr(i), j - i)) {
      for (std::uint32_t k = i; k < j; ++k) {
        table_[k].mapped = kNoFrame;
        table_[k].mapped_early = false;
      }
    } else {
      // A run that fails as a whole is retried page by page, so only the pages that fail stay mapped.
      for (std::uint32_t k = i; k < j; ++k) {
        if (j - i > 1 && xfer_->try_unmap(va_.addr(k))) {
          table_[k].mapped = kNoFrame;
          table_[k].mapped_early = false;
        } else {
          ++failed;
        }
      }
    }
    i = j;
  }
  return failed;
}

bool PagerImpl::wait_progress(Lock& lk, Clock::time_point deadline) {
  if (reap(lk)) return true;  // that was the progress: the caller re-checks its condition
  // Transfers in flight make progress by themselves: wait for the oldest, then retire it.
  EventRef oldest;
  if (!evictions_.empty()) {
    oldest = evictions_.front().done[evictions_.front().retired];
  } else if (!loads_.empty()) {
    oldest = loads_.front().done;
  } else if (!behind_.empty()) {
    oldest = behind_.front().done;
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
  if (!reads_ahead_.empty() && finish_reads(lk, true)) return true;  // pages in transit until published
  return wait_for_change(lk, deadline);
}

}  // namespace tvmm::vmm
