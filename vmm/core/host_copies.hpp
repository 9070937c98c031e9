#pragma once
// Host copies of resident pages, in one owner. After a page-in from a host slot completes, the slot
// may be kept as a copy while the page's contents are unchanged (word::kHostCopy), so that evicting the
// page again needs no write-back; so may the slot a write-behind copied a page to. Copies live only in the host tier's
// spare room and are the first thing taken back when a slot is needed. All methods require the pager lock.

#include <cstdint>
#include <deque>
#include <optional>

#include "vmm/core/host_tier.hpp"
#include "vmm/core/page_table.hpp"

namespace tvmm::vmm {

class HostCopies {
 public:
  // Not noexcept: libstdc++'s std::deque allocates even when default-constructed (std::bad_alloc).
  HostCopies(PageTable& table, HostTier& host) : table_(table), host_(host) {}

  //! After `p`'s page-in from its host slot completed: keeps the slot as a copy while the contents are
  //! unchanged (word::kHostCopy still set) and the tier has room, else lets it go.
  void keep_or_release(PageEntry& p) noexcept;
  //! After a write-behind copy into `p`'s slot was retired, its contents unchanged since: keeps the slot
  //! as a copy whatever the room (the copy was made for an eviction expected soon; it is still the first
  //! thing taken back when a slot is needed).
  void keep(PageEntry& p) noexcept;
  //! A pin that may write changes `p`'s contents: its kept copy is stale. Lets the slot go unless a
  //! page-in from it is still running (then the page-in's retirement does).
  void drop(PageEntry& p) noexcept;
  //! Frees one host slot by taking back the oldest kept copy of a resident page (which then needs a
  //! write-back when evicted). False if no page keeps one.
  bool take_back_one() noexcept;
  //! A free host slot, or one taken back from a kept copy; none if neither exists.
  std::optional<std::uint32_t> acquire_slot() noexcept;

 private:
  PageTable& table_;
  HostTier& host_;
  std::deque<std::uint32_t> kept_;  // resident pages keeping a host copy, oldest first (lazy)
};

}  // namespace tvmm::vmm
