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
  std::vector<std::pair<std::size_t, detail::PageEntry*>> ranked;
  ranked.reserve(list_.size());
  // Owners are valid: the pager holds its lock while selecting, and pages in the policy belong to live
  // allocations.
  for (auto& p : list_) ranked.emplace_back(trace_.next_use(p.owner->id), &p);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::size_t taken = 0;
  for (auto& [next, page] : ranked) {
    if (taken == max) break;
    if (claim(*page)) {
      list_.erase(list_.iterator_to(*page));
      ++taken;
    }
  }
  return taken;
}

}  // namespace tvmm::policies
