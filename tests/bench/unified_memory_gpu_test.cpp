// The Unified Memory peer on a real GPU (label "gpu"): skips, with the reason, without a driver, a GPU,
// managed memory or the GPU kernels.
#include <gtest/gtest.h>

#include "bench/peers/unified_memory.hpp"
#include "test_support.hpp"

namespace tvmm::bench {
namespace {

TEST(UnifiedMemoryGpu, RunsAWorkloadOverTheBudgetWithEveryByteCorrect) {
  // 8 tensors of 16 MiB, each read then rewritten in turn, with a device budget of half of them.
  Workload w;
  w.name = "um";
  for (std::uint32_t t = 0; t < 8; ++t) {
    w.tensor_bytes.push_back(16 * MiB);
    w.step.push_back({{{t, Access::read_write}}, 100, {}});
  }
  UnifiedMemoryOptions o;
  o.device_budget = 64 * MiB;
  o.iterations = 3;
  o.warmup = 1;
  const auto r = run_unified_memory(w, o);
  if (!r.ran) GTEST_SKIP() << "the Unified Memory peer did not run: " << r.skipped;
  EXPECT_EQ(r.mismatched_bytes, 0u);
  EXPECT_EQ(r.verified_bytes, 3u * 8 * 16 * MiB);  // every tensor read back once per iteration
  EXPECT_EQ(r.managed_bytes, 8 * 16 * MiB);
  EXPECT_GT(r.balloon_bytes, 0u);
  // The balloon leaves about the budget free (the driver's own use comes out of the headroom).
  EXPECT_LE(r.device_free_bytes, o.device_budget + 2 * kUnifiedMemoryHeadroom);
  EXPECT_GE(r.step_time_s, 8 * 100e-6);  // at least the busy kernels
}

}  // namespace
}  // namespace tvmm::bench
