// PagerImpl, part 5: the NVMe tier. Host pages spill to NVMe when the host tier is full; NVMe pages are
// staged back through host slots. The I/O runs without mu_, on pages claimed (in transit), so other
// threads keep pinning; each batch is up to nvme.queue_depth pages, and while one batch's reads run,
// the page-ins of the previous batch (asynchronous, on the copy stream) run too.
#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "vmm/detail/labels.hpp"
#include "vmm/detail/scope_guard.hpp"
#include "vmm/pager_impl.hpp"

namespace tvmm::detail {

namespace {

// The lazy queues hold page indices that may have gone stale; drop the stale ones (and duplicates)
// when a queue grows well past the number of pages that can be valid in it.
void compact(std::deque<std::uint32_t>& q, std::size_t valid_max, const PageTable& table,
             bool (*valid)(const PageEntry&)) {
  if (q.size() <= 4 * valid_max + 64) return;
  std::vector<std::uint32_t> keep;
  std::vector<bool> seen(table.size(), false);
  for (auto idx : q) {
    if (!seen[idx] && valid(table[idx])) keep.push_back(idx);
    seen[idx] = true;
  }
  q.assign(keep.begin(), keep.end());
}

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
  if (!nvme_) return;
  try {
    host_fifo_.push_back(table_.index_of(p));
    compact(host_fifo_, host_->budget(), table_, is_host);
  } catch (const std::bad_alloc&) {
    // Without the entry the page is not spilled before it is next loaded; nothing is lost.
  }
}

void PagerImpl::note_slot_kept(const PageEntry& p) noexcept {
  try {
    slot_keepers_.push_back(table_.index_of(p));
    compact(slot_keepers_, nvme_->budget(), table_, keeps_slot);
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

std::size_t PagerImpl::spill(Lock& lk, std::size_t want) {
  if (!nvme_) return 0;
  reap(lk);
  // 1. Claim the oldest host pages. A page whose NVMe copy is current just lets its host slot go.
  std::size_t freed = 0;
  std::vector<PageEntry*> writes;
  while (freed + writes.size() < want && !host_fifo_.empty()) {
    PageEntry& p = table_[host_fifo_.front()];
    if (p.state() != PageState::host) {  // stale entry
      host_fifo_.pop_front();
      continue;
    }
    if (p.nvme_slot == kNoSlot) {
      auto slot = acquire_nvme_slot();
      if (!slot) break;  // the NVMe tier is full: spill what was claimed so far
      p.nvme_slot = *slot;
      p.word.fetch_or(word::kDirty, std::memory_order_acq_rel);  // a new slot holds nothing of this page
    }
    host_fifo_.pop_front();
    if (clean_on_nvme(p, p.word.load(std::memory_order_acquire))) {
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      ++freed;
      continue;
    }
    p.set_state(PageState::transit);
    writes.push_back(&p);
  }
  if (writes.empty()) {
    if (freed != 0) cv_.notify_all();
    return freed;
  }
  // 2. Write them without the lock (checksums are taken from the host frames, which no one else
  //    touches while the pages are in transit).
  std::vector<NvmeTier::Io> ios;
  for (PageEntry* p : writes) ios.push_back({storage::IoOp::write, p->nvme_slot, host_->ptr(p->host_slot), 0, 0});
  lk.unlock();
  nvme_->run(ios);
  lk.lock();
  // 3. Publish: written pages move to NVMe; a failed write leaves its page on the host, readable.
  const NvmeTier::Io* failed = nullptr;
  const PageEntry* failed_page = nullptr;
  for (std::size_t i = 0; i < writes.size(); ++i) {
    PageEntry& p = *writes[i];
    if (ios[i].error == 0) {
      p.checksum = ios[i].checksum;
      p.word.fetch_and(~word::kDirty, std::memory_order_acq_rel);
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      ++freed;
    } else {
      p.set_state(PageState::host);
      note_host(p);
      note_slot_kept(p);
      if (failed == nullptr) {
        failed = &ios[i];
        failed_page = &p;
      }
    }
  }
  cv_.notify_all();
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
  for (;;) {
    while (slots.size() < want) {
      auto s = host_->try_acquire();
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

void PagerImpl::stage_in(Lock& lk, Allocation* a, Clock::time_point deadline) {
  PageEntry* pages = pages_of(a);
  std::size_t on_nvme = 0;
  for (std::uint32_t i = 0; i < a->pages; ++i) on_nvme += pages[i].state() == PageState::nvme ? 1 : 0;
  if (on_nvme == 0) return;
  // 1. Host slots for a batch (this may spill, and so unlock: pages are claimed only afterwards). Twice
  //    as many as the batch: each staged page then needs a device frame, and the page that frame's
  //    victim is written back to needs a host slot too. The second half is held through the reads
  //    and handed back just before the caller loads the batch, so that no other thread takes it.
  const std::size_t want = std::min<std::size_t>({on_nvme, cfg_.nvme.queue_depth, host_->budget() / 2});
  std::vector<std::uint32_t> slots = acquire_host_slots(lk, 2 * std::max<std::size_t>(want, 1), deadline);
  const std::size_t staged = std::max<std::size_t>(1, slots.size() / 2);
  std::vector<PageEntry*> batch;
  for (std::uint32_t i = 0; i < a->pages && batch.size() < staged; ++i) {
    if (pages[i].state() != PageState::nvme) continue;
    pages[i].set_state(PageState::transit);
    pages[i].host_slot = slots[batch.size()];
    batch.push_back(&pages[i]);
  }
  ScopeGuard hand_back([&] {
    for (std::size_t i = batch.size(); i < slots.size(); ++i) host_->release(slots[i]);
  });
  if (batch.empty()) return;  // another thread loaded them meanwhile
  // 2. Read and verify without the lock.
  std::vector<NvmeTier::Io> ios;
  for (PageEntry* p : batch) {
    ios.push_back({storage::IoOp::read, p->nvme_slot, host_->ptr(p->host_slot), p->checksum, 0});
  }
  lk.unlock();
  nvme_->run(ios);
  lk.lock();
  // 3. Publish: verified pages are host pages that keep their NVMe copy; a failed read leaves its page
  //    on NVMe (its slot untouched) and frees the staging slot, so nothing wrong is ever handed out.
  const NvmeTier::Io* failed = nullptr;
  const PageEntry* failed_page = nullptr;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    PageEntry& p = *batch[i];
    if (ios[i].error == 0) {
      p.set_state(PageState::host);
      note_host(p);
      note_slot_kept(p);
    } else {
      host_->release(std::exchange(p.host_slot, kNoSlot));
      p.set_state(PageState::nvme);
      if (failed == nullptr) {
        failed = &ios[i];
        failed_page = &p;
      }
    }
  }
  cv_.notify_all();
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
}

}  // namespace tvmm::detail
