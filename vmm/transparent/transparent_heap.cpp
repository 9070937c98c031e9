// TransparentHeap, part 1: allocation, frees (at once, deferred, stream-ordered), quiescent points and
// stats. Part 2 (transparent_heap_placement.cpp): which pages live on the device, by use and recency.
#include "vmm/transparent/transparent_heap.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <new>
#include <sstream>

#include "common/scope_guard.hpp"
#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/resolve_config.hpp"
#include "vmm/transparent/managed_heap.hpp"
#include "vmm/transparent/remap_heap.hpp"

namespace tvmm::vmm {

using device::ChunkLocation;
using device::DevPtr;

TransparentHeap::TransparentHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev)
    : cfg_((config.validate(), config)), drain_(std::move(drain)), dev_(std::move(dev)) {
  cfg_ = resolve_config(cfg_, dev_->properties());
  page_ = cfg_.page_size;
  device_pages_ = cfg_.device_budget / page_;
  host_pages_ = cfg_.host_budget / page_;
  by_use_ = cfg_.transparent_placement == "use";
  if (by_use_) {
    // A slot per page of the address space the heap can hand out (a remap heap's reservation holds
    // va_size; managed memory lies anywhere, and pages share slots only when their numbers collide).
    const std::size_t slots =
        std::bit_ceil(std::max<std::size_t>({cfg_.va_size / page_, 2 * (device_pages_ + host_pages_), 64}));
    uses_ = std::make_unique<UseSlot[]>(slots);
    use_mask_ = slots - 1;
  }
  TVMM_CHECK(dev_->create_stream(&stream_));
}

TransparentHeap::~TransparentHeap() {
  // The subclass released its blocks (it owns the memory); only the stream is left.
  if (stream_ != nullptr) (void)dev_->destroy_stream(stream_);
}

void TransparentHeap::release_all() noexcept {
  Lock lk(mu_);
  for (auto& [p, sm] : small_) {
    if (sm.after != nullptr) (void)dev_->destroy_event(sm.after);
  }
  small_.clear();
  slabs_.clear();
  open_.clear();
  while (!blocks_.empty()) {
    try {
      release_block(lk, blocks_.begin());
    } catch (...) {  // at shutdown: leave the rest to the process's exit
      return;
    }
  }
}

void TransparentHeap::set_capture_probe(Capturing capturing) {
  std::lock_guard lk(mu_);
  capturing_ = std::move(capturing);
}

void TransparentHeap::keep_for_graph(Freeable& b) {
  counters_.allocated_bytes -= b.bytes;
  b.deferred = true;  // no longer the program's: a second free is a double free
  b.kept = true;
  ++counters_.kept_for_graphs;
}

bool TransparentHeap::drain_once(bool& drained) {
  if (drained) return true;
  // A capture may have begun since the caller looked (its BeginCapture held the gate, which is closed
  // now): a device synchronise would invalidate it (cuda.h, cuStreamBeginCapture: "potentially unsafe
  // API calls" in global mode), so the caller goes on without moving or releasing anything.
  if (!fence_captures()) return false;
  TVMM_CHECK(dev_->synchronize_device());
  ++counters_.drains;
  drained = true;
  return true;
}

void* TransparentHeap::allocate(std::size_t bytes) {
  if (bytes == 0) throw invalid_argument("tvmm: an allocation of 0 bytes");
  Lock lk(mu_);
  bool drained = false;
  if (bytes <= page_ / 8) return allocate_small(lk, bytes, drained);
  return reinterpret_cast<void*>(allocate_block(lk, bytes, bytes, true, drained));
}

DevPtr TransparentHeap::allocate_block(Lock& lk, std::size_t bytes, std::size_t asked, bool program, bool& drained) {
  // Rounded up without `bytes + page_ - 1`, which wraps to 0 pages for sizes near SIZE_MAX.
  const std::size_t n = bytes / page_ + (bytes % page_ != 0 ? 1 : 0);
  const bool capture = capturing();  // no drain, so no move and no release now
  auto free_pages = [&] { return device_pages_ + host_pages_ - used_pages_; };
  if (n > free_pages() && !capture && (!ordered_.empty() || deferred_ != 0)) ++counters_.alloc_retries;
  // Releasing means unmapping (or freeing managed memory), which a capture forbids as a device synchronise.
  if (!ordered_.empty() && !capture) release_stream_ordered(lk, n > free_pages());
  if (n > free_pages() && deferred_ != 0 && !capture && drain_once(drained)) release_deferred(lk);
  if (n > free_pages()) {
    // In the words of PyTorch's message, with what each tier holds and the setting to raise.
    ++counters_.ooms;
    throw out_of_memory("tvmm: CUDA out of memory. Tried to allocate " + format_bytes(asked) +
                        ". Transparent mode holds the device budget (" + format_bytes(cfg_.device_budget) + ", " +
                        format_bytes(on_device_ * page_) + " in use) plus the host budget (" +
                        format_bytes(cfg_.host_budget) + ", " + format_bytes((used_pages_ - on_device_) * page_) +
                        " in use): " + format_bytes(free_pages() * page_) + " free in all, " +
                        format_bytes(counters_.allocated_bytes) +
                        " allocated by the program. Raise TVMM_HOST_BUDGET (host.budget) to hold more; the NVMe "
                        "tier needs the explicit API");
  }
  Block b;
  b.where.reserve(n);  // before the address range: std::bad_alloc here has nothing to give back
  const DevPtr va = do_reserve(n);
  common::ScopeGuard undo([&] { do_release(va, n, b.where); });  // also frees the range (where empty)
  clear_uses(va, n);  // what was noted on this memory before belongs to its previous allocation

  // 1. Room on the device: a new allocation is the hottest memory there is, so colder pages make way;
  //    none while device memory given back to an allocation outside the heap is held back for it.
  const std::size_t on_device = device_held_back() ? 0 : std::min(n, device_pages_);
  const std::size_t idle = device_pages_ - on_device_;
  b.bytes = bytes;
  b.last_use = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  b.scored_at = use_clock_;
  if (on_device > idle && !capture) demote(lk, on_device - idle, drained);

  // 2. Place every page: the device for as many as it now has room for, the host for the rest.
  std::size_t device_left = std::min(on_device, device_pages_ - on_device_);
  for (std::size_t i = 0; i < n; ++i) {
    const ChunkLocation where = do_place(va + i * page_, device_left > 0 ? ChunkLocation::device : ChunkLocation::host);
    b.where.push_back(where);
    if (where == ChunkLocation::device) --device_left;
  }
  do_placed(va, n);
  const auto placed_on_device =
      static_cast<std::size_t>(std::count(b.where.begin(), b.where.end(), ChunkLocation::device));
  b.slab = !program;
  blocks_.emplace(va, std::move(b));  // the last step that may fail (std::bad_alloc): `undo` releases the pages
  undo.dismiss();
  on_device_ += placed_on_device;
  used_pages_ += n;
  if (program) {
    ++counters_.allocations;
    counters_.allocated_bytes += bytes;
    counters_.allocated_peak = std::max(counters_.allocated_peak, counters_.allocated_bytes);
  }
  counters_.peak_used = std::max(counters_.peak_used, used_pages_ * page_);
  return va;
}

void* TransparentHeap::allocate_small(Lock& lk, std::size_t bytes, bool& drained) {
  const std::size_t slot = std::max<std::size_t>(256, std::bit_ceil(bytes));
  // Small allocations freed in stream order whose stream got there give their slots back first.
  if (!ordered_.empty() && !capturing()) release_stream_ordered(lk, false);
  auto& open = open_[slot];
  DevPtr made = 0;     // the slab page made for this allocation, if one was
  if (open.empty()) {  // a new slab: one page, as an allocation of the heap's own
    DevPtr va = 0;
    try {
      va = allocate_block(lk, page_, bytes, false, drained);
    } catch (const out_of_memory&) {
      if (open.empty()) throw;  // making room released no slot of this size either
      --counters_.ooms;         // it did: this allocation succeeds after all
    }
    if (va != 0 && !open.empty()) {
      release_block(lk, blocks_.find(va));  // making room freed a slot of this size: no second slab
    } else if (va != 0) {
      // std::bad_alloc in here gives the page back: no slab without its record, no record without its page.
      try {
        Slab sl;
        sl.slot = slot;
        sl.used.assign(page_ / slot, false);
        const auto made_slab = slabs_.emplace(va, std::move(sl)).first;
        try {
          open.insert(va);
        } catch (...) {
          slabs_.erase(made_slab);
          throw;
        }
      } catch (...) {
        release_block(lk, blocks_.find(va));
        throw;
      }
      made = va;
    }
  }
  const DevPtr slab_va = *open.begin();
  Slab& sl = slabs_.at(slab_va);
  const auto free_slot = static_cast<std::size_t>(std::find(sl.used.begin(), sl.used.end(), false) - sl.used.begin());
  const DevPtr p = slab_va + free_slot * slot;
  Small sm;
  sm.bytes = bytes;
  sm.slab = slab_va;
  try {
    small_.emplace(p, sm);  // first: std::bad_alloc here leaves the slab as it was (open, the slot free)
  } catch (...) {
    if (made != 0) {  // and gives back a slab page made for this allocation
      open.erase(made);
      slabs_.erase(made);
      release_block(lk, blocks_.find(made));
    }
    throw;
  }
  sl.used[free_slot] = true;
  if (++sl.in_use == sl.used.size()) open.erase(slab_va);
  blocks_.at(slab_va).last_use = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  ++counters_.allocations;
  counters_.allocated_bytes += bytes;
  counters_.allocated_peak = std::max(counters_.allocated_peak, counters_.allocated_bytes);
  return reinterpret_cast<void*>(p);
}

TransparentHeap::Freeable* TransparentHeap::live(DevPtr p) {
  if (auto it = small_.find(p); it != small_.end()) return it->second.deferred ? nullptr : &it->second;
  auto it = blocks_.find(p);
  return it == blocks_.end() || it->second.slab || it->second.deferred ? nullptr : &it->second;
}

void TransparentHeap::release(Lock& lk, DevPtr p) {
  if (auto it = small_.find(p); it != small_.end()) {
    release_small(lk, it);
  } else if (auto b = blocks_.find(p); b != blocks_.end()) {
    release_block(lk, b);
  }
}

void TransparentHeap::release_small(Lock& lk, std::map<DevPtr, Small>::iterator it) {
  const Small& sm = it->second;
  if (sm.after != nullptr) {
    (void)dev_->destroy_event(sm.after);
    ordered_.erase(it->first);
  } else if (sm.deferred && !sm.kept) {
    --deferred_;
  }
  const DevPtr slab_va = sm.slab;
  Slab& sl = slabs_.at(slab_va);
  sl.used[(it->first - slab_va) / sl.slot] = false;
  small_.erase(it);
  if (--sl.in_use == 0) {  // the slab's page goes back
    open_[sl.slot].erase(slab_va);
    slabs_.erase(slab_va);
    release_block(lk, blocks_.find(slab_va));
  } else {
    try {
      open_[sl.slot].insert(slab_va);
    } catch (const std::bad_alloc&) {
      // The free is done; a slab that was full stays out of the open set, its slot unused until
      // another of its slots is freed.
    }
  }
}

namespace {
// The error for a free of `p`, which is no live allocation's start; the address in hex, as %p prints it.
invalid_argument not_live(DevPtr p) {
  char at[24];
  std::snprintf(at, sizeof at, "%#llx", static_cast<unsigned long long>(p));
  return invalid_argument(std::string("tvmm: free of ") + at +
                          ", which is not a live allocation's start (freed twice, or a pointer into an allocation)");
}
}  // namespace

void TransparentHeap::free(void* ptr) {
  Lock lk(mu_);
  const auto p = reinterpret_cast<DevPtr>(ptr);
  Freeable* f = live(p);
  if (f == nullptr) {
    throw not_live(p);
  }
  ++counters_.frees;
  // As cudaFree does, wait for device work that may still use the memory; during a capture (also one
  // that began just now) the graph's replays will use it: it is kept.
  bool drained = false;
  if (capturing() || !drain_once(drained)) {
    keep_for_graph(*f);
    return;
  }
  counters_.allocated_bytes -= f->bytes;
  f->deferred = true;
  ++deferred_;
  release(lk, p);
}

void TransparentHeap::free_after(void* ptr, device::StreamHandle stream) {
  {
    Lock lk(mu_);
    const auto p = reinterpret_cast<DevPtr>(ptr);
    Freeable* f = live(p);
    if (f == nullptr) {
      throw not_live(p);
    }
    if (capturing()) {
      ++counters_.frees;
      keep_for_graph(*f);
      return;
    }
    device::EventHandle e = nullptr;
    if (dev_->create_event(&e).ok()) {
      common::ScopeGuard destroy([&] { (void)dev_->destroy_event(e); });  // also on std::bad_alloc below
      if (dev_->record_event(e, stream).ok()) {
        ordered_.insert(p);  // first: std::bad_alloc here leaves the allocation live
        destroy.dismiss();
        counters_.allocated_bytes -= f->bytes;
        f->deferred = true;
        f->after = e;
        ++counters_.frees;
        ++counters_.stream_ordered_frees;
        return;
      }
    }
  }
  free(ptr);  // the stream is not one tvmm can record on: the draining free
}

void TransparentHeap::release_stream_ordered(Lock& lk, bool wait) {
  std::vector<DevPtr> done;
  for (const DevPtr p : ordered_) {
    device::EventHandle e = nullptr;
    if (auto sm = small_.find(p); sm != small_.end()) {
      e = sm->second.after;
    } else if (auto b = blocks_.find(p); b != blocks_.end()) {
      e = b->second.after;
    }
    // A failed wait (a device error) releases nothing: the memory stays allocated, never wrongly reused.
    if (e != nullptr && (wait ? dev_->synchronize_event(e).ok() : dev_->query_event(e).ok())) done.push_back(p);
  }
  // Releasing unmaps (or frees managed memory), which a capture forbids as it does a device synchronise:
  // also one that another thread began since the caller looked.
  if (done.empty() || !fence_captures()) return;
  for (const DevPtr p : done) release(lk, p);
}

bool TransparentHeap::fence_captures() {
  if (drain_) drain_();  // the interposer closes its launch gate: no capture can begin from here on
  return !capturing();
}

void TransparentHeap::free_deferred(void* ptr) {
  Lock lk(mu_);
  Freeable* f = live(reinterpret_cast<DevPtr>(ptr));
  if (f == nullptr) {
    throw invalid_argument(
        "tvmm: asynchronous free of a pointer that is not a live allocation's start "
        "(freed twice, or a pointer into an allocation)");
  }
  ++counters_.deferred_frees;
  if (capturing()) {
    keep_for_graph(*f);
    return;
  }
  counters_.allocated_bytes -= f->bytes;
  f->deferred = true;
  ++deferred_;
}

std::size_t TransparentHeap::size_of(const void* ptr) const {
  std::lock_guard lk(mu_);
  const auto p = reinterpret_cast<DevPtr>(ptr);
  if (auto it = small_.find(p); it != small_.end()) return it->second.deferred ? 0 : it->second.bytes;
  auto it = blocks_.find(p);
  return it == blocks_.end() || it->second.slab || it->second.deferred ? 0 : it->second.bytes;
}

std::pair<DevPtr, std::size_t> TransparentHeap::allocation_of(const void* ptr) const {
  const auto p = reinterpret_cast<DevPtr>(ptr);
  std::lock_guard lk(mu_);
  if (auto it = small_.upper_bound(p); it != small_.begin()) {
    --it;
    if (p < it->first + it->second.bytes) {
      return it->second.deferred ? std::pair<DevPtr, std::size_t>{0, 0} : std::pair{it->first, it->second.bytes};
    }
  }
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return {0, 0};
  --it;
  if (it->second.slab || it->second.deferred || p >= it->first + it->second.bytes) return {0, 0};
  return {it->first, it->second.bytes};
}

std::optional<ChunkLocation> TransparentHeap::location_of(const void* ptr) const {
  const auto p = reinterpret_cast<DevPtr>(ptr);
  std::lock_guard lk(mu_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  const Block& b = it->second;
  if ((b.deferred && !b.kept) || p >= it->first + b.where.size() * page_) return std::nullopt;
  return b.where[(p - it->first) / page_];
}

void TransparentHeap::maintain(bool drained) {
  Lock lk(mu_);
  ++counters_.quiescent_points;
  clock_.fetch_add(1, std::memory_order_relaxed);  // uses from here on are more recent than those before
  if (capturing()) return;  // "quiescent" for the caller's stream only: a drain would end a capture
  if (!ordered_.empty()) release_stream_ordered(lk, false);
  const bool on_host = used_pages_ > on_device_;
  const bool promotable = on_device_ < device_pages_ && on_host;
  if (deferred_ == 0 && !promotable && !(by_use_ && on_host)) return;
  if (deferred_ != 0 && drain_once(drained)) release_deferred(lk);
  collect_uses();
  if (used_pages_ == on_device_ || device_held_back()) return;  // nothing goes to the device now
  const Ranking hot = ranked(true);                             // moves change no block's rank: one ranking serves both
  promote(lk, hot, drained);
  rebalance(lk, hot, drained);
}

void TransparentHeap::release_block(Lock&, std::map<DevPtr, Block>::iterator it) {
  const Block& b = it->second;
  do_release(it->first, b.where.size(), b.where);
  clear_uses(it->first, b.where.size());
  on_device_ -= static_cast<std::size_t>(std::count(b.where.begin(), b.where.end(), ChunkLocation::device));
  used_pages_ -= b.where.size();
  if (b.after != nullptr) {
    (void)dev_->destroy_event(b.after);
    ordered_.erase(it->first);
  } else if (b.deferred && !b.kept) {
    --deferred_;
  }
  blocks_.erase(it);
}

void TransparentHeap::release_deferred(Lock& lk) {
  std::vector<DevPtr> freed;
  for (const auto& [p, b] : blocks_) {
    if (b.deferred && !b.kept && b.after == nullptr) freed.push_back(p);
  }
  for (const auto& [p, sm] : small_) {
    if (sm.deferred && !sm.kept && sm.after == nullptr) freed.push_back(p);
  }
  for (DevPtr p : freed) release(lk, p);
}

std::size_t TransparentHeap::give_back_device_memory(std::size_t bytes) {
  Lock lk(mu_);
  if (capturing() || bytes == 0) return 0;
  const std::size_t want = bytes / page_ + (bytes % page_ != 0 ? 1 : 0);
  std::size_t got = do_give_back(want, 0);
  if (got < want) {
    bool drained = false;
    const std::size_t demoted = demote(lk, want - got, drained);
    got += do_give_back(want - got, demoted);
  }
  counters_.pages_given_back += got;
  if (got != 0) held_back_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  return got * page_;
}

bool TransparentHeap::device_held_back() const noexcept {
  return held_back_until_ != std::chrono::steady_clock::time_point{} &&
         std::chrono::steady_clock::now() < held_back_until_;
}

std::size_t TransparentHeap::device_memory_reachable() const {
  std::size_t free = 0, total = 0;
  if (!dev_->memory_info(&free, &total).ok()) return SIZE_MAX;
  std::lock_guard lk(mu_);
  const std::size_t host_free = host_pages_ - std::min(host_pages_, used_pages_ - on_device_);
  return free + (idle_device_pages() + std::min(on_device_, host_free)) * page_;
}

TransparentHeap::Usage TransparentHeap::usage() const {
  std::lock_guard lk(mu_);
  Usage u;
  u.capacity = (device_pages_ + host_pages_) * page_;
  u.used = used_pages_ * page_;
  u.on_device = on_device_ * page_;
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
  o << "{\"mode\": \"transparent\", \"mechanism\": \"" << mechanism() << "\", \"backend\": \""
    << dev_->properties().name << "\", \"page_size\": " << page_ << ", \"device_budget\": " << cfg_.device_budget
    << ", \"host_budget\": " << cfg_.host_budget << ", \"allocations\": " << c.allocations << ", \"frees\": " << c.frees
    << ", \"deferred_frees\": " << c.deferred_frees << ", \"bytes_in_use\": " << u.used
    << ", \"bytes_on_device\": " << u.on_device << ", \"peak_bytes\": " << c.peak_used
    << ", \"pages_demoted\": " << c.pages_demoted << ", \"pages_promoted\": " << c.pages_promoted
    << ", \"bytes_demoted\": " << c.pages_demoted * page_ << ", \"bytes_promoted\": " << c.pages_promoted * page_
    << ", \"drains\": " << c.drains << ", \"quiescent_points\": " << c.quiescent_points
    << ", \"frees_kept_for_graphs\": " << c.kept_for_graphs << ", \"stream_ordered_frees\": " << c.stream_ordered_frees
    << ", \"placement\": \"" << cfg_.transparent_placement << "\", \"uses_noted\": " << c.uses_noted
    << ", \"pages_swapped\": " << c.pages_swapped << ", \"used_bytes_on_device\": " << c.used_bytes_on_device
    << ", \"used_bytes\": " << c.used_bytes << ", \"bytes_given_back\": "
    << c.pages_given_back * page_
    // The same in the keys of torch.cuda.memory_stats(), for tools that read those.
    << ", \"allocated_bytes.all.current\": " << c.allocated_bytes
    << ", \"allocated_bytes.all.peak\": " << c.allocated_peak << ", \"reserved_bytes.all.current\": " << u.used
    << ", \"reserved_bytes.all.peak\": " << c.peak_used << ", \"num_alloc_retries\": " << c.alloc_retries
    << ", \"num_ooms\": " << c.ooms << ", \"tvmm.device_bytes.current\": " << u.on_device
    << ", \"tvmm.host_bytes.current\": " << u.used - u.on_device << "}";
  return o.str();
}

std::unique_ptr<TransparentHeap> make_transparent_heap(const Config& config, TransparentHeap::Drain drain,
                                                       std::string* why, std::unique_ptr<device::DeviceBackend> dev) {
  config.validate();
  if (!dev) dev = device::make_device_backend(config);
  const auto& props = dev->properties();
  std::string mode = config.transparent_memory;
  std::string reason = "transparent.memory = \"" + mode + "\"";
  if (mode == "auto") {
    if (props.host_chunks) {
      mode = "vmm";
      reason = "the " + props.name + " device has host-located VMM memory";
    } else if (props.managed) {
      mode = "um";
      reason = "the " + props.name +
               " device has no host-located VMM memory (cuMemCreate at a host NUMA node), so transparent mode "
               "falls back to managed memory";
    } else {
      throw device_error("transparent mode needs host-located VMM memory or managed memory, and the " + props.name +
                             " device has neither",
                         "not_supported");
    }
  }
  if (why != nullptr) *why = reason;
  if (mode == "vmm") {
    if (!props.host_chunks) {
      throw device_error(
          "transparent.memory = \"vmm\" needs host-located VMM memory (cuMemCreate at a host NUMA "
          "node), which the " +
              props.name + " device does not support; use \"um\" or \"auto\"",
          "not_supported");
    }
    // Each page moves between a device frame and a host-located chunk: its size must be a multiple of
    // both kinds' granularity (the driver's may differ).
    const std::size_t host_g = props.host_granularity != 0 ? props.host_granularity : props.granularity;
    if (config.page_size == 0 && host_g > props.granularity) {
      Config larger = config;
      larger.page_size = host_g;  // both are powers of two: the larger is a multiple of the smaller
      return make_transparent_heap(larger, std::move(drain), why, std::move(dev));
    }
    if (config.page_size % host_g != 0) {
      throw config_error(
          "transparent.memory = \"vmm\" moves pages between device frames and host-located chunks, "
          "whose granularity on this " +
          props.name + " device is " + format_bytes(host_g) + "; page_size = " + format_bytes(config.page_size) +
          " is not a multiple of it: use " + format_bytes(host_g) + " (or \"auto\")");
    }
    return std::make_unique<RemapHeap>(config, std::move(drain), std::move(dev));
  }
  if (!props.managed) {
    throw device_error("transparent.memory = \"um\" needs managed memory with concurrent access, which the " +
                           props.name + " device does not support; use \"vmm\" or \"auto\"",
                       "not_supported");
  }
  return std::make_unique<ManagedHeap>(config, std::move(drain), std::move(dev));
}

}  // namespace tvmm::vmm
