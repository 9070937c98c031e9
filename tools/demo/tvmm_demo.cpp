// tvmm-demo: a training-like sweep over tensors several times larger than the (simulated) device.
//
// Each layer has weights, activations and gradients. Forward reads weights and writes activations;
// backward re-reads activations in reverse, writes gradients and updates weights. Every tensor is
// touched through stream-ordered pins by "kernels" that verify what they read and write a seeded
// pattern, so every byte the pager moves is checked. Ends with "verified N bytes ..." and exits 1 if
// any byte differs.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/pattern.hpp"
#include "tvmm/tvmm.hpp"

namespace {

struct Options {
  std::size_t device_mib = 64;
  std::size_t layers = 12;
  std::size_t tensor_mib = 8;
  int iterations = 2;
  double bandwidth_gbs = 0.0;  // 0 = unthrottled
};

[[noreturn]] void usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: tvmm-demo [--quick] [--device-mib N] [--layers N] [--tensor-mib N] [--iterations N]\n"
               "                 [--bandwidth-gbs X]\n"
               "Runs a forward/backward sweep on the simulated GPU over 3 tensors per layer (weights,\n"
               "activations, gradients) totalling several times the device budget, verifying every byte.\n"
               "  --quick           a small run (16 MiB device, 6 layers of 4 MiB tensors, 1 iteration)\n"
               "  --device-mib N    device budget in MiB (default 64)\n"
               "  --layers N        layers (default 12)\n"
               "  --tensor-mib N    size of each tensor in MiB (default 8)\n"
               "  --iterations N    training iterations (default 2)\n"
               "  --bandwidth-gbs X model a bus of X GB/s per direction (default: unthrottled)\n"
               "environment: TVMM_STATS=FILE writes the final stats as JSON (read it with `tvmm stats FILE`),\n"
               "  TVMM_TRACE=FILE an event trace for Perfetto (ui.perfetto.dev)\n");
  std::exit(code);
}

double parse_number(const char* flag, const char* value, double min) {
  char* end = nullptr;
  const double v = value != nullptr ? std::strtod(value, &end) : 0.0;
  if (value == nullptr || end == value || *end != '\0' || v < min) {
    std::fprintf(stderr, "tvmm-demo: %s needs a number >= %g, got '%s'\n", flag, min, value ? value : "");
    usage(2);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") usage(0);
    if (a == "--quick") {
      o.device_mib = 16;
      o.layers = 6;
      o.tensor_mib = 4;
      o.iterations = 1;
      continue;
    }
    if (a == "--device-mib")
      o.device_mib = static_cast<std::size_t>(parse_number(a.c_str(), next, 2));
    else if (a == "--layers")
      o.layers = static_cast<std::size_t>(parse_number(a.c_str(), next, 1));
    else if (a == "--tensor-mib")
      o.tensor_mib = static_cast<std::size_t>(parse_number(a.c_str(), next, 1));
    else if (a == "--iterations")
      o.iterations = static_cast<int>(parse_number(a.c_str(), next, 1));
    else if (a == "--bandwidth-gbs")
      o.bandwidth_gbs = parse_number(a.c_str(), next, 0);
    else {
      std::fprintf(stderr, "tvmm-demo: unknown option '%s'\n", a.c_str());
      usage(2);
    }
    ++i;
  }
  return o;
}

// Seeds: one pattern per (tensor kind, layer, iteration).
std::uint64_t seed(int kind, std::size_t layer, int iteration) {
  return (static_cast<std::uint64_t>(kind) << 56) ^ (static_cast<std::uint64_t>(layer) << 24) ^
         static_cast<std::uint64_t>(iteration + 1);
}
constexpr int kWeights = 1, kActivations = 2, kGradients = 3;

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  tvmm::Config cfg;
  cfg.device_backend = "sim";
  cfg.device_budget = o.device_mib * tvmm::MiB;
  const std::size_t tensor_bytes = o.tensor_mib * tvmm::MiB;
  const std::size_t total = 3 * o.layers * tensor_bytes;
  cfg.host_budget = total + tvmm::MiB * 8;  // every tensor fits on the host, plus the swap page
  cfg.sim.bandwidth_bytes_per_s = o.bandwidth_gbs * 1e9;
  const bool progress = ::isatty(STDERR_FILENO) != 0;

  try {
    // Observability, read as everywhere in tvmm (TVMM_STATS / TVMM_STATS_FILE, TVMM_TRACE /
    // TVMM_TRACE_EVENTS, {rank} substituted); the demo's budgets stay its own.
    tvmm::Config env;
    tvmm::apply_environment(env);
    cfg.stats_file = env.stats_file;
    cfg.trace_events = env.trace_events;
    tvmm::Pager pager(cfg);
    const auto page = pager.config().page_size;
    std::printf("tvmm demo on the %s device: page %s, device budget %s, host budget %s\n", pager.backend_name(),
                tvmm::format_bytes(page).c_str(), tvmm::format_bytes(pager.config().device_budget).c_str(),
                tvmm::format_bytes(pager.config().host_budget).c_str());
    std::printf("%zu layers x 3 tensors (weights, activations, gradients) of %s = %s, %.1fx the device budget\n",
                o.layers, tvmm::format_bytes(tensor_bytes).c_str(), tvmm::format_bytes(total).c_str(),
                static_cast<double>(total) / static_cast<double>(pager.config().device_budget));

    std::vector<tvmm::Tensor> w, act, grad;
    for (std::size_t l = 0; l < o.layers; ++l) {
      w.push_back(pager.allocate(tensor_bytes, {"w" + std::to_string(l)}));
      act.push_back(pager.allocate(tensor_bytes, {"act" + std::to_string(l)}));
      grad.push_back(pager.allocate(tensor_bytes, {"grad" + std::to_string(l)}));
    }
    for (std::size_t l = 0; l < o.layers; ++l) {
      auto pin = w[l].pin(tvmm::Access::write);
      tvmm::kernels::fill_pattern(pin.data(), tensor_bytes, seed(kWeights, l, 0));
    }

    auto stream = pager.create_stream();
    std::atomic<std::uint64_t> bad{0}, checked{0};
    auto verify = [&](const void* p, std::size_t n, std::uint64_t s) {
      bad += tvmm::kernels::count_mismatches(p, n, s);
      checked += n;
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o.iterations; ++it) {
      // Forward: read weights, write activations.
      for (std::size_t l = 0; l < o.layers; ++l) {
        auto pw = w[l].pin(stream, tvmm::Access::read);
        auto pa = act[l].pin(stream, tvmm::Access::write);
        stream.launch([&, wp = pw.data(), ap = pa.data(), l, it] {
          verify(wp, tensor_bytes, seed(kWeights, l, it));
          tvmm::kernels::fill_pattern(ap, tensor_bytes, seed(kActivations, l, it));
        });
      }
      // Backward, in reverse: read activations, write gradients, update weights.
      for (std::size_t l = o.layers; l-- > 0;) {
        auto pa = act[l].pin(stream, tvmm::Access::read);
        auto pg = grad[l].pin(stream, tvmm::Access::write);
        auto pw = w[l].pin(stream, tvmm::Access::read_write);
        stream.launch([&, ap = pa.data(), gp = pg.data(), wp = pw.data(), l, it] {
          verify(ap, tensor_bytes, seed(kActivations, l, it));
          verify(wp, tensor_bytes, seed(kWeights, l, it));
          tvmm::kernels::fill_pattern(gp, tensor_bytes, seed(kGradients, l, it));
          tvmm::kernels::fill_pattern(wp, tensor_bytes, seed(kWeights, l, it + 1));
        });
      }
      stream.synchronize();
      if (progress) std::fprintf(stderr, "\riteration %d/%d done", it + 1, o.iterations);
    }
    if (progress) std::fprintf(stderr, "\n");
    // Final read-back of every tensor through host pins.
    for (std::size_t l = 0; l < o.layers; ++l) {
      {
        auto p = w[l].pin(tvmm::Access::read);
        verify(p.data(), tensor_bytes, seed(kWeights, l, o.iterations));
      }
      {
        auto p = act[l].pin(tvmm::Access::read);
        verify(p.data(), tensor_bytes, seed(kActivations, l, o.iterations - 1));
      }
      {
        auto p = grad[l].pin(tvmm::Access::read);
        verify(p.data(), tensor_bytes, seed(kGradients, l, o.iterations - 1));
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto s = pager.stats();
    std::printf("\n%-18s %10s %12s\n", "traffic", "pages", "bytes");
    std::printf("%-18s %10llu %12s\n", "host -> device", static_cast<unsigned long long>(s.host_to_device.pages),
                tvmm::format_bytes(s.host_to_device.bytes).c_str());
    std::printf("%-18s %10llu %12s\n", "device -> host", static_cast<unsigned long long>(s.device_to_host.pages),
                tvmm::format_bytes(s.device_to_host.bytes).c_str());
    std::printf("%-18s %10s %12s\n", "device peak", "", tvmm::format_bytes(s.device_peak_bytes).c_str());
    std::printf("%-18s %10s %12s\n", "host peak", "", tvmm::format_bytes(s.host_peak_bytes).c_str());
    std::printf(
        "\npins %llu, page hits %llu, misses %llu, hit rate %.1f%%, evictions %llu, pin stall %.1f ms, "
        "%.2f s\n",
        static_cast<unsigned long long>(s.pins), static_cast<unsigned long long>(s.hits),
        static_cast<unsigned long long>(s.misses), 100.0 * s.hit_rate(), static_cast<unsigned long long>(s.evictions),
        static_cast<double>(s.stall_ns) / 1e6, secs);
    if (bad.load() != 0) {
      std::printf("verified %llu bytes: %llu bytes differ (FAILED)\n", static_cast<unsigned long long>(checked.load()),
                  static_cast<unsigned long long>(bad.load()));
      return 1;
    }
    std::printf("verified %llu bytes (%s): all correct\n", static_cast<unsigned long long>(checked.load()),
                tvmm::format_bytes(checked.load()).c_str());
    return 0;
  } catch (const tvmm::error& e) {
    std::fprintf(stderr, "tvmm-demo: %s\n", e.what());
    return 1;
  }
}
