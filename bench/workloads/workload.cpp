#include "bench/workloads/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

#include "tvmm/config.hpp"

namespace tvmm::bench {
namespace {
// The longest op, and step, replay models, in microseconds: the device clock counts nanoseconds in 64
// bits (292 years), over every iteration of a run.
constexpr double kMaxOpUs = 1e9;
constexpr double kMaxStepUs = 1e12;
}  // namespace

std::size_t Workload::total_bytes() const {
  return std::accumulate(tensor_bytes.begin(), tensor_bytes.end(), std::size_t{0});
}

std::size_t Workload::peak_live(std::size_t (*units)(std::size_t bytes, std::size_t unit), std::size_t unit) const {
  constexpr auto unseen = static_cast<std::size_t>(-1);
  std::vector<std::size_t> first(tensor_bytes.size(), unseen);
  std::vector<bool> discarded(tensor_bytes.size(), false);
  for (std::size_t k = 0; k < step.size(); ++k) {
    for (const auto& p : step[k].pins) first[p.tensor] = std::min(first[p.tensor], k);
    for (const auto t : step[k].discards) discarded[t] = true;
  }
  std::size_t always = 0;
  std::vector<std::ptrdiff_t> delta(step.size() + 1, 0);  // live units of discarded tensors, by kernel
  for (std::size_t t = 0; t < tensor_bytes.size(); ++t) {
    const auto n = units(tensor_bytes[t], unit);
    if (!discarded[t] || first[t] == unseen) {
      always += n;
      continue;
    }
    delta[first[t]] += static_cast<std::ptrdiff_t>(n);
  }
  for (std::size_t k = 0; k < step.size(); ++k) {
    for (const auto t : step[k].discards) delta[k + 1] -= static_cast<std::ptrdiff_t>(units(tensor_bytes[t], unit));
  }
  std::ptrdiff_t live = 0, peak = 0;
  for (const auto d : delta) peak = std::max(peak, live += d);
  return always + static_cast<std::size_t>(peak);
}

std::size_t Workload::working_set_bytes() const {
  return peak_live([](std::size_t bytes, std::size_t) { return bytes; }, 1);
}

double Workload::compute_us() const {
  double us = 0;
  for (const auto& k : step) us += k.compute_us;
  return us;
}

Workload make_train(std::size_t layers, std::size_t tensor_bytes, double compute_us) {
  enum { W, A, G, S };
  auto t = [](std::size_t layer, int kind) { return static_cast<std::uint32_t>(4 * layer + kind); };
  Workload w;
  w.name = "train";
  w.tensor_bytes.assign(4 * layers, tensor_bytes);
  for (std::size_t l = 0; l < layers; ++l)
    w.step.push_back({{{t(l, W), Access::read}, {t(l, A), Access::write}}, compute_us, {}});
  for (std::size_t l = layers; l-- > 0;) {
    w.step.push_back(
        {{{t(l, A), Access::read}, {t(l, W), Access::read}, {t(l, G), Access::write}}, 2 * compute_us, {}});
  }
  for (std::size_t l = 0; l < layers; ++l) {
    w.step.push_back({{{t(l, W), Access::read_write}, {t(l, G), Access::read}, {t(l, S), Access::read_write}},
                      0.5 * compute_us,
                      {}});
  }
  return w;
}

Workload make_infer(std::size_t layers, std::size_t weight_bytes, std::size_t activation_bytes, double compute_us) {
  Workload w;
  w.name = "infer";
  w.tensor_bytes.assign(layers, weight_bytes);
  const auto act0 = static_cast<std::uint32_t>(layers);
  w.tensor_bytes.push_back(activation_bytes);
  w.tensor_bytes.push_back(activation_bytes);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::uint32_t in = act0 + static_cast<std::uint32_t>(l % 2),
                        out = act0 + static_cast<std::uint32_t>(1 - l % 2);
    w.step.push_back(
        {{{static_cast<std::uint32_t>(l), Access::read}, {in, Access::read}, {out, Access::write}}, compute_us, {}});
  }
  return w;
}

Workload make_random(std::size_t tensors, std::size_t tensor_bytes, std::size_t accesses, double zipf_s,
                     double compute_us, std::uint64_t seed) {
  if (tensors == 0 || accesses == 0) throw std::invalid_argument("random workload: no tensors or no accesses");
  Workload w;
  w.name = zipf_s > 0 ? "random-zipf" : "random-uniform";
  w.tensor_bytes.assign(tensors, tensor_bytes);
  std::mt19937_64 rng(seed);
  std::vector<double> weights(tensors, 1.0);
  if (zipf_s > 0) {
    for (std::size_t i = 0; i < tensors; ++i) weights[i] = 1.0 / std::pow(static_cast<double>(i + 1), zipf_s);
    std::shuffle(weights.begin(), weights.end(), rng);  // hot tensors are not all neighbours
  }
  std::discrete_distribution<std::uint32_t> pick(weights.begin(), weights.end());
  constexpr std::size_t write_every = 4;  // a quarter of the accesses update what they read
  for (std::size_t a = 0; a < accesses; ++a) {
    const auto access = a % write_every == write_every - 1 ? Access::read_write : Access::read;
    w.step.push_back({{{pick(rng), access}}, compute_us, {}});
  }
  return w;
}

Workload make_scan(std::size_t tensors, std::size_t tensor_bytes, double compute_us) {
  Workload w;
  w.name = "scan";
  w.tensor_bytes.assign(tensors, tensor_bytes);
  for (std::size_t i = 0; i < tensors; ++i)
    w.step.push_back({{{static_cast<std::uint32_t>(i), Access::read}}, compute_us, {}});
  return w;
}

Workload make_replay(const Trace& trace, const std::string& name, double compute_scale, std::size_t min_bytes) {
  return make_replay(trace, name, OpTime{compute_scale, nullptr}, min_bytes);
}

Workload make_replay(const Trace& trace, const std::string& name, const OpTime& time, std::size_t min_bytes) {
  Workload w;
  w.name = name;
  if (time.gpu != nullptr) {
    w.op_time = time.gpu->name;
  } else {
    char scale[32];
    std::snprintf(scale, sizeof scale, "cpu x%g", time.cpu_scale);
    w.op_time = scale;
  }
  constexpr auto none = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> tensor_of(trace.storages.size(), none);
  for (std::size_t s = 0; s < trace.storages.size(); ++s) {
    if (trace.storages[s].bytes == 0 || trace.storages[s].bytes < min_bytes) continue;
    tensor_of[s] = static_cast<std::uint32_t>(w.tensor_bytes.size());
    w.tensor_bytes.push_back(trace.storages[s].bytes);
  }
  double carried_us = 0;  // time of ops that touched no kept storage, added to the next kernel
  double step_us = 0;
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const TraceOp& op = trace.ops[i];
    Kernel k;
    const double us = time.gpu != nullptr ? op_time_us(op, trace, *time.gpu) : op.time_us * time.cpu_scale;
    // The device clock counts whole nanoseconds in 64 bits: an op of 1e300 flops (or time) would wrap it.
    if (!(us <= kMaxOpUs)) {
      char what[160];
      std::snprintf(what, sizeof what, "%g us as modelled (%s)", us,
                    time.gpu != nullptr ? "its flops= and bytes= on the GPU profile" : "its time x --compute-scale");
      throw std::invalid_argument("trace " + name + ": op " + std::to_string(i + 1) + " of the trace (" + op.name +
                                  ") takes " + what +
                                  ", more than replay models (10^9 us, 1000 s per op); check its values");
    }
    k.compute_us = carried_us + us;
    step_us += us;
    auto add = [&](std::uint32_t storage, Access a) {
      const auto t = tensor_of[storage];
      if (t == none) return;
      for (auto& p : k.pins) {
        if (p.tensor == t) {
          if (p.access != a) p.access = Access::read_write;
          return;
        }
      }
      k.pins.push_back({t, a});
    };
    for (auto s : op.reads) add(s, Access::read);
    for (auto s : op.writes) add(s, Access::write);
    if (k.pins.empty()) {
      carried_us = k.compute_us;
      continue;
    }
    carried_us = 0;
    w.step.push_back(std::move(k));
  }
  if (!w.step.empty()) w.step.back().compute_us += carried_us;
  // Tensors first written whole in the step hold nothing the next step reads: dead after their last use.
  constexpr auto unseen = static_cast<std::size_t>(-1);
  std::vector<std::size_t> last(w.tensor_bytes.size(), unseen);
  std::vector<bool> born(w.tensor_bytes.size(), false);
  for (std::size_t k = 0; k < w.step.size(); ++k) {
    for (const auto& p : w.step[k].pins) {
      if (last[p.tensor] == unseen) born[p.tensor] = p.access == Access::write;
      last[p.tensor] = k;
    }
  }
  for (std::uint32_t t = 0; t < last.size(); ++t) {
    if (last[t] != unseen && born[t]) w.step[last[t]].discards.push_back(t);
  }
  if (!(step_us <= kMaxStepUs)) {
    char what[64];
    std::snprintf(what, sizeof what, "%g us", step_us);
    throw std::invalid_argument("trace " + name + ": its ops take " + what +
                                " per step as modelled, more than replay models (10^12 us); check their values");
  }
  if (w.step.empty() && trace.ops.empty())
    throw std::invalid_argument("trace " + name + " has no op; nothing to replay");
  if (w.step.empty()) {
    throw std::invalid_argument("trace " + name + ": no op touches a storage of at least " + format_bytes(min_bytes) +
                                " (--min-mib leaves smaller ones out); nothing to replay");
  }
  return w;
}

}  // namespace tvmm::bench
