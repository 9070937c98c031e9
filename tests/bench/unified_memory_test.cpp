// The Unified Memory peer: how it fits a workload on a card (no GPU needed), and, on a GPU (the
// UnifiedMemoryGpu test, label "gpu"), that it runs a workload over the budget with every byte correct.
#include "bench/peers/unified_memory.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace tvmm::bench {
namespace {

constexpr std::size_t kGran = 2 * MiB;

Workload three_tensors() {
  Workload w;
  w.name = "three";
  w.tensor_bytes = {10 * MiB, 1 * MiB + 1, 4 * MiB};  // 10, 2 and 4 MiB once rounded to 2 MiB
  w.step = {{{{0, Access::read}, {1, Access::write}}, 10, {}}, {{{2, Access::read_write}}, 10, {}}};
  return w;
}

TEST(UnifiedMemoryPlan, TheBalloonLeavesTheBudgetAndTheHeadroomFree) {
  const auto w = three_tensors();
  const std::size_t free = 80ull << 30;
  const auto plan = plan_unified_memory(w, 8 * MiB, free, kGran);
  ASSERT_EQ(plan.skipped, "");
  EXPECT_EQ(plan.managed_bytes, 16 * MiB);  // each tensor rounded up to the granularity
  EXPECT_EQ(plan.balloon_bytes, free - 8 * MiB - kUnifiedMemoryHeadroom);
  EXPECT_EQ(plan.balloon_bytes % kGran, 0u);
}

TEST(UnifiedMemoryPlan, TheBalloonIsRoundedDownToTheGranularity) {
  const auto plan = plan_unified_memory(three_tensors(), 8 * MiB, (4ull << 30) + 3 * MiB, kGran);
  ASSERT_EQ(plan.skipped, "");
  EXPECT_EQ(plan.balloon_bytes % kGran, 0u);
  // Never more than free - budget - headroom: the budget stays available to Unified Memory.
  EXPECT_LE(plan.balloon_bytes, (4ull << 30) + 3 * MiB - 8 * MiB - kUnifiedMemoryHeadroom);
  EXPECT_GT(plan.balloon_bytes + kGran, (4ull << 30) + 3 * MiB - 8 * MiB - kUnifiedMemoryHeadroom);
}

TEST(UnifiedMemoryPlan, ManagedMemoryBeyondTheFreeMemoryIsRefusedWithTheReason) {
  // 16 MiB of managed memory and twice the headroom do not fit 500 MiB free: the peer must not ask.
  const auto plan = plan_unified_memory(three_tensors(), 8 * MiB, 500 * MiB, kGran);
  EXPECT_NE(plan.skipped.find("exceed the card's free memory (500 MiB)"), std::string::npos) << plan.skipped;
  EXPECT_NE(plan.skipped.find("16 MiB of managed memory"), std::string::npos) << plan.skipped;
  EXPECT_EQ(plan.balloon_bytes, 0u);
}

TEST(UnifiedMemoryPlan, ABudgetNotBelowTheFreeMemoryHasNothingToOversubscribe) {
  const auto plan = plan_unified_memory(three_tensors(), 1ull << 30, (1ull << 30) + 100 * MiB, kGran);
  EXPECT_NE(plan.skipped.find("nothing to oversubscribe"), std::string::npos) << plan.skipped;
  EXPECT_NE(plan_unified_memory(three_tensors(), 0, 80ull << 30, kGran).skipped, "");
}

}  // namespace
}  // namespace tvmm::bench
