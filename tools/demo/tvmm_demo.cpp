// tvmm-demo: the story in a few lines. One training loop whose tensors are several times the (simulated)
// device, run four ways on the same modelled GPU, bus and driver (its mapping, event and copy calls cost
// the host what an H200's did, as in tvmm-bench): all in device memory (what no pager can beat), under tvmm's
// default policy, under tvmm with the loop's recorded trace (prefetch and next-use eviction), and with
// naive swapping (the same pager with nothing overlapped). It prints the step times side by side, then
// runs every configuration again writing and checking every byte through the pager, and ends with
// "verified N bytes ...: all correct" (exit 1 if any byte differs).
//
// The workload and the runs are tvmm-bench's (bench/workloads): the `train` workload (per layer weights,
// activations, gradients and optimizer state; forward, backward, update) and run_pager.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/workloads/runner.hpp"
#include "bench/workloads/workload.hpp"
#include "tvmm/tvmm.hpp"

namespace {

struct Options {
  std::size_t layers = 12;
  std::size_t tensor_mib = 8;
  double ratio = 3;
  int iterations = 4;
  double bus_gbs = 25;      // a PCIe 4.0 x16 link, per direction
  double compute_us = 600;  // a forward kernel; backward takes twice, the update half
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code == 0 ? stdout : stderr,
      "usage: tvmm-demo [--quick] [--layers N] [--tensor-mib N] [--ratio X] [--iterations N]\n"
      "                 [--bus-gbs X] [--compute-us X]\n"
      "Runs one training loop whose tensors are X times the simulated device's memory four ways (all\n"
      "in device memory, tvmm's default policy, tvmm with the recorded trace, naive swapping), prints\n"
      "their step times, then checks every byte each of them moved.\n"
      "  --quick           a small run (6 layers of 4 MiB tensors, 3 iterations; the options above change it)\n"
      "  --layers N        layers, each with 4 tensors (default 12; 1 to 1000)\n"
      "  --tensor-mib N    size of each tensor in MiB (default 8; 1 to 4096)\n"
      "  --ratio X         tensors / device memory (default 3; 1 to 64)\n"
      "  --iterations N    training iterations per run, the first not measured (default 4; 2 to 1000)\n"
      "  --bus-gbs X       the bus between device and host, GB/s per direction (default 25; 0.1 to 1000)\n"
      "  --compute-us X    a forward kernel's time in microseconds (default 600; 0 to 1e7)\n"
      "environment: TVMM_STATS=FILE writes the default-policy run's final stats as JSON (read it with\n"
      "  `tvmm stats FILE`), TVMM_TIMELINE=FILE its timeline for Perfetto (ui.perfetto.dev)\n");
  std::exit(code);
}

// A number from `min` to `max` (a whole one where `whole`); anything else is a usage error, before
// the cast to the option's type (1e30 layers became 0, and 2^31 iterations a negative count).
double parse_number(const char* flag, const char* value, double min, double max, bool whole = false) {
  char* end = nullptr;
  const double v = value != nullptr ? std::strtod(value, &end) : 0.0;
  if (value == nullptr || end == value || *end != '\0' || !(v >= min && v <= max) || (whole && v != std::floor(v))) {
    std::fprintf(stderr, "tvmm-demo: %s needs %s from %g to %g, got '%s'\n", flag,
                 whole ? "a whole number" : "a number", min, max, value ? value : "");
    usage(2);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  // --quick first, wherever it is: options given with it change its small run, in any order.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") o.layers = 6, o.tensor_mib = 4, o.iterations = 3;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") usage(0);
    if (a == "--quick") continue;
    if (a == "--layers")
      o.layers = static_cast<std::size_t>(parse_number(a.c_str(), next, 1, 1000, true));
    else if (a == "--tensor-mib")
      o.tensor_mib = static_cast<std::size_t>(parse_number(a.c_str(), next, 1, 4096, true));
    else if (a == "--ratio")
      o.ratio = parse_number(a.c_str(), next, 1, 64);
    else if (a == "--iterations")
      o.iterations = static_cast<int>(parse_number(a.c_str(), next, 2, 1000, true));
    else if (a == "--bus-gbs")
      o.bus_gbs = parse_number(a.c_str(), next, 0.1, 1000);
    else if (a == "--compute-us")
      o.compute_us = parse_number(a.c_str(), next, 0, 1e7);
    else {
      std::fprintf(stderr, "tvmm-demo: unknown option '%s'\n", a.c_str());
      usage(2);
    }
    ++i;
  }
  return o;
}

struct Way {
  const char* label;
  const char* policy;  // run_pager's: lru (tvmm's default eviction), trace, naive
  double ratio;        // 1: the device holds everything
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  using tvmm::bench::RunOptions;
  using tvmm::bench::RunResult;
  const auto w = tvmm::bench::make_train(opt.layers, opt.tensor_mib * tvmm::MiB, opt.compute_us);
  RunOptions o;
  o.iterations = opt.iterations;
  o.warmup = 1;
  o.bus_gbs = opt.bus_gbs;
  o.timing = "model";  // the schedule the pager produces, free of this machine's noise
  o.vmm_costs = true;  // the driver's calls cost the host what an H200's did, as in tvmm-bench
  tvmm::Config env;    // TVMM_STATS and TVMM_TIMELINE, read as everywhere in tvmm
  tvmm::apply_environment(env);
  const Way ways[] = {
      {"all in device memory (the bound)", "lru", 1.0},
      {"tvmm, default policy (LRU)", "lru", opt.ratio},
      {"tvmm, recorded trace (prefetch)", "trace", opt.ratio},
      {"naive swapping (nothing overlapped)", "naive", opt.ratio},
  };
  const bool progress = ::isatty(STDERR_FILENO) != 0;
  try {
    const auto b = tvmm::bench::budgets_for(w, o, opt.ratio);
    const std::size_t total = w.working_set_bytes();
    std::printf(
        "tvmm demo: a training loop of %zu layers (weights, activations, gradients, optimizer state of %s "
        "each: %s)\n",
        opt.layers, tvmm::format_bytes(opt.tensor_mib * tvmm::MiB).c_str(), tvmm::format_bytes(total).c_str());
    std::printf(
        "on a simulated GPU with %s of memory (%.1fx oversubscribed) and a %.0f GB/s bus each way; its\n"
        "driver's calls take the host time an H200's took; host memory holds the rest\n\n",
        tvmm::format_bytes(b.frames * o.page_bytes).c_str(), opt.ratio, opt.bus_gbs);
    std::printf("%-38s %10s %18s %16s\n", "", "step time", "vs all in memory", "moved per step");
    double bound = 0;
    for (const Way& way : ways) {
      auto run = o;
      if (way.ratio == 1.0) {
        run.host_fraction = 0;
        run.whole_workload = true;  // a frame for every page: nothing ever moves
      }
      if (std::strcmp(way.policy, "lru") == 0 && way.ratio != 1.0) {
        run.stats_file = env.stats_file;
        run.timeline = env.timeline_file;
      }
      if (progress) run.progress = way.label;
      const RunResult r = tvmm::bench::run_pager(w, run, way.policy, way.ratio);
      if (bound == 0) bound = r.step_time_s;
      std::printf("%-38s %7.2f ms %17.2fx %16s\n", way.label, r.step_time_s * 1e3, r.step_time_s / bound,
                  tvmm::format_bytes(static_cast<std::size_t>(r.bytes_moved)).c_str());
    }
    std::printf(
        "(step time: the simulator's model of the device; the first iteration, which records the trace, "
        "is not measured)\n\n");
    // Again, every byte written with a pattern and checked when read back, in every configuration.
    std::uint64_t verified = 0, wrong = 0;
    for (const Way& way : ways) {
      auto run = o;
      run.verify = true;
      run.iterations = 2;
      if (way.ratio == 1.0) run.host_fraction = 0;
      if (progress) run.progress = std::string("checking: ") + way.label;
      const RunResult r = tvmm::bench::run_pager(w, run, way.policy, way.ratio);
      verified += r.verified_bytes;
      wrong += r.mismatched_bytes;
    }
    if (progress) std::fprintf(stderr, "\r%80s\r", "");
    if (wrong != 0) {
      std::printf("verified %llu bytes: %llu bytes differ (FAILED)\n", static_cast<unsigned long long>(verified),
                  static_cast<unsigned long long>(wrong));
      return 1;
    }
    std::printf("verified %llu bytes (%s) written and read back through the pager in the four runs: all correct\n",
                static_cast<unsigned long long>(verified), tvmm::format_bytes(verified).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmm-demo: %s\n", e.what());
    return 1;
  }
}
