#pragma once
// Least recently used: a touch moves the page to the back, so the front is the least recently used.

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class LruPolicy final : public ListPolicy {
 public:
  explicit LruPolicy(std::uint32_t page_count) : ListPolicy(page_count, true) {}
  [[nodiscard]] const char* name() const noexcept override { return "lru"; }
  void touch(PageIndex first, std::size_t n) override;
};

}  // namespace tvmm::policies
