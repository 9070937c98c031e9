#pragma once
// The one list of tvmm-bench's workloads (bench/workloads/registry.cpp): each a name, a one-line
// summary, whether it replays a trace file, and how it is built from the sizes. `--workload`'s choices
// and help, and the suites, read it. A new workload is a make_<name> in workload.{hpp,cpp} plus one
// line there.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "bench/workloads/workload.hpp"

namespace tvmm::bench {

//! The sizes the synthetic workloads take (per suite, or from the command line), and how a replay
//! times its ops.
struct WorkloadSizes {
  std::size_t layers = 8;      // train, infer
  std::size_t tensor_mib = 8;  // train, infer, random, scan
  std::size_t tensors = 64;    // random, scan
  std::size_t accesses = 128;  // random: pins per iteration
  double zipf = 0;             // random: Zipf skew (0 = uniform)
  double compute_us = 2000;
  double compute_scale = 0.02;        // replay with op_time "cpu": recorded CPU op time x this
  std::size_t min_mib = 1;            // replay: storages below are left out (tvmm's small-object arena)
  std::string op_time = "h100-pcie";  // replay: a GPU profile (gpu_profile.hpp), or "cpu"
};

struct WorkloadInfo {
  std::string_view name;     //!< `--workload` value
  std::string_view summary;  //!< for --help
  bool needs_trace;          //!< replays a trace file (--trace)
  //! Builds it; `trace_path` is the trace file for a workload that needs one. Throws on a bad trace.
  Workload (*make)(const WorkloadSizes& sizes, const std::string& trace_path);
};

//! Every workload, in `--help` order.
std::span<const WorkloadInfo> workloads() noexcept;
//! The workload named `name`, or null.
const WorkloadInfo* find_workload(std::string_view name) noexcept;
//! `s` with every character but letters, digits and . _ + - replaced by '_': a trace's model name or
//! file name becomes part of workload names, file names, CSV fields and gnuplot strings.
std::string name_part(std::string s);
//! A trace file's name without its directory and its .gz and .trace endings, as name_part makes it.
std::string trace_stem(const std::string& path);

}  // namespace tvmm::bench
