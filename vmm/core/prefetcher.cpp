#include "vmm/core/prefetcher.hpp"

#include <algorithm>
#include <new>

namespace tvmm::vmm {

using policies::AccessTrace;

Prefetcher::Prefetcher(const Config& config, bool policy_needs_trace)
    : distance_(config.prefetch_distance != 0     ? config.prefetch_distance
                : config.prefetch == "sequential" ? kSequentialPages
                                                  : kTracePins),
      trace_prefetch_(config.prefetch == "trace"),
      sequential_prefetch_(config.prefetch == "sequential"),
      recording_(trace_prefetch_ || policy_needs_trace) {}

std::vector<AccessTrace::Ahead> Prefetcher::keep_loads(std::vector<AccessTrace::Ahead> ahead) const {
  if (!trace_prefetch_) return {};
  // A pin that overwrites its tensor needs no data: its own pin maps fresh frames. (Loading with
  // discard here would lose data if the program's access changed: the trace only guides.)
  std::erase_if(ahead, [](const AccessTrace::Ahead& t) { return t.discard; });
  return ahead;
}

std::vector<AccessTrace::Ahead> Prefetcher::record_pin(const Allocation* a, PageSpan span, Access access) noexcept {
  policies::TraceAccess acc{a->id, span.count, access == Access::write, false, span.first};
  acc.writes = access != Access::read;  // the trace says which pins leave their pages dirty
  try {
    return keep_loads(trace_.on_pin(acc, distance_));
  } catch (const std::bad_alloc&) {
    return {};  // prefetch is a hint: without memory for it, nothing is loaded ahead (the trace stays whole)
  }
}

std::vector<AccessTrace::Ahead> Prefetcher::on_iteration() {
  if (!recording_) return {};
  return keep_loads(trace_.on_iteration(distance_));
}

}  // namespace tvmm::vmm
