// Belady's offline optimum on small hand-checked traces (costs averaged over the 6 middle iterations
// of 8; the first is cold and the last has no future).
#include <gtest/gtest.h>

#include "policies/belady.hpp"

using tvmm::policies::simulate_belady;
using tvmm::policies::TraceAccess;

TEST(Belady, EverythingFitsMovesNothingInSteadyState) {
  const std::vector<TraceAccess> it = {{1, 2, false}, {2, 1, false}, {1, 2, false}};
  EXPECT_EQ(simulate_belady(it, 3).pages(), 0u);
}

TEST(Belady, CyclicScanMovesAThirdOfWhatLruMoves) {
  // Cyclic scan of 4 one-page tensors with 3 frames. LRU misses all 4 every iteration; the optimum
  // misses in the pattern 1, 1, 2 (worked by hand): 8 loads and 8 write-backs over 6 iterations.
  const std::vector<TraceAccess> it = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}};
  const auto c = simulate_belady(it, 3);
  EXPECT_EQ(c.iterations, 6);
  EXPECT_EQ(c.loads, 8u);
  EXPECT_EQ(c.write_backs, 8u);
  EXPECT_NEAR(c.pages_per_iteration(), 16.0 / 6, 1e-9);
}

TEST(Belady, EachMoveAddsItsPagesBytesWhenGiven) {
  // The cyclic scan above, where tensor 4 holds only 100 bytes of its page: its moves add 100 bytes, the
  // others a page of 1000. Same decisions, so the same counts as without bytes.
  const std::vector<TraceAccess> it = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}};
  const auto plain = simulate_belady(it, 3);
  EXPECT_EQ(plain.load_bytes, 0u);  // no page bytes given
  std::uint64_t asked_4 = 0;
  const auto c = simulate_belady(it, 3, 8, false, [&](std::uint64_t tensor, std::uint32_t page) -> std::uint64_t {
    EXPECT_EQ(page, 0u);
    asked_4 += tensor == 4 ? 1 : 0;
    return tensor == 4 ? 100 : 1000;
  });
  EXPECT_EQ(c.loads, plain.loads);
  EXPECT_EQ(c.write_backs, plain.write_backs);
  EXPECT_GT(asked_4, 0u) << "tensor 4 never moved in the measured iterations";
  EXPECT_LT(c.load_bytes + c.write_back_bytes, 1000 * c.pages()) << "tensor 4's moves count 100 bytes";
  EXPECT_EQ(c.load_bytes + c.write_back_bytes, 1000 * c.pages() - 900 * asked_4);
}

TEST(Belady, DiscardedContentsAreNotLoaded) {
  const std::vector<TraceAccess> keep = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}};
  const std::vector<TraceAccess> discard4 = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, true}};
  const auto a = simulate_belady(keep, 3);
  const auto b = simulate_belady(discard4, 3);
  EXPECT_EQ(a.write_backs, b.write_backs);  // same decisions
  EXPECT_LT(b.loads, a.loads);              // but tensor 4's misses load nothing
}

TEST(Belady, ReleasedPagesLeaveWithoutAWriteBackAndFreeTheirFrames) {
  // Tensors 1 and 3 are written, then released (dead); tensor 2 lives on. Two frames hold the live data.
  TraceAccess release1{1, 1}, release3{3, 1};
  release1.release = release3.release = true;
  const std::vector<TraceAccess> dead = {{1, 1, true}, {2, 1, false}, release1, {3, 1, true}, release3};
  EXPECT_EQ(simulate_belady(dead, 2).pages(), 0u);
  // Without the releases the same accesses do not fit: dead contents are written back.
  const std::vector<TraceAccess> kept = {{1, 1, true}, {2, 1, false}, {3, 1, true}};
  EXPECT_GT(simulate_belady(kept, 2).write_backs, 0u);
}

TEST(Belady, PagesOfTheCurrentAccessStayTogether) {
  // A 2-page tensor and a 1-page tensor, 2 frames: each iteration the 1-page tensor and one page of the
  // other are swapped in and out: 2 loads and 2 write-backs per iteration (worked by hand).
  const std::vector<TraceAccess> it = {{1, 2, false}, {2, 1, false}};
  const auto c = simulate_belady(it, 2);
  EXPECT_EQ(c.loads, 12u);
  EXPECT_EQ(c.write_backs, 12u);
}

TEST(Belady, AccessesPinnedTogetherStayResidentTogether) {
  // Tensors 1, 2, 3 of one page, 2 frames; 2 and 3 are pinned together (one kernel). Worked by hand:
  // each iteration 1 misses (evicting 3, whose next use is later than 2's) and 3 misses (evicting 1,
  // the only page outside its group): 2 loads and 2 write-backs per iteration. Without the group,
  // Belady may evict 2 for 3 and does better: the group costs what the kernel really needs.
  const std::vector<TraceAccess> grouped = {{1, 1, false}, {2, 1, false}, {3, 1, false, true}};
  const auto g = simulate_belady(grouped, 2);
  EXPECT_EQ(g.loads, 12u);
  EXPECT_EQ(g.write_backs, 12u);
  const std::vector<TraceAccess> alone = {{1, 1, false}, {2, 1, false}, {3, 1, false}};
  EXPECT_LT(simulate_belady(alone, 2).pages(), g.pages());
  // A group that needs more pages than there are frames can never run.
  EXPECT_THROW((void)simulate_belady({{1, 1, false}, {2, 1, false, true}, {3, 1, false, true}}, 2),
               std::invalid_argument);
}

TEST(Belady, BadInputIsRejected) {
  EXPECT_THROW((void)simulate_belady({{1, 3, false}}, 2), std::invalid_argument);
  EXPECT_THROW((void)simulate_belady({{1, 1, false}}, 2, 2), std::invalid_argument);
}

TEST(Belady, WithDropCleanOnlyWrittenPagesAreWrittenBack) {
  // The cyclic scan above: the same 8 loads; read-only pages cost no write-back once loaded from below
  // (only pages first made in the cold iteration and evicted later are dirty: at most the 3 frames' worth).
  std::vector<TraceAccess> reads = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}};
  const auto clean = simulate_belady(reads, 3, 8, true);
  EXPECT_EQ(clean.loads, 8u);
  EXPECT_LE(clean.write_backs, 3u);
  auto writes = reads;
  for (auto& a : writes) a.writes = true;
  const auto dirty = simulate_belady(writes, 3, 8, true);
  EXPECT_EQ(dirty.loads, 8u);
  EXPECT_EQ(dirty.write_backs, 8u);  // every eviction, as without drop_clean
  EXPECT_EQ(simulate_belady(reads, 3).write_backs, 8u);
}
