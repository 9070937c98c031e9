#include "vmm/pager_impl.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "policies/belady_policy.hpp"
#include "vmm/detail/check.hpp"
#include "vmm/detail/scope_guard.hpp"

namespace tvmm::detail {

namespace {

std::string hex(backend::DevPtr p) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, p);
  return buf;
}

std::string tensor_label(const Allocation* a) {
  std::string s = "tensor";
  if (!a->name.empty()) s += " '" + a->name + "'";
  return s + " at " + hex(a->base) + " (" + format_bytes(a->bytes) + ")";
}

// Resolves the page size and budgets against the backend; throws config_error naming the fix.
Config resolve(Config cfg, const backend::DeviceProperties& props) {
  const std::size_t g = props.granularity;
  if (cfg.page_size == 0) cfg.page_size = g;
  if (cfg.page_size % g != 0) {
    throw config_error("page_size = " + format_bytes(cfg.page_size) + " is not a multiple of the " + props.name +
                       " backend's granularity " + format_bytes(g) + "; use " + format_bytes(g) + ", " +
                       format_bytes(2 * g) + ", " + format_bytes(4 * g) + ", ...");
  }
  const std::size_t p = cfg.page_size;
  if (cfg.device_budget < p) {
    throw config_error("device_budget = " + format_bytes(cfg.device_budget) + " is smaller than one page (" +
                       format_bytes(p) + "); raise it or lower page_size");
  }
  if (cfg.host_budget < p) {
    throw config_error("host_budget = " + format_bytes(cfg.host_budget) + " is smaller than one page (" +
                       format_bytes(p) + "); raise it or lower page_size");
  }
  cfg.device_budget = cfg.device_budget / p * p;
  cfg.host_budget = cfg.host_budget / p * p;
  if (cfg.device_budget > props.capacity) {
    throw config_error("device_budget = " + format_bytes(cfg.device_budget) + " exceeds the device's memory (" +
                       format_bytes(props.capacity) + "); lower it");
  }
  if (cfg.va_size == 0) cfg.va_size = std::max<std::size_t>(4 * (cfg.device_budget + cfg.host_budget), GiB);
  cfg.va_size = (cfg.va_size + p - 1) / p * p;
  if (cfg.va_size / p > UINT32_MAX) {
    throw config_error("va_size = " + format_bytes(cfg.va_size) + " holds more than 2^32 pages of " + format_bytes(p) +
                       "; lower va_size or raise page_size");
  }
  return cfg;
}

}  // namespace

PagerImpl::PagerImpl(const Config& config, std::unique_ptr<backend::DeviceBackend> backend)
    : cfg_((config.validate(), config)),
      dev_(backend ? std::move(backend) : backend::make_device_backend(cfg_)),
      page_size_((cfg_ = resolve(cfg_, dev_->properties())).page_size),
      va_storage_(std::make_unique<AddressSpace>(*dev_, cfg_.va_size, page_size_)),
      va_(*va_storage_),
      table_storage_(std::make_unique<PageTable>(va_.pages())),
      table_(*table_storage_),
      events_(*dev_),
      arena_(page_size_) {
  const auto frames = static_cast<std::uint32_t>(cfg_.device_budget / page_size_);
  const auto slots = static_cast<std::uint32_t>(cfg_.host_budget / page_size_);
  device_ = std::make_unique<DeviceTier>(*dev_, page_size_, frames);
  host_ = std::make_unique<HostTier>(*dev_, page_size_, slots);
  xfer_ = std::make_unique<TransferEngine>(*dev_, events_, page_size_);
  policy_ = cfg_.eviction == "belady" ? std::make_unique<policies::BeladyPolicy>(trace_)
                                      : policies::make_eviction_policy(cfg_.eviction);
  tracing_ = cfg_.prefetch == "trace" || cfg_.eviction == "belady";
  // One host slot stays free so that swapping a page in never has to wait for itself (a full device
  // evicts to the host before the incoming page's host slot is released).
  capacity_pages_ = std::uint64_t{frames} + slots - 1;
}

PagerImpl::~PagerImpl() {
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
    (void)xfer_->drain();
    reap(lk);  // unmaps the old addresses of finished evictions
  }
  xfer_.reset();  // drains the copy streams before the tiers go away
  loads_.clear();
  evictions_.clear();
  policy_.reset();
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
    pin(a, Access::write, nullptr);  // fresh pages: frames are mapped, nothing is copied
  } catch (...) {
    drop_owner(a);
    throw;
  }
  std::lock_guard lk(mu_);
  a->pinned_for_life = true;
}

Allocation* PagerImpl::allocate_small(std::size_t bytes, Hints hints) {
  const std::uint32_t units = SmallArena::units_for(bytes);
  Lock lk(mu_);
  auto place = arena_.place(units);
  while (!place) {
    // A new arena page: an ordinary one-page allocation, pinned for life. Made without the lock.
    lk.unlock();
    Allocation* backing = allocate_pages(page_size_, Hints{"small-object arena"}, false);
    pin_for_life(backing);
    lk.lock();
    arena_.add_page(backing);
    place = arena_.place(units);
  }
  auto a = std::make_unique<Allocation>();
  a->id = next_id_++;
  by_id_.emplace(a->id, a.get());
  a->base = place->addr;
  a->bytes = bytes;
  a->first_page = place->page->backing->first_page;
  a->pages = 1;
  a->name = std::move(hints.name);
  a->arena = place->page;
  a->arena_unit = place->unit;
  a->arena_units = units;
  owned_.emplace(a->base, a.get());
  counters_.allocations.fetch_add(1, std::memory_order_relaxed);
  counters_.live_bytes.fetch_add(std::uint64_t{units} * SmallArena::kUnit, std::memory_order_relaxed);
  counters_.live_tensors.fetch_add(1, std::memory_order_relaxed);
  return a.release();
}

Allocation* PagerImpl::allocate_pages(std::size_t bytes, Hints hints, bool owned) {
  const std::string label = hints.name.empty() ? std::string() : " '" + hints.name + "'";
  const std::uint64_t pages = bytes / page_size_ + (bytes % page_size_ != 0 ? 1 : 0);
  Lock lk(mu_);
  const std::uint64_t free_pages = capacity_pages_ - allocated_pages_;
  if (pages > free_pages) {
    throw out_of_memory("tvmm::Pager::allocate" + label + ": cannot allocate " + format_bytes(bytes) + " (" +
                        std::to_string(pages) + " pages of " + format_bytes(page_size_) +
                        "): " + format_bytes(free_pages * page_size_) + " free of " +
                        format_bytes(capacity_pages_ * page_size_) + " (device budget " +
                        format_bytes(cfg_.device_budget) + " + host budget " + format_bytes(cfg_.host_budget) +
                        " - one page kept for swapping); free tensors or raise the budgets");
  }
  const auto first = va_.allocate(static_cast<std::uint32_t>(pages));
  if (!first) {
    throw out_of_memory("tvmm::Pager::allocate" + label + ": no free run of " + std::to_string(pages) +
                        " pages in the " + format_bytes(cfg_.va_size) + " address reservation (largest run " +
                        std::to_string(va_.largest_free_run()) + " pages); raise va_size");
  }
  auto a = std::make_unique<Allocation>();
  a->id = next_id_++;
  by_id_.emplace(a->id, a.get());
  a->base = va_.addr(*first);
  a->bytes = bytes;
  a->first_page = *first;
  a->pages = static_cast<std::uint32_t>(pages);
  a->name = std::move(hints.name);
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = table_[*first + i];
    p.owner = a.get();
    p.set_state(PageState::fresh);
  }
  allocated_pages_ += pages;
  if (owned) {
    owned_.emplace(a->base, a.get());
    counters_.allocations.fetch_add(1, std::memory_order_relaxed);
    counters_.live_bytes.fetch_add(pages * page_size_, std::memory_order_relaxed);
    counters_.live_tensors.fetch_add(1, std::memory_order_relaxed);
  }
  a->owned = owned;
  return a.release();
}

void PagerImpl::mark_raw(Allocation* a) noexcept {
  std::lock_guard lk(mu_);
  a->raw_owned = true;
}

void PagerImpl::free_raw(void* ptr) {
  const auto addr = reinterpret_cast<backend::DevPtr>(ptr);
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
  if (for_life) unpin(a, nullptr);  // the pin taken at allocation; its reference goes with it
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
  //    completed write-backs as they finish. Pages leave transit only under mu_.
  for (;;) {
    bool busy = false;
    for (std::uint32_t i = 0; i < a->pages && !busy; ++i) busy = pages[i].state() == PageState::transit;
    if (!busy) break;
    try {
      (void)wait_progress(lk, Clock::time_point::max());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: waiting for transfers of %s: %s\n", tensor_label(a).c_str(), ex.what());
      cv_.wait_for(lk, std::chrono::milliseconds(1));
    }
  }
  // 2. Claim every page so no other thread can choose one as a victim meanwhile.
  std::vector<EventRef> waits;
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = pages[i];
    if (p.state() == PageState::device) policy_->remove(p);
    p.set_state(PageState::transit);
    if (p.ready != nullptr) waits.emplace_back(p.ready);
  }
  {
    std::lock_guard ul(a->uses_mu);
    for (auto& u : a->uses) waits.push_back(std::move(u.done));
    a->uses.clear();
    a->use_count.store(0, std::memory_order_release);
  }
  // 3. Wait, without the lock, for queued work that may still touch the pages: their last stream uses
  //    and page-ins. Unmapping is not stream-ordered.
  lk.unlock();
  for (auto& e : waits) {
    try {
      events_.wait(e.get());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: waiting for the last use of %s failed: %s\n", tensor_label(a).c_str(), ex.what());
    }
  }
  waits.clear();
  lk.lock();
  reap(lk);
  // 4. Unmap, return frames and slots, and give the address range back.
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    PageEntry& p = pages[i];
    if (p.frame != kNoFrame) {
      try {
        xfer_->unmap(va_of(p));
        device_->release(p.frame);
      } catch (const std::exception& ex) {
        // The frame stays mapped at a dead address: leak it rather than hand out memory in use.
        std::fprintf(stderr, "tvmm: %s; leaking one device frame\n", ex.what());
      }
      p.frame = kNoFrame;
    }
    if (p.host_slot != kNoSlot) {
      host_->release(p.host_slot);
      p.host_slot = kNoSlot;
    }
    if (p.ready != nullptr) EventRef::drop(std::exchange(p.ready, nullptr));
    p.owner = nullptr;
    p.set_state(PageState::unused);
  }
  va_.free(a->first_page, a->pages);
  allocated_pages_ -= a->pages;
  by_id_.erase(a->id);
  if (a->owned) {
    counters_.live_bytes.fetch_sub(std::uint64_t{a->pages} * page_size_, std::memory_order_relaxed);
    counters_.live_tensors.fetch_sub(1, std::memory_order_relaxed);
  }
  lk.unlock();
  cv_.notify_all();
  delete a;
}

// A small allocation owns no pages: wait for its last stream uses, then return its units to the arena
// (and release the arena page if it became empty).
void PagerImpl::reclaim_small(Allocation* a) noexcept {
  std::vector<EventRef> waits;
  {
    std::lock_guard ul(a->uses_mu);
    for (auto& u : a->uses) waits.push_back(std::move(u.done));
    a->uses.clear();
  }
  for (auto& e : waits) {
    try {
      events_.wait(e.get());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: waiting for the last use of %s failed: %s\n", tensor_label(a).c_str(), ex.what());
    }
  }
  Allocation* empty_page = nullptr;
  {
    std::lock_guard lk(mu_);
    empty_page = arena_.release(a->arena, a->arena_unit, a->arena_units);
    by_id_.erase(a->id);
  }
  counters_.live_bytes.fetch_sub(std::uint64_t{a->arena_units} * SmallArena::kUnit, std::memory_order_relaxed);
  counters_.live_tensors.fetch_sub(1, std::memory_order_relaxed);
  delete a;
  if (empty_page != nullptr) drop_owner(empty_page);
}

// --- pin counts ---------------------------------------------------------------------------------------

bool PagerImpl::try_pin_resident(PageEntry& p) noexcept {
  std::uint64_t w = p.word.load(std::memory_order_acquire);
  do {
    if (word::state(w) != PageState::device || word::pending(w) || word::pins(w) == word::kPinMax) return false;
  } while (!p.word.compare_exchange_weak(w, w + word::kPinOne, std::memory_order_acq_rel, std::memory_order_acquire));
  if (word::pins(w) == 0) pinned_pages_.fetch_add(1);
  return true;
}

void PagerImpl::pin_page(PageEntry& p) noexcept {
  const auto old = p.word.fetch_add(word::kPinOne, std::memory_order_acq_rel);
  if (word::pins(old) == 0) pinned_pages_.fetch_add(1);
}

void PagerImpl::unpin_page_locked(PageEntry& p) noexcept {
  const auto old = p.word.fetch_sub(word::kPinOne, std::memory_order_acq_rel);
  if (word::pins(old) == 1) {
    pinned_pages_.fetch_sub(1);
    cv_.notify_all();
  }
}

void PagerImpl::unpin_page(PageEntry& p) noexcept {
  const auto old = p.word.fetch_sub(word::kPinOne, std::memory_order_acq_rel);
  if (word::pins(old) == 1) {
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

void PagerImpl::pin(Allocation* a, Access access, backend::StreamHandle stream) {
  counters_.pins.fetch_add(1, std::memory_order_relaxed);
  if (a->arena != nullptr) {  // in the resident arena: nothing moves; a host pin still orders after uses
    if (stream == nullptr && a->use_count.load(std::memory_order_acquire) != 0) wait_for_uses(a);
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    a->refs.fetch_add(1, std::memory_order_relaxed);
    if (tracing_) record_pin(a, access);
    return;
  }
  PageEntry* pages = pages_of(a);
  const std::uint32_t n = a->pages;
  // Hit path: every page resident with its page-in complete. Only pin counts and recency change; the
  // caller's stream needs no ordering and the calling thread never blocks.
  std::uint32_t i = 0;
  while (i < n && try_pin_resident(pages[i])) ++i;
  if (i == n) {
    policy_->touch(pages, n);
    counters_.hits.fetch_add(n, std::memory_order_relaxed);
  } else {
    while (i > 0) unpin_page(pages[--i]);
    pin_slow(a, access, stream);
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
  if (tracing_) record_pin(a, access);
}

// --- access trace: record, replay, prefetch ahead ------------------------------------------------------

void PagerImpl::record_pin(const Allocation* a, Access access) noexcept {
  const policies::TraceAccess acc{a->id, a->arena != nullptr ? 0 : a->pages, access == Access::write};
  const auto ahead = trace_.on_pin(acc, cfg_.prefetch_distance);
  if (cfg_.prefetch == "trace" && !ahead.empty()) prefetch_ahead(ahead);
}

void PagerImpl::mark_iteration() {
  const auto ahead = trace_.on_iteration(cfg_.prefetch_distance);
  if (tracing_ && cfg_.prefetch == "trace" && !ahead.empty()) prefetch_ahead(ahead);
}

void PagerImpl::prefetch_ahead(const std::vector<AccessTrace::Ahead>& ahead) noexcept {
  try {
    Lock lk(mu_);
    reap(lk);
    for (const auto& target : ahead) {
      // A pin that overwrites its tensor needs no data: its own pin maps fresh frames. (Loading with
      // discard here would lose data if the program's access changed: the trace only guides.)
      if (target.discard) continue;
      auto it = by_id_.find(target.tensor);
      if (it == by_id_.end() || it->second->arena != nullptr) continue;
      Allocation* a = it->second;
      PageEntry* pages = pages_of(a);
      std::vector<PageEntry*> todo;
      for (std::uint32_t i = 0; i < a->pages; ++i) {
        if (pages[i].state() == PageState::host) todo.push_back(&pages[i]);
      }
      if (todo.empty()) continue;
      // Never evict for this a page needed no later than it: its own, or any tensor pinned before it.
      auto needed_sooner = [&](const PageEntry& p) {
        return p.owner == a || trace_.next_use(p.owner->id) <= target.distance;
      };
      const FunctionRef<bool(const PageEntry&)> protect(needed_sooner);  // refers to the lambda above
      protect_ = &protect;
      ScopeGuard unset([&] { protect_ = nullptr; });
      // No waiting: load what free or evictable frames allow (load_pages does not unlock without may_wait).
      const auto loaded = load_pages(lk, todo, Access::read_write, Clock::now(), false);
      counters_.prefetched.fetch_add(loaded, std::memory_order_relaxed);
      if (loaded < todo.size()) break;  // no room for this one: none for the ones after it either
    }
  } catch (const std::exception& ex) {
    // Prefetch is a hint: a failure leaves the pages where they were; the pin that needs them reports.
    std::fprintf(stderr, "tvmm: trace prefetch failed: %s\n", ex.what());
  }
}

// A host pin sees the tensor as the device left it: wait for the work that stream pins queued on it.
void PagerImpl::wait_for_uses(Allocation* a) {
  std::vector<EventRef> waits;
  {
    std::lock_guard ul(a->uses_mu);
    for (auto& u : a->uses) waits.push_back(u.done);
  }
  const auto t0 = Clock::now();
  for (auto& e : waits) events_.wait(e.get());
  counters_.stall_ns.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()),
      std::memory_order_relaxed);
  std::lock_guard ul(a->uses_mu);
  std::erase_if(a->uses, [&](const Allocation::Use& u) { return u.done.get()->done.load(std::memory_order_acquire); });
  a->use_count.store(static_cast<std::uint32_t>(a->uses.size()), std::memory_order_release);
}

void PagerImpl::pin_slow(Allocation* a, Access access, backend::StreamHandle stream) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + cfg_.wait_timeout;
  PageEntry* pages = pages_of(a);
  const std::uint32_t n = a->pages;
  const std::uint32_t budget = device_->budget();
  // Registered as a waiter for the whole slow path, before any condition is tested, so an unpin that
  // races with a test below always takes mu_ before notifying (see wake_waiters).
  waiters_.fetch_add(1);
  ScopeGuard unregister([&] { waiters_.fetch_sub(1); });
  Lock lk(mu_);
  reap(lk);

  // 1. Admission: the pinned working set must fit the device budget. A tensor larger than the budget
  //    never fits; otherwise wait (bounded) for other pins to be released.
  if (n > budget) {
    throw out_of_memory("tvmm: cannot pin " + tensor_label(a) + ": it needs " + std::to_string(n) +
                        " device pages but the device budget is " + std::to_string(budget) + " pages (" +
                        format_bytes(cfg_.device_budget) + "); raise device_budget or split the tensor");
  }
  for (;;) {
    std::uint64_t unpinned = 0;
    for (std::uint32_t i = 0; i < n; ++i) unpinned += word::pins(pages[i].word.load()) == 0 ? 1 : 0;
    if (pinned_pages_.load() + unpinned <= budget) break;
    if (!wait_for_change(lk, deadline)) {
      throw out_of_memory("tvmm: cannot pin " + tensor_label(a) + ": " + std::to_string(pinned_pages_.load()) +
                          " of the " + std::to_string(budget) + " device pages are pinned and " +
                          std::to_string(unpinned) + " more are needed; no pin was released within " +
                          std::to_string(cfg_.wait_timeout.count()) +
                          " ms. The pinned working set exceeds the device budget: release pins sooner or "
                          "raise device_budget");
    }
  }

  // 2. Pin every page first, so none of them is chosen as a victim while the others are loaded.
  for (std::uint32_t i = 0; i < n; ++i) pin_page(pages[i]);
  ScopeGuard rollback([&] {
    for (std::uint32_t i = 0; i < n; ++i) unpin_page_locked(pages[i]);
  });

  // 3. Make every page resident; this may evict, and waits for transfers other threads run on them.
  std::uint64_t misses = 0;
  std::vector<EventRef> waits = make_resident(lk, a, access, deadline, misses);
  rollback.dismiss();
  policy_->touch(pages, n);
  lk.unlock();
  counters_.misses.fetch_add(misses, std::memory_order_relaxed);
  counters_.hits.fetch_add(n - misses, std::memory_order_relaxed);

  // 4. Order the caller after the page-ins: its stream waits (the thread does not), or, for a
  //    host-synchronous pin, the thread waits.
  try {
    for (auto& e : waits) {
      if (stream != nullptr) {
        xfer_->stream_wait(stream, e.get());
      } else {
        events_.wait(e.get());
      }
    }
  } catch (...) {
    for (std::uint32_t i = 0; i < n; ++i) unpin_page(pages[i]);
    throw;
  }
  counters_.stall_ns.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()),
      std::memory_order_relaxed);
}

std::vector<EventRef> PagerImpl::make_resident(Lock& lk, Allocation* a, Access access, Clock::time_point deadline,
                                               std::uint64_t& misses) {
  PageEntry* pages = pages_of(a);
  std::vector<PageEntry*> todo;
  for (;;) {
    todo.clear();
    bool busy = false;
    for (std::uint32_t i = 0; i < a->pages; ++i) {
      const auto s = pages[i].state();
      if (s == PageState::fresh || s == PageState::host) todo.push_back(&pages[i]);
      busy = busy || s == PageState::transit;
    }
    if (!todo.empty()) {
      misses += load_pages(lk, todo, access, deadline, true);
      continue;
    }
    if (!busy) break;
    // Another thread is moving some of these pages (evicting them, or loading them for its own pin).
    if (!wait_progress(lk, deadline)) {
      throw timeout_error("tvmm: pinning " + tensor_label(a) + ": its pages stayed in transit for " +
                          std::to_string(cfg_.wait_timeout.count()) + " ms");
    }
  }
  std::vector<EventRef> waits;
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    Event* e = pages[i].ready;
    if (e != nullptr && (waits.empty() || waits.back().get() != e) && !events_.is_done(e)) waits.emplace_back(e);
  }
  return waits;
}

std::size_t PagerImpl::load_pages(Lock& lk, std::vector<PageEntry*>& todo, Access access, Clock::time_point deadline,
                                  bool may_wait) {
  // 1. Claim the pages: in transit, no other thread loads, evicts or frees them.
  std::vector<PageState> before(todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    before[i] = todo[i]->state();
    todo[i]->set_state(PageState::transit);
  }
  std::size_t loaded = 0;
  ScopeGuard restore([&] {
    for (std::size_t i = loaded; i < todo.size(); ++i) todo[i]->set_state(before[i]);
    cv_.notify_all();
  });
  // Chunk by chunk: a chunk's page-ins release host slots that the next chunk's evictions may need, so
  // swapping a tensor in never waits on its own slots.
  while (loaded < todo.size()) {
    // 2. Frames for (some of) the remaining pages; evicts least-recently-used pages when full.
    Frames got = acquire_frames(lk, todo.size() - loaded, deadline, may_wait);
    if (got.frames.empty()) break;  // only without may_wait: nothing evictable now
    const std::size_t n = got.frames.size();
    load_chunk(std::span(todo).subspan(loaded, n), std::span(before).subspan(loaded, n), got, access);
    loaded += n;
  }
  return loaded;  // `restore` puts back any page left without a frame and wakes waiters
}

void PagerImpl::load_chunk(std::span<PageEntry* const> pages, std::span<const PageState> before, Frames& got,
                           Access access) {
  const std::size_t count = pages.size();
  ScopeGuard give_back([&] { release_frames(got); });
  // 3. Map the pages at their addresses (grouping access grants per contiguous run). A frame taken from
  //    a victim is still mapped at the victim's address until its write-back is retired: one physical
  //    frame may be mapped at two addresses, and every use at the new one is ordered after `got.after`.
  for (PageEntry* p : pages) {
    if (p->stale_mapping) {  // an earlier eviction could not unmap this address: try again first
      (void)dev_->unmap(va_of(*p), page_size_);
      p->stale_mapping = false;
    }
  }
  std::vector<MapRequest> reqs(count);
  for (std::size_t i = 0; i < count; ++i) reqs[i] = {va_of(*pages[i]), device_->chunk(got.frames[i])};
  xfer_->map(reqs);
  // 4. Queue the page-ins of pages that hold data (unless the caller overwrites them, Access::write),
  //    after the write-backs of the frames' previous pages.
  auto needs_copy = [&](std::size_t i) { return before[i] == PageState::host && access != Access::write; };
  std::vector<std::uint32_t> copied;
  EventRef done;
  try {
    for (auto& e : got.after) xfer_->order_copy_in_after(e.get());
    for (std::size_t i = 0; i < count; ++i) {
      if (!needs_copy(i)) continue;
      xfer_->copy_in(va_of(*pages[i]), host_->ptr(pages[i]->host_slot));
      copied.push_back(table_.index_of(*pages[i]));
    }
    // One event for the chunk: it also implies the write-backs it waited for, so pages that were not
    // copied (fresh, or Access::write) are usable once it completes.
    if (!copied.empty() || !got.after.empty()) done = xfer_->record_in();
  } catch (...) {
    // Copies already queued may still run: drain them before unmapping and reusing the frames. The
    // host copies were not touched, so the pages stay readable where they were.
    if (xfer_->drain()) {
      for (std::size_t i = 0; i < count; ++i) (void)dev_->unmap(va_of(*pages[i]), page_size_);
    } else {
      // The device cannot tell when its copies end: keep the frames mapped and out of the pool rather
      // than let a copy land in reused memory.
      std::fprintf(stderr, "tvmm: copy streams cannot be drained; retiring %zu device frames\n", count);
      got.frames.clear();
    }
    throw;
  }

  // 5. Publish: resident, known to the policy, pending until `done` completes.
  for (std::size_t i = 0; i < count; ++i) {
    PageEntry& p = *pages[i];
    p.frame = got.frames[i];
    if (!needs_copy(i) && p.host_slot != kNoSlot) {
      host_->release(p.host_slot);  // contents discarded (Access::write): the host copy is dead
      p.host_slot = kNoSlot;
    }
    if (done) p.ready = EventRef(done).detach();
    policy_->insert(p);
    p.set_state(PageState::device, static_cast<bool>(done));
  }
  if (done) {
    std::vector<std::uint32_t> idx(count);
    for (std::size_t i = 0; i < count; ++i) idx[i] = table_.index_of(*pages[i]);
    loads_.push_back(LoadBatch{std::move(done), std::move(idx)});
  }
  got.frames.clear();
  got.after.clear();
  give_back.dismiss();
}

void PagerImpl::release_frames(Frames& got) noexcept {
  // Frames from victims may still be written back: the pool must not hand them out before that, so
  // wait here (only failure paths get here with pending write-backs).
  for (auto& e : got.after) {
    try {
      events_.wait(e.get());
    } catch (...) {
      got.frames.clear();  // the device cannot say when the copies end: retire the frames
    }
  }
  for (auto f : got.frames) device_->release(f);
  got.frames.clear();
  got.after.clear();
}

// Returns between 1 and `count` frames (0 only without may_wait): rather than block while holding
// frames, it hands back what it has so the caller can start those page-ins.
PagerImpl::Frames PagerImpl::acquire_frames(Lock& lk, std::size_t count, Clock::time_point deadline, bool may_wait) {
  Frames got;
  ScopeGuard give_back([&] { release_frames(got); });
  while (got.frames.size() < count) {
    while (got.frames.size() < count) {
      auto f = device_->try_acquire();
      if (!f) break;
      got.frames.push_back(*f);
    }
    if (got.frames.size() == count) break;
    reap(lk);
    std::vector<PageEntry*> victims = select_victims(count - got.frames.size());
    if (!victims.empty()) {
      got.after.push_back(evict(victims, got.frames));
      continue;
    }
    if (!got.frames.empty() || !may_wait) break;
    // Nothing evictable now: the device is full of pinned or in-transit pages, or the host tier has no
    // slot for a victim until a page-in completes. Wait for a transfer, an unpin or the deadline.
    if (!wait_progress(lk, deadline)) {
      throw out_of_memory("tvmm: no device frame can be freed: " + describe_device() + "; waited " +
                          std::to_string(cfg_.wait_timeout.count()) +
                          " ms for pins to be released. The pinned working set exceeds the device budget");
    }
  }
  give_back.dismiss();
  return got;
}

std::vector<PageEntry*> PagerImpl::select_victims(std::size_t count) {
  std::vector<PageEntry*> victims;
  std::uint32_t slots = host_->free_count();
  policy_->select(count, [&](PageEntry& p) {
    if (protect_ != nullptr && (*protect_)(p)) return false;
    const bool needs_slot = p.host_slot == kNoSlot;
    if (needs_slot && slots == 0) return false;
    std::uint64_t w = p.word.load(std::memory_order_acquire);
    do {
      if (word::state(w) != PageState::device || word::pins(w) != 0) return false;
    } while (!p.word.compare_exchange_weak(w, word::with_state(w, PageState::transit), std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    if (needs_slot) --slots;
    victims.push_back(&p);
    return true;
  });
  return victims;
}

// Starts evicting `victims` (claimed: in transit, unpinned, out of the policy) to the host tier and
// appends their frames to `frames` at once, without waiting: the returned event completes when the
// write-backs have, and every use of the frames must be ordered after it. The victims stay in transit,
// still mapped at their own addresses, until reap() sees the event complete and unmaps them.
EventRef PagerImpl::evict(std::vector<PageEntry*>& victims, std::vector<std::uint32_t>& frames) {
  for (PageEntry* v : victims) {
    if (v->host_slot == kNoSlot) v->host_slot = *host_->try_acquire();  // select_victims counted free slots
  }
  EventRef done;
  try {
    // 1. Order the write-backs after each victim's last uses (stream pins' release points) and after
    //    its own page-in, on the copy stream: the host does not wait for those.
    std::vector<Event*> after;
    for (PageEntry* v : victims) {
      if (v->ready != nullptr) after.push_back(v->ready);
      std::lock_guard ul(v->owner->uses_mu);
      auto& uses = v->owner->uses;
      std::erase_if(uses, [&](const Allocation::Use& u) { return events_.is_done(u.done.get()); });
      v->owner->use_count.store(static_cast<std::uint32_t>(uses.size()), std::memory_order_release);
      for (auto& u : uses) after.push_back(u.done.get());
    }
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    for (Event* e : after) {
      if (!events_.is_done(e)) xfer_->order_copy_out_after(e);
    }
    // 2. Queue the write-backs; one event marks them all.
    for (PageEntry* v : victims) xfer_->copy_out(host_->ptr(v->host_slot), va_of(*v));
    done = xfer_->record_out();
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
  EvictionBatch batch{done, {}};
  for (PageEntry* v : victims) {
    frames.push_back(v->frame);
    v->frame = kNoFrame;
    if (v->ready != nullptr) EventRef::drop(std::exchange(v->ready, nullptr));
    batch.pages.push_back(table_.index_of(*v));
  }
  evictions_.push_back(std::move(batch));
  counters_.evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  return done;
}

// Retires completed transfers, oldest first: page-ins release their host slots and clear their pages'
// pending flags; write-backs unmap their victims' old addresses and publish the victims on the host.
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
  while (!evictions_.empty() && events_.is_done(evictions_.front().done.get())) {
    for (auto idx : evictions_.front().pages) {
      PageEntry& v = table_[idx];
      if (!dev_->unmap(va_of(v), page_size_).ok()) {
        // The data is safe on the host; the next load of this page unmaps before mapping again.
        std::fprintf(stderr, "tvmm: unmapping an evicted page at %s failed; retrying at its next page-in\n",
                     hex(va_of(v)).c_str());
        v.stale_mapping = true;
      }
      v.set_state(PageState::host);
    }
    evictions_.pop_front();
    retired = true;
  }
  if (retired) cv_.notify_all();
  return retired;
}

bool PagerImpl::wait_progress(Lock& lk, Clock::time_point deadline) {
  if (reap(lk)) return true;  // that was the progress: the caller re-checks its condition
  // Transfers in flight make progress by themselves: wait for the oldest, then retire it.
  EventRef oldest;
  if (!evictions_.empty()) {
    oldest = evictions_.front().done;
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

// --- unpin and prefetch ---------------------------------------------------------------------------------

void PagerImpl::unpin(Allocation* a, backend::StreamHandle stream) noexcept {
  if (stream != nullptr) {
    // The release point: the stream's work queued so far. Recorded before the pin counts drop, so an
    // evictor that sees zero pins also sees this event.
    try {
      EventRef e = events_.acquire();
      TVMM_CHECK(dev_->record_event(e.get()->handle, stream));
      std::lock_guard ul(a->uses_mu);
      auto same =
          std::find_if(a->uses.begin(), a->uses.end(), [&](const Allocation::Use& u) { return u.stream == stream; });
      if (same != a->uses.end()) {
        same->done = std::move(e);
      } else {
        a->uses.push_back({stream, std::move(e)});
        a->use_count.store(static_cast<std::uint32_t>(a->uses.size()), std::memory_order_release);
      }
    } catch (const std::exception& ex) {
      // Without an event the only safe release point is now: wait for the stream.
      std::fprintf(stderr, "tvmm: recording the release of %s failed (%s); synchronizing its stream\n",
                   tensor_label(a).c_str(), ex.what());
      (void)dev_->synchronize_stream(stream);
    }
  }
  if (a->arena == nullptr) {
    PageEntry* pages = pages_of(a);
    for (std::uint32_t i = 0; i < a->pages; ++i) unpin_page(pages[i]);
  }
  if (a->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(a);
}

void PagerImpl::prefetch(Allocation* a, backend::StreamHandle stream) {
  if (a->arena != nullptr) return;  // always resident
  PageEntry* pages = pages_of(a);
  Lock lk(mu_);
  reap(lk);
  // Prefetch is a hint: it loads what fits beside the pinned pages, never waits for pins, and skips
  // pages that are fresh (no data) or already moving.
  const std::uint64_t room = device_->budget() - std::min<std::uint64_t>(device_->budget(), pinned_pages_.load());
  std::vector<PageEntry*> todo;
  for (std::uint32_t i = 0; i < a->pages && todo.size() < room; ++i) {
    if (pages[i].state() == PageState::host) todo.push_back(&pages[i]);
  }
  std::size_t loaded = 0;
  if (!todo.empty()) loaded = load_pages(lk, todo, Access::read_write, Clock::now(), false);
  std::vector<EventRef> waits;
  for (std::uint32_t i = 0; i < a->pages; ++i) {
    Event* e = pages[i].ready;
    if (e != nullptr && (waits.empty() || waits.back().get() != e)) waits.emplace_back(e);
  }
  lk.unlock();
  counters_.prefetched.fetch_add(loaded, std::memory_order_relaxed);
  for (auto& e : waits) xfer_->stream_wait(stream, e.get());
}

// --- streams --------------------------------------------------------------------------------------------

backend::StreamHandle PagerImpl::create_stream() {
  backend::StreamHandle s = nullptr;
  TVMM_CHECK(dev_->create_stream(&s));
  return s;
}

void PagerImpl::destroy_stream(backend::StreamHandle s) noexcept {
  (void)dev_->synchronize_stream(s);
  if (auto st = dev_->destroy_stream(s); !st.ok()) {
    std::fprintf(stderr, "tvmm: destroying a stream failed: %s\n", backend::errc_name(st.code));
  }
}

void PagerImpl::launch(backend::StreamHandle s, std::function<void()> fn) {
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

void PagerImpl::synchronize(backend::StreamHandle s) { TVMM_CHECK(dev_->synchronize_stream(s)); }

// --- inspection ------------------------------------------------------------------------------------------

namespace {
Tier tier_from(PageState s) noexcept {
  switch (s) {
    case PageState::device: return Tier::device;
    case PageState::host: return Tier::host;
    case PageState::transit: return Tier::transit;
    case PageState::fresh:
    case PageState::unused: return Tier::none;
  }
  return Tier::none;
}
}  // namespace

Tier PagerImpl::tier(const Allocation* a, std::size_t offset) {
  if (offset >= a->bytes) {
    throw invalid_argument("tvmm::Tensor::tier: offset " + std::to_string(offset) + " is outside " + tensor_label(a));
  }
  if (a->arena != nullptr) return Tier::device;
  Lock lk(mu_);
  reap(lk);
  return tier_from(table_[a->first_page + static_cast<std::uint32_t>(offset / page_size_)].state());
}

Tier PagerImpl::tier_of(backend::DevPtr addr) {
  const auto page = va_.page_of(addr);
  Lock lk(mu_);
  if (!page || table_[*page].owner == nullptr || addr >= table_[*page].owner->base + table_[*page].owner->bytes) {
    throw invalid_argument("tvmm::Pager::tier_of(" + hex(addr) + "): not inside a live tvmm tensor");
  }
  reap(lk);
  return tier_from(table_[*page].state());
}

Stats PagerImpl::stats() const {
  Stats s;
  const auto in = xfer_->pages_in();
  const auto out = xfer_->pages_out();
  s.host_to_device = {in * page_size_, in};
  s.device_to_host = {out * page_size_, out};
  s.pins = counters_.pins.load(std::memory_order_relaxed);
  s.hits = counters_.hits.load(std::memory_order_relaxed);
  s.misses = counters_.misses.load(std::memory_order_relaxed);
  s.evictions = counters_.evictions.load(std::memory_order_relaxed);
  s.prefetched = counters_.prefetched.load(std::memory_order_relaxed);
  s.trace_divergences = trace_.divergences();
  s.stall_ns = counters_.stall_ns.load(std::memory_order_relaxed);
  s.allocations = counters_.allocations.load(std::memory_order_relaxed);
  s.live_bytes = counters_.live_bytes.load(std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  s.device_used_bytes = std::uint64_t{device_->in_use()} * page_size_;
  s.device_peak_bytes = std::uint64_t{device_->peak()} * page_size_;
  s.host_used_bytes = std::uint64_t{host_->in_use()} * page_size_;
  s.host_peak_bytes = std::uint64_t{host_->peak()} * page_size_;
  s.device_budget = cfg_.device_budget;
  s.host_budget = cfg_.host_budget;
  s.page_size = page_size_;
  return s;
}

std::string PagerImpl::describe_device() const {
  std::uint64_t pinned = 0, transit = 0, resident = 0;
  for (std::uint32_t i = 0; i < table_.size(); ++i) {
    const auto w = table_[i].word.load();
    if (table_[i].frame == kNoFrame) continue;
    ++resident;
    if (word::pins(w) != 0) ++pinned;
    if (word::state(w) == PageState::transit) ++transit;
  }
  return std::to_string(device_->budget()) + " device pages (" + format_bytes(cfg_.device_budget) + "), " +
         std::to_string(resident) + " holding data, " + std::to_string(pinned) + " pinned, " + std::to_string(transit) +
         " in transit";
}

void PagerImpl::check_invariants() const {
  std::lock_guard lk(mu_);
  auto fail = [](const std::string& what) {
    throw tvmm::device_error("tvmm invariant violated: " + what, "invariant");
  };
  std::vector<std::uint8_t> frame_owner(device_->created(), 0);
  std::vector<std::uint8_t> slot_owner(host_->budget(), 0);
  std::uint64_t frames = 0, slots = 0, device_pages = 0, pinned = 0, pages = 0;
  for (std::uint32_t i = 0; i < table_.size(); ++i) {
    const PageEntry& p = table_[i];
    const auto w = p.word.load();
    const auto s = word::state(w);
    const std::string where = "page " + std::to_string(i) + " (" + to_string(s) + ")";
    if (s == PageState::unused) {
      if (p.owner != nullptr || p.frame != kNoFrame || p.host_slot != kNoSlot) fail(where + " holds resources");
      continue;
    }
    ++pages;
    if (p.owner == nullptr) fail(where + " has no owner");
    if (word::pins(w) != 0) ++pinned;
    if (s == PageState::device) {
      ++device_pages;
      if (p.frame == kNoFrame) fail(where + " has no frame");
      if (word::pending(w) != (p.ready != nullptr)) fail(where + " pending flag disagrees with its page-in event");
    }
    if (s == PageState::host && (p.host_slot == kNoSlot || p.frame != kNoFrame)) fail(where + " misplaced");
    if (s == PageState::fresh && (p.host_slot != kNoSlot || p.frame != kNoFrame)) fail(where + " holds resources");
    if (p.frame != kNoFrame) {
      if (p.frame >= frame_owner.size() || frame_owner[p.frame]++ != 0) fail(where + " shares its frame");
      ++frames;
    }
    if (p.host_slot != kNoSlot) {
      if (p.host_slot >= slot_owner.size() || slot_owner[p.host_slot]++ != 0) fail(where + " shares its host slot");
      ++slots;
    }
  }
  if (frames != device_->in_use())
    fail("device tier counts " + std::to_string(device_->in_use()) + " frames in use but pages hold " +
         std::to_string(frames));
  if (slots != host_->in_use())
    fail("host tier counts " + std::to_string(host_->in_use()) + " slots in use but pages hold " +
         std::to_string(slots));
  if (device_->in_use() > device_->budget() || device_->peak() > device_->budget()) fail("device budget exceeded");
  if (host_->in_use() > host_->budget() || host_->peak() > host_->budget()) fail("host budget exceeded");
  if (pinned != pinned_pages_.load()) fail("pinned page count is off");
  if (pages != allocated_pages_) fail("allocated page count is off");
  if (policy_->size() != device_pages)
    fail("policy tracks " + std::to_string(policy_->size()) + " pages but " + std::to_string(device_pages) +
         " are resident");
}

}  // namespace tvmm::detail
