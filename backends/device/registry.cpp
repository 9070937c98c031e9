#include "backends/device/registry.hpp"

#include <array>
#include <string>

#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif
#include "backends/device/sim/sim_device.hpp"
#include "common/registry.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::device {

namespace {

std::unique_ptr<DeviceBackend> make_sim(const Config& config) {
  return std::make_unique<SimDevice>(config.sim, config.device_budget);
}

std::unique_ptr<DeviceBackend> make_cuda(const Config& config) {
#if defined(TVMM_HAVE_CUDA)
  return make_cuda_device(config.cuda_device, config.gpu_direct_rdma, config.bus_bytes_per_s);
#else
  (void)config;
  throw device_error(
      "device.backend = \"cuda\": this build of tvmm has no CUDA backend (cuda.h was not found when it was "
      "built); install the CUDA toolkit and rebuild",
      "not_supported");
#endif
}

// One line per backend: name, summary, needs a GPU, factory.
constexpr std::array kBackends{
    DeviceBackendInfo{"sim", "the simulated GPU", false, &make_sim},
    DeviceBackendInfo{"cuda", "an NVIDIA GPU through the driver, loaded at run time", true, &make_cuda},
};

}  // namespace

std::span<const DeviceBackendInfo> device_backends() noexcept { return kBackends; }

const DeviceBackendInfo* find_device_backend(std::string_view name) noexcept {
  return common::find_by_name(device_backends(), name);
}

}  // namespace tvmm::device
