// tvmm-bench's workloads: what each one pins, and replay of a hand-made trace through a pager (the
// bounds runs are measured against: bound_test.cpp).
#include "bench/workloads/workload.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <string_view>
#include <utility>

#include "bench/workloads/registry.hpp"
#include "bench/workloads/runner.hpp"
#include "test_support.hpp"

namespace tvmm::bench {
namespace {

// A run's calls of one kind per iteration ("map", "launch", ...: RunResult::DriverRow::call).
double driver_calls(const RunResult& r, std::string_view kind) {
  for (const auto& d : r.driver) {
    if (kind == d.call) return d.calls;
  }
  return 0.0;
}

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

// An op whose modelled time would wrap the device clock (64-bit nanoseconds) is refused, naming the op
// and where its time comes from; every run once failed with "the duration is negative".
TEST(Workloads, ReplayRefusesAnOpLongerThanItCanModel) {
  Trace t = hand_made();
  t.ops[2].time_us = 1e300;
  EXPECT_THROW((void)make_replay(t, "replay:hand", 1.0, 1 * MiB), std::invalid_argument);
  const std::string m = test::message_of([&] { (void)make_replay(t, "replay:hand", 1.0, 1 * MiB); });
  EXPECT_NE(m.find("op 3 of the trace (addcmul_) takes 1e+300 us as modelled (its time x --compute-scale), more "
                   "than replay models"),
            std::string::npos)
      << m;
  t.ops[2].time_us = 7;  // within the limit, but scaled past it
  EXPECT_THROW((void)make_replay(t, "replay:hand", 1e300, 1 * MiB), std::invalid_argument);
  EXPECT_NO_THROW((void)make_replay(t, "replay:hand", 1e6, 1 * MiB));
  // Each op within the limit, but the step past what the clock holds over a run.
  t.ops.assign(2000, TraceOp{"mm", 9e8, {0}, {1}});
  EXPECT_THROW((void)make_replay(t, "replay:hand", 1.0, 1 * MiB), std::invalid_argument);
}

// A trace's model name (or file name) becomes part of file names, CSV fields and gnuplot strings: a
// comma, quote or slash in it once split CSV rows and broke plots.gp.
TEST(Workloads, AReplaysNameKeepsToCharactersSafeInFilesAndTables) {
  EXPECT_EQ(name_part("resnet18_b4-1.5x+v2"), "resnet18_b4-1.5x+v2");
  EXPECT_EQ(name_part("../evil/x,y\"z w"), ".._evil_x_y_z_w");
  EXPECT_EQ(name_part(""), "_");
  EXPECT_EQ(trace_stem("/a/b/gpt2.trace.gz"), "gpt2");
  EXPECT_EQ(trace_stem("my model.trace"), "my_model");
  EXPECT_EQ(trace_stem("x.gz"), "x");
  const test::TempDir dir;
  Trace t = hand_made();
  t.meta["model"] = "../evil/x,y\"z";
  write_trace(dir.path() + "/odd.trace.gz", t);
  WorkloadSizes sizes;
  EXPECT_EQ(find_workload("replay")->make(sizes, dir.path() + "/odd.trace.gz").name, "replay:.._evil_x_y_z");
  t.meta.erase("model");
  write_trace(dir.path() + "/no model.trace.gz", t);
  EXPECT_EQ(find_workload("replay")->make(sizes, dir.path() + "/no model.trace.gz").name, "replay:no_model");
}

// A trace with nothing to replay says why: no op at all, or none on a storage --min-mib keeps.
TEST(Workloads, ReplayOfNothingSaysWhy) {
  Trace t = hand_made();
  auto message = [](const Trace& trace, std::size_t min_bytes) {
    EXPECT_THROW((void)make_replay(trace, "replay:hand", 1.0, min_bytes), std::invalid_argument);
    return test::message_of([&] { (void)make_replay(trace, "replay:hand", 1.0, min_bytes); });
  };
  EXPECT_NE(message(t, 64 * MiB).find("no op touches a storage of at least 64 MiB (--min-mib leaves smaller ones out)"),
            std::string::npos);
  t.ops.clear();
  EXPECT_NE(message(t, 0).find("trace replay:hand has no op"), std::string::npos);
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
  // One page, in the singular.
  Workload one;
  one.name = "one-page";
  one.tensor_bytes = {2 * MiB};
  one.step = {{{{0, Access::write}}, 1, {}}};
  try {
    (void)budgets_for(one, o, 2.0);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("need 1 device page at once, but at 2.00x the device holds 0 (of a "
                                         "working set of 1 page)"),
              std::string::npos)
        << e.what();
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

// RunOptions::mapping_calls_free (--vmm-costs mapping-free) charges every modelled call but the mapping
// ones: the same LFU run remaps pages (map calls made) yet spends no host time in them, while the
// program's launches still cost it theirs (its lower bound counts them, and the host-bound step is
// longer than with every call free); with the mapping calls charged too it is longer again.
TEST(Workloads, MappingFreeCostsChargeEveryCallButTheMappingOnes) {
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.bus_gbs = 1000;
  const auto w = make_train(4, 4 * MiB, 1);
  const auto free_calls = run_pager(w, o, "lfu", 2.0);
  o.vmm_costs = true;
  o.mapping_calls_free = true;
  const auto mapping_free = run_pager(w, o, "lfu", 2.0);
  o.mapping_calls_free = false;
  const auto costly = run_pager(w, o, "lfu", 2.0);
  EXPECT_EQ(mapping_free.vmm_costs, "mapping-free");
  ASSERT_GT(driver_calls(mapping_free, "map"), 0.0);
  EXPECT_EQ(mapping_free.remap_s, 0.0) << "the mapping calls took modelled host time";
  EXPECT_GT(costly.remap_s, 0.0);
  const double launch_s = std::chrono::duration<double>(modelled_vmm_costs().launch).count();
  EXPECT_GE(mapping_free.step_time_s, free_calls.step_time_s + driver_calls(mapping_free, "launch") * launch_s * 0.5)
      << "free " << free_calls.step_time_s << " s, mapping-free " << mapping_free.step_time_s << " s";
  EXPECT_GT(costly.step_time_s, mapping_free.step_time_s);
  const auto bound = reference(w, o, budgets_for(w, o, 2.0));
  o.mapping_calls_free = true;
  EXPECT_DOUBLE_EQ(reference(w, o, budgets_for(w, o, 2.0)).lower_bound_terms.launches_s,
                   bound.lower_bound_terms.launches_s);
  EXPECT_GT(bound.lower_bound_terms.launches_s, 0.0);
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
    return driver_calls(r, "map") + driver_calls(r, "set_access") + driver_calls(r, "unmap");
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

// A trace no one tuned for, drawn at random: 4 to 24 storages from empty to 12 MiB (partial last pages,
// storages below a page), 8 to 60 ops that name up to four storages, some twice, some none, with and
// without recorded costs.
Trace random_trace(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  Trace t;
  t.meta["model"] = "random" + std::to_string(seed);
  const auto storages = pick(4, 24);
  const char* kinds[] = {"param", "grad", "state", "input", "temp"};
  for (std::uint64_t i = 0; i < storages; ++i) {
    const auto c = pick(0, 99);
    const std::uint64_t bytes = c < 5    ? 0
                                : c < 25 ? pick(1, 256 * 1024)
                                : c < 90 ? pick(256 * 1024, 12 * MiB)
                                         : 2 * MiB;
    t.storages.push_back({bytes, kinds[pick(0, 4)], "s" + std::to_string(i)});
  }
  const auto ops = pick(8, 60);
  for (std::uint64_t k = 0; k < ops; ++k) {
    TraceOp op{"op" + std::to_string(k), static_cast<double>(pick(0, 400)), {}, {}};
    for (auto n = pick(0, 4); n > 0; --n) op.reads.push_back(static_cast<std::uint32_t>(pick(0, storages - 1)));
    for (auto n = pick(0, 2); n > 0; --n) op.writes.push_back(static_cast<std::uint32_t>(pick(0, storages - 1)));
    if (pick(0, 1) == 1) {
      op.flops = static_cast<double>(pick(0, 10'000'000'000ULL));
      op.bytes = static_cast<double>(pick(0, 100'000'000ULL));
    }
    t.ops.push_back(std::move(op));
  }
  return t;
}

// Random traces through the whole replay path and all three tiers: half the working set on the host,
// the rest on NVMe, the drive modelled (so NVMe read-ahead runs on the drive's timeline). Every tensor's
// bytes are written and checked each iteration, for the policies that replay the trace (trace
// prefetch with read-ahead, Belady) and one that does not (LRU). A trace whose largest kernel does not
// fit at this ratio is refused with the ratio it would run at.
TEST(Workloads, RandomTracesReplayWithEveryByteIntactAcrossTheThreeTiers) {
  const test::TempDir dir;
  RunOptions o;
  o.iterations = 3;
  o.warmup = 1;
  o.verify = true;
  o.host_fraction = 0.5;
  o.disk_dir = dir.path();
  o.disk_costs = true;
  int ran = 0, on_nvme = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto w = make_replay(random_trace(seed), "replay:random", 1.0, 64 * 1024);
    try {
      (void)budgets_for(w, o, 1.5);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("or less (--ratios "), std::string::npos) << e.what();
      continue;
    }
    for (const char* policy : {"trace", "belady", "lru"}) {
      const auto r = run_pager(w, o, policy, 1.5);
      EXPECT_GT(r.verified_bytes, 0u) << policy;
      EXPECT_EQ(r.mismatched_bytes, 0u) << policy;
      on_nvme += r.disk_read_bytes > 0 ? 1 : 0;
    }
    ++ran;
  }
  EXPECT_GE(ran, 4) << "most random traces fit at 1.5x";
  EXPECT_GE(on_nvme, ran) << "the runs read pages back from NVMe";
}

}  // namespace
}  // namespace tvmm::bench
