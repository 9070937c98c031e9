#include "policies/lfu.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace tvmm::policies {

LfuPolicy::LfuPolicy(std::uint32_t page_count)
    : ListPolicy(page_count), uses_(std::make_unique<std::atomic<std::uint32_t>[]>(page_count)) {}

void LfuPolicy::on_insert(PageIndex page) { uses_[page].store(0, std::memory_order_relaxed); }

void LfuPolicy::touch(PageIndex first, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    auto& uses = uses_[first + i];
    // Saturates instead of wrapping to 0, which would make the hottest page the next victim.
    if (uses.load(std::memory_order_relaxed) != UINT32_MAX) uses.fetch_add(1, std::memory_order_relaxed);
  }
}

std::size_t LfuPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) {
  std::lock_guard lk(mu_);
  // The list is in arrival order (a touch does not move a page), so a stable sort by count breaks
  // ties by time resident.
  std::vector<std::pair<std::uint32_t, Node*>> ranked;
  ranked.reserve(list_.size());
  for (auto& n : list_) ranked.emplace_back(uses_[index_of(n)].load(std::memory_order_relaxed), &n);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t taken = 0;
  for (const auto& [uses, n] : ranked) {
    if (taken == max) break;
    if (claim(index_of(*n))) {
      list_.erase(list_.iterator_to(*n));
      ++taken;
    }
  }
  return taken;
}

}  // namespace tvmm::policies
