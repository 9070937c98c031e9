// PagerImpl, part 4: eviction: choosing victims and queueing their write-backs (retire.cpp retires them),
// and write-behind: copying written pages to the host ahead of their eviction.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "common/reserve_room.hpp"
#include "common/scope_guard.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

std::vector<PageEntry*> PagerImpl::select_victims(std::size_t count, const Protect* protect,
                                                  std::span<PageEntry* const> loading) {
  std::vector<PageEntry*> victims;
  victims.reserve(count);  // claim() pushes after its CAS: a failed allocation then would strand the page in transit
  std::uint32_t slots = host_->free_count();
  std::optional<std::size_t> lendable;  // slots of running page-ins that evict() may borrow (counted once)
  auto claim = [&](PageEntry& p) {
    if (protect != nullptr && (*protect)(p)) return false;
    // A page with a current NVMe copy, or discarded, is dropped, not written back: it needs no host
    // slot (nor does one keeping a host copy, or a slot from a failed eviction). The claim compares the
    // whole word, so `needs_slot` holds for the word the claim succeeds on. With no slot free, the
    // oldest kept host copy gives its slot up (that page is resident: it loses only its free eviction),
    // and failing that, the slot a running page-in reads from is lent (evict: borrow_slot).
    bool needs_slot = false;
    // A page whose own slot was counted as lendable: claiming it takes that slot off the count, and
    // once every counted slot is promised to a write-back, it stays (evict borrows exactly the count).
    const bool counted = lendable && lends_slot(p);
    const bool claimed = p.try_claim_for_eviction([&](std::uint64_t w) {
      if (counted && *lendable == 0) return false;
      needs_slot = p.host_slot == kNoSlot && !p.droppable(w);
      if (needs_slot && slots == 0) {
        if (host_copies_->take_back_one()) {
          ++slots;
          return true;
        }
        if (!lendable) lendable = lendable_slots();
        if (*lendable == 0) return false;
        --*lendable;
        ++slots;  // evict() finds the tier empty and borrows it
      }
      return true;
    });
    if (!claimed) return false;
    if (counted) --*lendable;
    if (needs_slot) --slots;
    victims.push_back(&p);
    return true;
  };
  // Where mapping calls are costly, the pages holding the frames that pages being loaded are still
  // mapped to (PageEntry::mapped): evicting one of those saves the incoming page its unmap, map and
  // access grant. (Where they are not, the order below is kept: it frees the frames of the pages
  // discarded first, whose last uses are the likeliest to have completed.)
  std::vector<std::uint32_t> holders;
  if (remaps_costly()) {
    for (const PageEntry* p : loading) {
      // (kNoFrame and kUnknownMapping are past the end of frame_page_.)
      if (p->mapped < frame_page_.size() && frame_page_[p->mapped] != kNoPage)
        holders.push_back(frame_page_[p->mapped]);
    }
  }
  std::sort(holders.begin(), holders.end());
  holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
  auto discarded = [&](const PageEntry& p) { return word::discarded(p.word.load(std::memory_order_acquire)); };
  // Discarded pages first, whatever the policy: dropping them moves nothing. Among them, the holders
  // first: which discarded page goes changes no byte moved, but a held frame handed to its incoming
  // page saves that page a remap (on MobileNetV2 at 2x, 300 of 693 remaps were of pages whose old
  // frame a discarded page held; docs/benchmarks.md, "VMM call costs"). Not a holder that the work
  // queued last released, though: its frame waits for that work, and the queue's order, oldest
  // discard first, frees frames whose last uses are likelier to have completed (without this
  // exception, the wide-FC CNN's steps were 5% longer).
  const std::uint64_t latest = latest_release_.load(std::memory_order_relaxed);
  for (std::size_t k = 0; k < holders.size() && victims.size() < count; ++k) {
    PageEntry& p = table_[holders[k]];
    if (discarded(p) && !(latest != 0 && p.owner->released_at.load(std::memory_order_relaxed) == latest) && claim(p))
      policy_->remove(holders[k]);
  }
  // The queue is lazy: a page written, evicted or freed since has lost its mark and is skipped; one
  // pinned for reading now is left to the policy (it keeps its mark, so it is still dropped when
  // chosen); a holder claimed above is in transit now and is skipped too. One the caller protects (a
  // prefetch's: needed before its target) stays in line, in order, for the next eviction: taken off,
  // it would be left to the policy, which ranks it by its tensor's next use, and live pages would be
  // written back while it holds its frame (with trace prefetch 4 pins ahead, UNet at 2x took 15.5 ms
  // per step instead of 11.4; docs/benchmarks.md, "Discarded pages stay first in line").
  std::size_t kept = 0, seen = 0;
  for (; seen < discarded_.size() && victims.size() < count; ++seen) {
    PageEntry& p = table_[discarded_[seen]];
    if (!discarded(p)) continue;
    if (protect != nullptr && (*protect)(p)) {
      discarded_[kept++] = discarded_[seen];
      continue;
    }
    if (claim(p)) policy_->remove(table_.index_of(p));
  }
  discarded_.erase(discarded_.begin() + static_cast<std::ptrdiff_t>(kept),
                   discarded_.begin() + static_cast<std::ptrdiff_t>(seen));
  if (victims.size() < count) {
    // The policy prefers the holders too: evicting one saves the incoming page its remap, for at most
    // one extra page-in of its own later (Belady's exchange argument). Here a holder that the work
    // queued last used is not left out (unlike a discarded one above, the alternative is the policy's
    // own choice, not an equally free drop), although its write-back will wait for that work:
    // measured on the six traces, leaving it out made LRU's steps 1.30x those with free calls instead
    // of 1.09x, and did not change Belady's (docs/benchmarks.md, "VMM call costs").
    try {
      policy_->select(
          count - victims.size(), [&](policies::PageIndex i) { return claim(table_[i]); }, holders);
    } catch (...) {
      // The policies rank their candidates in memory they allocate (std::bad_alloc): the victims
      // claimed above go back, resident.
      unclaim(victims);
      cv_.notify_all();
      throw;
    }
  }
  return victims;
}

void PagerImpl::unclaim(std::span<PageEntry* const> victims) noexcept {
  for (PageEntry* v : victims) {
    policy_->restore(table_.index_of(*v));
    v->set_state(PageState::device, v->ready != nullptr);
  }
}

// Starts evicting `victims` (claimed: in transit, unpinned, out of the policy) to the host tier (or,
// for a page whose NVMe copy is current or whose contents were discarded, to nothing: it is dropped
// without a copy) and appends their frames to `got` at once, without waiting, each with the event of
// its own write-back (or, for a page dropped with one thing pending, that thing's event): every use of
// a frame must be ordered after that event. The victims stay in transit until reap() sees their events
// complete; their addresses stay mapped to the frames (PageEntry::mapped) until they are loaded into
// other frames or freed.
//
// The write-backs are pipelined. Each waits only for its own victim's last uses and page-in (and, the
// copy stream being in order, for the write-backs queued before it), and a page-in into its frame waits
// only for it. Victims that are already free of pending work go first, so that one whose last kernel
// is still queued on a stream does not hold up the write-backs behind it.
void PagerImpl::evict(std::vector<PageEntry*>& victims, Frames& got) {
  // The victims are claimed (in transit): until their frames are handed over, any failure, a failed
  // allocation included, must give them back resident, or they would stay in transit for good. So
  // everything that allocates is done in a try below, or before any state changes here.
  auto restore_all = [&]() noexcept {
    unclaim(victims);
    cv_.notify_all();
  };
  // Slots lent by running page-ins (borrow_slot): each victim's write-back waits for its lender's page-in.
  std::vector<Loan> lent;
  std::vector<PageEntry*> given;  // victims given a free slot of the tier here
  // Step 2 below must not fail: the room for the frames in `got` is reserved here.
  try {
    lent.reserve(victims.size());  // borrow_slot changes the lender: nothing may throw after it
    given.reserve(victims.size());
    got.reserve_more(victims.size());
  } catch (...) {
    restore_all();
    throw;
  }
  const std::size_t claimed = victims.size();
  auto needs_slot = [](const PageEntry& v) {
    return v.host_slot == kNoSlot && !v.droppable(v.word.load(std::memory_order_acquire));
  };
  std::size_t needing = static_cast<std::size_t>(
      std::count_if(victims.begin(), victims.end(), [&](const PageEntry* v) { return needs_slot(*v); }));
  std::erase_if(victims, [&](PageEntry* v) {
    if (!needs_slot(*v)) {
      // A page whose NVMe copy is current needs no write-back and is dropped, unless the host tier has
      // room to spare: then it is copied there, keeping its NVMe slot as the clean copy, so that its
      // next page-in comes over the bus rather than from the drive, and a spill later lets the slot go
      // without writing (a weight streamed by `infer` at 2x: 12.16 -> 10.15 ms per step; see
      // kCleanVictimSpareSlots for what must stay free).
      const auto w = v->word.load(std::memory_order_acquire);
      if (v->host_slot == kNoSlot && v->clean_on_nvme(w) && !word::discarded(w) && !word::host_copy(w) &&
          host_->free_count() > needing + kCleanVictimSpareSlots) {
        if (auto s = host_->try_acquire()) {
          v->host_slot = *s;
          given.push_back(v);
        }
      }
      return false;
    }
    --needing;
    // select_victims counted (or freed) the slots, lendable ones included.
    if (auto s = host_->try_acquire()) {
      v->host_slot = *s;
      given.push_back(v);
      return false;
    }
    if (auto loan = borrow_slot(*v)) {
      lent.push_back(std::move(*loan));
      return false;
    }
    // Not expected (select_victims counts exactly what can be borrowed). Should a slot be missing, the
    // victim stays resident, as when an eviction fails, and the caller finds fewer frames (none: it
    // waits for a transfer, acquire_frames).
    unclaim({&v, 1});
    return true;
  });
  if (victims.size() != claimed) cv_.notify_all();
  if (victims.empty()) return;
  std::size_t dropped = 0;
  // What each victim's write-back must follow, still pending: its page-in and its tensor's stream
  // release points (claimed victims gain no new uses). Victims with nothing pending go first.
  std::vector<std::pair<PageEntry*, std::vector<Event*>>> queue;
  // References to the release points' events named in `queue`: a concurrent release of another span
  // of a victim's tensor may replace its use (and drop the event) once uses_mu is let go.
  std::vector<EventRef> uses_held;
  std::vector<EventRef> per_page;
  std::size_t copying = 0;  // the victims queue[0, copying) are past their copy call: theirs may be queued
  try {
    queue.reserve(victims.size());
    for (PageEntry* v : victims) {
      std::vector<Event*> after;
      // Its page-in, unless known complete: not queried, since nearly every one still runs (99% on the
      // replays) and the copy stream's wait costs the host about what a query does. Nor is the page-in
      // reading the slot lent to it: borrow_slot lends only slots of page-ins not yet reaped.
      if (v->ready != nullptr && !v->ready->known_done()) after.push_back(v->ready);
      for (const Loan& loan : lent) {
        if (loan.victim == v && !loan.page_in.get()->known_done()) after.push_back(loan.page_in.get());
      }
      const auto vw = v->word.load(std::memory_order_acquire);
      // A write-behind copy still reading the frame: its own batch's event (a later one may wait for
      // kernels queued since, which the frame's next user need not). Even when that event is done for
      // this thread: the victim's own event must follow it, so that whichever thread finds the eviction
      // done (its host time may lag this one's on the simulator) finds the batch done too, and reap()
      // retires the batch (clearing kWritingBehind) before it publishes the victim off the device.
      if (word::writing_behind(vw)) {
        if (Event* e = behind_event_of(table_.index_of(*v)); e != nullptr) after.push_back(e);
      }
      if (!word::discarded(vw)) {
        write_behind_.evicted(v->owner->id, v->droppable(vw));
        v->left_live = true;
      }
      std::lock_guard ul(v->owner->uses_mu);
      prune_uses(*v->owner, true);
      for (auto& u : v->owner->uses) {  // each has its event after prune_uses(.., true)
        if (!u.point.done) continue;
        after.push_back(u.point.done.get());
        uses_held.push_back(u.point.done);
      }
      queue.emplace_back(v, std::move(after));
    }
    std::stable_partition(queue.begin(), queue.end(), [](const auto& q) { return q.second.empty(); });
    for (std::size_t i = 0; i < queue.size(); ++i) victims[i] = queue[i].first;
    // 1. Per victim, in order: make the copy stream wait for what is still pending of its uses (the host
    //    does not wait for those), queue its write-back, and record an event after it. A page dropped
    //    without a copy gets an event too, its frame's next users must follow its last uses: the one
    //    thing pending itself, or one recorded after several.
    std::vector<Event*> ordered;  // what the copy stream already waits for
    per_page.reserve(victims.size());
    for (std::size_t i = 0; i < queue.size(); ++i) {
      auto& [v, after] = queue[i];
      const auto vw = v->word.load(std::memory_order_acquire);
      // No copy for a page whose contents are dead or whose host slot already holds them.
      const bool copy = v->host_slot != kNoSlot && !word::discarded(vw) && !word::host_copy(vw);
      // A page dropped with one thing pending (its last use, or its page-in) hands its frame over
      // behind that event itself: no driver call, and the frame's next user does not wait for the
      // write-backs queued before (as an event recorded on the copy stream would make it). Not when
      // its host slot may still receive an earlier write-back (kept from a failed eviction: the slot
      // is freed when this event completes, so it must follow that copy) or a write-behind copy still
      // reads the frame (reap() must find that batch done first: see above).
      if (!copy && after.size() == 1 && (v->host_slot == kNoSlot || word::host_copy(vw)) && !word::writing_behind(vw)) {
        ++dropped;
        per_page.emplace_back(after.front());
        continue;
      }
      for (Event* e : after) {
        if (std::find(ordered.begin(), ordered.end(), e) != ordered.end()) continue;
        xfer_->order_copy_out_after(e);
        ordered.push_back(e);
      }
      if (copy) {
        copying = i + 1;  // the copy stream waits for `after` already
        xfer_->copy_out(host_->ptr(v->host_slot), frame_addr(v->frame), used_bytes(*v));
      } else {
        ++dropped;
      }
      // A page dropped with nothing pending hands its frame over at once (a null event): an event on
      // the copy stream would make the frame's next user wait for every write-back queued before it.
      per_page.push_back(copy || !after.empty() ? xfer_->record_out() : EventRef());
    }
    // The batch reap() retires, queued before the frames are handed over (step 2 cannot fail).
    EvictionBatch batch{{}, per_page};
    batch.pages.reserve(victims.size());
    for (PageEntry* v : victims) batch.pages.push_back(table_.index_of(*v));
    evictions_.push_back(std::move(batch));
  } catch (...) {
    // The victims stay resident with their data.
    restore_all();
    // A write-back queued into a slot may still run, and a slot that goes back to the tier is soon
    // written by copies that are not ordered after it: a write-behind copy on its own stream, an NVMe
    // read on the host (with a write-back still landing there afterwards, the page those bytes belong
    // to would be read back with a victim's bytes). So wait for the copy streams, as a page-in that
    // fails does (abort_chunk), and then the slots given or lent here go back, as before the eviction.
    const bool drained = copying == 0 || xfer_->drain();
    if (drained) {
      for (PageEntry* v : given) host_->release(std::exchange(v->host_slot, kNoSlot));
    }
    // Where the device cannot say when its copies end, each victim keeps its slot, so no other page
    // takes it while a write-back into it may run; the page's next eviction reuses it, after that copy.
    // A lent slot goes back to its lender, whose page-in may still read it (the victim's next
    // write-back would know nothing of that page-in), unless, undrained, its write-back may be queued:
    // the copy stream already waits for the page-in then, and so does any later write-back on it. The
    // lender, pending under mu_ all along, releases the slot when its page-in is retired.
    for (const Loan& loan : lent) {
      const auto at = std::find_if(queue.begin(), queue.end(), [&](const auto& q) { return q.first == loan.victim; });
      if (!drained && at - queue.begin() < static_cast<std::ptrdiff_t>(copying)) continue;
      loan.lender->host_slot = std::exchange(loan.victim->host_slot, kNoSlot);
    }
    throw;
  }
  // 2. Hand the frames over now (into the room reserved above); the victims stay in transit until
  //    reap() retires them.
  for (std::size_t i = 0; i < victims.size(); ++i) {
    PageEntry* v = victims[i];
    frame_page_[v->frame] = kNoPage;
    got.add(v->frame, per_page[i]);
    v->frame = kNoFrame;  // its address stays mapped to the frame (PageEntry::mapped)
    if (v->ready != nullptr) EventRef::drop(std::exchange(v->ready, nullptr));
  }
  observe_.evicted(evictions_.back().pages);
  observe_.counters.evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  observe_.counters.clean_evictions.fetch_add(dropped, std::memory_order_relaxed);
}

// A running page-in's source slot can be lent to a write-back once the page-in has read it: the slot
// would return to the tier when reap() retires the page-in anyway, unless a quarter of the tier has
// come free by then (HostCopies::keep_or_release keeps copies only in the spare room). The page loses
// only its host copy.
std::size_t PagerImpl::lendable_slots() const noexcept {
  std::size_t n = 0;
  for (const LoadBatch& b : loads_) {
    for (const auto idx : b.pages) n += table_[idx].ready == b.done.get() && lends_slot(table_[idx]) ? 1 : 0;
  }
  return n;
}

bool PagerImpl::lends_slot(const PageEntry& p) noexcept {
  const auto w = p.word.load(std::memory_order_acquire);
  // Resident with its page-in running (only publish_chunk sets `ready`, with a batch in loads_ whose
  // event it is), reading from its slot, and no write-behind copy refreshing the slot (whose
  // retirement decides the slot's fate).
  return p.ready != nullptr && word::state(w) == PageState::device && word::pending(w) && !word::writing_behind(w) &&
         p.host_slot != kNoSlot;
}

std::optional<PagerImpl::Loan> PagerImpl::borrow_slot(PageEntry& victim) noexcept {
  // The oldest page-in first: it completes soonest, so its borrower's write-back waits least.
  for (LoadBatch& b : loads_) {
    for (const auto idx : b.pages) {
      PageEntry& p = table_[idx];
      if (p.ready != b.done.get() || !lends_slot(p)) continue;
      (void)p.clear_host_copy();  // the slot will hold another page's bytes
      victim.host_slot = std::exchange(p.host_slot, kNoSlot);
      return Loan{&p, b.done, &victim};
    }
  }
  return std::nullopt;
}

// --- write-behind ----------------------------------------------------------------------------------------

Event* PagerImpl::behind_event_of(std::uint32_t page) const noexcept {
  for (auto b = behind_.rbegin(); b != behind_.rend(); ++b) {
    if (std::find(b->pages.begin(), b->pages.end(), page) != b->pages.end()) return b->done.get();
  }
  return nullptr;
}

void PagerImpl::write_behind(const Allocation* a, Access access) noexcept {
  if (!cfg_.write_behind) return;
  const bool writes = access != Access::read && a->arena == nullptr;
  if (!writes && !behind_waiting_.load(std::memory_order_relaxed)) return;
  if (!prefetch_.replaying()) return;
  try {
    Lock lk(mu_);
    copy_behind();
    if (writes) {
      // This write supersedes an earlier one still waiting to be copied: only this one's fate counts.
      std::erase(behind_todo_, a->id);
      if (write_behind_.on_write(a->id, prefetch_.trace().position())) behind_todo_.push_back(a->id);
    }
    behind_waiting_.store(!behind_todo_.empty(), std::memory_order_relaxed);
  } catch (const std::exception& ex) {
    // A hint: without the copy, the page is written back when it is evicted, as without write-behind.
    std::fprintf(stderr, "tvmm: write-behind failed: %s\n", ex.what());
  }
}

// The copies go on a stream of their own, each after the work queued on the tensor's release points
// (the kernel that wrote it) and after its page-ins still running; a page keeps its frame and stays
// pinnable throughout. kHostCopy is set at once, so that a write pin takes the slow path, which marks
// the copy stale; kWritingBehind keeps the slot with the page until the copy is retired (reap), and an
// eviction meanwhile orders its frame's next user after the copy (evict).
void PagerImpl::copy_behind() {
  std::vector<PageEntry*> claimed;     // pages whose copy is being queued
  std::vector<std::uint8_t> own_slot;  // per claimed page: it got a new slot (else it refreshes its own)
  std::vector<std::uint32_t> indices;
  // A host tier that filled up lately would take the copies back before their pages' evictions
  // (WriteBehind::host_tier_filled): the writes go uncopied, to be written back when evicted.
  bool room = !write_behind_.host_tier_filled(host_->fills());
  try {
    for (std::size_t k = 0; k < behind_todo_.size() && room;) {
      // Only onto a device-to-host bus that would idle: a copy queued while write-backs keep it busy
      // delays the ones queued after it, which pins wait for (their frames). The writes wait in
      // behind_todo_ for a later pin; a backend that cannot tell (nullopt) is not held back.
      if (const auto backlog = dev_->d2h_backlog(); backlog && backlog->count() > 0) break;
      const auto it = by_id_.find(behind_todo_[k]);
      if (it == by_id_.end()) {  // freed meanwhile
        behind_todo_.erase(behind_todo_.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      Allocation* t = it->second;
      PageEntry* pages = pages_of(t);
      bool pinned = false;
      for (std::uint32_t i = 0; i < t->pages && !pinned; ++i) pinned = word::pins(pages[i].word.load()) != 0;
      if (pinned) {  // its kernel is not queued yet, or another pin uses it: later
        ++k;
        continue;
      }
      // Room for every page of the tensor first: a page claimed below must reach all three lists (the
      // rollback reads own_slot for each claimed page).
      common::reserve_room(claimed, t->pages);
      common::reserve_room(own_slot, t->pages);
      common::reserve_room(indices, t->pages);
      behind_todo_.erase(behind_todo_.begin() + static_cast<std::ptrdiff_t>(k));
      const std::size_t first = claimed.size();
      for (std::uint32_t i = 0; i < t->pages; ++i) {
        PageEntry& p = pages[i];
        const auto w = p.word.load(std::memory_order_acquire);
        if (!p.left_live || word::state(w) != PageState::device || word::discarded(w) || word::host_copy(w) ||
            word::writing_behind(w) || p.clean_on_nvme(w))
          continue;
        // A slot the page holds already is the source of its page-in, still running, whose copy a write
        // made stale: the copy refreshes it, after that page-in. Any other slot is left alone (a failed
        // eviction's: a write-back into it may still be queued).
        const bool reuse = p.host_slot != kNoSlot;
        if (reuse && !word::pending(w)) continue;
        std::optional<std::uint32_t> slot;
        if (!reuse) {
          // As for kept copies (HostCopies::keep_or_release), a quarter of the host tier stays free for
          // the write-backs of evictions: a copy taken back for one of them saved nothing.
          if (host_->free_count() <= host_->budget() / 4 || !(slot = host_->try_acquire())) {
            room = false;
            break;
          }
        }
        if (!p.start_writing_behind(w)) {  // a pin came meanwhile
          if (slot) host_->release(*slot);
          continue;
        }
        if (slot) p.host_slot = *slot;
        p.left_live = false;  // set again if this page leaves once more: then it is copied next time too
        claimed.push_back(&p);
        own_slot.push_back(slot ? 1 : 0);
      }
      if (claimed.size() == first) continue;
      {
        std::lock_guard ul(t->uses_mu);
        prune_uses(*t, true);
        for (auto& u : t->uses) {
          if (u.point.done) xfer_->order_behind_after(u.point.done.get());
        }
      }
      for (std::size_t c = first; c < claimed.size(); ++c) {
        PageEntry& p = *claimed[c];
        if (p.ready != nullptr && !events_.is_done(p.ready)) xfer_->order_behind_after(p.ready);
        xfer_->copy_behind(host_->ptr(p.host_slot), frame_addr(p.frame), used_bytes(p));
        indices.push_back(table_.index_of(p));
      }
      write_behind_.copied(t->id);
    }
    if (!room) behind_todo_.clear();  // the host tier is short of slots now: copy none of the others
    if (claimed.empty()) return;
    behind_.push_back(LoadBatch{xfer_->record_behind(), std::move(indices)});
  } catch (...) {
    // No event says when the queued copies end: wait for every copy stream, then give the claims back.
    // Where the device cannot say (lost), the slots stay with their pages, out of use.
    const bool drained = xfer_->drain();
    for (std::size_t c = 0; c < claimed.size(); ++c) {
      PageEntry& p = *claimed[c];
      (void)p.clear_host_copy();
      (void)p.end_writing_behind();
      p.left_live = true;  // not copied: still one to copy
      if (drained && own_slot[c] != 0) host_->release(std::exchange(p.host_slot, kNoSlot));
    }
    throw;
  }
  observe_.counters.written_behind.fetch_add(claimed.size(), std::memory_order_relaxed);
}

}  // namespace tvmm::vmm
