#include "policies/belady_policy.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "vmm/allocation.hpp"

namespace tvmm::policies {

std::size_t BeladyPolicy::select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) {
  if (trace_.state() != detail::AccessTrace::State::replaying) return ListPolicy::select(max, claim);
  std::lock_guard lk(mu_);
  struct Rank {
    bool old;          // not pinned in the last keep_recent_ pins: goes first
    std::size_t next;  // then the farthest next use first
    detail::PageEntry* page;
  };
  std::vector<Rank> ranked;
  ranked.reserve(list_.size());
  // Owners are valid: the pager holds its lock while selecting, and pages in the policy belong to live
  // allocations.
  for (auto& p : list_) {
    const bool old = keep_recent_ == 0 || trace_.since_last_use(p.owner->id) >= keep_recent_;
    ranked.push_back({old, trace_.next_use(p.owner->id), &p});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Rank& a, const Rank& b) { return a.old != b.old ? a.old : a.next > b.next; });
  std::size_t taken = 0;
  for (auto& [old, next, page] : ranked) {
    if (taken == max) break;
    if (claim(*page)) {
      list_.erase(list_.iterator_to(*page));
      ++taken;
    }
  }
  return taken;
}

}  // namespace tvmm::policies
