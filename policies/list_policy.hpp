#pragma once
// The one mechanism under the eviction policies: a Boost.Intrusive list of the resident pages threaded
// through the page entries, under a spin lock. Victims are offered from the front; a policy may give a
// candidate a second chance (CLOCK), which moves it to the back instead. LRU, FIFO and CLOCK differ only
// in touch() and second_chance(); LFU and Belady keep the list and rank it in their own select().

#include <boost/intrusive/list.hpp>

#include "policies/eviction_policy.hpp"
#include "vmm/detail/spin_lock.hpp"

namespace tvmm::policies {

class ListPolicy : public EvictionPolicy {
 public:
  ~ListPolicy() override;

  void insert(detail::PageEntry& page) final;
  void remove(detail::PageEntry& page) final;
  std::size_t select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) override;
  [[nodiscard]] std::size_t size() const final;

 protected:
  using Hook = boost::intrusive::member_hook<detail::PageEntry, boost::intrusive::list_member_hook<>,
                                             &detail::PageEntry::policy_hook>;
  using List = boost::intrusive::list<detail::PageEntry, Hook, boost::intrusive::constant_time_size<true>>;

  //! Called with the lock held for each candidate; true skips it this sweep and moves it to the back.
  virtual bool second_chance(detail::PageEntry& /*page*/) { return false; }
  //! Called by insert before the page joins the list (without the lock): resets per-page state.
  virtual void on_insert(detail::PageEntry& /*page*/) {}
  //! Moves the linked pages among `pages[0, n)` to the back (most recently used); takes the lock.
  void move_to_back(detail::PageEntry* pages, std::size_t n);

  mutable detail::SpinLock mu_;
  List list_;  // front = next victim
};

}  // namespace tvmm::policies
