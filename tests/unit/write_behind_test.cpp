// WriteBehind, the decisions of write-behind: per trace position of a write, a score learnt from what
// became of the data that write left in earlier iterations.
#include <gtest/gtest.h>

#include "vmm/core/write_behind.hpp"

using tvmm::policies::AccessTrace;
using tvmm::vmm::WriteBehind;

namespace {
AccessTrace::Position at(std::size_t index, std::size_t length = 10, std::uint64_t drops = 0) {
  return {index, length, drops};
}
}  // namespace

TEST(WriteBehind, CopiesAWriteOnceAnIterationEvictedItsDataBeforeTheNextWrite) {
  WriteBehind wb;
  EXPECT_FALSE(wb.on_write(7, at(2))) << "nothing learnt yet";
  wb.evicted(7, false);  // the data of the write at 2 left the device, written back
  EXPECT_TRUE(wb.on_write(7, at(2))) << "the next iteration's write at 2 is copied behind";
  EXPECT_EQ(wb.score(2), 1);
  wb.copied(7);
  wb.evicted(7, true);  // and its eviction moved nothing
  EXPECT_TRUE(wb.on_write(7, at(2)));
  EXPECT_EQ(wb.score(2), 2);
  // Other positions and tensors have scores of their own.
  EXPECT_FALSE(wb.on_write(8, at(3)));
  EXPECT_FALSE(wb.on_write(8, at(3)));
  EXPECT_EQ(wb.score(3), 0);
}

TEST(WriteBehind, ACopyThatStayedResidentUntilTheNextWriteLowersTheScoreByTwo) {
  WriteBehind wb;
  (void)wb.on_write(1, at(0));
  wb.evicted(1, false);
  ASSERT_TRUE(wb.on_write(1, at(0)));  // score 1
  wb.copied(1);                        // copied, then written again without an eviction: wasted
  EXPECT_FALSE(wb.on_write(1, at(0)));
  EXPECT_EQ(wb.score(0), -1);
  EXPECT_FALSE(wb.on_write(1, at(0)));  // neither copied nor evicted: a step towards 0
  EXPECT_EQ(wb.score(0), 0);
}

TEST(WriteBehind, ACopyThatDidNotSaveTheWriteBackBacksOffForFourIterations) {
  WriteBehind wb;
  (void)wb.on_write(1, at(4));
  wb.evicted(1, false);
  ASSERT_TRUE(wb.on_write(1, at(4)));
  wb.copied(1);
  wb.evicted(1, false);  // the copy was taken back for another page's write-back: written back anyway
  EXPECT_FALSE(wb.on_write(1, at(4)));
  EXPECT_EQ(wb.score(4), WriteBehind::kBackOff);
  int evicted_iterations = 0;
  while (true) {
    wb.evicted(1, false);  // each iteration evicts it again, uncopied
    ++evicted_iterations;
    if (wb.on_write(1, at(4))) break;
    ASSERT_LT(evicted_iterations, 10);
  }
  EXPECT_EQ(evicted_iterations, 1 - WriteBehind::kBackOff) << "from -4 to +1";
}

TEST(WriteBehind, TheScoreStopsAtItsMaximum) {
  WriteBehind wb;
  (void)wb.on_write(1, at(0));
  for (int i = 0; i < 10; ++i) {
    wb.evicted(1, true);
    (void)wb.on_write(1, at(0));
  }
  EXPECT_EQ(wb.score(0), WriteBehind::kMax);
  // Three iterations without an eviction bring it back to 0 (not copied meanwhile: a step each).
  for (int i = 0; i < WriteBehind::kMax; ++i) (void)wb.on_write(1, at(0));
  EXPECT_EQ(wb.score(0), 0);
}

TEST(WriteBehind, ANewTraceStartsFromNothing) {
  WriteBehind wb;
  (void)wb.on_write(1, at(0));
  wb.evicted(1, false);
  ASSERT_TRUE(wb.on_write(1, at(0)));
  EXPECT_FALSE(wb.on_write(1, at(0, 10, 1))) << "the trace was dropped and recorded again";
  EXPECT_EQ(wb.score(0), 0);
  EXPECT_FALSE(wb.on_write(1, at(0, 12, 1))) << "and one of another length";
}

TEST(WriteBehind, NothingIsCopiedOffTheTraceAndAFreedTensorIsForgotten) {
  WriteBehind wb;
  EXPECT_FALSE(wb.on_write(1, at(AccessTrace::kNever)));
  EXPECT_FALSE(wb.on_write(1, at(10))) << "past the recorded iteration";
  (void)wb.on_write(2, at(1));
  wb.evicted(2, false);
  wb.forget(2);
  EXPECT_FALSE(wb.on_write(2, at(1))) << "a new tensor with that id learns afresh";
  EXPECT_EQ(wb.score(1), 0);
  wb.evicted(99, false);  // never written: ignored
}

TEST(WriteBehind, AHostTierThatFilledUpStopsCopiesForThatIterationAndTheNext) {
  WriteBehind wb;
  EXPECT_FALSE(wb.host_tier_filled(0)) << "a tier that never filled";
  EXPECT_TRUE(wb.host_tier_filled(1)) << "it filled before the first iteration mark";
  wb.on_iteration(1);  // iteration 1 begins; the tier filled once before
  EXPECT_TRUE(wb.host_tier_filled(1)) << "it filled in the iteration before this one";
  EXPECT_TRUE(wb.host_tier_filled(2)) << "and in this one";
  wb.on_iteration(2);  // iteration 2: it filled in iteration 1
  EXPECT_TRUE(wb.host_tier_filled(2));
  wb.on_iteration(2);  // iteration 3: iteration 2 went without filling it
  EXPECT_FALSE(wb.host_tier_filled(2)) << "a whole iteration without filling: copies again";
  EXPECT_TRUE(wb.host_tier_filled(3)) << "until it fills again";
}
