#include "policies/belady_policy.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace tvmm::policies {

std::size_t BeladyPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) {
  return rank_and_select(max, claim, {});
}

std::size_t BeladyPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                                 std::span<const PageIndex> prefer) {
  return rank_and_select(max, claim, prefer);
}

std::size_t BeladyPolicy::rank_and_select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                                          std::span<const PageIndex> prefer) {
  if (trace_.state() != AccessTrace::State::replaying) return ListPolicy::select(max, claim, prefer);
  std::lock_guard lk(mu_);
  if (!prefer.empty()) plan_reloads();
  struct Rank {
    bool old;          // not pinned in the last keep_recent_ pins: goes first
    bool just_used;    // released by the work queued last: deferred when another candidate can go
    bool copy_out;     // its frame would wait for a copy of it (PageOwner::copy_out)
    std::size_t next;  // pins to the next use
    double key;        // then the farthest next use, weighed by the page's cost, first
    Node* node;
    std::uint64_t tensor;  // PageOwner::tensor and page: where to look up the optimum's verdict
    std::uint32_t page;
  };
  std::vector<Rank> ranked;
  ranked.reserve(list_.size());
  const std::uint64_t latest = latest_release_.load(std::memory_order_relaxed);
  // Owners are valid: the pager holds its lock while selecting, and pages in the policy belong to live
  // allocations.
  for (auto& n : list_) {
    const PageOwner owner = owner_of_(index_of(n));
    const bool old = keep_recent_ == 0 || trace_.since_last_use(owner.tensor) >= keep_recent_;
    const bool just_used = latest != 0 && owner.released_at == latest;
    const std::size_t next = trace_.next_use(owner.tensor);
    const double key = next == AccessTrace::kNever ? 1e300 : (static_cast<double>(next) + 1) / owner.cost;
    ranked.push_back({old, just_used, owner.copy_out, next, key, &n, owner.tensor, owner.page});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Rank& a, const Rank& b) { return a.old != b.old ? a.old : a.key > b.key; });
  std::size_t taken = 0;
  std::vector<bool> tried(ranked.size(), false);
  auto take = [&](std::size_t i) {
    tried[i] = true;
    if (!claim(index_of(*ranked[i].node))) return;
    list_.erase(list_.iterator_to(*ranked[i].node));
    ++taken;
  };
  const std::size_t left = trace_.pins_left_in_iteration();
  // 0. Preferred pages first, in the same keep_recent class as Belady's own choice: those the optimum
  //    reloads anyway, wherever they stand, and from the second replayed iteration on those among the
  //    farther half of the candidates or not pinned again in this iteration.
  if (!prefer.empty()) {
    const std::size_t farther = ranked.size() / kPreferShare;
    bool within = trace_.replays() >= kPairingIterations;  // still in the farther half, or not needed again
    for (std::size_t i = 0; i < ranked.size() && taken < max && ranked[i].old == ranked[0].old; ++i) {
      within = within && (i < farther || ranked[i].next >= left);
      if (!within && reloads_.empty()) break;
      if (!std::binary_search(prefer.begin(), prefer.end(), index_of(*ranked[i].node))) continue;
      if (within || reloaded_anyway(ranked[i].tensor, ranked[i].page)) take(i);
    }
  }
  // 1. Within the window, skip the just-used pages while the others are, like them, not pinned again in
  //    this iteration; a candidate needed sooner ends the pass (there the order decides the bytes), and
  //    so does the first recently pinned one (keep_recent: those go only when nothing else can).
  const std::size_t window = max >= ranked.size() / kDeferWindow ? ranked.size() : kDeferWindow * max;
  for (std::size_t i = 0; i < window && taken < max && ranked[i].next >= left && ranked[i].old == ranked[0].old; ++i) {
    if (!ranked[i].just_used && !tried[i]) take(i);
  }
  // 2. Within the window, skip the just-used pages whose frames would wait for a copy (a write-back),
  //    for candidates at least half as far as the first of them, pinned again in this iteration or
  //    not: next >= its next / 2, rounded down (half of next + 1 pins, as the key counts them; a page
  //    never pinned again would stand for `left`). Its write-back could start only when the work
  //    queued last ends, and its frame's next user would wait for both. The first candidate nearer
  //    than that ends the pass; the just-used pages with nothing to copy, skipped above, go here in
  //    rank order.
  std::optional<std::size_t> nearest;  // the nearest next use that may stand in
  for (std::size_t i = 0; i < window && taken < max && ranked[i].old == ranked[0].old; ++i) {
    if (tried[i]) continue;
    if (ranked[i].just_used && ranked[i].copy_out) {
      if (!nearest) nearest = ranked[i].next == AccessTrace::kNever ? left : ranked[i].next / 2;
      continue;
    }
    if (nearest && ranked[i].next < *nearest) break;
    take(i);
  }
  // 3. The rest in rank order, the deferred pages included.
  for (std::size_t i = 0; i < ranked.size() && taken < max; ++i) {
    if (!tried[i]) take(i);
  }
  return taken;
}

bool BeladyPolicy::reloaded_anyway(std::uint64_t tensor, std::uint32_t page) const {
  std::uint32_t offset = 0;
  const std::size_t at = trace_.next_reference(tensor, page, offset);
  return at < reloads_.size() && offset < reloads_[at].size() && reloads_[at][offset] == Reload::loaded;
}

void BeladyPolicy::plan_reloads() noexcept {
  if (frames_ == 0 || !page_bytes_) return;
  // The version first: a trace dropped and recorded again after this read gets its own plan at the
  // next call, whatever recorded() returns below.
  const std::uint64_t version = trace_.divergences();
  if (version == reloads_of_) return;
  reloads_of_ = version;
  reloads_.clear();
  try {
    const std::vector<TraceAccess> iteration = trace_.recorded();
    double references = 0;
    for (const auto& a : iteration) references += a.pages + 1.0;
    if (static_cast<double>(frames_) * references > kReloadPlanWork) return;
    reloads_ = optimal_reloads(iteration, frames_, page_bytes_);
  } catch (const std::exception&) {
    // No memory, or a pin needing more pages than there are frames (the pager refuses it anyway): no
    // page counts as reloaded, and the preference keeps to the farther half.
    reloads_.clear();
  }
}

}  // namespace tvmm::policies
