// tvmm-bench's workloads: what each one pins, and replay of a hand-made trace through a pager.
#include "bench/workloads/workload.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>

#include "bench/workloads/registry.hpp"
#include "bench/workloads/runner.hpp"
#include "test_support.hpp"

namespace tvmm::bench {
namespace {

std::vector<KernelPin> pins_of(const Workload& w) {
  std::vector<KernelPin> all;
  for (const auto& k : w.step) all.insert(all.end(), k.pins.begin(), k.pins.end());
  return all;
}

// storages: 0 a 4 MiB parameter, 1 a 2 MiB temporary, 2 a 100-byte scalar (below min_bytes), 3 a 3 MiB state.
Trace hand_made() {
  Trace t;
  t.meta["model"] = "hand";
  t.storages = {{4 * MiB, "param", "w"}, {2 * MiB, "temp", "aten::mm"}, {100, "other", "-"}, {3 * MiB, "state", "m"}};
  t.ops = {{"mm", 10, {0}, {1}},          // reads w, writes the temporary
           {"scalar", 5, {2}, {2}},       // touches only the small storage: its time moves to the next kernel
           {"addcmul_", 7, {1, 3}, {3}},  // in place on 3: read_write
           {"sum", 1, {3, 3, 0}, {}},     // a storage named twice is pinned once
           {"empty", 2, {}, {}}};         // trailing time goes to the last kernel
  return t;
}

// Every registered workload builds from small sizes (a trace-replaying one from the hand-made trace)
// into tensors and kernels whose pins name only its tensors: a new workload is its make_ function and
// one registry line, and this test picks it up.
TEST(Workloads, EveryRegisteredWorkloadBuildsIntoTensorsAndKernels) {
  const test::TempDir dir;
  const std::string trace_path = dir.path() + "/hand.trace.gz";
  write_trace(trace_path, hand_made());
  WorkloadSizes sizes{.layers = 2, .tensor_mib = 2, .tensors = 4, .accesses = 8, .compute_us = 10};
  ASSERT_GE(workloads().size(), 5u);
  for (const auto& info : workloads()) {
    SCOPED_TRACE(std::string(info.name));
    EXPECT_EQ(find_workload(info.name), &info);
    EXPECT_FALSE(info.summary.empty());
    const Workload w = info.make(sizes, info.needs_trace ? trace_path : std::string());
    EXPECT_FALSE(w.tensor_bytes.empty());
    EXPECT_FALSE(w.step.empty());
    EXPECT_GT(w.total_bytes(), 0u);
    for (const auto& k : w.step) {
      for (const auto& p : k.pins) EXPECT_LT(p.tensor, w.tensor_bytes.size());
    }
  }
  EXPECT_EQ(find_workload("no-such-workload"), nullptr);
  EXPECT_THROW((void)find_workload("replay")->make(sizes, "/nonexistent/x.trace.gz"), std::exception);
}

TEST(Workloads, ReplayMapsStoragesToTensorsAndOpsToKernels) {
  const auto w = make_replay(hand_made(), "replay:hand", 0.5, 1 * MiB);
  EXPECT_EQ(w.tensor_bytes, (std::vector<std::size_t>{4 * MiB, 2 * MiB, 3 * MiB}));  // the scalar is left out
  ASSERT_EQ(w.step.size(), 3u);
  using A = Access;
  EXPECT_EQ(w.step[0].pins, (std::vector<KernelPin>{{0, A::read}, {1, A::write}}));
  EXPECT_EQ(w.step[1].pins, (std::vector<KernelPin>{{1, A::read}, {2, A::read_write}}));
  EXPECT_EQ(w.step[2].pins, (std::vector<KernelPin>{{2, A::read}, {0, A::read}}));
  EXPECT_DOUBLE_EQ(w.step[0].compute_us, 5.0);
  EXPECT_DOUBLE_EQ(w.step[1].compute_us, (5 + 7) * 0.5);
  EXPECT_DOUBLE_EQ(w.step[2].compute_us, (1 + 2) * 0.5);
  EXPECT_DOUBLE_EQ(w.compute_us(), 25 * 0.5);
  // The temporary (first written whole) is dead after its last use; the others live on.
  EXPECT_TRUE(w.step[0].discards.empty());
  EXPECT_EQ(w.step[1].discards, (std::vector<std::uint32_t>{1}));
  EXPECT_TRUE(w.step[2].discards.empty());
}

// A weight and two temporaries that are never live together: the working set is two pages, not three.
Workload disjoint_temporaries() {
  Workload w;
  w.name = "disjoint";
  w.tensor_bytes = {2 * MiB, 2 * MiB, 2 * MiB};
  w.step = {{{{1, Access::write}}, 10, {}},
            {{{1, Access::read}, {0, Access::read}}, 10, {1}},
            {{{2, Access::write}}, 10, {}},
            {{{2, Access::read}, {0, Access::read}}, 10, {2}}};
  return w;
}

TEST(Workloads, TheWorkingSetCountsDiscardedTensorsOnlyWhileTheyLive) {
  auto w = disjoint_temporaries();
  auto pages = [](std::size_t bytes, std::size_t page) { return (bytes + page - 1) / page; };
  EXPECT_EQ(w.peak_live(pages, 2 * MiB), 2u);
  EXPECT_EQ(w.working_set_bytes(), 4 * MiB);
  EXPECT_EQ(budgets_for(w, RunOptions{}, 1.0).frames, 2u);
  for (auto& k : w.step) k.discards.clear();
  EXPECT_EQ(w.working_set_bytes(), 6 * MiB);
}

TEST(Workloads, DiscardedTensorsAreDroppedByThePagerAndByBelady) {
  // At 1x the live data fits: with the temporaries discarded, nothing is written back or loaded.
  RunOptions o;
  o.iterations = 4;
  const auto r = run_pager(disjoint_temporaries(), o, "lru", 1.0);
  EXPECT_EQ(r.bytes_moved, 0.0);
  EXPECT_EQ(r.belady_bytes, 0.0);
  EXPECT_GT(r.evictions, 0u) << "the temporaries share a frame: each evicts the other, dropped";
}

TEST(Workloads, ReplayOfAHandMadeTraceGivesTheExpectedPinSequence) {
  const auto w = make_replay(hand_made(), "replay:hand", 1.0, 1 * MiB);
  test::TempDir dir;
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.pin_log = dir.path() + "/pins.jsonl";
  (void)run_pager(w, o, "lru", 1.2);  // 4 frames: the largest kernel pins 4 pages
  // The pager's own pin log: per iteration, the tensors and accesses it was asked for, in order.
  std::istringstream log(test::read_file(o.pin_log));
  std::vector<std::vector<std::pair<std::uint64_t, std::string>>> iterations;
  std::string line;
  while (std::getline(log, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("iteration")) {
      iterations.emplace_back();
    } else {
      ASSERT_FALSE(iterations.empty()) << "a pin before the first iteration mark: " << line;
      iterations.back().emplace_back(j.at("tensor").get<std::uint64_t>(), j.at("access").get<std::string>());
    }
  }
  ASSERT_EQ(iterations.size(), 3u);
  std::uint64_t base = UINT64_MAX;
  for (const auto& [id, access] : iterations[0]) base = std::min(base, id);
  const std::vector<std::pair<std::uint64_t, std::string>> expected = {{base + 0, "read"}, {base + 1, "write"},
                                                                       {base + 1, "read"}, {base + 2, "read_write"},
                                                                       {base + 2, "read"}, {base + 0, "read"}};
  for (const auto& it : iterations) EXPECT_EQ(it, expected);
}

TEST(Workloads, TrainPinsForwardBackwardAndOptimizer) {
  const auto w = make_train(2, 2 * MiB, 100);
  ASSERT_EQ(w.step.size(), 6u);
  EXPECT_EQ(w.tensor_bytes.size(), 8u);
  EXPECT_EQ(w.step[0].pins, (std::vector<KernelPin>{{0, Access::read}, {1, Access::write}}));
  EXPECT_EQ(w.step[2].pins.front().tensor, 5u);  // backward starts at the last layer's activations
  EXPECT_DOUBLE_EQ(w.compute_us(), 2 * 100 + 2 * 200 + 2 * 50);
}

TEST(Workloads, InferStreamsEveryWeightOnceWithPingPongActivations) {
  const auto w = make_infer(4, 8 * MiB, 1 * MiB, 10);
  ASSERT_EQ(w.step.size(), 4u);
  for (std::uint32_t l = 0; l < 4; ++l) {
    EXPECT_EQ(w.step[l].pins[0], (KernelPin{l, Access::read}));
    EXPECT_EQ(w.step[l].pins[1].tensor, 4 + l % 2);
    EXPECT_EQ(w.step[l].pins[2], (KernelPin{4 + (1 - l % 2), Access::write}));
  }
}

TEST(Workloads, ScanIsInOrderAndRandomIsSkewedOnlyWithZipf) {
  const auto scan = make_scan(5, 2 * MiB, 1);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(scan.step[i].pins[0].tensor, i);
  auto top_share = [](const Workload& w) {
    std::vector<std::size_t> n(w.tensor_bytes.size());
    for (const auto& p : pins_of(w)) ++n[p.tensor];
    return static_cast<double>(*std::max_element(n.begin(), n.end())) / static_cast<double>(w.step.size());
  };
  const auto uniform = make_random(64, 2 * MiB, 6400, 0, 1);
  const auto zipf = make_random(64, 2 * MiB, 6400, 1.0, 1);
  EXPECT_EQ(uniform.name, "random-uniform");
  EXPECT_EQ(zipf.name, "random-zipf");
  EXPECT_LT(top_share(uniform), 0.04);  // 1/64 = 0.016 expected
  EXPECT_GT(top_share(zipf), 0.15);     // 1 / H(64) = 0.21 expected for the hottest
  // The same seed gives the same sequence; writes are a quarter of the accesses.
  EXPECT_EQ(pins_of(make_random(64, 2 * MiB, 100, 1.0, 1)), pins_of(make_random(64, 2 * MiB, 100, 1.0, 1)));
  const auto writes = std::count_if(uniform.step.begin(), uniform.step.end(),
                                    [](const Kernel& k) { return k.pins[0].access == Access::read_write; });
  EXPECT_EQ(writes, 1600);
}

TEST(Workloads, AKernelThatCannotFitTheDeviceIsRefusedWithTheReason) {
  const auto w = make_train(2, 8 * MiB, 1);  // a backward kernel pins 3 tensors = 12 pages of 2 MiB
  RunOptions o;
  try {
    (void)budgets_for(w, o, 4.0);  // 32 pages / 4 = 8 frames
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    // What the kernel needs, what the device holds there, and the highest ratio at which it runs (32 / 12).
    EXPECT_NE(std::string(e.what()).find("need 12 device pages at once, but at 4.00x the device holds 8"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("it runs at 2.66x or less"), std::string::npos) << e.what();
  }
  o.host_fraction = 0.5;
  const auto b = budgets_for(w, o, 2.0);
  EXPECT_EQ(b.frames, 16u);
  EXPECT_EQ(b.host_pages, 8u);
  EXPECT_GT(b.nvme_pages, 0u);  // device + host hold 24 of 32 pages: the rest needs the NVMe tier
}

// Eight one-page tensors, each written, read and discarded by its own kernel: one page is live at a time.
Workload one_live_at_a_time() {
  Workload w;
  w.name = "one-live";
  for (std::uint32_t t = 0; t < 8; ++t) {
    w.tensor_bytes.push_back(2 * MiB);
    w.step.push_back({{{t, Access::write}}, 1, {}});
    w.step.push_back({{{t, Access::read}}, 1, {t}});
  }
  return w;
}

TEST(Workloads, TheNvmeTierIsSizedForEveryAllocatedTensorNotOnlyTheLiveOnes) {
  const auto w = one_live_at_a_time();
  RunOptions o;
  o.host_fraction = 4;
  const auto b = budgets_for(w, o, 1.0);
  EXPECT_EQ(b.working_pages, 1u);
  EXPECT_EQ(b.frames, 1u);
  EXPECT_EQ(b.host_pages, 4u);
  // Device + host hold the live page many times over but not the 8 allocated ones: NVMe holds the rest.
  EXPECT_GT(b.nvme_pages, 0u);
}

// Two 2-page tensors read in turn by 10 us kernels, with 2 device frames: each pair of kernels needs
// 4 pages, so at least 2 are copied in while it runs.
Workload two_in_turn(Access second, bool discard_second) {
  Workload w;
  w.name = "two-in-turn";
  w.tensor_bytes = {4 * MiB, 4 * MiB};
  w.step.push_back({{{0, Access::read}}, 10, {}});
  w.step.push_back({{{1, second}}, 10, discard_second ? std::vector<std::uint32_t>{1} : std::vector<std::uint32_t>{}});
  return w;
}

TEST(Workloads, TheWindowBoundCountsThePagesARunOfKernelsMustLoad) {
  const double page = 2.0 * MiB;
  const double bus = page / 100e-6;  // one page per 100 us
  // Every run of kernels needs at most 4 pages: with 4 frames nothing must move, the bound is the compute.
  EXPECT_NEAR(window_bound_s(two_in_turn(Access::read, false), 4, 2 * MiB, bus), 20e-6, 1e-9);
  // With 2 frames each pair of kernels loads 2 pages (200 us): the best split is into pairs.
  EXPECT_NEAR(window_bound_s(two_in_turn(Access::read, false), 2, 2 * MiB, bus), 200e-6, 1e-9);
  // A tensor that is overwritten (Access::write) after a discard needs no contents: nothing must move.
  EXPECT_NEAR(window_bound_s(two_in_turn(Access::write, true), 2, 2 * MiB, bus), 20e-6, 1e-9);
  // Overwritten but never discarded: its first pin in a run is still a write, so it needs nothing either.
  EXPECT_NEAR(window_bound_s(two_in_turn(Access::write, false), 2, 2 * MiB, bus), 20e-6, 1e-9);
  EXPECT_THROW((void)window_bound_s(two_in_turn(Access::read, false), 2, 2 * MiB, 0), std::invalid_argument);
}

// tvmm drops a page whose host copy is current, with or without an NVMe tier, so Belady must too, or
// it would not bound tvmm's bytes.
TEST(Workloads, BeladyDropsCleanPagesWithOrWithoutAnNvmeTier) {
  const auto w = two_in_turn(Access::read, false);  // two 2-page tensors, read in turn, never written
  RunOptions o;
  Budgets b;
  b.frames = 2;
  b.total_pages = b.working_pages = 4;
  const auto host_only = reference(w, o, b);
  // About 4 pages loaded per iteration and none written back; writing every evicted page back makes 8.
  EXPECT_LT(host_only.belady_bytes, 5.0 * 2 * MiB);
  b.nvme_pages = 4;
  EXPECT_DOUBLE_EQ(reference(w, o, b).belady_bytes, host_only.belady_bytes);
}

TEST(Workloads, TheReferenceTakesTheLargerOfTheIdealAndTheWindowBound) {
  const auto w = two_in_turn(Access::read, false);
  RunOptions o;
  o.bus_gbs = 2.0 * MiB / 100e-6 / 1e9;
  Budgets b;
  b.frames = 2;
  b.total_pages = b.working_pages = 4;
  const auto ref = reference(w, o, b);
  EXPECT_GE(ref.window_bound_s, ref.bound_s);
  EXPECT_NEAR(ref.window_bound_s, std::max(ref.bound_s, 200e-6), 1e-9);
  b.frames = 4;  // all fits: both are the compute
  const auto fits = reference(w, o, b);
  EXPECT_NEAR(fits.bound_s, 20e-6, 1e-9);
  EXPECT_NEAR(fits.window_bound_s, 20e-6, 1e-9);
}

// Four 4-page tensors written in turn, then read in turn: the writing phase produces 16 pages the reading
// phase needs, with a device of 4 frames.
Workload write_then_read() {
  Workload w;
  w.name = "write-then-read";
  w.tensor_bytes.assign(4, 8 * MiB);
  for (std::uint32_t t = 0; t < 4; ++t) w.step.push_back({{{t, Access::write}}, 1, {}});
  for (std::uint32_t t = 0; t < 4; ++t) w.step.push_back({{{t, Access::read}}, 1, {}});
  return w;
}

TEST(Workloads, TheLowerBoundCountsTheWriteBacksOfWhatAPhaseProduces) {
  const double page = 2.0 * MiB;
  const double bus = page / 100e-6;  // one page per 100 us, each direction
  const auto w = write_then_read();
  // Reading: 16 pages needed, 4 held when the phase starts: 12 loaded (1.2 ms). Writing: 16 pages
  // produced and read later, 4 held when it ends: 12 written back (1.2 ms). Disjoint phases: 2.4 ms.
  EXPECT_NEAR(lower_bound_s(w, 4, 2 * MiB, bus), 2400e-6, 1e-9);
  // The window bound counts the loads only (and the writing phase's 4 us of compute).
  EXPECT_NEAR(window_bound_s(w, 4, 2 * MiB, bus), 1204e-6, 1e-9);
  // Everything fits: the compute.
  EXPECT_NEAR(lower_bound_s(w, 16, 2 * MiB, bus), 8e-6, 1e-9);
  // Data that is discarded before anyone reads it needs no write-back.
  auto dead = w;
  for (std::size_t k = 4; k < 8; ++k) dead.step[k].pins[0].access = Access::write;
  EXPECT_NEAR(lower_bound_s(dead, 4, 2 * MiB, bus), 8e-6, 1e-9);
  // Never below the window bound, on the hand-made workloads above.
  for (const auto& x : {two_in_turn(Access::read, false), two_in_turn(Access::write, true), w}) {
    for (std::size_t frames : {2u, 4u, 8u}) {
      EXPECT_GE(lower_bound_s(x, frames, 2 * MiB, bus) + 1e-12, window_bound_s(x, frames, 2 * MiB, bus))
          << x.name << " with " << frames << " frames";
    }
  }
  EXPECT_THROW((void)lower_bound_s(w, 4, 2 * MiB, 0), std::invalid_argument);
}

// Reference::lower_bound_terms says how the lower bound comes about. Writing then reading four 4-page
// tensors with 4 frames: the window program's best split alternates a writing run that must write 12
// pages back (1.2 ms) and a reading run that must load 12 (1.2 ms). The fewest loads (every kernel
// fills the 4 frames, so no page stays resident across another kernel: 16 pages, 1.6 ms) and the
// compute (8 us) are below it.
TEST(Workloads, TheLowerBoundSaysWhichTermBindsEachRun) {
  const double page = 2.0 * MiB;
  const double bus = page / 100e-6;  // one page per 100 us, each direction
  const auto w = write_then_read();
  const BoundSplit split = lower_bound_split(w, 4, 2 * MiB, bus);
  EXPECT_EQ(split.iterations, 4);
  EXPECT_NEAR(split.per_iteration_s, lower_bound_s(w, 4, 2 * MiB, bus), 1e-12);
  // The runs cover the 4 iterations' 32 kernels in order, with no gap.
  std::size_t next = 0;
  for (const auto& r : split.runs) {
    EXPECT_EQ(r.first, next);
    next = r.first + r.kernels;
  }
  EXPECT_EQ(next, 4 * w.step.size());
  ASSERT_EQ(split.runs.size(), 8u);
  for (std::size_t i = 0; i < split.runs.size(); ++i) {
    const auto& r = split.runs[i];
    EXPECT_EQ(r.first, 4 * i);
    EXPECT_EQ(r.kernels, 4u);
    EXPECT_NEAR(i % 2 == 0 ? r.out_s : r.in_s, 1200e-6, 1e-9) << "run " << i;
    EXPECT_NEAR(i % 2 == 0 ? r.in_s : r.out_s, 0, 1e-12) << "run " << i;
    EXPECT_NEAR(r.compute_s, 4e-6, 1e-12);
  }
  RunOptions o;
  o.bus_gbs = bus / 1e9;
  Budgets b;
  b.frames = 4;
  const auto ref = reference(w, o, b);
  const auto& t = ref.lower_bound_terms;
  EXPECT_NEAR(t.compute_s, 8e-6, 1e-12);
  EXPECT_NEAR(t.loads_s, 1600e-6, 1e-9);
  EXPECT_NEAR(t.window_s, 2400e-6, 1e-9);
  EXPECT_NEAR(t.window_in_s, 1200e-6, 1e-9);
  EXPECT_NEAR(t.window_out_s, 1200e-6, 1e-9);
  EXPECT_NEAR(t.window_compute_s, 0, 1e-12);
  EXPECT_EQ(t.runs.size(), 8u);  // every run is bound by the bus
  EXPECT_EQ(t.launches_s, 0.0) << "launches cost nothing without --vmm-costs";
  EXPECT_DOUBLE_EQ(ref.lower_bound_s, std::max({t.compute_s, t.loads_s, t.window_s}));
  // Everything fits: every run is bound by its compute, and none is listed.
  b.frames = 16;
  const auto fits = reference(w, o, b).lower_bound_terms;
  EXPECT_NEAR(fits.window_compute_s, fits.window_s, 1e-12);
  EXPECT_NEAR(fits.window_in_s + fits.window_out_s, 0, 1e-12);
  EXPECT_TRUE(fits.runs.empty());
}

// A tensor's partial last page moves only the bytes the tensor holds, so the bounds count bytes: four
// tensors of 3.5 pages (16 pages, 28 MiB) written then read with 4 frames.
TEST(Workloads, TheBoundsCountTheBytesOfPartialLastPages) {
  const double page = 2.0 * MiB;
  const double bus = page / 100e-6;  // one page per 100 us, each direction
  auto w = write_then_read();
  w.tensor_bytes.assign(4, 7 * MiB);
  // Reading: 28 MiB needed, at most 4 pages (8 MiB) held when the phase starts: 20 MiB loaded (1.0 ms).
  // Writing: 28 MiB produced and read later, 8 MiB held when it ends: 20 MiB written back (1.0 ms).
  EXPECT_NEAR(lower_bound_s(w, 4, 2 * MiB, bus), 2000e-6, 1e-9);
  EXPECT_NEAR(window_bound_s(w, 4, 2 * MiB, bus), 1004e-6, 1e-9);
  // The reference: Belady moves each tensor's 3.5 pages as 7 MiB, and its whole-page count bounds time.
  RunOptions o;
  o.bus_gbs = bus / 1e9;
  Budgets b;
  b.frames = 4;
  const auto ref = reference(w, o, b);
  // Per iteration Belady writes every tensor back once and loads it once (4 frames hold one tensor, and
  // the one written last is read last): each move of a tensor is its 7 MiB, not 4 pages of 2 MiB.
  EXPECT_DOUBLE_EQ(ref.belady_bytes, 2 * 4 * 7.0 * MiB);
  // The fewest bytes any pager loads (at most 3 of each tensor's 4 pages' worth) bind less than the
  // window program here.
  EXPECT_NEAR(ref.lower_bound_s, 2000e-6, 1e-9);
}

// Where a small tensor and two large ones take turns in 2 frames, the fewest bytes loaded (weighted
// paging: reload the small one rather than a large one) bind the lower bound. Each iteration reads A
// (a page), b (64 KiB), C (a page), b, A. Keeping A from its first read to its second costs b's frame
// at C: b is reloaded at its second read and C at its read, 2 MiB + 64 KiB per iteration. Farthest
// next use evicts A at C instead and loads 4 MiB. Counting whole pages alone (b has none), A and C
// fit in the 2 frames and nothing bounds below the compute.
TEST(Workloads, TheLowerBoundCountsTheFewestBytesLoaded) {
  const double page = 2.0 * MiB;
  const double bus = page / 100e-6;  // one page per 100 us, each direction
  Workload w;
  w.name = "large-small-large";
  w.tensor_bytes = {2 * MiB, 64 * KiB, 2 * MiB};
  for (const std::uint32_t t : {0u, 1u, 2u, 1u, 0u}) w.step.push_back({{{t, Access::read}}, 1, {}});
  RunOptions o;
  o.bus_gbs = bus / 1e9;
  Budgets b;
  b.frames = 2;
  const auto ref = reference(w, o, b);
  EXPECT_NEAR(ref.lower_bound_s, (2 * MiB + 64 * KiB) / bus, 1e-9);
  EXPECT_LT(lower_bound_s(w, 2, 2 * MiB, bus), 10e-6) << "the window program binds little here";
  EXPECT_DOUBLE_EQ(ref.belady_bytes, 2 * 2 * MiB) << "Belady loads A and C each iteration, clean: no write-backs";
}

// A lower bound must hold for every pager: no policy's measured step time is below it.
TEST(Workloads, NoPolicyRunsFasterThanTheLowerBound) {
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.bus_gbs = 4;
  // make_train(4, 3 MiB, ...): tensors of 1.5 pages, whose last pages move half a page each. With the
  // simulator's call costs on, the bound's window program also waits for each kernel's launch.
  for (const auto& [w, costs] :
       {std::pair{write_then_read(), false}, std::pair{make_train(4, 4 * MiB, 300), false},
        std::pair{make_train(4, 3 * MiB, 300), false}, std::pair{make_infer(8, 4 * MiB, 2 * MiB, 100), false},
        std::pair{make_random(16, 2 * MiB, 32, 1.0, 50), false}, std::pair{make_train(4, 3 * MiB, 10), true},
        std::pair{make_infer(8, 4 * MiB, 2 * MiB, 5), true}}) {
    o.vmm_costs = costs;
    for (double ratio : {1.5, 2.0, 3.0}) {
      Budgets b;
      try {
        b = budgets_for(w, o, ratio);
      } catch (const std::invalid_argument&) {
        continue;  // a kernel does not fit at this ratio
      }
      for (const char* policy : {"lru", "trace", "belady", "naive"}) {
        const auto r = run_pager(w, o, policy, ratio);
        EXPECT_GE(r.step_time_s, r.lower_bound_s * (1 - 1e-6))
            << w.name << " " << policy << " at " << ratio << "x, costs " << costs;
        EXPECT_GE(r.lower_bound_s + 1e-12, r.compute_s);
        EXPECT_DOUBLE_EQ(r.bytes_in + r.bytes_out, r.bytes_moved);
        EXPECT_DOUBLE_EQ(r.bus_bytes_per_s, o.bus_gbs * 1e9);
      }
    }
  }
}

// With the simulator's costs on, the launches bind where kernels are shorter than a launch: one thread
// makes them all, one after another. 240 kernels of 1 us over eight 2 MiB tensors: the launches take
// 240 x 4.6 us = 1.1 ms per iteration against 0.24 ms of compute, and against 0.34 ms of loads at 2x
// (runs of 30 kernels on two tensors, then the next pair). No run beats that, all in memory included, and
// every policy's step stays above it at 2x; byte checks add a verify per pin that reads and a fill per
// pin that writes.
TEST(Workloads, TheLowerBoundCountsTheProgramsLaunches) {
  Workload w;
  w.name = "short-kernels";
  w.tensor_bytes.assign(8, 2 * MiB);
  for (std::uint32_t k = 0; k < 240; ++k) {
    w.step.push_back({{{k / 30, Access::read}, {(k / 30 + 1) % 8, Access::read_write}}, 1, {}});
  }
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.bus_gbs = 50;
  o.vmm_costs = true;
  const double launch_s = std::chrono::duration<double>(modelled_vmm_costs().launch).count();
  ASSERT_GT(launch_s, 0.0);
  const auto ref = reference(w, o, budgets_for(w, o, 2.0));
  EXPECT_NEAR(ref.lower_bound_terms.launches_s, 240 * launch_s, 1e-12);
  EXPECT_DOUBLE_EQ(ref.lower_bound_s, ref.lower_bound_terms.launches_s);
  RunOptions checked = o;
  checked.verify = true;  // each kernel: a verify for each of its two pins, a fill for the one that writes
  EXPECT_NEAR(reference(w, checked, budgets_for(w, o, 2.0)).lower_bound_terms.launches_s, 240 * 4 * launch_s, 1e-12);
  RunOptions free_calls = o;
  free_calls.vmm_costs = false;
  EXPECT_EQ(reference(w, free_calls, budgets_for(w, o, 2.0)).lower_bound_terms.launches_s, 0.0);
  RunOptions whole = o;
  whole.whole_workload = true;
  const auto in_memory = run_pager(w, whole, "lru", 1.0);
  EXPECT_GE(in_memory.step_time_s, 240 * launch_s * (1 - 1e-6));
  for (const char* policy : {"lru", "trace", "belady"}) {
    const auto r = run_pager(w, o, policy, 2.0);
    EXPECT_GT(r.bytes_in, 0.0) << policy;  // pages move at 2x
    EXPECT_GE(r.step_time_s, r.lower_bound_s * (1 - 1e-6)) << policy;
  }
}

// A kernel cannot start before its launch, nor before the kernel ahead of it ends. Nine empty kernels
// and one of 50 us, launched 10 us apart: the last is launched at 90 us and ends at 140 us, where the
// compute (50 us) and the launches (100 us) each bound less. The window program with launch floors
// counts it; without floors it is the compute.
TEST(Workloads, AKernelCannotStartBeforeItsLaunch) {
  Workload w;
  w.name = "late-launch";
  w.tensor_bytes = {2 * MiB};
  for (int k = 0; k < 10; ++k) w.step.push_back({{{0, Access::read}}, k == 9 ? 50.0 : 0.0, {}});
  const double bus = 2.0 * MiB / 100e-6;
  const auto floors = launch_floors(w, 10e-6, false);
  ASSERT_EQ(floors.size(), 10u);
  for (std::size_t k = 0; k < 10; ++k) EXPECT_NEAR(floors[k], 10e-6 * static_cast<double>(k), 1e-15);
  const auto split = lower_bound_split(w, 4, 2 * MiB, bus, 4, floors);
  EXPECT_NEAR(split.per_iteration_s, 140e-6, 1e-12);
  double waited = 0;
  for (const auto& r : split.runs) waited += r.launch_wait_s;
  EXPECT_NEAR(waited / 4, 90e-6, 1e-12) << "each iteration's last kernel waits 90 us for its launch";
  EXPECT_NEAR(lower_bound_split(w, 4, 2 * MiB, bus).per_iteration_s, 50e-6, 1e-12);
  EXPECT_THROW((void)lower_bound_split(w, 4, 2 * MiB, bus, 4, std::span(floors).first(9)), std::invalid_argument);
  // Byte checks launch a verify before each kernel that reads: kernel k is the (2k + 1)th launch.
  const auto checked = launch_floors(w, 1.0, true);
  for (std::size_t k = 0; k < 10; ++k) EXPECT_DOUBLE_EQ(checked[k], static_cast<double>(2 * k + 1));
  // reference() uses the simulator's modelled launch cost with --vmm-costs on, and none without.
  RunOptions o;
  o.bus_gbs = bus / 1e9;
  o.vmm_costs = true;
  Budgets b;
  b.frames = 4;
  const double launch_s = std::chrono::duration<double>(modelled_vmm_costs().launch).count();
  const auto t = reference(w, o, b).lower_bound_terms;
  EXPECT_NEAR(t.window_s, 9 * launch_s + 50e-6, 1e-12);
  EXPECT_NEAR(t.window_launch_wait_s, 9 * launch_s, 1e-12);
  EXPECT_NEAR(t.window_compute_s, 50e-6, 1e-12);
  EXPECT_NEAR(t.launches_s, 10 * launch_s, 1e-12);
  EXPECT_NEAR(reference(w, o, b).lower_bound_s, t.window_s, 1e-12);
  o.vmm_costs = false;
  EXPECT_NEAR(reference(w, o, b).lower_bound_terms.window_s, 50e-6, 1e-12);
  // All in memory, the simulated program is no faster than that.
  o.vmm_costs = true;
  o.iterations = 3;
  o.warmup = 1;
  o.whole_workload = true;
  EXPECT_GE(run_pager(w, o, "lru", 1.0).step_time_s, (9 * launch_s + 50e-6) * (1 - 1e-6));
}

// RunOptions::sync_kernels: the host waits for each kernel before the next kernel's pins, so a demand
// page-in cannot start before the kernel ahead of it has ended. Every policy is then slower than with a
// host that runs ahead, and trace prefetch, which loads the next pin's pages while a kernel runs, is
// faster than the same eviction without it (with a host that runs ahead it changes nothing here: the
// pins themselves load early).
TEST(Workloads, AHostThatWaitsForEachKernelLeavesPrefetchTheOnlyOverlap) {
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.bus_gbs = 4;
  const auto w = make_train(4, 4 * MiB, 300);
  RunOptions sync = o;
  sync.sync_kernels = true;
  for (const char* policy : {"lru", "belady"}) {
    const auto ahead = run_pager(w, o, policy, 2.0);
    const auto waits = run_pager(w, sync, policy, 2.0);
    EXPECT_EQ(ahead.host, "ahead");
    EXPECT_EQ(waits.host, "synchronous");
    EXPECT_GT(waits.step_time_s, ahead.step_time_s * 1.05) << policy;
  }
  const auto belady = run_pager(w, sync, "belady", 2.0);
  const auto trace = run_pager(w, sync, "trace", 2.0);
  EXPECT_GT(trace.prefetched, 0u);
  EXPECT_LT(trace.step_time_s, belady.step_time_s);
}

// With RunOptions::vmm_costs the simulator charges every map, set_access and unmap to the thread that
// calls it. On a fast bus (the copies cost little, so the host's calls are what the step waits for) a
// run that moves pages takes longer than the same run with free calls, by at least the modelled map
// time of the pages it made resident; each run says which it was. (On a slow bus the device is the
// bottleneck and the host's calls can hide behind it.) LFU, because its eviction ignores the frames
// that incoming pages are still mapped to, so most page-ins are mapped anew; with LRU the pairing makes
// this run faster with the costs than without them (a different eviction order).
TEST(Workloads, VmmCostsSlowARunThatMovesPagesAndAreRecorded) {
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.bus_gbs = 1000;
  const auto w = make_train(4, 4 * MiB, 1);  // kernels too short to hide anything behind
  const auto free_calls = run_pager(w, o, "lfu", 2.0);
  o.vmm_costs = true;
  const auto costly = run_pager(w, o, "lfu", 2.0);
  EXPECT_EQ(free_calls.vmm_costs, "free");
  EXPECT_EQ(costly.vmm_costs, "modelled");
  ASSERT_GT(costly.misses, 0u);
  // Half the misses at least map anew (a map call each), and the host's calls delay the launches.
  const double map_s = std::chrono::duration<double>(modelled_vmm_costs().map).count();
  EXPECT_GE(costly.step_time_s, free_calls.step_time_s + static_cast<double>(costly.misses) / 2 * map_s)
      << "free " << free_calls.step_time_s << " s, costly " << costly.step_time_s << " s";
}

// The all-in-memory peer (whole_workload) has a frame for every page of every tensor, where tensors
// dead between their uses make the peak live set smaller: with only the peak's frames, a dead tensor's
// frames move to the next one every step (in the steady state without VMM calls either: each page gets
// back the frame its address is still mapped to); with every tensor's, nothing is evicted at all.
TEST(Workloads, TheWholeWorkloadBudgetHoldsEveryTensor) {
  Workload w;  // two 8 MiB tensors, each written, read and dead in turn: one live at a time
  w.name = "one-live-at-a-time";
  w.tensor_bytes.assign(2, 8 * MiB);
  for (std::uint32_t t = 0; t < 2; ++t) {
    w.step.push_back({{{t, Access::write}}, 100, {}});
    w.step.push_back({{{t, Access::read}}, 100, {t}});
  }
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.vmm_costs = true;
  const auto peak = budgets_for(w, o, 1.0);
  const auto peak_run = run_pager(w, o, "lru", 1.0);
  o.whole_workload = true;
  const auto whole = budgets_for(w, o, 1.0);
  const auto whole_run = run_pager(w, o, "lru", 1.0);
  EXPECT_EQ(peak.frames, 4u);   // 8 MiB in 2 MiB pages
  EXPECT_EQ(whole.frames, 8u);  // both tensors
  EXPECT_GT(peak_run.evictions, 0u);
  // The frames move between the two tensors, and each page comes back to the frame its address is still
  // mapped to: after the warm-up, no VMM call either (the stream and event calls cost host time too).
  auto vmm_calls = [](const RunResult& r) {
    double calls = 0;
    for (const auto& d : r.driver) {
      const std::string_view call = d.call;
      if (call == "map" || call == "set_access" || call == "unmap") calls += d.calls;
    }
    return calls;
  };
  EXPECT_EQ(vmm_calls(peak_run), 0.0) << "a page-in into its old frame makes no VMM call";
  EXPECT_EQ(peak_run.remap_s, 0.0);
  EXPECT_EQ(whole_run.evictions, 0u);
  EXPECT_EQ(vmm_calls(whole_run), 0.0) << "the steady state makes no VMM call";
}

// Sampling residency (the plots' timeline) reads every page's tier after every kernel: host work that on a
// GPU delays the kernels it runs between. It happens in an extra iteration after the measured ones, so the
// measured iterations make the same driver calls, move the same bytes and take the same time with or
// without it.
TEST(Workloads, SamplingResidencyLeavesTheMeasuredIterationsAlone) {
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  // Without write-behind (the default, set here on purpose): its copies share the simulator's
  // device-to-host lane with the write-backs from another stream, and the lane serves two streams in
  // the order their workers reach it, which varies from run to run (sim_stream.hpp), so two runs would
  // not repeat to the nanosecond.
  o.write_behind = false;
  const auto w = make_train(4, 4 * MiB, 100);
  const auto plain = run_pager(w, o, "trace", 2.0);
  Residency residency;
  const auto sampled = run_pager(w, o, "trace", 2.0, &residency);
  EXPECT_EQ(residency.size(), w.step.size());  // a row per kernel of one iteration
  EXPECT_EQ(sampled.step_time_s, plain.step_time_s);
  EXPECT_EQ(sampled.bytes_moved, plain.bytes_moved);
  ASSERT_EQ(sampled.driver.size(), plain.driver.size());
  for (std::size_t i = 0; i < plain.driver.size(); ++i) {
    EXPECT_EQ(sampled.driver[i].calls, plain.driver[i].calls) << plain.driver[i].call;
  }
}

}  // namespace
}  // namespace tvmm::bench
