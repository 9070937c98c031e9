#pragma once
// The eviction-policy plug-point's one registry: every policy's name, what it needs and its factory,
// in policies/registry.cpp. The pager's factory, the config key `policy.eviction.name` (its choices
// and help), tvmm-bench's `--policies` and the policy conformance suite all read it, so a new policy
// is its own files plus one line there (docs/architecture.md, "Adding an eviction policy").

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "policies/access_trace.hpp"
#include "policies/eviction_policy.hpp"

namespace tvmm::policies {

//! What the pager hands a policy it builds. A policy that keeps per-page state keeps it in arrays of
//! `page_count` entries indexed by PageIndex.
struct PolicyContext {
  std::uint32_t page_count = 0;  //!< pages in the page table
  //! The pager's recorded access trace: set for the policies registered with `needs_trace`.
  const AccessTrace* trace = nullptr;
  std::size_t keep_recent = 0;  //!< Config::keep_recent
  //! The device frames the pager may use (its device budget in pages); 0 where unknown.
  std::uint32_t frames = 0;
  //! What moving page `page` of the tensor with trace id `tensor` weighs, in bytes (called under the
  //! pager's lock); empty where unknown. With `frames`, lets Belady ask which pages the fewest-bytes
  //! schedule reloads anyway (policies::optimal_reloads).
  PageBytes page_bytes;
  //! The mark of the latest stream release (Allocation::released_at); null where there is none.
  const std::atomic<std::uint64_t>* latest_release = nullptr;
  //! Whose a resident page is (its tensor in the trace, its latest release), for the policies that
  //! read the trace; called under the pager's lock. Empty where there is no pager.
  std::function<PageOwner(PageIndex)> owner_of;
};

//! One registered eviction policy.
struct EvictionPolicyInfo {
  std::string_view name;     //!< the value of `policy.eviction.name`
  std::string_view summary;  //!< one line: what it evicts first (config help, docs)
  //! It reads the access trace: the pager records the pins between the first two iteration marks.
  bool needs_trace = false;
  //! tvmm-bench runs it unless `--policies` says otherwise (a policy for one study can leave it out).
  bool benchmarked = true;
  std::unique_ptr<EvictionPolicy> (*make)(const PolicyContext&) = nullptr;
};

//! Every registered policy, in the order help texts list them.
std::span<const EvictionPolicyInfo> eviction_policies() noexcept;
//! The policy named `name`, or null.
const EvictionPolicyInfo* find_eviction_policy(std::string_view name) noexcept;
//! The registered names, quoted and comma-separated (for messages): "\"lru\", \"fifo\", ...".
std::string eviction_policy_names();

}  // namespace tvmm::policies
