#include <gtest/gtest.h>

#include "common/range_allocator.hpp"

using tvmm::common::RangeAllocator;

TEST(RangeAllocator, FirstFitAndCoalescing) {
  RangeAllocator<std::uint32_t> r(10);
  EXPECT_EQ(r.allocate(4), 0u);
  EXPECT_EQ(r.allocate(4), 4u);
  EXPECT_EQ(r.allocate(4), std::nullopt);  // only 2 left
  EXPECT_EQ(r.free_total(), 2u);
  r.free(0, 4);
  EXPECT_EQ(r.largest_free_run(), 4u);
  r.free(4, 4);  // merges with both neighbours: one run of 10
  EXPECT_EQ(r.largest_free_run(), 10u);
  EXPECT_EQ(r.allocate(10), 0u);
  EXPECT_EQ(r.free_total(), 0u);
}

TEST(RangeAllocator, FreeInAnyOrderRestoresOneRun) {
  RangeAllocator<std::size_t> r(6);
  const auto a = *r.allocate(2), b = *r.allocate(2), c = *r.allocate(2);
  r.free(b, 2);
  EXPECT_EQ(r.allocate(3), std::nullopt);  // fragmented
  r.free(c, 2);
  r.free(a, 2);
  EXPECT_EQ(r.largest_free_run(), 6u);
}
