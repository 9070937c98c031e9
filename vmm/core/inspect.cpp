// PagerImpl, part 7: inspection: where a page is (tier, tier_of), the counters (stats), the device's
// description, and the invariant check the tests run (check_invariants).
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/scope_guard.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

namespace {
Tier tier_from(PageState s) noexcept {
  switch (s) {
    case PageState::device: return Tier::device;
    case PageState::host: return Tier::host;
    case PageState::transit: return Tier::transit;
    case PageState::nvme: return Tier::nvme;
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

Tier PagerImpl::tier_of(device::DevPtr addr) {
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
  s.host_to_device = {xfer_->bytes_in(), xfer_->pages_in()};
  s.device_to_host = {xfer_->bytes_out(), xfer_->pages_out()};
  s.pins = observe_.counters.pins.load(std::memory_order_relaxed);
  s.hits = observe_.counters.hits.load(std::memory_order_relaxed);
  s.misses = observe_.counters.misses.load(std::memory_order_relaxed);
  s.evictions = observe_.counters.evictions.load(std::memory_order_relaxed);
  s.clean_evictions = observe_.counters.clean_evictions.load(std::memory_order_relaxed);
  s.kept_mappings = observe_.counters.kept_mappings.load(std::memory_order_relaxed);
  s.remap_ns = observe_.counters.remap_ns.load(std::memory_order_relaxed);
  s.written_behind = observe_.counters.written_behind.load(std::memory_order_relaxed);
  const auto times = dev_->call_times();
  auto driver = [&](device::TimedCall c) {
    const auto& t = times[static_cast<std::size_t>(c)];
    return DriverTime{t.calls, t.ns};
  };
  using C = device::TimedCall;  // in DriverTimes' order (driver_times() names them)
  static_assert(device::kTimedCalls == std::tuple_size_v<decltype(driver_times(DriverTimes{}))>);
  s.driver = {driver(C::map),   driver(C::set_access),  driver(C::unmap),
              driver(C::copy),  driver(C::record),      driver(C::stream_wait),
              driver(C::query), driver(C::synchronize), driver(C::launch)};
  if (nvme_) {
    const auto& c = nvme_->counters();
    const auto w = c.pages_written.load(std::memory_order_relaxed), r = c.pages_read.load(std::memory_order_relaxed);
    s.host_to_nvme = {c.bytes_written.load(std::memory_order_relaxed), w};
    s.nvme_to_host = {c.bytes_read.load(std::memory_order_relaxed), r};
    s.nvme_write_errors = c.write_errors.load(std::memory_order_relaxed);
    s.nvme_read_errors = c.read_errors.load(std::memory_order_relaxed);
    s.nvme_corrupt_reads = c.corrupt_reads.load(std::memory_order_relaxed);
  }
  s.prefetched = observe_.counters.prefetched.load(std::memory_order_relaxed);
  s.nvme_read_ahead = observe_.counters.read_ahead.load(std::memory_order_relaxed);
  s.trace_divergences = prefetch_.trace().divergences();
  s.stall_ns = observe_.counters.stall_ns.load(std::memory_order_relaxed);
  s.allocations = observe_.counters.allocations.load(std::memory_order_relaxed);
  s.live_bytes = observe_.counters.live_bytes.load(std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  s.device_used_bytes = std::uint64_t{device_->in_use()} * page_size_;
  s.device_peak_bytes = std::uint64_t{device_->peak()} * page_size_;
  s.host_used_bytes = std::uint64_t{host_->in_use()} * page_size_;
  s.host_peak_bytes = std::uint64_t{host_->peak()} * page_size_;
  s.device_budget = cfg_.device_budget;
  s.host_budget = cfg_.host_budget;
  if (nvme_) {
    s.nvme_used_bytes = std::uint64_t{nvme_->in_use()} * page_size_;
    s.nvme_peak_bytes = std::uint64_t{nvme_->peak()} * page_size_;
    s.nvme_budget = cfg_.nvme.budget;
  }
  s.page_size = page_size_;
  return s;
}

std::string PagerImpl::describe_device(std::uint64_t* pinned_pages) const {
  std::uint64_t pinned = 0, transit = 0, resident = 0;
  for (std::uint32_t i = 0; i < table_.size(); ++i) {
    const auto w = table_[i].word.load();
    if (table_[i].frame == kNoFrame) continue;
    ++resident;
    if (word::pins(w) != 0) ++pinned;
    if (word::state(w) == PageState::transit) ++transit;
  }
  if (pinned_pages != nullptr) *pinned_pages = pinned;
  return std::to_string(device_->budget()) + " device pages (" +
         format_bytes(std::uint64_t{device_->budget()} * page_size_) + "), " + std::to_string(resident) +
         " holding data, " + std::to_string(pinned) + " pinned, " + std::to_string(transit) + " in transit";
}

std::string PagerImpl::life_pins_note() const {
  if (cfg_.min_bytes <= page_size_) return "";  // small tensors share arena pages, a few at most
  return " (tensors smaller than policy.admission.min_bytes = " + format_bytes(cfg_.min_bytes) +
         " stay pinned for life)";
}

// Correct while other threads use the pager: everything but the pin counts changes only under mu_,
// and a thread that lets go of mu_ while it holds frames no page records yet counts them in
// frames_in_hand_. Pins change without the lock, so the words are frozen while they are counted (see
// word::kFrozen): the lock-free paths leave them alone, and the count is a snapshot.
void PagerImpl::check_invariants() const {
  std::lock_guard lk(mu_);
  for (std::uint32_t i = 0; i < table_.size(); ++i) {
    if (table_[i].state() != PageState::unused) table_[i].freeze();
  }
  common::ScopeGuard thaw([&] {
    for (std::uint32_t i = 0; i < table_.size(); ++i) table_[i].thaw();
  });
  auto fail = [](const std::string& what) {
    throw tvmm::device_error("tvmm invariant violated: " + what, "invariant");
  };
  std::vector<std::uint8_t> frame_owner(device_->created(), 0);
  std::vector<std::uint8_t> slot_owner(host_->budget(), 0);
  std::vector<std::uint8_t> nvme_owner(nvme_ ? nvme_->budget() : 0, 0);
  std::uint64_t frames = 0, slots = 0, nvme_slots = 0, device_pages = 0, pinned = 0, pages = 0;
  for (std::uint32_t i = 0; i < table_.size(); ++i) {
    const PageEntry& p = table_[i];
    const auto w = p.word.load();
    const auto s = word::state(w);
    const std::string where = "page " + std::to_string(i) + " (" + to_string(s) + ")";
    // Any page may keep a mapping (an evicted page's, or a freed page's whose unmap failed).
    if (p.mapped != kNoFrame && p.mapped != kUnknownMapping && p.mapped >= device_->created())
      fail(where + " is mapped to a frame that does not exist");
    if (s == PageState::unused) {
      if (p.owner != nullptr || p.frame != kNoFrame || p.host_slot != kNoSlot || p.nvme_slot != kNoSlot)
        fail(where + " holds resources");
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
    if (word::host_copy(w) && (p.host_slot == kNoSlot || (s != PageState::device && s != PageState::transit)))
      fail(where + " keeps a host copy it cannot have");
    if (word::writing_behind(w) && (p.host_slot == kNoSlot || (s != PageState::device && s != PageState::transit)))
      fail(where + " writes behind into no host slot");
    if (s == PageState::fresh && (p.host_slot != kNoSlot || p.frame != kNoFrame || p.nvme_slot != kNoSlot))
      fail(where + " holds resources");
    if (s == PageState::nvme && (p.nvme_slot == kNoSlot || p.frame != kNoFrame || p.host_slot != kNoSlot))
      fail(where + " misplaced");
    if (p.nvme_slot != kNoSlot) {
      if (p.nvme_slot >= nvme_owner.size() || nvme_owner[p.nvme_slot]++ != 0) fail(where + " shares its NVMe slot");
      ++nvme_slots;
    }
    if (p.frame != kNoFrame) {
      if (p.frame >= frame_owner.size() || frame_owner[p.frame]++ != 0) fail(where + " shares its frame");
      if (p.mapped != p.frame) fail(where + " is not mapped to its frame");
      if (frame_page_[p.frame] != i) fail(where + " is not the page its frame records");
      ++frames;
    }
    if (p.host_slot != kNoSlot) {
      if (p.host_slot >= slot_owner.size() || slot_owner[p.host_slot]++ != 0) fail(where + " shares its host slot");
      ++slots;
    }
  }
  for (std::uint32_t f = 0; f < frame_page_.size(); ++f) {
    if (frame_page_[f] != kNoPage && (f >= frame_owner.size() || frame_owner[f] == 0))
      fail("frame " + std::to_string(f) + " records page " + std::to_string(frame_page_[f]) + ", which is not in it");
  }
  if (frames + frames_in_hand_ != device_->in_use())
    fail("device tier counts " + std::to_string(device_->in_use()) + " frames in use but pages hold " +
         std::to_string(frames) + " and threads hold " + std::to_string(frames_in_hand_) + " for pages being loaded");
  if (slots != host_->in_use())
    fail("host tier counts " + std::to_string(host_->in_use()) + " slots in use but pages hold " +
         std::to_string(slots));
  if (nvme_ && nvme_slots != nvme_->in_use())
    fail("NVMe tier counts " + std::to_string(nvme_->in_use()) + " slots in use but pages hold " +
         std::to_string(nvme_slots));
  if (nvme_ && nvme_->peak() > nvme_->budget()) fail("NVMe budget exceeded");
  if (device_->in_use() > device_->budget() || device_->peak() > device_->budget()) fail("device budget exceeded");
  if (host_->in_use() > host_->budget() || host_->peak() > host_->budget()) fail("host budget exceeded");
  // The count runs ahead of the words only while a lock-free pin or unpin is between its two steps
  // (none can start now): wait for those to finish.
  const auto settle_by = Clock::now() + std::chrono::seconds(2);
  while (pinned_pages_.load() > pinned && Clock::now() < settle_by) std::this_thread::yield();
  if (const auto counted = pinned_pages_.load(); counted != pinned)
    fail("the pinned-page count says " + std::to_string(counted) + " but " + std::to_string(pinned) +
         " pages are pinned");
  std::vector<const Allocation*> small;
  for (const auto& [id, a] : by_id_) {
    if (a->arena != nullptr) small.push_back(a);
  }
  if (const std::string problem = arena_.check(small); !problem.empty()) fail(problem);
  if (pages != allocated_pages_) fail("allocated page count is off");
  if (policy_->size() != device_pages)
    fail("policy tracks " + std::to_string(policy_->size()) + " pages but " + std::to_string(device_pages) +
         " are resident");
}

}  // namespace tvmm::vmm
