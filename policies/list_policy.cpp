#include "policies/list_policy.hpp"

#include <algorithm>
#include <array>
#include <mutex>

namespace tvmm::policies {

namespace {
// Rounds added to twice the longest recent gap between uses before a page counts as dead (select).
constexpr std::uint32_t kDeadMargin = 8;
// Pages of the page table the probe for likely dead pages looks at per select (select).
constexpr std::uint32_t kDeadProbes = 16;
}  // namespace

ListPolicy::ListPolicy(std::uint32_t page_count, bool tracks_use)
    : tracks_use_(tracks_use),
      page_count_(page_count),
      nodes_(std::make_unique<Node[]>(page_count)),
      used_in_(std::make_unique<std::atomic<std::uint32_t>[]>(page_count)),
      loaded_in_(std::make_unique<std::atomic<std::uint32_t>[]>(page_count)) {}

void ListPolicy::note_use(PageIndex first, std::size_t n) noexcept {
  const std::uint32_t now = round_.load(std::memory_order_relaxed);
  std::uint32_t longest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t was = used_in_[first + i].exchange(now, std::memory_order_relaxed);
    if (was != 0) longest = std::max(longest, now - was);  // 0: never used before
  }
  // A racy maximum: a lost update only lowers the estimate for a while.
  if (longest > reuse_now_.load(std::memory_order_relaxed)) reuse_now_.store(longest, std::memory_order_relaxed);
}

ListPolicy::~ListPolicy() { list_.clear(); }

void ListPolicy::insert(PageIndex page) {
  on_insert(page);
  // A page resident for the first time counts as used when loaded (its age starts there); one coming
  // back keeps its latest use, so that its next use measures the whole gap.
  const std::uint32_t now = round_.load(std::memory_order_relaxed);
  std::uint32_t never = 0;
  (void)used_in_[page].compare_exchange_strong(never, now, std::memory_order_relaxed);
  loaded_in_[page].store(now, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  list_.push_back(node(page));
}

void ListPolicy::restore(PageIndex page) {
  std::lock_guard lk(mu_);
  list_.push_back(node(page));
}

void ListPolicy::remove(PageIndex page) {
  std::lock_guard lk(mu_);
  Node& n = node(page);
  if (n.hook.is_linked()) list_.erase(list_.iterator_to(n));
}

std::size_t ListPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) {
  std::lock_guard lk(mu_);
  round_.fetch_add(1, std::memory_order_relaxed);
  std::size_t taken = 0;
  // Each page is visited at most twice: once to use up a second chance, once more as a candidate.
  std::size_t budget = 2 * list_.size();
  for (auto it = list_.begin(); it != list_.end() && taken < max && budget > 0; --budget) {
    Node& n = *it;
    const PageIndex page = index_of(n);
    if (second_chance(page)) {
      it = list_.erase(it);
      list_.push_back(n);
      // The list's last page (its only one, or the last a scan reached) goes on as a candidate: the scan
      // used to end here, with no victim, and the pin waited out pager.wait_timeout_ms.
      if (it == list_.end()) it = list_.iterator_to(n);
    } else if (claim(page)) {
      it = list_.erase(it);
      ++taken;
    } else {
      ++it;
    }
  }
  return taken;
}

std::size_t ListPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                               std::span<const PageIndex> prefer) {
  std::size_t taken = 0;
  {
    std::lock_guard lk(mu_);
    const std::uint32_t now = round_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (now - window_start_ >= std::max<std::size_t>(64, list_.size())) {
      reuse_before_ = reuse_now_.exchange(0, std::memory_order_relaxed);
      window_start_ = now;
    }
    const std::uint32_t reuse = std::max(reuse_before_, reuse_now_.load(std::memory_order_relaxed));
    // Idle since its latest use or its latest load, whichever came last: a page just loaded (a prefetch
    // of a page long unused) is not dead before its use.
    auto dead = [&](PageIndex page) {
      const std::uint32_t since =
          std::max(used_in_[page].load(std::memory_order_relaxed), loaded_in_[page].load(std::memory_order_relaxed));
      return now - since > std::uint64_t{2} * reuse + kDeadMargin;
    };
    // The probe: the next kDeadProbes pages of the page table (a cursor that wraps), for a likely dead
    // resident page to take in place of an override.
    std::uint32_t probes = tracks_use_ ? std::min(kDeadProbes, page_count_) : 0;
    auto take_dead = [&] {
      for (; probes > 0; --probes) {
        const PageIndex page = probe_;
        probe_ = probe_ + 1 < page_count_ ? probe_ + 1 : 0;
        Node& d = node(page);
        if (d.hook.is_linked() && dead(page) && claim(page)) {
          list_.erase(list_.iterator_to(d));
          --probes;
          return true;
        }
      }
      return false;
    };
    // The list's own next victims: a preferred page among them is no override.
    std::array<PageIndex, 16> own{};
    std::size_t owns = 0;
    for (auto it = list_.begin(); it != list_.end() && owns < std::min<std::size_t>(max, own.size()); ++it)
      own[owns++] = index_of(*it);
    std::size_t overrides = 0;
    for (std::size_t i = 0; i < prefer.size() && taken < max; ++i) {
      Node& n = node(prefer[i]);
      if (!n.hook.is_linked()) continue;
      const bool in_turn = std::find(own.begin(), own.begin() + owns, prefer[i]) != own.begin() + owns;
      if (tracks_use_ && !in_turn) {
        // The page the list would take instead: unused for much longer than any page went between two
        // uses lately, it is likely dead, and sparing it would evict a live page (LRU's case).
        if (overrides < owns && dead(own[overrides])) continue;
        // A likely dead page elsewhere in the list goes instead of the override (FIFO's and CLOCK's case).
        if (take_dead()) {
          ++taken;
          continue;
        }
      }
      if (!claim(prefer[i])) continue;
      list_.erase(list_.iterator_to(n));
      ++taken;
      if (!in_turn) ++overrides;
    }
  }
  return taken + (taken < max ? ListPolicy::select(max - taken, claim) : 0);
}

void ListPolicy::move_to_back(PageIndex first, std::size_t n) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    Node& nd = node(static_cast<PageIndex>(first + i));
    if (nd.hook.is_linked()) list_.splice(list_.end(), list_, list_.iterator_to(nd));
  }
}

std::size_t ListPolicy::size() const {
  std::lock_guard lk(mu_);
  return list_.size();
}

}  // namespace tvmm::policies
