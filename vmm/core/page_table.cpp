#include "vmm/core/page_table.hpp"

#include <vector>

namespace tvmm::vmm {

const char* to_string(PageState s) noexcept {
  switch (s) {
    case PageState::unused: return "unused";
    case PageState::fresh: return "fresh";
    case PageState::host: return "host";
    case PageState::device: return "device";
    case PageState::transit: return "transit";
    case PageState::nvme: return "nvme";
  }
  return "invalid";
}

void PageEntry::set_state(PageState s, bool pend) noexcept {
  std::uint64_t w = word.load(std::memory_order_relaxed);
  while (!word.compare_exchange_weak(w, word::with_state(w, s, pend), std::memory_order_acq_rel,
                                     std::memory_order_relaxed)) {
  }
}

void compact_lazy(std::deque<std::uint32_t>& q, std::size_t valid_max, const PageTable& table,
                  bool (*valid)(const PageEntry&)) {
  if (q.size() <= 4 * valid_max + 64) return;
  // A page queued twice keeps its latest place: it entered the queue again since the first.
  std::vector<std::uint32_t> keep;
  std::vector<bool> seen(table.size(), false);
  for (auto it = q.rbegin(); it != q.rend(); ++it) {
    if (!seen[*it] && valid(table[*it])) keep.push_back(*it);
    seen[*it] = true;
  }
  q.assign(keep.rbegin(), keep.rend());
}

}  // namespace tvmm::vmm
