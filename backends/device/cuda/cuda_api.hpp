#pragma once
// The CUDA driver entry points tvmm uses, as a table of function pointers. The real table is filled at
// run time: dlopen("libcuda.so.1"), then cuGetProcAddress_v2 by base name at a fixed ABI version, so
// tvmm never links libcuda and never resolves unsuffixed legacy symbols. Tests fill the same table
// with a fake driver (tests/unit/cuda_backend_test.cpp) to check the backend's calls without a GPU.

#include <cuda.h>

#include <memory>
#include <string>

namespace tvmm::device::cuda {

//! The ABI version requested for every entry point (CUDA 12.0: the oldest driver tvmm supports).
inline constexpr int kAbiVersion = 12000;

struct Api {
  CUresult (*Init)(unsigned flags) = nullptr;
  CUresult (*DeviceGetCount)(int* count) = nullptr;
  CUresult (*DeviceGet)(CUdevice* dev, int ordinal) = nullptr;
  CUresult (*DeviceGetAttribute)(int* value, CUdevice_attribute attr, CUdevice dev) = nullptr;
  CUresult (*DeviceGetName)(char* name, int len, CUdevice dev) = nullptr;
  CUresult (*DeviceGetPCIBusId)(char* id, int len, CUdevice dev) = nullptr;
  CUresult (*DeviceTotalMem)(std::size_t* bytes, CUdevice dev) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev) = nullptr;
  CUresult (*DevicePrimaryCtxRelease)(CUdevice dev) = nullptr;
  CUresult (*DriverGetVersion)(int* version) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext* ctx) = nullptr;
  CUresult (*CtxPushCurrent)(CUcontext ctx) = nullptr;
  CUresult (*CtxPopCurrent)(CUcontext* ctx) = nullptr;
  CUresult (*CtxGetDevice)(CUdevice* dev) = nullptr;
  CUresult (*MemGetAllocationGranularity)(std::size_t* granularity, const CUmemAllocationProp* prop,
                                          CUmemAllocationGranularity_flags option) = nullptr;
  CUresult (*MemAddressReserve)(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr addr,
                                unsigned long long flags) = nullptr;
  CUresult (*MemAddressFree)(CUdeviceptr ptr, std::size_t size) = nullptr;
  CUresult (*MemCreate)(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                        unsigned long long flags) = nullptr;
  CUresult (*MemRelease)(CUmemGenericAllocationHandle handle) = nullptr;
  CUresult (*MemMap)(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                     unsigned long long flags) = nullptr;
  CUresult (*MemUnmap)(CUdeviceptr ptr, std::size_t size) = nullptr;
  CUresult (*MemSetAccess)(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc, std::size_t count) = nullptr;
  CUresult (*MemAllocHost)(void** ptr, std::size_t bytes) = nullptr;
  CUresult (*MemFreeHost)(void* ptr) = nullptr;
  CUresult (*MemHostRegister)(void* ptr, std::size_t bytes, unsigned flags) = nullptr;
  CUresult (*MemHostUnregister)(void* ptr) = nullptr;
  CUresult (*StreamCreate)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*StreamDestroy)(CUstream stream) = nullptr;
  CUresult (*StreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;  // the 2000 ABI (the current context), as kAbiVersion resolves it
  CUresult (*StreamWaitEvent)(CUstream stream, CUevent event, unsigned flags) = nullptr;
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) = nullptr;
  CUresult (*MemcpyDtoHAsync)(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) = nullptr;
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) = nullptr;
  CUresult (*MemGetInfo)(std::size_t* free, std::size_t* total) = nullptr;
  CUresult (*MemAllocManaged)(CUdeviceptr* ptr, std::size_t bytes, unsigned flags) = nullptr;
  CUresult (*MemFree)(CUdeviceptr ptr) = nullptr;
  // The 12.0 ABI of both (a CUdevice, CU_DEVICE_CPU for the host), as kAbiVersion resolves them.
  CUresult (*MemAdvise)(CUdeviceptr ptr, std::size_t bytes, CUmem_advise advice, CUdevice device) = nullptr;
  CUresult (*MemPrefetchAsync)(CUdeviceptr ptr, std::size_t bytes, CUdevice device, CUstream stream) = nullptr;
  CUresult (*LaunchHostFunc)(CUstream stream, CUhostFn fn, void* user) = nullptr;
  CUresult (*EventCreate)(CUevent* event, unsigned flags) = nullptr;
  CUresult (*EventDestroy)(CUevent event) = nullptr;
  CUresult (*EventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*EventQuery)(CUevent event) = nullptr;
  CUresult (*EventSynchronize)(CUevent event) = nullptr;
  CUresult (*EventElapsedTime)(float* ms, CUevent start, CUevent end) = nullptr;
  CUresult (*GetErrorName)(CUresult error, const char** name) = nullptr;
  CUresult (*ModuleLoadData)(CUmodule* module, const void* image) = nullptr;
  CUresult (*ModuleUnload)(CUmodule module) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name) = nullptr;
  CUresult (*LaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shared, CUstream stream, void** params, void** extra) = nullptr;
  //! Keeps the driver library loaded while the table is in use (null for a fake).
  std::shared_ptr<void> library;
};

//! The driver's table. Throws tvmm::device_error ("no CUDA driver: ...") when libcuda.so.1 cannot be
//! loaded, is older than CUDA 12.0 (no cuGetProcAddress_v2), or lacks an entry point; the message
//! says which and how to fix it.
std::shared_ptr<const Api> load_driver();

//! "CUDA_ERROR_OUT_OF_MEMORY" for a result, through the table (or "CUresult N").
std::string result_name(const Api& api, CUresult r);

}  // namespace tvmm::device::cuda
