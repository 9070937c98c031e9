#pragma once
// First in, first out: pages leave in the order they became resident; use does not matter.

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class FifoPolicy final : public ListPolicy {
 public:
  explicit FifoPolicy(std::uint32_t page_count) : ListPolicy(page_count) {}
  [[nodiscard]] const char* name() const noexcept override { return "fifo"; }
  void touch(PageIndex /*first*/, std::size_t /*n*/) override {}
};

}  // namespace tvmm::policies
