#include "backends/device/cuda/cuda_api.hpp"

#include <dlfcn.h>

#include "tvmm/errors.hpp"

namespace tvmm::device::cuda {

namespace {

using GetProcAddress = CUresult (*)(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult* status);

template <class Fn>
void resolve(GetProcAddress get, const char* name, Fn& out) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = get(name, &p, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr) {
    throw device_error(std::string("no CUDA driver: the driver has no ") + name + " at ABI version " +
                           std::to_string(kAbiVersion) + " (driver too old?); install an R525 or newer driver",
                       "driver");
  }
  out = reinterpret_cast<Fn>(p);
}

}  // namespace

std::shared_ptr<const Api> load_driver() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    throw device_error(std::string("no CUDA driver: cannot load libcuda.so.1 (") + (e != nullptr ? e : "not found") +
                           "); install the NVIDIA driver, or use device.backend = \"sim\"",
                       "driver");
  }
  auto api = std::make_shared<Api>();
  api->library = std::shared_ptr<void>(lib, [](void* h) { ::dlclose(h); });
  // cuGetProcAddress_v2 itself is the one symbol looked up by name (it exists from CUDA 12.0 on).
  auto get = reinterpret_cast<GetProcAddress>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) {
    throw device_error(
        "no CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 (older than CUDA 12.0); install an "
        "R525 or newer driver",
        "driver");
  }
  resolve(get, "cuInit", api->Init);
  resolve(get, "cuDeviceGetCount", api->DeviceGetCount);
  resolve(get, "cuDeviceGet", api->DeviceGet);
  resolve(get, "cuDeviceGetAttribute", api->DeviceGetAttribute);
  resolve(get, "cuDeviceGetName", api->DeviceGetName);
  resolve(get, "cuDeviceGetPCIBusId", api->DeviceGetPCIBusId);
  resolve(get, "cuDeviceTotalMem", api->DeviceTotalMem);
  resolve(get, "cuDevicePrimaryCtxRetain", api->DevicePrimaryCtxRetain);
  resolve(get, "cuDevicePrimaryCtxRelease", api->DevicePrimaryCtxRelease);
  resolve(get, "cuDriverGetVersion", api->DriverGetVersion);
  resolve(get, "cuCtxGetCurrent", api->CtxGetCurrent);
  resolve(get, "cuCtxPushCurrent", api->CtxPushCurrent);
  resolve(get, "cuCtxPopCurrent", api->CtxPopCurrent);
  resolve(get, "cuCtxGetDevice", api->CtxGetDevice);
  resolve(get, "cuMemGetAllocationGranularity", api->MemGetAllocationGranularity);
  resolve(get, "cuMemAddressReserve", api->MemAddressReserve);
  resolve(get, "cuMemAddressFree", api->MemAddressFree);
  resolve(get, "cuMemCreate", api->MemCreate);
  resolve(get, "cuMemRelease", api->MemRelease);
  resolve(get, "cuMemMap", api->MemMap);
  resolve(get, "cuMemUnmap", api->MemUnmap);
  resolve(get, "cuMemSetAccess", api->MemSetAccess);
  resolve(get, "cuMemAllocHost", api->MemAllocHost);
  resolve(get, "cuMemFreeHost", api->MemFreeHost);
  resolve(get, "cuMemHostRegister", api->MemHostRegister);
  resolve(get, "cuMemHostUnregister", api->MemHostUnregister);
  resolve(get, "cuStreamCreate", api->StreamCreate);
  resolve(get, "cuStreamDestroy", api->StreamDestroy);
  resolve(get, "cuStreamSynchronize", api->StreamSynchronize);
  resolve(get, "cuCtxSynchronize", api->CtxSynchronize);
  resolve(get, "cuStreamWaitEvent", api->StreamWaitEvent);
  resolve(get, "cuMemcpyHtoDAsync", api->MemcpyHtoDAsync);
  resolve(get, "cuMemcpyDtoHAsync", api->MemcpyDtoHAsync);
  resolve(get, "cuMemcpyDtoDAsync", api->MemcpyDtoDAsync);
  resolve(get, "cuMemGetInfo", api->MemGetInfo);
  resolve(get, "cuMemAllocManaged", api->MemAllocManaged);
  resolve(get, "cuMemFree", api->MemFree);
  resolve(get, "cuMemAdvise", api->MemAdvise);
  resolve(get, "cuMemPrefetchAsync", api->MemPrefetchAsync);
  resolve(get, "cuLaunchHostFunc", api->LaunchHostFunc);
  resolve(get, "cuEventCreate", api->EventCreate);
  resolve(get, "cuEventDestroy", api->EventDestroy);
  resolve(get, "cuEventRecord", api->EventRecord);
  resolve(get, "cuEventQuery", api->EventQuery);
  resolve(get, "cuEventSynchronize", api->EventSynchronize);
  resolve(get, "cuEventElapsedTime", api->EventElapsedTime);
  resolve(get, "cuGetErrorName", api->GetErrorName);
  resolve(get, "cuModuleLoadData", api->ModuleLoadData);
  resolve(get, "cuModuleUnload", api->ModuleUnload);
  resolve(get, "cuModuleGetFunction", api->ModuleGetFunction);
  resolve(get, "cuLaunchKernel", api->LaunchKernel);
  return api;
}

std::string result_name(const Api& api, CUresult r) {
  const char* name = nullptr;
  if (api.GetErrorName != nullptr && api.GetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

}  // namespace tvmm::device::cuda
