#pragma once
// CLOCK (second chance): a touch sets the page's referenced bit, in the policy's own array (one relaxed
// atomic store, no lock); the sweep clears a set bit and moves the page to the back instead of evicting
// it. A page's bit is cleared when it becomes resident. Close to LRU in what it keeps, with a
// lock-free touch.

#include <atomic>
#include <cstdint>
#include <memory>

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class ClockPolicy final : public ListPolicy {
 public:
  explicit ClockPolicy(std::uint32_t page_count);
  [[nodiscard]] const char* name() const noexcept override { return "clock"; }
  void touch(PageIndex first, std::size_t n) override;

 private:
  bool second_chance(PageIndex page) override;
  void on_insert(PageIndex page) override;

  std::unique_ptr<std::atomic<std::uint8_t>[]> referenced_;  // one per page
};

}  // namespace tvmm::policies
