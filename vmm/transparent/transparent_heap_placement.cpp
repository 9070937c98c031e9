// TransparentHeap, part 2: placement. The uses launches note (note_use) and their decay into each
// block's heat, the ranking of blocks by heat and recency, and the moves it drives: demoting the
// coldest pages for an allocation, promoting the hottest into idle device frames and swapping pages
// between the tiers at quiescent points (maintain(), in part 1).
#include <algorithm>
#include <cmath>
#include <vector>

#include "vmm/transparent/transparent_heap.hpp"

namespace tvmm::vmm {

using device::ChunkLocation;
using device::DevPtr;

void TransparentHeap::note_use(const void* ptr) noexcept {
  if (!by_use_ || !may_contain(ptr)) return;
  UseSlot& slot = use_slot(reinterpret_cast<DevPtr>(ptr));
  slot.stamp.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  slot.uses.fetch_add(1, std::memory_order_relaxed);
}

void TransparentHeap::widen_envelope(DevPtr lo, DevPtr hi) noexcept {
  // Only ever wider: a reader that sees one bound updated and not the other filters too much for a moment.
  DevPtr cur = env_lo_.load(std::memory_order_relaxed);
  while (lo < cur && !env_lo_.compare_exchange_weak(cur, lo, std::memory_order_relaxed)) {
  }
  cur = env_hi_.load(std::memory_order_relaxed);
  while (hi > cur && !env_hi_.compare_exchange_weak(cur, hi, std::memory_order_relaxed)) {
  }
}

void TransparentHeap::clear_uses(DevPtr va, std::size_t pages) noexcept {
  if (!by_use_) return;
  for (std::size_t i = 0; i < pages; ++i) {
    UseSlot& slot = use_slot(va + i * page_);
    slot.uses.store(0, std::memory_order_relaxed);
    slot.stamp.store(0, std::memory_order_relaxed);
  }
}

double TransparentHeap::half_life() const noexcept { return std::max(64.0, 2.0 * static_cast<double>(blocks_.size())); }

double TransparentHeap::heat(const Block& b) const noexcept {
  if (b.score == 0) return 0;
  return b.score * std::exp2(-static_cast<double>(use_clock_ - b.scored_at) / half_life());
}

void TransparentHeap::collect_uses() {
  if (!by_use_) return;
  struct Used {
    Block* block;
    double heat;  // the uses, each weighted by the share of the block it likely touches
  };
  std::vector<Used> used;
  used.reserve(blocks_.size());  // before any use is taken from its slot: none is lost to std::bad_alloc
  std::uint64_t total = 0;
  for (auto& [va, b] : blocks_) {
    if (b.deferred && !b.kept) continue;  // being freed: its uses are cleared with it
    std::uint64_t uses = 0, stamp = 0;
    for (std::size_t i = 0; i < b.where.size(); ++i) {
      UseSlot& slot = use_slot(va + i * page_);
      const std::uint32_t u = slot.uses.exchange(0, std::memory_order_relaxed);
      if (u == 0) continue;
      uses += u;
      stamp = std::max(stamp, slot.stamp.load(std::memory_order_relaxed));
    }
    if (uses == 0) continue;
    b.last_use = std::max(b.last_use, stamp);
    total += uses;
    // A use of a block likely touches all of it; a use of a slab one small allocation (a slot): a page of
    // a thousand counters named by every launch is worth less on the device than a page of a tensor.
    std::size_t touched = b.where.size() * page_;
    if (b.slab) {
      if (auto sl = slabs_.find(va); sl != slabs_.end()) touched = sl->second.slot;
    }
    used.push_back(
        {&b, static_cast<double>(uses) * static_cast<double>(touched) / static_cast<double>(b.where.size() * page_)});
    const auto on_device =
        static_cast<std::uint64_t>(std::count(b.where.begin(), b.where.end(), ChunkLocation::device));
    counters_.used_bytes_on_device += uses * (b.slab ? (on_device != 0 ? touched : 0) : on_device * page_);
    counters_.used_bytes += uses * touched;
  }
  if (total == 0) return;
  // All of this collection's uses count as of its end: the older ones decay by its length.
  use_clock_ += total;
  counters_.uses_noted += total;
  const double h = half_life();
  for (auto& [b, heat] : used) {
    b->score = b->score * std::exp2(-static_cast<double>(use_clock_ - b->scored_at) / h) + heat;
    b->scored_at = use_clock_;
  }
}

TransparentHeap::Ranking TransparentHeap::ranked(bool hottest_first) {
  // Heat first, then recency (all the heat is 0 when placing by allocation, or before any use is noted).
  using Key = std::pair<double, std::uint64_t>;
  std::vector<std::pair<Key, std::pair<DevPtr, Block*>>> keyed;
  keyed.reserve(blocks_.size());
  for (auto& [va, b] : blocks_) {
    if (!b.deferred || b.kept) keyed.push_back({{heat(b), b.last_use}, {va, &b}});  // kept: the graph's
  }
  std::stable_sort(keyed.begin(), keyed.end(), [hottest_first](const auto& x, const auto& y) {
    return hottest_first ? x.first > y.first : x.first < y.first;
  });
  Ranking order;
  order.reserve(keyed.size());
  for (const auto& k : keyed) order.push_back(k.second);
  return order;
}

bool TransparentHeap::move(DevPtr va, ChunkLocation& where, ChunkLocation to, bool& drained) {
  if (!may_take(to)) return false;                               // no memory there now: no drain for nothing
  if (moves_need_drain() && !drain_once(drained)) return false;  // a capture began: nothing moves
  if (!do_move(va, where, to)) return false;
  where = to;
  if (to == ChunkLocation::device) {
    ++on_device_;
    ++counters_.pages_promoted;
  } else {
    --on_device_;
    ++counters_.pages_demoted;
  }
  return true;
}

std::size_t TransparentHeap::demote(Lock&, std::size_t pages, bool& drained) {
  // The coldest first (least heat, then least recently used); within a block, from its end.
  collect_uses();
  std::size_t done = 0;
  for (auto& [va, b] : ranked(false)) {
    for (std::size_t i = b->where.size(); i-- > 0 && done < pages;) {
      if (b->where[i] != ChunkLocation::device) continue;
      if (!move(va + i * page_, b->where[i], ChunkLocation::host, drained)) return done;  // no host frame now
      ++done;
    }
    if (done == pages) break;
  }
  return done;
}

void TransparentHeap::promote(Lock&, const Ranking& hot, bool& drained) {
  if (on_device_ >= device_pages_) return;
  for (const auto& [va, b] : hot) {
    for (std::size_t i = 0; i < b->where.size() && on_device_ < device_pages_; ++i) {
      // A GPU short of memory takes no more pages now; the next promotion tries again.
      if (b->where[i] == ChunkLocation::host && !move(va + i * page_, b->where[i], ChunkLocation::device, drained)) {
        return;
      }
    }
  }
}

void TransparentHeap::rebalance(Lock&, const Ranking& hot, bool& drained) {
  if (!by_use_ || used_pages_ == on_device_) return;
  const Ranking cold = ranked(false);
  std::size_t budget = std::max<std::size_t>(2, device_pages_ / 4);
  // Host pages from the hottest block down, device pages from the coldest block up (each from its end).
  std::size_t h = 0, c = 0;
  std::size_t hi = 0;
  std::size_t ci = cold.empty() ? 0 : cold[0].second->where.size();
  while (budget > 0) {
    while (h < hot.size() && (hi >= hot[h].second->where.size() || hot[h].second->where[hi] != ChunkLocation::host)) {
      if (hi >= hot[h].second->where.size()) {
        ++h;
        hi = 0;
      } else {
        ++hi;
      }
    }
    while (c < cold.size() && (ci == 0 || cold[c].second->where[ci - 1] != ChunkLocation::device)) {
      if (ci == 0) {
        if (++c < cold.size()) ci = cold[c].second->where.size();
      } else {
        --ci;
      }
    }
    if (h == hot.size() || c == cold.size()) return;
    Block& up = *hot[h].second;
    Block& down = *cold[c].second;
    // Worth two page copies only when the host page's block is clearly hotter. The lists are in opposite
    // orders, so once a pair is not, no later pair is.
    const double gain = heat(up), loss = heat(down);
    if (&up == &down || !(gain > loss * 1.25 + 1.0)) return;
    if (!move(cold[c].first + (ci - 1) * page_, down.where[ci - 1], ChunkLocation::host, drained)) return;
    ++counters_.pages_swapped;
    if (!move(hot[h].first + hi * page_, up.where[hi], ChunkLocation::device, drained)) return;
    --budget;
  }
}

}  // namespace tvmm::vmm
