#include "policies/lfu.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace tvmm::policies {

LfuPolicy::LfuPolicy(const PolicyContext& ctx)
    : ctx_(ctx), uses_(std::make_unique<std::atomic<std::uint32_t>[]>(ctx.page_count)) {}

void LfuPolicy::on_insert(detail::PageEntry& page) { uses_[ctx_.index_of(page)].store(0, std::memory_order_relaxed); }

void LfuPolicy::touch(detail::PageEntry* pages, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    auto& uses = uses_[ctx_.index_of(pages[i])];
    // Saturates instead of wrapping to 0, which would make the hottest page the next victim.
    if (uses.load(std::memory_order_relaxed) != UINT32_MAX) uses.fetch_add(1, std::memory_order_relaxed);
  }
}

std::size_t LfuPolicy::select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) {
  std::lock_guard lk(mu_);
  // The list is in arrival order (a touch does not move a page), so a stable sort by count breaks
  // ties by time resident.
  std::vector<std::pair<std::uint32_t, detail::PageEntry*>> ranked;
  ranked.reserve(list_.size());
  for (auto& p : list_) ranked.emplace_back(uses_[ctx_.index_of(p)].load(std::memory_order_relaxed), &p);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t taken = 0;
  for (const auto& [uses, p] : ranked) {
    if (taken == max) break;
    if (claim(*p)) {
      list_.erase(list_.iterator_to(*p));
      ++taken;
    }
  }
  return taken;
}

}  // namespace tvmm::policies
