#pragma once
// CUDA Unified Memory as the pager, a peer for tvmm-bench on a GPU: every tensor is a managed
// allocation (cuMemAllocManaged), and each pin is the pattern kernels touching the whole tensor (verify
// for reads, fill for writes, as tvmm's own GPU runs do), so the driver faults its pages onto the
// device and evicts others to host memory on its own; compute is the same busy kernel.
//
// The device budget is imposed with a balloon: device memory taken with cuMemCreate (never mapped,
// never touched) until only tvmm's device budget is left free, so Unified Memory is oversubscribed
// exactly as much as tvmm. The managed allocations never exceed the card's free memory (with room to
// spare): asking the driver for more managed memory than the card has can hang the machine.

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/workloads/workload.hpp"

namespace tvmm::bench {

struct UnifiedMemoryOptions {
  std::size_t device_budget = 0;  //!< the device memory Unified Memory may use: tvmm's device budget
  int ordinal = -1;               //!< the GPU (-1: the current context's device, else 0; as Config::cuda_device)
  int iterations = 6;
  int warmup = 2;
};

//! How the peer fits a workload on a card: the managed bytes, and the balloon that leaves only the
//! device budget free. `skipped` says why it cannot run (nothing else is set then).
struct UnifiedMemoryPlan {
  std::size_t managed_bytes = 0;
  std::size_t balloon_bytes = 0;
  std::string skipped;
};

//! Device memory kept free beside the budget for the driver's own use (its page tables, the kernels'
//! module and launch state), and, twice over, the margin the managed allocations leave on the card.
inline constexpr std::size_t kUnifiedMemoryHeadroom = std::size_t{256} << 20;

//! Plans the run from the card's free memory (cuMemGetInfo) and its mapping granularity: the balloon
//! is free - budget - headroom, rounded down to the granularity. Skipped when the managed memory (each
//! tensor rounded up to the granularity) with twice the headroom exceeds the free memory, or when the
//! budget is zero or not below the free memory (nothing to oversubscribe).
UnifiedMemoryPlan plan_unified_memory(const Workload& w, std::size_t device_budget, std::size_t free_bytes,
                                      std::size_t granularity);

struct UnifiedMemoryResult {
  bool ran = false;
  std::string skipped;  //!< why it did not run (no GPU, no managed memory, too large for the card, ...)
  double step_time_s = 0;
  std::size_t managed_bytes = 0;
  std::size_t balloon_bytes = 0;
  std::size_t device_free_bytes = 0;  //!< free device memory once the balloon was in place
  std::uint64_t verified_bytes = 0;
  std::uint64_t mismatched_bytes = 0;
};

//! Runs the workload on Unified Memory on GPU `o.ordinal`. Never throws for a machine that cannot run
//! it (no driver, no GPU, a build without the CUDA toolkit or its kernels): the result says why it
//! was skipped. Throws tvmm::device_error when the GPU fails midway, after freeing what it took.
UnifiedMemoryResult run_unified_memory(const Workload& w, const UnifiedMemoryOptions& o);

}  // namespace tvmm::bench
