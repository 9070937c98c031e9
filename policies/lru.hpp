#pragma once
// Least-recently-used eviction over a Boost.Intrusive list threaded through the page entries: touch,
// insert, remove and victim selection are O(1) with no allocation. Front = least recently used.

#include <mutex>

#include "vmm/detail/spin_lock.hpp"

#include <boost/intrusive/list.hpp>

#include "policies/eviction_policy.hpp"

namespace tvmm::policies {

class LruPolicy final : public EvictionPolicy {
 public:
  LruPolicy() = default;
  ~LruPolicy() override;

  [[nodiscard]] const char* name() const noexcept override { return "lru"; }
  void insert(detail::PageEntry& page) override;
  void touch(detail::PageEntry* pages, std::size_t n) override;
  void remove(detail::PageEntry& page) override;
  std::size_t select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) override;
  [[nodiscard]] std::size_t size() const override;

 private:
  using Hook = boost::intrusive::member_hook<detail::PageEntry, boost::intrusive::list_member_hook<>,
                                             &detail::PageEntry::policy_hook>;
  using List = boost::intrusive::list<detail::PageEntry, Hook, boost::intrusive::constant_time_size<true>>;

  mutable detail::SpinLock mu_;
  List list_;
};

}  // namespace tvmm::policies
