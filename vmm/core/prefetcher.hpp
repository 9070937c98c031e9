#pragma once
// Prefetch decisions, in one owner: the access trace (the recorded iteration of pins, replayed), the
// prefetch mode (policy.prefetch: none, trace or sequential) and its distance. It says what to load
// ahead of the program and which pages such a load must not evict; the pager's residency core does the
// loading (PagerImpl::prefetch_ahead / prefetch_after: no waiting, only free or evictable frames).
// The eviction policy (Belady) and the NVMe spill read the same trace through trace().

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "policies/access_trace.hpp"
#include "tvmm/config.hpp"
#include "tvmm/pager.hpp"
#include "vmm/core/allocation.hpp"

namespace tvmm::vmm {

class Prefetcher {
 public:
  //! The distances Config::prefetch_distance = 0 stands for. One pin for trace prefetch: on the
  //! benchmark's eight model traces, where the program pins on streams and so runs ahead of the
  //! device (its pins load early by themselves), 4 pins took 1.025x the time of no prefetch (geometric
  //! mean; up to 1.11x) and 1 pin 0.999x; where the host waits for each kernel, 1 pin was the fastest
  //! with the driver's call costs, 0.978x against 0.999x at 4 (docs/benchmarks.md, "Held-out
  //! models"). Four pages for sequential prefetch, as before.
  static constexpr std::size_t kTracePins = 1;
  static constexpr std::size_t kSequentialPages = 4;
  //! The distance in use (Config::prefetch_distance, or the mode's default for 0).
  [[nodiscard]] std::size_t distance() const noexcept { return distance_; }
  //! `policy_needs_trace`: the eviction policy reads the trace, so pins are recorded even without
  //! trace prefetch.
  Prefetcher(const Config& config, bool policy_needs_trace);

  //! The access trace (for the eviction policy's context, the spill's next-use order and Stats).
  [[nodiscard]] policies::AccessTrace& trace() noexcept { return trace_; }
  [[nodiscard]] const policies::AccessTrace& trace() const noexcept { return trace_; }
  //! True while the trace replays a recorded iteration: next_use() means something.
  [[nodiscard]] bool replaying() const {
    return recording_ && trace_.state() == policies::AccessTrace::State::replaying;
  }

  //! A pin of `span` of `a` with `access` (every pin, hit or miss, after it succeeded). Returns the
  //! pins to load ahead for (trace prefetch; those that overwrite their tensor are left out: their own
  //! pin maps fresh frames).
  std::vector<policies::AccessTrace::Ahead> on_pin(const Allocation* a, PageSpan span, Access access) noexcept {
    return recording_ ? record_pin(a, span, access) : std::vector<policies::AccessTrace::Ahead>{};  // hit path
  }
  //! An iteration mark: as on_pin, for the first pins of the next iteration.
  std::vector<policies::AccessTrace::Ahead> on_iteration();
  //! Sequential prefetch: the pages after `span` of `a` to load (up to the distance), or nothing in the
  //! other modes or past the tensor's end.
  [[nodiscard]] std::optional<PageSpan> after(const Allocation* a, PageSpan span) const noexcept {
    if (!sequential_prefetch_) return std::nullopt;
    const std::uint32_t first = span.first + span.count;
    const auto count =
        static_cast<std::uint32_t>(std::min<std::size_t>(distance_, a->pages - std::min(a->pages, first)));
    if (count == 0) return std::nullopt;
    return PageSpan{first, count};
  }

  //! Whether a load for `target` must leave the page of a tensor with id `owner` alone: `target`'s
  //! tensor itself, or one needed no later than it (its own pin would evict another, and loading early
  //! would cost an extra reload; see AccessTrace::prefetch_horizon). `horizon` is
  //! horizon_of(target), computed once per target.
  [[nodiscard]] std::size_t horizon_of(const policies::AccessTrace::Ahead& target) const {
    return trace_.prefetch_horizon(target.distance);
  }
  [[nodiscard]] bool needed_sooner(std::uint64_t owner, const policies::AccessTrace::Ahead& target,
                                   std::size_t horizon) const {
    return owner == target.tensor || trace_.next_use(owner) < horizon;
  }

 private:
  std::vector<policies::AccessTrace::Ahead> record_pin(const Allocation* a, PageSpan span, Access access) noexcept;
  std::vector<policies::AccessTrace::Ahead> keep_loads(std::vector<policies::AccessTrace::Ahead> ahead) const;

  policies::AccessTrace trace_;
  std::size_t distance_;
  bool trace_prefetch_;       // prefetch == "trace"
  bool sequential_prefetch_;  // prefetch == "sequential"
  bool recording_;            // trace prefetch or a policy that reads the trace: pins are recorded and replayed
};

}  // namespace tvmm::vmm
