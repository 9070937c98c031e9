#pragma once
// Belady as an eviction policy, given a recorded trace: the victim is the page whose tensor is pinned
// again farthest in the future (never = first). Until a trace is being replayed it keeps LRU order.
// Selection ranks every candidate (O(n log n) per eviction batch): meant for studies and benchmarks.

#include "policies/list_policy.hpp"
#include "vmm/access_trace.hpp"

namespace tvmm::policies {

class BeladyPolicy final : public ListPolicy {
 public:
  explicit BeladyPolicy(const detail::AccessTrace& trace) : trace_(trace) {}
  [[nodiscard]] const char* name() const noexcept override { return "belady"; }
  void touch(detail::PageEntry* pages, std::size_t n) override { move_to_back(pages, n); }
  std::size_t select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) override;

 private:
  const detail::AccessTrace& trace_;
};

}  // namespace tvmm::policies
