#pragma once
// First in, first out: pages leave in the order they became resident; use does not matter.

#include "policies/list_policy.hpp"

namespace tvmm::policies {

class FifoPolicy final : public ListPolicy {
 public:
  explicit FifoPolicy(std::uint32_t page_count) : ListPolicy(page_count, true) {}
  [[nodiscard]] const char* name() const noexcept override { return "fifo"; }
  void touch(PageIndex first, std::size_t n) override { note_use(first, n); }
};

}  // namespace tvmm::policies
