#include "bench/workloads/registry.hpp"

#include <filesystem>

#include "bench/traces/trace_format.hpp"
#include "bench/workloads/gpu_profile.hpp"
#include "common/registry.hpp"
#include "tvmm/config.hpp"

namespace tvmm::bench {

namespace {

constexpr std::size_t kMiB = tvmm::MiB;

Workload train(const WorkloadSizes& s, const std::string&) {
  return make_train(s.layers, s.tensor_mib * kMiB, s.compute_us);
}
Workload infer(const WorkloadSizes& s, const std::string&) {
  return make_infer(s.layers, s.tensor_mib * kMiB, 2 * kMiB, s.compute_us);
}
Workload random(const WorkloadSizes& s, const std::string&) {
  return make_random(s.tensors, s.tensor_mib * kMiB, s.accesses, s.zipf, s.compute_us);
}
Workload scan(const WorkloadSizes& s, const std::string&) {
  return make_scan(s.tensors, s.tensor_mib * kMiB, s.compute_us);
}
Workload replay(const WorkloadSizes& s, const std::string& trace_path) {
  const auto trace = read_trace(trace_path);
  const auto model = trace.meta.count("model") && !trace.meta.at("model").empty() ? name_part(trace.meta.at("model"))
                                                                                  : trace_stem(trace_path);
  const OpTime time{s.compute_scale, s.op_time == "cpu" ? nullptr : &gpu_profile(s.op_time)};
  return make_replay(trace, "replay:" + model, time, s.min_mib * kMiB);
}

constexpr WorkloadInfo kWorkloads[] = {
    {"train", "a training loop", false, train},
    {"infer", "weight streaming", false, infer},
    {"random", "uniform, or Zipf with --zipf", false, random},
    {"scan", "sequential", false, scan},
    {"replay", "a model trace, --trace", true, replay},
};

}  // namespace

std::span<const WorkloadInfo> workloads() noexcept { return kWorkloads; }

const WorkloadInfo* find_workload(std::string_view name) noexcept { return common::find_by_name(workloads(), name); }

std::string name_part(std::string s) {
  for (auto& c : s) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '+' || c == '-';
    if (!plain) c = '_';
  }
  return s.empty() ? "_" : s;
}

std::string trace_stem(const std::string& path) {
  std::string s = std::filesystem::path(path).filename().string();
  for (const std::string end : {".gz", ".trace"}) {
    if (s.size() > end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0)
      s.resize(s.size() - end.size());
  }
  return name_part(s);
}

}  // namespace tvmm::bench
