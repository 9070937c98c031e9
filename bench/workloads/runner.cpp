#include "bench/workloads/runner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <unistd.h>

#include "common/physical_memory.hpp"
#include "kernels/pattern.hpp"
#include "policies/belady.hpp"
#include "vmm/api/make_pager.hpp"
#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#include "backends/device/device_memory.hpp"
#endif

namespace tvmm::bench {
namespace {

std::size_t pages_of(std::size_t bytes, std::size_t page) { return (bytes + page - 1) / page; }

// Writes and checks every tensor's bytes with the pattern kernels: each write pin fills a new seed,
// each read checks the tensor's last one. On the GPU the CUDA backend's fill and verify kernels run on
// the stream, counting into an 8-byte tensor kept resident (below the admission threshold); on the
// simulator the CPU kernels run as host callables.
class ByteCheck {
 public:
  virtual ~ByteCheck() = default;
  virtual void fill(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) = 0;
  virtual void verify(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) = 0;
  //! Waits for the stream; the bytes found different so far.
  virtual std::uint64_t mismatches(Stream& s) = 0;
};

class CpuCheck final : public ByteCheck {
 public:
  void fill(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    s.launch([p, bytes, seed] { kernels::fill_pattern(p, bytes, seed); });
  }
  void verify(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    s.launch([p, bytes, seed, bad = bad_] { *bad += kernels::count_mismatches(p, bytes, seed); });
  }
  std::uint64_t mismatches(Stream& s) override {
    s.synchronize();
    return bad_->load();
  }

 private:
  std::shared_ptr<std::atomic<std::uint64_t>> bad_ = std::make_shared<std::atomic<std::uint64_t>>(0);
};

#if defined(TVMM_HAVE_CUDA)
class GpuCheck final : public ByteCheck {
 public:
  // The mismatch counter lives in one granule of device memory of its own, outside the pager's budget,
  // so it is always mapped.
  GpuCheck(device::DeviceBackend& dev, Stream& s) : dev_(dev), memory_(dev) {
    const char* step = "";
    check(memory_.open(&step), (std::string("the counter's ") + step).c_str());
    counter_ = memory_.va();
    check(dev_.alloc_host(8, &host_), "alloc_host");
    std::memset(host_, 0, 8);
    check(dev_.memcpy_async(as_ptr(counter_), host_, 8, device::CopyKind::host_to_device, s.native_handle()),
          "zeroing the counter");
  }
  ~GpuCheck() override {
    if (host_ != nullptr) (void)dev_.free_host(host_, 8);
  }
  void fill(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    const auto st = dev_.fill(s.native_handle(), reinterpret_cast<device::DevPtr>(p), bytes, seed);
    if (st.code == device::Errc::not_supported) {
      throw device_error(
          "tvmm-bench --device cuda writes and checks tensors with tvmm's GPU kernels: " + dev_.kernels_unavailable(),
          "bench");
    }
    check(st, "the fill kernel");
  }
  void verify(Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    check(dev_.verify(s.native_handle(), reinterpret_cast<device::DevPtr>(p), bytes, seed, counter_),
          "the verify kernel");
  }
  std::uint64_t mismatches(Stream& s) override {
    check(dev_.memcpy_async(host_, as_ptr(counter_), 8, device::CopyKind::device_to_host, s.native_handle()),
          "reading the counter");
    s.synchronize();
    std::uint64_t v = 0;
    std::memcpy(&v, host_, 8);
    return v;
  }

 private:
  static void* as_ptr(device::DevPtr p) { return reinterpret_cast<void*>(p); }
  void check(device::Status st, const char* what) const {
    if (!st.ok()) throw device_error(std::string(what) + " failed: " + dev_.describe(st), "bench");
  }
  device::DeviceBackend& dev_;
  device::DeviceMemory memory_;
  device::DevPtr counter_ = 0;
  void* host_ = nullptr;
};
#endif

}  // namespace

Budgets budgets_for(const Workload& w, const RunOptions& o, double ratio) {
  Budgets b;
  for (auto bytes : w.tensor_bytes) b.total_pages += pages_of(bytes, o.page_bytes);
  for (const auto& k : w.step) {
    std::size_t pages = 0;
    for (const auto& p : k.pins) pages += pages_of(w.tensor_bytes[p.tensor], o.page_bytes);
    b.kernel_pages = std::max(b.kernel_pages, pages);
  }
  b.working_pages = w.peak_live(pages_of, o.page_bytes);
  b.frames = o.whole_workload ? b.total_pages
                              : static_cast<std::size_t>(std::floor(static_cast<double>(b.working_pages) / ratio));
  if (b.frames < b.kernel_pages) {
    // The highest oversubscription at which the largest kernel's operands still fit the device.
    const double most = static_cast<double>(b.working_pages) / static_cast<double>(b.kernel_pages);
    char at[96];
    std::snprintf(at, sizeof at, "%.2fx", ratio);
    char fits[160];
    std::snprintf(fits, sizeof fits, "it runs at %.2fx or less (--ratios %.2f)", std::floor(most * 100) / 100,
                  std::floor(most * 100) / 100);
    auto pages = [](std::size_t n) { return std::to_string(n) + (n == 1 ? " page" : " pages"); };
    throw std::invalid_argument("its largest kernel's operands need " + std::to_string(b.kernel_pages) + " device " +
                                (b.kernel_pages == 1 ? "page" : "pages") + " at once, but at " + at +
                                " the device holds " + std::to_string(b.frames) + " (of a working set of " +
                                pages(b.working_pages) + "); " + fits);
  }
  if (o.host_fraction <= 0) {
    b.host_pages = b.total_pages + 2;
  } else {
    b.host_pages =
        std::max<std::size_t>(4, static_cast<std::size_t>(std::floor(static_cast<double>(b.frames) * o.host_fraction)));
    // Every tensor stays allocated (a discarded one too): device and host must hold them all, or NVMe does.
    if (b.frames + b.host_pages < b.total_pages + 2) b.nvme_pages = b.total_pages + 2;
  }
  // The host tier (at most every page the workload has) and, on the simulator, the device's memory live in
  // this machine's memory. A run that cannot hold them there is refused before it starts: the kernel's
  // out-of-memory killer would end it without a word (a 234 MiB trace in 1 GiB pages asked for 148 GiB).
  const std::size_t host_held = std::min(b.host_pages, b.total_pages + 2);
  const std::size_t held_pages = host_held + (o.device == "cuda" ? 0 : b.frames);
  const std::size_t available = available_memory();
  if (available != 0 && held_pages > available / o.page_bytes) {
    char at[32];
    std::snprintf(at, sizeof at, "%.2fx", ratio);
    throw std::invalid_argument(
        "at " + std::string(at) + " in pages of " + format_bytes(o.page_bytes) + ", the " +
        (o.device == "cuda" ? std::string() : std::to_string(b.frames) + " simulated device pages and the ") +
        std::to_string(host_held) + " host-tier pages would take up to " + format_bytes(held_pages * o.page_bytes) +
        " of this machine's memory, which has " + format_bytes(available) + " available; use " +
        (o.page_bytes > 2 * MiB ? "smaller pages (--page-mib), " : "") +
        (o.host_fraction <= 0 ? "a host tier smaller than the working set (--host-fraction above 0, the rest on "
                                "NVMe in --disk-dir), "
                              : "a smaller --host-fraction, ") +
        "or a smaller workload");
  }
  return b;
}

std::size_t available_memory() noexcept {
  // MemAvailable: what can be allocated without swapping (proc(5)); else the physical memory.
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f) != nullptr)
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::size_t>(kib) * 1024;
  }
  return common::physical_memory();
}

Reference reference(const Workload& w, const RunOptions& o, const Budgets& b) {
  const auto page_bytes = o.page_bytes;
  const double bus = o.bus_gbs * 1e9;
  // The bytes a page of tensor t holds, which the pager's copies move: a page, or what is left of the
  // tensor in its last page.
  const auto used = [&](std::uint64_t t, std::uint32_t page) -> std::uint64_t {
    const std::uint64_t start = std::uint64_t{page} * page_bytes, bytes = w.tensor_bytes[t];
    return bytes > start ? std::min<std::uint64_t>(page_bytes, bytes - start) : 0;
  };
  std::vector<policies::TraceAccess> trace;
  for (const auto& k : w.step) {
    for (std::size_t i = 0; i < k.pins.size(); ++i) {
      const auto& p = k.pins[i];
      const auto bytes = w.tensor_bytes[p.tensor];
      // A kernel's tensors are pinned together: all of them must be resident at once.
      trace.push_back({p.tensor, static_cast<std::uint32_t>(pages_of(bytes, page_bytes)), p.access == Access::write,
                       i != 0, 0, p.access != Access::read});
    }
    for (const auto t : k.discards) {
      policies::TraceAccess release;
      release.tensor = t;
      release.pages = static_cast<std::uint32_t>(pages_of(w.tensor_bytes[t], page_bytes));
      release.release = true;
      trace.push_back(release);
    }
  }
  // Belady drops clean pages whatever the tiers: tvmm drops a page whose host or NVMe copy is current,
  // so an optimum that wrote every page back would not bound it.
  const auto frames = static_cast<std::uint32_t>(b.frames);
  const auto cost = policies::simulate_belady(trace, frames, 8, /*drop_clean=*/true, used);
  const double iterations = std::max(cost.iterations, 1);
  const double busier = static_cast<double>(std::max(cost.load_bytes, cost.write_back_bytes)) / iterations;
  Reference ref;
  ref.belady_bytes = static_cast<double>(cost.load_bytes + cost.write_back_bytes) / iterations;
  ref.bound_s = std::max(w.compute_us() * 1e-6, busier / bus);
  ref.window_bound_s = std::max(ref.bound_s, window_bound_s(w, b.frames, page_bytes, bus));
  // The fewest bytes any pager loads with these frames (prefetching changes when pages move, never
  // which loads must happen). Where every page holds a page of bytes that is Belady's count of page-ins;
  // a tensor's partial last page weighs less, which weighted paging's optimum (min_load_bytes) counts.
  // Belady's write-backs bound nothing (keeping dirty pages and dropping clean ones instead can write
  // back less), so only the window program counts those.
  const auto least = policies::min_load_bytes(trace, frames, 8, used);
  const double loads_s = static_cast<double>(least.load_bytes) / std::max(least.iterations, 1) / bus;
  // One thread makes every launch of an iteration, one after another, and a kernel cannot start before
  // its launch: the launches are run_pager's, a kernel per step entry, and with byte checks a verify
  // per pin that reads and a fill per pin that writes. Their host time is the simulator's modelled
  // cost (none on a GPU, whose launches the bound does not know, or with free calls).
  const double launch_s =
      o.device != "cuda" && o.vmm_costs ? std::chrono::duration<double>(modelled_vmm_costs().launch).count() : 0.0;
  const auto floors = launch_floors(w, launch_s, o.verify);
  // Floors of 0 (free launches) bound what no floors do: the program is unchanged.
  const BoundSplit split = lower_bound_split(w, b.frames, page_bytes, bus, 4, floors);
  LowerBoundTerms& terms = ref.lower_bound_terms;
  terms.compute_s = w.compute_us() * 1e-6;
  terms.loads_s = loads_s;
  terms.window_s = split.per_iteration_s;
  for (const BoundRun& r : split.runs) {
    const double binding = std::max({r.compute_s, r.in_s, r.out_s});
    double& term = binding == r.compute_s ? terms.window_compute_s
                   : binding == r.in_s    ? terms.window_in_s
                                          : terms.window_out_s;
    term += binding / split.iterations;
    terms.window_launch_wait_s += r.launch_wait_s / split.iterations;
    if (binding > r.compute_s) terms.runs.push_back(r);
  }
  // The iteration also takes at least all its launches' host time (the last kernel's floor is one
  // launch short of it).
  if (!w.step.empty()) terms.launches_s = floors.back() + launch_s;
  // With a modelled drive: the device and the host tier together hold at most frames + host pages
  // distinct pages (a page in both, or on its way, counts once or uses more), and any other page whose
  // data a kernel needs comes from NVMe: a read, and a write before it of contents modified since they
  // were last written (once per epoch, however many of its intervals the page spends there). So the
  // least such cost with that many frames bounds the drive's busy time, one I/O after another
  // (min_interval_cost; in picoseconds of the drive's time).
  if (o.disk_costs && o.timing == "model" && o.device != "cuda" && b.nvme_pages != 0) {
    const auto held = static_cast<std::uint32_t>(b.frames + b.host_pages);
    const auto disk = modelled_disk();
    const auto drive_ps = [&](std::uint64_t bytes, bool modified) {
      const double s = static_cast<double>(bytes) / disk.read_bytes_per_s +
                       (modified ? static_cast<double>(bytes) / disk.write_bytes_per_s : 0.0);
      return static_cast<std::uint64_t>(std::floor(s * 1e12));
    };
    const auto least_drive = policies::min_interval_cost(trace, held, 8, used, drive_ps);
    terms.disk_s = static_cast<double>(least_drive.load_bytes) / std::max(least_drive.iterations, 1) / 1e12;
  }
  ref.lower_bound_s = std::max({terms.compute_s, terms.loads_s, terms.window_s, terms.launches_s, terms.disk_s});
  return ref;
}

namespace {
// The window program of window_bound_s and lower_bound_s (runner.hpp): the best split of `repeat`
// iterations into runs, each costing max(its compute, the bytes it loads beyond what `frames` pages hold,
// and with `write_backs` the bytes it writes back beyond that), per iteration, with the split's runs.
BoundSplit window_program(const char* name, const Workload& w, std::size_t frames, std::size_t page_bytes,
                          double bus_bytes_per_s, int repeat, bool write_backs, std::span<const double> floors) {
  if (repeat < 1 || bus_bytes_per_s <= 0) throw std::invalid_argument(std::string(name) + ": repeat >= 1, bus > 0");
  const std::size_t n = w.step.size();
  if (!floors.empty() && floors.size() != n) {
    throw std::invalid_argument(std::string(name) + ": " + std::to_string(floors.size()) + " launch floors for " +
                                std::to_string(n) + " kernels");
  }
  BoundSplit split;
  split.iterations = repeat;
  if (n == 0) return split;
  const std::size_t tensors = w.tensor_bytes.size();
  const std::size_t total = n * static_cast<std::size_t>(repeat);
  // A tensor's bytes: its pages move them (a partial last page only the bytes the tensor holds in it),
  // and `frames` pages hold at most frames x page_bytes of them.
  std::vector<std::int64_t> bytes(tensors);
  for (std::size_t t = 0; t < tensors; ++t) bytes[t] = static_cast<std::int64_t>(w.tensor_bytes[t]);
  const auto capacity = static_cast<std::int64_t>(frames * page_bytes);
  // events[t] (write-backs only): kernel k's first event on tensor t, for each kernel that has one, in
  // kernel order: whether it is a pin that reads t's contents (its first pin of t, else a discard: no).
  // reads_after(k, t): t's next event after kernel k (its pins, then its discards), in the cycle of
  // iterations, is a pin that reads. (A table of kernels x tensors took 10 GB for a trace of 100k ops
  // and 100k storages.)
  std::vector<std::vector<std::pair<std::uint32_t, bool>>> events(write_backs ? tensors : 0);
  std::size_t events_per_iteration = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const Kernel& kernel = w.step[k];
    events_per_iteration += kernel.pins.size() + kernel.discards.size() + 1;
    if (!write_backs) continue;
    auto note = [&](std::uint32_t t, bool reads) {
      if (events[t].empty() || events[t].back().first != k)
        events[t].emplace_back(static_cast<std::uint32_t>(k), reads);
    };
    for (const auto& p : kernel.pins) note(p.tensor, p.access != Access::write);
    for (const auto t : kernel.discards) note(t, false);
  }
  auto reads_after = [&](std::size_t k, std::uint32_t t) {
    const auto& e = events[t];
    const auto it = std::upper_bound(e.begin(), e.end(), k, [](std::size_t x, const auto& ev) { return x < ev.first; });
    return (it != e.end() ? *it : e.front()).second;  // t has an event in kernel k at least
  };
  // Runs are at most one iteration long; on traces so long that growing every run that far would take
  // more than kWindowWork event visits, at most max_run kernels. Each run considered gives a bound, so
  // considering fewer gives a looser one, never a wrong one.
  constexpr double kWindowWork = 1e8;
  std::size_t max_run = n;
  if (const double work = static_cast<double>(total) * static_cast<double>(events_per_iteration); work > kWindowWork) {
    max_run = std::max<std::size_t>(
        1, static_cast<std::size_t>(kWindowWork / static_cast<double>(total) /
                                    (static_cast<double>(events_per_iteration) / static_cast<double>(n))));
    max_run = std::min(max_run, n);
    std::fprintf(stderr,
                 "tvmm-bench: %s: %zu kernels per iteration; its runs are limited to %zu kernels (a looser bound)\n",
                 name, n, max_run);
  }
  // first[t]: how the run's first event on tensor t treats its contents; last[t]: whether the run leaves
  // data of t that is read later (its last write-or-discard of t was a write). Reset through `touched`.
  enum : std::uint8_t { absent, needs, no_data };
  enum : std::uint8_t { unknown, produced, not_produced };
  std::vector<std::uint8_t> first(tensors, absent), last(tensors, unknown);
  std::vector<std::uint32_t> touched;
  std::vector<double> f(total + 1, 0.0);      // f[j]: the bound for the first j kernels
  std::vector<BoundRun> last_run(total + 1);  // the last run of f[j]'s split
  for (std::size_t j = 1; j <= total; ++j) {
    for (const auto t : touched) {
      first[t] = absent;
      last[t] = unknown;
    }
    touched.clear();
    const std::size_t after = (j - 1) % n;  // the run ends with this kernel of the iteration
    std::int64_t need = 0, out = 0;
    double compute = 0, best = 0;
    auto set_first = [&](std::uint32_t t, std::uint8_t how) {
      if (first[t] == absent && last[t] == unknown) touched.push_back(t);
      if (first[t] == needs) need -= bytes[t];
      first[t] = how;
      if (how == needs) need += bytes[t];
    };
    // The run's last write-or-discard of t decides whether the run leaves live data of t on the device:
    // growing leftwards, the first one seen.
    auto set_last = [&](std::uint32_t t, bool wrote) {
      if (!write_backs || last[t] != unknown) return;
      last[t] = wrote && reads_after(after, t) ? produced : not_produced;
      if (last[t] == produced) out += bytes[t];
    };
    const auto excess_s = [&](std::int64_t x) {
      return static_cast<double>(std::max<std::int64_t>(0, x - capacity)) / bus_bytes_per_s;
    };
    // Grow the run [i, j] leftwards: kernel i's events become the run's first (its pins, then its
    // discards, so set the discards first and let the pins override them).
    for (std::size_t i = j; i >= 1 && j - i < max_run; --i) {
      const Kernel& k = w.step[(i - 1) % n];
      compute += k.compute_us * 1e-6;
      for (const auto t : k.discards) {
        set_first(t, no_data);
        set_last(t, false);
      }
      for (auto p = k.pins.rbegin(); p != k.pins.rend(); ++p) {
        set_first(p->tensor, p->access == Access::write ? no_data : needs);
        if (p->access != Access::read) set_last(p->tensor, true);
      }
      const double in_s = excess_s(need), out_s = excess_s(out);
      // Kernel i starts after kernel i - 1 ends and after its launch: the host starts an iteration's
      // launches when the iteration before it has ended (f at its last kernel).
      double start = f[i - 1];
      if (!floors.empty()) start = std::max(start, f[(i - 1) / n * n] + floors[(i - 1) % n]);
      if (const double v = start + std::max({compute, in_s, out_s}); v > best || i == j) {
        best = v;
        last_run[j] = BoundRun{i - 1, j - i + 1, compute, in_s, out_s, start - f[i - 1]};
      }
    }
    f[j] = best;
  }
  split.per_iteration_s = f[total] / repeat;
  for (std::size_t j = total; j > 0; j -= last_run[j].kernels) split.runs.push_back(last_run[j]);
  std::reverse(split.runs.begin(), split.runs.end());
  return split;
}
}  // namespace

BoundSplit lower_bound_split(const Workload& w, std::size_t frames, std::size_t page_bytes, double bus_bytes_per_s,
                             int repeat, std::span<const double> launch_floor_s) {
  return window_program("lower_bound_s", w, frames, page_bytes, bus_bytes_per_s, repeat, true, launch_floor_s);
}

std::vector<double> launch_floors(const Workload& w, double launch_s, bool verify) {
  std::vector<double> out;
  out.reserve(w.step.size());
  std::size_t before = 0;  // launches queued before this kernel's
  for (const auto& k : w.step) {
    if (verify) {
      for (const auto& p : k.pins) before += (p.access != Access::write) + (p.access != Access::read);
    }
    out.push_back(static_cast<double>(before) * launch_s);
    ++before;
  }
  return out;
}

double lower_bound_s(const Workload& w, std::size_t frames, std::size_t page_bytes, double bus_bytes_per_s,
                     int repeat) {
  return lower_bound_split(w, frames, page_bytes, bus_bytes_per_s, repeat).per_iteration_s;
}

double window_bound_s(const Workload& w, std::size_t frames, std::size_t page_bytes, double bus_bytes_per_s,
                      int repeat) {
  return window_program("window_bound_s", w, frames, page_bytes, bus_bytes_per_s, repeat, false, {}).per_iteration_s;
}

RunResult run_pager(const Workload& w, const RunOptions& o, const std::string& policy, double ratio,
                    Residency* residency) {
  const auto b = budgets_for(w, o, ratio);
  const bool naive = policy == "naive";
  Config cfg;
  cfg.page_size = o.page_bytes;
  cfg.device_budget = b.frames * o.page_bytes;
  cfg.host_budget = b.host_pages * o.page_bytes;
  cfg.min_bytes = 0;  // every tensor evictable, as Belady's simulation assumes
  if (b.nvme_pages != 0) {
    cfg.nvme.budget = b.nvme_pages * o.page_bytes;
    cfg.nvme.paths = {o.disk_dir};
  }
  cfg.sim.bandwidth_bytes_per_s = o.bus_gbs * 1e9;
  cfg.sim.copy_latency = std::chrono::nanoseconds(static_cast<std::int64_t>(o.latency_us * 1e3));
  cfg.sim.timing = o.timing;
  if (o.vmm_costs) cfg.sim.vmm_costs = o.mapping_calls_free ? modelled_costs_mapping_free() : modelled_vmm_costs();
  if (o.disk_costs) cfg.sim.disk = modelled_disk();
  cfg.device_backend = o.device;  // on "cuda" the bus and the kernels are real (busy kernels; GPU timers)
  cfg.eviction = policy == "trace" ? "belady" : naive ? "lru" : policy;  // with a trace, evict by next use too
  cfg.prefetch = policy == "trace" ? "trace" : "none";
  cfg.prefetch_distance = o.distance;
  cfg.keep_recent = policy == "trace" ? o.keep_recent : 0;  // "belady" stays the pure optimum
  cfg.write_behind = o.write_behind;
  cfg.nvme.read_ahead = o.nvme_read_ahead;
  cfg.pin_log_file = o.pin_log;
  cfg.timeline_file = o.timeline;
  cfg.stats_file = o.stats_file;
  std::unique_ptr<device::DeviceBackend> dev;
#if defined(TVMM_HAVE_CUDA)
  device::DeviceBackend* gpu = nullptr;
  if (o.device == "cuda") {  // built here to reach its kernels (DeviceBackend::fill, verify)
    dev = device::make_cuda_device(cfg.cuda_device, cfg.gpu_direct_rdma);
    gpu = dev.get();
  }
#endif
  Pager pager = dev ? vmm::make_pager(cfg, std::move(dev)) : Pager(cfg);
  auto stream = pager.create_stream();
  std::vector<Tensor> ts;
  ts.reserve(w.tensor_bytes.size());
  for (auto bytes : w.tensor_bytes) ts.push_back(pager.allocate(bytes));

  // Byte checking: always on the GPU, on request on the simulator (its CPU kernels take real time, which
  // counts under --timing wall only).
  std::unique_ptr<ByteCheck> bytes_check;
#if defined(TVMM_HAVE_CUDA)
  if (gpu != nullptr) bytes_check = std::make_unique<GpuCheck>(*gpu, stream);
#endif
  if (!bytes_check && o.verify) bytes_check = std::make_unique<CpuCheck>();
  std::vector<std::uint64_t> seeds(ts.size(), 0);
  std::uint64_t next_seed = 1, verified = 0;
  if (bytes_check) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      auto pin = ts[i].pin(stream, Access::write);
      seeds[i] = next_seed++;
      bytes_check->fill(stream, pin.data(), w.tensor_bytes[i], seeds[i]);
    }
  }

  using clock = std::chrono::steady_clock;
  clock::time_point t0;
  Stats before{};
  StreamTimer timer(stream);
  double device_secs = 0;
  std::vector<Pin> pins;
  // One iteration of the step; with `sample`, the residency of every tensor after each kernel.
  const int total = o.iterations + (residency != nullptr ? 1 : 0);
  auto iteration = [&](int it, bool sample) {
    pager.mark_iteration();
    timer.start();
    for (const auto& k : w.step) {
      pins.clear();
      for (const auto& p : k.pins) pins.push_back(ts[p.tensor].pin(stream, p.access));
      if (bytes_check) {
        for (std::size_t i = 0; i < k.pins.size(); ++i) {
          const auto t = k.pins[i].tensor;
          if (k.pins[i].access != Access::write) {
            bytes_check->verify(stream, pins[i].data(), w.tensor_bytes[t], seeds[t]);
            verified += w.tensor_bytes[t];
          }
          if (k.pins[i].access != Access::read) {
            seeds[t] = next_seed++;
            bytes_check->fill(stream, pins[i].data(), w.tensor_bytes[t], seeds[t]);
          }
        }
      }
      // Naive swapping: the kernel waits for its page-ins, and the next pins wait for the kernel, so
      // no copy overlaps compute.
      if (naive) stream.synchronize();
      stream.busy_for(std::chrono::nanoseconds(static_cast<std::int64_t>(k.compute_us * 1e3)));
      if (naive || o.sync_kernels) stream.synchronize();
      release_together(pins);  // one release point for the kernel's operands
      pins.clear();
      for (const auto t : k.discards) ts[t].discard();
      if (sample) {
        std::vector<float> row(ts.size());
        for (std::size_t t = 0; t < ts.size(); ++t) {
          const auto n = pages_of(w.tensor_bytes[t], o.page_bytes);
          std::uint32_t on_device = 0;
          for (std::uint32_t pg = 0; pg < n; ++pg) on_device += ts[t].tier(pg * o.page_bytes) == Tier::device;
          row[t] = static_cast<float>(on_device) / static_cast<float>(n);
        }
        residency->push_back(std::move(row));
      }
    }
    timer.stop();
    stream.synchronize();
    if (!o.progress.empty()) std::fprintf(stderr, "\r%s: iteration %d/%d   ", o.progress.c_str(), it + 1, total);
  };
  for (int it = 0; it < o.iterations; ++it) {
    if (it == o.warmup) {
      stream.synchronize();
      before = pager.stats();
      t0 = clock::now();
    }
    iteration(it, false);
    if (it >= o.warmup) device_secs += std::chrono::duration<double>(timer.elapsed()).count();
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  const auto after = pager.stats();
  // Residency is sampled in one more iteration after the measured ones: reading every page's tier after
  // every kernel takes the pager's lock and queries events, host time that on a GPU would delay the
  // kernels of a measured iteration (a GPT-2 step on an H200 took 10 ms longer with it).
  if (residency != nullptr) {
    residency->clear();
    iteration(o.iterations, true);
  }
  const int measured = o.iterations - o.warmup;

  RunResult r;
  r.policy = policy;
  r.ratio = ratio;
  r.step_time_s = device_secs / measured;
  r.vmm_costs = o.device == "cuda"     ? "real"
                : !o.vmm_costs         ? "free"
                : o.mapping_calls_free ? "mapping-free"
                                       : "modelled";
  r.disk_costs = o.device == "cuda" || o.timing != "model" ? "real" : o.disk_costs ? "modelled" : "free";
  r.host = o.sync_kernels ? "synchronous" : "ahead";
  r.write_behind = o.write_behind;
  r.nvme_read_ahead = o.nvme_read_ahead;
  r.warmup = o.warmup;
  r.measured = measured;
  r.wall_step_time_s = secs / measured;
  r.bytes_in = static_cast<double>(after.host_to_device.bytes - before.host_to_device.bytes) / measured;
  r.bytes_out = static_cast<double>(after.device_to_host.bytes - before.device_to_host.bytes) / measured;
  r.bytes_moved = r.bytes_in + r.bytes_out;
  r.bus_bytes_per_s = o.bus_gbs * 1e9;
  r.disk_read_bytes = static_cast<double>(after.nvme_to_host.bytes - before.nvme_to_host.bytes) / measured;
  r.disk_write_bytes = static_cast<double>(after.host_to_nvme.bytes - before.host_to_nvme.bytes) / measured;
  if (r.disk_costs == "modelled") {
    const auto disk = modelled_disk();
    r.disk_busy_s = r.disk_read_bytes / disk.read_bytes_per_s + r.disk_write_bytes / disk.write_bytes_per_s;
  }
  const Reference ref = o.reference != nullptr ? *o.reference : reference(w, o, b);
  r.belady_bytes = ref.belady_bytes;
  r.compute_s = w.compute_us() * 1e-6;
  r.bound_s = ref.bound_s;
  r.window_bound_s = ref.window_bound_s;
  r.lower_bound_s = ref.lower_bound_s;
  r.bytes_vs_belady = r.belady_bytes > 0 ? r.bytes_moved / r.belady_bytes : (r.bytes_moved == 0 ? 1.0 : INFINITY);
  r.time_vs_bound = r.bound_s > 0 ? r.step_time_s / r.bound_s : 1.0;
  r.time_vs_window_bound = r.window_bound_s > 0 ? r.step_time_s / r.window_bound_s : 1.0;
  r.time_vs_lower_bound = r.lower_bound_s > 0 ? r.step_time_s / r.lower_bound_s : 1.0;
  r.misses = after.misses - before.misses;
  r.evictions = after.evictions - before.evictions;
  r.prefetched = after.prefetched - before.prefetched;
  r.written_behind = after.written_behind - before.written_behind;
  r.kept_mappings = after.kept_mappings - before.kept_mappings;
  r.remap_s = static_cast<double>(after.remap_ns - before.remap_ns) * 1e-9 / measured;
  const auto was = driver_times(before.driver);
  const auto now = driver_times(after.driver);
  for (std::size_t i = 0; i < now.size(); ++i) {
    r.driver.push_back({now[i].first, static_cast<double>(now[i].second.calls - was[i].second.calls) / measured,
                        static_cast<double>(now[i].second.ns - was[i].second.ns) * 1e-9 / measured});
  }
  if (bytes_check) {
    r.verified_bytes = verified;
    r.mismatched_bytes = bytes_check->mismatches(stream);
  }
  return r;
}

}  // namespace tvmm::bench
