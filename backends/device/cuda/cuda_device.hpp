#pragma once
// The CUDA driver backend on the VMM API (see device_backend.hpp for the contract):
// The contract's checks and error codes come from the same bookkeeping as the simulator's (VmmBookkeeping),
// made before each driver call, so the backends agree whatever the driver would return.
//   reserve       cuMemAddressReserve, aligned to the allocation granularity
//   create_chunk  cuMemCreate (pinned, on the device); the pager creates its frames once at start
//   map/unmap     cuMemMap / cuMemUnmap; set_access is cuMemSetAccess over the whole run it is given
//                 (the transfer engine batches contiguous pages into one run)
//   streams       non-blocking cuStreams; copies cuMemcpyHtoDAsync / cuMemcpyDtoHAsync; host callables
//                 cuLaunchHostFunc; events cuEvent*, blocking-sync (host waits sleep), timed only
//                 when created for timing
//   host memory   register_host = cuMemHostRegister (the pager binds the frames to a NUMA node first)
// Every call makes the device's primary context current for its length and then restores the caller's
// (push/pop; nothing changes when it is current already), so tvmm never changes a program's current
// context. The driver is reached only through an Api table (cuda_api.hpp), so a fake can drive it.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backends/device/bus_backlog.hpp"
#include "backends/device/cuda/cuda_api.hpp"
#include "backends/device/device_backend.hpp"
#include "backends/device/vmm_bookkeeping.hpp"

namespace tvmm::device {

class CudaDevice final : public DeviceBackend {
 public:
  //! Opens device `ordinal` (-1: the current context's device, else 0) through `api`. Throws tvmm::device_error naming
  //! the failing call when the driver has no such device or the device lacks virtual memory management.
  //! With `gpu_direct_rdma`, device chunks are created GPUDirect-RDMA capable; a device that cannot is
  //! a tvmm::device_error. `bus_bytes_per_s`: the speed device-to-host copies reach over the link to
  //! the host, which d2h_backlog() counts with; 0 = the PCIe link's, as sysfs describes it
  //! (pcie_copy_bytes_per_s), and none where it does not.
  CudaDevice(std::shared_ptr<const cuda::Api> api, int ordinal, bool gpu_direct_rdma = false,
             double bus_bytes_per_s = 0);
  ~CudaDevice() override;

  //! The GPU kernels (kernels/cuda/kernels.cu), each launched on `stream` over device memory; fill and
  //! verify are the device contract's (do_fill, do_verify). They return not_supported in a build
  //! without nvcc (no kernels embedded), on a driver older than the toolkit that built them, or on a
  //! GPU they have no code for: kernels_unavailable() says which.
  //! checksum: adds kernels::checksum of the `words` 64-bit words at `va` to the counter at `sum`.
  Status checksum(StreamHandle stream, DevPtr va, std::size_t words, DevPtr sum);
  //! compute: `iterations` multiply-adds on each of `n` floats at `va`, as kernels::compute.
  Status compute(StreamHandle stream, DevPtr va, std::size_t n, int iterations);

  //! The driver's name for a failure ("CUDA_ERROR_ILLEGAL_ADDRESS").
  [[nodiscard]] std::string describe(const Status& s) const override;
  //! The device-to-host copies queued through this backend (memcpy_async, and copy_device over that
  //! bus), each counted from its call for its bytes over the link's speed; std::nullopt where the
  //! speed is not known (see the constructor).
  [[nodiscard]] std::optional<std::chrono::nanoseconds> d2h_backlog() const noexcept override;
  //! The link speed d2h_backlog() counts with, in bytes per second; 0 where none is known.
  [[nodiscard]] double bus_bytes_per_s() const noexcept { return bus_bytes_per_s_; }

  //! Why the kernels cannot run here ("" until a launch found out): the driver they need, or that the
  //! build has none. Valid after a kernel call returned not_supported.
  [[nodiscard]] std::string kernels_unavailable() override {
    std::lock_guard lk(module_mu_);
    return kernel_error_;
  }

  //! The device supports host-located VMM chunks (cuMemCreate at CU_MEM_LOCATION_TYPE_HOST_NUMA), which
  //! a later release can use to keep evicted pages mapped.
  [[nodiscard]] bool host_numa_chunks() const noexcept { return host_numa_chunks_; }
  //! The driver's number for the device in use (what "auto" resolved to).
  [[nodiscard]] int device_ordinal() const noexcept { return static_cast<int>(dev_); }

 private:
  struct Opened {
    DeviceProperties props;
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    bool host_numa_chunks = false;
    int host_numa_id = 0;
    bool rdma = false;
  };
  static Opened open(const cuda::Api& api, int ordinal, bool gpu_direct_rdma);
  CudaDevice(std::shared_ptr<const cuda::Api> api, Opened opened, double bus_bytes_per_s);

  Status do_reserve(std::size_t bytes, DevPtr* out) override;
  Status do_release_reservation(DevPtr base, std::size_t bytes) override;
  Status do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) override;
  Status do_release_chunk(ChunkHandle chunk) override;
  Status do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) override;
  Status do_set_access(DevPtr va, std::size_t bytes) override;
  Status do_unmap(DevPtr va, std::size_t bytes) override;
  Status do_alloc_host(std::size_t bytes, void** out) override;
  Status do_free_host(void* ptr, std::size_t bytes) override;
  Status do_register_host(void* ptr, std::size_t bytes) override;
  Status do_unregister_host(void* ptr, std::size_t bytes) override;
  Status do_set_worker_cpus(const std::vector<unsigned>& cpus) override;
  Status do_alloc_managed(std::size_t bytes, void** out) override;
  Status do_free_managed(void* ptr, std::size_t bytes) override;
  Status do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) override;
  Status do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) override;
  Status do_create_stream(StreamHandle* out) override;
  Status do_destroy_stream(StreamHandle stream) override;
  Status do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) override;
  Status do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) override;
  Status do_launch_host(StreamHandle stream, HostFn fn, void* user) override;
  Status do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) override;
  Status do_fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed) override;
  Status do_verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad) override;
  Status do_synchronize_stream(StreamHandle stream) override;
  Status do_synchronize_device() override;
  Status do_memory_info(std::size_t* free, std::size_t* total) override;
  Status do_create_event(EventKind kind, EventHandle* out) override;
  Status do_destroy_event(EventHandle event) override;
  Status do_record_event(EventHandle event, StreamHandle stream) override;
  Status do_stream_wait_event(StreamHandle stream, EventHandle event) override;
  Status do_query_event(EventHandle event) override;
  Status do_synchronize_event(EventHandle event) override;
  Status do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) override;

  class Entered;  // the primary context current for one call (cuda_device.cpp)
  [[nodiscard]] Status check(CUresult r) const noexcept;
  // Loads the embedded kernels once; null function if unavailable (status in `*why`).
  enum Kernel : std::uint8_t { kFill, kVerify, kChecksum, kCompute, kBusy, kKernels };
  Status kernel(Kernel k, CUfunction* out);
  Status launch(Kernel k, StreamHandle stream, unsigned blocks, void** params);

  std::shared_ptr<const cuda::Api> api_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  bool host_numa_chunks_ = false;
  int host_numa_id_ = 0;  // the GPU's nearest host NUMA node: where host chunks are created
  bool rdma_ = false;     // device chunks are created GPUDirect-RDMA capable
  std::mutex mu_;         // guards book_ (the VMM calls' bookkeeping; copies and events take no lock)
  VmmBookkeeping book_;
  const double bus_bytes_per_s_;  // d2h_backlog()'s link speed; 0 = not known
  mutable std::mutex d2h_mu_;     // guards d2h_queued_ (taken by device-to-host copies, only where the speed is known)
  BusBacklog d2h_queued_;
  void note_d2h(std::size_t bytes);
  mutable std::mutex module_mu_;  // guards the lazily loaded kernels
  CUmodule module_ = nullptr;
  Status module_status_ = Status::fail(Errc::not_ready);  // not_ready = not loaded yet
  std::string kernel_error_;                              // why they cannot run, once known
  CUfunction kernels_[kKernels] = {};
};

//! The driver's backend for device `ordinal`: loads the driver (cuda::load_driver) and opens the
//! device. Throws tvmm::device_error ("no CUDA driver ..." / "no CUDA device ...") with the fix.
std::unique_ptr<DeviceBackend> make_cuda_device(int ordinal, bool gpu_direct_rdma = false, double bus_bytes_per_s = 0);

}  // namespace tvmm::device
