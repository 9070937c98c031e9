// PagerImpl, part 1: construction, allocation (incl. the small-object arena), free, streams (inspection and the
// invariant check: inspect.cpp).
#include "vmm/core/pager_impl.hpp"

#include <algorithm>
#include <cstdio>

#include <unistd.h>

#include "backends/storage/slot_files.hpp"
#include "common/physical_memory.hpp"
#include "common/scope_guard.hpp"
#include "policies/registry.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/labels.hpp"

namespace tvmm::vmm {

Config resolve_config(Config cfg, const device::DeviceProperties& props) {
  const std::size_t g = props.granularity;
  if (cfg.page_size == 0) cfg.page_size = g;
  if (cfg.page_size % g != 0) {
    throw config_error("device.page_size = " + format_bytes(cfg.page_size) + " is not a multiple of the " + props.name +
                       " backend's granularity " + format_bytes(g) + "; use " + format_bytes(g) + ", " +
                       format_bytes(2 * g) + ", " + format_bytes(4 * g) + ", ...");
  }
  const std::size_t p = cfg.page_size;
  if (cfg.device_budget < p) {
    throw config_error("device.budget = " + format_bytes(cfg.device_budget) + " is smaller than one page (" +
                       format_bytes(p) + "); raise it or lower device.page_size");
  }
  if (cfg.host_budget < p) {
    throw config_error("host.budget = " + format_bytes(cfg.host_budget) + " is smaller than one page (" +
                       format_bytes(p) + "); raise it or lower device.page_size");
  }
  cfg.device_budget = cfg.device_budget / p * p;
  cfg.host_budget = cfg.host_budget / p * p;
  if (cfg.nvme.budget != 0 && cfg.nvme.budget < p) {
    throw config_error("nvme.budget = " + format_bytes(cfg.nvme.budget) + " is smaller than one page (" +
                       format_bytes(p) + "); raise it, or set it to 0 for no NVMe tier");
  }
  cfg.nvme.budget = cfg.nvme.budget / p * p;
  if (cfg.nvme.budget != 0 && cfg.host_budget < 2 * p) {
    throw config_error("host.budget = " + format_bytes(cfg.host_budget) + " holds fewer than 2 pages of " +
                       format_bytes(p) +
                       ", which the NVMe tier needs (one to stage a page read from NVMe, one "
                       "for the page it displaces); raise host.budget");
  }
  // Frames and host slots are numbered with 32 bits (the constructor's casts would wrap).
  for (auto [key, bytes] : {std::pair{"device.budget", cfg.device_budget}, std::pair{"host.budget", cfg.host_budget}}) {
    if (bytes / p > UINT32_MAX - 1) {
      throw config_error(std::string(key) + " = " + format_bytes(bytes) + " holds more than 2^32 pages of " +
                         format_bytes(p) + "; lower it or raise device.page_size");
    }
  }
  if (cfg.nvme.budget / p > UINT32_MAX - 1) {
    throw config_error("nvme.budget = " + format_bytes(cfg.nvme.budget) + " holds more than 2^32 pages of " +
                       format_bytes(p) + "; lower it or raise device.page_size");
  }
  if (cfg.device_budget > props.capacity) {
    throw config_error("device.budget = " + format_bytes(cfg.device_budget) + " exceeds the device's memory (" +
                       format_bytes(props.capacity) + "); lower it");
  }
  if (props.free_memory != 0 && cfg.device_budget > props.free_memory) {
    throw config_error("device.budget = " + format_bytes(cfg.device_budget) +
                       " exceeds the device's free memory: " + format_bytes(props.free_memory) + " of " +
                       format_bytes(props.capacity) + " are free, " + format_bytes(props.capacity - props.free_memory) +
                       " are held by other allocations (of this process or others: nvidia-smi lists them); lower "
                       "device.budget to at most " +
                       format_bytes(props.free_memory / cfg.page_size * cfg.page_size) +
                       ", or free device memory first");
  }
  // "Wait forever" (milliseconds::max()) would overflow the deadline, steady_clock::now() + timeout, and
  // fail every wait at once: 10^12 ms (31 years) is the longest a policy file can ask for, and is forever.
  cfg.wait_timeout = std::min(cfg.wait_timeout, std::chrono::milliseconds(1'000'000'000'000));
  if (cfg.va_size == 0) cfg.va_size = default_va_size(cfg);
  // Counted without rounding up first, which would wrap for a size near SIZE_MAX.
  if (cfg.va_size / p + (cfg.va_size % p != 0 ? 1 : 0) > UINT32_MAX) {
    throw config_error("device.va_size = " + format_bytes(cfg.va_size) + " holds more than 2^32 pages of " +
                       format_bytes(p) + "; lower device.va_size or raise device.page_size");
  }
  cfg.va_size = (cfg.va_size + p - 1) / p * p;
  return cfg;
}

std::size_t default_va_size(const Config& resolved) noexcept {
  return std::max<std::size_t>(4 * (resolved.device_budget + resolved.host_budget) + resolved.nvme.budget, GiB);
}

std::string va_size_origin(const Config& given, const Config& resolved) {
  if (given.va_size != 0) return "device.va_size = " + format_bytes(given.va_size) + " was set";
  return "device.va_size is auto: 4 x (device budget " + format_bytes(resolved.device_budget) + " + host budget " +
         format_bytes(resolved.host_budget) + ") + NVMe budget " + format_bytes(resolved.nvme.budget) +
         ", at least 1 GiB = " + format_bytes(resolved.va_size);
}

std::unique_ptr<AddressSpace> PagerImpl::reserve_address_space(const Config& given, bool storage_given) const {
  // The NVMe tier's directories first: a huge NVMe budget makes the auto va_size huge too, and a disk
  // without the room is the error to report, not the reservation sized by it.
  if (cfg_.nvme.budget != 0 && !storage_given) {
    storage::check_slot_directories(cfg_.nvme.paths, static_cast<std::uint32_t>(cfg_.nvme.budget / page_size_),
                                    page_size_);
  }
  // The page table takes host memory for every page of the reservation, allocated at once.
  const std::size_t table_bytes = cfg_.va_size / page_size_ * sizeof(PageEntry);
  if (const std::size_t ram = common::physical_memory(); ram != 0 && table_bytes > ram / 4) {
    throw config_error("the page table for a " + format_bytes(cfg_.va_size) + " address reservation (" +
                       va_size_origin(given, cfg_) + ") needs " + format_bytes(table_bytes) + " of host memory (" +
                       std::to_string(sizeof(PageEntry)) + " B per " + format_bytes(page_size_) +
                       " page), more than a quarter of this machine's " + format_bytes(ram) +
                       "; set device.va_size to the total size of the tensors you need live at once, or raise "
                       "device.page_size");
  }
  return std::make_unique<AddressSpace>(*dev_, cfg_.va_size, page_size_, va_size_origin(given, cfg_));
}

PagerImpl::PagerImpl(const Config& config, std::unique_ptr<device::DeviceBackend> backend,
                     std::unique_ptr<storage::StorageBackend> storage)
    : cfg_((config.validate(), config)),
      dev_(backend ? std::move(backend) : device::make_device_backend(cfg_)),
      page_size_((cfg_ = resolve_config(cfg_, dev_->properties())).page_size),
      va_storage_(reserve_address_space(config, storage != nullptr)),
      va_(*va_storage_),
      table_storage_(std::make_unique<PageTable>(va_.pages())),
      table_(*table_storage_),
      events_(*dev_),
      arena_(page_size_),
      prefetch_(cfg_, policies::find_eviction_policy(cfg_.eviction)->needs_trace) {
  const auto frames = static_cast<std::uint32_t>(cfg_.device_budget / page_size_);
  const auto slots = static_cast<std::uint32_t>(cfg_.host_budget / page_size_);
  device_ = std::make_unique<DeviceTier>(*dev_, page_size_, frames, device::ChunkLocation::device,
                                         DeviceTier::Window::mapped);
  frame_page_.assign(frames, kNoPage);
  placement_ = std::make_unique<HostPlacement>(cfg_, *dev_, std::size_t{slots} * page_size_);
  host_ = std::make_unique<HostTier>(*dev_, placement_->memory(), page_size_, slots);
  host_copies_ = std::make_unique<HostCopies>(table_, *host_);
  xfer_ = std::make_unique<TransferEngine>(*dev_, events_, page_size_);
  releases_ = std::make_unique<ReleasePoints>(*dev_, *xfer_);
  std::uint32_t nvme_slots = 0;
  if (cfg_.nvme.budget != 0) {
    nvme_slots = static_cast<std::uint32_t>(cfg_.nvme.budget / page_size_);
    if (!storage) {
      storage::StorageOptions o;
      o.paths = cfg_.nvme.paths;
      o.slot_size = page_size_;
      o.slots = nvme_slots;
      o.queue_depth = cfg_.nvme.queue_depth;
      o.direct = cfg_.nvme.direct;
      storage = storage::make_storage_backend(cfg_.nvme.backend, o);
    }
    if (storage->slot_size() != page_size_ || storage->slots() != nvme_slots) {
      throw config_error("the storage backend has " + std::to_string(storage->slots()) + " slots of " +
                         format_bytes(storage->slot_size()) + " but the NVMe tier needs " + std::to_string(nvme_slots) +
                         " of " + format_bytes(page_size_));
    }
    // The host frames are the only buffers the tier reads into and writes from: fixed buffers if allowed.
    (void)storage->register_buffers(host_->ptr(0), std::size_t{slots} * page_size_);
    placement_->bind_io_threads(*storage);
    nvme_ = std::make_unique<NvmeTier>(std::move(storage), page_size_, cfg_.nvme.queue_depth);
  }
  policies::PolicyContext policy_ctx;
  policy_ctx.page_count = table_.size();
  policy_ctx.trace = &prefetch_.trace();
  policy_ctx.keep_recent = cfg_.keep_recent;
  policy_ctx.frames = static_cast<std::uint32_t>(cfg_.device_budget / page_size_);
  policy_ctx.page_bytes = [this](std::uint64_t tensor, std::uint32_t page) -> std::uint64_t {
    // As PageOwner::cost weighs a page. An id no longer live (or an arena's) weighs a full page.
    const auto it = by_id_.find(tensor);
    if (it == by_id_.end() || it->second->arena != nullptr || page >= it->second->pages)
      return page_size_ + kMoveOverheadBytes;
    return move_weight(table_[it->second->first_page + page]);
  };
  policy_ctx.latest_release = &latest_release_;
  policy_ctx.owner_of = [this](policies::PageIndex i) {
    const Allocation* a = table_[i].owner;
    const std::uint64_t w = table_[i].word.load(std::memory_order_acquire);
    return policies::PageOwner{
        a->id, a->released_at.load(std::memory_order_relaxed),
        static_cast<double>(move_weight(table_[i])) / static_cast<double>(page_size_ + kMoveOverheadBytes),
        !table_[i].droppable(w) || word::writing_behind(w), static_cast<std::uint32_t>(i - a->first_page)};
  };
  policy_ = policies::make_eviction_policy(cfg_.eviction, policy_ctx);
  observe_.open(cfg_, *dev_);
  xfer_->set_timeline(observe_.timeline());
  // One host slot stays free so that swapping a page in never has to wait for itself (a full device
  // evicts to the host before the incoming page's host slot is released); with an NVMe tier, one NVMe
  // slot too (a page read from NVMe is staged in a host slot that a spill to NVMe may have to free).
  capacity_spare_ = std::uint64_t{slots} - 1 + (nvme_slots != 0 ? nvme_slots - 1 : 0);
}

PagerImpl::~PagerImpl() {
  observe_.finish([this] { return stats(); });
  std::vector<Allocation*> live;
  {
    std::lock_guard lk(mu_);
    for (auto& [base, a] : owned_) live.push_back(a);
  }
  if (!live.empty()) {
    std::fprintf(stderr,
                 "tvmm: Pager destroyed with %zu live tensor(s); freeing them (destroy tensors, pins "
                 "and streams before their Pager)\n",
                 live.size());
    for (Allocation* a : live) drop_owner(a);
  }
  std::vector<Allocation*> arena_pages;
  {
    std::lock_guard lk(mu_);
    arena_pages = arena_.take_all();  // normally none: a page goes when its last allocation does
  }
  for (Allocation* backing : arena_pages) drop_owner(backing);
  {
    Lock lk(mu_);
    try {
      while (!reads_ahead_.empty()) finish_reads(lk, true);  // normally none: freeing a tensor waits for its reads
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: finishing the last NVMe read-aheads failed: %s\n", ex.what());
    }
    (void)xfer_->drain();
    try {
      reap(lk);  // publishes the victims of finished evictions
    } catch (const std::exception& ex) {
      if (!dev_->lost()) std::fprintf(stderr, "tvmm: retiring the last transfers failed: %s\n", ex.what());
    }
    // Every address still mapped (kept mappings of evicted and freed pages, the resident pages of
    // tensors still alive): the reservation can go only once nothing in it is mapped.
    if (const std::size_t failed = unmap_range(0, table_.size()); failed != 0 && !dev_->lost())
      std::fprintf(stderr, "tvmm: %zu page address(es) could not be unmapped\n", failed);
  }
  releases_.reset();          // refers to xfer_
  xfer_.reset();              // drains the copy streams before the tiers go away
  observe_.close_timeline();  // every copy's completion is in it now
  loads_.clear();
  evictions_.clear();
  policy_.reset();
  nvme_.reset();  // before the host frames it may have registered
  host_copies_.reset();
  host_.reset();
  device_.reset();
}

// --- allocation -------------------------------------------------------------------------------------

Allocation* PagerImpl::allocate(std::size_t bytes, Hints hints) {
  if (bytes == 0) {
    const std::string label = hints.name.empty() ? std::string() : " '" + hints.name + "'";
    throw invalid_argument("tvmm::Pager::allocate" + label + ": size is 0 bytes; ask for at least 1 byte");
  }
  // Admission: below the threshold an allocation is never evicted; if it fits a page it shares one.
  const bool small = cfg_.min_bytes != 0 && bytes < cfg_.min_bytes;
  if (small && bytes <= page_size_) return allocate_small(bytes, std::move(hints));
  Allocation* a = allocate_pages(bytes, std::move(hints), true);
  if (small) pin_for_life(a);
  return a;
}

void PagerImpl::pin_for_life(Allocation* a) {
  try {
    pin(a, whole(a), Access::write, nullptr);  // fresh pages: frames are mapped, nothing is copied
  } catch (...) {
    drop_owner(a);
    throw;
  }
  std::lock_guard lk(mu_);
  a->pinned_for_life = true;
}

Allocation* PagerImpl::allocate_small(std::size_t bytes, Hints hints) {
  const std::uint32_t units = SmallArena::units_for(bytes);
  auto a = std::make_unique<Allocation>();  // before any placement, so nothing placed can leak
  a->bytes = bytes;
  a->pages = 1;
  a->name = std::move(hints.name);
  a->arena_units = units;
  Allocation* surplus = nullptr;  // a new arena page that turned out not to be needed
  {
    Lock lk(mu_);
    auto place = arena_.place(units);
    if (!place) {
      // A new arena page: an ordinary one-page allocation, pinned for life. Made without the lock, so
      // another thread may free room in an older page, or add a page, meanwhile: look again first, and
      // release the new page if it is not needed (kept empty, it would stay pinned for good).
      lk.unlock();
      Allocation* backing = allocate_pages(page_size_, Hints{"small-object arena"}, false);
      pin_for_life(backing);
      lk.lock();
      place = arena_.place(units);
      if (place) {
        surplus = backing;
      } else {
        try {
          place = arena_.add_page(backing, units);
        } catch (...) {
          lk.unlock();
          drop_owner(backing);
          throw;
        }
      }
    }
    a->id = next_id_++;
    a->base = place->addr;
    a->first_page = place->page->backing->first_page;
    a->arena = place->page;
    a->arena_unit = place->unit;
    try {
      by_id_.emplace(a->id, a.get());
      owned_.emplace(a->base, a.get());
    } catch (...) {
      by_id_.erase(a->id);
      Allocation* empty = arena_.release(place->page, place->unit, units);
      lk.unlock();
      if (empty != nullptr) drop_owner(empty);
      if (surplus != nullptr) drop_owner(surplus);
      throw;
    }
  }
  if (surplus != nullptr) drop_owner(surplus);  // without the lock: it takes mu_
  observe_.counters.allocations.fetch_add(1, std::memory_order_relaxed);
  observe_.counters.live_bytes.fetch_add(std::uint64_t{units} * SmallArena::kUnit, std::memory_order_relaxed);
  observe_.counters.live_tensors.fetch_add(1, std::memory_order_relaxed);
  return a.release();
}

Allocation* PagerImpl::allocate_pages(std::size_t bytes, Hints hints, bool owned) {
  const std::string label = hints.name.empty() ? std::string() : " '" + hints.name + "'";
  const std::uint64_t pages = bytes / page_size_ + (bytes % page_size_ != 0 ? 1 : 0);
  Lock lk(mu_);
  // The device tier's frames as it has them now (fewer than the budget when the GPU had no memory for
  // more), plus the host and NVMe slots less the ones kept for swapping.
  const std::uint64_t capacity_pages = device_->usable() + capacity_spare_;
  const std::uint64_t free_pages = capacity_pages - std::min(capacity_pages, allocated_pages_);
  // Pages kept off NVMe live on the device or the host; all of them must fit in the host tier with two
  // slots to spare, so that evictions and staging always find a slot that a spill can free.
  const bool host_only = nvme_ && owned && cfg_.nvme_min_bytes != 0 && bytes < cfg_.nvme_min_bytes;
  const std::uint64_t host_only_max = host_->budget() - 2;
  if (host_only && host_only_pages_ + pages > host_only_max) {
    throw out_of_memory("tvmm::Pager::allocate" + label + ": " + format_bytes(bytes) +
                        " is below policy.admission.nvme_min_bytes (" + format_bytes(cfg_.nvme_min_bytes) +
                        "), so it never goes to NVMe, and such allocations (" + std::to_string(host_only_pages_) +
                        " pages now) must fit in the host tier less two pages (" + std::to_string(host_only_max) +
                        " pages); raise the host budget or lower nvme_min_bytes");
  }
  if (pages > free_pages) {
    throw out_of_memory(
        "tvmm::Pager::allocate" + label + ": cannot allocate " + format_bytes(bytes) + " (" + std::to_string(pages) +
        " pages of " + format_bytes(page_size_) + "): " + format_bytes(free_pages * page_size_) + " free of " +
        format_bytes(capacity_pages * page_size_) + " (device budget " +
        format_bytes(std::uint64_t{device_->usable()} * page_size_) + " + host budget " +
        format_bytes(cfg_.host_budget) +
        (nvme_ ? " + NVMe budget " + format_bytes(cfg_.nvme.budget) + " - two pages" : std::string(" - one page")) +
        " kept for swapping); free tensors or raise the budgets");
  }
  auto a = std::make_unique<Allocation>();
  const auto first = va_.allocate(static_cast<std::uint32_t>(pages));
  if (!first) {
    throw out_of_memory("tvmm::Pager::allocate" + label + ": no free run of " + std::to_string(pages) +
                        " pages in the " + format_bytes(cfg_.va_size) + " address reservation (largest run " +
                        std::to_string(va_.largest_free_run()) + " pages); raise va_size");
  }
  // The maps may fail to allocate: until both hold the tensor, a failure gives everything back.
  common::ScopeGuard give_back_run([&] { va_.free(*first, static_cast<std::uint32_t>(pages)); });
  a->id = next_id_;
  a->base = va_.addr(*first);
  by_id_.emplace(a->id, a.get());
  common::ScopeGuard forget_id([&] { by_id_.erase(a->id); });
  if (owned) owned_.emplace(a->base, a.get());
  forget_id.dismiss();
  give_back_run.dismiss();
  ++next_id_;
  a->bytes = bytes;
  a->first_page = *first;
  a->pages = static_cast<std::uint32_t>(pages);
  a->name = std::move(hints.name);
  a->host_only = host_only;
  if (host_only) host_only_pages_ += pages;
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = table_[*first + i];
    p.owner = a.get();
    p.set_state(PageState::fresh);
  }
  allocated_pages_ += pages;
  if (owned) {
    observe_.counters.allocations.fetch_add(1, std::memory_order_relaxed);
    observe_.counters.live_bytes.fetch_add(pages * page_size_, std::memory_order_relaxed);
    observe_.counters.live_tensors.fetch_add(1, std::memory_order_relaxed);
  }
  a->owned = owned;
  return a.release();
}

void PagerImpl::mark_raw(Allocation* a) noexcept {
  std::lock_guard lk(mu_);
  a->raw_owned = true;
}

void PagerImpl::free_raw(void* ptr) {
  const auto addr = reinterpret_cast<device::DevPtr>(ptr);
  Allocation* a = nullptr;
  {
    std::lock_guard lk(mu_);
    auto it = owned_.find(addr);
    if (it == owned_.end()) {
      throw invalid_argument("tvmm::Pager::free(" + hex(addr) +
                             "): not the start of a live tvmm allocation (double free, or a pointer tvmm did "
                             "not allocate); nothing was changed");
    }
    if (!it->second->raw_owned) {
      throw invalid_argument("tvmm::Pager::free(" + hex(addr) + "): " + tensor_label(it->second) +
                             " is owned by a tvmm::Tensor; destroy or reset() the Tensor instead");
    }
    a = it->second;
  }
  drop_owner(a);
}

void PagerImpl::drop_owner(Allocation* a) noexcept {
  bool for_life = false;
  {
    std::lock_guard lk(mu_);
    if (a->owned) owned_.erase(a->base);
    for_life = std::exchange(a->pinned_for_life, false);
  }
  if (for_life) unpin(a, whole(a), nullptr);  // the pin taken at allocation; its reference goes with it
  if (a->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(a);
}

// Frees an allocation no one references. Waits for every transfer and queued use of its pages.
void PagerImpl::reclaim(Allocation* a) noexcept {
  if (a->arena != nullptr) {
    reclaim_small(a);
    return;
  }
  PageEntry* pages = pages_of(a);
  Lock lk(mu_);
  // 1. Wait for transfers other threads run on these pages (eviction picks any unpinned page), retiring
  //    completed write-backs as they finish. Pages leave transit only under mu_. A lost device completes
  //    nothing any more: its transfers are abandoned (their data is gone with it).
  //    A write-behind copy into a page's host slot counts as such a transfer: the slot is let go below.
  for (;;) {
    bool busy = false;
    for (std::uint32_t i = 0; i < a->pages && !busy; ++i) {
      const auto w = pages[i].word.load(std::memory_order_acquire);
      busy = word::state(w) == PageState::transit || word::writing_behind(w);
    }
    if (!busy || dev_->lost()) break;
    try {
      (void)wait_progress(lk, Clock::time_point::max());
    } catch (const std::exception& ex) {
      if (dev_->lost()) break;
      std::fprintf(stderr, "tvmm: waiting for transfers of %s: %s\n", tensor_label(a).c_str(), ex.what());
      cv_.wait_for(lk, std::chrono::milliseconds(1));
    }
  }
  // 2. Claim every page so no other thread can choose one as a victim meanwhile.
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = pages[i];
    if (p.state() == PageState::device) policy_->remove(table_.index_of(p));
    p.set_state(PageState::transit);
  }
  // 3. Wait, without the lock, for queued work that may still touch the pages: their last stream uses
  //    and page-ins. Returning a frame to the pool is not stream-ordered: another page may take it.
  //    The page-ins are waited for where the pages name them, with no list to allocate: a page in
  //    transit is this call's alone, and reap() leaves its `ready` alone.
  lk.unlock();
  wait_for_last_uses(a);
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    Event* e = pages[i].ready;
    if (e != nullptr && (i == 0 || pages[i - 1].ready != e) && !wait_quietly(e, a)) break;
  }
  lk.lock();
  try {
    reap(lk);
  } catch (const std::exception& ex) {
    if (!dev_->lost())
      std::fprintf(stderr, "tvmm: retiring transfers while freeing %s failed: %s\n", tensor_label(a).c_str(),
                   ex.what());
  }
  // 4. Return frames and slots, and give the address range back. The addresses stay mapped
  //    (PageEntry::mapped), as an evicted page's do: nothing uses a freed address, so its frame may
  //    serve other pages, and a later tensor given the range (first fit hands a repeated allocation the
  //    same addresses) gets its pages into those frames with no driver call while they are idle. A
  //    mapping goes when its address is mapped to another frame (map_chunk) or the pager goes.
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = pages[i];
    if (p.frame != kNoFrame) {
      frame_page_[p.frame] = kNoPage;
      device_->release(p.frame);
      p.frame = kNoFrame;
    }
    if (p.host_slot != kNoSlot) {
      host_->release(p.host_slot);
      p.host_slot = kNoSlot;
    }
    if (p.nvme_slot != kNoSlot) {
      nvme_->release(p.nvme_slot);
      p.nvme_slot = kNoSlot;
    }
    p.forget_contents();
    p.left_live = false;
    if (p.ready != nullptr) EventRef::drop(std::exchange(p.ready, nullptr));
    p.owner = nullptr;
    p.set_state(PageState::unused);
  }
  va_.free(a->first_page, a->pages);
  allocated_pages_ -= a->pages;
  if (a->host_only) host_only_pages_ -= a->pages;
  by_id_.erase(a->id);
  write_behind_.forget(a->id);
  if (a->owned) {
    observe_.counters.live_bytes.fetch_sub(std::uint64_t{a->pages} * page_size_, std::memory_order_relaxed);
    observe_.counters.live_tensors.fetch_sub(1, std::memory_order_relaxed);
  }
  lk.unlock();
  cv_.notify_all();
  delete a;
}

// A small allocation owns no pages: wait for its last stream uses, then return its units to the arena
// (and release the arena page if it became empty).
void PagerImpl::reclaim_small(Allocation* a) noexcept {
  wait_for_last_uses(a);
  Allocation* empty_page = nullptr;
  {
    std::lock_guard lk(mu_);
    empty_page = arena_.release(a->arena, a->arena_unit, a->arena_units);
    by_id_.erase(a->id);
  }
  observe_.counters.live_bytes.fetch_sub(std::uint64_t{a->arena_units} * SmallArena::kUnit, std::memory_order_relaxed);
  observe_.counters.live_tensors.fetch_sub(1, std::memory_order_relaxed);
  delete a;
  if (empty_page != nullptr) drop_owner(empty_page);
}

// --- streams --------------------------------------------------------------------------------------------

device::StreamHandle PagerImpl::create_stream() {
  device::StreamHandle s = nullptr;
  TVMM_CHECK(dev_->create_stream(&s));
  try {
    releases_->add_stream(s);
  } catch (...) {
    dev_->warn_failed(dev_->destroy_stream(s), "destroying a stream");
    throw;
  }
  return s;
}

void PagerImpl::destroy_stream(device::StreamHandle s) noexcept {
  observe_.stream_destroyed(s);
  const bool drained = dev_->synchronize_stream(s).ok() || dev_->lost();
  releases_->remove_stream(s, drained);
  dev_->warn_failed(dev_->destroy_stream(s), "destroying a stream");
}

void PagerImpl::launch(device::StreamHandle s, std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  const auto st = dev_->launch_host(
      s,
      [](void* user) {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(user));
        (*f)();
      },
      heap);
  if (!st.ok()) delete heap;
  TVMM_CHECK(st);
}

void PagerImpl::launch_busy(device::StreamHandle s, std::chrono::nanoseconds duration) {
  const device::Status st = dev_->launch_busy(s, duration);
  if (st.code == device::Errc::not_supported) {  // a GPU without tvmm's busy kernel: say why
    throw device_error("tvmm::Stream::busy_for needs a busy kernel on the device: " + dev_->describe(st),
                       "not_supported");
  }
  TVMM_CHECK(st);
}

void PagerImpl::synchronize(device::StreamHandle s) {
  const std::uint64_t taken = releases_->taken(s);
  TVMM_CHECK(dev_->synchronize_stream(s));
  releases_->synchronized(s, taken);
}

device::EventHandle PagerImpl::create_event() {
  device::EventHandle e = nullptr;
  TVMM_CHECK(dev_->create_event(&e, device::EventKind::timing));
  return e;
}

void PagerImpl::destroy_event(device::EventHandle e) noexcept {
  dev_->warn_failed(dev_->destroy_event(e), "destroying an event");
}

void PagerImpl::record_event(device::EventHandle e, device::StreamHandle s) { TVMM_CHECK(dev_->record_event(e, s)); }

std::chrono::nanoseconds PagerImpl::elapsed(device::EventHandle start, device::EventHandle end) {
  TVMM_CHECK(dev_->synchronize_event(end));
  std::chrono::nanoseconds out{0};
  TVMM_CHECK(dev_->event_elapsed(start, end, &out));
  return out;
}

}  // namespace tvmm::vmm
