#pragma once
// CLOCK (second chance): a touch sets the page's referenced bit in its state word (one atomic OR, no
// lock); the sweep clears a set bit and moves the page to the back instead of evicting it. Close to LRU
// in what it keeps, with a lock-free touch.

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class ClockPolicy final : public ListPolicy {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "clock"; }
  void touch(detail::PageEntry* pages, std::size_t n) override;

 private:
  bool second_chance(detail::PageEntry& page) override;
};

}  // namespace tvmm::policies
