// The driver's exported symbols. A program linked with -lcuda, or one that looks a name up with dlsym
// (tvmm's interposer drains with dlsym(libcuda, "cuCtxSynchronize") when no runtime is loaded), binds
// to the versioned names libcuda exports: cuMemAlloc_v2 for the 3020 ABI of cuMemAlloc, cuCtxCreate_v4
// for its 12050 ABI, and so on (cuda.h's "#define cuMemAlloc cuMemAlloc_v2" block). Each symbol here
// forwards to the entry point registered for that name and ABI, the same function cuGetProcAddress
// hands out. cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL: every ABI
// declared under its exported name), so a parameter list here that differs from the header's is a
// compile error.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cudaTypedefs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "entry.hpp"

namespace cuemu {
namespace {

// The entry point registered as `name` at ABI `version` (never a per-thread variant). Every symbol
// below has one; a missing one is a defect of the emulator, reported and fatal.
void* registered(const char* name, int version) {
  for (const Export& e : exports()) {
    if (!e.per_thread && e.version == version && std::strcmp(e.name, name) == 0) return e.fn;
  }
  std::fprintf(stderr, "cuda emulator: no entry point registered for %s at ABI %d\n", name, version);
  std::abort();
}

}  // namespace
}  // namespace cuemu

// SYMBOL(exported name, base name, ABI version, (parameters), (arguments))
#define CUEMU_SYMBOL(symbol, base, version, params, args)                                                      \
  extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI symbol params {                           \
    static const auto entry_ = reinterpret_cast<PFN_##base##_v##version>(::cuemu::registered(#base, version)); \
    return entry_ args;                                                                                        \
  }

// --- initialisation, devices, contexts ------------------------------------------------------------------
CUEMU_SYMBOL(cuInit, cuInit, 2000, (unsigned int flags), (flags))
CUEMU_SYMBOL(cuDriverGetVersion, cuDriverGetVersion, 2020, (int* v), (v))
CUEMU_SYMBOL(cuDeviceGetCount, cuDeviceGetCount, 2000, (int* n), (n))
CUEMU_SYMBOL(cuDeviceGet, cuDeviceGet, 2000, (CUdevice * d, int ordinal), (d, ordinal))
CUEMU_SYMBOL(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, (int* v, CUdevice_attribute a, CUdevice d), (v, a, d))
CUEMU_SYMBOL(cuDeviceGetName, cuDeviceGetName, 2000, (char* name, int len, CUdevice d), (name, len, d))
CUEMU_SYMBOL(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, (char* id, int len, CUdevice d), (id, len, d))
CUEMU_SYMBOL(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, (size_t * bytes, CUdevice d), (bytes, d))
CUEMU_SYMBOL(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, (CUcontext * c, CUdevice d), (c, d))
CUEMU_SYMBOL(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, (CUdevice d), (d))
CUEMU_SYMBOL(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, (CUdevice d), (d))
CUEMU_SYMBOL(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, (CUdevice d, unsigned int* f, int* a),
             (d, f, a))
CUEMU_SYMBOL(cuCtxCreate_v2, cuCtxCreate, 3020, (CUcontext * c, unsigned int f, CUdevice d), (c, f, d))
CUEMU_SYMBOL(cuCtxCreate_v4, cuCtxCreate, 12050, (CUcontext * c, CUctxCreateParams* p, unsigned int f, CUdevice d),
             (c, p, f, d))
CUEMU_SYMBOL(cuCtxDestroy_v2, cuCtxDestroy, 4000, (CUcontext c), (c))
CUEMU_SYMBOL(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000, (CUcontext c), (c))
CUEMU_SYMBOL(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000, (CUcontext * c), (c))
CUEMU_SYMBOL(cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext c), (c))
CUEMU_SYMBOL(cuCtxGetCurrent, cuCtxGetCurrent, 4000, (CUcontext * c), (c))
CUEMU_SYMBOL(cuCtxGetDevice, cuCtxGetDevice, 2000, (CUdevice * d), (d))
CUEMU_SYMBOL(cuCtxGetDevice_v2, cuCtxGetDevice, 13000, (CUdevice * d, CUcontext c), (d, c))
CUEMU_SYMBOL(cuCtxSynchronize, cuCtxSynchronize, 2000, (void), ())
CUEMU_SYMBOL(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, (CUcontext c), (c))
CUEMU_SYMBOL(cuGetErrorName, cuGetErrorName, 6000, (CUresult e, const char** s), (e, s))
CUEMU_SYMBOL(cuGetErrorString, cuGetErrorString, 6000, (CUresult e, const char** s), (e, s))
CUEMU_SYMBOL(cuGetProcAddress, cuGetProcAddress, 11030, (const char* s, void** p, int v, cuuint64_t f), (s, p, v, f))
CUEMU_SYMBOL(cuGetProcAddress_v2, cuGetProcAddress, 12000,
             (const char* s, void** p, int v, cuuint64_t f, CUdriverProcAddressQueryResult* r), (s, p, v, f, r))

// --- virtual memory ---------------------------------------------------------------------------------------
CUEMU_SYMBOL(cuMemAddressReserve, cuMemAddressReserve, 10020,
             (CUdeviceptr * p, size_t size, size_t align, CUdeviceptr addr, unsigned long long f),
             (p, size, align, addr, f))
CUEMU_SYMBOL(cuMemAddressFree, cuMemAddressFree, 10020, (CUdeviceptr p, size_t size), (p, size))
CUEMU_SYMBOL(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020,
             (size_t * g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags o), (g, prop, o))
CUEMU_SYMBOL(cuMemCreate, cuMemCreate, 10020,
             (CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp* prop, unsigned long long f),
             (h, size, prop, f))
CUEMU_SYMBOL(cuMemRelease, cuMemRelease, 10020, (CUmemGenericAllocationHandle h), (h))
CUEMU_SYMBOL(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000,
             (CUmemGenericAllocationHandle * h, void* addr), (h, addr))
CUEMU_SYMBOL(cuMemMap, cuMemMap, 10020,
             (CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long f),
             (p, size, offset, h, f))
CUEMU_SYMBOL(cuMemUnmap, cuMemUnmap, 10020, (CUdeviceptr p, size_t size), (p, size))
CUEMU_SYMBOL(cuMemSetAccess, cuMemSetAccess, 10020, (CUdeviceptr p, size_t size, const CUmemAccessDesc* d, size_t n),
             (p, size, d, n))
CUEMU_SYMBOL(cuMemGetAccess, cuMemGetAccess, 10020, (unsigned long long* f, const CUmemLocation* l, CUdeviceptr p),
             (f, l, p))
CUEMU_SYMBOL(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020,
             (CUmemAllocationProp * prop, CUmemGenericAllocationHandle h), (prop, h))

// --- memory -------------------------------------------------------------------------------------------------
CUEMU_SYMBOL(cuMemAlloc_v2, cuMemAlloc, 3020, (CUdeviceptr * p, size_t bytes), (p, bytes))
CUEMU_SYMBOL(cuMemAllocPitch_v2, cuMemAllocPitch, 3020,
             (CUdeviceptr * p, size_t* pitch, size_t w, size_t h, unsigned int e), (p, pitch, w, h, e))
CUEMU_SYMBOL(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, (CUmemoryPool * pool, CUdevice d), (pool, d))
CUEMU_SYMBOL(cuMemAllocAsync, cuMemAllocAsync, 11020, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))
CUEMU_SYMBOL(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020,
             (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s))
CUEMU_SYMBOL(cuMemFreeAsync, cuMemFreeAsync, 11020, (CUdeviceptr p, CUstream s), (p, s))
CUEMU_SYMBOL(cuMemFree_v2, cuMemFree, 3020, (CUdeviceptr p), (p))
CUEMU_SYMBOL(cuMemGetInfo_v2, cuMemGetInfo, 3020, (size_t * free, size_t* total), (free, total))
CUEMU_SYMBOL(cuMemAllocHost_v2, cuMemAllocHost, 3020, (void** p, size_t bytes), (p, bytes))
CUEMU_SYMBOL(cuMemFreeHost, cuMemFreeHost, 2000, (void* p), (p))
CUEMU_SYMBOL(cuMemHostRegister_v2, cuMemHostRegister, 6050, (void* p, size_t bytes, unsigned int f), (p, bytes, f))
CUEMU_SYMBOL(cuMemHostUnregister, cuMemHostUnregister, 4000, (void* p), (p))
CUEMU_SYMBOL(cuMemAllocManaged, cuMemAllocManaged, 6000, (CUdeviceptr * p, size_t bytes, unsigned int f), (p, bytes, f))
CUEMU_SYMBOL(cuMemAdvise, cuMemAdvise, 8000, (CUdeviceptr p, size_t n, CUmem_advise a, CUdevice d), (p, n, a, d))
CUEMU_SYMBOL(cuMemAdvise_v2, cuMemAdvise, 12020, (CUdeviceptr p, size_t n, CUmem_advise a, CUmemLocation l),
             (p, n, a, l))
CUEMU_SYMBOL(cuMemPrefetchAsync, cuMemPrefetchAsync, 8000, (CUdeviceptr p, size_t n, CUdevice d, CUstream s),
             (p, n, d, s))
CUEMU_SYMBOL(cuMemPrefetchAsync_v2, cuMemPrefetchAsync, 12020,
             (CUdeviceptr p, size_t n, CUmemLocation l, unsigned int f, CUstream s), (p, n, l, f, s))
CUEMU_SYMBOL(cuPointerGetAttribute, cuPointerGetAttribute, 4000, (void* data, CUpointer_attribute a, CUdeviceptr p),
             (data, a, p))
CUEMU_SYMBOL(cuPointerGetAttributes, cuPointerGetAttributes, 7000,
             (unsigned int n, CUpointer_attribute* a, void** data, CUdeviceptr p), (n, a, data, p))
CUEMU_SYMBOL(cuMemGetAddressRange_v2, cuMemGetAddressRange, 3020, (CUdeviceptr * base, size_t* size, CUdeviceptr p),
             (base, size, p))
CUEMU_SYMBOL(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, (CUdeviceptr d, const void* s, size_t n, CUstream st),
             (d, s, n, st))
CUEMU_SYMBOL(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, (void* d, CUdeviceptr s, size_t n, CUstream st),
             (d, s, n, st))
CUEMU_SYMBOL(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st),
             (d, s, n, st))
CUEMU_SYMBOL(cuMemsetD8_v2, cuMemsetD8, 3020, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))
CUEMU_SYMBOL(cuMemsetD8Async, cuMemsetD8Async, 3020, (CUdeviceptr d, unsigned char v, size_t n, CUstream s),
             (d, v, n, s))
CUEMU_SYMBOL(cuMemsetD16_v2, cuMemsetD16, 3020, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))
CUEMU_SYMBOL(cuMemsetD32_v2, cuMemsetD32, 3020, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))
CUEMU_SYMBOL(cuMemsetD16Async, cuMemsetD16Async, 3020, (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
             (d, v, n, s))
CUEMU_SYMBOL(cuMemsetD32Async, cuMemsetD32Async, 3020, (CUdeviceptr d, unsigned int v, size_t n, CUstream s),
             (d, v, n, s))
CUEMU_SYMBOL(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
CUEMU_SYMBOL(cuMemcpy, cuMemcpy, 4000, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
CUEMU_SYMBOL(cuMemcpyAsync, cuMemcpyAsync, 4000, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
CUEMU_SYMBOL(cuMemcpyPeer, cuMemcpyPeer, 4000, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n),
             (d, dc, s, sc, n))
CUEMU_SYMBOL(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000,
             (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st), (d, dc, s, sc, n, st))
CUEMU_SYMBOL(cuLaunchKernelEx, cuLaunchKernelEx, 11060,
             (const CUlaunchConfig* config, CUfunction f, void** params, void** extra), (config, f, params, extra))
CUEMU_SYMBOL(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000,
             (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
              unsigned int bz, unsigned int shmem, CUstream s, void** params),
             (f, gx, gy, gz, bx, by, bz, shmem, s, params))
CUEMU_SYMBOL(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, (CUdeviceptr d, const void* s, size_t n), (d, s, n))
CUEMU_SYMBOL(cuMemcpy2D_v2, cuMemcpy2D, 3020, (const CUDA_MEMCPY2D* c), (c))
CUEMU_SYMBOL(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, (const CUDA_MEMCPY2D* c), (c))
CUEMU_SYMBOL(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, (const CUDA_MEMCPY2D* c, CUstream s), (c, s))
CUEMU_SYMBOL(cuMemcpy3D_v2, cuMemcpy3D, 3020, (const CUDA_MEMCPY3D* c), (c))
CUEMU_SYMBOL(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, (const CUDA_MEMCPY3D* c, CUstream s), (c, s))
CUEMU_SYMBOL(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, (void* d, CUdeviceptr s, size_t n), (d, s, n))

// --- modules and launches -------------------------------------------------------------------------------------
CUEMU_SYMBOL(cuModuleLoadData, cuModuleLoadData, 2000, (CUmodule * m, const void* image), (m, image))
CUEMU_SYMBOL(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, (CUmodule * m, const void* image), (m, image))
CUEMU_SYMBOL(cuModuleUnload, cuModuleUnload, 2000, (CUmodule m), (m))
CUEMU_SYMBOL(cuModuleGetFunction, cuModuleGetFunction, 2000, (CUfunction * f, CUmodule m, const char* name),
             (f, m, name))
CUEMU_SYMBOL(cuLaunchKernel, cuLaunchKernel, 4000,
             (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
              unsigned int bz, unsigned int shmem, CUstream s, void** params, void** extra),
             (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))
CUEMU_SYMBOL(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, (CUfunction f, size_t index, size_t* offset, size_t* size),
             (f, index, offset, size))
CUEMU_SYMBOL(cuLaunchHostFunc, cuLaunchHostFunc, 10000, (CUstream s, CUhostFn fn, void* data), (s, fn, data))

// --- streams, events, capture and graphs ------------------------------------------------------------------------
CUEMU_SYMBOL(cuStreamCreate, cuStreamCreate, 2000, (CUstream * s, unsigned int f), (s, f))
CUEMU_SYMBOL(cuStreamDestroy_v2, cuStreamDestroy, 4000, (CUstream s), (s))
CUEMU_SYMBOL(cuStreamSynchronize, cuStreamSynchronize, 2000, (CUstream s), (s))
CUEMU_SYMBOL(cuStreamQuery, cuStreamQuery, 2000, (CUstream s), (s))
CUEMU_SYMBOL(cuStreamWaitEvent, cuStreamWaitEvent, 3020, (CUstream s, CUevent e, unsigned int f), (s, e, f))
CUEMU_SYMBOL(cuEventCreate, cuEventCreate, 2000, (CUevent * e, unsigned int f), (e, f))
CUEMU_SYMBOL(cuEventDestroy_v2, cuEventDestroy, 4000, (CUevent e), (e))
CUEMU_SYMBOL(cuEventRecord, cuEventRecord, 2000, (CUevent e, CUstream s), (e, s))
CUEMU_SYMBOL(cuEventQuery, cuEventQuery, 2000, (CUevent e), (e))
CUEMU_SYMBOL(cuEventSynchronize, cuEventSynchronize, 2000, (CUevent e), (e))
CUEMU_SYMBOL(cuEventElapsedTime, cuEventElapsedTime, 2000, (float* ms, CUevent a, CUevent b), (ms, a, b))
CUEMU_SYMBOL(cuEventElapsedTime_v2, cuEventElapsedTime, 12080, (float* ms, CUevent a, CUevent b), (ms, a, b))
CUEMU_SYMBOL(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, (CUstream s, CUstreamCaptureMode m), (s, m))
CUEMU_SYMBOL(cuStreamEndCapture, cuStreamEndCapture, 10000, (CUstream s, CUgraph* g), (s, g))
CUEMU_SYMBOL(cuStreamIsCapturing, cuStreamIsCapturing, 10000, (CUstream s, CUstreamCaptureStatus* c), (s, c))
CUEMU_SYMBOL(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo, 12030,
             (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* id, CUgraph* g, const CUgraphNode** deps,
              const CUgraphEdgeData** edges, size_t* n),
             (s, c, id, g, deps, edges, n))
CUEMU_SYMBOL(cuGraphInstantiate_v2, cuGraphInstantiate, 11000,
             (CUgraphExec * e, CUgraph g, CUgraphNode* err, char* log, size_t n), (e, g, err, log, n))
CUEMU_SYMBOL(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040,
             (CUgraphExec * e, CUgraph g, unsigned long long f), (e, g, f))
CUEMU_SYMBOL(cuGraphLaunch, cuGraphLaunch, 10000, (CUgraphExec e, CUstream s), (e, s))
CUEMU_SYMBOL(cuGraphDestroy, cuGraphDestroy, 10000, (CUgraph g), (g))
CUEMU_SYMBOL(cuGraphExecDestroy, cuGraphExecDestroy, 10000, (CUgraphExec e), (e))
