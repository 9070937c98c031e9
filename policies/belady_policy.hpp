#pragma once
// Belady as an eviction policy, given a recorded trace: the victim is the page whose tensor is pinned
// again farthest in the future (never = first), except that pages of tensors pinned in the last
// `keep_recent` pins come after all others (see Config::keep_recent). Until a trace is being replayed
// it keeps LRU order. Selection ranks every candidate (O(n log n) per eviction batch): meant for
// studies and benchmarks.

#include "policies/list_policy.hpp"
#include "vmm/access_trace.hpp"

namespace tvmm::policies {

class BeladyPolicy final : public ListPolicy {
 public:
  BeladyPolicy(const detail::AccessTrace& trace, std::size_t keep_recent) : trace_(trace), keep_recent_(keep_recent) {}
  [[nodiscard]] const char* name() const noexcept override { return "belady"; }
  void touch(detail::PageEntry* pages, std::size_t n) override { move_to_back(pages, n); }
  std::size_t select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) override;

 private:
  const detail::AccessTrace& trace_;
  const std::size_t keep_recent_;
};

}  // namespace tvmm::policies
