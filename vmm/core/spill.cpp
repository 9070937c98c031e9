// PagerImpl, part 6: the NVMe tier. Host pages, and pages on their way from the device, spill to NVMe when
// the host tier is full; NVMe pages are read back through host slots and paged in. The I/O runs without
// mu_, on pages claimed (in transit), so other threads keep pinning. Both directions are pipelined page
// by page: a page's NVMe write starts as soon as its own device-to-host copy is done, and a page's copy
// to the device is queued as soon as its own read is verified.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>

#include "common/scope_guard.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

namespace {

bool is_host(const PageEntry& p) { return p.state() == PageState::host; }
bool keeps_slot(const PageEntry& p) {
  const auto s = p.state();
  return p.nvme_slot != kNoSlot && (s == PageState::device || s == PageState::host);
}

std::string page_label(const PageEntry& p, std::uint32_t page_in_tensor, std::size_t page_size) {
  return "page " + std::to_string(page_in_tensor) + " (offset " +
         format_bytes(std::size_t{page_in_tensor} * page_size) + ") of " + tensor_label(p.owner);
}

}  // namespace

void PagerImpl::note_host(const PageEntry& p) noexcept {
  if (!nvme_ || p.owner->host_only) return;
  try {
    host_fifo_.push_back(table_.index_of(p));
    compact_lazy(host_fifo_, host_->budget(), table_, is_host);
  } catch (const std::bad_alloc&) {
    // Without the entry the page is not spilled before it is next loaded; nothing is lost.
  }
}

void PagerImpl::note_slot_kept(const PageEntry& p) noexcept {
  try {
    slot_keepers_.push_back(table_.index_of(p));
    compact_lazy(slot_keepers_, nvme_->budget(), table_, keeps_slot);
  } catch (const std::bad_alloc&) {
    // The slot stays with the page until the page is freed or written again.
  }
}

std::optional<std::uint32_t> PagerImpl::acquire_nvme_slot() noexcept {
  if (auto s = nvme_->try_acquire()) return s;
  // Take back a slot kept as a copy by a page that lives on the device or the host (not one in transit:
  // its slot may be under I/O, or be about to hold its only data).
  while (!slot_keepers_.empty()) {
    PageEntry& p = table_[slot_keepers_.front()];
    slot_keepers_.pop_front();
    if (!keeps_slot(p)) continue;
    return std::exchange(p.nvme_slot, kNoSlot);
  }
  return std::nullopt;
}

void PagerImpl::run_nvme(Lock& lk, std::span<NvmeTier::Io> ios, const NvmeTier::Hooks& hooks, const char* what,
                         std::size_t frames_held) {
  frames_in_hand_ += static_cast<std::uint32_t>(frames_held);
  lk.unlock();
  common::ScopeGuard relock([&] {  // also when the batch throws: the caller's rollback runs under the lock
    lk.lock();
    frames_in_hand_ -= static_cast<std::uint32_t>(frames_held);
  });
  const auto start = observe_.now();
  if (!dev_->models_storage()) {
    nvme_->run(ios, hooks);
  } else {
    // A modelled drive (the simulator's model clock): each I/O ends on that clock when the drive has
    // served it, and what the hooks queue after it (a page's copy to the device) starts no earlier.
    // Allocated before anything is submitted, like NvmeTier::run's own room (a throw here is its throw).
    using TimePoint = std::chrono::steady_clock::time_point;
    std::vector<TimePoint> submitted(ios.size(), TimePoint::min());
    auto ready = [&](std::size_t i, bool block) noexcept {
      const bool go = hooks.ready(i, block);
      if (go) submitted[i] = dev_->timeline_clock();
      return go;
    };
    auto ended = [&](std::size_t i) noexcept {
      if (submitted[i] != TimePoint::min()) {
        dev_->storage_io_ended(ios[i].op == storage::IoOp::write, nvme_->bytes_of(ios[i]), submitted[i]);
      }
      hooks.done(i);
    };
    nvme_->run(ios, NvmeTier::Hooks{ready, ended});
  }
  observe_.nvme_batch(what, start, ios.size());
}

std::size_t PagerImpl::spill(Lock& lk, std::size_t want) {
  if (!nvme_) return 0;
  reap(lk);
  std::size_t freed = 0;
  std::vector<PageEntry*> writes;
  std::vector<EventRef> arrives;  // per write: the page's write-back from the device (null: on the host)
  auto give_slot = [&](PageEntry& p) {
    if (p.nvme_slot != kNoSlot) return true;
    auto slot = acquire_nvme_slot();
    if (!slot) return false;
    p.nvme_slot = *slot;
    p.mark_dirty();  // a new slot holds nothing of this page
    return true;
  };
  // Which pages go: those needed last. With a trace (replaying), by next use; without, newest first.
  // A training or inference loop uses its pages again in the order it used them, so the page that
  // left the device last is the one it needs last, and the oldest host page the one it needs next:
  // spilling oldest first (FIFO) spilled exactly that page whenever device and host together hold
  // less than the loop, and every page then came back from disk (GPT-2 at 1.5x with lru: 66 MiB read
  // from NVMe per step, 6 MiB newest first).
  // Candidates: pages still on their way from the device (each is written as soon as its own
  // write-back completes, so a tensor's device-to-host copies overlap its NVMe writes), then host pages.
  struct Candidate {
    PageEntry* page;
    const EventRef* arrives;  // its write-back from the device; null: on the host
    // Write-backs complete in the order queued (a page dropped behind its last kernel may complete
    // later than the next): this one's place (0: on the host).
    std::size_t arrival;
    double key = 0;  // with a trace: pins until its next use over its weight on the drive (highest spills first)
  };
  const bool by_next_use = prefetch_.replaying();
  std::vector<Candidate> order;
  auto on_the_way = [&](const PageEntry& p) {
    // Pages dropped without a copy have no host slot; a clean copy is let go once it has arrived.
    return p.host_slot != kNoSlot && p.spill == Spill::none && !p.owner->host_only &&
           !p.droppable(p.word.load(std::memory_order_acquire));
  };
  auto on_host = [](const PageEntry& p) { return p.state() == PageState::host && !p.owner->host_only; };
  std::size_t queued = 0;  // write-backs still on their way
  for (const auto& b : evictions_) queued += b.pages.size() - b.retired;
  for (auto b = evictions_.rbegin(); b != evictions_.rend(); ++b) {
    for (std::size_t k = b->pages.size(); k-- > b->retired; --queued) {
      if (b->pages[k] == kNoPage) continue;  // taken back by a pin (left_in_flight)
      PageEntry& p = table_[b->pages[k]];
      if (on_the_way(p)) order.push_back({&p, &b->done[k], queued});
    }
  }
  while (!host_fifo_.empty() && !on_host(table_[host_fifo_.back()])) host_fifo_.pop_back();  // stale
  for (auto it = host_fifo_.rbegin(); it != host_fifo_.rend() && (by_next_use || order.size() < 2 * want); ++it) {
    if (on_host(table_[*it])) order.push_back({&table_[*it], nullptr, 0});
  }
  if (by_next_use) {  // every host page is ranked: O(host pages) per spill, with a trace only
    // Weighed by the bytes the page moves to the drive and back (a tensor's partial last page moves
    // less: NvmeTier::io_bytes) plus a request's fixed cost, as eviction weighs bus copies
    // (kMoveOverheadBytes): spilling small pages needed soon can cost the drive less than spilling a
    // whole page needed later (ResNet-18 at 2x: 60 MiB read per step by next use alone, 52 weighed).
    for (Candidate& c : order) {
      const std::size_t next = prefetch_.trace().next_use(c.page->owner->id);
      const double weight = static_cast<double>(nvme_->io_bytes(used_bytes(*c.page)) + kMoveOverheadBytes);
      c.key = next == policies::AccessTrace::kNever ? 1e300 : (static_cast<double>(next) + 1) / weight;
    }
    std::stable_sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) { return a.key > b.key; });
  }
  // 1. Claim them (a host page queued twice is claimed once: the second time it is in transit), then
  //    write them in the order they can go: host pages at once, pages on their way as their
  //    write-backs complete (in the order queued), so that no write waits behind a later one.
  // Room for every candidate first: a claimed page must reach `writes` (and its Io) or it would stay
  // in transit, so nothing may allocate from the first claim on.
  std::vector<Candidate> chosen;
  std::vector<NvmeTier::Io> ios;
  const std::size_t most = std::min(order.size(), want);  // the loop below stops at `want`
  chosen.reserve(most);
  writes.reserve(most);
  arrives.reserve(most);
  ios.reserve(most);
  for (const Candidate& c : order) {
    if (freed + chosen.size() >= want) break;
    PageEntry& p = *c.page;
    if (c.arrives != nullptr ? !on_the_way(p) : !on_host(p)) continue;
    if (!give_slot(p)) break;  // no NVMe slot left: spill what was claimed so far
    if (c.arrives != nullptr) {
      p.spill = Spill::claimed;
    } else if (p.clean_on_nvme(p.word.load(std::memory_order_acquire))) {
      // A host page whose NVMe copy is current just lets its host slot go.
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      ++freed;
      continue;
    } else {
      p.set_state(PageState::transit);
    }
    chosen.push_back(c);
  }
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](const Candidate& a, const Candidate& b) { return a.arrival < b.arrival; });
  for (const Candidate& c : chosen) {
    writes.push_back(c.page);
    arrives.push_back(c.arrives != nullptr ? *c.arrives : EventRef());
  }
  if (writes.empty()) {
    if (freed != 0) cv_.notify_all();
    return freed;
  }
  // 3. Write them without the lock (checksums are taken from the host frames, which no one else
  //    touches while the pages are in transit).
  for (PageEntry* p : writes) {
    ios.push_back(
        {storage::IoOp::write, p->nvme_slot, host_->ptr(p->host_slot), 0, 0, nvme_->io_bytes(used_bytes(*p))});
  }
  auto arrived = [&](std::size_t i, bool block) noexcept {
    Event* e = arrives[i].get();
    try {
      if (e == nullptr) return true;
      if (!block) return events_.is_done(e);
      events_.wait(e);
      return true;
    } catch (const std::exception& ex) {
      if (block) std::fprintf(stderr, "tvmm: a write-back to the host failed (%s); not spilling its page\n", ex.what());
      return false;
    }
  };
  NvmeTier::Hooks hooks;
  hooks.ready = arrived;
  std::exception_ptr run_error;
  try {
    run_nvme(lk, ios, hooks, "nvme write", 0);
  } catch (...) {
    // NvmeTier::run throws (std::bad_alloc) only before it submits anything: every page stays on the
    // host, as if none had been ready, and the error is passed on once they are published there.
    run_error = std::current_exception();
    for (NvmeTier::Io& io : ios) io.error = NvmeTier::kNotReady;
  }
  reap(lk);  // retires the write-backs of the pages claimed on their way: each completed before its write
  // 4. Publish: written pages move to NVMe; a failed write leaves its page on the host, readable.
  const NvmeTier::Io* failed = nullptr;
  const PageEntry* failed_page = nullptr;
  for (std::size_t i = 0; i < writes.size(); ++i) {
    PageEntry& p = *writes[i];
    const Spill spilled = std::exchange(p.spill, Spill::none);
    if (spilled == Spill::claimed) {  // its write-back never completed: reap() publishes it later
      note_slot_kept(p);
      continue;
    }
    if (ios[i].error == 0) {
      p.checksum = ios[i].checksum;
      p.clear_dirty();
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      ++freed;
    } else {
      p.set_state(PageState::host);
      note_host(p);
      note_slot_kept(p);
      if (failed == nullptr && ios[i].error != NvmeTier::kNotReady) {
        failed = &ios[i];
        failed_page = &p;
      }
    }
  }
  cv_.notify_all();
  if (run_error) std::rethrow_exception(run_error);
  if (failed != nullptr) {
    const auto err = -failed->error;
    const std::string what =
        "tvmm: writing " +
        page_label(*failed_page, table_.index_of(*failed_page) - failed_page->owner->first_page, page_size_) +
        " to NVMe slot " + std::to_string(failed->slot) + " failed: " + storage::errno_text(err);
    std::fprintf(stderr, "%s\n", what.c_str());
    if (err == ENOSPC || err == EDQUOT) {
      throw out_of_memory(what +
                          "; the NVMe tier's filesystem is full (the page stays on the host tier). Free "
                          "space in nvme.paths or lower nvme.budget");
    }
    throw io_error(what + "; the page stays on the host tier, readable", err);
  }
  return freed;
}

std::vector<std::uint32_t> PagerImpl::acquire_host_slots(Lock& lk, std::size_t want, Clock::time_point deadline) {
  std::vector<std::uint32_t> slots;
  slots.reserve(want);  // a slot taken must land here: no allocation after acquire_slot
  for (;;) {
    while (slots.size() < want) {
      auto s = host_copies_->acquire_slot();  // a kept copy gives its slot up before any page is spilled
      if (!s) break;
      slots.push_back(*s);
    }
    if (!slots.empty()) return slots;
    if (spill(lk, want) > 0) continue;
    if (!wait_progress(lk, deadline)) {
      throw out_of_memory("tvmm: no host slot can be freed to stage a page from NVMe: " +
                          std::to_string(host_->budget()) + " host pages (" + format_bytes(cfg_.host_budget) +
                          ") are in use or moving and the NVMe tier (" + std::to_string(nvme_->in_use()) + " of " +
                          std::to_string(nvme_->budget()) + " slots used) takes no more; raise host or NVMe budgets");
    }
  }
}

bool PagerImpl::reading_ahead(std::uint32_t first, std::uint32_t count) const noexcept {
  return std::any_of(reads_ahead_.begin(), reads_ahead_.end(),
                     [&](const ReadAhead& r) { return r.page >= first && r.page - first < count; });
}

void PagerImpl::read_ahead() noexcept {
  if (!nvme_ || !cfg_.nvme.read_ahead || !prefetch_.replaying()) return;
  try {
    Lock lk(mu_);
    if (!reads_ahead_.empty()) finish_reads(lk, false);
    const std::size_t most = std::min<std::size_t>(kReadAheadPages, cfg_.nvme.queue_depth);
    // The common case: nothing to do.
    if (reads_ahead_.size() >= most || host_->free_count() < kReadAheadFreeSlots) return;
    reads_ahead_.reserve(most);
    std::vector<AccessTrace::Ahead> next;
    prefetch_.trace().upcoming(kReadAheadPins, next);  // the trace's lock after mu_, as prefetch_ahead
    // The first NVMe page of the next pins.
    auto first_on_nvme = [&]() -> PageEntry* {
      for (const AccessTrace::Ahead& pin : next) {
        if (pin.discard) continue;  // that pin overwrites the tensor: nothing to read
        auto it = by_id_.find(pin.tensor);
        if (it == by_id_.end() || it->second->arena != nullptr || it->second->host_only) continue;
        PageEntry* pages = pages_of(it->second) + pin.first;
        for (std::uint32_t i = 0; i < pin.pages; ++i) {
          if (pages[i].state() == PageState::nvme) return &pages[i];
        }
      }
      return nullptr;
    };
    while (reads_ahead_.size() < most) {
      // Only into a free slot, and never the last: a page read ahead must not take room that an
      // eviction's write-back would otherwise find free, nor make a spill or drop a kept host copy
      // (docs/benchmarks.md, "NVMe read-ahead": reading ahead by spilling cost a synthetic training loop
      // with a host tier of eight pages 19%).
      if (host_->free_count() < kReadAheadFreeSlots) return;
      PageEntry* p = first_on_nvme();
      if (p == nullptr) return;
      const auto slot = host_->try_acquire();
      if (!slot) return;
      p->set_state(PageState::transit);
      p->host_slot = *slot;
      const NvmeTier::Io io{
          storage::IoOp::read, p->nvme_slot, host_->ptr(*slot), p->checksum, 0, nvme_->io_bytes(used_bytes(*p))};
      const auto submitted = dev_->timeline_clock();
      if (!nvme_->submit_async(io, table_.index_of(*p))) {
        host_->release(std::exchange(p->host_slot, kNoSlot));
        p->set_state(PageState::nvme);
        cv_.notify_all();
        return;
      }
      reads_ahead_.push_back({table_.index_of(*p), dev_->storage_io_served(false, nvme_->bytes_of(io), submitted)});
    }
  } catch (const std::exception& ex) {
    // A hint, like prefetch: the pages stay where they are and their pins read them.
    std::fprintf(stderr, "tvmm: NVMe read-ahead failed: %s\n", ex.what());
  }
}

bool PagerImpl::finish_reads(Lock& lk, bool block) {
  bool any = false;
  while (!reads_ahead_.empty()) {
    const ReadAhead r = reads_ahead_.front();
    NvmeTier::Io io{};
    bool ended = false;
    // The drive serves the reads in the order submitted: the oldest ends first (on a modelled drive
    // exactly; on a real one nearly, and a later one that ended first waits for its turn here).
    if (block || dev_->models_storage()) {
      if (!block && !dev_->storage_io_done_by_now(r.end)) break;
      reads_ahead_.erase(reads_ahead_.begin());
      lk.unlock();
      ended = nvme_->wait_async(r.page, io);
      dev_->storage_io_waited(r.end);
      lk.lock();
    } else {
      if (!nvme_->poll_async(r.page, io)) break;
      reads_ahead_.erase(reads_ahead_.begin());
      ended = true;
    }
    block = false;
    any = true;
    PageEntry& p = table_[r.page];
    if (ended && io.error == 0) {
      p.set_state(PageState::host);  // its NVMe slot stays, a clean copy
      note_host(p);
      note_slot_kept(p);
      observe_.counters.read_ahead.fetch_add(1, std::memory_order_relaxed);
    } else {
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      std::fprintf(stderr, "tvmm: reading %s ahead from NVMe slot %u failed (%s); its pin reads it again\n",
                   page_label(p, r.page - p.owner->first_page, page_size_).c_str(), p.nvme_slot,
                   !ended                           ? "lost"
                   : io.error == NvmeTier::kCorrupt ? "checksum mismatch"
                                                    : storage::errno_text(-io.error).c_str());
    }
    cv_.notify_all();
  }
  return any;
}

std::size_t PagerImpl::stage_in(Lock& lk, Allocation* a, PageSpan span, Clock::time_point deadline) {
  PageEntry* pages = pages_of(a) + span.first;
  std::size_t on_nvme = 0;
  for (std::uint32_t i = 0; i < span.count; ++i) on_nvme += pages[i].state() == PageState::nvme ? 1 : 0;
  if (on_nvme == 0) return 0;
  // 1. Host slots to read a batch into (this may spill, and so unlock: pages are claimed only
  //    afterwards). Each page also needs a device frame, whose victim may need a host slot for its
  //    write-back. A pin loading alone takes one slot per page: acquire_frames finds a victim's slot
  //    itself, spilling only when no victim can go without one (a victim whose NVMe copy is current,
  //    or a discarded one, needs none). Taking a second slot per page up front spilled a page for
  //    every such victim too (the LSTM at 2x: 45 MiB read from NVMe per step and 48 written, 36 and
  //    36 with one slot). With other pins loading at once it still does (the second half handed back
  //    just before the frames are taken, with no unlock between): stage-ins that each held only their
  //    pages' slots could leave no slot for one another's victims (two threads pinning with host
  //    tiers of two to six pages stalled in 9 of 20 random runs with one slot per page, 5 with two).
  const std::size_t per_page = loading_pins_.load(std::memory_order_relaxed) > 1 ? 2 : 1;
  const std::size_t want = std::min<std::size_t>({on_nvme, cfg_.nvme.queue_depth, host_->budget() / 2});
  std::vector<std::uint32_t> slots = acquire_host_slots(lk, per_page * std::max<std::size_t>(want, 1), deadline);
  const std::size_t staged = std::max<std::size_t>(1, slots.size() / per_page);
  std::vector<PageEntry*> batch;
  try {
    batch.reserve(staged);  // a claimed page must land in `batch`, whose guard below puts it back
  } catch (...) {
    for (const std::uint32_t s : slots) host_->release(s);
    throw;
  }
  for (std::uint32_t i = 0; i < span.count && batch.size() < staged; ++i) {
    if (pages[i].state() != PageState::nvme) continue;
    pages[i].set_state(PageState::transit);
    pages[i].host_slot = slots[batch.size()];
    batch.push_back(&pages[i]);
  }
  for (std::size_t i = batch.size(); i < slots.size(); ++i) host_->release(slots[i]);
  if (batch.empty()) return 0;  // another thread loaded them meanwhile
  // Pages not loaded in the end go back to NVMe, untouched there.
  auto put_back = [&](PageEntry& p) {
    host_->release(std::exchange(p.host_slot, kNoSlot));
    p.set_state(PageState::nvme);
  };
  common::ScopeGuard restore([&] {
    for (PageEntry* p : batch) {
      if (p->state() == PageState::transit) put_back(*p);
    }
    cv_.notify_all();
  });
  // 2. Frames (this may evict, spill or wait, and so unlock; the claimed pages stay ours). With fewer
  //    frames than pages, the batch shrinks to fit.
  Frames got = acquire_frames(lk, batch, deadline, true);
  common::ScopeGuard give_back([&] { release_frames(got); });
  while (batch.size() > got.frames.size()) {
    put_back(*batch.back());
    batch.pop_back();
  }
  // 3. Read without the lock. Each page's copy to the device is queued as soon as its read has been
  //    verified, so the reads of the next pages overlap it; the copies follow the write-backs of the
  //    frames' previous pages.
  std::vector<NvmeTier::Io> ios;
  for (PageEntry* p : batch)
    ios.push_back(
        {storage::IoOp::read, p->nvme_slot, host_->ptr(p->host_slot), p->checksum, 0, nvme_->io_bytes(used_bytes(*p))});
  std::vector<char> copied(batch.size(), 0);
  // Room for step 4, taken now: once a page's copy to the device is queued, its frame may return to
  // the pool only after the copy streams are drained.
  std::vector<PageEntry*> arrived;
  Frames arrived_frames, unused;
  arrived.reserve(batch.size());
  arrived_frames.reserve_more(batch.size());
  unused.reserve_more(batch.size());
  const std::vector<PageState> before(batch.size(), PageState::nvme);
  std::exception_ptr copy_error;
  try {
    // The reads take longer than the write-backs: waiting here for the latest (which implies the
    // others) and the frames' other events costs nothing and keeps the copies unordered among
    // themselves.
    got.follow_all([&](Event* e) { xfer_->order_copy_in_after(e); });
  } catch (...) {
    abort_chunk(got);
    throw;
  }
  auto page_in = [&](std::size_t i) noexcept {
    if (ios[i].error != 0 || copy_error) return;
    try {
      xfer_->copy_in(frame_addr(got.frames[i]), ios[i].buf, used_bytes(*batch[i]));
      copied[i] = 1;
    } catch (...) {
      copy_error = std::current_exception();
    }
  };
  NvmeTier::Hooks hooks;
  hooks.done = page_in;
  run_nvme(lk, ios, hooks, "nvme read", got.frames.size());  // the copies go to the frames' own addresses
  EventRef done;
  try {
    if (copy_error) std::rethrow_exception(copy_error);
    done = xfer_->record_in();
  } catch (...) {
    abort_chunk(got);  // the NVMe copies are untouched: `restore` puts the pages back there
    throw;
  }
  // 4. Map and publish the pages that arrived: resident, keeping their NVMe slots as clean copies. A
  //    failed read leaves its page on NVMe (its slot and its address's mapping untouched), so nothing
  //    wrong is ever handed out; its frame returns to the pool after the victims' write-backs.
  const NvmeTier::Io* failed = nullptr;
  const PageEntry* failed_page = nullptr;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (copied[i] != 0) {
      arrived.push_back(batch[i]);
      arrived_frames.add(got.frames[i], got.after[i]);
      continue;
    }
    unused.add(got.frames[i], got.after[i]);
    put_back(*batch[i]);
    if (failed == nullptr) {
      failed = &ios[i];
      failed_page = batch[i];
    }
  }
  // The split lost pair_frames' recording order: the whole batch's latest write-back implies each part's.
  arrived_frames.latest = got.latest;
  unused.latest = got.latest;
  give_back.dismiss();
  if (!unused.frames.empty()) release_frames(unused);
  auto from_host = [](std::size_t) { return true; };
  try {
    // The pages' addresses are mapped after their reads and copies are under way (the copies do not
    // need them: PagerImpl::frame_addr), and only for the pages that arrived.
    map_chunk(arrived, arrived_frames);
    publish_chunk(arrived, std::span(before).first(arrived.size()), arrived_frames, done, from_host);
  } catch (...) {
    // Nothing was published (map_chunk and publish_chunk fail only before they change anything but
    // mappings): `restore` puts the pages back on NVMe once their copies are drained and their frames
    // returned.
    abort_chunk(arrived_frames);
    release_frames(arrived_frames);
    throw;
  }
  if (failed != nullptr) {
    const std::string what = "tvmm: reading " +
                             page_label(*failed_page, table_.index_of(*failed_page) - a->first_page, page_size_) +
                             " from NVMe slot " + std::to_string(failed->slot);
    if (failed->error == NvmeTier::kCorrupt) {
      throw io_error(what +
                     ": the data fails its checksum (corrupt on the drive, or a misdirected read); it "
                     "was not handed out and the page stays on the NVMe tier");
    }
    throw io_error(what + " failed: " + storage::errno_text(-failed->error) + "; the page stays on the NVMe tier",
                   -failed->error);
  }
  return arrived.size();
}

}  // namespace tvmm::vmm
