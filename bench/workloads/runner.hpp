#pragma once
// Runs a Workload through a tvmm pager: one of tvmm's policies, or naive synchronous swapping (the
// same pager with no overlap and no prefetch), with Belady's bytes and the ideal bound for the same
// trace and budget.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/workloads/workload.hpp"
#include "tvmm/config.hpp"

namespace tvmm::bench {

//! The driver-call costs the simulator charges with RunOptions::vmm_costs (--vmm-costs on): those
//! measured on an H200 (SimDeviceConfig::VmmCosts::measured_h200()).
[[nodiscard]] inline SimDeviceConfig::VmmCosts modelled_vmm_costs() noexcept {
  return SimDeviceConfig::VmmCosts::measured_h200();
}

//! modelled_vmm_costs() with the mapping calls free (cuMemMap, cuMemSetAccess and its wait for
//! device-to-host copies, cuMemUnmap, cuMemCreate): the stream, event and launch calls still cost what
//! they cost. A run with these against one with modelled_vmm_costs() isolates what the mapping calls
//! add to a step, which issue 23 asks the pager to hide; turning every cost off (--vmm-costs off) also
//! removes the program's own launches, which no pager can hide (--vmm-costs mapping-free).
[[nodiscard]] inline SimDeviceConfig::VmmCosts modelled_costs_mapping_free() noexcept {
  auto c = modelled_vmm_costs();
  c.map = c.set_access = c.unmap = c.create = c.set_access_d2h_wait = std::chrono::nanoseconds{0};
  return c;
}

//! The NVMe drive the simulator's model clock charges with RunOptions::disk_costs (--disk-costs on): a
//! PCIe 4.0 data-centre drive (SimDeviceConfig::Disk::pcie4_nvme()).
[[nodiscard]] inline SimDeviceConfig::Disk modelled_disk() noexcept { return SimDeviceConfig::Disk::pcie4_nvme(); }

struct Reference;

struct RunOptions {
  std::size_t page_bytes = 2 * MiB;
  int iterations = 6;
  int warmup = 2;  // the recorded iteration and the first replay are not measured
  double bus_gbs = 25.0;
  double latency_us = 5.0;
  std::size_t distance = 1;     // trace prefetch distance, in pins
  std::size_t keep_recent = 0;  // the trace policy's next-use eviction spares the last N pins' tensors
  //! Host tier = this x the device budget; 0 = room for the whole workload. When device + host cannot
  //! hold the workload, the rest goes to an NVMe tier in `disk_dir`.
  double host_fraction = 0;
  std::string disk_dir = "/var/tmp";
  //! The simulator's clock: "model" (host work takes no device time: the schedule the pager produces,
  //! free of this host's noise; disk I/O takes a modelled drive's time with disk_costs, none without)
  //! or "wall" (host work, NVMe I/O on this machine's disk included, delays what it enqueues, as on a
  //! real GPU).
  std::string timing = "model";
  //! The simulator charges each VMM call the host time of modelled_vmm_costs() (false: the calls are
  //! free, as in unit tests).
  bool vmm_costs = false;
  //! With vmm_costs: charge modelled_costs_mapping_free() instead (the mapping calls free).
  bool mapping_calls_free = false;
  //! With timing "model", the simulator's clock charges NVMe reads and writes the time of
  //! modelled_disk(); false: disk I/O takes no modelled time. With "wall"
  //! (or a GPU) the real drive takes its real time either way.
  bool disk_costs = false;
  //! A frame for every page of every tensor, whatever the ratio: nothing is ever evicted or mapped
  //! again (the all-in-memory peer: the program run with enough memory).
  bool whole_workload = false;
  //! The host waits for each kernel before the next kernel's pins (a stream synchronize after each), as
  //! a program that reads results between kernels does: demand page-ins cannot run ahead of the
  //! device, and only prefetch overlaps them with compute. False: the host queues pins and kernels as
  //! far ahead as the pager lets it.
  bool sync_kernels = false;
  //! The pager's Config::write_behind (for every policy whose run replays the access trace).
  bool write_behind = true;
  //! The pager's NvmeConfig::read_ahead (for every policy whose run replays the access trace).
  bool nvme_read_ahead = true;
  std::string device = "sim";  // "cuda": the real GPU, busy kernels instead of modelled ones
  bool verify = false;         // write and check every tensor's bytes (always on with --device cuda)
  std::string pin_log;         // the pager's pin_log.file (tests read the pins it saw)
  std::string timeline;        // the pager's timeline.file (Perfetto)
  std::string stats_file;      // the pager's stats.file (its final stats as JSON)
  std::string progress;        // when set, a progress line on stderr starting with this label
  //! reference(w, *this, budgets_for(w, *this, ratio)), already computed by the caller for exactly these
  //! options and ratio (tvmm-bench: once per ratio, for every policy's run there); null: run_pager
  //! computes it. Not owned.
  const Reference* reference = nullptr;
};

//! The device and host budgets of a run: whole pages.
struct Budgets {
  std::size_t total_pages = 0;    // the workload's tensors, in pages
  std::size_t working_pages = 0;  // the most pages live at once (Workload::peak_live): what `ratio` divides
  std::size_t frames = 0;         // device pages
  std::size_t host_pages = 0;     // host-tier pages
  std::size_t nvme_pages = 0;     // 0 = no NVMe tier
  std::size_t kernel_pages = 0;   // most pages one kernel pins at once
};
//! Throws std::invalid_argument, saying why, where the largest kernel's operands do not fit the device at
//! `ratio`, or where the host tier (and on the simulator the device's memory) could take more of this
//! machine's memory than available_memory() says is free.
[[nodiscard]] Budgets budgets_for(const Workload& w, const RunOptions& o, double ratio);
//! The memory this machine can give a new run: MemAvailable (proc(5)), else its physical memory; 0 if
//! neither is known.
[[nodiscard]] std::size_t available_memory() noexcept;

struct RunResult {
  std::string policy;  // lru, fifo, clock, trace, belady, naive
  double ratio = 0;
  double step_time_s = 0;        // device time (on the simulator, its model)
  std::string vmm_costs;         // "modelled", "mapping-free" or "free" (the simulator), "real" (--device cuda)
  std::string disk_costs;        // "modelled" or "free" (the simulator's model clock), "real" (wall timing, a GPU)
  std::string host;              // "ahead" or "synchronous" (RunOptions::sync_kernels)
  bool write_behind = false;     // RunOptions::write_behind
  bool nvme_read_ahead = false;  // RunOptions::nvme_read_ahead
  int warmup = 0;                // iterations run before the measured ones (RunOptions::warmup)
  int measured = 0;              // iterations measured: the figures below are their mean
  double wall_step_time_s = 0;   // wall clock, host and NVMe I/O included
  double bytes_moved = 0;        // host<->device, per iteration: bytes_in + bytes_out
  double bytes_in = 0;           // host to device (page-ins), per iteration
  double bytes_out = 0;          // device to host (write-backs and write-behind copies), per iteration
  double bus_bytes_per_s = 0;    // the modelled bus, each direction (RunOptions::bus_gbs)
  double disk_read_bytes = 0;    // from the NVMe tier, per iteration
  double disk_write_bytes = 0;   // to the NVMe tier, per iteration
  //! The modelled drive's busy time per iteration (disk_costs "modelled"; 0 otherwise): disk_read_bytes
  //! over its read speed plus disk_write_bytes over its write speed. Never below the lower bound's
  //! disk_s; a step well above it had the drive idle while the device or the host worked.
  double disk_busy_s = 0;
  double belady_bytes = 0;
  double compute_s = 0;
  double bound_s = 0;         // max(compute, Belady's busier direction / bus)
  double window_bound_s = 0;  // the bound with the device's capacity: see window_bound_s()
  double lower_bound_s = 0;   // the lower bound with write-backs too: see Reference::lower_bound_s
  double bytes_vs_belady = 0;
  double time_vs_bound = 0;
  double time_vs_window_bound = 0;
  double time_vs_lower_bound = 0;
  std::uint64_t misses = 0, evictions = 0, prefetched = 0;
  std::uint64_t written_behind = 0;  // pages copied to the host while resident (Stats::written_behind)
  std::uint64_t kept_mappings = 0;   // page-ins into the frame the page's address was still mapped to
  double remap_s = 0;                // host seconds per iteration in the other page-ins' unmap, map and access calls
  struct DriverRow {
    const char* call = "";  // a DriverTimes kind: "map", "set_access", ...
    double calls = 0;       // per iteration
    double seconds = 0;     // host time inside them, per iteration
  };
  std::vector<DriverRow> driver;  // the device backend's calls by kind (Stats::driver), per measured iteration
  std::uint64_t verified_bytes = 0, mismatched_bytes = 0;
};

//! Per kernel of the last measured iteration, the fraction of each tensor's pages on the device
//! after the kernel's pins were released: [kernel][tensor].
using Residency = std::vector<std::vector<float>>;

//! Runs `w` with `policy` at `ratio` (tensor bytes / device budget). Throws tvmm::error from the
//! pager, std::invalid_argument when one kernel's tensors cannot fit the device at this ratio.
RunResult run_pager(const Workload& w, const RunOptions& o, const std::string& policy, double ratio,
                    Residency* residency = nullptr);

//! One run of kernels in the window program's best split (lower_bound_split): kernels [first, first +
//! kernels) of the iterations it spans (kernel k is step[k % step.size()] of iteration k / step.size()),
//! its compute, and the least time the bus needs in it to load what it reads beyond what the device
//! holds (in_s) and to write back what it produces beyond that (out_s), each direction on its own;
//! launch_wait_s: how long its first kernel waits, after the kernel before it ends, for its own launch
//! (lower_bound_split's launch floors; 0 without them).
struct BoundRun {
  std::size_t first = 0, kernels = 0;
  double compute_s = 0, in_s = 0, out_s = 0;
  double launch_wait_s = 0;
};
//! The window program's best split: the bound per iteration and the runs, in order, over `iterations`.
struct BoundSplit {
  double per_iteration_s = 0;
  int iterations = 0;
  std::vector<BoundRun> runs;
};
//! How Reference::lower_bound_s comes about: it is the largest of compute_s, loads_s, window_s,
//! launches_s and disk_s. window_s is split by what binds each run of its best split: the run's page-ins beyond
//! what the device holds (window_in_s), its write-backs beyond that (window_out_s) or its compute, and
//! the time its first kernel waits for its launch (window_launch_wait_s); the four add up to window_s.
//! `runs`: the split's runs that the bus binds, over all its iterations.
struct LowerBoundTerms {
  double compute_s = 0;  //!< every kernel's time
  double loads_s = 0;    //!< the fewest bytes any pager loads (policies::min_load_bytes) / bus
  double window_s = 0;   //!< the two-direction window program with launch floors (lower_bound_split), per iteration
  double window_in_s = 0, window_out_s = 0, window_compute_s = 0, window_launch_wait_s = 0;
  std::vector<BoundRun> runs;
  //! The program's own kernel launches, one thread's host time: launches per iteration x the
  //! simulator's modelled cost of one (VmmCosts::launch); 0 on a GPU or with --vmm-costs off.
  double launches_s = 0;
  //! With the simulator's modelled drive (RunOptions::disk_costs, "model" timing, an NVMe tier): the
  //! least time the drive is busy, over any pager: the reads it must make with the device's and the
  //! host tier's pages together, and a write of a page's modified contents before the first of them
  //! (policies::min_interval_cost); 0 otherwise.
  double disk_s = 0;
};

//! What a run is measured against: Belady's bytes moved per iteration with the run's device frames
//! (with an NVMe tier, which keeps a copy of pages read back from it, pages not written since they
//! were loaded are dropped without a write-back; a tensor's partial last page moves the bytes the
//! tensor holds in it, as the pager's copies do), and the ideal bound: the longer of the compute and
//! the busier bus direction moving Belady's bytes (the two directions run at once).
//! `window_bound_s` tightens the bound with the device's capacity (window_bound_s(), below).
struct Reference {
  double belady_bytes = 0;
  double bound_s = 0;
  double window_bound_s = 0;  // max(bound_s, window_bound_s(...))
  //! A true lower bound on any pager's step time: max(compute, the fewest bytes any pager loads / bus,
  //! lower_bound_split(...), which counts the write-backs too and, with the simulator's call costs, each
  //! kernel's launch floor, the program's launches, with a modelled drive its least busy time)
  //! (docs/benchmarks.md, "The lower bound").
  double lower_bound_s = 0;
  LowerBoundTerms lower_bound_terms;  //!< its four figures, and the window program's split
};
[[nodiscard]] Reference reference(const Workload& w, const RunOptions& o, const Budgets& b);

//! A lower bound on any pager's time per iteration with `frames` device pages, a bus moving
//! `bus_bytes_per_s` per direction and the kernels run in order. For a run of kernels [i, j] let D be
//! the tensors whose contents they need (pinned there, the first pin in the run not Access::write, and
//! no discard before it made them dead), and bytes(D) their bytes. When kernel i may start, at most
//! `frames` pages are resident or on their way, holding at most frames x page of those bytes, so at
//! least bytes(D) - frames x page bytes are copied in before kernel j ends: the run takes at least
//! max(its compute, (bytes(D) - frames x page) / bus). Disjoint runs
//! take disjoint time, so a step takes at least the best split of the kernels into runs
//! (a dynamic program over `repeat` iterations, runs at most one iteration long, averaged).
//! Where every run's pages fit this is the compute; the ideal bound ignores capacity and can be far
//! below it. Ignores per-copy latency, as the ideal bound does.
[[nodiscard]] double window_bound_s(const Workload& w, std::size_t frames, std::size_t page_bytes,
                                    double bus_bytes_per_s, int repeat = 4);

//! window_bound_s with both directions of the bus: a lower bound on any pager's time per iteration that
//! counts the write-backs too. For a run of kernels [i, j] let D be as above, and W the tensors written
//! in the run (a pin that may write, not followed in the run by a discard) whose contents the program
//! reads again after the run (the tensor's next event after kernel j, in the steady state's cycle, is a
//! pin that reads). When kernel j ends, at most `frames` pages are resident or being written back, so
//! at least bytes(W) - frames x page bytes of W were copied out between their last write in the run and
//! its end. The two directions have a bus each and run at once: the run takes at least max(its compute,
//! (bytes(D) - frames x page) / bus, (bytes(W) - frames x page) / bus). The best split into disjoint runs, as
//! window_bound_s. It is never below window_bound_s, and above it where a phase produces more live data
//! than the device holds (activations a forward pass keeps for the backward pass).
[[nodiscard]] double lower_bound_s(const Workload& w, std::size_t frames, std::size_t page_bytes,
                                   double bus_bytes_per_s, int repeat = 4);
//! lower_bound_s with the best split it found (every run, in order). With `launch_floor_s` (one
//! figure per kernel of the step, launch_floors()), a kernel also cannot start before the host time,
//! from its iteration's start, at which its launch is made, and an iteration starts when the one
//! before it ends: f[j], the bound on the end of kernel j, is the largest over runs [i, j] of
//! max(f[i - 1], f[start of i's iteration] + floor(i)) + the run's figure above. Without floors (or
//! with floors of 0) this is lower_bound_s.
[[nodiscard]] BoundSplit lower_bound_split(const Workload& w, std::size_t frames, std::size_t page_bytes,
                                           double bus_bytes_per_s, int repeat = 4,
                                           std::span<const double> launch_floor_s = {});

//! The earliest host time, from an iteration's start, at which each kernel of the step can be queued
//! when one thread makes every launch in order, each taking `launch_s` of its host time after the
//! launch is queued: the launches before it times `launch_s`. With `verify`, run_pager's byte checks
//! come first (a verify per pin that reads, then a fill per pin that writes, each a launch).
[[nodiscard]] std::vector<double> launch_floors(const Workload& w, double launch_s, bool verify);

}  // namespace tvmm::bench
