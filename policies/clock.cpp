#include "policies/clock.hpp"

namespace tvmm::policies {

void ClockPolicy::touch(detail::PageEntry* pages, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    auto& w = pages[i].word;
    if ((w.load(std::memory_order_relaxed) & detail::word::kReferenced) == 0) {
      w.fetch_or(detail::word::kReferenced, std::memory_order_relaxed);
    }
  }
}

bool ClockPolicy::second_chance(detail::PageEntry& page) {
  return (page.word.fetch_and(~detail::word::kReferenced, std::memory_order_relaxed) & detail::word::kReferenced) != 0;
}

}  // namespace tvmm::policies
