// tvmm's CUDA backend and pager on the CUDA driver emulator (ctest label "cuda-emulator"; the emulator
// is found on LD_LIBRARY_PATH as libcuda.so.1). Each test is a defect a real driver would show, and
// fails on the code before its fix.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <memory>
#include <thread>

#include "backends/device/cuda/cuda_device.hpp"
#include "backends/device/host_link.hpp"
#include "device_scratch.hpp"
#include "test_support.hpp"
#include "tvmm/tvmm.hpp"
#include "vmm/transparent/transparent_heap.hpp"

using namespace tvmm;

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// The driver the test itself talks to (the same library tvmm loads): a program's own CUDA calls.
struct Driver {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  GetProc get = lib != nullptr ? reinterpret_cast<GetProc>(::dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  template <class F>
  F at(const char* name, int version = 12000) const {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st{};
    if (get == nullptr || get(name, &p, version, 0, &st) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<F>(p);
  }
};
#define DRV(name) drv.at<decltype(&::name)>(#name)

// A pager on emulated GPU 0 (or the current context's device), 2 MiB pages.
Config cuda_config(std::size_t device_pages = 4, std::size_t host_pages = 8) {
  Config c;
  c.device_backend = "cuda";
  c.device_budget = device_pages * 2 * MiB;
  c.host_budget = host_pages * 2 * MiB;
  c.va_size = 256 * MiB;
  c.min_bytes = 0;
  c.host_numa = "none";
  c.bind_threads = false;
  return c;
}

double thread_cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

}  // namespace

// The backend used to make its primary context current on the calling thread and leave it there (and
// cache that per thread), so a program that made its own context current found another after the first
// tvmm call. Now every call pushes and pops: the caller's context, or its lack of one, never changes.
TEST(CudaOnEmulator, TvmmNeverChangesTheCallersCurrentContext) {
  Driver drv;
  ASSERT_NE(drv.get, nullptr) << "libcuda.so.1 is not the emulator: run through ctest (LD_LIBRARY_PATH)";
  ASSERT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  CUcontext mine = nullptr;
  ASSERT_EQ(drv.at<decltype(&::cuCtxCreate)>("cuCtxCreate", 12050)(&mine, nullptr, 0, 1), CUDA_SUCCESS);
  auto current = [&] {
    CUcontext c = reinterpret_cast<CUcontext>(0x1);
    EXPECT_EQ(DRV(cuCtxGetCurrent)(&c), CUDA_SUCCESS);
    return c;
  };
  {
    Pager p(cuda_config());  // "auto": the device of the current context, GPU 1
    EXPECT_EQ(current(), mine);
    auto s = p.create_stream();
    auto t = p.allocate(6 * MiB);
    {
      auto pin = t.pin(s, Access::write);
      EXPECT_EQ(current(), mine);
    }
    s.synchronize();
    auto u = p.allocate(8 * MiB);  // evicts t
    { auto pin = u.pin(Access::write); }
    EXPECT_EQ(t.tier(), Tier::host);
    EXPECT_EQ(current(), mine);
    std::thread([&] {  // a thread with no context keeps none
      { auto pin = t.pin(Access::read); }
      CUcontext c = reinterpret_cast<CUcontext>(0x1);
      EXPECT_EQ(DRV(cuCtxGetCurrent)(&c), CUDA_SUCCESS);
      EXPECT_EQ(c, nullptr);
    })
        .join();
    CUdevice dev = -1;
    EXPECT_EQ(DRV(cuCtxGetDevice)(&dev), CUDA_SUCCESS);
    EXPECT_EQ(dev, 1);
  }
  EXPECT_EQ(current(), mine);
  EXPECT_EQ(DRV(cuCtxDestroy)(mine), CUDA_SUCCESS);
}

// A host thread that waits for the GPU sleeps: the backend's events are blocking-sync (without the flag
// cuEventSynchronize busy-waits, cuda.h 16080, and the emulator spins as the driver would).
TEST(CudaOnEmulator, AHostWaitSleepsInsteadOfSpinningACore) {
  Pager p(cuda_config());
  auto s = p.create_stream();
  auto t = p.allocate(2 * MiB);
  {
    auto pin = t.pin(s, Access::write);
    s.launch([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });  // a long kernel
  }
  const double cpu0 = thread_cpu_ms();
  const auto t0 = std::chrono::steady_clock::now();
  { auto pin = t.pin(Access::read); }  // waits for the stream's use of the tensor
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_ms = thread_cpu_ms() - cpu0;
  EXPECT_GE(waited_ms, 250);
  EXPECT_LT(cpu_ms, 50) << "the host pin spun for " << cpu_ms << " ms of CPU while waiting " << waited_ms << " ms";
}

namespace {
// Makes the process's CUDA state sticky-broken, as a program's own faulting kernel would: a copy to
// memory the device was given no access to (cuda.h 2833: "any further CUDA work will return the same
// error").
void break_the_gpu(const Driver& drv) {
  (void)DRV(cuInit)(0);
  CUcontext ctx = nullptr;
  (void)DRV(cuDevicePrimaryCtxRetain)(&ctx, 0);
  (void)DRV(cuCtxPushCurrent)(ctx);
  CUdeviceptr va = 0;
  (void)DRV(cuMemAddressReserve)(&va, 2 * MiB, 0, 0, 0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  (void)DRV(cuMemCreate)(&h, 2 * MiB, &prop, 0);
  (void)DRV(cuMemMap)(va, 2 * MiB, 0, h, 0);
  static char byte = 1;
  (void)DRV(cuMemcpyHtoDAsync)(va, &byte, 1, nullptr);
  std::fprintf(stderr, "program: %d\n", static_cast<int>(DRV(cuStreamSynchronize)(nullptr)));
  CUcontext popped = nullptr;
  (void)DRV(cuCtxPopCurrent)(&popped);
}
}  // namespace

// After a sticky error every driver call fails; destroying the pager must still not throw (it did:
// ~PagerImpl -> reap -> TVMM_CHECK terminated the process), must say what happened once, and frees
// what it can. Its host memory is unmapped while the pager's write-backs were queued: the emulator once
// let a copy that had begun before the fault land after the fault was reported, into unmapped memory
// (SIGSEGV in about 4 runs of 10), where a failed GPU's context stops. Several rounds catch that.
TEST(CudaOnEmulatorDeathTest, APagerIsDestroyedCleanlyAfterAStickyError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int round = 0; round < 16; ++round) {
    EXPECT_EXIT(
        {
          {
            Pager p(cuda_config());
            auto s = p.create_stream();
            std::vector<Tensor> ts;
            for (int i = 0; i < 6; ++i) {
              ts.push_back(p.allocate(2 * MiB));
              auto pin = ts.back().pin(s, Access::write);
            }
            Driver drv;
            break_the_gpu(drv);
            ts.clear();
          }
          std::fprintf(stderr, "destroyed\n");
          std::_Exit(0);
        },
        ::testing::ExitedWithCode(0),
        "^cuda emulator: illegal address: a copy to [^\n]*\nprogram: 700\ntvmm: the cuda device failed for good "
        "\\(CUDA_ERROR_ILLEGAL_ADDRESS\\)[^\n]*\ndestroyed\n$")
        << "round " << round;
  }
}

namespace {
// The program's own allocation of `bytes` on GPU 0 (cuMemAlloc in its primary context), as another
// library or process would take memory; returns the address.
CUdeviceptr take_gpu_memory(const Driver& drv, std::size_t bytes) {
  EXPECT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  EXPECT_EQ(DRV(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(DRV(cuCtxPushCurrent)(ctx), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(DRV(cuMemAlloc)(&p, bytes), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  EXPECT_EQ(DRV(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  return p;
}
std::size_t free_gpu_memory(const Driver& drv) {
  EXPECT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  EXPECT_EQ(DRV(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(DRV(cuCtxPushCurrent)(ctx), CUDA_SUCCESS);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(DRV(cuMemGetInfo)(&free, &total), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  EXPECT_EQ(DRV(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  return free;
}
}  // namespace

// The budget was checked against the GPU's total memory only: a budget larger than what is free was
// accepted, and failed later, at a random pin.
TEST(CudaOnEmulator, ADeviceBudgetAboveTheFreeMemoryIsRefusedSayingWhatHoldsIt) {
  Driver drv;
  const std::size_t free = free_gpu_memory(drv);
  const CUdeviceptr held = take_gpu_memory(drv, free - 64 * MiB);  // another user of the GPU
  Config c = cuda_config();
  c.cuda_device = 0;
  c.device_budget = 128 * MiB;
  const std::string m = test::message_of([&] { Pager p(c); });
  EXPECT_NE(m.find("exceeds the device's free memory: 64 MiB of"), std::string::npos) << m;
  EXPECT_NE(m.find("held by other allocations"), std::string::npos) << m;
  EXPECT_NE(m.find("lower device.budget to at most 64 MiB"), std::string::npos) << m;
  CUcontext ctx = nullptr, popped = nullptr;
  ASSERT_EQ(DRV(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRV(cuCtxPushCurrent)(ctx), CUDA_SUCCESS);
  EXPECT_EQ(DRV(cuMemFree)(held), CUDA_SUCCESS);
  ASSERT_EQ(DRV(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  EXPECT_NO_THROW(Pager{c});  // with the memory back, the same budget fits
}

// Memory taken by someone else after the pager started: a frame the GPU cannot create was fatal to the
// pin that needed it. Now the device tier keeps the frames it has and the pager evicts into them.
TEST(CudaOnEmulator, AFrameTheGpuCannotCreateMakesThePagerEvictInstead) {
  Driver drv;
  Config c = cuda_config(8, 16);
  c.cuda_device = 0;
  Pager p(c);                                                  // frames are created on first need: none yet
  (void)take_gpu_memory(drv, free_gpu_memory(drv) - 4 * MiB);  // room for two 2 MiB frames
  std::vector<Tensor> ts;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(p.allocate(2 * MiB));
    EXPECT_NO_THROW({ auto pin = ts.back().pin(Access::write); }) << "tensor " << i;
  }
  for (auto& t : ts) EXPECT_NO_THROW({ auto pin = t.pin(Access::read); });
  EXPECT_EQ(p.stats().device_used_bytes, 4 * MiB);
  EXPECT_GT(p.stats().evictions, 0u);
  // A tensor larger than the frames there are is refused at once, naming the shortage (not the budget).
  Tensor big = p.allocate(6 * MiB);
  const std::string m = test::message_of([&] { auto pin = big.pin(Access::write); });
  EXPECT_NE(m.find("the device has memory for only 2 pages (4 MiB) of the 8 budgeted now"), std::string::npos) << m;
  EXPECT_EQ(m.find("raise device.budget"), std::string::npos) << m;
  p.check_invariants();
}

// Memory taken by others after a transparent heap started: a new page the GPU had no frame for failed
// the allocation as an "internal accounting error". It now starts on the host and moves to the device
// at a quiescent point once memory is back; with no room anywhere the error names the shortage.
TEST(CudaOnEmulator, ATransparentPageTheGpuHasNoFrameForStartsOnTheHost) {
  Driver drv;
  Config c = cuda_config(4, 4);
  c.cuda_device = 0;
  c.transparent_memory = "vmm";
  c.page_size = 2 * MiB;
  auto heap = vmm::make_transparent_heap(c, [] {});
  const CUdeviceptr held = take_gpu_memory(drv, free_gpu_memory(drv) - 2 * MiB);  // room for one frame
  std::vector<void*> ptrs;
  for (int i = 0; i < 3; ++i) ASSERT_NO_THROW(ptrs.push_back(heap->allocate(2 * MiB))) << "allocation " << i;
  EXPECT_EQ(heap->usage().on_device, 2 * MiB);
  for (int i = 0; i < 2; ++i) ASSERT_NO_THROW(ptrs.push_back(heap->allocate(2 * MiB))) << "allocation " << i + 3;
  // 8 pages budgeted, 5 in use, but the GPU holds one and the host pool's 4 are taken.
  const std::string m = test::message_of([&] { (void)heap->allocate(2 * MiB); });
  EXPECT_NE(m.find("the device pool has memory for only 1 of its 4 frames (other allocations hold the rest) and "
                   "the host-located pool has all 4 frames in use"),
            std::string::npos)
      << m;
  // The GPU is short, not the host: the advice is about GPU memory only.
  EXPECT_NE(m.find("or lower TVMM_DEVICE_BUDGET"), std::string::npos) << m;
  EXPECT_EQ(m.find("TVMM_HOST_BUDGET"), std::string::npos) << m;
  EXPECT_EQ(heap->usage().used, 5 * 2 * MiB);  // the failed allocation left nothing behind
  // Host pages and idle budget, but no memory for a frame now: a quiescent point does not drain for nothing.
  const auto drains = heap->counters().drains;
  heap->maintain(false);
  EXPECT_EQ(heap->counters().drains, drains);

  CUcontext ctx = nullptr, popped = nullptr;  // the memory comes back
  ASSERT_EQ(DRV(cuDevicePrimaryCtxRetain)(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRV(cuCtxPushCurrent)(ctx), CUDA_SUCCESS);
  EXPECT_EQ(DRV(cuMemFree)(held), CUDA_SUCCESS);
  ASSERT_EQ(DRV(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the pool tries again a second later
  heap->maintain(false);
  EXPECT_EQ(heap->usage().on_device, 4 * 2 * MiB);
  for (void* p : ptrs) heap->free(p);
}

// Host-NUMA chunks have their own allocation granularity; the transparent heap created them at the
// device chunks' size, which the driver refuses when the two differ.
TEST(CudaOnEmulator, HostLocatedChunksAreMadeAtTheirOwnGranularity) {
  ::setenv("TVMM_CUEMU_HOST_GRANULARITY", "4MiB", 1);  // read at cuInit (ctest runs each test alone)
  Driver drv;
  ASSERT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  CUmemAllocationProp host{};
  host.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  std::size_t g = 0;
  ASSERT_EQ(DRV(cuMemGetAllocationGranularity)(&g, &host, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  if (g != 4 * MiB) TVMM_SKIP_WITHOUT_GPU("the emulator started earlier in this process with other settings");
  Config c = cuda_config(4, 8);
  c.cuda_device = 0;
  c.device_budget = 8 * MiB;
  c.host_budget = 32 * MiB;
  c.transparent_memory = "vmm";
  auto heap = vmm::make_transparent_heap(c, [] {});
  std::vector<void*> ptrs;
  for (int i = 0; i < 5; ++i) ASSERT_NO_THROW(ptrs.push_back(heap->allocate(4 * MiB))) << i;
  EXPECT_GT(heap->counters().pages_demoted, 0u);  // pages went to host-located chunks
  c.page_size = 2 * MiB;                          // explicitly not a multiple of the host chunks' granularity
  const std::string m = test::message_of([&] { (void)vmm::make_transparent_heap(c, [] {}); });
  EXPECT_NE(m.find("granularity on this cuda device is 4 MiB"), std::string::npos) << m;
}

// nvcc 13 writes PTX ISA 9.0 and ELF-ABI-8 cubins, which a CUDA 12 driver cannot load. The pager needs
// CUDA 12.0 only and must work there; a kernel launch must say exactly which driver it needs (it failed
// with "driver_error (driver code 222)").
TEST(CudaOnEmulator, OnAnOlderDriverThePagerWorksAndTheKernelsSayWhatTheyNeed) {
  ::setenv("TVMM_CUEMU_DRIVER_VERSION", "12020", 1);  // a CUDA 12.2 driver (read at cuInit)
  Driver drv;
  ASSERT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  int version = 0;
  ASSERT_EQ(DRV(cuDriverGetVersion)(&version), CUDA_SUCCESS);
  if (version != 12020) TVMM_SKIP_WITHOUT_GPU("the emulator started earlier in this process with other settings");
  Config c = cuda_config();
  c.cuda_device = 0;
  Pager p(c);
  std::vector<Tensor> ts;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(p.allocate(2 * MiB));
    ASSERT_NO_THROW({ auto pin = ts.back().pin(Access::write); });
  }
  auto s = p.create_stream();
  const std::string m = test::message_of([&] { s.busy_for(std::chrono::microseconds(10)); });
#if defined(TVMM_HAVE_GPU_KERNELS)
  // The kernels' cubins need a driver of the toolkit's major version (CUDA_VERSION: the toolkit that built them).
  const std::string needed = "need a driver for CUDA " + std::to_string(CUDA_VERSION / 1000) + ".0 or newer";
  EXPECT_NE(m.find(needed), std::string::npos) << m;
  EXPECT_NE(m.find("this driver is for CUDA 12.2"), std::string::npos) << m;
  EXPECT_NE(m.find("the pager needs CUDA 12.0"), std::string::npos) << m;
#else
  EXPECT_NE(m.find("no GPU kernels"), std::string::npos) << m;
#endif
}

// Stream::launch callables are cuLaunchHostFunc callbacks: a CUDA call from one is refused, as the
// contract now says; tvmm's own callbacks (the timeline's copy spans) make none and still run.
TEST(CudaOnEmulator, HostCallbacksMakeNoCudaCall) {
  test::TempDir dir;
  Config c = cuda_config();
  c.cuda_device = 0;
  c.timeline_file = dir.path() + "/trace.json";
  {
    Pager p(c);
    auto s = p.create_stream();
    std::vector<Tensor> ts;
    for (int i = 0; i < 6; ++i) {
      ts.push_back(p.allocate(2 * MiB));
      auto pin = ts.back().pin(s, Access::write);
    }
    for (auto& t : ts) auto pin = t.pin(s, Access::read);  // page-ins and write-backs, each traced
    Driver drv;
    static decltype(&::cuDeviceGetCount) count = DRV(cuDeviceGetCount);
    static CUresult inside = CUDA_SUCCESS;
    s.launch([] {
      int n = 0;
      inside = count(&n);
    });
    s.synchronize();
    EXPECT_EQ(inside, CUDA_ERROR_NOT_PERMITTED);
  }
  const std::string trace = test::read_file(dir.path() + "/trace.json");
  EXPECT_NE(trace.find("\"page in\""), std::string::npos);
  EXPECT_NE(trace.find("\"write-back\""), std::string::npos);
}

namespace {
int rdma_attribute(const Driver& drv) {
  EXPECT_EQ(DRV(cuInit)(0), CUDA_SUCCESS);
  int v = -1;
  EXPECT_EQ(DRV(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0),
            CUDA_SUCCESS);
  return v;
}
}  // namespace

// device.gpu_direct_rdma asks cuMemCreate for GPUDirect-RDMA-capable memory, where the GPU has it.
TEST(CudaOnEmulator, GpuDirectRdmaMemoryIsAskedForWhereTheGpuHasIt) {
  ::setenv("TVMM_CUEMU_RDMA", "1", 1);  // read at cuInit (ctest runs each test alone)
  Driver drv;
  if (rdma_attribute(drv) != 1)
    TVMM_SKIP_WITHOUT_GPU("the emulator started earlier in this process with other settings");
  Config c = cuda_config();
  c.cuda_device = 0;
  c.gpu_direct_rdma = true;
  Pager p(c);
  auto t = p.allocate(2 * MiB);
  auto pin = t.pin(Access::write);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(DRV(cuMemRetainAllocationHandle)(&h, pin.data()), CUDA_SUCCESS);
  CUmemAllocationProp prop{};
  ASSERT_EQ(DRV(cuMemGetAllocationPropertiesFromHandle)(&prop, h), CUDA_SUCCESS);
  EXPECT_EQ(prop.allocFlags.gpuDirectRDMACapable, 1);
  EXPECT_EQ(DRV(cuMemRelease)(h), CUDA_SUCCESS);
}

TEST(CudaOnEmulator, GpuDirectRdmaOnAGpuWithoutItIsRefusedAtStart) {
  Driver drv;
  if (rdma_attribute(drv) != 0)
    TVMM_SKIP_WITHOUT_GPU("the emulator started earlier in this process with other settings");
  Config c = cuda_config();
  c.cuda_device = 0;
  c.gpu_direct_rdma = true;
  const std::string m = test::message_of([&] { Pager p(c); });
  EXPECT_NE(m.find("does not support GPUDirect RDMA with VMM allocations"), std::string::npos) << m;
  c.gpu_direct_rdma = false;  // the default: no flag, and any GPU
  EXPECT_NO_THROW(Pager{c});
}

// Write-behind waits while the device-to-host copies queued before keep that bus busy
// (DeviceBackend::d2h_backlog). The CUDA backend counts its copies with the link's speed: the one
// configured (device.bus_gbs), else the PCIe link's from sysfs, else none (std::nullopt: write-behind
// cannot tell, and does not wait).
TEST(CudaOnEmulator, TheDeviceToHostBacklogCountsTheCopiesQueuedAtTheLinksSpeed) {
  constexpr std::size_t kBytes = 2 * MiB;
  {
    // Unconfigured: what sysfs says of the emulated GPU's bus id (nothing on a machine without it).
    auto dev = device::make_cuda_device(0);
    const auto* cuda = dynamic_cast<const device::CudaDevice*>(dev.get());
    ASSERT_NE(cuda, nullptr);
    EXPECT_EQ(dev->d2h_backlog().has_value(), cuda->bus_bytes_per_s() > 0);
    EXPECT_EQ(cuda->bus_bytes_per_s(), device::pcie_copy_bytes_per_s(dev->properties().pci_bus_id).value_or(0.0))
        << dev->properties().pci_bus_id;
  }
  // 1 GB/s: a 2 MiB copy keeps the bus busy 2.1 ms, long beside the calls between the checks.
  auto dev = device::make_cuda_device(0, false, 1e9);
  ASSERT_EQ(dev->d2h_backlog(), std::chrono::nanoseconds(0)) << "nothing queued";
  test::DeviceScratch scratch(*dev, kBytes);
  void* dptr = scratch.device();
  void* host = scratch.host();
  const auto s = scratch.stream();
  ASSERT_TRUE(dev->memcpy_async(dptr, host, kBytes, device::CopyKind::host_to_device, s).ok());
  EXPECT_EQ(dev->d2h_backlog(), std::chrono::nanoseconds(0)) << "a copy to the device takes the other bus";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(dev->memcpy_async(host, dptr, kBytes, device::CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev->memcpy_async(host, dptr, kBytes, device::CopyKind::device_to_host, s).ok());
  const auto backlog = dev->d2h_backlog();
  const auto queried = std::chrono::steady_clock::now();
  const auto elapsed = queried - t0;
  const auto two = std::chrono::nanoseconds(2 * static_cast<std::int64_t>(static_cast<double>(kBytes) / 1e9 * 1e9));
  ASSERT_TRUE(backlog.has_value());
  EXPECT_LE(*backlog, two) << "the second copy counted from the end of the first";
  EXPECT_GE(*backlog, two - elapsed);
  ASSERT_TRUE(dev->synchronize_stream(s).ok());
  std::this_thread::sleep_until(queried + *backlog + std::chrono::milliseconds(1));
  EXPECT_EQ(dev->d2h_backlog(), std::chrono::nanoseconds(0)) << "counted from the calls: over once their time passed";
}
