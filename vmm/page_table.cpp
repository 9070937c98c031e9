#include "vmm/page_table.hpp"

namespace tvmm::detail {

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

}  // namespace tvmm::detail
