// tvmm-bench: workload benchmarks. Every workload is a set of tensors and the kernels of one iteration
// (bench/workloads/workload.hpp): `train` (a synthetic training loop), `infer` (layer-by-layer weight
// streaming), `random` (uniform or Zipf page access), `scan` (sequential) and `replay` (a model trace
// captured from PyTorch, bench/traces). Each runs under tvmm's policies and beside its peers: the
// ideal bound and Belady's bytes, naive synchronous swapping (the same pager, no overlap, no
// prefetch), the whole workload in device memory, the Linux kernel as the pager (an mmap'ed file
// under a memory cgroup), and, on a GPU, CUDA Unified Memory under the same device budget.
// `--suite quick|full` runs a matrix; `--out DIR` writes summary.json, CSV files and plots
// (docs/benchmarks.md).
//
// Step time is device time (tvmm::StreamTimer from the start of a step to the end of its last kernel):
// on the simulator, its modelled time, so the host's scheduling noise and memcpy speed do not enter
// it. The wall-clock step time, which includes the NVMe tier's real disk I/O, is reported beside it
// and is what the kernel-as-pager peer is compared with.
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/peers/kernel_pager.hpp"
#include "bench/peers/unified_memory.hpp"
#include "bench/workloads/host_bandwidth.hpp"
#include "bench/workloads/registry.hpp"
#include "bench/workloads/report.hpp"
#include "bench/workloads/vmm_costs.hpp"
#include "common/registry.hpp"
#include "policies/registry.hpp"

namespace {

using namespace tvmm::bench;

using Sizes = WorkloadSizes;

// A registered workload by name (bench/workloads/registry.cpp).
tvmm::bench::Workload build(const std::string& kind, const Sizes& s, const std::string& trace_path) {
  const WorkloadInfo* w = find_workload(kind);
  if (w == nullptr) throw std::invalid_argument("no workload named \"" + kind + "\"");
  return w->make(s, trace_path);
}

struct Job {
  tvmm::bench::Workload workload;
  std::vector<double> ratios;
  bool timeline = false;  // sample residency (the trace policy at 2x, or the first ratio)
  double bus_gbs = 0;     // the bus of this job's GPU profile (replay), unless --bus-gbs says; 0: --bus-gbs
};

// A replay job on a GPU profile runs over that GPU's host link.
double profile_bus_gbs(const Sizes& s) { return s.op_time == "cpu" ? 0 : gpu_profile(s.op_time).bus_bytes_per_s / 1e9; }

// --timeline FILE for one run of a policy: FILE itself when it is the only run; with more, FILE's name
// gets the run's workload (as in its CSV file's name), ratio and policy before its extension
// (t.json -> t.replay_gpt2.2x.trace.json).
std::string timeline_path(const std::string& file, bool only_run, const std::string& workload, double ratio,
                          const std::string& policy) {
  if (only_run) return file;
  char r[32];
  std::snprintf(r, sizeof r, "%gx", ratio);
  const std::filesystem::path p(file);
  const std::string tag = file_name(workload) + "." + r + "." + policy;
  return (p.parent_path() / (p.stem().string() + "." + tag + p.extension().string())).string();
}

// An option taking "on" (the default) or "off" for `flag`.
// CLI::Range lets nan through (every comparison with it is false), and nan then fails deep inside a
// run ("the duration is negative"): a range that refuses it at the option.
CLI::Validator finite_range(double lo, double hi) {
  return CLI::Range(lo, hi) & CLI::Validator(
                                  [](std::string& text) {
                                    return std::isnan(std::strtod(text.c_str(), nullptr))
                                               ? "Value " + text + " is not a number"
                                               : std::string();
                                  },
                                  "", "not nan");
}

// A file the results will be written to (`option` names it in the message): its directory must exist
// and be writable, and the path, if it exists, be a file this process can write.
bool writable_file(const char* option, const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::error_code ec;
  const char* problem = nullptr;
  if (!std::filesystem::is_directory(dir, ec)) {
    problem = "there is no such directory to write it in";
  } else if (std::filesystem::is_directory(path, ec)) {
    problem = "it is a directory";
  } else if (::access(dir.c_str(), W_OK | X_OK) != 0 && !std::filesystem::exists(path, ec)) {
    problem = "its directory is not writable";
  } else if (std::filesystem::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    problem = "it is not writable";
  }
  if (problem == nullptr) return true;
  std::fprintf(stderr, "tvmm-bench: %s %s: %s; name a file in a writable directory\n", option, path.c_str(), problem);
  return false;
}

void add_on_off(CLI::App& app, const std::string& name, bool& flag, const std::string& help) {
  flag = true;
  app.add_option_function<std::string>(
         name, [&flag](const std::string& v) { flag = v == "on"; }, help)
      ->check(CLI::IsMember({"on", "off"}));
}

// The trace files shipped in bench/traces, found next to the source tree or the binary.
std::string shipped_trace(const std::string& name) {
  for (const auto& dir : {std::string(TVMM_SOURCE_DIR) + "/bench/traces", std::string("bench/traces")}) {
    const auto p = dir + "/" + name;
    if (std::filesystem::exists(p)) return p;
  }
  throw std::runtime_error("the shipped trace " + name + " is missing from bench/traces (a partial checkout?)");
}

std::vector<Job> suite_jobs(const std::string& suite) {
  const bool full = suite == "full";
  std::vector<double> ratios = full ? std::vector<double>{1.25, 1.5, 2, 3, 4} : std::vector<double>{1.5, 2, 3};
  std::vector<Job> jobs;
  Sizes train{.layers = full ? 8u : 6u, .tensor_mib = full ? 8u : 4u, .compute_us = full ? 2000.0 : 1000.0};
  jobs.push_back({build("train", train, ""), ratios});
  Sizes infer{.layers = full ? 24u : 16u, .tensor_mib = full ? 16u : 8u, .compute_us = full ? 400.0 : 250.0};
  jobs.push_back({build("infer", infer, ""), ratios});
  Sizes random{.tensor_mib = 2, .tensors = full ? 96u : 48u, .accesses = full ? 256u : 96u, .compute_us = 100};
  jobs.push_back({build("random", random, ""), ratios});
  random.zipf = 1.0;
  jobs.push_back({build("random", random, ""), ratios});
  Sizes scan{.tensor_mib = 2, .tensors = full ? 96u : 48u, .compute_us = 100};
  jobs.push_back({build("scan", scan, ""), ratios});
  Sizes replay;  // on the headline GPU profile (Sizes::op_time) and its bus
  for (const char* t : {"resnet18.trace.gz", "gpt2.trace.gz", "mobilenet_v2.trace.gz", "widefc.trace.gz",
                        "encoder.trace.gz", "lstm.trace.gz"})
    jobs.push_back({build("replay", replay, shipped_trace(t)), ratios, true, profile_bus_gbs(replay)});
  return jobs;
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  Sizes sizes;
  CLI::App app{"tvmm-bench: workload benchmarks (the simulated GPU unless --device cuda)"};
  std::string workload = "train", suite, out, json, device = "sim";
  std::vector<std::string> traces;
  std::vector<double> ratios = {1.5, 2.0, 4.0};
  // The registered eviction policies (policies/registry.cpp) that tvmm-bench runs by default, and
  // "trace": trace prefetch with the trace-reading eviction, listed before that policy.
  std::vector<std::string> policies, policy_choices;
  for (const auto& p : tvmm::policies::eviction_policies()) {
    if (p.needs_trace && std::find(policy_choices.begin(), policy_choices.end(), "trace") == policy_choices.end()) {
      policy_choices.emplace_back("trace");
      policies.emplace_back("trace");
    }
    policy_choices.emplace_back(p.name);
    if (p.benchmarked) policies.emplace_back(p.name);
  }
  std::vector<std::string> peers = {"naive", "memory", "kernel", "um"};
  bool quick = false;
  // The registered workloads, and two measurements that are not workloads (no tensors or kernels).
  std::vector<std::string> workload_choices = tvmm::common::names_of(workloads());
  workload_choices.insert(workload_choices.end(), {"host-bandwidth", "vmm"});
  app.add_option("--workload", workload,
                 tvmm::common::described(workloads()) +
                     "; or a measurement: host-bandwidth (host-tier copies near, far and unbound), vmm (device call "
                     "costs and page-move bandwidth)")
      ->check(CLI::IsMember(workload_choices));
  app.add_option("--suite", suite,
                 "Run a matrix of every workload, policy and peer: quick (4-9 minutes on 2 cores, the kernel peer "
                 "included) or full")
      ->check(CLI::IsMember({"quick", "full"}));
  app.add_option("--out", out, "Write summary.json, CSV files and PNG plots (gnuplot) to this directory");
  app.add_option("--device", device, "Device backend: sim, or cuda (a real GPU)")
      ->check(CLI::IsMember({"sim", "cuda"}));
  tvmm::bench::HostBandwidthOptions hb;
  app.add_option("--pci-bus-id", hb.pci_bus_id, "host-bandwidth: the PCI bus id the simulated GPU claims");
  app.add_flag("--quick", quick, "A small, fast run of the chosen workload");
  app.add_option("--layers", sizes.layers, "train, infer: layers")->check(CLI::Range(1, 1000));
  app.add_option("--tensor-mib", sizes.tensor_mib, "train, infer, random, scan: MiB per tensor")
      ->check(CLI::Range(1, 4096));
  app.add_option("--tensors", sizes.tensors, "random, scan: tensors")->check(CLI::Range(1, 100000));
  app.add_option("--accesses", sizes.accesses, "random: pins per iteration")->check(CLI::Range(1, 1000000));
  app.add_option("--zipf", sizes.zipf, "random: Zipf skew s (0 = uniform)")->check(finite_range(0.0, 10.0));
  app.add_option("--trace", traces, "replay: trace file(s) (bench/traces/*.trace.gz; docs/trace-format.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--compute-scale", sizes.compute_scale,
                 "replay with --op-time cpu: modelled compute = recorded op time x this")
      ->check(finite_range(0.0, 1000.0));
  std::vector<std::string> op_times = {"cpu"};
  for (const auto& p : gpu_profiles()) op_times.push_back(p.name);
  app.add_option("--op-time", sizes.op_time,
                 "replay: each op's time on this GPU (a roofline of its flops and bytes; the bus follows the GPU "
                 "unless --bus-gbs is given: h100-sxm, h100-pcie (default), a100-sxm, a100-pcie), or cpu (the "
                 "trace's CPU time x --compute-scale)")
      ->check(CLI::IsMember(op_times));
  app.add_option("--min-mib", sizes.min_mib, "replay: leave out storages smaller than this (MiB)")
      ->check(CLI::Range(0, 4096));
  auto* iterations_opt =
      app.add_option("--iterations", o.iterations,
                     "Iterations, the warm-up ones included (default --warmup + 4, so 6; --suite and --quick set their "
                     "own: --warmup + 2 (quick suite), + 6 (full suite), + 3 (--quick))")
          ->check(CLI::Range(1, 1000));
  app.add_option("--warmup", o.warmup,
                 "Iterations not measured (default 2: the recorded iteration and the first replay). The pager's "
                 "pairings of pages and frames settle over a few more replays; a larger value measures the steady "
                 "state (docs/benchmarks.md, \"Warm-up\")")
      ->check(CLI::Range(0, 999));
  app.add_option("--ratios", ratios, "Oversubscription ratios (working set / device budget)")
      ->delimiter(',')
      ->check(finite_range(1.0, 64.0));
  std::string policy_help = "Policies (default: every one marked *):";
  for (const auto& name : policy_choices) {
    const auto* p = tvmm::policies::find_eviction_policy(name);
    policy_help +=
        " " + name + (std::find(policies.begin(), policies.end(), name) != policies.end() ? "*" : "") +
        (p != nullptr ? " (" + std::string(p->summary) + ")" : " (trace prefetch + the trace-reading eviction)");
  }
  app.add_option("--policies", policies, policy_help)->delimiter(',')->check(CLI::IsMember(policy_choices));
  app.add_option("--peers", peers,
                 "Peers: naive (synchronous swapping), memory (all in device memory), kernel (the kernel as pager "
                 "under a memory cgroup), um (CUDA Unified Memory under the device budget; --device cuda), none")
      ->delimiter(',')
      ->check(CLI::IsMember({"naive", "memory", "kernel", "um", "none"}));
  app.add_option("--host-fraction", o.host_fraction,
                 "Host tier = this x the device budget; the rest goes to an NVMe tier in --disk-dir (0 = the host "
                 "holds everything; the suites use 0.5)")
      ->check(finite_range(0.0, 1000.0));
  app.add_option("--disk-dir", o.disk_dir,
                 "Directory for the NVMe tier and the kernel peer's file (default /var/tmp; a disk: on tmpfs the "
                 "kernel peer is skipped and the NVMe tier runs at memory speed under --timing wall)")
      ->check(CLI::ExistingDirectory);
  auto* bus_option = app.add_option("--bus-gbs", o.bus_gbs,
                                    "Modelled bus bandwidth per direction, GB/s (default 25; replay on a GPU "
                                    "profile: that GPU's)")
                         ->check(finite_range(0.1, 1000.0));
  std::size_t page_mib = 2;
  app.add_option("--page-mib", page_mib,
                 "Page size in MiB (a multiple of the 2 MiB granularity): each page is one allocation, mapped with "
                 "one call")
      ->check(CLI::Range(2, 1024));
  app.add_option("--latency-us", o.latency_us, "Modelled cost per copy, microseconds")->check(finite_range(0.0, 1e6));
  app.add_option("--compute-us", sizes.compute_us, "Modelled compute per kernel (train: per forward kernel), us")
      ->check(finite_range(0.0, 1e7));
  app.add_option("--distance", o.distance, "Trace prefetch distance, in pins")->check(CLI::Range(1, 1000));
  app.add_option("--keep-recent", o.keep_recent,
                 "The trace policy's eviction spares tensors pinned in the last N pins (0 = pure next use)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--timing", o.timing,
                 "The simulator's clock: model (host work takes no device time, disk I/O a modelled drive's: "
                 "--disk-costs; steady figures; the default, and the suites') or wall (they delay what they enqueue, "
                 "as on a GPU; the suites use it "
                 "only for the tvmm_wall figure beside the kernel peer)")
      ->check(CLI::IsMember({"model", "wall"}));
  std::string vmm_costs = "on";
  app.add_option("--vmm-costs", vmm_costs,
                 "The simulator charges cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemCreate, event records and queries, "
                 "stream waits, copy calls and kernel launches the host time an H200's driver took (on, the default; "
                 "docs/benchmarks.md \"VMM call costs\"), nothing (off), or all but the mapping calls (mapping-free: "
                 "map, set-access, unmap and create free, to measure what they add to a step)")
      ->check(CLI::IsMember({"on", "off", "mapping-free"}));
  add_on_off(app, "--disk-costs", o.disk_costs,
             "With --timing model, the simulator's clock charges NVMe reads and writes the time a PCIe 4.0 "
             "data-centre drive takes (on, the default: 6.5 GB/s read, 3.5 GB/s write, one I/O after another; "
             "docs/benchmarks.md \"Disk time\") or nothing (off). With --timing wall the real drive counts");
  app.add_flag("--sync-kernels", o.sync_kernels,
               "The host waits for each kernel before the next kernel's pins, as a program that reads results "
               "between kernels: only prefetch overlaps page-ins with compute (summary.json: host = synchronous)");
  add_on_off(app, "--write-behind", o.write_behind,
             "Copy a write to the host right after its kernel where earlier iterations evicted its data before "
             "the next write, so the eviction moves nothing (on, the default, as the pager's), or never (off; "
             "docs/architecture.md \"Write-behind\")");
  add_on_off(app, "--nvme-read-ahead", o.nvme_read_ahead,
             "While the trace replays, read the NVMe pages of the next pins into the host tier ahead of them, "
             "without waiting (on, the default, as the pager's nvme.read_ahead), or only when a pin needs them "
             "(off; docs/architecture.md \"NVMe tier\")");
  app.add_option("--json", json, "Also write the records (as in summary.json) to this file");
  std::string timeline;
  app.add_option("--timeline", timeline,
                 "Write each policy run's pager timeline (Perfetto, ui.perfetto.dev: page moves, pins, stalls, "
                 "evictions; on the simulator in modelled time with --timing model) to this file; with several "
                 "runs, one file each, named FILE with the workload, ratio and policy before its extension");
  app.add_flag("--verify", o.verify,
               "Write and check every tensor's bytes with the pattern kernels (always on with --device cuda; on "
               "the simulator, CPU kernels that take no device time with --timing model and their real time "
               "with --timing wall)");
  CLI11_PARSE(app, argc, argv);
  if (iterations_opt->count() == 0) o.iterations = o.warmup + 4;
  // --suite and --quick measure a count of their own after the warm-up.
  auto measure = [&](int count, const char* who) {
    if (iterations_opt->count() != 0) {
      std::fprintf(stderr, "tvmm-bench: --iterations %d is ignored: %s measures %d iterations after --warmup %d\n",
                   o.iterations, who, count, o.warmup);
    }
    o.iterations = o.warmup + count;
  };
  // Where the results go, checked before any run: a bad path found after a 25-minute suite loses it all.
  if (!timeline.empty() && !writable_file("--timeline", timeline)) return 2;
  if (!json.empty() && !writable_file("--json", json)) return 2;
  if (!out.empty()) {
    if (::mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr,
                   "tvmm-bench: --out %s: cannot create the directory (%s); create its parent or name another\n",
                   out.c_str(), std::strerror(errno));
      return 2;
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(out, ec) || ::access(out.c_str(), W_OK | X_OK) != 0) {
      std::fprintf(stderr, "tvmm-bench: --out %s: not a directory this process can write in; name another\n",
                   out.c_str());
      return 2;
    }
  }
  o.device = device;
  o.vmm_costs = vmm_costs != "off";
  o.mapping_calls_free = vmm_costs == "mapping-free";
  if (page_mib % 2 != 0) {
    std::fprintf(stderr, "tvmm-bench: --page-mib %zu is not a multiple of the 2 MiB granularity\n", page_mib);
    return 2;
  }
  o.page_bytes = page_mib * tvmm::MiB;

  if (workload == "vmm" && suite.empty()) {
    tvmm::bench::VmmOptions vo;
    vo.device = device;
    vo.json = json;
    if (quick) vo.pages = 8, vo.rounds = 2;
    return tvmm::bench::run_vmm(vo);
  }
  if (workload == "host-bandwidth" && suite.empty()) {
    hb.json = json;
    if (quick) hb.tensor_mib = 16, hb.sweeps = 2;
    return tvmm::bench::run_host_bandwidth(hb);
  }
  if (std::find(peers.begin(), peers.end(), "none") != peers.end()) peers.clear();
  auto wants = [&](const char* peer) { return std::find(peers.begin(), peers.end(), peer) != peers.end(); };

  // Options that --suite or --quick set themselves: each one given is said to be ignored.
  auto ignored = [&](std::initializer_list<const char*> names, const char* who) {
    for (const char* name : names) {
      if (app.count(name) != 0) std::fprintf(stderr, "tvmm-bench: %s is ignored: %s sets its own\n", name, who);
    }
  };
  std::vector<Job> jobs;
  try {
    if (!suite.empty()) {
      jobs = suite_jobs(suite);
      ignored({"--workload", "--ratios", "--layers", "--tensor-mib", "--compute-us", "--tensors", "--accesses",
               "--zipf", "--trace", "--quick"},
              suite == "quick" ? "--suite quick" : "--suite full");
      if (app.count("--host-fraction") != 0 && o.host_fraction <= 0) {
        std::fprintf(stderr, "tvmm-bench: --host-fraction 0 is ignored: the suites run with a host tier (0.5)\n");
      }
      o.host_fraction = o.host_fraction > 0 ? o.host_fraction : 0.5;
      measure(suite == "quick" ? 2 : 6, suite == "quick" ? "--suite quick" : "--suite full");
      if (out.empty()) {
        out = "tvmm-bench-" + suite;
        std::fprintf(stderr, "tvmm-bench: no --out given; writing to %s/\n", out.c_str());
      }
    } else if (find_workload(workload)->needs_trace) {
      if (traces.empty()) {
        std::fprintf(stderr, "tvmm-bench: --workload %s needs --trace FILE (e.g. bench/traces/gpt2.trace.gz)\n",
                     workload.c_str());
        return 2;
      }
      for (const auto& t : traces) {
        auto w = build(workload, sizes, t);
        // Two traces of one model (capture.py names the model, not its sizes) would share their rows, CSV
        // files and plots: the later one is named after its file too.
        const std::string named = w.name;
        auto taken = [&] {
          return std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.workload.name == w.name; });
        };
        for (int k = 1; taken(); ++k) w.name = named + "-" + trace_stem(t) + (k == 1 ? "" : "-" + std::to_string(k));
        if (w.name != named) {
          std::fprintf(stderr, "tvmm-bench: %s is %s too; its runs are named %s\n", t.c_str(), named.c_str(),
                       w.name.c_str());
        }
        jobs.push_back({std::move(w), ratios, true, profile_bus_gbs(sizes)});
      }
    } else {
      if (quick) {
        ignored({"--layers", "--tensor-mib", "--compute-us"}, "--quick");
        sizes.layers = 6;
        sizes.tensor_mib = 4;
        sizes.compute_us = 1000;
        measure(3, "--quick");
      }
      jobs.push_back({build(workload, sizes, ""), ratios});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmm-bench: %s\n", e.what());
    return 2;
  }
  if (o.iterations <= o.warmup) {
    std::fprintf(stderr,
                 "tvmm-bench: --iterations %d leaves no iteration to measure after --warmup %d; pass --iterations %d "
                 "or more\n",
                 o.iterations, o.warmup, o.warmup + 1);
    return 2;
  }
  if (o.warmup == 0) {
    std::fprintf(stderr,
                 "tvmm-bench: --warmup 0 measures the first iteration, where no tensor has data to load yet: "
                 "the bounds are a steady iteration's, and such a step can come in under them\n");
  }

  std::size_t total_runs = 0, done = 0;
  const std::size_t per_ratio = policies.size() + peers.size() + (wants("kernel") ? 1 : 0);  // + tvmm on the wall clock
  std::size_t policy_runs = 0;
  for (const auto& j : jobs) {
    total_runs += j.ratios.size() * per_ratio;
    policy_runs += j.ratios.size() * policies.size();
  }
  std::vector<std::string> timelines_written;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::vector<Record> records;
  std::vector<ResidencyTimeline> timelines;
  int failures = 0;
  const std::string um_skipped = !wants("um")       ? "not asked for (--peers)"
                                 : device != "cuda" ? "the simulated GPU does not model Unified Memory's page faults "
                                                      "and migrations: run with --device cuda"
                                                    : "";
  std::vector<std::string> refused;  // workloads none of whose ratios could run
  for (const auto& job : jobs) {
    const auto& w = job.workload;
    RunOptions jo = o;  // this job's options: a replay on a GPU profile crosses that GPU's bus
    if (job.bus_gbs > 0 && bus_option->count() == 0) jo.bus_gbs = job.bus_gbs;
    std::size_t ratios_run = 0;
    std::string refusals;  // why each ratio was skipped, if every one was
    std::optional<RunResult> in_memory;
    std::string in_memory_skipped = wants("memory") ? "" : "not asked for (--peers)";
    for (double ratio : job.ratios) {
      auto label = [&](const std::string& what) {
        ++done;
        return tty ? "[" + std::to_string(done) + "/" + std::to_string(total_runs) + "] " + w.name + " " + what + " " +
                         std::to_string(ratio).substr(0, 4) + "x"
                   : std::string();
      };
      Budgets b;
      auto peer_set = std::make_shared<Peers>();
      std::optional<Reference> ref_here;  // the bounds at this ratio, for every policy's run (not the peers')
      try {
        b = budgets_for(w, jo, ratio);
        const auto& ref = ref_here.emplace(reference(w, jo, b));
        peer_set->belady_bytes = ref.belady_bytes;
        peer_set->bound_s = ref.bound_s;
        peer_set->window_bound_s = ref.window_bound_s;
        peer_set->lower_bound_s = ref.lower_bound_s;
        peer_set->lower_bound_terms = ref.lower_bound_terms;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%stvmm-bench: %s at %.2fx skipped: %s\n", tty ? "\n" : "", w.name.c_str(), ratio,
                     e.what());
        char at[32];
        std::snprintf(at, sizeof at, "at %.2fx: ", ratio);
        refusals += (refusals.empty() ? "" : "; ") + std::string(at) + e.what();
        done += per_ratio;
        continue;
      }
      ++ratios_run;
      peer_set->unified_memory.skipped = um_skipped;
      peer_set->kernel_memory_limit = (b.frames + b.host_pages) * jo.page_bytes;
      auto peer_failed = [&](const char* peer, const std::exception& e) {
        std::fprintf(stderr, "%stvmm-bench: %s: the %s peer at %.2fx failed: %s\n", tty ? "\n" : "", w.name.c_str(),
                     peer, ratio, e.what());
        ++failures;
        return std::string("failed: ") + e.what();
      };
      if (wants("memory") && !in_memory && in_memory_skipped.rfind("failed", 0) != 0) {
        try {  // once per workload: the same at every ratio
          auto mo = jo;
          mo.progress = label("all-in-memory");
          mo.host_fraction = 0;
          mo.whole_workload = true;  // not the peak live set: dead pages' frames would move between tensors
          in_memory = run_pager(w, mo, "lru", 1.0);
        } catch (const std::exception& e) {
          in_memory_skipped = peer_failed("all-in-memory", e);
        }
      } else if (wants("memory")) {
        ++done;
      }
      if (wants("naive")) {
        try {
          auto no = jo;
          no.progress = label("naive");
          peer_set->naive = run_pager(w, no, "naive", ratio);
        } catch (const std::exception& e) {
          peer_set->naive_skipped = peer_failed("naive", e);
        }
      } else {
        peer_set->naive_skipped = "not asked for (--peers)";
      }
      if (in_memory) peer_set->all_in_memory = in_memory;
      peer_set->all_in_memory_skipped = in_memory_skipped;
      if (wants("kernel")) {
        if (tty) std::fprintf(stderr, "\r%s   ", label("kernel").c_str());
        KernelPagerOptions ko;
        ko.memory_limit = peer_set->kernel_memory_limit;
        ko.disk_dir = jo.disk_dir;
        ko.iterations = jo.iterations;
        ko.warmup = jo.warmup;
        peer_set->kernel = run_kernel_pager(w, ko);
        // tvmm's best policy on the wall clock, disk I/O included: what the kernel peer is compared with.
        const auto best =
            std::find(policies.begin(), policies.end(), "trace") != policies.end() ? "trace" : policies.front();
        try {
          auto wo = jo;
          wo.timing = "wall";
          wo.progress = label(best + " (wall clock)");
          peer_set->tvmm_wall = run_pager(w, wo, best, ratio);
        } catch (const std::exception& e) {
          peer_set->tvmm_wall_skipped = peer_failed("tvmm wall-clock", e);
        }
      } else {
        peer_set->kernel.skipped = "not asked for (--peers)";
        peer_set->tvmm_wall_skipped = "runs with the kernel peer (--peers kernel)";
      }
      if (um_skipped.empty()) {
        if (tty) std::fprintf(stderr, "\r%s   ", label("unified memory").c_str());
        UnifiedMemoryOptions uo;
        uo.device_budget = b.frames * jo.page_bytes;
        uo.ordinal = tvmm::Config{}.cuda_device;  // the GPU the pager's runs use
        uo.iterations = jo.iterations;
        uo.warmup = jo.warmup;
        try {
          peer_set->unified_memory = run_unified_memory(w, uo);
          if (peer_set->unified_memory.mismatched_bytes != 0) {
            std::fprintf(stderr, "%stvmm-bench: %s: Unified Memory read %llu wrong bytes at %.2fx\n", tty ? "\n" : "",
                         w.name.c_str(), static_cast<unsigned long long>(peer_set->unified_memory.mismatched_bytes),
                         ratio);
            ++failures;
          }
        } catch (const std::exception& e) {
          peer_set->unified_memory.skipped = peer_failed("Unified Memory", e);
        }
      } else if (wants("um")) {
        ++done;
      }
      // The peers that run the pager verify their bytes too (with --verify): a wrong byte there fails the
      // run as one of a policy does.
      for (const auto& [who, run] :
           {std::pair{"naive", &peer_set->naive}, std::pair{"all-in-memory", &peer_set->all_in_memory},
            std::pair{"tvmm wall-clock", &peer_set->tvmm_wall}}) {
        if (!*run || (*run)->mismatched_bytes == 0) continue;
        std::fprintf(stderr, "%stvmm-bench: %s: the %s peer read %llu wrong bytes at %.2fx\n", tty ? "\n" : "",
                     w.name.c_str(), who, static_cast<unsigned long long>((*run)->mismatched_bytes), ratio);
        ++failures;
      }
      for (const auto& policy : policies) {
        auto po = jo;
        po.progress = label(policy);
        po.reference = ref_here ? &*ref_here : nullptr;
        if (!timeline.empty()) po.timeline = timeline_path(timeline, policy_runs == 1, w.name, ratio, policy);
        ResidencyTimeline tl{w.name, policy, ratio, {}};
        const bool sample = job.timeline && policy == "trace" && (ratio == 2.0 || job.ratios.size() == 1);
        try {
          auto r = run_pager(w, po, policy, ratio, sample ? &tl.residency : nullptr);
          if (r.mismatched_bytes != 0) ++failures;
          records.push_back({w.name, device, w.op_time, w.working_set_bytes(), b, jo.page_bytes, r, peer_set});
          if (sample) timelines.push_back(std::move(tl));
          if (!po.timeline.empty()) timelines_written.push_back(po.timeline);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%stvmm-bench: %s %s at %.2fx failed: %s\n", tty ? "\n" : "", w.name.c_str(),
                       policy.c_str(), ratio, e.what());
          ++failures;
        }
      }
    }
    if (ratios_run == 0 && !job.ratios.empty()) {  // nothing of this workload ran: say so, and fail
      refused.push_back(w.name + ": no ratio could run, so it has no results (" + refusals + ")");
      ++failures;
    }
  }
  if (tty) std::fprintf(stderr, "\r%80s\r", "");

  print_table(records);
  for (const auto& why : refused) std::fprintf(stderr, "tvmm-bench: %s\n", why.c_str());
  std::uint64_t verified = 0, mismatched = 0;
  for (const auto& r : records) {
    verified += r.result.verified_bytes;
    mismatched += r.result.mismatched_bytes;
  }
  if (verified != 0) {
    std::printf("verified %llu bytes read back through the pager with the %s pattern kernels: %s\n",
                static_cast<unsigned long long>(verified), device == "cuda" ? "GPU" : "CPU",
                mismatched == 0 ? "all correct" : (std::to_string(mismatched) + " bytes WRONG").c_str());
  }
  if (!json.empty() && !write_text(json, summary_json(records))) return 1;
  if (!out.empty()) {
    if (!write_outputs(out, records, timelines)) return 1;
    std::printf("results in %s/: summary.json, runs.csv, a CSV per workload, plots.gp and PNG plots\n", out.c_str());
  }
  for (const auto& t : timelines_written) std::printf("timeline (open it in ui.perfetto.dev): %s\n", t.c_str());
  return failures == 0 ? 0 : 1;
}
