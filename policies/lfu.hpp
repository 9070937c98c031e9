#pragma once
// Least frequently used: the victim is the resident page used the fewest times since it became
// resident; ties go to the page resident longest. Counts live in the policy's own array, one atomic
// per page of the page table, so a touch is one relaxed increment without the lock. Selection sorts
// the resident pages by count (O(n log n) per eviction batch), which suits studies more than
// production paging. With no notion of recency, it keeps pages that were hot once and are not any
// more: the classic weakness that LRU and CLOCK do not have.

#include <atomic>
#include <cstdint>
#include <memory>

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class LfuPolicy final : public ListPolicy {
 public:
  explicit LfuPolicy(std::uint32_t page_count);
  [[nodiscard]] const char* name() const noexcept override { return "lfu"; }
  void touch(PageIndex first, std::size_t n) override;
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) override;
  //! Its own order, without preference (the list's front is not LFU's order).
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                     std::span<const PageIndex> /*prefer*/) override {
    return select(max, claim);
  }

 private:
  void on_insert(PageIndex page) override;

  std::unique_ptr<std::atomic<std::uint32_t>[]> uses_;  //!< per page: uses since it became resident
};

}  // namespace tvmm::policies
