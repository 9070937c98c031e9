#include "vmm/transparent_heap.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tvmm/errors.hpp"
#include "vmm/detail/check.hpp"
#include "vmm/detail/scope_guard.hpp"
#include "vmm/resolve_config.hpp"

namespace tvmm::detail {

using backend::ChunkLocation;
using backend::DevPtr;

namespace {

std::size_t pages_for(std::size_t bytes, std::size_t page) { return (bytes + page - 1) / page; }

}  // namespace

TransparentHeap::TransparentHeap(const Config& config, Drain drain, std::unique_ptr<backend::DeviceBackend> dev)
    : cfg_((config.validate(), config)),
      drain_(std::move(drain)),
      dev_(dev ? std::move(dev) : backend::make_device_backend(cfg_)) {
  if (!dev_->properties().host_chunks) {
    throw device_error("transparent mode needs host-located VMM memory (cuMemCreate at a host NUMA node), which the " +
                           dev_->properties().name + " device does not support",
                       "not_supported");
  }
  cfg_ = resolve_config(cfg_, dev_->properties());
  page_ = cfg_.page_size;
  // One page more than the tiers' address range: the staging page where remaps fill their target.
  space_ = std::make_unique<AddressSpace>(*dev_, cfg_.va_size + page_, page_);
  const auto staging = space_->allocate(1);
  staging_ = space_->addr(*staging);
  lo_ = space_->base();
  hi_ = lo_ + std::uint64_t{space_->pages()} * page_;
  device_ = std::make_unique<DeviceTier>(*dev_, page_, static_cast<std::uint32_t>(cfg_.device_budget / page_));
  host_ = std::make_unique<DeviceTier>(*dev_, page_, static_cast<std::uint32_t>(cfg_.host_budget / page_),
                                       ChunkLocation::host);
  TVMM_CHECK(dev_->create_stream(&stream_));
}

TransparentHeap::~TransparentHeap() {
  Lock lk(mu_);
  while (!blocks_.empty()) release_block(lk, blocks_.begin());
  if (stream_ != nullptr) (void)dev_->destroy_stream(stream_);
}

bool TransparentHeap::contains(const void* ptr) const noexcept {
  const auto p = reinterpret_cast<DevPtr>(ptr);
  return p >= lo_ && p < hi_;
}

std::size_t TransparentHeap::free_pages(const Lock&) const noexcept {
  return device_->budget() + host_->budget() - used_pages_;
}

void TransparentHeap::drain_once(bool& drained) {
  if (drained) return;
  if (drain_) drain_();
  ++counters_.drains;
  drained = true;
}

void* TransparentHeap::allocate(std::size_t bytes) {
  if (bytes == 0) throw invalid_argument("tvmm: an allocation of 0 bytes");
  const std::size_t n = pages_for(bytes, page_);
  Lock lk(mu_);
  bool drained = false;
  auto any_deferred = [&] {
    return std::any_of(blocks_.begin(), blocks_.end(), [](const auto& b) { return b.second.deferred; });
  };
  if (n > free_pages(lk) && any_deferred()) {
    drain_once(drained);
    release_deferred(lk);
  }
  if (n > free_pages(lk)) {
    throw out_of_memory("tvmm: cannot allocate " + format_bytes(bytes) +
                        ": transparent mode holds the device budget (" + format_bytes(cfg_.device_budget) +
                        ") plus the host budget (" + format_bytes(cfg_.host_budget) + "), and " +
                        format_bytes(used_pages_ * page_) +
                        " of it is in use; raise TVMM_HOST_BUDGET (the NVMe tier needs the explicit API)");
  }
  auto first = space_->allocate(static_cast<std::uint32_t>(n));
  if (!first) {
    throw out_of_memory("tvmm: cannot allocate " + format_bytes(bytes) +
                        ": no free run that long in the address reservation (va_size = " + format_bytes(cfg_.va_size) +
                        "); raise TVMM_VA_SIZE");
  }
  ScopeGuard give_back_va([&] { space_->free(*first, static_cast<std::uint32_t>(n)); });

  // 1. Room on the device: a new allocation is the hottest memory there is, so colder pages make way.
  const std::size_t on_device = std::min<std::size_t>(n, device_->budget());
  const std::size_t idle = device_->budget() - device_->in_use();
  if (on_device > idle) {
    drain_once(drained);
    demote(lk, on_device - idle, nullptr);
  }

  // 2. Map every page: device frames first, host chunks for the rest.
  Block b;
  b.first = *first;
  b.bytes = bytes;
  b.last_use = ++clock_;
  b.pages.reserve(n);
  const DevPtr va = space_->addr(*first);
  ScopeGuard unmap_partial([&] {
    for (std::size_t i = 0; i < b.pages.size(); ++i) {
      (void)dev_->unmap(va + i * page_, page_);
      pool(b.pages[i].where).release(b.pages[i].frame);
    }
  });
  for (std::size_t i = 0; i < n; ++i) {
    ChunkLocation where = i < on_device ? ChunkLocation::device : ChunkLocation::host;
    auto frame = pool(where).try_acquire();
    if (!frame) {  // demotion found too few candidates (all of them mid-free): take the other tier
      where = where == ChunkLocation::device ? ChunkLocation::host : ChunkLocation::device;
      frame = pool(where).try_acquire();
    }
    if (!frame) throw out_of_memory("tvmm: no frame left for a page of a " + format_bytes(bytes) + " allocation");
    if (auto s = dev_->map(va + i * page_, page_, pool(where).chunk(*frame)); !s.ok()) {
      pool(where).release(*frame);
      throw_status(s, "map(page, frame)", __FILE__, __LINE__);
    }
    b.pages.push_back({*frame, where});
  }
  TVMM_CHECK(dev_->set_access(va, n * page_));
  unmap_partial.dismiss();
  give_back_va.dismiss();
  blocks_.emplace(va, std::move(b));
  used_pages_ += n;
  ++counters_.allocations;
  counters_.peak_used = std::max(counters_.peak_used, used_pages_ * page_);
  return reinterpret_cast<void*>(va);
}

void TransparentHeap::free(void* ptr) {
  Lock lk(mu_);
  auto it = blocks_.find(reinterpret_cast<DevPtr>(ptr));
  if (it == blocks_.end() || it->second.deferred) {
    throw invalid_argument("tvmm: free of " + std::to_string(reinterpret_cast<DevPtr>(ptr)) +
                           ", which is not a live allocation's start (freed twice, or a pointer into an allocation)");
  }
  bool drained = false;
  drain_once(drained);  // as cudaFree does: device work may still use the memory
  release_block(lk, it);
  ++counters_.frees;
}

void TransparentHeap::free_deferred(void* ptr) {
  Lock lk(mu_);
  auto it = blocks_.find(reinterpret_cast<DevPtr>(ptr));
  if (it == blocks_.end() || it->second.deferred) {
    throw invalid_argument(
        "tvmm: asynchronous free of a pointer that is not a live allocation's start "
        "(freed twice, or a pointer into an allocation)");
  }
  it->second.deferred = true;
  ++counters_.deferred_frees;
}

std::size_t TransparentHeap::size_of(const void* ptr) const {
  std::lock_guard lk(mu_);
  auto it = blocks_.find(reinterpret_cast<DevPtr>(ptr));
  return it == blocks_.end() || it->second.deferred ? 0 : it->second.bytes;
}

void TransparentHeap::touch(const void* ptr) noexcept {
  if (!contains(ptr)) return;
  try {
    std::lock_guard lk(mu_);
    auto it = blocks_.upper_bound(reinterpret_cast<DevPtr>(ptr));
    if (it == blocks_.begin()) return;
    --it;
    if (reinterpret_cast<DevPtr>(ptr) < it->first + it->second.pages.size() * page_) it->second.last_use = ++clock_;
  } catch (...) {  // a hint only
  }
}

void TransparentHeap::maintain(bool drained) {
  Lock lk(mu_);
  ++counters_.quiescent_points;
  const bool deferred = std::any_of(blocks_.begin(), blocks_.end(), [](const auto& b) { return b.second.deferred; });
  const bool promotable = device_->in_use() < device_->budget() && host_->in_use() > 0;
  if (!deferred && !promotable) return;
  drain_once(drained);
  release_deferred(lk);
  promote(lk);
}

void TransparentHeap::release_block(Lock&, std::map<DevPtr, Block>::iterator it) {
  const Block& b = it->second;
  const std::size_t n = b.pages.size();
  if (auto s = dev_->unmap(it->first, n * page_); !s.ok()) {
    // Keep the pages (and their frames) rather than reuse memory that may still be mapped.
    std::fprintf(stderr, "tvmm: unmapping a freed allocation failed (%s); its memory is leaked\n",
                 backend::errc_name(s.code));
  } else {
    for (const Page& p : b.pages) pool(p.where).release(p.frame);
    space_->free(b.first, static_cast<std::uint32_t>(n));
  }
  used_pages_ -= n;
  blocks_.erase(it);
}

void TransparentHeap::release_deferred(Lock& lk) {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    auto next = std::next(it);
    if (it->second.deferred) release_block(lk, it);
    it = next;
  }
}

std::size_t TransparentHeap::demote(Lock& lk, std::size_t pages, const Block* keep) {
  // Least recently used first; within a block, from its end (the last pages of a tensor are as cold
  // as the rest, and this keeps each block's device pages a prefix).
  std::vector<std::pair<DevPtr, Block*>> order;
  for (auto& [va, b] : blocks_) {
    if (&b != keep && !b.deferred) order.emplace_back(va, &b);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->last_use < b.second->last_use; });
  std::size_t done = 0;
  for (auto& [va, b] : order) {
    for (std::size_t i = b->pages.size(); i-- > 0 && done < pages;) {
      if (b->pages[i].where != ChunkLocation::device) continue;
      remap(lk, va + i * page_, b->pages[i], ChunkLocation::host);
      ++done;
    }
    if (done == pages) break;
  }
  counters_.pages_demoted += done;
  return done;
}

std::size_t TransparentHeap::promote(Lock& lk) {
  std::vector<std::pair<DevPtr, Block*>> order;
  for (auto& [va, b] : blocks_) order.emplace_back(va, &b);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->last_use > b.second->last_use; });
  std::size_t done = 0;
  for (auto& [va, b] : order) {
    for (std::size_t i = 0; i < b->pages.size(); ++i) {
      if (device_->in_use() == device_->budget()) break;
      if (b->pages[i].where != ChunkLocation::host) continue;
      remap(lk, va + i * page_, b->pages[i], ChunkLocation::device);
      ++done;
    }
  }
  counters_.pages_promoted += done;
  return done;
}

void TransparentHeap::remap(Lock&, DevPtr va, Page& page, ChunkLocation to) {
  DeviceTier& target_pool = pool(to);
  const auto target = target_pool.try_acquire();
  if (!target) throw out_of_memory("tvmm: no frame to remap a page into (internal accounting error)");
  const backend::ChunkHandle chunk = target_pool.chunk(*target);
  const backend::ChunkHandle old = pool(page.where).chunk(page.frame);
  const bool host_threads_touch = dev_->properties().host_accessible;
  void* const host_va = reinterpret_cast<void*>(va);
  ScopeGuard give_back([&] { target_pool.release(*target); });

  // 1. The target, mapped at the staging page.
  TVMM_CHECK(dev_->map(staging_, page_, chunk));
  ScopeGuard unmap_staging([&] { (void)dev_->unmap(staging_, page_); });
  TVMM_CHECK(dev_->set_access(staging_, page_));

  // 2. On the simulator the program's threads are its "kernels" and never drain: make the page
  //    read-only so no write lands in the old copy after it is taken (a fault handler waits for step 4).
  remapping_.store(true, std::memory_order_release);
  ScopeGuard end_window([&] {
    remap_epoch_.fetch_add(1, std::memory_order_acq_rel);
    remapping_.store(false, std::memory_order_release);
  });
  if (host_threads_touch) ::mprotect(host_va, page_, PROT_READ);
  ScopeGuard restore([&] {
    if (host_threads_touch) ::mprotect(host_va, page_, PROT_READ | PROT_WRITE);
  });

  // 3. Copy the page into the target.
  const auto kind = to == ChunkLocation::host ? backend::CopyKind::device_to_host : backend::CopyKind::host_to_device;
  TVMM_CHECK(dev_->memcpy_async(reinterpret_cast<void*>(staging_), host_va, page_, kind, stream_));
  TVMM_CHECK(dev_->synchronize_stream(stream_));

  // 4. Swap: the address now maps the target. If mapping it fails, the old chunk goes back.
  TVMM_CHECK(dev_->unmap(staging_, page_));
  unmap_staging.dismiss();
  TVMM_CHECK(dev_->unmap(va, page_));
  if (auto s = dev_->map(va, page_, chunk); !s.ok()) {
    if (dev_->map(va, page_, old).ok()) (void)dev_->set_access(va, page_);
    throw_status(s, "map(va, page, target)", __FILE__, __LINE__);
  }
  TVMM_CHECK(dev_->set_access(va, page_));
  restore.dismiss();
  give_back.dismiss();
  pool(page.where).release(page.frame);
  page = {*target, to};
}

TransparentHeap::Usage TransparentHeap::usage() const {
  std::lock_guard lk(mu_);
  Usage u;
  u.capacity = (std::size_t{device_->budget()} + host_->budget()) * page_;
  u.used = used_pages_ * page_;
  u.on_device = std::size_t{device_->in_use()} * page_;
  return u;
}

TransparentHeap::Counters TransparentHeap::counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

std::string TransparentHeap::stats_json() const {
  const Usage u = usage();
  const Counters c = counters();
  std::ostringstream o;
  o << "{\"mode\": \"transparent\", \"backend\": \"" << dev_->properties().name << "\", \"page_size\": " << page_
    << ", \"device_budget\": " << cfg_.device_budget << ", \"host_budget\": " << cfg_.host_budget
    << ", \"allocations\": " << c.allocations << ", \"frees\": " << c.frees
    << ", \"deferred_frees\": " << c.deferred_frees << ", \"bytes_in_use\": " << u.used
    << ", \"bytes_on_device\": " << u.on_device << ", \"peak_bytes\": " << c.peak_used
    << ", \"pages_demoted\": " << c.pages_demoted << ", \"pages_promoted\": " << c.pages_promoted
    << ", \"bytes_demoted\": " << c.pages_demoted * page_ << ", \"bytes_promoted\": " << c.pages_promoted * page_
    << ", \"drains\": " << c.drains << ", \"quiescent_points\": " << c.quiescent_points << "}";
  return o.str();
}

}  // namespace tvmm::detail
