#include "bench/workloads/gpu_profile.hpp"

#include <algorithm>
#include <stdexcept>

namespace tvmm::bench {

const std::vector<GpuProfile>& gpu_profiles() {
  // NVIDIA's datasheets (H100 Tensor Core GPU, 2023; A100 Tensor Core GPU, 2021): TF32 tensor-core and
  // FP32 peaks (the sparse TF32 figures halved: traces are dense), memory bandwidth. The host link: PCIe
  // 5.0 x16 carries 64 GB/s per direction and 4.0 x16 32 GB/s; a pinned copy reaches about 80% of it.
  static const std::vector<GpuProfile> profiles = {
      {"h100-sxm", "H100 SXM5 80 GB, HBM3, PCIe 5.0 x16 to the host", 494.7e12, 66.9e12, 3.35e12, 50e9, 2.0},
      {"h100-pcie", "H100 PCIe 80 GB, HBM2e, PCIe 5.0 x16", 378e12, 51.2e12, 2.0e12, 50e9, 2.0},
      {"a100-sxm", "A100 SXM4 80 GB, HBM2e, PCIe 4.0 x16 to the host", 156e12, 19.5e12, 2.039e12, 25e9, 2.0},
      {"a100-pcie", "A100 PCIe 80 GB, HBM2e, PCIe 4.0 x16", 156e12, 19.5e12, 1.935e12, 25e9, 2.0},
  };
  return profiles;
}

const GpuProfile& gpu_profile(const std::string& name) {
  std::string names;
  for (const auto& p : gpu_profiles()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  throw std::invalid_argument("no GPU profile \"" + name + "\": choose one of " + names + " (or cpu)");
}

namespace {
// Matrix products and convolutions, by their aten names ("aten::addmm.default", "aten::convolution_backward").
bool matrix_op(const std::string& name) {
  const auto op = name.substr(name.rfind(':') + 1);
  const auto base = op.substr(0, op.find('.'));
  static const char* const kMatrix[] = {"mm",
                                        "addmm",
                                        "bmm",
                                        "baddbmm",
                                        "matmul",
                                        "linear",
                                        "addbmm",
                                        "convolution",
                                        "convolution_backward",
                                        "_convolution",
                                        "cudnn_convolution",
                                        "mkldnn_convolution",
                                        "_scaled_dot_product_attention"};
  return std::any_of(std::begin(kMatrix), std::end(kMatrix), [&](const char* m) { return base == m; });
}
}  // namespace

double op_time_us(const TraceOp& op, const Trace& trace, const GpuProfile& gpu) {
  double flops = 0, bytes = 0;
  if (op.flops >= 0 || op.bytes >= 0) {
    flops = std::max(0.0, op.flops);
    bytes = std::max(0.0, op.bytes);
  } else {  // version 1: what the storages say
    if (op.writes.empty()) return 0;
    for (const auto s : op.reads) bytes += static_cast<double>(trace.storages[s].bytes);
    for (const auto s : op.writes) bytes += static_cast<double>(trace.storages[s].bytes);
  }
  if (flops == 0 && bytes == 0) return 0;
  const double peak = matrix_op(op.name) ? gpu.matmul_flops : gpu.other_flops;
  return std::max(flops / peak, bytes / gpu.memory_bytes_per_s) * 1e6 + gpu.launch_us;
}

}  // namespace tvmm::bench
