// A module as a Python extension is: linked with the CUDA runtime (here the emulated one) and loaded by
// its host program with dlopen(RTLD_LOCAL), so the runtime is outside the global scope where
// LD_PRELOAD's RTLD_NEXT looks. Its CUDA calls still reach tvmm's hooks first; those must find this
// runtime to pass calls on, and a synchronising call must really wait.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace {

std::atomic<int> g_done{0};

// Stream work that ends well after the call that queued it returns.
void slow_host_work(void*) {
  ::usleep(300 * 1000);
  g_done.fetch_add(1);
}

int fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "local_runtime_module: %s: error %d\n", what, static_cast<int>(e));
  return 1;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int local_module_run() {
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, 4 << 20); e != cudaSuccess) return fail("cudaMalloc", e);
  // cudaDeviceSynchronize waits for the device's work.
  if (const cudaError_t e = cudaLaunchHostFunc(nullptr, slow_host_work, nullptr); e != cudaSuccess) {
    return fail("cudaLaunchHostFunc", e);
  }
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("cudaDeviceSynchronize", e);
  if (g_done.load() != 1) {
    std::fprintf(stderr, "local_runtime_module: cudaDeviceSynchronize returned before the device's work ended\n");
    return 1;
  }
  // cudaStreamSynchronize waits for the stream's.
  cudaStream_t s = nullptr;
  if (const cudaError_t e = cudaStreamCreate(&s); e != cudaSuccess) return fail("cudaStreamCreate", e);
  if (const cudaError_t e = cudaLaunchHostFunc(s, slow_host_work, nullptr); e != cudaSuccess) {
    return fail("cudaLaunchHostFunc", e);
  }
  if (const cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) return fail("cudaStreamSynchronize", e);
  if (g_done.load() != 2) {
    std::fprintf(stderr, "local_runtime_module: cudaStreamSynchronize returned before the stream's work ended\n");
    return 1;
  }
  (void)cudaStreamDestroy(s);
  // Memory that is not tvmm's passes through to this runtime.
  void* managed = nullptr;
  if (const cudaError_t e = cudaMallocManaged(&managed, 1 << 20, cudaMemAttachGlobal); e != cudaSuccess) {
    return fail("cudaMallocManaged", e);
  }
  if (const cudaError_t e = cudaFree(managed); e != cudaSuccess) return fail("cudaFree of managed memory", e);
  // tvmm's memory: its capacity is the budgets, and it frees.
  std::size_t free = 0, total = 0;
  if (const cudaError_t e = cudaMemGetInfo(&free, &total); e != cudaSuccess) return fail("cudaMemGetInfo", e);
  if (total != (std::size_t{16} << 20) + (std::size_t{96} << 20)) {
    std::fprintf(stderr, "local_runtime_module: cudaMalloc's memory was not tvmm's (total %zu)\n", total);
    return 1;
  }
  if (const cudaError_t e = cudaFree(p); e != cudaSuccess) return fail("cudaFree", e);
  return 0;
}
