#include "policies/registry.hpp"

#include <array>

#include "common/registry.hpp"
#include "policies/belady_policy.hpp"
#include "policies/clock.hpp"
#include "policies/fifo.hpp"
#include "policies/lfu.hpp"
#include "policies/lru.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::policies {

namespace {

template <class P>
std::unique_ptr<EvictionPolicy> make(const PolicyContext& ctx) {
  return std::make_unique<P>(ctx.page_count);
}

std::unique_ptr<EvictionPolicy> make_belady(const PolicyContext& ctx) {
  static const std::atomic<std::uint64_t> no_release{0};
  if (ctx.trace == nullptr || !ctx.owner_of) {
    throw config_error("eviction policy \"belady\" needs the pager's access trace and its pages' owners");
  }
  return std::make_unique<BeladyPolicy>(ctx.page_count, *ctx.trace, ctx.keep_recent,
                                        ctx.latest_release != nullptr ? *ctx.latest_release : no_release, ctx.owner_of,
                                        ctx.frames, ctx.page_bytes);
}

// One line per policy: name, summary, needs the trace, run by tvmm-bench by default, factory.
constexpr std::array kPolicies{
    EvictionPolicyInfo{"lru", "least recently used", false, true, &make<LruPolicy>},
    EvictionPolicyInfo{"fifo", "first in, first out", false, true, &make<FifoPolicy>},
    EvictionPolicyInfo{"clock", "second chance; lock-free touch", false, true, &make<ClockPolicy>},
    EvictionPolicyInfo{"lfu", "least frequently used since it became resident; lock-free touch", false, false,
                       &make<LfuPolicy>},
    EvictionPolicyInfo{"belady",
                       "farthest next use in the recorded trace, each weighed by the bytes the page moves; LRU until "
                       "one is recorded; for studies: it ranks all candidates at each eviction",
                       true, true, &make_belady},
};

}  // namespace

std::span<const EvictionPolicyInfo> eviction_policies() noexcept { return kPolicies; }

const EvictionPolicyInfo* find_eviction_policy(std::string_view name) noexcept {
  return common::find_by_name(eviction_policies(), name);
}

std::string eviction_policy_names() {
  std::string out;
  for (const auto& p : kPolicies) out += (out.empty() ? "\"" : ", \"") + std::string(p.name) + "\"";
  return out;
}

std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name, const PolicyContext& ctx) {
  const EvictionPolicyInfo* p = find_eviction_policy(name);
  // Config::validate refuses unknown names first, listing every policy from the key table.
  if (p == nullptr) {
    throw config_error("make_eviction_policy: \"" + std::string(name) + "\" is not one of the eviction policies " +
                       eviction_policy_names());
  }
  return p->make(ctx);
}

}  // namespace tvmm::policies
