#include "fake_cuda_driver.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tvmm::test::fake_cuda {

Fake* g_fake = nullptr;

std::vector<CUcontext>& fake_stack() {
  thread_local std::vector<CUcontext> stack;
  return stack;
}

std::vector<Call> calls(const std::string& name) {
  std::lock_guard lk(g_fake->mu);
  std::vector<Call> out;
  for (const auto& c : g_fake->log) {
    if (c.name == name) out.push_back(c);
  }
  return out;
}

std::shared_ptr<const cu::Api> fake_api() {
  auto api = std::make_shared<cu::Api>();
  api->Init = [](unsigned) { return CUDA_SUCCESS; };
  api->DeviceGetCount = [](int* n) {
    *n = 4;
    return CUDA_SUCCESS;
  };
  api->DeviceGet = [](CUdevice* d, int i) {
    *d = i;
    return CUDA_SUCCESS;
  };
  api->DeviceGetAttribute = [](int* v, CUdevice_attribute a, CUdevice) {
    *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
    if (a == CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) *v = g_fake->host_numa ? 1 : 0;
    if (a == CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) *v = 1;
    if (a == CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY || a == CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) {
      *v = g_fake->managed ? 1 : 0;
    }
    return CUDA_SUCCESS;
  };
  api->CtxGetDevice = [](CUdevice* d) {
    g_fake->add({"cuCtxGetDevice"});
    if (fake_stack().empty()) return CUDA_ERROR_INVALID_CONTEXT;  // cuda.h: no context current
    *d = g_fake->current_device;
    return CUDA_SUCCESS;
  };
  api->DeviceGetName = [](char* s, int n, CUdevice) {
    std::snprintf(s, static_cast<std::size_t>(n), "Fake GPU");
    return CUDA_SUCCESS;
  };
  api->DeviceGetPCIBusId = [](char* s, int n, CUdevice) {
    std::snprintf(s, static_cast<std::size_t>(n), "0000:65:00.0");
    return CUDA_SUCCESS;
  };
  api->DeviceTotalMem = [](std::size_t* b, CUdevice) {
    *b = 64 * kGranularity;
    return CUDA_SUCCESS;
  };
  api->MemGetInfo = [](std::size_t* free, std::size_t* total) {
    *free = 40 * kGranularity;
    *total = 64 * kGranularity;
    return CUDA_SUCCESS;
  };
  api->DevicePrimaryCtxRetain = [](CUcontext* c, CUdevice) {
    *c = reinterpret_cast<CUcontext>(0x1);
    return CUDA_SUCCESS;
  };
  api->DevicePrimaryCtxRelease = [](CUdevice) { return CUDA_SUCCESS; };
  // One context stack per thread, as the driver keeps (the backend pushes and pops its own).
  api->CtxGetCurrent = [](CUcontext* c) {
    *c = fake_stack().empty() ? nullptr : fake_stack().back();
    return CUDA_SUCCESS;
  };
  api->CtxPushCurrent = [](CUcontext c) {
    fake_stack().push_back(c);
    return CUDA_SUCCESS;
  };
  api->CtxPopCurrent = [](CUcontext* c) {
    if (fake_stack().empty()) return CUDA_ERROR_INVALID_CONTEXT;
    *c = fake_stack().back();
    fake_stack().pop_back();
    return CUDA_SUCCESS;
  };
  api->DriverGetVersion = [](int* v) {
    *v = CUDA_VERSION;  // the toolkit's own: its kernels load
    return CUDA_SUCCESS;
  };
  api->MemGetAllocationGranularity = [](std::size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
    *g = kGranularity;
    return CUDA_SUCCESS;
  };
  api->MemAddressReserve = [](CUdeviceptr* p, std::size_t size, std::size_t, CUdeviceptr, unsigned long long) {
    // Aligned to the granularity, as the driver's are (the slack before it stays reserved).
    void* raw = ::mmap(nullptr, size + kGranularity, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    void* m = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + kGranularity - 1) / kGranularity *
                                      kGranularity);
    {
      std::lock_guard lk(g_fake->mu);
      g_fake->reservations.emplace_back(m, size);
    }
    *p = reinterpret_cast<CUdeviceptr>(m);
    g_fake->add({"cuMemAddressReserve", reinterpret_cast<std::uintptr_t>(m), size});
    return CUDA_SUCCESS;
  };
  api->MemAddressFree = [](CUdeviceptr p, std::size_t size) {
    ::munmap(reinterpret_cast<void*>(p), size);
    g_fake->add({"cuMemAddressFree", static_cast<std::uintptr_t>(p), size});
    return CUDA_SUCCESS;
  };
  api->MemCreate = [](CUmemGenericAllocationHandle* h, std::size_t size, const CUmemAllocationProp* prop,
                      unsigned long long) {
    const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    if ((prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE && !(host && g_fake->host_numa)) ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int fd = ::memfd_create("fake-allocation", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) ::close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    {
      std::lock_guard lk(g_fake->mu);
      *h = g_fake->next_handle++;
      g_fake->memfds.push_back(fd);
    }
    g_fake->add({host ? "cuMemCreate(host numa " + std::to_string(prop->location.id) + ")" : "cuMemCreate", 0, size});
    return CUDA_SUCCESS;
  };
  api->MemRelease = [](CUmemGenericAllocationHandle h) {
    {
      // The memory lives on in its mappings (cuMemRelease: freed once they are unmapped).
      std::lock_guard lk(g_fake->mu);
      ::close(std::exchange(g_fake->memfds.at(h - 1), -1));
    }
    g_fake->add({"cuMemRelease"});
    return CUDA_SUCCESS;
  };
  api->MemMap = [](CUdeviceptr p, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle h,
                   unsigned long long) {
    if (g_fake->map_result != CUDA_SUCCESS) return g_fake->map_result;
    int fd = -1;
    {
      std::lock_guard lk(g_fake->mu);
      fd = g_fake->memfds.at(h - 1);
    }
    if (::mmap(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
               static_cast<off_t>(offset)) == MAP_FAILED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    g_fake->add({"cuMemMap", static_cast<std::uintptr_t>(p), size, reinterpret_cast<const void*>(h)});
    return CUDA_SUCCESS;
  };
  api->MemUnmap = [](CUdeviceptr p, std::size_t size) {
    // Back to reserved memory of its own (this fake keeps reserved addresses writable).
    ::mmap(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    g_fake->add({"cuMemUnmap", static_cast<std::uintptr_t>(p), size});
    return CUDA_SUCCESS;
  };
  api->MemSetAccess = [](CUdeviceptr p, std::size_t size, const CUmemAccessDesc* d, std::size_t n) {
    if (n != 1 || d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
    g_fake->add({"cuMemSetAccess", static_cast<std::uintptr_t>(p), size});
    return CUDA_SUCCESS;
  };
  api->MemAllocHost = [](void** p, std::size_t b) {
    *p = std::malloc(b);
    return *p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  };
  api->MemFreeHost = [](void* p) {
    std::free(p);
    return CUDA_SUCCESS;
  };
  api->MemHostRegister = [](void* p, std::size_t b, unsigned) {
    g_fake->add({"cuMemHostRegister", reinterpret_cast<std::uintptr_t>(p), b});
    return CUDA_SUCCESS;
  };
  api->MemHostUnregister = [](void* p) {
    g_fake->add({"cuMemHostUnregister", reinterpret_cast<std::uintptr_t>(p)});
    return CUDA_SUCCESS;
  };
  api->StreamCreate = [](CUstream* s, unsigned flags) {
    if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lk(g_fake->mu);
    *s = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(0x1000 + ++g_fake->streams));
    return CUDA_SUCCESS;
  };
  api->StreamDestroy = [](CUstream) { return CUDA_SUCCESS; };
  api->StreamSynchronize = [](CUstream) { return CUDA_SUCCESS; };
  api->CtxSynchronize = [] { return CUDA_SUCCESS; };
  api->StreamWaitEvent = [](CUstream s, CUevent e, unsigned) {
    g_fake->add({"cuStreamWaitEvent", 0, 0, s, e});
    return CUDA_SUCCESS;
  };
  api->MemcpyHtoDAsync = [](CUdeviceptr d, const void* h, std::size_t b, CUstream s) {
    std::memcpy(reinterpret_cast<void*>(d), h, b);
    g_fake->add({"cuMemcpyHtoDAsync", static_cast<std::uintptr_t>(d), b, s});
    return CUDA_SUCCESS;
  };
  api->MemcpyDtoHAsync = [](void* h, CUdeviceptr d, std::size_t b, CUstream s) {
    std::memcpy(h, reinterpret_cast<const void*>(d), b);
    g_fake->add({"cuMemcpyDtoHAsync", static_cast<std::uintptr_t>(d), b, s});
    return CUDA_SUCCESS;
  };
  api->MemcpyDtoDAsync = [](CUdeviceptr dst, CUdeviceptr src, std::size_t b, CUstream s) {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), b);
    Call c{"cuMemcpyDtoDAsync", static_cast<std::uintptr_t>(src), b, s};
    c.event = reinterpret_cast<const void*>(dst);
    g_fake->add(c);
    return CUDA_SUCCESS;
  };
  api->MemAllocManaged = [](CUdeviceptr* p, std::size_t bytes, unsigned flags) {
    if (flags != CU_MEM_ATTACH_GLOBAL) return CUDA_ERROR_INVALID_VALUE;
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = reinterpret_cast<CUdeviceptr>(m);
    g_fake->add({"cuMemAllocManaged", reinterpret_cast<std::uintptr_t>(m), bytes});
    return CUDA_SUCCESS;
  };
  api->MemFree = [](CUdeviceptr p) {
    g_fake->add({"cuMemFree", static_cast<std::uintptr_t>(p)});
    return CUDA_SUCCESS;
  };
  api->MemAdvise = [](CUdeviceptr p, std::size_t bytes, CUmem_advise advice, CUdevice dev) {
    if (advice != CU_MEM_ADVISE_SET_PREFERRED_LOCATION) return CUDA_ERROR_INVALID_VALUE;
    g_fake->add(
        {dev == CU_DEVICE_CPU ? "cuMemAdvise(cpu)" : "cuMemAdvise(gpu)", static_cast<std::uintptr_t>(p), bytes});
    return CUDA_SUCCESS;
  };
  api->MemPrefetchAsync = [](CUdeviceptr p, std::size_t bytes, CUdevice dev, CUstream s) {
    Call c{dev == CU_DEVICE_CPU ? "cuMemPrefetchAsync(cpu)" : "cuMemPrefetchAsync(gpu)", static_cast<std::uintptr_t>(p),
           bytes, s};
    g_fake->add(c);
    return CUDA_SUCCESS;
  };
  api->LaunchHostFunc = [](CUstream, CUhostFn fn, void* user) {
    fn(user);
    return CUDA_SUCCESS;
  };
  api->EventCreate = [](CUevent* e, unsigned) {
    std::lock_guard lk(g_fake->mu);
    *e = reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(0x100000 + ++g_fake->events));
    return CUDA_SUCCESS;
  };
  api->EventDestroy = [](CUevent) { return CUDA_SUCCESS; };
  api->EventRecord = [](CUevent e, CUstream s) {
    g_fake->add({"cuEventRecord", 0, 0, s, e});
    return CUDA_SUCCESS;
  };
  api->EventQuery = [](CUevent) { return CUDA_SUCCESS; };
  api->EventSynchronize = [](CUevent) { return CUDA_SUCCESS; };
  api->EventElapsedTime = [](float* ms, CUevent, CUevent) {
    *ms = 1.5f;
    return CUDA_SUCCESS;
  };
  api->GetErrorName = [](CUresult, const char** n) {
    *n = "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
  };
  api->ModuleLoadData = [](CUmodule* m, const void* image) {
    if (image == nullptr) return CUDA_ERROR_INVALID_IMAGE;
    *m = reinterpret_cast<CUmodule>(0x2);
    g_fake->add({"cuModuleLoadData"});
    return CUDA_SUCCESS;
  };
  api->ModuleUnload = [](CUmodule) {
    g_fake->add({"cuModuleUnload"});
    return CUDA_SUCCESS;
  };
  api->ModuleGetFunction = [](CUfunction* f, CUmodule, const char* name) {
    static const std::vector<std::string> names = {"tvmm_fill", "tvmm_verify", "tvmm_checksum", "tvmm_compute",
                                                   "tvmm_busy"};
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return CUDA_ERROR_NOT_FOUND;
    *f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(0x3000 + (it - names.begin())));
    return CUDA_SUCCESS;
  };
  api->LaunchKernel = [](CUfunction f, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned,
                         CUstream s, void** params, void**) {
    // Records the kernel (by its index in the list above) as ptr, blocks x threads as bytes, and for
    // tvmm_busy its one argument (nanoseconds) as the event field.
    const auto index = reinterpret_cast<std::uintptr_t>(f) - 0x3000;
    Call c{"cuLaunchKernel", index, std::size_t{gx} * bx, s};
    if (index == 4) c.event = reinterpret_cast<const void*>(*static_cast<std::uint64_t*>(params[0]));
    g_fake->add(c);
    return CUDA_SUCCESS;
  };
  return api;
}

}  // namespace tvmm::test::fake_cuda
