// Trace prefetch and the Belady policy on a repeated training-like workload: misses become hits, the
// trace is dropped on divergence, and every byte stays correct.
#include <gtest/gtest.h>

#include <vector>

#include "test_support.hpp"
#include "vmm/core/prefetcher.hpp"

using namespace tvmm;

namespace {

struct RunResult {
  std::uint64_t misses_last_iterations = 0;
  std::uint64_t evictions_last_iterations = 0;
  std::uint64_t bytes_last_iterations = 0;
  std::size_t bad = 0;
  Stats stats;
};

// 8 one-page tensors over 4 device frames, pinned in a fixed order each iteration (forward, then
// backward in reverse), each pin verifying the previous contents and writing new ones.
// `cyclic`: 0..7 every iteration (where LRU is at its worst) instead of forward then backward.
RunResult run(const char* prefetch, const char* eviction, int iterations, bool diverge_at_3 = false,
              bool cyclic = false, std::size_t distance = 2, std::vector<int> custom = {}) {
  Config c = test::small_config(4, 16);
  c.prefetch = prefetch;
  c.eviction = eviction;
  c.prefetch_distance = distance;
  c.sim.copy_latency = std::chrono::microseconds(200);  // copies take time, so prefetch has work to hide
  Pager p(c);
  auto s = p.create_stream();
  std::vector<Tensor> ts;
  std::vector<std::uint64_t> seed(8, 0);
  for (int i = 0; i < 8; ++i) ts.push_back(p.allocate(64 * KiB));
  std::atomic<std::size_t> bad{0};
  RunResult r;
  Stats before{};
  for (int it = 0; it < iterations; ++it) {
    if (it == iterations - 2) before = p.stats();
    p.mark_iteration();
    std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0};
    if (cyclic) order = {0, 1, 2, 3, 4, 5, 6, 7};
    if (!custom.empty()) order = custom;
    if (diverge_at_3 && it == 3) std::swap(order[2], order[5]);
    for (int k : order) {
      const auto i = static_cast<std::size_t>(k);
      auto pin = ts[i].pin(s, Access::read_write);
      const std::uint64_t old_seed = seed[i];
      const std::uint64_t new_seed = static_cast<std::uint64_t>(it * 100 + k + 1);
      s.launch([&bad, d = pin.data(), old_seed, new_seed] {
        if (old_seed != 0) bad += test::mismatches(d, 64 * KiB, old_seed);
        test::fill(d, 64 * KiB, new_seed);
      });
      seed[i] = new_seed;
    }
    s.synchronize();
  }
  const auto after = p.stats();
  r.stats = after;  // before the read-back below, whose pins leave the trace
  r.misses_last_iterations = after.misses - before.misses;
  r.evictions_last_iterations = after.evictions - before.evictions;
  r.bytes_last_iterations = (after.host_to_device.bytes + after.device_to_host.bytes) -
                            (before.host_to_device.bytes + before.device_to_host.bytes);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (seed[i] == 0) continue;  // never pinned by this order: never written
    auto pin = ts[i].pin(Access::read);
    bad += test::mismatches(pin.data(), 64 * KiB, seed[i]);
  }
  r.bad = bad.load();
  p.check_invariants();
  return r;
}

}  // namespace

TEST(TracePrefetch, TurnsMissesIntoHitsOnARepeatedWorkload) {
  const auto none = run("none", "lru", 6);
  const auto trace = run("trace", "lru", 6);
  EXPECT_EQ(none.bad, 0u);
  EXPECT_EQ(trace.bad, 0u);
  EXPECT_GT(none.misses_last_iterations, 0u);
  EXPECT_LE(trace.misses_last_iterations * 2, none.misses_last_iterations)
      << "trace prefetch should remove most demand misses: " << trace.misses_last_iterations << " vs "
      << none.misses_last_iterations;
  EXPECT_GT(trace.stats.prefetched, 0u);
  EXPECT_EQ(trace.stats.trace_divergences, 0u);
}

// Config::prefetch_distance = 0 (the default) stands for each mode's own distance: one pin for trace
// prefetch, four pages for sequential prefetch; any other value is used as it is.
TEST(Prefetcher, ZeroDistanceIsTheModesDefault) {
  auto distance = [](const char* mode, std::size_t set) {
    Config c;
    c.prefetch = mode;
    c.prefetch_distance = set;
    return vmm::Prefetcher(c, false).distance();
  };
  EXPECT_EQ(distance("trace", 0), 1u);
  EXPECT_EQ(distance("sequential", 0), 4u);
  EXPECT_EQ(distance("trace", 3), 3u);
  EXPECT_EQ(distance("sequential", 2), 2u);
  EXPECT_EQ(Config{}.prefetch_distance, 0u);
}

// The recorded trace says which pins may write: Access::write and read_write leave the pages dirty,
// Access::read does not (an offline simulation over recorded() counts write-backs from this), and
// only Access::write discards.
TEST(Prefetcher, RecordsWhichPinsWrite) {
  Config c;
  c.prefetch = "trace";
  vmm::Prefetcher pf(c, false);
  vmm::Allocation a;
  a.id = 7;
  a.pages = 2;
  const vmm::PageSpan span{0, 2};
  (void)pf.on_iteration();  // starts recording
  for (const Access acc : {Access::read, Access::read_write, Access::write}) (void)pf.on_pin(&a, span, acc);
  const auto rec = pf.trace().recorded();
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_FALSE(rec[0].writes);
  EXPECT_FALSE(rec[0].discard);
  EXPECT_TRUE(rec[1].writes);
  EXPECT_FALSE(rec[1].discard);
  EXPECT_TRUE(rec[2].writes);
  EXPECT_TRUE(rec[2].discard);
}

// At the default distance a pin loads the next pin's tensor and no further. 8 one-page tensors pinned
// 0..7 every iteration over 4 frames: when the replayed iteration pins tensor 0, tensor 1 follows it
// onto the device and tensor 2 stays on the host.
TEST(TracePrefetch, ByDefaultLoadsOnePinAhead) {
  Config c = test::small_config(4, 16);
  c.prefetch = "trace";
  Pager p(c);
  std::vector<Tensor> ts;
  for (int i = 0; i < 8; ++i) ts.push_back(p.allocate(64 * KiB));
  for (int it = 0; it < 3; ++it) {  // recorded, replayed, replayed
    p.mark_iteration();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      auto pin = ts[i].pin(Access::read_write);
      test::fill(pin.data(), 64 * KiB, static_cast<std::uint64_t>(it * 10) + i + 1);
    }
  }
  p.mark_iteration();
  { auto pin = ts[0].pin(Access::read); }
  EXPECT_EQ(ts[1].tier(), Tier::device);
  EXPECT_EQ(ts[2].tier(), Tier::host);
  EXPECT_EQ(p.stats().trace_divergences, 0u);
  p.check_invariants();
}

TEST(TracePrefetch, DivergenceDropsTheTraceAndStaysCorrect) {
  const auto r = run("trace", "lru", 7, true);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_GE(r.stats.trace_divergences, 1u);
  EXPECT_GT(r.stats.prefetched, 0u);  // re-recorded and used again afterwards
}

TEST(BeladyPolicy, MovesLessThanLruOnACyclicScan) {
  // 8 tensors cycled over 4 frames: LRU evicts exactly the page needed next and misses every pin;
  // the optimum keeps three of the four frames useful.
  const auto lru = run("none", "lru", 6, false, true);
  const auto belady = run("none", "belady", 6, false, true);
  EXPECT_EQ(lru.bad, 0u);
  EXPECT_EQ(belady.bad, 0u);
  EXPECT_LT(belady.bytes_last_iterations, lru.bytes_last_iterations);
}

TEST(BeladyPolicy, WithTracePrefetchStaysCorrect) {
  const auto r = run("trace", "belady", 6, true);
  EXPECT_EQ(r.bad, 0u);
}

TEST(BeladyPolicy, DefersThePageTheLastQueuedWorkUsed) {
  // X, C, A, B (one page each) over 3 frames, pinned in that order on a stream every iteration. In the
  // replayed iteration B's pin evicts one of C and A (X stays pinned there), both pinned next in the
  // next iteration: Belady's choice is A (farthest), but A was released by the work queued last (its
  // write-back and the page-in into its frame would wait for that work), so C goes instead. (B's address
  // is still mapped to the frame X holds, from the first iteration: where remaps are costly eviction
  // would prefer X, and X's pin keeps that preference out of this test.)
  Config c = test::small_config(3, 16);
  c.eviction = "belady";
  Pager p(c);
  auto s = p.create_stream();
  std::vector<Tensor> ts;
  for (int i = 0; i < 4; ++i) ts.push_back(p.allocate(64 * KiB));
  enum { X, C, A, B };
  for (int it = 0; it < 2; ++it) {
    p.mark_iteration();  // the first records the order, the second replays it
    Pin held;
    for (int k : {X, C, A, B}) {
      auto pin = ts[static_cast<std::size_t>(k)].pin(s, Access::read_write);
      if (it == 1 && k == X) held = std::move(pin);
    }
  }
  EXPECT_EQ(ts[A].tier(0), Tier::device);
  EXPECT_EQ(ts[B].tier(0), Tier::device);
  EXPECT_NE(ts[C].tier(0), Tier::device);
  s.synchronize();
  p.check_invariants();
}

// A prefetch that finds no frame it may take must leave the discarded pages where eviction finds them
// first. One-page tensors over 4 frames, each iteration: W read-write; A, B written; X read; C written;
// C, B read and discarded; Y read; A read and discarded. Three pins ahead, the prefetch targets find
// every frame holding a page needed before them, the discarded ones included (their tensors are written
// again sooner), so they load nothing. They used to take those pages off the queue of discarded pages
// all the same; the pins after them then wrote live pages back where dropping a dead one was enough:
// 6 write-backs per 3 iterations against 3 with no prefetch at all.
TEST(TracePrefetch, AFailedPrefetchLeavesDiscardedPagesFirstInLine) {
  auto write_backs = [](const char* prefetch) {
    Config c = test::small_config(4, 16);
    c.prefetch = prefetch;
    c.eviction = "belady";
    c.prefetch_distance = 3;
    Pager p(c);
    enum { W, A, B, C, X, Y, N };
    std::vector<Tensor> ts;
    for (int i = 0; i < N; ++i) ts.push_back(p.allocate(64 * KiB));
    std::vector<std::uint64_t> seed(N, 0);
    std::size_t bad = 0;
    for (int i : {X, Y, W}) {
      auto pin = ts[static_cast<std::size_t>(i)].pin(Access::write);
      test::fill(pin.data(), 64 * KiB, seed[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(i) + 1);
    }
    struct Step {
      int tensor;
      Access access;
      bool discard;
    };
    const Step steps[] = {{W, Access::read_write, false}, {A, Access::write, false}, {B, Access::write, false},
                          {X, Access::read, false},       {C, Access::write, false}, {C, Access::read, true},
                          {B, Access::read, true},        {Y, Access::read, false},  {A, Access::read, true}};
    Stats before{};
    for (int it = 0; it < 6; ++it) {
      if (it == 3) before = p.stats();  // recorded, then replayed: the last three iterations count
      p.mark_iteration();
      for (const Step& s : steps) {
        const auto i = static_cast<std::size_t>(s.tensor);
        {
          auto pin = ts[i].pin(s.access);
          if (s.access != Access::write) bad += test::mismatches(pin.data(), 64 * KiB, seed[i]);
          if (s.access != Access::read) {
            seed[i] = static_cast<std::uint64_t>(it * 100 + s.tensor + 1);
            test::fill(pin.data(), 64 * KiB, seed[i]);
          }
        }
        if (s.discard) ts[i].discard();
      }
    }
    const Stats after = p.stats();
    EXPECT_EQ(bad, 0u) << prefetch;
    EXPECT_EQ(after.trace_divergences, 0u) << prefetch;
    p.check_invariants();
    return after.device_to_host.pages - before.device_to_host.pages;
  };
  const auto none = write_backs("none");
  EXPECT_GT(none, 0u);  // W and X leave the device: the setting has pressure
  EXPECT_EQ(write_backs("trace"), none) << "trace prefetch that loaded nothing wrote more pages back than no prefetch";
}
