#pragma once
// The workloads of tvmm-bench, each as the same thing: a set of tensors and the kernels of one
// iteration, each kernel pinning some of them and then computing for a modelled time. Every peer
// (tvmm's policies, naive swapping, the kernel as pager, the bounds) runs the same Workload.

#include <cstdint>
#include <string>
#include <vector>

#include "bench/traces/trace_format.hpp"
#include "bench/workloads/gpu_profile.hpp"
#include "tvmm/tvmm.hpp"

namespace tvmm::bench {

struct KernelPin {
  std::uint32_t tensor = 0;
  Access access = Access::read;
  bool operator==(const KernelPin&) const = default;
};

struct Kernel {
  std::vector<KernelPin> pins;  //!< pinned together, in this order, before the kernel runs
  double compute_us = 0;
  //! Tensors whose contents are dead once this kernel has run (the program frees them; the next
  //! iteration writes them afresh): discarded after the kernel is queued.
  std::vector<std::uint32_t> discards;
};

struct Workload {
  std::string name;  //!< "train", "infer", "random-uniform", "replay:resnet18", ...
  //! Where its kernels' times come from: "set" (the synthetic workloads' parameters), "cpu x0.02" (a
  //! trace's CPU times, scaled) or a GPU profile's name (a trace's ops' roofline times on that GPU).
  std::string op_time = "set";
  std::vector<std::size_t> tensor_bytes;  //!< allocated once, before the first iteration
  std::vector<Kernel> step;               //!< one iteration, run again every iteration
  [[nodiscard]] std::size_t total_bytes() const;
  //! The working set: the most tensor units live at once, a tensor counting `units(bytes)`. A tensor
  //! some kernel discards is live from its first use in the step to its last; the others always are.
  //! Without discards this is the sum over all tensors.
  [[nodiscard]] std::size_t peak_live(std::size_t (*units)(std::size_t bytes, std::size_t unit),
                                      std::size_t unit) const;
  [[nodiscard]] std::size_t working_set_bytes() const;
  [[nodiscard]] double compute_us() const;
};

//! The synthetic training loop: per layer a weight, activation, gradient and optimizer-state tensor;
//! forward reads weights and writes activations, backward (in reverse) reads activations and
//! weights and writes gradients (2x the compute), the optimizer step updates weights and state (0.5x).
Workload make_train(std::size_t layers, std::size_t tensor_bytes, double compute_us);

//! Layer-by-layer weight streaming, as in LLM offload inference: `layers` weight tensors larger in
//! total than the device, each read once per iteration (one forward pass), with two small
//! activation buffers written and read in turn. Read-mostly.
Workload make_infer(std::size_t layers, std::size_t weight_bytes, std::size_t activation_bytes, double compute_us);

//! `accesses` pins per iteration of `tensors` one-page tensors chosen at random, uniformly or with
//! Zipf skew `zipf_s` (> 0; tensor i has weight 1 / (i+1)^s, shuffled so hot tensors are spread
//! out); every `write_every`th access writes (0 = read only). A fixed seed: the same sequence each
//! iteration (a recurring batch of lookups), so a recorded trace can predict it.
Workload make_random(std::size_t tensors, std::size_t tensor_bytes, std::size_t accesses, double zipf_s,
                     double compute_us, std::uint64_t seed = 42);

//! A sequential scan: `tensors` tensors read one after another, every iteration in the same order.
Workload make_scan(std::size_t tensors, std::size_t tensor_bytes, double compute_us);

//! A model trace: one tensor per storage, one kernel per op that touches storages (read, write, or
//! read_write when it does both), modelled compute = the recorded time x `compute_scale` (or, below, the
//! op's time on a GPU). Storages
//! smaller than `min_bytes` are dropped (tvmm keeps such tensors resident in its small-object arena;
//! their time still counts). Ops with no storages left add their time to the next kernel. A storage
//! whose first access in the step is a pure write (an activation, a temporary) is discarded after the
//! last kernel that uses it, as the program frees it then.
Workload make_replay(const Trace& trace, const std::string& name, double compute_scale, std::size_t min_bytes);

//! How replay models an operator's time: the trace's CPU time x `cpu_scale`, or with `gpu` set its
//! roofline time on that GPU (op_time_us in gpu_profile.hpp).
struct OpTime {
  double cpu_scale = 0.02;
  const GpuProfile* gpu = nullptr;
};
Workload make_replay(const Trace& trace, const std::string& name, const OpTime& time, std::size_t min_bytes);

}  // namespace tvmm::bench
