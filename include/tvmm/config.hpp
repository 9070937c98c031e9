#pragma once
//! @file config.hpp
//! `tvmm::Config`: backend choice, page size and per-tier byte budgets for a `tvmm::Pager`.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tvmm/export.h"

namespace tvmm {

//! One mebibyte, for readable budgets: `64 * tvmm::MiB`.
inline constexpr std::size_t KiB = std::size_t{1} << 10;
//! One mebibyte.
inline constexpr std::size_t MiB = std::size_t{1} << 20;
//! One gibibyte.
inline constexpr std::size_t GiB = std::size_t{1} << 30;
//! One tebibyte.
inline constexpr std::size_t TiB = std::size_t{1} << 40;

//! Settings of the simulated GPU (`device_backend = "sim"`).
struct SimDeviceConfig {
  //! Physical memory of the simulated GPU in bytes: a hard limit, like a real card's.
  //! 0 = exactly the device budget (rounded up to the granularity).
  std::size_t capacity = 0;
  //! Mapping granularity in bytes (a real GPU reports 2 MiB). Must be a power of two and a multiple
  //! of the host page size.
  std::size_t granularity = 2 * MiB;
  //! Copy-engine bandwidth in bytes per second per direction; 0 = unthrottled (host memcpy speed).
  double bandwidth_bytes_per_s = 0.0;
  //! Fixed cost added to every copy, modelling a bus transaction's latency.
  std::chrono::nanoseconds copy_latency{0};
  //! How device time (StreamTimer) treats the host: "wall" = work a host thread does between waits
  //! for the device takes its wall-clock time, as on a real GPU; "model" = host work takes no time, so
  //! device time is the model's alone (copies on the modelled bus, busy kernels): benchmarks compare
  //! policies this way, free of the machine's memcpy speed and scheduling noise. Either way the
  //! simulation's own lateness (threads woken late, copies slower than the modelled bus) never counts.
  std::string timing = "wall";
  //! Host-side time of the VMM calls (and of the stream, event and launch calls below), spent by the
  //! calling thread: with timing "model" its host time advances by the cost (work it queues afterwards
  //! starts that much later), with "wall" it sleeps (spins, for a cost under 50 us: a sleep overshoots
  //! by more).
  //! A real driver takes 1 to 30 microseconds per mapping for each of cuMemMap / cuMemSetAccess /
  //! cuMemUnmap (the time grows with the number of separately created allocations the range covers,
  //! not with a call's count); a remap's three calls together cost about as long as copying the page
  //! (docs/benchmarks.md, "VMM call costs"; docs/gpu.md). All 0 = free, the default (unit tests);
  //! VmmCosts::measured_h200() and VmmCosts::published() give figures.
  struct VmmCosts {
    std::chrono::nanoseconds map{0};         //!< per cuMemMap call (it maps one allocation)
    std::chrono::nanoseconds set_access{0};  //!< per mapping a cuMemSetAccess range covers
    std::chrono::nanoseconds unmap{0};       //!< per mapping a cuMemUnmap range covers
    std::chrono::nanoseconds create{0};      //!< per granule of a cuMemCreate
    //! While device-to-host copies run, each mapping a cuMemSetAccess covers also waits for them, up to
    //! this much. An H200 does so (docs/gpu.md, "Access grants wait for device-to-host copies"): a grant
    //! right after 8 queued 2 MiB copies returned when they had all completed (0.31 ms), one during a
    //! steady stream of them took 0.39-0.43 ms, and copies the other way or a running kernel did not
    //! slow it. The simulator counts the copies the thread's host time has not yet passed, as if each
    //! ran at its queueing time or right after the one queued before it.
    std::chrono::nanoseconds set_access_d2h_wait{0};
    //! The stream and event calls a pager makes per transfer, each per call: cuEventRecord,
    //! cuEventQuery, cuStreamWaitEvent, and queueing an asynchronous copy (cuMemcpyAsync and kin).
    //! On an H200 these were a third of the driver time paging added to a replayed GPT-2 step, and on
    //! an H100, once remaps were rare, event records and queries two thirds of it (docs/gpu.md, "Where
    //! the replay's host time goes" and "The third run").
    std::chrono::nanoseconds event_record{0};
    std::chrono::nanoseconds event_query{0};
    std::chrono::nanoseconds stream_wait{0};
    std::chrono::nanoseconds copy_call{0};
    //! Per kernel launch (cuLaunchKernel, cuLaunchHostFunc; on the simulator launch_busy and
    //! launch_host), spent by the calling thread. The program pays it, not the pager, but where kernels
    //! are short it decides whether the host or the device sets the step's pace: on an H100 and an H200
    //! every replayed model trace was bound by the host, all in device memory too (docs/gpu.md, "The
    //! fourth run"), so the pager's own driver calls add to the step instead of hiding behind kernels.
    std::chrono::nanoseconds launch{0};
    //! The A100 figures of published measurements (issue 23 cites kvcached's): map 20 us,
    //! set_access 30 us, unmap 30 us, create 200 us per 2 MiB granule; the stream, event and launch
    //! calls free (those measurements do not give them).
    [[nodiscard]] static VmmCosts published() noexcept {
      using std::chrono::microseconds;
      VmmCosts c;
      c.map = microseconds(20);
      c.set_access = microseconds(30);
      c.unmap = microseconds(30);
      c.create = microseconds(200);
      return c;
    }
    //! Measured on an NVIDIA H200 with driver 580.159.04 (`tvmm-bench --device cuda --workload vmm`,
    //! 2026-11-26, docs/gpu.md), and what tvmm-bench uses (--vmm-costs on): map 1.1 us, set_access
    //! 22.8 us, unmap 14.4 us per 2 MiB mapping, create 8.7 us per 2 MiB granule; a grant waits up to
    //! 400 us per mapping for device-to-host copies; an event record 1.6 us, a query 0.63 us, a stream
    //! wait 0.78 us, queueing a copy 3.4 us and a kernel launch 4.6 us (the same H200's replay of
    //! GPT-2: driver time over calls, docs/gpu.md, "Where the replay's host time goes").
    [[nodiscard]] static VmmCosts measured_h200() noexcept {
      using std::chrono::nanoseconds;
      VmmCosts c;
      c.map = nanoseconds(1100);
      c.set_access = nanoseconds(22800);
      c.unmap = nanoseconds(14400);
      c.create = nanoseconds(8700);
      c.set_access_d2h_wait = nanoseconds(400000);
      c.event_record = nanoseconds(1600);
      c.event_query = nanoseconds(630);
      c.stream_wait = nanoseconds(780);
      c.copy_call = nanoseconds(3400);
      c.launch = nanoseconds(4600);
      return c;
    }
  };
  VmmCosts vmm_costs;
  //! The machine's NVMe drive, as the modelled clock sees it (timing "model" only: with "wall" the real
  //! drive takes its real time and nothing is added). Every read and write of the NVMe tier occupies
  //! one modelled drive, one after another in the order they end (none before it was submitted), for
  //! its bytes over the direction's speed; the thread that runs the batch learns of each completion no earlier than its
  //! modelled end, so a page read from NVMe reaches the device that much later. Both 0 = disk I/O
  //! takes no modelled time (the default, and what "model" timing did before 2026-11-30).
  struct Disk {
    double read_bytes_per_s = 0;   //!< sequential read speed, bytes per second (0 = free)
    double write_bytes_per_s = 0;  //!< sequential write speed, bytes per second (0 = free)
    //! A PCIe 4.0 data-centre drive, Samsung's PM9A3 (U.2): 6.5 GB/s sequential read, 3.5 GB/s
    //! sequential write (Samsung's figures at its launch, 2020). The tier's I/Os are mostly whole pages
    //! of 2 MiB or more, kept 32 deep, so the sequential figures apply; a tensor's small last page is
    //! charged its bytes only (no per-request cost); one drive, however many paths.
    [[nodiscard]] static Disk pcie4_nvme() noexcept { return Disk{6.5e9, 3.5e9}; }
  };
  Disk disk;
  //! The PCI bus id the simulated GPU claims ("0000:65:00.0"), so that `host_numa = "auto"` places the
  //! host tier on the node the topology shows it on. "" = none (auto then picks the lowest node).
  std::string pci_bus_id;
};

//! Settings of the NVMe tier: page slots in pre-allocated files below the host tier. Off unless
//! `budget` is set. See docs/architecture.md ("NVMe tier") for its failure semantics.
struct NvmeConfig {
  //! Directories for the tier's files, one per drive: slots are striped across them. The files are
  //! created with O_TMPFILE (or created and unlinked at once), so nothing of tvmm's stays visible.
  std::vector<std::string> paths;
  //! Bytes of storage for pages (rounded down to whole pages), reserved with fallocate at start so a
  //! full disk is reported then. 0 = no NVMe tier.
  std::size_t budget = 0;
  //! Storage backend: "auto" (io_uring, or "posix" when io_uring is unavailable), "uring" or "posix".
  std::string backend = "auto";
  //! Requests in flight at once, and the most pages moved to or from the tier in one batch.
  unsigned queue_depth = 32;
  //! Open the files with O_DIRECT (bypass the page cache). Turn off only for filesystems without it.
  bool direct = true;
  //! While an access trace replays (trace prefetch, or an eviction policy that reads the trace), read
  //! the NVMe pages of the next pins into the host tier ahead of them, one read in flight, without
  //! waiting for it: the drive works while the program goes on (docs/architecture.md, "NVMe tier").
  bool read_ahead = true;
};

//! Configuration of a `tvmm::Pager`. Defaults suit a small simulated run; `validate()` is called by
//! the Pager constructor and throws `tvmm::config_error` naming the bad field and a fix.
struct TVMM_API Config {
  //! Device backend: "sim" (simulated GPU; works everywhere) or "cuda" (an NVIDIA GPU through the
  //! driver, loaded at run time: without a driver the Pager constructor throws tvmm::device_error).
  std::string device_backend = "sim";
  //! Which GPU the "cuda" backend uses, as the driver numbers them; -1 ("auto") = the device of the
  //! calling thread's current context (as torch.cuda.set_device or cudaSetDevice left it), else 0.
  int cuda_device = -1;
  //! Ask the "cuda" backend for device memory that GPUDirect RDMA can reach (NICs and storage reading
  //! GPU memory directly): cuMemCreate's gpuDirectRDMACapable flag. Needs a device with
  //! CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (the Pager constructor throws
  //! tvmm::device_error otherwise). Off by default: tvmm itself moves pages with copies.
  bool gpu_direct_rdma = false;
  //! The "cuda" backend: the speed a device-to-host copy reaches over the GPU's link to the host, in
  //! bytes per second, by which write-behind judges whether that bus is idle (its copies wait while
  //! the write-backs queued before them keep it busy). 0 = the PCIe link's, as Linux's sysfs gives
  //! it (max_link_speed and max_link_width of the GPU and the bridges above it, x 0.82); where sysfs
  //! gives none, write-behind cannot tell and copies without waiting. Set it for a link sysfs does
  //! not describe (NVLink-C2C, a virtual machine's bus).
  double bus_bytes_per_s = 0;
  //! Page size in bytes, the unit of residency. 0 = the backend's granularity. Otherwise a multiple
  //! of the granularity (larger pages amortise the fixed per-page driver cost).
  std::size_t page_size = 0;
  //! Bytes of device memory the pager may use for pages, rounded down to whole pages. Less than one
  //! page is a tvmm::config_error (a budget is a limit: it is never rounded up).
  std::size_t device_budget = 256 * MiB;
  //! Bytes of host memory the pager may use for evicted pages, rounded down to whole pages; less than
  //! one page (two with an NVMe tier) is a tvmm::config_error.
  std::size_t host_budget = 1 * GiB;
  //! NUMA placement of the host tier's frames: "auto" (the node nearest the GPU, from its PCI bus id;
  //! the lowest node if unknown), "none" (the kernel's default policy), "interleave" (across all
  //! nodes) or a node id ("1"). The frames are bound before anything touches or pins them; if binding
  //! fails the pager warns once on stderr and goes on unbound. See docs/architecture.md.
  std::string host_numa = "auto";
  //! True: the frames may only come from the chosen node(s) (MPOL_BIND; allocation fails when they
  //! are full). False: the node is preferred and others are used when it is full (MPOL_PREFERRED).
  bool host_numa_strict = false;
  //! Bind the copy-engine and I/O worker threads to the CPUs of the host tier's node.
  bool bind_threads = true;
  //! Size of the device virtual-address reservation. Allocations are carved out of it, so it bounds
  //! the total size of live tensors. 0 = auto: 4 x (device_budget + host_budget) + nvme.budget, at
  //! least 1 GiB (every page the tiers hold can be allocated, with room for fragmentation). The page
  //! table takes 64 bytes of host memory per page of it, at start; a reservation whose table would take
  //! more than a quarter of the machine's memory, or that the device refuses, is a tvmm::config_error.
  std::size_t va_size = 0;
  //! Admission threshold: allocations smaller than this are never evicted (pinned for life); those
  //! that fit in a page share pages of a resident small-object arena instead of each taking a page.
  //! 0 = every allocation is evictable.
  std::size_t min_bytes = 1 * MiB;
  //! Second admission threshold, for the NVMe tier: allocations smaller than this never go to NVMe
  //! (they live on the device or the host tier), so small, latency-sensitive tensors never wait for a
  //! drive. Together they must fit in the host tier less two pages. 0 = any allocation may go to NVMe.
  std::size_t nvme_min_bytes = 0;
  //! Eviction policy: one of the registered policies (docs/configuration.md, `policy.eviction.name`,
  //! lists them), e.g. "lru" (least recently used), "fifo", "clock" (second chance), "lfu" (least
  //! frequently used) or "belady" (farthest next use in the recorded trace, weighed by the bytes each
  //! page moves; for studies). Checked when the Pager is built.
  std::string eviction = "lru";
  //! With `eviction = "belady"`: pages of tensors pinned in the last `keep_recent` pins are evicted
  //! only when no other page can be. A stream's pins run ahead of its kernels, so such a page's
  //! write-back waits for the kernel that just used it, and the page-in that needs its frame waits
  //! behind: evicting older pages instead lets both copies overlap the kernels in between, at the cost
  //! of sometimes not taking the farthest next use. 0 = farthest next use, except that the tensors of
  //! the latest stream release are deferred for another of the farthest candidates (within a window)
  //! when both are not needed again in this iteration (docs/architecture.md, "Access trace, trace
  //! prefetch and Belady").
  std::size_t keep_recent = 0;
  //! Write-behind (on by default), while the access trace replays (`eviction = "belady"` or
  //! `prefetch = "trace"`): a write whose data earlier iterations evicted before the tensor's next
  //! write is copied to the host tier as soon as its kernel is done, on a copy stream of its own, while
  //! the page stays resident; the eviction that follows then moves nothing. Only the tensor's pages
  //! that left the device since their last copy are copied. It moves write-backs from where fresh data
  //! waits for frames (a forward pass) to where the device-to-host bus is idle (a backward pass). It
  //! takes host slots only while a quarter of the tier is free, and none in an iteration in which the
  //! host tier filled up or the one after it (a full tier takes copies back before their evictions). A
  //! copy waits while copies already queued keep the device-to-host bus busy, where the device backend
  //! can tell (the simulator with a throttled bus; the CUDA backend at `bus_bytes_per_s` or the PCIe
  //! link's speed). With the host tier holding everything the device evicts it took 0.95-0.96 of the
  //! step time on the model traces; off, the same eviction moves no byte early (docs/architecture.md
  //! and docs/benchmarks.md, "Write-behind").
  bool write_behind = true;
  //! Prefetch policy: "none" (only explicit Tensor::prefetch); "trace": record the pins of one
  //! iteration (between the first two Pager::mark_iteration calls), then in later iterations start the
  //! page-ins of the tensors `prefetch_distance` pins ahead (a pin that differs from the trace drops it
  //! and the next iteration is recorded again); or "sequential": after each pin, start the page-ins of
  //! the next `prefetch_distance` pages of the same tensor that are on the host tier (for tensors
  //! pinned a range at a time, front to back). Prefetch never waits and never evicts pinned pages.
  std::string prefetch = "none";
  //! How far ahead prefetch runs: pins (trace) or pages (sequential); 0 = the mode's default, 1 pin
  //! for trace prefetch and 4 pages for sequential (docs/configuration.md, policy.prefetch.distance,
  //! says why 1 pin).
  std::size_t prefetch_distance = 0;
  //! How long a pin may wait for other threads to unpin pages before failing with
  //! `tvmm::out_of_memory`: a pinned working set that never fits is an error, never a hang.
  std::chrono::milliseconds wait_timeout{30'000};
  //! Stats output: when the Pager is destroyed, its final Stats are written here as one JSON object
  //! (tvmm::to_json). "" = none; "-" = standard error. Opened when the Pager is built.
  std::string stats_file;
  //! Pin log (pin_log.file): every pin and iteration mark as a line of JSON (docs/configuration.md has
  //! the format), for studying policies offline. "" = none; "-" = standard error. Opened when the Pager
  //! is built. (Named trace_file before 0.2.)
  std::string pin_log_file;
  //! Timeline (timeline.file, TVMM_TIMELINE): what the pager did and when (page moves per copy engine,
  //! NVMe I/O, pins per stream, pin stalls per thread, evictions), as Chrome trace-event JSON for
  //! Perfetto, written when the Pager is destroyed. "" = none; "-" = standard error. Opened when the
  //! Pager is built. (Named trace_events before 0.2.)
  std::string timeline_file;
  //! Transparent mode's memory (the LD_PRELOAD interposer, tvmm_malloc): "vmm" (pages mapped on device
  //! frames or host-located VMM chunks, remapped at quiescent points), "um" (managed memory placed with
  //! advice and prefetches) or "auto" (vmm where the device has host-located VMM memory, else um).
  std::string transparent_memory = "auto";
  //! Which of transparent mode's pages stay on the device: "use" (those that recent kernel launches,
  //! copies and memsets named most in their arguments, rebalanced at the program's synchronising calls)
  //! or "allocation" (the newest allocations; launches are not read).
  std::string transparent_placement = "use";
  //! Settings of the simulated GPU.
  SimDeviceConfig sim;
  //! Settings of the NVMe tier (off by default).
  NvmeConfig nvme;

  //! Checks the fields that do not depend on the backend; throws `tvmm::config_error`.
  void validate() const;
};

//! Formats a byte count for people: "512 MiB", "1.5 GiB", "300 B".
[[nodiscard]] TVMM_API std::string format_bytes(std::size_t bytes);

//! Parses a size: a number of bytes ("4096") or a number with a unit ("512MiB", "2 GiB", "1.5GiB",
//! "64KiB"; KiB/MiB/GiB/TiB = powers of 1024, KB/MB/GB/TB = powers of 1000, B = bytes). Throws
//! `tvmm::config_error` saying what was expected.
[[nodiscard]] TVMM_API std::size_t parse_size(std::string_view text);

//! Reads a TOML policy file (see docs/configuration.md), then applies the `TVMM_<SECTION>_<KEY>`
//! environment overrides. Unknown keys and bad values throw `tvmm::config_error` with file:line:column,
//! the key, what was expected and, for a misspelt key, the closest valid one.
[[nodiscard]] TVMM_API Config load_config(const std::string& path);

//! The text of a policy file, for parse_config: throws `tvmm::config_error` naming the path if it
//! cannot be opened or read, or names a directory.
[[nodiscard]] TVMM_API std::string read_config_file(const std::string& path);

//! Parses TOML text into a Config (defaults for absent keys); `source` names it in error messages.
//! Does not read the environment.
[[nodiscard]] TVMM_API Config parse_config(std::string_view toml, std::string_view source = "<string>");

//! Applies every set `TVMM_<SECTION>_<KEY>` environment variable to `config` (e.g. TVMM_DEVICE_BUDGET,
//! TVMM_DEVICE_SIM_BANDWIDTH_GBS, TVMM_POLICY_EVICTION_NAME) and returns the names applied; throws
//! `tvmm::config_error` naming the variable for a bad value.
TVMM_API std::vector<std::string> apply_environment(Config& config);

//! The configuration as TOML, every key present: what `tvmm check-config` prints.
[[nodiscard]] TVMM_API std::string to_toml(const Config& config);

}  // namespace tvmm
