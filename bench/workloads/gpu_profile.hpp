#pragma once
// Named GPUs for modelling an operator's time on a GPU from what it computes and touches (a roofline),
// and the host bus that goes with each. Replay (workload.hpp) uses them instead of the CPU times a trace
// recorded; the figures are the vendors' published peaks (docs/benchmarks.md cites them).

#include <string>
#include <vector>

#include "bench/traces/trace_format.hpp"

namespace tvmm::bench {

struct GpuProfile {
  std::string name;         //!< what --op-time names it: "h100-pcie", ...
  std::string description;  //!< for people
  double matmul_flops = 0;  //!< FLOP/s of matrix products and convolutions (TF32 tensor cores, dense)
  double other_flops = 0;   //!< FLOP/s of everything else (FP32)
  double memory_bytes_per_s = 0;
  double bus_bytes_per_s = 0;  //!< the host link, per direction (what a pinned copy reaches)
  double launch_us = 0;        //!< each kernel's fixed cost on the device
};

//! Every profile, in the order docs/benchmarks.md lists them.
[[nodiscard]] const std::vector<GpuProfile>& gpu_profiles();
//! The profile named `name`; std::invalid_argument listing the names otherwise.
[[nodiscard]] const GpuProfile& gpu_profile(const std::string& name);

//! An operator's time on `gpu`, in microseconds: max(flops / peak, bytes / memory bandwidth) plus the
//! launch cost, the peak being the matrix one for matrix products and convolutions (their names say
//! so: mm, addmm, bmm, baddbmm, convolution...). An operator that computes and touches nothing (a view,
//! a detach) launches no kernel and takes 0. A version 1 trace has no costs: the bytes are those of the
//! storages the operator read and wrote (more than a slice touches), the flops 0, and an operator that
//! writes nothing is a view.
[[nodiscard]] double op_time_us(const TraceOp& op, const Trace& trace, const GpuProfile& gpu);

}  // namespace tvmm::bench
