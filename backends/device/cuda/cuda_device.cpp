#include "backends/device/cuda/cuda_device.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backends/device/host_link.hpp"
#include "tvmm/errors.hpp"

#if defined(TVMM_HAVE_GPU_KERNELS)
namespace tvmm::kernels {
extern const unsigned char gpu_fatbin[];  // kernels/cuda/kernels.cu, embedded by kernels/cuda/embed.cmake
}  // namespace tvmm::kernels
#endif

namespace tvmm::device {

namespace {

CUdeviceptr dptr(DevPtr p) noexcept { return static_cast<CUdeviceptr>(p); }
CUstream as_stream(StreamHandle s) noexcept { return static_cast<CUstream>(s); }
CUevent as_event(EventHandle e) noexcept { return static_cast<CUevent>(e); }

// Pinned device memory on `dev`, the only kind the pager maps.
CUmemAllocationProp device_prop(CUdevice dev) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

}  // namespace

// The device's primary context, current for the length of one driver call, and the caller's current
// context back afterwards (cuda.h 6334-6393: cuCtxPushCurrent / cuCtxPopCurrent): a program's own
// context, or its lack of one, is the same after every tvmm call, whatever thread makes it. Nothing is
// pushed when the primary context is current already.
class CudaDevice::Entered {
 public:
  Entered(const cuda::Api& api, CUcontext ctx) noexcept : api_(api) {
    CUcontext now = nullptr;
    if (api_.CtxGetCurrent(&now) == CUDA_SUCCESS && now == ctx) return;
    result_ = api_.CtxPushCurrent(ctx);
    pushed_ = result_ == CUDA_SUCCESS;
  }
  ~Entered() {
    CUcontext popped = nullptr;
    if (pushed_) (void)api_.CtxPopCurrent(&popped);
  }
  Entered(const Entered&) = delete;
  Entered& operator=(const Entered&) = delete;
  //! CUDA_SUCCESS, or why the context could not be made current.
  [[nodiscard]] CUresult result() const noexcept { return result_; }

 private:
  const cuda::Api& api_;
  CUresult result_ = CUDA_SUCCESS;
  bool pushed_ = false;
};

CudaDevice::Opened CudaDevice::open(const cuda::Api& api, int ordinal, bool gpu_direct_rdma) {
  auto fail = [&](const char* call, CUresult r) {
    return device_error("no CUDA device: " + std::string(call) + " failed with " + cuda::result_name(api, r) +
                            " (is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)",
                        cuda::result_name(api, r));
  };
  if (CUresult r = api.Init(0); r != CUDA_SUCCESS) throw fail("cuInit", r);
  int count = 0;
  if (CUresult r = api.DeviceGetCount(&count); r != CUDA_SUCCESS) throw fail("cuDeviceGetCount", r);
  if (ordinal < 0) {  // "auto": the device of this thread's current context, as the program set it
    // cuCtxGetCurrent sets NULL and returns CUDA_SUCCESS when no context is current, where cuCtxGetDevice
    // fails with CUDA_ERROR_INVALID_CONTEXT (cuda.h), an error compute-sanitizer reports. Ask the first.
    CUcontext ctx = nullptr;
    CUdevice current = 0;
    const bool has = api.CtxGetCurrent != nullptr && api.CtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr;
    ordinal = has && api.CtxGetDevice != nullptr && api.CtxGetDevice(&current) == CUDA_SUCCESS
                  ? static_cast<int>(current)
                  : 0;
  }
  if (count == 0) {  // the driver's own name for it (cuInit returns it on a machine with no GPU)
    throw device_error(
        "no CUDA device: the driver sees no GPU (is a GPU visible? check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)",
        "CUDA_ERROR_NO_DEVICE");
  }
  if (ordinal < 0 || ordinal >= count) {
    throw device_error("no CUDA device " + std::to_string(ordinal) + ": the driver sees " + std::to_string(count) +
                           " GPU(s), numbered from 0 (device.ordinal, TVMM_DEVICE_ORDINAL)",
                       "invalid_device");
  }
  Opened o;
  if (CUresult r = api.DeviceGet(&o.dev, ordinal); r != CUDA_SUCCESS) throw fail("cuDeviceGet", r);
  int vmm = 0;
  (void)api.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, o.dev);
  if (vmm == 0) {
    throw device_error("CUDA device " + std::to_string(ordinal) +
                           " does not support virtual memory management (cuMemCreate/cuMemMap), which tvmm needs",
                       "not_supported");
  }
  int host_numa = 0;
  (void)api.DeviceGetAttribute(&host_numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, o.dev);
  o.host_numa_chunks = host_numa != 0;
  int numa_id = -1;
  (void)api.DeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, o.dev);
  o.host_numa_id = numa_id < 0 ? 0 : numa_id;  // -1: no NUMA, so node 0 is all there is
  if (gpu_direct_rdma) {
    // cuda.h 839: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED "Device supports specifying the
    // GPUDirect RDMA flag with cuMemCreate".
    int rdma = 0;
    (void)api.DeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, o.dev);
    if (rdma == 0) {
      throw device_error("device.gpu_direct_rdma = true, but CUDA device " + std::to_string(ordinal) +
                             " does not support GPUDirect RDMA with VMM allocations "
                             "(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0); set it to false",
                         "not_supported");
    }
    o.rdma = true;
  }
  if (CUresult r = api.DevicePrimaryCtxRetain(&o.ctx, o.dev); r != CUDA_SUCCESS) {
    throw fail("cuDevicePrimaryCtxRetain", r);
  }
  const CUmemAllocationProp prop = device_prop(o.dev);
  std::size_t granularity = 0;
  std::size_t total = 0;
  char name[256] = {};
  char bus[64] = {};
  std::size_t host_granularity = 0;
  std::size_t free = 0, total_now = 0;
  CUresult r = CUDA_SUCCESS;
  {  // the context is popped again before a failure releases it
    const Entered in(api, o.ctx);
    r = in.result();
    if (r == CUDA_SUCCESS) r = api.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    // Host-NUMA chunks have a granularity of their own (cuda.h 13202: it is "for a given allocation
    // specification"); the transparent heap's pages must be a multiple of both.
    if (r == CUDA_SUCCESS && o.host_numa_chunks) {
      CUmemAllocationProp host = prop;
      host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
      host.location.id = o.host_numa_id;
      r = api.MemGetAllocationGranularity(&host_granularity, &host, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    }
    if (r == CUDA_SUCCESS) r = api.DeviceTotalMem(&total, o.dev);
    if (r == CUDA_SUCCESS) r = api.MemGetInfo(&free, &total_now);
    if (r == CUDA_SUCCESS) r = api.DeviceGetName(name, sizeof name, o.dev);
    if (r == CUDA_SUCCESS) r = api.DeviceGetPCIBusId(bus, sizeof bus, o.dev);
  }
  if (r != CUDA_SUCCESS) {
    (void)api.DevicePrimaryCtxRelease(o.dev);
    throw fail("querying the device", r);
  }
  o.props.name = "cuda";
  o.props.granularity = granularity;
  o.props.host_granularity = host_granularity;
  o.props.capacity = total;
  o.props.free_memory = free;
  o.props.host_accessible = false;
  o.props.host_chunks = o.host_numa_chunks;
  int managed = 0, concurrent = 0;
  (void)api.DeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, o.dev);
  (void)api.DeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, o.dev);
  o.props.managed = managed != 0 && concurrent != 0;  // prefetch and advice need concurrent access
  o.props.pci_bus_id = bus;
  return o;
}

CudaDevice::CudaDevice(std::shared_ptr<const cuda::Api> api, int ordinal, bool gpu_direct_rdma, double bus_bytes_per_s)
    : CudaDevice(api, open(*api, ordinal, gpu_direct_rdma), bus_bytes_per_s) {}

namespace {
double link_speed(const DeviceProperties& props, double configured) {
  if (configured > 0) return configured;
  return pcie_copy_bytes_per_s(props.pci_bus_id).value_or(0.0);
}
}  // namespace

CudaDevice::CudaDevice(std::shared_ptr<const cuda::Api> api, Opened opened, double bus_bytes_per_s)
    : DeviceBackend(std::move(opened.props)),
      api_(std::move(api)),
      dev_(opened.dev),
      ctx_(opened.ctx),
      host_numa_chunks_(opened.host_numa_chunks),
      host_numa_id_(opened.host_numa_id),
      rdma_(opened.rdma),
      bus_bytes_per_s_(link_speed(properties(), bus_bytes_per_s)) {}

CudaDevice::~CudaDevice() {
  if (module_ != nullptr) {
    const Entered in(*api_, ctx_);
    if (in.result() == CUDA_SUCCESS) (void)api_->ModuleUnload(module_);
  }
  (void)api_->DevicePrimaryCtxRelease(dev_);
}

std::string CudaDevice::describe(const Status& s) const {
  if (s.code == Errc::not_supported) {
    // The kernels' own failure (what kernel() returns), not another call's not_supported.
    std::lock_guard lk(module_mu_);
    if (!kernel_error_.empty() && s.sys_errno == module_status_.sys_errno && module_status_.code == s.code) {
      return kernel_error_;
    }
  }
  if (s.sys_errno == 0) return errc_name(s.code);
  return cuda::result_name(*api_, static_cast<CUresult>(s.sys_errno));
}

Status CudaDevice::check(CUresult r) const noexcept {
  if (r == CUDA_SUCCESS) return Status::success();
  if (r == CUDA_ERROR_NOT_READY) return Status::fail(Errc::not_ready);
  // The name, for messages (cuda.h: cuGetErrorName's strings are the driver's, never freed).
  const char* name = nullptr;
  if (api_->GetErrorName == nullptr || api_->GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return Status::driver_fail(Errc::out_of_memory, r, name);
    case CUDA_ERROR_INVALID_VALUE: return Status::driver_fail(Errc::invalid_value, r, name);
    // A handle the driver does not know, or an event it cannot time (cuda.h 16150: cuEventElapsedTime on
    // a never-recorded or DISABLE_TIMING event): the contract's invalid_value.
    case CUDA_ERROR_INVALID_HANDLE: return Status::driver_fail(Errc::invalid_value, r, name);
    case CUDA_ERROR_NOT_SUPPORTED: return Status::driver_fail(Errc::not_supported, r, name);
    // The errors after which "any further CUDA work will return the same error. To continue using CUDA,
    // the process must be terminated and relaunched" (cuda.h 2763-3140).
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_EXTERNAL_DEVICE: return Status::driver_fail(Errc::device_lost, r, name);
    default: return Status::driver_fail(Errc::driver_error, r, name);
  }
}

// Runs one driver call with the device's context current (Entered), converting the result.
#define TVMM_CU(call)                                                        \
  [&]() -> Status {                                                          \
    const Entered in_(*api_, ctx_);                                          \
    return in_.result() == CUDA_SUCCESS ? check(call) : check(in_.result()); \
  }()

Status CudaDevice::do_reserve(std::size_t bytes, DevPtr* out) {
  CUdeviceptr p = 0;
  // Aligned for either kind of chunk (cuMemMap: ptr a multiple of the chunk's own granularity).
  const std::size_t align = std::max(properties().granularity, properties().host_granularity);
  const Status s = TVMM_CU(api_->MemAddressReserve(&p, bytes, align, 0, 0));
  if (!s.ok()) return s;
  std::lock_guard lk(mu_);
  try {
    book_.add_reservation(static_cast<DevPtr>(p), bytes);
  } catch (...) {  // std::bad_alloc: give the range back rather than keep one no record knows
    (void)TVMM_CU(api_->MemAddressFree(p, bytes));
    throw;
  }
  *out = static_cast<DevPtr>(p);
  return s;
}

Status CudaDevice::do_release_reservation(DevPtr base, std::size_t bytes) {
  std::lock_guard lk(mu_);
  if (auto s = book_.check_release_reservation(base, bytes); !s.ok()) return s;
  const Status s = TVMM_CU(api_->MemAddressFree(dptr(base), bytes));
  if (s.ok()) book_.remove_reservation(base);
  return s;
}

Status CudaDevice::do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) {
  CUmemAllocationProp prop = device_prop(dev_);
  if (where == ChunkLocation::host) {
    // Host memory on the GPU's nearest NUMA node, mapped into the reservation like a device frame.
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = host_numa_id_;
  } else if (rdma_) {
    prop.allocFlags.gpuDirectRDMACapable = 1;  // device.gpu_direct_rdma
  }
  CUmemGenericAllocationHandle h = 0;
  const Status s = TVMM_CU(api_->MemCreate(&h, bytes, &prop, 0));
  if (!s.ok()) return s;
  std::lock_guard lk(mu_);
  try {
    book_.add_chunk(static_cast<std::uint64_t>(h), bytes);
  } catch (...) {  // std::bad_alloc: release the memory rather than leak it unrecorded
    (void)TVMM_CU(api_->MemRelease(h));
    throw;
  }
  out->value = static_cast<std::uint64_t>(h);
  return s;
}

Status CudaDevice::do_release_chunk(ChunkHandle chunk) {
  std::lock_guard lk(mu_);
  std::size_t bytes = 0;
  if (auto s = book_.check_release_chunk(chunk.value, &bytes); !s.ok()) return s;
  const Status s = TVMM_CU(api_->MemRelease(static_cast<CUmemGenericAllocationHandle>(chunk.value)));
  if (s.ok()) book_.remove_chunk(chunk.value);
  return s;
}

Status CudaDevice::do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) {
  std::lock_guard lk(mu_);
  if (auto s = book_.check_map(va, bytes, chunk.value); !s.ok()) return s;
  // Recorded first, so std::bad_alloc maps nothing; forgotten if the driver refuses. The record must
  // match the driver: cuMemMap "can only create mappings on VA range reservations that are not
  // currently mapped" (cuda.h), and an unrecorded mapping would make every later map there fail.
  book_.add_mapping(va, bytes, chunk.value);
  const Status s = TVMM_CU(api_->MemMap(dptr(va), bytes, 0, static_cast<CUmemGenericAllocationHandle>(chunk.value), 0));
  if (!s.ok()) book_.remove_mappings(va, bytes);
  return s;
}

Status CudaDevice::do_set_access(DevPtr va, std::size_t bytes) {
  {
    std::lock_guard lk(mu_);
    if (auto s = book_.check_whole_mappings(va, bytes); !s.ok()) return s;
  }
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = dev_;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return TVMM_CU(api_->MemSetAccess(dptr(va), bytes, &desc, 1));
}

Status CudaDevice::do_unmap(DevPtr va, std::size_t bytes) {
  std::lock_guard lk(mu_);
  if (auto s = book_.check_whole_mappings(va, bytes); !s.ok()) return s;
  const Status s = TVMM_CU(api_->MemUnmap(dptr(va), bytes));
  if (s.ok()) book_.remove_mappings(va, bytes);
  return s;
}

Status CudaDevice::do_alloc_host(std::size_t bytes, void** out) { return TVMM_CU(api_->MemAllocHost(out, bytes)); }

Status CudaDevice::do_free_host(void* ptr, std::size_t /*bytes*/) { return TVMM_CU(api_->MemFreeHost(ptr)); }

Status CudaDevice::do_register_host(void* ptr, std::size_t bytes) {
  return TVMM_CU(api_->MemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE));
}

Status CudaDevice::do_unregister_host(void* ptr, std::size_t /*bytes*/) {
  return TVMM_CU(api_->MemHostUnregister(ptr));
}

Status CudaDevice::do_set_worker_cpus(const std::vector<unsigned>& /*cpus*/) {
  return Status::fail(Errc::not_supported);  // the driver's own threads are not ours to bind
}

Status CudaDevice::do_memory_info(std::size_t* free, std::size_t* total) {
  return TVMM_CU(api_->MemGetInfo(free, total));
}

Status CudaDevice::do_alloc_managed(std::size_t bytes, void** out) {
  CUdeviceptr p = 0;
  const Status s = TVMM_CU(api_->MemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL));
  if (s.ok()) *out = reinterpret_cast<void*>(p);
  return s;
}

Status CudaDevice::do_free_managed(void* ptr, std::size_t) {
  return TVMM_CU(api_->MemFree(reinterpret_cast<CUdeviceptr>(ptr)));
}

Status CudaDevice::do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) {
  return TVMM_CU(api_->MemAdvise(reinterpret_cast<CUdeviceptr>(ptr), bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                 where == ChunkLocation::device ? dev_ : CU_DEVICE_CPU));
}

Status CudaDevice::do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) {
  return TVMM_CU(api_->MemPrefetchAsync(reinterpret_cast<CUdeviceptr>(ptr), bytes,
                                        where == ChunkLocation::device ? dev_ : CU_DEVICE_CPU, as_stream(stream)));
}

Status CudaDevice::do_create_stream(StreamHandle* out) {
  CUstream s = nullptr;
  const Status st = TVMM_CU(api_->StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (st.ok()) *out = s;
  return st;
}

Status CudaDevice::do_destroy_stream(StreamHandle stream) { return TVMM_CU(api_->StreamDestroy(as_stream(stream))); }

Status CudaDevice::do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) {
  if (kind == CopyKind::host_to_device) {
    return TVMM_CU(api_->MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes, as_stream(stream)));
  }
  const Status st = TVMM_CU(api_->MemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), bytes, as_stream(stream)));
  if (st.ok()) note_d2h(bytes);
  return st;
}

// cuMemcpyDtoHAsync is \note_async in cuda.h (CUDA 13.0, its comment above line 10612): the call
// returns once the copy is queued, so the copy is counted from the call, as queued work; a copy that
// waits for earlier work in its stream starts later (the estimate is from below, as the contract says).
void CudaDevice::note_d2h(std::size_t bytes) {
  if (bus_bytes_per_s_ <= 0) return;
  const auto slot =
      std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bus_bytes_per_s_ * 1e9));
  std::lock_guard lk(d2h_mu_);
  d2h_queued_.queued(std::chrono::steady_clock::now(), slot);
}

std::optional<std::chrono::nanoseconds> CudaDevice::d2h_backlog() const noexcept {
  if (bus_bytes_per_s_ <= 0) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(d2h_mu_);
  return d2h_queued_.left(now);
}

Status CudaDevice::do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) {
  {
    std::lock_guard lk(mu_);
    std::uint64_t handle = 0;
    std::size_t offset = 0;
    if (!book_.backing(dst, bytes, &handle, &offset) || !book_.backing(src, bytes, &handle, &offset)) {
      return Status::fail(Errc::invalid_value);
    }
  }
  const Status st = TVMM_CU(api_->MemcpyDtoDAsync(dptr(dst), dptr(src), bytes, as_stream(stream)));
  if (st.ok() && bus == CopyKind::device_to_host) note_d2h(bytes);  // into a host-located chunk
  return st;
}

Status CudaDevice::do_launch_host(StreamHandle stream, HostFn fn, void* user) {
  return TVMM_CU(api_->LaunchHostFunc(as_stream(stream), fn, user));
}

Status CudaDevice::do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) {
  auto ns = static_cast<std::uint64_t>(duration.count());
  void* params[] = {&ns};
  return launch(kBusy, stream, 1, params);
}

namespace {
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
}  // namespace

Status CudaDevice::kernel(Kernel k, CUfunction* out) {
  std::lock_guard lk(module_mu_);
  if (module_status_.code == Errc::not_ready) {
#if defined(TVMM_HAVE_GPU_KERNELS)
    // nvcc 13 writes ELF-ABI-8 cubins and the PTX ISA of its own release: a driver of an older major
    // version loads neither (cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU or
    // CUDA_ERROR_UNSUPPORTED_PTX_VERSION). Within a major version the sm_90 cubin loads on any driver
    // (CUDA minor version compatibility); only PTX, JIT-compiled on other GPUs, needs the toolkit's own
    // minor version. So the load is always tried, and a failure says which driver would load them.
    int driver = 0;
    (void)api_->DriverGetVersion(&driver);
    module_status_ = noted(TVMM_CU(api_->ModuleLoadData(&module_, kernels::gpu_fatbin)));
    if (!module_status_.ok()) {
      constexpr int major_needed = TVMM_KERNELS_CUDA_VERSION / 1000 * 1000;
      const std::string built = "tvmm's GPU kernels were built with CUDA " + cuda_version(TVMM_KERNELS_CUDA_VERSION) +
                                " (an sm_90 cubin and compute_90 PTX)";
      const std::string failed = "loading them failed with " +
                                 cuda::result_name(*api_, static_cast<CUresult>(module_status_.sys_errno)) +
                                 "; this driver is for CUDA " + cuda_version(driver);
      const std::string only =
          ". Only the kernels need it (tvmm-bench --device cuda, the GPU kernel tests); the pager needs CUDA 12.0";
      if (driver < major_needed) {
        kernel_error_ = built + " and need a driver for CUDA " + cuda_version(major_needed) + " or newer; " + failed +
                        ": update the NVIDIA driver, or build tvmm with the CUDA toolkit of the driver's version" +
                        only;
      } else {
        kernel_error_ = built + " and need a GPU of compute capability 9.0, or a newer GPU with a driver for CUDA " +
                        cuda_version(TVMM_KERNELS_CUDA_VERSION) + " or newer to compile their PTX; " + failed + only;
      }
      if (module_status_.code == Errc::driver_error)
        module_status_ = Status::driver_fail(Errc::not_supported, module_status_.sys_errno);
    }
    static const char* const names[kKernels] = {"tvmm_fill", "tvmm_verify", "tvmm_checksum", "tvmm_compute",
                                                "tvmm_busy"};
    for (int i = 0; i < kKernels && module_status_.ok(); ++i) {
      module_status_ = check(api_->ModuleGetFunction(&kernels_[i], module_, names[i]));
    }
#else
    module_status_ = Status::fail(Errc::not_supported);  // built without nvcc: no kernels embedded
    kernel_error_ = "this build of tvmm has no GPU kernels (nvcc was not found when it was built)";
#endif
  }
  *out = kernels_[k];
  return module_status_;
}

Status CudaDevice::launch(Kernel k, StreamHandle stream, unsigned blocks, void** params) {
  CUfunction fn = nullptr;
  if (auto s = kernel(k, &fn); !s.ok()) return s;
  const unsigned threads = blocks == 1 && k == kBusy ? 1 : 256;
  return noted(TVMM_CU(api_->LaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, as_stream(stream), params, nullptr)));
}

namespace {
// Enough blocks to cover `items` with 256 threads each, at most 1024 (the kernels loop grid-stride).
unsigned blocks_for(std::size_t items) {
  return static_cast<unsigned>(std::clamp<std::size_t>((items + 255) / 256, 1, 1024));
}
}  // namespace

Status CudaDevice::do_fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed) {
  CUdeviceptr p = dptr(va);
  void* params[] = {&p, &bytes, &seed};
  return launch(kFill, stream, blocks_for(bytes / 8), params);
}

Status CudaDevice::do_verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad) {
  CUdeviceptr p = dptr(va);
  CUdeviceptr counter = dptr(bad);
  void* params[] = {&p, &bytes, &seed, &counter};
  return launch(kVerify, stream, blocks_for(bytes / 8), params);
}

Status CudaDevice::checksum(StreamHandle stream, DevPtr va, std::size_t words, DevPtr sum) {
  CUdeviceptr p = dptr(va);
  CUdeviceptr out = dptr(sum);
  void* params[] = {&p, &words, &out};
  return launch(kChecksum, stream, blocks_for(words), params);
}

Status CudaDevice::compute(StreamHandle stream, DevPtr va, std::size_t n, int iterations) {
  CUdeviceptr p = dptr(va);
  void* params[] = {&p, &n, &iterations};
  return launch(kCompute, stream, blocks_for(n), params);
}

Status CudaDevice::do_synchronize_stream(StreamHandle stream) {
  return TVMM_CU(api_->StreamSynchronize(as_stream(stream)));
}

// cuda.h (cuCtxSynchronize): "Blocks until the current context has completed all preceding requested
// tasks" -- the primary context's, so the program's runtime work on this device too.
Status CudaDevice::do_synchronize_device() { return TVMM_CU(api_->CtxSynchronize()); }

Status CudaDevice::do_create_event(EventKind kind, EventHandle* out) {
  // cuda.h 15910-15918: BLOCKING_SYNC makes cuEventSynchronize block instead of busy-waiting (every host
  // wait of tvmm's would otherwise spin a core); DISABLE_TIMING gives "the best performance when used
  // with cuStreamWaitEvent() and cuEventQuery()", for the events that are never timed.
  const unsigned flags =
      unsigned{CU_EVENT_BLOCKING_SYNC} | (kind == EventKind::timing ? 0u : unsigned{CU_EVENT_DISABLE_TIMING});
  CUevent e = nullptr;
  const Status st = TVMM_CU(api_->EventCreate(&e, flags));
  if (st.ok()) *out = e;
  return st;
}

Status CudaDevice::do_destroy_event(EventHandle event) { return TVMM_CU(api_->EventDestroy(as_event(event))); }

Status CudaDevice::do_record_event(EventHandle event, StreamHandle stream) {
  return TVMM_CU(api_->EventRecord(as_event(event), as_stream(stream)));
}

Status CudaDevice::do_stream_wait_event(StreamHandle stream, EventHandle event) {
  return TVMM_CU(api_->StreamWaitEvent(as_stream(stream), as_event(event), CU_EVENT_WAIT_DEFAULT));
}

Status CudaDevice::do_query_event(EventHandle event) { return TVMM_CU(api_->EventQuery(as_event(event))); }

Status CudaDevice::do_synchronize_event(EventHandle event) { return TVMM_CU(api_->EventSynchronize(as_event(event))); }

Status CudaDevice::do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) {
  float ms = 0;
  const Status st = TVMM_CU(api_->EventElapsedTime(&ms, as_event(start), as_event(end)));
  if (st.ok()) *out = std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(static_cast<double>(ms) * 1e6)));
  return st;
}

#undef TVMM_CU

std::unique_ptr<DeviceBackend> make_cuda_device(int ordinal, bool gpu_direct_rdma, double bus_bytes_per_s) {
  return std::make_unique<CudaDevice>(cuda::load_driver(), ordinal, gpu_direct_rdma, bus_bytes_per_s);
}

}  // namespace tvmm::device
