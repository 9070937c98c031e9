// tvmm-bench: workload benchmarks. `--workload train` is a synthetic training loop: per layer a
// weight, activation, gradient and optimizer-state tensor; forward reads weights and writes
// activations, backward (in reverse) reads activations and weights and writes gradients, the optimizer
// step updates weights and optimizer state. Kernels are modelled compute time on the simulated GPU;
// copy engines are throttled to a modelled bus. For each policy and oversubscription ratio it reports
// step time, bytes moved, bytes_vs_belady (bytes moved / Belady's on the same trace) and time_vs_bound
// (step time / max(compute time, Belady bytes / bus bandwidth)), as a table and as JSON.
//
// Step time is device time (tvmm::StreamTimer from the start of a step to the end of its last kernel):
// on the simulator, its modelled time, so the host's scheduling noise and memcpy speed do not enter
// it. The wall-clock step time is reported beside it.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/workloads/host_bandwidth.hpp"
#include "bench/workloads/json_records.hpp"
#include "bench/workloads/vmm_costs.hpp"
#include "kernels/pattern.hpp"
#include "policies/belady.hpp"
#include "tvmm/tvmm.hpp"
#include "vmm/pager_impl.hpp"
#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif

namespace {

struct Options {
  std::size_t layers = 8;
  std::size_t tensor_mib = 8;
  int iterations = 6;
  int warmup = 2;  // the recorded iteration and the first replay are not measured
  std::vector<double> ratios = {1.5, 2.0, 4.0};
  std::vector<std::string> policies = {"lru", "fifo", "clock", "trace", "belady"};
  double bus_gbs = 25.0;
  double latency_us = 5.0;
  double compute_us = 2000.0;   // per forward kernel; backward costs 2x, the optimizer step 0.5x
  std::size_t distance = 1;     // trace prefetch distance, in pins
  std::size_t keep_recent = 6;  // the trace policy's next-use eviction spares the last 6 pins' tensors
  std::string json;
  std::string device = "sim";  // "cuda": the real GPU, busy kernels instead of modelled ones
  bool verify = false;         // write and check every tensor's bytes (always on with --device cuda)
};

struct Pin {
  std::size_t tensor;
  tvmm::Access access;
};
struct Kernel {
  std::vector<Pin> pins;
  double compute_us;
};

// The kernels of one training iteration. Tensors: 4 per layer (weights, activations, gradients,
// optimizer state) at index 4 * layer + kind.
std::vector<Kernel> training_step(const Options& o) {
  enum { W, A, G, S };
  auto t = [](std::size_t layer, int kind) { return 4 * layer + static_cast<std::size_t>(kind); };
  std::vector<Kernel> ks;
  for (std::size_t l = 0; l < o.layers; ++l) {
    ks.push_back({{{t(l, W), tvmm::Access::read}, {t(l, A), tvmm::Access::write}}, o.compute_us});
  }
  for (std::size_t l = o.layers; l-- > 0;) {
    ks.push_back({{{t(l, A), tvmm::Access::read}, {t(l, W), tvmm::Access::read}, {t(l, G), tvmm::Access::write}},
                  2 * o.compute_us});
  }
  for (std::size_t l = 0; l < o.layers; ++l) {
    ks.push_back(
        {{{t(l, W), tvmm::Access::read_write}, {t(l, G), tvmm::Access::read}, {t(l, S), tvmm::Access::read_write}},
         0.5 * o.compute_us});
  }
  return ks;
}

struct Result {
  std::string policy;
  double ratio = 0;
  double step_time_s = 0;       // device time
  double wall_step_time_s = 0;  // wall clock, host included
  double bytes_moved = 0;       // per iteration
  double belady_bytes = 0;
  double compute_s = 0;
  double bytes_vs_belady = 0;
  double time_vs_bound = 0;
  std::uint64_t misses = 0, evictions = 0, prefetched = 0;
  std::uint64_t verified_bytes = 0, mismatched_bytes = 0;
};

// Writes and checks every tensor's bytes with the pattern kernels: each write pin fills a new seed,
// each read checks the tensor's last one. On the GPU the CUDA backend's fill and verify kernels run on
// the stream, counting into an 8-byte tensor kept resident (below the admission threshold); on the
// simulator the CPU kernels run as host callables.
class ByteCheck {
 public:
  virtual ~ByteCheck() = default;
  virtual void fill(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) = 0;
  virtual void verify(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) = 0;
  //! Waits for the stream; the bytes found different so far.
  virtual std::uint64_t mismatches(tvmm::Stream& s) = 0;
};

class CpuCheck final : public ByteCheck {
 public:
  void fill(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    s.launch([p, bytes, seed] { tvmm::kernels::fill_pattern(p, bytes, seed); });
  }
  void verify(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    s.launch([p, bytes, seed, bad = bad_] { *bad += tvmm::kernels::count_mismatches(p, bytes, seed); });
  }
  std::uint64_t mismatches(tvmm::Stream& s) override {
    s.synchronize();
    return bad_->load();
  }

 private:
  std::shared_ptr<std::atomic<std::uint64_t>> bad_ = std::make_shared<std::atomic<std::uint64_t>>(0);
};

#if defined(TVMM_HAVE_CUDA)
class GpuCheck final : public ByteCheck {
 public:
  GpuCheck(tvmm::backend::CudaDevice& dev, tvmm::Pager& pager, tvmm::Stream& s)
      : dev_(dev), counter_(pager.allocate(8, {"verify counter"})) {
    check(dev_.alloc_host(8, &host_), "alloc_host");
    std::memset(host_, 0, 8);
    check(dev_.memcpy_async(counter_.data(), host_, 8, tvmm::backend::CopyKind::host_to_device, s.native_handle()),
          "zeroing the counter");
  }
  ~GpuCheck() override { (void)dev_.free_host(host_, 8); }
  void fill(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    check(dev_.fill(s.native_handle(), reinterpret_cast<tvmm::backend::DevPtr>(p), bytes, seed), "the fill kernel");
  }
  void verify(tvmm::Stream& s, void* p, std::size_t bytes, std::uint64_t seed) override {
    check(dev_.verify(s.native_handle(), reinterpret_cast<tvmm::backend::DevPtr>(p), bytes, seed,
                      reinterpret_cast<tvmm::backend::DevPtr>(counter_.data())),
          "the verify kernel");
  }
  std::uint64_t mismatches(tvmm::Stream& s) override {
    check(dev_.memcpy_async(host_, counter_.data(), 8, tvmm::backend::CopyKind::device_to_host, s.native_handle()),
          "reading the counter");
    s.synchronize();
    std::uint64_t v = 0;
    std::memcpy(&v, host_, 8);
    return v;
  }

 private:
  static void check(tvmm::backend::Status st, const char* what) {
    if (!st.ok())
      throw tvmm::device_error(std::string(what) + " failed: " + tvmm::backend::errc_name(st.code), "bench");
  }
  tvmm::backend::CudaDevice& dev_;
  tvmm::Tensor counter_;
  void* host_ = nullptr;
};
#endif

Result run(const Options& o, const std::string& policy, double ratio, bool progress) {
  const std::size_t page = 2 * tvmm::MiB;
  const std::size_t tensor_bytes = o.tensor_mib * tvmm::MiB;
  const std::size_t tensor_pages = (tensor_bytes + page - 1) / page;
  const std::size_t tensors = 4 * o.layers;
  const std::size_t total_pages = tensors * tensor_pages;
  const auto frames = static_cast<std::size_t>(std::floor(static_cast<double>(total_pages) / ratio));

  tvmm::Config cfg;
  cfg.page_size = page;
  cfg.device_budget = frames * page;
  cfg.host_budget = (total_pages + 2) * page;
  cfg.sim.bandwidth_bytes_per_s = o.bus_gbs * 1e9;
  cfg.sim.copy_latency = std::chrono::nanoseconds(static_cast<std::int64_t>(o.latency_us * 1e3));
  cfg.sim.timing = "model";       // device time is the model's: the schedule the pager produces, not this host
  cfg.device_backend = o.device;  // on "cuda" the bus and the kernels are real (busy kernels; GPU timers)
  cfg.eviction = policy == "trace" ? "belady" : policy;  // with a trace, evict by next use too
  cfg.prefetch = policy == "trace" ? "trace" : "none";
  cfg.prefetch_distance = o.distance;
  cfg.keep_recent = policy == "trace" ? o.keep_recent : 0;  // "belady" stays the pure optimum
  std::unique_ptr<tvmm::backend::DeviceBackend> dev;
#if defined(TVMM_HAVE_CUDA)
  tvmm::backend::CudaDevice* cuda = nullptr;
  if (o.device == "cuda") {  // built here to reach its kernels
    dev = tvmm::backend::make_cuda_device(cfg.cuda_device);
    cuda = static_cast<tvmm::backend::CudaDevice*>(dev.get());
  }
#endif
  tvmm::Pager pager = dev ? tvmm::detail::PagerAccess::make(cfg, std::move(dev)) : tvmm::Pager(cfg);
  auto stream = pager.create_stream();
  std::vector<tvmm::Tensor> ts;
  for (std::size_t i = 0; i < tensors; ++i) ts.push_back(pager.allocate(tensor_bytes));
  const auto kernels = training_step(o);

  // Byte checking: always on the GPU, on request on the simulator (its CPU kernels take real time).
  std::unique_ptr<ByteCheck> bytes_check;
#if defined(TVMM_HAVE_CUDA)
  if (cuda != nullptr) bytes_check = std::make_unique<GpuCheck>(*cuda, pager, stream);
#endif
  if (!bytes_check && o.verify) bytes_check = std::make_unique<CpuCheck>();
  std::vector<std::uint64_t> seeds(tensors, 0);
  std::uint64_t next_seed = 1, verified = 0;
  if (bytes_check) {
    for (std::size_t i = 0; i < tensors; ++i) {
      auto pin = ts[i].pin(stream, tvmm::Access::write);
      seeds[i] = next_seed++;
      bytes_check->fill(stream, pin.data(), tensor_bytes, seeds[i]);
    }
  }

  using clock = std::chrono::steady_clock;
  clock::time_point t0;
  tvmm::Stats before{};
  tvmm::StreamTimer timer(stream);
  double device_secs = 0;
  for (int it = 0; it < o.iterations; ++it) {
    if (it == o.warmup) {
      stream.synchronize();
      before = pager.stats();
      t0 = clock::now();
    }
    pager.mark_iteration();
    timer.start();
    for (const auto& k : kernels) {
      std::vector<tvmm::Pin> pins;
      for (const auto& p : k.pins) pins.push_back(ts[p.tensor].pin(stream, p.access));
      if (bytes_check) {
        for (std::size_t i = 0; i < k.pins.size(); ++i) {
          const auto t = k.pins[i].tensor;
          if (k.pins[i].access != tvmm::Access::write) {
            bytes_check->verify(stream, pins[i].data(), tensor_bytes, seeds[t]);
            verified += tensor_bytes;
          }
          if (k.pins[i].access != tvmm::Access::read) {
            seeds[t] = next_seed++;
            bytes_check->fill(stream, pins[i].data(), tensor_bytes, seeds[t]);
          }
        }
      }
      stream.busy_for(std::chrono::nanoseconds(static_cast<std::int64_t>(k.compute_us * 1e3)));
    }
    timer.stop();
    stream.synchronize();
    if (it >= o.warmup) device_secs += std::chrono::duration<double>(timer.elapsed()).count();
    if (progress) std::fprintf(stderr, "\r  %-6s %.1fx: iteration %d/%d ", policy.c_str(), ratio, it + 1, o.iterations);
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  const auto after = pager.stats();
  const int measured = o.iterations - o.warmup;

  // Belady's bytes on the same trace and budget.
  std::vector<tvmm::policies::TraceAccess> trace;
  for (const auto& k : kernels) {
    for (const auto& p : k.pins) {
      // A kernel's tensors are pinned together: all of them must be resident at once.
      trace.push_back(
          {p.tensor, static_cast<std::uint32_t>(tensor_pages), p.access == tvmm::Access::write, &p != &k.pins.front()});
    }
  }
  const auto belady = tvmm::policies::simulate_belady(trace, static_cast<std::uint32_t>(frames));

  Result r;
  r.policy = policy;
  r.ratio = ratio;
  r.step_time_s = device_secs / measured;
  r.wall_step_time_s = secs / measured;
  r.bytes_moved = static_cast<double>((after.host_to_device.bytes + after.device_to_host.bytes) -
                                      (before.host_to_device.bytes + before.device_to_host.bytes)) /
                  measured;
  r.belady_bytes = belady.pages_per_iteration() * static_cast<double>(page);
  double compute_us = 0;
  for (const auto& k : kernels) compute_us += k.compute_us;
  r.compute_s = compute_us * 1e-6;
  r.bytes_vs_belady = r.belady_bytes > 0 ? r.bytes_moved / r.belady_bytes : (r.bytes_moved == 0 ? 1.0 : INFINITY);
  r.time_vs_bound = r.step_time_s / std::max(r.compute_s, r.belady_bytes / (o.bus_gbs * 1e9));
  r.misses = after.misses - before.misses;
  r.evictions = after.evictions - before.evictions;
  r.prefetched = after.prefetched - before.prefetched;
  if (bytes_check) {
    r.verified_bytes = verified;
    r.mismatched_bytes = bytes_check->mismatches(stream);
  }
  return r;
}

std::string json_number(double d) {
  if (!std::isfinite(d)) return "null";
  std::ostringstream os;
  os.precision(6);
  os << d;
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"tvmm-bench: workload benchmarks on the simulated GPU"};
  std::string workload = "train";
  bool quick = false;
  app.add_option("--workload", workload,
                 "Workload: train (the training loop), host-bandwidth (host-tier copies near, far and unbound), vmm "
                 "(device call costs and page-move bandwidth against plain copies)")
      ->check(CLI::IsMember({"train", "host-bandwidth", "vmm"}));
  std::string device = "sim";
  app.add_option("--device", device, "Device backend: sim, or cuda (a real GPU; train and vmm)")
      ->check(CLI::IsMember({"sim", "cuda"}));
  tvmm::bench::HostBandwidthOptions hb;
  app.add_option("--pci-bus-id", hb.pci_bus_id, "host-bandwidth: the PCI bus id the simulated GPU claims");
  app.add_flag("--quick", quick, "A small, fast run (6 layers of 4 MiB tensors, 5 iterations)");
  app.add_option("--layers", o.layers, "Layers")->check(CLI::Range(1, 1000));
  app.add_option("--tensor-mib", o.tensor_mib, "Size of each tensor in MiB")->check(CLI::Range(1, 4096));
  app.add_option("--iterations", o.iterations, "Iterations (the first 2 are warm-up)")->check(CLI::Range(3, 1000));
  app.add_option("--ratios", o.ratios, "Oversubscription ratios (tensor bytes / device budget)")
      ->delimiter(',')
      ->check(CLI::Range(1.0, 64.0));
  app.add_option("--policies", o.policies,
                 "Policies: lru, fifo, clock, trace (trace prefetch + next-use eviction), belady")
      ->delimiter(',')
      ->check(CLI::IsMember({"lru", "fifo", "clock", "trace", "belady"}));
  app.add_option("--bus-gbs", o.bus_gbs, "Modelled bus bandwidth per direction, GB/s")->check(CLI::Range(0.1, 1000.0));
  app.add_option("--latency-us", o.latency_us, "Modelled cost per copy, microseconds")->check(CLI::Range(0.0, 1e6));
  app.add_option("--compute-us", o.compute_us, "Modelled compute per forward kernel, microseconds")
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--distance", o.distance, "Trace prefetch distance, in pins")->check(CLI::Range(1, 1000));
  app.add_option("--keep-recent", o.keep_recent,
                 "The trace policy's eviction spares tensors pinned in the last N pins (0 = pure next use)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--json", o.json, "Write the results as JSON to this file");
  app.add_flag("--verify", o.verify,
               "train: write and check every tensor's bytes with the pattern kernels (always on with --device "
               "cuda; on the simulator the CPU kernels add real time to the modelled step)");
  CLI11_PARSE(app, argc, argv);
  if (workload == "vmm") {
    tvmm::bench::VmmOptions vo;
    vo.device = device;
    vo.json = o.json;
    if (quick) {
      vo.pages = 8;
      vo.rounds = 2;
    }
    return tvmm::bench::run_vmm(vo);
  }
  o.device = device;
  if (workload == "host-bandwidth") {
    hb.json = o.json;
    if (quick) {
      hb.tensor_mib = 16;
      hb.sweeps = 2;
    }
    return tvmm::bench::run_host_bandwidth(hb);
  }
  if (quick) {
    o.layers = 6;
    o.tensor_mib = 4;
    o.iterations = 5;
    o.compute_us = 1000;
  }
  const bool progress = ::isatty(STDERR_FILENO) != 0;

  std::vector<Result> results;
  try {
    for (double ratio : o.ratios) {
      for (const auto& policy : o.policies) results.push_back(run(o, policy, ratio, progress));
    }
  } catch (const tvmm::error& e) {
    std::fprintf(stderr, "\ntvmm-bench: %s\n", e.what());
    return 1;
  }
  if (progress) std::fprintf(stderr, "\n");

  std::printf(
      "workload train: %zu layers x 4 tensors of %zu MiB, bus %.1f GB/s per direction, compute %.1f ms per "
      "iteration; trace: distance %zu, keep_recent %zu\n",
      o.layers, o.tensor_mib, o.bus_gbs, results.empty() ? 0.0 : results.front().compute_s * 1e3, o.distance,
      o.keep_recent);
  std::printf("%-7s %6s %10s %8s %12s %12s %10s %10s %8s %10s\n", "policy", "ratio", "step ms", "wall ms", "MiB moved",
              "Belady MiB", "vs Belady", "vs bound", "misses", "prefetched");
  for (const auto& r : results) {
    std::printf("%-7s %5.1fx %10.1f %8.1f %12.1f %12.1f %10.2f %10.2f %8llu %10llu\n", r.policy.c_str(), r.ratio,
                r.step_time_s * 1e3, r.wall_step_time_s * 1e3, r.bytes_moved / tvmm::MiB, r.belady_bytes / tvmm::MiB,
                r.bytes_vs_belady, r.time_vs_bound, static_cast<unsigned long long>(r.misses),
                static_cast<unsigned long long>(r.prefetched));
  }
  std::uint64_t verified = 0, mismatched = 0;
  for (const auto& r : results) {
    verified += r.verified_bytes;
    mismatched += r.mismatched_bytes;
  }
  if (verified != 0) {
    std::printf("verified %llu bytes read back through the pager with the %s pattern kernels: %s\n",
                static_cast<unsigned long long>(verified), o.device == "cuda" ? "GPU" : "CPU",
                mismatched == 0 ? "all correct" : (std::to_string(mismatched) + " bytes WRONG").c_str());
  }
  if (!o.json.empty()) {
    std::vector<std::string> records;
    for (const auto& r : results) {
      std::ostringstream out;
      out << "{\"workload\": \"train\", \"backend\": \"" << o.device << "\", \"policy\": \"" << r.policy
          << "\", \"oversubscription\": " << json_number(r.ratio) << ", \"step_time_s\": " << json_number(r.step_time_s)
          << ", \"wall_step_time_s\": " << json_number(r.wall_step_time_s)
          << ", \"bytes_moved\": " << json_number(r.bytes_moved)
          << ", \"belady_bytes\": " << json_number(r.belady_bytes)
          << ", \"bytes_vs_belady\": " << json_number(r.bytes_vs_belady)
          << ", \"time_vs_bound\": " << json_number(r.time_vs_bound) << ", \"compute_s\": " << json_number(r.compute_s)
          << ", \"misses\": " << r.misses << ", \"evictions\": " << r.evictions << ", \"prefetched\": " << r.prefetched
          << ", \"verified_bytes\": " << r.verified_bytes << ", \"mismatched_bytes\": " << r.mismatched_bytes << "}";
      records.push_back(out.str());
    }
    if (!tvmm::bench::write_json_records(o.json, records)) return 1;
  }
  return mismatched == 0 ? 0 : 1;
}
