#pragma once
// The one mechanism under the eviction policies: a Boost.Intrusive list of the resident pages, threaded
// through the policy's own array of list nodes (one per page of the page table), under a spin lock.
// Victims are offered from the front; a policy may give a candidate a second chance (CLOCK), which
// moves it to the back instead. LRU, FIFO and CLOCK differ only in touch() and second_chance(); LFU and
// Belady keep the list and rank it in their own select().

#include <boost/intrusive/list.hpp>

#include <memory>

#include "common/spin_lock.hpp"
#include "policies/eviction_policy.hpp"

namespace tvmm::policies {

class ListPolicy : public EvictionPolicy {
 public:
  //! For a page table of `page_count` pages.
  explicit ListPolicy(std::uint32_t page_count);
  ~ListPolicy() override;

  void insert(PageIndex page) final;
  //! Joins at the back, as insert does, but without on_insert: per-page state stays.
  void restore(PageIndex page) final;
  void remove(PageIndex page) final;
  std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) override;
  //! The preferred pages go first, wherever they are in the list (O(|prefer|), no walk of the list),
  //! then the list's own order, second chances included. Recency is a weak guide in a training step's
  //! loop (LRU evicts the page needed soonest there): measured on the six traces with the simulator's
  //! VMM costs on, a window of the coldest pages kept fewer mappings and ran slower than the whole
  //! list (docs/benchmarks.md, "VMM call costs").
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

  [[nodiscard]] PageIndex index_of(const Node& node) const noexcept {
    return static_cast<PageIndex>(&node - nodes_.get());
  }
  [[nodiscard]] Node& node(PageIndex page) noexcept { return nodes_[page]; }

  mutable common::SpinLock mu_;
  std::unique_ptr<Node[]> nodes_;  // one per page of the page table
  List list_;                      // front = next victim
};

}  // namespace tvmm::policies
