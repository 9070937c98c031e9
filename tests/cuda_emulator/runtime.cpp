// The emulated CUDA runtime: a small libcudart.so.<major> over the driver, as the real runtime is (it
// opens libcuda.so.1 and takes every driver entry point from cuGetProcAddress, so an interposer that
// hooks the lookup sees the runtime's driver calls as it would on a GPU). It serves the calls tvmm's
// interposer tests make, from programs nvcc compiled with -cudart none: memory, devices, streams,
// events, capture and graphs, and `kernel<<<...>>>` launches through nvcc's registration ABI
// (__cudaRegisterFatBinary/__cudaRegisterFunction, __cudaPushCallConfiguration, __cudaGetKernel and
// __cudaLaunchKernel; crt/host_runtime.h and crt/device_functions.h). docs/cuda-emulator.md lists what
// it leaves out.
//
// The rules, from the runtime API reference (cuda_runtime_api.h's comments):
// - "Interactions with the CUDA Driver API": the runtime works in the context current to the calling
//   thread; with none, in the primary context of the thread's current device (device 0 unless
//   cudaSetDevice chose another), which it makes current.
// - cudaSetDevice (since CUDA 12.0) initialises that device's primary context and makes it current.
// - cudaGetLastError returns the last error any call on this thread produced and resets it;
//   cudaPeekAtLastError does not reset it.
// - The error numbers are the driver's (cudaError_t and CUresult share them since CUDA 10.1 for every
//   code the emulated driver returns), so driver results pass through unchanged.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

// --- the driver, as the runtime loads it ------------------------------------------------------------------

struct DriverTable {
  PFN_cuInit_v2000 Init = nullptr;
  PFN_cuDriverGetVersion_v2020 DriverGetVersion = nullptr;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount = nullptr;
  PFN_cuDeviceGet_v2000 DeviceGet = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 PrimaryCtxRetain = nullptr;
  PFN_cuCtxGetCurrent_v4000 CtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent = nullptr;
  PFN_cuCtxGetDevice_v2000 CtxGetDevice = nullptr;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize = nullptr;
  PFN_cuMemAlloc_v3020 MemAlloc = nullptr;
  PFN_cuMemFree_v3020 MemFree = nullptr;
  PFN_cuMemGetInfo_v3020 MemGetInfo = nullptr;
  PFN_cuMemAllocManaged_v6000 MemAllocManaged = nullptr;
  PFN_cuMemAllocHost_v3020 MemAllocHost = nullptr;
  PFN_cuMemFreeHost_v2000 MemFreeHost = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync = nullptr;
  PFN_cuMemcpyDtoDAsync_v3020 MemcpyDtoDAsync = nullptr;
  PFN_cuMemsetD8Async_v3020 MemsetD8Async = nullptr;
  PFN_cuMemcpy2DUnaligned_v3020 Memcpy2DUnaligned = nullptr;
  PFN_cuMemcpy2DAsync_v3020 Memcpy2DAsync = nullptr;
  PFN_cuMemcpy3DAsync_v3020 Memcpy3DAsync = nullptr;
  PFN_cuPointerGetAttribute_v4000 PointerGetAttribute = nullptr;
  PFN_cuStreamCreate_v2000 StreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 StreamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize = nullptr;
  PFN_cuStreamQuery_v2000 StreamQuery = nullptr;
  PFN_cuStreamWaitEvent_v3020 StreamWaitEvent = nullptr;
  PFN_cuEventCreate_v2000 EventCreate = nullptr;
  PFN_cuEventDestroy_v4000 EventDestroy = nullptr;
  PFN_cuEventRecord_v2000 EventRecord = nullptr;
  PFN_cuEventQuery_v2000 EventQuery = nullptr;
  PFN_cuEventSynchronize_v2000 EventSynchronize = nullptr;
  PFN_cuStreamBeginCapture_v10010 StreamBeginCapture = nullptr;
  PFN_cuStreamEndCapture_v10000 StreamEndCapture = nullptr;
  PFN_cuStreamIsCapturing_v10000 StreamIsCapturing = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiateWithFlags = nullptr;
  PFN_cuGraphLaunch_v10000 GraphLaunch = nullptr;
  PFN_cuGraphDestroy_v10000 GraphDestroy = nullptr;
  PFN_cuGraphExecDestroy_v10000 GraphExecDestroy = nullptr;
  PFN_cuModuleLoadData_v2000 ModuleLoadData = nullptr;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction = nullptr;
  PFN_cuModuleUnload_v2000 ModuleUnload = nullptr;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc = nullptr;
  PFN_cuLaunchKernel_v4000 LaunchKernel = nullptr;
  PFN_cuLaunchKernelEx_v11060 LaunchKernelEx = nullptr;
  PFN_cuLaunchCooperativeKernel_v9000 LaunchCooperativeKernel = nullptr;
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 GetErrorString = nullptr;
  PFN_cuGetProcAddress_v12000 GetProcAddress = nullptr;
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;  //!< cuInit's, or why the driver could not be loaded
};

template <class F>
bool lookup(PFN_cuGetProcAddress_v12000 gpa, const char* name, int version, F* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (gpa(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || fn == nullptr) {
    std::fprintf(stderr, "cuda emulator runtime: the driver has no %s for CUDA %d\n", name, version);
    return false;
  }
  *out = reinterpret_cast<F>(fn);
  return true;
}

DriverTable load_driver() {
  DriverTable t;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cuda emulator runtime: cannot load libcuda.so.1: %s\n", ::dlerror());
    t.init_result = CUDA_ERROR_NO_DEVICE;
    return t;
  }
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) {
    t.init_result = CUDA_ERROR_NO_DEVICE;
    return t;
  }
  t.GetProcAddress = gpa;
  bool ok = true;
  ok &= lookup(gpa, "cuInit", 2000, &t.Init);
  ok &= lookup(gpa, "cuDriverGetVersion", 2020, &t.DriverGetVersion);
  ok &= lookup(gpa, "cuDeviceGetCount", 2000, &t.DeviceGetCount);
  ok &= lookup(gpa, "cuDeviceGet", 2000, &t.DeviceGet);
  ok &= lookup(gpa, "cuDevicePrimaryCtxRetain", 7000, &t.PrimaryCtxRetain);
  ok &= lookup(gpa, "cuCtxGetCurrent", 4000, &t.CtxGetCurrent);
  ok &= lookup(gpa, "cuCtxSetCurrent", 4000, &t.CtxSetCurrent);
  ok &= lookup(gpa, "cuCtxGetDevice", 2000, &t.CtxGetDevice);
  ok &= lookup(gpa, "cuCtxSynchronize", 2000, &t.CtxSynchronize);
  ok &= lookup(gpa, "cuMemAlloc", 3020, &t.MemAlloc);
  ok &= lookup(gpa, "cuMemFree", 3020, &t.MemFree);
  ok &= lookup(gpa, "cuMemGetInfo", 3020, &t.MemGetInfo);
  ok &= lookup(gpa, "cuMemAllocManaged", 6000, &t.MemAllocManaged);
  ok &= lookup(gpa, "cuMemAllocHost", 3020, &t.MemAllocHost);
  ok &= lookup(gpa, "cuMemFreeHost", 3020, &t.MemFreeHost);
  ok &= lookup(gpa, "cuMemcpyHtoDAsync", 3020, &t.MemcpyHtoDAsync);
  ok &= lookup(gpa, "cuMemcpyDtoHAsync", 3020, &t.MemcpyDtoHAsync);
  ok &= lookup(gpa, "cuMemcpyDtoDAsync", 3020, &t.MemcpyDtoDAsync);
  ok &= lookup(gpa, "cuMemsetD8Async", 3020, &t.MemsetD8Async);
  ok &= lookup(gpa, "cuMemcpy2DUnaligned", 3020, &t.Memcpy2DUnaligned);
  ok &= lookup(gpa, "cuMemcpy2DAsync", 3020, &t.Memcpy2DAsync);
  ok &= lookup(gpa, "cuMemcpy3DAsync", 3020, &t.Memcpy3DAsync);
  ok &= lookup(gpa, "cuPointerGetAttribute", 4000, &t.PointerGetAttribute);
  ok &= lookup(gpa, "cuStreamCreate", 2000, &t.StreamCreate);
  ok &= lookup(gpa, "cuStreamDestroy", 4000, &t.StreamDestroy);
  ok &= lookup(gpa, "cuStreamSynchronize", 2000, &t.StreamSynchronize);
  ok &= lookup(gpa, "cuStreamQuery", 2000, &t.StreamQuery);
  ok &= lookup(gpa, "cuStreamWaitEvent", 3020, &t.StreamWaitEvent);
  ok &= lookup(gpa, "cuEventCreate", 2000, &t.EventCreate);
  ok &= lookup(gpa, "cuEventDestroy", 4000, &t.EventDestroy);
  ok &= lookup(gpa, "cuEventRecord", 2000, &t.EventRecord);
  ok &= lookup(gpa, "cuEventQuery", 2000, &t.EventQuery);
  ok &= lookup(gpa, "cuEventSynchronize", 2000, &t.EventSynchronize);
  ok &= lookup(gpa, "cuStreamBeginCapture", 10010, &t.StreamBeginCapture);
  ok &= lookup(gpa, "cuStreamEndCapture", 10000, &t.StreamEndCapture);
  ok &= lookup(gpa, "cuStreamIsCapturing", 10000, &t.StreamIsCapturing);
  ok &= lookup(gpa, "cuGraphInstantiateWithFlags", 11040, &t.GraphInstantiateWithFlags);
  ok &= lookup(gpa, "cuGraphLaunch", 10000, &t.GraphLaunch);
  ok &= lookup(gpa, "cuGraphDestroy", 10000, &t.GraphDestroy);
  ok &= lookup(gpa, "cuGraphExecDestroy", 10000, &t.GraphExecDestroy);
  ok &= lookup(gpa, "cuModuleLoadData", 2000, &t.ModuleLoadData);
  ok &= lookup(gpa, "cuModuleGetFunction", 2000, &t.ModuleGetFunction);
  ok &= lookup(gpa, "cuModuleUnload", 2000, &t.ModuleUnload);
  ok &= lookup(gpa, "cuLaunchHostFunc", 10000, &t.LaunchHostFunc);
  ok &= lookup(gpa, "cuLaunchKernel", 4000, &t.LaunchKernel);
  ok &= lookup(gpa, "cuLaunchKernelEx", 11060, &t.LaunchKernelEx);
  ok &= lookup(gpa, "cuLaunchCooperativeKernel", 9000, &t.LaunchCooperativeKernel);
  ok &= lookup(gpa, "cuGetErrorName", 6000, &t.GetErrorName);
  ok &= lookup(gpa, "cuGetErrorString", 6000, &t.GetErrorString);
  t.init_result = ok ? t.Init(0) : CUDA_ERROR_NOT_SUPPORTED;
  return t;
}

const DriverTable& drv() {
  static const DriverTable table = load_driver();
  return table;
}

// --- per-thread state ---------------------------------------------------------------------------------------

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

// Records a failing result as the thread's last error (a sticky one stays for every later call anyway).
cudaError_t result(CUresult r) {
  const auto e = static_cast<cudaError_t>(r);
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// The primary context of each device, retained once by the runtime and kept for the process.
std::mutex g_mu;
std::map<int, CUcontext> g_primary;

CUresult primary_context(int device, CUcontext* out) {
  std::lock_guard lk(g_mu);
  if (auto it = g_primary.find(device); it != g_primary.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  CUdevice dev = 0;
  if (const CUresult r = drv().DeviceGet(&dev, device); r != CUDA_SUCCESS) return r;
  if (const CUresult r = drv().PrimaryCtxRetain(out, dev); r != CUDA_SUCCESS) return r;
  g_primary[device] = *out;
  return CUDA_SUCCESS;
}

// Initialises the runtime on this thread: the driver, then a current context (the thread's own, or the
// primary context of its current device, made current).
CUresult ready() {
  const DriverTable& d = drv();
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  CUcontext ctx = nullptr;
  if (const CUresult r = d.CtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  if (ctx != nullptr) return CUDA_SUCCESS;
  if (const CUresult r = primary_context(t_device, &ctx); r != CUDA_SUCCESS) return r;
  return d.CtxSetCurrent(ctx);
}

#define CUEMU_RT_READY()                                                    \
  do {                                                                      \
    if (const CUresult r_ = ready(); r_ != CUDA_SUCCESS) return result(r_); \
  } while (0)

// --- kernels registered by nvcc's generated code --------------------------------------------------------------

struct Binary {
  const void* wrapper;  // the __fatBinC_Wrapper_t nvcc emitted: cuModuleLoadData reads it as it is
};
struct Function {
  Binary* binary;
  std::string name;
  std::map<CUcontext, CUfunction> loaded;  // under g_mu
};
std::map<const void*, Function*> g_functions;  // host stub -> kernel (under g_mu)
std::map<std::pair<Binary*, CUcontext>, CUmodule> g_modules;

struct LaunchConfig {
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<LaunchConfig> t_configs;

CUresult function_in_current_context(Function* f, CUfunction* out) {
  CUcontext ctx = nullptr;
  if (const CUresult r = drv().CtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(g_mu);
  if (auto it = f->loaded.find(ctx); it != f->loaded.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  CUmodule& module = g_modules[{f->binary, ctx}];
  if (module == nullptr) {
    if (const CUresult r = drv().ModuleLoadData(&module, f->binary->wrapper); r != CUDA_SUCCESS) {
      g_modules.erase({f->binary, ctx});
      return r;
    }
  }
  if (const CUresult r = drv().ModuleGetFunction(out, module, f->name.c_str()); r != CUDA_SUCCESS) return r;
  f->loaded[ctx] = *out;
  return CUDA_SUCCESS;
}

// Which driver entry point a launch goes through: cuLaunchKernel, or with TVMM_CUEMU_RUNTIME_LAUNCH=mixed
// each of cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel in turn (a real runtime uses
// the latter two for launches with attributes and cooperative launches), so tests reach all three.
bool mixed_launches() {
  static const bool mixed = [] {
    const char* v = std::getenv("TVMM_CUEMU_RUNTIME_LAUNCH");
    return v != nullptr && std::strcmp(v, "mixed") == 0;
  }();
  return mixed;
}

cudaError_t launch(Function* f, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream) {
  CUEMU_RT_READY();
  if (f == nullptr) return result(static_cast<CUresult>(cudaErrorInvalidDeviceFunction));
  CUfunction fn = nullptr;
  if (const CUresult r = function_in_current_context(f, &fn); r != CUDA_SUCCESS) return result(r);
  static std::atomic<unsigned> turn{0};
  switch (mixed_launches() ? turn.fetch_add(1) % 3 : 0) {
    case 1: {
      CUlaunchConfig config{};
      config.gridDimX = grid.x;
      config.gridDimY = grid.y;
      config.gridDimZ = grid.z;
      config.blockDimX = block.x;
      config.blockDimY = block.y;
      config.blockDimZ = block.z;
      config.sharedMemBytes = static_cast<unsigned>(shared);
      config.hStream = stream;
      return result(drv().LaunchKernelEx(&config, fn, args, nullptr));
    }
    case 2:
      return result(drv().LaunchCooperativeKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                  static_cast<unsigned>(shared), stream, args));
    default:
      return result(drv().LaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                       static_cast<unsigned>(shared), stream, args, nullptr));
  }
}

Function* registered(const void* host_stub) {
  std::lock_guard lk(g_mu);
  auto it = g_functions.find(host_stub);
  return it == g_functions.end() ? nullptr : it->second;
}

// cudaMalloc's work in the current context: a 0-byte request gets NULL (the driver would refuse it).
cudaError_t device_alloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  const CUresult r = drv().MemAlloc(&p, bytes);
  if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
  return result(r);
}

bool capturing(cudaStream_t stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return drv().StreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool is_device_pointer(const void* p) {
  unsigned type = 0;
  return drv().PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(p)) ==
             CUDA_SUCCESS &&
         (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED);
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  if (kind == cudaMemcpyDefault) {  // unified addressing: the pointers say where they point
    const bool d = is_device_pointer(dst), s = is_device_pointer(src);
    kind = d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  const auto dd = reinterpret_cast<CUdeviceptr>(dst);
  const auto sd = reinterpret_cast<CUdeviceptr>(src);
  switch (kind) {
    case cudaMemcpyHostToDevice: return result(drv().MemcpyHtoDAsync(dd, src, n, stream));
    case cudaMemcpyDeviceToHost: return result(drv().MemcpyDtoHAsync(dst, sd, n, stream));
    case cudaMemcpyDeviceToDevice: return result(drv().MemcpyDtoDAsync(dd, sd, n, stream));
    case cudaMemcpyHostToHost:
      if (const CUresult r = drv().StreamSynchronize(stream); r != CUDA_SUCCESS) return result(r);
      std::memmove(dst, src, n);
      return cudaSuccess;
    default: return result(CUDA_ERROR_INVALID_VALUE);
  }
}

// The driver's memory types for a runtime copy kind (cudaMemcpyDefault: unified, the driver infers them).
bool memory_types(cudaMemcpyKind kind, CUmemorytype* dst, CUmemorytype* src) {
  switch (kind) {
    case cudaMemcpyHostToHost: *dst = *src = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyHostToDevice: *dst = CU_MEMORYTYPE_DEVICE, *src = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDeviceToHost: *dst = CU_MEMORYTYPE_HOST, *src = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDeviceToDevice: *dst = *src = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDefault: *dst = *src = CU_MEMORYTYPE_UNIFIED; return true;
  }
  return false;
}
// A side of a driver copy descriptor: host pointers in ...Host, device and unified ones in ...Device.
template <class P>
void set_side(CUmemorytype type, P* p, P** host, CUdeviceptr* device) {
  if (type == CU_MEMORYTYPE_HOST) {
    *host = p;
  } else {
    *device = reinterpret_cast<CUdeviceptr>(p);
  }
}
// cudaMemcpy2D[Async] as a CUDA_MEMCPY2D (the runtime's synchronous form takes the driver's
// cuMemcpy2DUnaligned, which cuda.h exempts from cuMemcpy2D's pitch restriction; libcudart 13 asks
// cuGetProcAddress for it too).
cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  CUDA_MEMCPY2D c{};
  if (!memory_types(kind, &c.dstMemoryType, &c.srcMemoryType)) return result(CUDA_ERROR_INVALID_VALUE);
  set_side<void>(c.dstMemoryType, dst, &c.dstHost, &c.dstDevice);
  set_side<const void>(c.srcMemoryType, src, &c.srcHost, &c.srcDevice);
  c.dstPitch = dpitch;
  c.srcPitch = spitch;
  c.WidthInBytes = width;
  c.Height = height;
  return result(sync ? drv().Memcpy2DUnaligned(&c) : drv().Memcpy2DAsync(&c, stream));
}

// The modules of unregistered binaries, unloaded when the runtime itself is torn down. Never destroyed:
// that is after every static destructor.
std::vector<CUmodule>& modules_to_unload() {
  static auto* m = new std::vector<CUmodule>;
  return *m;
}

// The toolkit's libcudart unloads its modules in its own destructor, which the dynamic linker runs after
// the program's exit handlers and every library's static destructors: a preloaded library's driver
// hooks (cuModuleUnload, cuLibraryUnload) then run after its own statics are gone (seen on an H200 with
// tvmm's interposer, tools/gpu/check.sh). The emulated runtime unloads as late.
__attribute__((destructor)) void unload_at_teardown() {
  for (CUmodule m : modules_to_unload()) (void)drv().ModuleUnload(m);
  modules_to_unload().clear();
}

}  // namespace

extern "C" {

// --- nvcc's registration and launch ABI ------------------------------------------------------------------------

void** __cudaRegisterFatBinary(void* wrapper) { return reinterpret_cast<void**>(new Binary{wrapper}); }
void __cudaRegisterFatBinaryEnd(void** /*handle*/) {}
void __cudaUnregisterFatBinary(void** handle) {
  // At exit (nvcc registers this with atexit): the binary's kernels can no longer be launched; its
  // modules are unloaded from every context that loaded them when the runtime is torn down (above).
  auto* b = reinterpret_cast<Binary*>(handle);
  std::lock_guard lk(g_mu);
  std::erase_if(g_functions, [&](const auto& entry) {
    if (entry.second->binary != b) return false;
    delete entry.second;
    return true;
  });
  std::erase_if(g_modules, [&](const auto& entry) {
    if (entry.first.first != b) return false;
    modules_to_unload().push_back(entry.second);
    return true;
  });
  delete b;
}
void __cudaRegisterFunction(void** handle, const char* host_stub, char* /*device_fun*/, const char* device_name,
                            int /*thread_limit*/, uint3* /*tid*/, uint3* /*bid*/, dim3* /*block*/, dim3* /*grid*/,
                            int* /*warp_size*/) {
  std::lock_guard lk(g_mu);
  g_functions[host_stub] = new Function{reinterpret_cast<Binary*>(handle), device_name, {}};
}
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream) {
  t_configs.push_back({grid, block, shared, stream});
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  if (t_configs.empty()) return result(CUDA_ERROR_INVALID_VALUE);
  const LaunchConfig c = t_configs.back();
  t_configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub) {
  Function* f = registered(host_stub);
  *kernel = reinterpret_cast<cudaKernel_t>(f);
  return f != nullptr ? cudaSuccess : result(static_cast<CUresult>(cudaErrorInvalidDeviceFunction));
}
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                               cudaStream_t stream) {
  return launch(reinterpret_cast<Function*>(kernel), grid, block, args, shared, stream);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                    cudaStream_t stream) {
  return launch(reinterpret_cast<Function*>(kernel), grid, block, args, shared,
                stream == nullptr ? cudaStreamPerThread : stream);
}
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream) {
  return launch(registered(func), grid, block, args, shared, stream);
}

// --- devices ---------------------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (drv().init_result != CUDA_SUCCESS) return result(drv().init_result);
  return result(drv().DeviceGetCount(count));
}
cudaError_t cudaSetDevice(int device) {
  if (drv().init_result != CUDA_SUCCESS) return result(drv().init_result);
  int n = 0;
  if (const CUresult r = drv().DeviceGetCount(&n); r != CUDA_SUCCESS) return result(r);
  if (device < 0 || device >= n) return result(CUDA_ERROR_INVALID_DEVICE);
  CUcontext ctx = nullptr;
  if (const CUresult r = primary_context(device, &ctx); r != CUDA_SUCCESS) return result(r);
  t_device = device;
  return result(drv().CtxSetCurrent(ctx));
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  if (drv().init_result != CUDA_SUCCESS) return result(drv().init_result);
  CUcontext ctx = nullptr;
  if (const CUresult r = drv().CtxGetCurrent(&ctx); r != CUDA_SUCCESS) return result(r);
  if (ctx == nullptr) {
    *device = t_device;
    return cudaSuccess;
  }
  CUdevice dev = 0;
  if (const CUresult r = drv().CtxGetDevice(&dev); r != CUDA_SUCCESS) return result(r);
  *device = dev;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  CUEMU_RT_READY();
  return result(drv().CtxSynchronize());
}
cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  if (drv().DriverGetVersion == nullptr) {
    *version = 0;  // "If no driver is installed, then 0 is returned as the driver version"
    return cudaSuccess;
  }
  return result(drv().DriverGetVersion(version));
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// --- errors ------------------------------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) { return std::exchange(t_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
const char* cudaGetErrorName(cudaError_t error) {
  const char* s = nullptr;
  if (drv().GetErrorName == nullptr || drv().GetErrorName(static_cast<CUresult>(error), &s) != CUDA_SUCCESS) {
    return "cudaErrorUnknown";
  }
  return s;
}
const char* cudaGetErrorString(cudaError_t error) {
  const char* s = nullptr;
  if (drv().GetErrorString == nullptr || drv().GetErrorString(static_cast<CUresult>(error), &s) != CUDA_SUCCESS) {
    return "unrecognized error code";
  }
  return s;
}

// --- memory ------------------------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  return device_alloc(ptr, bytes);
}
cudaError_t cudaFree(void* ptr) {
  CUEMU_RT_READY();  // cudaFree(NULL) is the idiom that initialises the runtime
  if (ptr == nullptr) return cudaSuccess;
  // The runtime's cudaFree waits for the device's work before the memory goes, so a kernel still
  // running on it cannot fault.
  if (const CUresult r = drv().CtxSynchronize(); r != CUDA_SUCCESS) return result(r);
  return result(drv().MemFree(reinterpret_cast<CUdeviceptr>(ptr)));
}
// Pitched allocations: rows padded to 512 bytes (CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT of
// compute capability 9.0), in one cuMemAlloc.
// (Never through cudaMalloc by name: under LD_PRELOAD that would reach the interposer's hook.)
cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  if (ptr == nullptr || pitch == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  *pitch = (width + 511) / 512 * 512;
  return device_alloc(ptr, *pitch * height);
}
cudaError_t cudaMalloc3D(struct cudaPitchedPtr* out, struct cudaExtent extent) {
  if (out == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  const size_t pitch = (extent.width + 511) / 512 * 512;
  void* p = nullptr;
  if (const cudaError_t e = device_alloc(&p, pitch * extent.height * extent.depth); e != cudaSuccess) return e;
  *out = {p, pitch, extent.width, extent.height};
  return cudaSuccess;
}
// Stream-ordered allocation, emulated: the memory exists from the call on (earlier than stream order
// requires, which no correct program can tell), and a free waits for the stream's work before the memory
// goes. Inside a stream capture both are refused (the emulator has no memory nodes).
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  if (ptr == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  if (capturing(stream)) return result(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  const CUresult r = drv().MemAlloc(&p, bytes);
  if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
  return result(r);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  CUEMU_RT_READY();
  if (ptr == nullptr) return cudaSuccess;
  if (capturing(stream)) return result(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (const CUresult r = drv().StreamSynchronize(stream); r != CUDA_SUCCESS) return result(r);
  return result(drv().MemFree(reinterpret_cast<CUdeviceptr>(ptr)));
}
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned int flags) {
  if (ptr == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  CUdeviceptr p = 0;
  const CUresult r = drv().MemAllocManaged(&p, bytes, flags);
  if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
  return result(r);
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  CUEMU_RT_READY();
  return result(drv().MemAllocHost(ptr, bytes));
}
cudaError_t cudaFreeHost(void* ptr) {
  CUEMU_RT_READY();
  return result(drv().MemFreeHost(ptr));
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  CUEMU_RT_READY();
  return result(drv().MemGetInfo(free, total));
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
  CUEMU_RT_READY();
  // Synchronous: on the legacy default stream, and the call returns when the copy is done.
  if (const cudaError_t e = copy(dst, src, bytes, kind, nullptr); e != cudaSuccess) return e;
  return result(drv().StreamSynchronize(nullptr));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream) {
  CUEMU_RT_READY();
  return copy(dst, src, bytes, kind, stream);
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  CUEMU_RT_READY();
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, true);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  CUEMU_RT_READY();
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false);
}
// cudaMemcpy3DAsync between pitched pointers ("If no CUDA array is participating in the copy then the
// extents are defined in elements of unsigned char"); arrays are not emulated.
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  if (p == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  if (p->srcArray != nullptr || p->dstArray != nullptr) return result(CUDA_ERROR_NOT_SUPPORTED);
  CUDA_MEMCPY3D c{};
  if (!memory_types(p->kind, &c.dstMemoryType, &c.srcMemoryType)) return result(CUDA_ERROR_INVALID_VALUE);
  set_side<void>(c.dstMemoryType, p->dstPtr.ptr, &c.dstHost, &c.dstDevice);
  set_side<const void>(c.srcMemoryType, p->srcPtr.ptr, &c.srcHost, &c.srcDevice);
  // Each side's position and pitched pointer, in the driver's fields of that side.
  const auto place = [](const cudaPos& pos, const cudaPitchedPtr& ptr, std::size_t* x, std::size_t* y, std::size_t* z,
                        std::size_t* pitch, std::size_t* height) {
    *x = pos.x, *y = pos.y, *z = pos.z, *pitch = ptr.pitch, *height = ptr.ysize;
  };
  place(p->srcPos, p->srcPtr, &c.srcXInBytes, &c.srcY, &c.srcZ, &c.srcPitch, &c.srcHeight);
  place(p->dstPos, p->dstPtr, &c.dstXInBytes, &c.dstY, &c.dstZ, &c.dstPitch, &c.dstHeight);
  c.WidthInBytes = p->extent.width;
  c.Height = p->extent.height;
  c.Depth = p->extent.depth;
  return result(drv().Memcpy3DAsync(&c, stream));
}
// Memsets: in stream order (cudaMemset on the legacy stream, asynchronous with respect to the host for
// device memory, as the runtime documents).
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  CUEMU_RT_READY();
  return result(
      drv().MemsetD8Async(reinterpret_cast<CUdeviceptr>(ptr), static_cast<unsigned char>(value), bytes, stream));
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  CUEMU_RT_READY();
  return result(
      drv().MemsetD8Async(reinterpret_cast<CUdeviceptr>(ptr), static_cast<unsigned char>(value), bytes, nullptr));
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return result(CUDA_ERROR_INVALID_VALUE);
  CUEMU_RT_READY();
  *attr = {};
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  unsigned type = 0;
  // "cudaPointerGetAttributes ... returns cudaMemoryTypeUnregistered for host memory not registered
  // with CUDA" (since CUDA 11).
  if (drv().PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    attr->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  int managed = 0, ordinal = -1;
  (void)drv().PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
  (void)drv().PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
  attr->device = ordinal;
  if (managed != 0) {
    attr->type = cudaMemoryTypeManaged;
    attr->devicePointer = attr->hostPointer = const_cast<void*>(ptr);
  } else if (type == CU_MEMORYTYPE_HOST) {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = const_cast<void*>(ptr);
    attr->devicePointer = const_cast<void*>(ptr);
  } else {
    attr->type = cudaMemoryTypeDevice;
    attr->devicePointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}
// The emulator has no interprocess handles.
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* /*handle*/, void* /*ptr*/) {
  return result(CUDA_ERROR_NOT_SUPPORTED);
}

// --- streams, events, capture and graphs ---------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  CUEMU_RT_READY();
  return result(drv().StreamCreate(stream, CU_STREAM_DEFAULT));
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  CUEMU_RT_READY();
  return result(drv().StreamCreate(stream, flags));
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUEMU_RT_READY();
  return result(drv().StreamDestroy(stream));
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUEMU_RT_READY();
  return result(drv().StreamSynchronize(stream));
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUEMU_RT_READY();
  const CUresult r = drv().StreamQuery(stream);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : result(r);  // not ready is not an error to keep
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  CUEMU_RT_READY();
  return result(drv().StreamWaitEvent(stream, event, flags));
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  CUEMU_RT_READY();
  return result(drv().EventCreate(event, CU_EVENT_DEFAULT));
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  CUEMU_RT_READY();
  return result(drv().EventCreate(event, flags));
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  CUEMU_RT_READY();
  return result(drv().EventDestroy(event));
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUEMU_RT_READY();
  return result(drv().EventRecord(event, stream));
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  CUEMU_RT_READY();
  const CUresult r = drv().EventQuery(event);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : result(r);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  CUEMU_RT_READY();
  return result(drv().EventSynchronize(event));
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  CUEMU_RT_READY();
  return result(drv().LaunchHostFunc(stream, fn, data));
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  CUEMU_RT_READY();
  return result(drv().StreamBeginCapture(stream, static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  CUEMU_RT_READY();
  return result(drv().StreamEndCapture(stream, graph));
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  CUEMU_RT_READY();
  return result(drv().StreamIsCapturing(stream, reinterpret_cast<CUstreamCaptureStatus*>(status)));
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  CUEMU_RT_READY();
  return result(drv().GraphInstantiateWithFlags(exec, graph, flags));
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  CUEMU_RT_READY();
  return result(drv().GraphLaunch(exec, stream));
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  CUEMU_RT_READY();
  return result(drv().GraphDestroy(graph));
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  CUEMU_RT_READY();
  return result(drv().GraphExecDestroy(exec));
}

// --- the driver's entry points
// ----------------------------------------------------------------------------------------

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult* status) {
  if (drv().GetProcAddress == nullptr) return result(drv().init_result);
  CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = drv().GetProcAddress(symbol, fn, static_cast<int>(version), flags, &s);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(s);
  return result(r);
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}

}  // extern "C"
