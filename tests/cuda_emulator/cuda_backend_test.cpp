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
#include "test_support.hpp"
#include "tvmm/tvmm.hpp"

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
  CUcontext mine = nullptr, now = nullptr;
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
  ASSERT_EQ(DRV(cuCtxGetCurrent)(&now), CUDA_SUCCESS);
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
