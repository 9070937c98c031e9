#pragma once
// Belady as an eviction policy, given a recorded trace: the victim is the page whose tensor is pinned
// again farthest in the future (never = first), each next use weighed by what moving the page costs
// (PageOwner::cost: a tensor's partial last page moves fewer bytes, so the frame it frees costs less):
// the farthest (pins to the next use + 1) / cost goes first. With pages of one size that is Belady's
// order; with partial pages it is a greedy rule for weighted paging, whose optimum loads up to 46%
// fewer bytes than farthest-next-use on the model traces (min_load_bytes, docs/benchmarks.md). Three
// exceptions:
// - pages of tensors pinned in the last `keep_recent` pins come after all others (Config::keep_recent;
//   0 by default);
// - a page of a tensor released by the work queued last on a stream (see `latest_release`) is
//   deferred in favour of another candidate that, like it, is not pinned again in this iteration and
//   is among the kDeferWindow x `max` farthest. A stream's pins run ahead of its kernels: such a page's
//   write-back, and the page-in into its frame, would wait for the kernel that has just been queued,
//   while an older page's copies overlap it. Among pages not needed again before the next iteration,
//   the farthest-first order barely changes the bytes moved (measured in docs/benchmarks.md);
// - such a page whose frame would wait for a copy of it (PageOwner::copy_out: a write-back) is also
//   deferred in favour of any candidate among the same farthest whose next use is at least half as
//   far, pinned again in this iteration or not: its frame is free only when the kernel just queued
//   has ended and the write-back has run after it, so the next kernel, whose pages take that frame,
//   would wait for the write-back. On training loops (a backward pass evicting the gradient it has
//   just written) this stall came once per kernel.
// The preferred pages of select(max, claim, prefer) go before both deferrals (see there).
// Until a trace is being replayed it keeps LRU order. Selection ranks every candidate (O(n log n) per
// eviction batch): meant for studies and benchmarks.

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "policies/access_trace.hpp"
#include "policies/belady.hpp"
#include "policies/list_policy.hpp"

namespace tvmm::policies {

class BeladyPolicy final : public ListPolicy {
 public:
  //! How far past Belady's own choice a deferred page's replacement may lie: within the
  //! kDeferWindow x `max` farthest candidates. Measured on the six traces and two training loops
  //! (docs/benchmarks.md, "Deferring the pages of the last kernel"): 2 helped only the loops, 4 also
  //! GPT-2 and the encoder, no limit moved 1.13x Belady's bytes on the LSTM at 2x.
  static constexpr std::size_t kDeferWindow = 4;
  //! See select(max, claim, prefer).
  static constexpr std::size_t kPreferShare = 2;
  //! Replayed iterations in which select(max, claim, prefer) ignores `prefer` among the farther half:
  //! see there.
  static constexpr std::size_t kPairingIterations = 1;
  //! The most work (frames x (pages referenced + pins) per recorded iteration) spent on the optimum's
  //! reloads (optimal_reloads), once per recorded trace and under the pager's lock: about a second on
  //! this project's 2-core VM (GPT-2's trace at 1.25x, 1.1e6, took 67 ms). Beyond it, no page counts
  //! as reloaded anyway.
  static constexpr double kReloadPlanWork = 1.5e7;

  //! `owner_of` says whose page a resident page is (called under the pager's lock, from select);
  //! `latest_release`: the mark of the latest stream release; tensors that carry it are the ones
  //! deferred. It is read, never written, here. `frames` (the device frames the pager may use) and
  //! `page_bytes` (what moving a page weighs, called under the pager's lock) let select(max, claim,
  //! prefer) ask which pages the optimum reloads anyway; with either missing (0, empty), none counts.
  BeladyPolicy(std::uint32_t page_count, const AccessTrace& trace, std::size_t keep_recent,
               const std::atomic<std::uint64_t>& latest_release, std::function<PageOwner(PageIndex)> owner_of,
               std::uint32_t frames = 0, PageBytes page_bytes = {})
      : ListPolicy(page_count),
        trace_(trace),
        keep_recent_(keep_recent),
        latest_release_(latest_release),
        owner_of_(std::move(owner_of)),
        frames_(frames),
        page_bytes_(std::move(page_bytes)) {}
  [[nodiscard]] const char* name() const noexcept override { return "belady"; }
  void touch(PageIndex first, std::size_t n) override { move_to_back(first, n); }
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) override;
  //! Preferred pages go first among the farther 1 / kPreferShare of the candidates by next use and
  //! those not pinned again in this iteration (in the same keep_recent class as Belady's own choice).
  //! Measured on the six traces with the simulator's VMM costs on (docs/benchmarks.md, "VMM call
  //! costs"): the farther half kept 1.00-1.07x Belady's bytes on all but the LSTM; a larger share
  //! moved more bytes and, by breaking more pairings, remapped more.
  //! Not in the first kPairingIterations replayed iterations: there Belady's own order hands each
  //! incoming page its victim's frame, and the pairings of pages and frames that the preference then
  //! keeps are the ones Belady makes. Those made before, in LRU order while the trace was recorded,
  //! pair pages that Belady keeps resident together, and keeping them evicts pages needed soon:
  //! docs/benchmarks.md, "Pairings formed in Belady's order".
  //! Wherever it stands, and from the first replayed iteration on, a preferred page also goes first if
  //! the fewest-bytes schedule (optimal_reloads, computed once per recorded trace for `frames`) loads
  //! it again at its next reference: evicting it now costs no byte that the optimum does not pay. On
  //! the model traces at 5x and 8x this took 0.944 of the step (docs/benchmarks.md, "Holders the
  //! optimum reloads anyway").
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                     std::span<const PageIndex> prefer) override;

 private:
  std::size_t rank_and_select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                              std::span<const PageIndex> prefer);
  // Computes reloads_ for the trace being replayed, unless known already. Under mu_.
  void plan_reloads() noexcept;
  // Whether the optimum (reloads_) loads page `page` of `tensor` again at its next reference. Under mu_.
  [[nodiscard]] bool reloaded_anyway(std::uint64_t tensor, std::uint32_t page) const;

  const AccessTrace& trace_;
  const std::size_t keep_recent_;
  const std::atomic<std::uint64_t>& latest_release_;
  const std::function<PageOwner(PageIndex)> owner_of_;
  const std::uint32_t frames_;
  const PageBytes page_bytes_;
  //! optimal_reloads of the recorded trace (empty: none known), for the trace of divergence count
  //! `reloads_of_`. Guarded by mu_.
  std::vector<std::vector<Reload>> reloads_;
  std::uint64_t reloads_of_ = ~std::uint64_t{0};
};

}  // namespace tvmm::policies
