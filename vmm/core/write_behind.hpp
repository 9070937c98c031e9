#pragma once
// Write-behind decisions: which writes the pager copies to the host tier as soon as their kernel is
// done, while the page stays resident, so that the page's later eviction moves nothing
// (docs/architecture.md, "Write-behind"; the copying is PagerImpl::write_behind).
//
// Why: a dirty victim is written back when a pin needs its frame, and the page-in or fresh output that
// takes the frame waits for that copy. In a training step those evictions bunch up where fresh data
// needs frames (the forward pass makes activations while the optimizer state the previous step wrote
// still fills the device), and the device-to-host bus runs alone there, while it idles in the backward
// pass and the optimizer, where the host-to-device bus is busy. Copying a page right after its last
// write before an eviction does the same copy earlier, beside the page-ins.
//
// Which writes: with a replaying access trace, for each position of a pin that may write, what became
// of the data that pin wrote in the iterations before. A score per position:
//  - +1 (up to kMax) when a page of the tensor left the device before the tensor's next write;
//  - kBackOff when the write was copied behind but a page still had to be written back at eviction
//    (its copy was taken back for another page's write-back, or had no host slot: the host tier is full);
//  - -2 when it was copied behind and stayed resident until its next write (a wasted copy);
//  - one step towards 0 when it was neither copied nor evicted.
// A write is copied behind when its position's score is positive: after one iteration in which its
// data was evicted, and not for a few iterations after a copy that did not save a write-back.
//
// When: not while the host tier fills up. A full tier takes its kept copies back (the oldest first)
// for the write-backs and NVMe reads that need slots, so a copy made then is mostly taken back before
// its page's eviction, having saved nothing (the encoder at 2x with half its evicted data on NVMe:
// half the copies were). So no write is copied in an iteration in which the tier filled up, or in the
// one after it.
// The pager calls every method under its lock; the class has none of its own.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "policies/access_trace.hpp"

namespace tvmm::vmm {

class WriteBehind {
 public:
  static constexpr std::int8_t kMax = 3;
  static constexpr std::int8_t kBackOff = -4;

  //! A pin that may write `tensor`, at `at` (AccessTrace::position() after the pin). Settles what became
  //! of the tensor's previous write and returns whether this one should be copied behind.
  bool on_write(std::uint64_t tensor, const policies::AccessTrace::Position& at);
  //! The latest write of `tensor` was copied behind (all its resident pages that needed it, or some).
  void copied(std::uint64_t tensor);
  //! A page of `tensor` left the device with live contents. `had_copy`: it needed no write-back (its
  //! host or NVMe copy was current).
  void evicted(std::uint64_t tensor, bool had_copy);
  //! `tensor` was freed.
  void forget(std::uint64_t tensor) { last_.erase(tensor); }
  //! An iteration boundary; `fills` is HostTier::fills() now.
  void on_iteration(std::uint64_t fills) noexcept {
    fills_before_ = fills_at_iteration_;
    fills_at_iteration_ = fills;
  }
  //! Whether the host tier filled up (HostTier::fills() is `fills` now) in this iteration or the one
  //! before: then no write is copied.
  [[nodiscard]] bool host_tier_filled(std::uint64_t fills) const noexcept { return fills != fills_before_; }
  //! The score of a position (for tests and checks); 0 for one never seen.
  [[nodiscard]] std::int8_t score(std::size_t index) const { return index < score_.size() ? score_[index] : 0; }

 private:
  struct LastWrite {
    std::size_t index;     // its position in the trace
    bool copied = false;   // copied behind
    bool evicted = false;  // a page left the device since, needing no write-back or never copied
    bool lost = false;     // copied behind, yet a page left the device needing a write-back
  };
  std::vector<std::int8_t> score_;  // per trace position
  std::size_t length_ = 0;          // the trace the scores are for: its length and drops
  std::uint64_t drops_ = 0;
  std::unordered_map<std::uint64_t, LastWrite> last_;  // per tensor, its latest write
  std::uint64_t fills_before_ = 0;                     // HostTier::fills() when the iteration before this one began
  std::uint64_t fills_at_iteration_ = 0;               // and when this one began
};

}  // namespace tvmm::vmm
