// Eviction policies: one typed conformance suite for every policy, then each policy's decisions on
// small hand-checked traces.
#include <gtest/gtest.h>

#include <atomic>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "policies/belady_policy.hpp"
#include "policies/clock.hpp"
#include "policies/eviction_policy.hpp"
#include "policies/fifo.hpp"
#include "policies/lfu.hpp"
#include "policies/lru.hpp"
#include "policies/registry.hpp"
#include "tvmm/errors.hpp"

using namespace tvmm::policies;

namespace {

std::vector<std::size_t> take(EvictionPolicy& p, std::size_t max, std::span<const PageIndex> prefer = {}) {
  std::vector<std::size_t> order;
  auto claim = [&](PageIndex page) {
    order.push_back(page);
    return true;
  };
  if (prefer.empty()) {
    p.select(max, claim);
  } else {
    p.select(max, claim, prefer);
  }
  return order;
}

// Every registered policy (policies/registry.cpp), built by its registry entry over the test's pages:
// a new policy joins this suite by its registry line. The trace-reading ones get an empty trace (no
// iteration recorded), under which they must still keep the contract.
class PolicyConformance : public ::testing::TestWithParam<std::string_view> {
 protected:
  std::unique_ptr<EvictionPolicy> make(std::uint32_t pages) {
    PolicyContext ctx;
    ctx.page_count = pages;
    ctx.trace = &trace_;
    ctx.owner_of = [](PageIndex page) { return PageOwner{page + 1, 0}; };
    return make_eviction_policy(GetParam(), ctx);
  }

 private:
  AccessTrace trace_;
};

std::vector<std::string_view> registered() {
  std::vector<std::string_view> names;
  for (const auto& p : eviction_policies()) names.push_back(p.name);
  return names;
}
INSTANTIATE_TEST_SUITE_P(Registered, PolicyConformance, ::testing::ValuesIn(registered()),
                         [](const auto& param_info) { return std::string(param_info.param); });

TEST_P(PolicyConformance, EveryInsertedPageIsOfferedOnceThenGone) {
  auto policy = make(16);
  EXPECT_STREQ(policy->name(), std::string(GetParam()).c_str());
  for (PageIndex p = 0; p < 16; ++p) policy->insert(p);
  policy->touch(3, 4);
  EXPECT_EQ(policy->size(), 16u);
  const auto order = take(*policy, 100);
  EXPECT_EQ(order.size(), 16u);
  EXPECT_EQ(std::set<std::size_t>(order.begin(), order.end()).size(), 16u);
  EXPECT_EQ(policy->size(), 0u);
  EXPECT_TRUE(take(*policy, 1).empty());
}

TEST_P(PolicyConformance, DeclinedPagesStayAndRemovedPagesAreNeverOffered) {
  auto policy = make(6);
  for (PageIndex p = 0; p < 6; ++p) policy->insert(p);
  policy->remove(2);
  policy->remove(2);  // removing twice is a no-op
  std::set<std::size_t> offered;
  const auto n = policy->select(10, [&](PageIndex i) {
    offered.insert(i);
    return i % 2 == 1;  // decline even pages (as if pinned)
  });
  EXPECT_EQ(n, 3u);  // 1, 3, 5
  EXPECT_EQ(offered.count(2), 0u);
  EXPECT_EQ(policy->size(), 2u);  // 0 and 4 stay
  EXPECT_EQ(take(*policy, 10).size(), 2u);
}

TEST_P(PolicyConformance, TouchOfPagesNotInThePolicyIsIgnored) {
  auto policy = make(2);
  policy->insert(0);
  policy->touch(1, 1);
  EXPECT_EQ(take(*policy, 5), (std::vector<std::size_t>{0}));
}

TEST_P(PolicyConformance, SelectStopsAtTheNumberAskedFor) {
  auto policy = make(8);
  for (PageIndex p = 0; p < 8; ++p) policy->insert(p);
  EXPECT_EQ(take(*policy, 3).size(), 3u);
  EXPECT_EQ(policy->size(), 5u);
}

}  // namespace

TEST(Lru, VictimsInLeastRecentlyUsedOrder) {
  LruPolicy lru(5);
  for (PageIndex p = 0; p < 5; ++p) lru.insert(p);
  lru.touch(1, 1);
  lru.touch(3, 2);  // pages 3 and 4
  lru.touch(0, 1);
  EXPECT_EQ(take(lru, 5), (std::vector<std::size_t>{2, 1, 3, 4, 0}));
}

TEST(Fifo, VictimsInArrivalOrderWhateverTheUse) {
  FifoPolicy fifo(4);
  for (PageIndex p = 0; p < 4; ++p) fifo.insert(p);
  fifo.touch(0, 1);
  fifo.touch(0, 1);
  EXPECT_EQ(take(fifo, 4), (std::vector<std::size_t>{0, 1, 2, 3}));
}

TEST(Clock, ReferencedPagesGetASecondChance) {
  ClockPolicy clock(4);
  for (PageIndex p = 0; p < 4; ++p) clock.insert(p);
  clock.touch(0, 2);  // 0 and 1 referenced
  // Sweep: 0 and 1 lose their bits and go to the back; 2 is the first victim, then 3, then 0, 1.
  EXPECT_EQ(take(clock, 1), (std::vector<std::size_t>{2}));
  clock.touch(0, 1);  // 0 referenced again: it survives the next pass over it
  EXPECT_EQ(take(clock, 3), (std::vector<std::size_t>{3, 1, 0}));
}

TEST(Clock, AllReferencedStillYieldsVictims) {
  ClockPolicy clock(3);
  for (PageIndex p = 0; p < 3; ++p) clock.insert(p);
  clock.touch(0, 3);
  EXPECT_EQ(take(clock, 1), (std::vector<std::size_t>{0}));  // a full sweep clears all bits
}

// A second chance for the list's last page ended the scan with no victim: with one page resident, a
// CLOCK pager waited out its whole wait_timeout at every eviction (tvmm-bench --workload scan --tensors
// 2 --tensor-mib 2 --ratios 2 --policies clock took 30 s).
TEST(Clock, TheLastPagesSecondChanceStillYieldsIt) {
  ClockPolicy one(1);
  one.insert(0);
  one.touch(0, 1);
  EXPECT_EQ(take(one, 1), (std::vector<std::size_t>{0}));
  ClockPolicy two(2);  // the first refused, the second referenced: the scan reaches the end with a chance
  two.insert(0);
  two.insert(1);
  two.touch(1, 1);
  std::vector<PageIndex> got;
  EXPECT_EQ(two.select(1, [&](PageIndex p) { return p == 0 ? false : (got.push_back(p), true); }), 1u);
  EXPECT_EQ(got, (std::vector<PageIndex>{1}));
}

TEST(Lfu, VictimsInOrderOfFewestUsesThenArrival) {
  LfuPolicy lfu(5);
  for (PageIndex p = 0; p < 5; ++p) lfu.insert(p);
  lfu.touch(0, 2);  // 0, 1: once
  lfu.touch(0, 1);  // 0: twice
  lfu.touch(4, 1);  // 4: once
  EXPECT_EQ(take(lfu, 5), (std::vector<std::size_t>{2, 3, 1, 4, 0}));
}

TEST(Lfu, APageCountsItsUsesAfreshEachTimeItBecomesResident) {
  LfuPolicy lfu(2);
  lfu.insert(0);
  lfu.insert(1);
  lfu.touch(0, 1);
  lfu.touch(0, 1);
  lfu.touch(1, 1);
  lfu.remove(0);  // evicted with 2 uses, then back
  lfu.insert(0);
  EXPECT_EQ(take(lfu, 1), (std::vector<std::size_t>{0}));  // 0 uses now, against 1
}

// A page whose eviction failed rejoins with the uses it had: a failed eviction does not make it new.
TEST(Lfu, APageWhoseEvictionFailedKeepsItsUses) {
  LfuPolicy lfu(2);
  lfu.insert(0);
  lfu.insert(1);
  lfu.touch(0, 1);
  lfu.touch(1, 1);
  lfu.touch(1, 1);
  lfu.touch(1, 1);  // 0: once, 1: three times
  ASSERT_EQ(take(lfu, 2), (std::vector<std::size_t>{0, 1}));
  // Both evictions failed. Then 1 is used once more (four uses) and 0 twice (three uses).
  lfu.restore(0);
  lfu.restore(1);
  lfu.touch(1, 1);
  lfu.touch(0, 1);
  lfu.touch(0, 1);
  // With the counts reset by the failure, 1 (one use since) would go first.
  EXPECT_EQ(take(lfu, 2), (std::vector<std::size_t>{0, 1}));
}

// Likewise CLOCK's reference bit: a referenced page restored still gets its second chance.
TEST(Clock, APageWhoseEvictionFailedKeepsItsReferenceBit) {
  ClockPolicy clock(2);
  clock.insert(0);
  clock.insert(1);
  ASSERT_EQ(take(clock, 1), (std::vector<std::size_t>{0}));
  clock.touch(0, 1);  // its bit set while it was out of the list
  clock.restore(0);   // the eviction failed: 0 is behind 1 and keeps its bit
  clock.touch(1, 1);
  // The sweep: 1 loses its bit, then 0 loses its bit, then 1 goes.
  EXPECT_EQ(take(clock, 1), (std::vector<std::size_t>{1}));
}

// The list policies' preference for a page anywhere in the list (the holder of an incoming page's old
// frame) gives way to a likely dead page: one neither used nor loaded for more than twice the longest
// recent gap between two uses plus 8 rounds. LRU's next victim is the dead page (2) itself; FIFO's and
// CLOCK's (page 0 here) is in use, and their probe finds the dead page elsewhere in the list. With no
// dead page, the preferred page (7) goes.
template <class Policy>
void dead_page_goes_before_an_override() {
  auto run = [](bool pages_2_to_5_idle) {
    Policy policy(8);
    for (PageIndex p = 0; p < 8; ++p) policy.insert(p);
    for (int round = 0; round < 20; ++round) {
      policy.touch(0, 2);  // 0 and 1
      policy.touch(6, 2);  // 6 and 7
      if (!pages_2_to_5_idle) policy.touch(2, 4);
      (void)policy.select(0, [](PageIndex) { return true; });  // a round that evicts nothing
    }
    const PageIndex prefer[] = {7};
    return take(policy, 1, prefer);
  };
  EXPECT_EQ(run(true), (std::vector<std::size_t>{2}));
  EXPECT_EQ(run(false), (std::vector<std::size_t>{7}));
}

// A page loaded again after a long idle time (a prefetch) is not dead before its use, and a dead page
// whose claim is refused (pinned) is passed over for the next: pages 2-5 idle, 2 loaded again, 3 pinned.
template <class Policy>
void dead_pages_skip_a_fresh_load_and_a_refusal() {
  Policy policy(8);
  for (PageIndex p = 0; p < 8; ++p) policy.insert(p);
  for (int round = 0; round < 20; ++round) {
    policy.touch(0, 2);
    policy.touch(6, 2);
    (void)policy.select(0, [](PageIndex) { return true; });
  }
  policy.remove(2);
  policy.insert(2);
  const PageIndex prefer[] = {7};
  std::vector<std::size_t> offered;
  EXPECT_EQ(policy.select(
                1,
                [&](PageIndex page) {
                  offered.push_back(page);
                  return page != 3;
                },
                prefer),
            1u);
  EXPECT_EQ(offered, (std::vector<std::size_t>{3, 4}));
}

TEST(Fifo, ALikelyDeadPageGoesBeforeAPreferredPage) { dead_page_goes_before_an_override<FifoPolicy>(); }
TEST(Clock, ALikelyDeadPageGoesBeforeAPreferredPage) { dead_page_goes_before_an_override<ClockPolicy>(); }
TEST(Lru, ALikelyDeadPageGoesBeforeAPreferredPage) { dead_page_goes_before_an_override<LruPolicy>(); }
TEST(Fifo, DeadPagesSkipAFreshLoadAndARefusal) { dead_pages_skip_a_fresh_load_and_a_refusal<FifoPolicy>(); }
TEST(Clock, DeadPagesSkipAFreshLoadAndARefusal) { dead_pages_skip_a_fresh_load_and_a_refusal<ClockPolicy>(); }
TEST(Lru, DeadPagesSkipAFreshLoadAndARefusal) { dead_pages_skip_a_fresh_load_and_a_refusal<LruPolicy>(); }

TEST(Policies, TheRegistryBuildsEachNameAndRejectsOthers) {
  AccessTrace trace;
  PolicyContext ctx;
  ctx.page_count = 1;
  ctx.trace = &trace;
  ctx.owner_of = [](PageIndex page) { return PageOwner{page + 1, 0}; };
  for (const auto& p : eviction_policies()) {
    EXPECT_EQ(find_eviction_policy(p.name), &p);
    EXPECT_EQ(std::string_view(make_eviction_policy(p.name, ctx)->name()), p.name);
  }
  EXPECT_EQ(find_eviction_policy("random"), nullptr);
  try {
    (void)make_eviction_policy("random", ctx);
    FAIL() << "expected config_error";
  } catch (const tvmm::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"random\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("\"lfu\""), std::string::npos);  // lists the valid ones
  }
  ctx.trace = nullptr;  // a policy that reads the trace cannot be built without one
  EXPECT_THROW((void)make_eviction_policy("belady", ctx), tvmm::config_error);
}

namespace {
// An iteration of `n` one-page tensors 1..n pinned in order, recorded, then replayed `replayed` times
// in full, and replayed once more up to its first `done` pins; page i holds tensor i + 1.
struct Replay {
  AccessTrace trace;
  std::vector<std::uint64_t> released_at;  // per tensor - 1
  std::vector<double> cost;                // per tensor - 1: PageOwner::cost
  std::vector<bool> copy_out;              // per tensor - 1: PageOwner::copy_out
  Replay(std::uint64_t n, std::uint64_t done, std::size_t replayed = 0)
      : released_at(n, 0), cost(n, 1.0), copy_out(n, false) {
    for (std::size_t i = 0; i <= replayed; ++i) {
      (void)trace.on_iteration(1);
      for (std::uint64_t t = 1; t <= n; ++t) (void)trace.on_pin({t, 1, false}, 1);
    }
    (void)trace.on_iteration(1);
    for (std::uint64_t t = 1; t <= done; ++t) (void)trace.on_pin({t, 1, false}, 1);
  }
  void released_last(std::initializer_list<std::size_t> tensors, std::uint64_t mark) {
    for (auto t : tensors) released_at[t - 1] = mark;
  }
  // The first `max` victims (page indices) of a BeladyPolicy holding the pages of tensors `resident`
  // (all of them if empty), the latest release carrying `latest` (0: none). The policy is gone on
  // return, so no page stays in its list.
  std::vector<std::size_t> victims(std::size_t max, std::uint64_t latest, std::size_t keep_recent = 0,
                                   std::initializer_list<std::size_t> resident = {},
                                   std::initializer_list<PageIndex> prefer = {}) {
    const std::atomic<std::uint64_t> latest_release{latest};
    const auto pages = static_cast<PageIndex>(released_at.size());
    BeladyPolicy policy(pages, trace, keep_recent, latest_release, [this](PageIndex page) {
      return PageOwner{page + 1u, released_at[page], cost[page], copy_out[page]};
    });
    if (resident.size() == 0) {
      for (PageIndex p = 0; p < pages; ++p) policy.insert(p);
    } else {
      for (auto t : resident) policy.insert(static_cast<PageIndex>(t - 1));
    }
    return take(policy, max, prefer);
  }
};
}  // namespace

TEST(Belady, FarthestNextUseFirstAndRecentPinsLastWhenAsked) {
  // Tensors 1..4 pinned in that order each iteration; replaying, after pins 1, 2, 3. Next uses:
  // 4 -> 0, 1 -> 1, 2 -> 2, 3 -> 3; pins since the last use: 3 -> 0, 2 -> 1, 1 -> 2, 4 -> 3.
  Replay r(4, 3);
  EXPECT_EQ(r.victims(4, 0), (std::vector<std::size_t>{2, 1, 0, 3}));  // tensors 3, 2, 1, 4
  // Sparing the last 2 pins (tensors 3 and 2): 1 and 4 go first, by next use, then 3 and 2.
  EXPECT_EQ(r.victims(4, 0, 2), (std::vector<std::size_t>{0, 3, 2, 1}));
}

TEST(Belady, PrefersAPageAmongTheFartherHalfFromTheSecondReplayedIterationOn) {
  // 8 tensors, after pins 1..4 of 8: next uses 4 -> 7, 3 -> 6, 2 -> 5, 1 -> 4 (the next iteration),
  // 8 -> 3, 7 -> 2, 6 -> 1, 5 -> 0. Pages 1 (tensor 2, in the farther half) and 6 (tensor 7, the nearer
  // half) are preferred.
  static_assert(BeladyPolicy::kPreferShare == 2 && BeladyPolicy::kPairingIterations == 1);
  // In the first replayed iteration the preference is ignored: Belady's own order forms the pairings
  // of pages and frames (those made before, in LRU order while recording, would be kept otherwise).
  Replay first(8, 4);
  EXPECT_EQ(first.trace.replays(), 0u);
  EXPECT_EQ(first.victims(2, 0, 0, {}, {1, 6}), (std::vector<std::size_t>{3, 2}));
  // From the second on, the preferred page of the farther half goes first; not the nearer one.
  Replay later(8, 4, 1);
  EXPECT_EQ(later.trace.replays(), 1u);
  EXPECT_EQ(later.victims(2, 0, 0, {}, {1, 6}), (std::vector<std::size_t>{1, 3}));
}

TEST(Belady, PrefersAPageTheOptimumReloadsAnywayWhereverItStands) {
  // Each iteration pins 1, 2, 1, 3, 1, 4, 1, 5 (a page each); 2 frames. The fewest-loads schedule keeps
  // 1 resident throughout (its intervals span one pin each) and loads 2-5 at every use. Replaying, in
  // the first replayed iteration, after pins 1 and 2: next uses 1 -> 0, 3 -> 1, 4 -> 3, 5 -> 5, 2 -> 7
  // (the next iteration). Belady's order: 2, 5, 4, 3, 1.
  AccessTrace trace;
  const std::vector<std::uint64_t> order = {1, 2, 1, 3, 1, 4, 1, 5};
  (void)trace.on_iteration(1);
  for (auto t : order) (void)trace.on_pin({t, 1, false}, 1);
  (void)trace.on_iteration(1);
  for (std::size_t k = 0; k < 2; ++k) (void)trace.on_pin({order[k], 1, false}, 1);
  ASSERT_EQ(trace.replays(), 0u);
  const std::atomic<std::uint64_t> latest{0};
  auto victims = [&](std::uint32_t frames, std::initializer_list<PageIndex> prefer) {
    const PageBytes page = [](std::uint64_t, std::uint32_t) -> std::uint64_t { return 1; };
    BeladyPolicy policy(
        5, trace, 0, latest,
        [](PageIndex p) {
          return PageOwner{p + 1u, 0, 1.0, false, 0};
        },
        frames, frames == 0 ? PageBytes{} : page);
    for (PageIndex p = 0; p < 5; ++p) policy.insert(p);
    return take(policy, 1, prefer);
  };
  // Tensor 4 (page 3) is in the nearer half and pinned again in this iteration, and this is the first
  // replayed iteration: the farther half's preference would not take it. The optimum reloads it at
  // its next use anyway, so it goes first.
  EXPECT_EQ(victims(2, {3}), (std::vector<std::size_t>{3}));
  // Tensor 1 (page 0) the optimum keeps: Belady's own choice, tensor 2, goes.
  EXPECT_EQ(victims(2, {0}), (std::vector<std::size_t>{1}));
  // Without the frame count, nothing is known of the optimum: Belady's choice.
  EXPECT_EQ(victims(0, {3}), (std::vector<std::size_t>{1}));
}

TEST(Belady, WeighsEachNextUseByWhatMovingThePageCosts) {
  // As above: next uses 3 -> 3, 2 -> 2, 1 -> 1, 4 -> 0 pins. Tensor 2 is a partial page costing a
  // tenth of a full one: (2 + 1) / 0.1 = 30 beats tensor 3's (3 + 1) / 1, so it goes first; the
  // others keep Belady's order.
  Replay r(4, 3);
  r.cost[1] = 0.1;
  EXPECT_EQ(r.victims(4, 0), (std::vector<std::size_t>{1, 2, 0, 3}));
  // Half a page's cost does not make up for a next use twice as near: (1 + 1) / 0.5 = 4 ties with
  // tensor 3's 4, and the sort keeps the list's order (insertion: tensor 1 before 3).
  r.cost[1] = 1.0;
  r.cost[0] = 0.5;
  EXPECT_EQ(r.victims(1, 0), (std::vector<std::size_t>{0}));
  r.cost[0] = 0.6;
  EXPECT_EQ(r.victims(1, 0), (std::vector<std::size_t>{2}));
}

TEST(Belady, DefersThePagesOfTheLastQueuedWorkForOnesAlsoNotNeededThisIteration) {
  // 5 tensors, after pins 1, 2, 3: 2 pins left. Next uses: 3 -> 4, 2 -> 3, 1 -> 2 (all in the next
  // iteration), 5 -> 1, 4 -> 0. Tensor 3 was released by the work queued last (mark 7).
  Replay r(5, 3);
  r.released_last({3}, 7);
  EXPECT_EQ(r.victims(1, 7), (std::vector<std::size_t>{1}));  // tensor 2, not 3
  // All of them: 2 and 1 first; 5 is needed in this iteration, so from there on the order is Belady's.
  EXPECT_EQ(r.victims(5, 7), (std::vector<std::size_t>{1, 0, 2, 4, 3}));
  // Released before the latest release: not deferred, farthest next use first.
  EXPECT_EQ(r.victims(1, 8), (std::vector<std::size_t>{2}));
}

TEST(Belady, KeepsItsChoiceWhenTheOnlyOthersAreNeededThisIteration) {
  // Only tensors 3 (next iteration, released last), 5 and 4 (both pinned again in this one) resident.
  Replay r(5, 3);
  r.released_last({3}, 7);
  EXPECT_EQ(r.victims(1, 7, 0, {3, 4, 5}), (std::vector<std::size_t>{2}));  // 3: taking 5 would reload it
}

TEST(Belady, DefersADirtyPageOfTheLastQueuedWorkForOneAtLeastHalfAsFar) {
  // 8 tensors, after pins 1..4: 4 pins left. Resident: tensor 4 (next use 7, in the next iteration,
  // released last), 8 (next use 3), 7 (2) and 6 (1), all three pinned again in this iteration.
  Replay r(8, 4);
  r.released_last({4}, 9);
  // Clean, tensor 4 goes: the others are needed in this iteration (its frame is free when that work
  // ends, with no copy to wait for).
  EXPECT_EQ(r.victims(1, 9, 0, {4, 6, 7, 8}), (std::vector<std::size_t>{3}));
  // To be written back, tensor 8 goes instead: its next use, 3 pins away, is at least 7 / 2 rounded
  // down (3 + 1 pins to its use is half of tensor 4's 7 + 1).
  r.copy_out[3] = true;
  EXPECT_EQ(r.victims(1, 9, 0, {4, 6, 7, 8}), (std::vector<std::size_t>{7}));
  // Tensor 7 (2 pins away) is nearer than that: after 8, tensor 4 goes, then Belady's order.
  EXPECT_EQ(r.victims(4, 9, 0, {4, 6, 7, 8}), (std::vector<std::size_t>{7, 3, 6, 5}));
  // Not released last: no deferral, with a copy to wait for or not.
  EXPECT_EQ(r.victims(1, 10, 0, {4, 6, 7, 8}), (std::vector<std::size_t>{3}));
  // A just-used page with nothing to copy may stand in: tensor 8, released last too, goes.
  r.released_last({8}, 9);
  EXPECT_EQ(r.victims(1, 9, 0, {4, 6, 7, 8}), (std::vector<std::size_t>{7}));
}

TEST(Belady, DefersOnlyWithinAWindowOfItsOwnChoice) {
  // 8 tensors, after pins 1..7: next uses 7 -> 7, 6 -> 6, ..., 1 -> 1 (next iteration), 8 -> 0.
  // Tensors 7, 6, 5, 4 were released last: for one victim the 4 farthest are all deferred ones.
  static_assert(BeladyPolicy::kDeferWindow == 4);
  Replay r(8, 7);
  r.released_last({7, 6, 5, 4}, 9);
  EXPECT_EQ(r.victims(1, 9), (std::vector<std::size_t>{6}));     // tensor 7: nothing else within 4
  EXPECT_EQ(r.victims(2, 9), (std::vector<std::size_t>{2, 1}));  // a window of 8: tensors 3 and 2
}

TEST(Belady, DefersNoPageInFavourOfOnePinnedRecentlyWhenAskedToSpareThose) {
  // After pins 1, 2, 3 of 5; only tensors 1, 2, 3 resident, all pinned next in the next iteration.
  // keep_recent 2 spares tensors 3 and 2 (the last two pins); tensor 1, the only other one, was
  // released last. Sparing wins: 1 goes, deferred or not.
  Replay r(5, 3);
  r.released_last({1}, 7);
  EXPECT_EQ(r.victims(1, 7, 2, {1, 2, 3}), (std::vector<std::size_t>{0}));
}
