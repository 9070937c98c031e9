// The access trace: recording between the first two iteration marks, replay with prefetch ahead,
// wrapping into the next iteration, next-use queries, and dropping the trace on divergence.
#include <gtest/gtest.h>

#include "policies/access_trace.hpp"

using tvmm::policies::AccessTrace;
using tvmm::policies::TraceAccess;

namespace {
std::vector<std::uint64_t> tensors(const std::vector<AccessTrace::Ahead>& a) {
  std::vector<std::uint64_t> out;
  for (const auto& x : a) out.push_back(x.tensor);
  return out;
}
TraceAccess acc(std::uint64_t t) { return {t, 1, false}; }
}  // namespace

TEST(AccessTrace, RecordsOneIterationThenReplaysAhead) {
  AccessTrace tr;
  EXPECT_TRUE(tr.on_pin(acc(9), 2).empty());  // before the first mark: warm-up, not recorded
  EXPECT_TRUE(tr.on_iteration(2).empty());
  EXPECT_EQ(tr.state(), AccessTrace::State::recording);
  for (std::uint64_t t : {1, 2, 3, 4}) EXPECT_TRUE(tr.on_pin(acc(t), 2).empty());
  EXPECT_EQ(tr.recorded().size(), 4u);
  // Second mark: replay; the first two pins of the next iteration are issued at once.
  EXPECT_EQ(tensors(tr.on_iteration(2)), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(tensors(tr.on_pin(acc(1), 2)), (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(tensors(tr.on_pin(acc(2), 2)), (std::vector<std::uint64_t>{4}));
  EXPECT_EQ(tensors(tr.on_pin(acc(3), 2)), (std::vector<std::uint64_t>{1}));  // wraps: next iteration's first
  EXPECT_EQ(tr.next_use(2), 2u);                                              // 4 then 1, then 2
  EXPECT_EQ(tr.next_use(4), 0u);
  EXPECT_EQ(tr.next_use(77), AccessTrace::kNever);
  EXPECT_EQ(tensors(tr.on_pin(acc(4), 2)), (std::vector<std::uint64_t>{2}));
  // The next mark keeps replaying without issuing what was issued already.
  EXPECT_TRUE(tr.on_iteration(2).empty());
  EXPECT_EQ(tensors(tr.on_pin(acc(1), 2)), (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(tr.divergences(), 0u);
}

// upcoming() lists the next pins from the cursor, with their distances, wrapping into the next
// iteration but never past one iteration's worth, whatever prefetch has issued; nothing unless replaying.
TEST(AccessTrace, UpcomingListsTheNextPinsWithoutIssuingThem) {
  AccessTrace tr;
  std::vector<AccessTrace::Ahead> next;
  tr.upcoming(3, next);
  EXPECT_TRUE(next.empty()) << "not replaying";
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 3, 4}) (void)tr.on_pin(acc(t), 1);
  tr.upcoming(3, next);
  EXPECT_TRUE(next.empty()) << "recording";
  (void)tr.on_iteration(1);
  (void)tr.on_pin(acc(1), 1);
  (void)tr.on_pin(acc(2), 1);
  tr.upcoming(3, next);
  EXPECT_EQ(tensors(next), (std::vector<std::uint64_t>{3, 4, 1}));
  ASSERT_EQ(next.size(), 3u);
  EXPECT_EQ(next[0].distance, 0u);
  EXPECT_EQ(next[2].distance, 2u);
  tr.upcoming(10, next);
  EXPECT_EQ(tensors(next), (std::vector<std::uint64_t>{3, 4, 1, 2})) << "one iteration at most";
  EXPECT_EQ(tensors(tr.on_pin(acc(3), 1)), (std::vector<std::uint64_t>{4})) << "prefetch issues as before";
}

TEST(AccessTrace, DivergenceDropsTheTraceAndTheNextIterationIsRecorded) {
  AccessTrace tr;
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 3}) (void)tr.on_pin(acc(t), 1);
  (void)tr.on_iteration(1);
  (void)tr.on_pin(acc(1), 1);
  EXPECT_TRUE(tr.on_pin(acc(3), 1).empty());  // expected 2
  EXPECT_EQ(tr.divergences(), 1u);
  EXPECT_EQ(tr.state(), AccessTrace::State::waiting);
  EXPECT_EQ(tr.next_use(1), AccessTrace::kNever);
  (void)tr.on_iteration(1);  // records the new program
  for (std::uint64_t t : {5, 6}) (void)tr.on_pin(acc(t), 1);
  EXPECT_EQ(tensors(tr.on_iteration(1)), (std::vector<std::uint64_t>{5}));
}

TEST(AccessTrace, AnIterationThatEndsEarlyIsADivergence) {
  AccessTrace tr;
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 3}) (void)tr.on_pin(acc(t), 1);
  (void)tr.on_iteration(1);
  (void)tr.on_pin(acc(1), 1);
  (void)tr.on_iteration(1);  // only one of three pins happened
  EXPECT_EQ(tr.divergences(), 1u);
  EXPECT_EQ(tr.state(), AccessTrace::State::recording);
}

TEST(AccessTrace, SinceLastUseCountsBackAcrossTheIterationBoundary) {
  AccessTrace tr;
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 3, 4}) (void)tr.on_pin(acc(t), 1);
  EXPECT_EQ(tr.since_last_use(1), AccessTrace::kNever);  // recording: no answers yet
  (void)tr.on_iteration(1);
  (void)tr.on_pin(acc(1), 1);
  (void)tr.on_pin(acc(2), 1);
  EXPECT_EQ(tr.since_last_use(2), 0u);  // the latest pin
  EXPECT_EQ(tr.since_last_use(1), 1u);
  EXPECT_EQ(tr.since_last_use(4), 2u);  // last pinned at the end of the previous iteration
  EXPECT_EQ(tr.since_last_use(3), 3u);
  EXPECT_EQ(tr.since_last_use(77), AccessTrace::kNever);
}

TEST(AccessTrace, PrefetchHorizonLooksPastTheTensorsPinnedBeforeTheTarget) {
  // Trace 1 2 1 3 4 2, replaying at its start. A prefetch 2 pins ahead (of tensor 1, at position 2):
  // before it come 1 (the target itself) and 2 (used again at position 5); evicting a page used sooner
  // than 5 pins from now would take one that the eviction at the target's pin would keep (it would
  // take 2 first).
  AccessTrace tr;
  EXPECT_EQ(tr.prefetch_horizon(2), 3u);  // no trace: just past the target
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 1, 3, 4, 2}) (void)tr.on_pin(acc(t), 1);
  (void)tr.on_iteration(1);
  EXPECT_EQ(tr.prefetch_horizon(2), 5u);
  EXPECT_EQ(tr.prefetch_horizon(0), 1u);  // the very next pin: nothing comes before it
  // After pins 1 and 2, a prefetch 2 pins ahead (of 4): before it come 1 (next used at position 6)
  // and 3 (at 6 + 3 = 9): 9 - 2 = 7 pins from now.
  (void)tr.on_pin(acc(1), 1);
  (void)tr.on_pin(acc(2), 1);
  EXPECT_EQ(tr.prefetch_horizon(2), 7u);
}

TEST(AccessTrace, APinOfOtherPagesOfTheSameTensorIsADivergence) {
  AccessTrace tr;
  (void)tr.on_iteration(1);
  (void)tr.on_pin({1, 2, false, false, 0}, 1);  // pages [0, 2) of tensor 1
  (void)tr.on_pin({1, 2, false, false, 2}, 1);  // pages [2, 4)
  const auto first = tr.on_iteration(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].first, 0u);  // prefetch targets carry the pinned pages, not the whole tensor
  EXPECT_EQ(first[0].pages, 2u);
  const auto next = tr.on_pin({1, 2, false, false, 0}, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].first, 2u);
  (void)tr.on_pin({1, 2, false, false, 3}, 1);  // expected pages [2, 4)
  EXPECT_EQ(tr.divergences(), 1u);
}

TEST(AccessTrace, PositionNamesTheLatestPinWhileReplaying) {
  AccessTrace tr;
  EXPECT_EQ(tr.position().index, AccessTrace::kNever);
  (void)tr.on_iteration(1);
  for (std::uint64_t t : {1, 2, 3}) (void)tr.on_pin(acc(t), 1);
  EXPECT_EQ(tr.position().index, AccessTrace::kNever) << "recording: no position yet";
  (void)tr.on_iteration(1);
  EXPECT_EQ(tr.position().index, AccessTrace::kNever) << "no pin of this iteration yet";
  (void)tr.on_pin(acc(1), 1);
  (void)tr.on_pin(acc(2), 1);
  const auto at = tr.position();
  EXPECT_EQ(at.index, 1u);
  EXPECT_EQ(at.length, 3u);
  EXPECT_EQ(at.drops, 0u);
  (void)tr.on_pin(acc(9), 1);  // leaves the trace: dropped
  EXPECT_EQ(tr.position().index, AccessTrace::kNever);
  EXPECT_EQ(tr.position().drops, 1u);
}

// replays() counts whole replayed iterations (BeladyPolicy's holder preference sits out the first), and
// a trace recorded again, after a divergence of either kind, starts the count again.
TEST(AccessTrace, ReplaysCountsWholeReplayedIterationsAndStartsAgainWithANewTrace) {
  AccessTrace tr;
  auto iteration = [&](std::initializer_list<std::uint64_t> pins) {
    (void)tr.on_iteration(1);
    for (std::uint64_t t : pins) (void)tr.on_pin(acc(t), 1);
  };
  EXPECT_EQ(tr.replays(), 0u);  // waiting
  iteration({1, 2, 3});
  EXPECT_EQ(tr.replays(), 0u);  // recording
  iteration({1, 2, 3});
  EXPECT_EQ(tr.replays(), 0u);  // the first replayed iteration, in full
  iteration({1, 2});
  EXPECT_EQ(tr.replays(), 1u);  // the second, under way
  (void)tr.on_pin(acc(3), 1);
  iteration({1, 2, 3});
  EXPECT_EQ(tr.replays(), 2u);
  // A pin that differs drops the trace; the next iteration records the program again.
  (void)tr.on_pin(acc(9), 1);
  EXPECT_EQ(tr.state(), AccessTrace::State::waiting);
  EXPECT_EQ(tr.replays(), 0u);
  iteration({1, 2, 3});
  iteration({1, 2, 3});
  EXPECT_EQ(tr.replays(), 0u);
  iteration({1, 2, 3});
  EXPECT_EQ(tr.replays(), 1u);
  // An iteration that ends early does too.
  iteration({1});
  iteration({1, 2, 3});  // that mark found the iteration short: this one is recorded
  EXPECT_EQ(tr.state(), AccessTrace::State::recording);
  EXPECT_EQ(tr.replays(), 0u);
  iteration({1, 2, 3});
  EXPECT_EQ(tr.state(), AccessTrace::State::replaying);
  EXPECT_EQ(tr.replays(), 0u);
}

TEST(AccessTrace, NextReferenceFindsThePinThatCoversThePage) {
  AccessTrace tr;
  std::uint32_t offset = 99;
  EXPECT_EQ(tr.next_reference(1, 0, offset), AccessTrace::kNever);  // not replaying
  (void)tr.on_iteration(1);
  // Tensor 1 (4 pages) is pinned a half at a time: pages 0-1 at position 0, 2-3 at 2; tensor 2 at 1.
  const TraceAccess low{1, 2, false, false, 0}, other{2, 1, false}, high{1, 2, false, false, 2};
  for (const auto& a : {low, other, high}) (void)tr.on_pin(a, 1);
  (void)tr.on_iteration(1);
  EXPECT_EQ(tr.next_reference(1, 3, offset), 2u);
  EXPECT_EQ(offset, 1u);
  EXPECT_EQ(tr.next_reference(1, 0, offset), 0u);
  EXPECT_EQ(offset, 0u);
  (void)tr.on_pin(low, 1);
  (void)tr.on_pin(other, 1);
  // Past position 0: page 1's next pin is the next iteration's first; page 2's comes next.
  EXPECT_EQ(tr.next_reference(1, 1, offset), 0u);
  EXPECT_EQ(offset, 1u);
  EXPECT_EQ(tr.next_reference(1, 2, offset), 2u);
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(tr.next_reference(1, 4, offset), AccessTrace::kNever);  // no pin covers it
  EXPECT_EQ(tr.next_reference(3, 0, offset), AccessTrace::kNever);  // not in the trace
}
