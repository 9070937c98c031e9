#pragma once
// Contract of the eviction-policy plug-point.
//
// A policy orders the device-resident pages and proposes victims. Pages are named by their index in
// the pager's page table (0 .. PolicyContext::page_count - 1); a policy keeps whatever it needs per
// page in its own arrays. It is internally synchronised (the pin hit path calls touch() without the
// pager lock), so every method may be called from any thread.
//   insert(p)    p just became resident and is not in the policy. Post: p is a candidate.
//   touch(p, n)  the n pages p, p + 1, ... were used; pages not in the policy are ignored.
//   remove(p)    p is no longer resident (or is being released); no-op if absent.
//   select(k, claim)
//                walks candidates from the best victim on and offers each to `claim` (called with the
//                policy lock held; it must not call back into the policy). A page for which claim
//                returns true is removed from the policy. Stops after k claims or when candidates run
//                out; returns the number claimed. Claim decides pin/state checks, so the policy never
//                evicts pinned pages on its own.
//   select(k, claim, prefer)
//                as select, but first offers the pages of `prefer` (sorted) that are candidates, among
//                those the policy rates as good enough victims; the base class ignores `prefer`. The
//                pager prefers the pages holding the frames that the pages it loads are still mapped
//                to (PageEntry::mapped): evicting one of those saves the incoming page the driver's
//                map, access grant and unmap. A policy may offer another candidate in a preferred
//                page's place where preferring it would cost more than the calls (ListPolicy: a likely
//                dead page goes first).
// insert, restore, touch and remove must not throw: the pager calls them where a failure could not be
// rolled back (publishing a page-in, giving failed victims back). select may throw (std::bad_alloc)
// before or between claims; the pager then gives the claimed pages back.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/function_ref.hpp"

namespace tvmm::policies {

//! A page: its index in the pager's page table.
using PageIndex = std::uint32_t;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  EvictionPolicy() = default;
  EvictionPolicy(const EvictionPolicy&) = delete;
  EvictionPolicy& operator=(const EvictionPolicy&) = delete;

  [[nodiscard]] virtual const char* name() const noexcept = 0;
  virtual void insert(PageIndex page) = 0;
  //! A page whose eviction failed rejoins (it was removed by select's claim), keeping what the policy
  //! knew of it (LFU's count, CLOCK's reference bit): its eviction did not make it new.
  virtual void restore(PageIndex page) { insert(page); }
  virtual void touch(PageIndex first, std::size_t n) = 0;
  virtual void remove(PageIndex page) = 0;
  virtual std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) = 0;
  virtual std::size_t select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                             std::span<const PageIndex> /*prefer*/) {
    return select(max, claim);
  }
  [[nodiscard]] virtual std::size_t size() const = 0;
};

struct PolicyContext;

//! Creates the registered policy named `name` (policies/registry.hpp) for the pages and trace in `ctx`;
//! throws tvmm::config_error for a name not registered, or a policy that needs what `ctx` lacks.
std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name, const PolicyContext& ctx);

}  // namespace tvmm::policies
