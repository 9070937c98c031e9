#pragma once
// The one mechanism under the eviction policies: a Boost.Intrusive list of the resident pages, threaded
// through the policy's own array of list nodes (one per page of the page table), under a spin lock.
// Victims are offered from the front; a policy may give a candidate a second chance (CLOCK), which
// moves it to the back instead. LRU, FIFO and CLOCK differ only in touch() and second_chance(); LFU and
// Belady keep the list and rank it in their own select().

#include <boost/intrusive/list.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/spin_lock.hpp"
#include "policies/eviction_policy.hpp"

namespace tvmm::policies {

class ListPolicy : public EvictionPolicy {
 public:
  //! For a page table of `page_count` pages. `tracks_use`: the policy's touch() calls note_use(), and
  //! select(max, claim, prefer) leaves out the overrides that would spare a likely dead page.
  explicit ListPolicy(std::uint32_t page_count, bool tracks_use = false);
  ~ListPolicy() override;

  void insert(PageIndex page) final;
  //! Joins at the back, as insert does, but without on_insert: per-page state stays.
  void restore(PageIndex page) final;
  void remove(PageIndex page) final;
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) override;
  //! The preferred pages go first, wherever they are in the list (O(|prefer|) and the list's first
  //! `max` pages), then the list's own order, second chances included. Recency is a weak guide in a
  //! training step's loop (LRU evicts the page needed soonest there): measured on the six traces with
  //! the simulator's VMM costs on, a window of the coldest pages kept fewer mappings and ran slower
  //! than the whole list (docs/benchmarks.md, "VMM call costs").
  //! One exception (policies built with `tracks_use`): an override (a preferred page outside the list's
  //! next victims) gives way to a likely dead page, one unused and not loaded for more than twice the
  //! longest gap between two uses of any page lately, plus kDeadMargin rounds (rounds: select calls;
  //! "lately": this window of max(64, list size) rounds and the one before). Where the victim the
  //! override would spare is such a page (LRU's dead pages reach the front), the list's order stands;
  //! otherwise a probe of the next kDeadProbes pages of the page table (a cursor that wraps; FIFO's and
  //! CLOCK's dead pages sit anywhere in their lists) takes the first likely dead page it finds in the
  //! override's place. Best effort: a page the probe has not reached yet is not seen. Sparing a dead
  //! page evicts a live one: after a pass over more tensors than fit, a loop over a part that fits
  //! otherwise had pairs of tensors sharing a frame evict each other on every pass, for good
  //! (docs/benchmarks.md, "A loop the list policies kept moving").
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                     std::span<const PageIndex> prefer) override;
  [[nodiscard]] std::size_t size() const final;

 protected:
  struct Node {
    boost::intrusive::list_member_hook<> hook;
  };
  using List =
      boost::intrusive::list<Node,
                             boost::intrusive::member_hook<Node, boost::intrusive::list_member_hook<>, &Node::hook>,
                             boost::intrusive::constant_time_size<true>>;

  //! Called with the lock held for each candidate; true skips it this sweep and moves it to the back.
  virtual bool second_chance(PageIndex /*page*/) { return false; }
  //! Called by insert before the page joins the list (without the lock): resets per-page state.
  virtual void on_insert(PageIndex /*page*/) {}
  //! Moves the linked pages among [first, first + n) to the back (most recently used); takes the lock.
  void move_to_back(PageIndex first, std::size_t n);
  //! Notes a use of the pages [first, first + n) (lock-free): every touch() of LRU, FIFO and CLOCK, which
  //! are built with `tracks_use`.
  void note_use(PageIndex first, std::size_t n) noexcept;

  [[nodiscard]] PageIndex index_of(const Node& node) const noexcept {
    return static_cast<PageIndex>(&node - nodes_.get());
  }
  [[nodiscard]] Node& node(PageIndex page) noexcept { return nodes_[page]; }

  mutable common::SpinLock mu_;
  const bool tracks_use_;
  const std::uint32_t page_count_;
  std::unique_ptr<Node[]> nodes_;  // one per page of the page table
  // Ages, in eviction rounds (select calls): a page's latest use, and the longest gap between two uses of
  // a page seen lately (this window's and the previous window's); see select(max, claim, prefer).
  std::unique_ptr<std::atomic<std::uint32_t>[]> used_in_;    // per page: the round of its latest use
  std::unique_ptr<std::atomic<std::uint32_t>[]> loaded_in_;  // ... and of its latest insert
  std::atomic<std::uint32_t> round_{1};
  std::atomic<std::uint32_t> reuse_now_{0};  // the longest gap between uses in this window
  std::uint32_t reuse_before_ = 0;           // ... and in the previous one (under mu_)
  std::uint32_t window_start_ = 1;           // (under mu_)
  PageIndex probe_ = 0;                      // the probe's next page (under mu_)
  List list_;                                // front = next victim
};

}  // namespace tvmm::policies
