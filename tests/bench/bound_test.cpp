// The bounds tvmm-bench measures every run against (bench/workloads/runner.hpp): the ideal and window
// bounds, the lower bound's five figures (compute, fewest loads, the two-direction window program with
// its launch floors, the program's launches, the drive's least busy time), and that no policy beats the
// lower bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bench/workloads/runner.hpp"
#include "bench/workloads/workload.hpp"
#include "test_support.hpp"

namespace tvmm::bench {
namespace {

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
// A trace of 8000 kernels on 8000 tensors: the window program once kept a table of kernels x tensors
// (64 MB here, 10 GB for 100k of each) and grew every run up to a whole iteration (over 10^9 steps); it
// now looks each tensor's next event up and limits the runs' length on such traces. Each kernel reads
// and writes its own page in 10 us with a bus that moves a page in 10 ns: the compute binds every run,
// and the bound is the iteration's compute, as without the limit.
TEST(Workloads, TheWindowProgramOfALongTraceIsStillItsComputeWhereTheComputeBinds) {
  Workload w;
  w.name = "long";
  constexpr std::uint32_t n = 8000;
  for (std::uint32_t k = 0; k < n; ++k) {
    w.tensor_bytes.push_back(2 * MiB);
    w.step.push_back({{{k, Access::read_write}}, 10, {}});
  }
  const double bus = 2.0 * MiB / 10e-9;
  EXPECT_NEAR(lower_bound_split(w, 2, 2 * MiB, bus).per_iteration_s, n * 10e-6, 1e-9);
  EXPECT_NEAR(window_bound_s(w, 2, 2 * MiB, bus), n * 10e-6, 1e-9);
}

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

// tvmm-bench computes the bounds once per ratio and hands them to every policy's run there
// (RunOptions::reference): a run reports the bounds it is given, and computes the same ones itself
// without them.
TEST(Workloads, ARunReportsTheBoundsItIsGivenAndComputesThemWithoutThem) {
  const Workload w = write_then_read();
  RunOptions o;
  o.iterations = 4;
  const auto b = budgets_for(w, o, 2.0);
  const Reference computed = reference(w, o, b);
  const auto own = run_pager(w, o, "lru", 2.0);
  EXPECT_DOUBLE_EQ(own.lower_bound_s, computed.lower_bound_s);
  EXPECT_DOUBLE_EQ(own.window_bound_s, computed.window_bound_s);
  EXPECT_DOUBLE_EQ(own.belady_bytes, computed.belady_bytes);
  Reference given = computed;
  given.lower_bound_s = 123.0;
  given.belady_bytes = 7.0;
  o.reference = &given;
  const auto r = run_pager(w, o, "lru", 2.0);
  EXPECT_DOUBLE_EQ(r.lower_bound_s, 123.0);
  EXPECT_DOUBLE_EQ(r.time_vs_lower_bound, r.step_time_s / 123.0);
  EXPECT_DOUBLE_EQ(r.belady_bytes, 7.0);
  EXPECT_DOUBLE_EQ(r.step_time_s, own.step_time_s) << "the run itself is the same";
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

// A run whose host tier and simulated device could take more of this machine's memory than it has free
// is refused with what to change, before anything is allocated: the kernel's out-of-memory killer once
// ended such a run (a trace in 1 GiB pages) without a word. The same workload in 2 MiB pages runs.
TEST(Workloads, ARunThatCouldTakeMoreMemoryThanTheMachineHasIsRefused) {
  const std::size_t available = available_memory();
  ASSERT_GT(available, 0u);
  const std::size_t gib = std::size_t{1} << 30;
  const Workload w = make_scan(available / gib + 8, 1 * MiB, 10);  // each 1 MiB tensor takes a whole page
  RunOptions o;
  o.page_bytes = gib;
  try {
    (void)budgets_for(w, o, 2.0);
    ADD_FAILURE() << "a run needing more than " << available << " bytes was not refused";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("host-tier pages would take up to"), std::string::npos) << what;
    EXPECT_NE(what.find("--page-mib"), std::string::npos) << what;
  }
  o.page_bytes = 2 * MiB;
  EXPECT_NO_THROW((void)budgets_for(w, o, 2.0));
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

// With the simulator's modelled drive (RunOptions::disk_costs), the pages the device and the host tier
// cannot hold come from NVMe, each read after the write of what its last reference wrote, one I/O
// after another. Twelve one-page tensors read and written in turn by 10 us kernels, 3 device frames and
// 4 host pages: every iteration touches 12 pages with at most 7 held, so at least 5 are read from NVMe
// (at most all 12), each written since it was last read: 4.6-11 ms at 6.5 GB/s read and 3.5 GB/s
// write, where the compute is 0.12 ms and the bus moves a page in 84 us. No policy beats it, and without
// the modelled drive the term is 0.
TEST(Workloads, TheLowerBoundCountsTheLeastDriveTimeWithAModelledDrive) {
  Workload w;
  w.name = "cyclic";
  w.tensor_bytes.assign(12, 2 * MiB);
  for (std::uint32_t t = 0; t < 12; ++t) w.step.push_back({{{t, Access::read_write}}, 10, {}});
  RunOptions o;
  o.iterations = 4;
  o.warmup = 2;
  o.host_fraction = 1;
  o.disk_costs = true;
  o.disk_dir = ::testing::TempDir();
  const auto b = budgets_for(w, o, 4.0);
  ASSERT_EQ(b.frames, 3u);
  ASSERT_EQ(b.host_pages, 4u);
  ASSERT_GT(b.nvme_pages, 0u);
  const double io = 2.0 * MiB / modelled_disk().read_bytes_per_s + 2.0 * MiB / modelled_disk().write_bytes_per_s;
  const auto ref = reference(w, o, b);
  EXPECT_GE(ref.lower_bound_terms.disk_s, 5 * io * (1 - 1e-6));
  EXPECT_LE(ref.lower_bound_terms.disk_s, 12 * io * (1 + 1e-9));
  EXPECT_DOUBLE_EQ(ref.lower_bound_s, ref.lower_bound_terms.disk_s);
  RunOptions free_disk = o;
  free_disk.disk_costs = false;
  EXPECT_EQ(reference(w, free_disk, b).lower_bound_terms.disk_s, 0.0);
  for (const char* policy : {"lru", "trace"}) {
    const auto r = run_pager(w, o, policy, 4.0);
    EXPECT_GT(r.disk_read_bytes, 0.0) << policy;
    EXPECT_EQ(r.disk_costs, "modelled") << policy;
    EXPECT_GE(r.step_time_s, r.lower_bound_s * (1 - 1e-6)) << policy;
    EXPECT_GE(r.step_time_s, r.disk_read_bytes / modelled_disk().read_bytes_per_s * (1 - 1e-6)) << policy;
    EXPECT_DOUBLE_EQ(r.disk_busy_s, r.disk_read_bytes / modelled_disk().read_bytes_per_s +
                                        r.disk_write_bytes / modelled_disk().write_bytes_per_s)
        << policy;
    EXPECT_GE(r.disk_busy_s, ref.lower_bound_terms.disk_s * (1 - 1e-6)) << policy;
  }
  const auto r = run_pager(w, free_disk, "lru", 4.0);
  EXPECT_GT(r.disk_read_bytes, 0.0);
  EXPECT_EQ(r.disk_busy_s, 0.0) << "a drive that costs nothing is never busy";
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

}  // namespace
}  // namespace tvmm::bench
