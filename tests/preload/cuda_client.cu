// A CUDA program that knows nothing of tvmm, compiled by nvcc (-cudart none) and linked with the
// emulated runtime over the emulated driver (docs/cuda-emulator.md): its memory is device memory the
// host cannot touch, it writes and checks its bytes with kernels launched `<<<...>>>` and with
// cudaMemcpy, and every kernel's access goes through the emulator's page table. The tests run it under
// LD_PRELOAD=libtvmm_preload.so with TVMM_DEVICE_BACKEND=cuda. Each subcommand prints "ok" on success
// and exits 1 with the reason otherwise.
//
// Layout: shared helpers first, then one function per subcommand (each with a comment saying what it
// proves), the placement-by-use workloads in a part of their own, and main()'s table of subcommands
// (the names tests/preload/CMakeLists.txt runs) at the end.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernels.cu"  // tvmm_fill, tvmm_verify: kernels the emulator runs by name
#include "kernels/pattern.hpp"
#include "tests/preload/client_support.hpp"

namespace {

using tvmm::test_client::env_size;
using tvmm::test_client::expect;
using tvmm::test_client::fail;

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail(what + ": " + cudaGetErrorString(e) + " (" + std::to_string(e) + ")");
}

void* must_alloc(std::size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n), "cudaMalloc(" + std::to_string(n) + ")");
  expect(p != nullptr, "cudaMalloc returned NULL");
  return p;
}

// The PyTorch allocator entry points the preloaded library exports (tvmm/tvmm.h).
struct TorchEntryPoints {
  void* (*malloc)(ssize_t, int, void*);
  void (*free)(void*, ssize_t, int, void*);
};
TorchEntryPoints torch_entry_points() {
  TorchEntryPoints e{reinterpret_cast<void* (*)(ssize_t, int, void*)>(::dlsym(RTLD_DEFAULT, "tvmm_malloc")),
                     reinterpret_cast<void (*)(void*, ssize_t, int, void*)>(::dlsym(RTLD_DEFAULT, "tvmm_free"))};
  expect(e.malloc != nullptr && e.free != nullptr, "tvmm_malloc is not there (not under LD_PRELOAD?)");
  return e;
}

// A stream-ordered allocation and free on `s`, through PyTorch's allocator entry points or the runtime's
// cudaMallocAsync and cudaFreeAsync.
void* malloc_async(bool pytorch, std::size_t n, cudaStream_t s) {
  void* p = nullptr;
  if (pytorch) {
    p = torch_entry_points().malloc(static_cast<ssize_t>(n), 0, s);
    expect(p != nullptr, "tvmm_malloc failed");
  } else {
    check(cudaMallocAsync(&p, n, s), "cudaMallocAsync");
  }
  return p;
}
void free_async(bool pytorch, void* p, std::size_t n, cudaStream_t s) {
  if (pytorch) {
    torch_entry_points().free(p, static_cast<ssize_t>(n), 0, s);
  } else {
    check(cudaFreeAsync(p, s), "cudaFreeAsync");
  }
}

void fill(void* p, std::size_t n, std::uint64_t seed, cudaStream_t stream = nullptr) {
  tvmm_fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(p), n, seed);
  check(cudaGetLastError(), "launching tvmm_fill");
}

// The bytes of [p, p + n) that differ from the pattern `seed`, counted by a kernel into a counter that
// is tvmm's memory too.
unsigned long long mismatches(const void* p, std::size_t n, std::uint64_t seed, cudaStream_t stream = nullptr) {
  void* counter = must_alloc(sizeof(unsigned long long));
  const unsigned long long zero = 0;
  check(cudaMemcpyAsync(counter, &zero, sizeof zero, cudaMemcpyHostToDevice, stream), "zeroing the counter");
  tvmm_verify<<<64, 256, 0, stream>>>(static_cast<const unsigned char*>(p), n, seed,
                                      static_cast<unsigned long long*>(counter));
  check(cudaGetLastError(), "launching tvmm_verify");
  unsigned long long bad = 0;
  check(cudaMemcpyAsync(&bad, counter, sizeof bad, cudaMemcpyDeviceToHost, stream), "reading the counter");
  check(cudaStreamSynchronize(stream), "waiting for the verification");
  check(cudaFree(counter), "freeing the counter");
  return bad;
}

// The same check on the host, through cudaMemcpy.
std::size_t host_mismatches(const void* p, std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> copy(n);
  check(cudaMemcpy(copy.data(), p, n, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  return tvmm::kernels::count_mismatches(copy.data(), n, seed);
}

// 4x the device budget through cudaMalloc, each allocation written by a kernel at once and every byte
// re-read at the end: later allocations push earlier ones out to the host, which must keep their bytes,
// and kernels on pages that live on the host reach them through the mapping.
int oversubscribe() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  std::size_t free0 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  expect(total == device + env_size("TVMM_HOST_BUDGET"), "cudaMemGetInfo's total is not the device + host budgets");
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t allocated = 0;
  for (unsigned i = 0; allocated < 4 * device; ++i) {
    const std::size_t n = (i % 3 + 1) * (std::size_t{1} << 20) + 4096 * i;  // not page multiples
    void* p = must_alloc(n);
    fill(p, n, i);
    blocks.emplace_back(p, n);
    allocated += n;
    if (i % 4 == 0) {
      expect(mismatches(blocks[0].first, blocks[0].second, 0) == 0,
             "allocation 0 changed after allocation " + std::to_string(i));
    }
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // a quiescent point
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto bad = mismatches(blocks[i].first, blocks[i].second, i);
    expect(bad == 0, "allocation " + std::to_string(i) + " has " + std::to_string(bad) + " wrong bytes");
  }
  expect(host_mismatches(blocks.back().first, blocks.back().second, blocks.size() - 1) == 0,
         "the last allocation read back through cudaMemcpy is wrong");
  for (auto& [p, n] : blocks) check(cudaFree(p), "cudaFree");
  std::size_t free1 = 0;
  check(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  expect(free1 == total, "memory is not all free after freeing everything");
  void* big = nullptr;
  expect(cudaMalloc(&big, total + 1) == cudaErrorMemoryAllocation,
         "an allocation past device + host budgets did not fail with cudaErrorMemoryAllocation");
  std::puts("ok");
  return 0;
}

// Memory tvmm did not allocate goes to the real runtime; a bad free is an error and changes nothing.
int passthrough() {
  void* managed = nullptr;  // cudaMallocManaged is not served by tvmm
  check(cudaMallocManaged(&managed, 1 << 20, cudaMemAttachGlobal), "cudaMallocManaged");
  fill(managed, 1 << 20, 3);
  expect(mismatches(managed, 1 << 20, 3) == 0, "managed memory has wrong bytes");
  check(cudaFree(managed), "cudaFree of the runtime's managed memory");
  check(cudaFree(nullptr), "cudaFree(NULL)");
  auto* p = static_cast<char*>(must_alloc(3 << 20));
  fill(p, 3 << 20, 9);
  expect(cudaFree(p + 4096) == cudaErrorInvalidValue, "cudaFree of an interior pointer did not fail");
  // tvmm served the call, so the runtime never saw it: the interposer keeps its error for this thread's
  // next cudaPeekAtLastError (no reset) and cudaGetLastError (which resets it), as the runtime would.
  expect(cudaPeekAtLastError() == cudaErrorInvalidValue && cudaPeekAtLastError() == cudaErrorInvalidValue,
         "cudaPeekAtLastError did not report the failed cudaFree tvmm served");
  expect(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess,
         "cudaGetLastError did not report the failed cudaFree tvmm served, once");
  std::thread([] { expect(cudaGetLastError() == cudaSuccess, "another thread saw this thread's last error"); }).join();
  expect(mismatches(p, 3 << 20, 9) == 0, "the allocation changed after a bad free");
  check(cudaFree(p), "cudaFree");
  expect(cudaFree(p) == cudaErrorInvalidValue, "a double free did not fail");
  (void)cudaGetLastError();
  // Stream-ordered allocation and free.
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  void* a = nullptr;
  check(cudaMallocAsync(&a, 1 << 20, s), "cudaMallocAsync");
  fill(a, 1 << 20, 5, s);
  expect(mismatches(a, 1 << 20, 5, s) == 0, "stream-ordered memory has wrong bytes");
  check(cudaFreeAsync(a, s), "cudaFreeAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  std::puts("ok");
  return 0;
}

// 4 threads allocate, write with kernels on their own streams, re-read and free at once, together
// needing more than the device, so pages move while other threads' kernels run.
int threads() {
  constexpr int kThreads = 4, kRounds = 12;
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([t, &errors] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++errors;
        return;
      }
      std::vector<std::pair<void*, std::uint64_t>> mine;
      const std::size_t n = std::size_t{3} << 20;
      for (int r = 0; r < kRounds; ++r) {
        void* p = nullptr;
        if (cudaMalloc(&p, n) != cudaSuccess) {
          ++errors;
          continue;
        }
        const auto seed = static_cast<std::uint64_t>(t * 1000 + r);
        fill(p, n, seed, s);
        mine.emplace_back(p, seed);
        if (mine.size() > 3) {
          if (mismatches(mine.front().first, n, mine.front().second, s) != 0) ++errors;
          if (cudaFree(mine.front().first) != cudaSuccess) ++errors;
          mine.erase(mine.begin());
        }
      }
      for (auto& [p, seed] : mine) {
        if (mismatches(p, n, seed, s) != 0) ++errors;
        if (cudaFree(p) != cudaSuccess) ++errors;
      }
      if (cudaStreamDestroy(s) != cudaSuccess) ++errors;
    });
  }
  for (auto& th : pool) th.join();
  expect(errors.load() == 0, std::to_string(errors.load()) + " errors across the threads");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  expect(free == total, "memory leaked across the threads");
  std::puts("ok");
  return 0;
}

// Threads launch kernels on their buffers without pause while another thread's allocations keep forcing
// remaps of those buffers' pages: every remap must be atomic with respect to the program's device work
// (no kernel may run between tvmm's drain and its remap), so no write is lost and no access is illegal.
int launches() {
  constexpr int kWorkers = 3, kRounds = 60;
  const std::size_t n = std::size_t{2} << 20;
  std::atomic<int> errors{0}, working{kWorkers};
  std::vector<std::thread> pool;
  for (int t = 0; t < kWorkers; ++t) {
    pool.emplace_back([t, n, &errors, &working] {
      cudaStream_t s = nullptr;
      void* mine[2] = {must_alloc(n), must_alloc(n)};
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) ++errors;
      std::vector<unsigned char> host(n);
      for (int r = 0; r < kRounds; ++r) {
        if (r % 10 == 0) {  // memsets and copies are device work the gate orders too
          const auto v = static_cast<unsigned char>(t * 16 + r);
          if (cudaMemsetAsync(mine[0], v, n, s) != cudaSuccess ||
              cudaMemcpyAsync(host.data(), mine[0], n, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
              cudaStreamSynchronize(s) != cudaSuccess) {
            ++errors;
          }
          for (unsigned char c : host) {
            if (c != v) {
              std::fprintf(stderr, "thread %d round %d: a memset was lost\n", t, r);
              ++errors;
              break;
            }
          }
        }
        if (r % 10 == 5) {  // the driver's other memsets and copies: D32 and D16 memsets, unified and
                            // device-to-device copies (what a static runtime and driver-API programs call)
          const auto v = static_cast<unsigned>(0x01020304u * static_cast<unsigned>(t + 1) + static_cast<unsigned>(r));
          const auto d0 = reinterpret_cast<CUdeviceptr>(mine[0]), d1 = reinterpret_cast<CUdeviceptr>(mine[1]);
          std::vector<unsigned> words(n / 4);
          CUcontext ctx = nullptr;
          if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || cuMemsetD32Async(d0, v, n / 4, s) != CUDA_SUCCESS ||
              cuMemsetD16Async(d1, 7, n / 2, s) != CUDA_SUCCESS || cudaStreamSynchronize(s) != cudaSuccess ||
              cuMemcpyDtoD(d1, d0, n) != CUDA_SUCCESS || cuMemsetD8(d0, 9, n) != CUDA_SUCCESS ||
              cudaStreamSynchronize(nullptr) != cudaSuccess ||  // the memset ran on the legacy stream
              cuMemcpyPeerAsync(d0, ctx, d1, ctx, n, s) != CUDA_SUCCESS ||
              cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(words.data()), d0, n, s) != CUDA_SUCCESS ||
              cudaStreamSynchronize(s) != cudaSuccess) {
            ++errors;
          }
          for (unsigned w : words) {
            if (w != v) {
              std::fprintf(stderr, "thread %d round %d: a driver memset or copy was lost\n", t, r);
              ++errors;
              break;
            }
          }
        }
        if (r % 10 == 7) {  // 2D and 3D copies: cudaMemcpy2D reaches the driver as cuMemcpy2DUnaligned,
                            // cudaMemcpy2DAsync as cuMemcpy2DAsync, cudaMemcpy3DAsync as cuMemcpy3DAsync
          constexpr std::size_t kPitch = 4096, kWidth = 1000;
          const std::size_t rows = n / kPitch;
          std::vector<unsigned char> rows_in(kWidth * rows), rows_out(kWidth * rows);
          for (std::size_t i = 0; i < rows_in.size(); ++i)
            rows_in[i] = static_cast<unsigned char>(i * 13 + static_cast<std::size_t>(t * 7 + r));
          cudaMemcpy3DParms p3{};
          p3.srcPtr = make_cudaPitchedPtr(mine[0], kPitch, kWidth, rows / 2);
          p3.dstPtr = make_cudaPitchedPtr(mine[1], kPitch, kWidth, rows / 2);
          p3.extent = make_cudaExtent(kWidth, rows / 2, 2);
          p3.kind = cudaMemcpyDeviceToDevice;
          if (cudaMemcpy2DAsync(mine[0], kPitch, rows_in.data(), kWidth, kWidth, rows, cudaMemcpyHostToDevice, s) !=
                  cudaSuccess ||
              cudaMemcpy3DAsync(&p3, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess ||
              cudaMemcpy2D(rows_out.data(), kWidth, mine[1], kPitch, kWidth, rows, cudaMemcpyDeviceToHost) !=
                  cudaSuccess) {
            ++errors;
          }
          if (rows_out != rows_in) {
            std::fprintf(stderr, "thread %d round %d: a 2D or 3D copy was lost\n", t, r);
            ++errors;
          }
        }
        for (int b = 0; b < 2; ++b) fill(mine[b], n, static_cast<std::uint64_t>(t * 10000 + r * 2 + b), s);
        for (int b = 0; b < 2; ++b) {
          const auto bad = mismatches(mine[b], n, static_cast<std::uint64_t>(t * 10000 + r * 2 + b), s);
          if (bad != 0) {
            std::fprintf(stderr, "thread %d round %d buffer %d: %llu wrong bytes\n", t, r, b, bad);
            ++errors;
          }
        }
      }
      for (void* p : mine) check(cudaFree(p), "cudaFree");
      check(cudaStreamDestroy(s), "cudaStreamDestroy");
      --working;
    });
  }
  std::thread pressure([&] {  // allocations that demote the workers' pages, and frees that let them back
    std::uint64_t seed = 0;
    while (working.load() > 0) {
      void* p = must_alloc(std::size_t{6} << 20);
      fill(p, std::size_t{6} << 20, ++seed);
      check(cudaFree(p), "cudaFree");
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // a quiescent point: promotions
      // Remaps every millisecond or so: plenty to race with, while the workers still make progress (each
      // remap holds them at the gate; back to back, the test's length would depend on who wins).
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (auto& th : pool) th.join();
  pressure.join();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an illegal address is sticky)");
  expect(errors.load() == 0, std::to_string(errors.load()) + " errors across the threads");
  std::puts("ok");
  return 0;
}

// The driver API as a program with a static runtime reaches it: dlsym on libcuda and cuGetProcAddress
// hand out tvmm's allocation hooks; the memory they return is tvmm's and works with kernels.
int driver() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) fail(std::string("dlopen: ") + ::dlerror());
  auto* alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(::dlsym(h, "cuMemAlloc_v2"));
  auto* free_ = reinterpret_cast<PFN_cuMemFree_v3020>(::dlsym(h, "cuMemFree_v2"));
  auto* proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(h, "cuGetProcAddress_v2"));
  auto* sync = reinterpret_cast<PFN_cuCtxSynchronize_v2000>(::dlsym(h, "cuCtxSynchronize"));
  expect(alloc && free_ && proc && sync, "dlsym did not find the driver's functions");
  check(cudaFree(nullptr), "initialising the runtime");  // a current context for the driver calls
  CUdeviceptr d = 0;
  expect(alloc(&d, 3 << 20) == CUDA_SUCCESS && d != 0, "cuMemAlloc_v2 failed");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  expect(total - free >= (std::size_t{3} << 20), "cuMemAlloc_v2 from dlsym did not allocate from tvmm");
  fill(reinterpret_cast<void*>(d), 3 << 20, 4);
  expect(sync() == CUDA_SUCCESS, "cuCtxSynchronize failed");
  void* f = nullptr;
  expect(proc("cuMemAlloc", &f, 12000, 0, nullptr) == CUDA_SUCCESS && f != nullptr, "cuGetProcAddress(cuMemAlloc)");
  CUdeviceptr e = 0;
  expect(reinterpret_cast<PFN_cuMemAlloc_v3020>(f)(&e, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc from the lookup");
  std::size_t free2 = 0;
  check(cudaMemGetInfo(&free2, &total), "cudaMemGetInfo");
  expect(free - free2 >= (std::size_t{1} << 20), "cuMemAlloc from cuGetProcAddress did not allocate from tvmm");
  expect(free_(e) == CUDA_SUCCESS, "cuMemFree_v2");
  expect(mismatches(reinterpret_cast<void*>(d), 3 << 20, 4) == 0, "driver-allocated bytes are wrong");
  expect(free_(d) == CUDA_SUCCESS, "cuMemFree_v2");
  expect(free_(d) == CUDA_ERROR_INVALID_VALUE, "a double cuMemFree_v2 did not fail");
  std::puts("ok");
  return 0;
}

// A graph captured while the device is full: it allocates, writes, copies and frees through tvmm inside
// the capture. tvmm must never synchronise then (that would invalidate the capture): the allocation is
// served without moving pages, and the frees keep their memory for the graph's replays.
int capture() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  const std::size_t block = std::size_t{4} << 20, n = std::size_t{6} << 20;
  std::vector<void*> before;
  for (std::size_t done = 0; done < device; done += block) {
    before.push_back(must_alloc(block));
    fill(before.back(), block, 100 + before.size());
  }
  void* out = must_alloc(n);
  void* x = must_alloc(2 << 20);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::size_t free0 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  // The um mechanism cannot allocate during a capture (a managed allocation is not permitted then): it
  // refuses without ending the capture, so the program allocates first.
  const char* mechanism = std::getenv("TVMM_TRANSPARENT_MEMORY");
  const bool um = mechanism != nullptr && std::strcmp(mechanism, "um") == 0;
  void* b = nullptr;
  if (um) b = must_alloc(n);
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  if (um) {
    void* refused = nullptr;
    expect(cudaMallocAsync(&refused, n, s) == cudaErrorNotSupported && refused == nullptr,
           "the um mechanism did not refuse an allocation during the capture with cudaErrorNotSupported");
    // As the runtime would, the refusal is this thread's last error until read (the next launch check
    // would see it otherwise).
    expect(cudaGetLastError() == cudaErrorNotSupported, "cudaGetLastError did not report the refused allocation");
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
    expect(status == cudaStreamCaptureStatusActive, "the refused allocation ended the capture");
  } else {
    check(cudaMallocAsync(&b, n, s), "cudaMallocAsync during the capture, with the device full");
  }
  fill(b, n, 7, s);
  check(cudaMemcpyAsync(out, b, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync during the capture");
  check(cudaFreeAsync(b, s), "cudaFreeAsync during the capture");
  check(cudaFree(x), "cudaFree during the capture");
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture (the capture was invalidated?)");
  expect(graph != nullptr, "the capture gave no graph");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 3; ++replay) {
    fill(out, n, 99, s);  // overwritten by each replay
    check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto bad = mismatches(out, n, 7, s);
    expect(bad == 0, "replay " + std::to_string(replay) + ": " + std::to_string(bad) + " wrong bytes");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize between replays");  // a quiescent point: b stays
  }
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  // The same through the driver API (cuStreamBeginCapture_v2 and cuStreamEndCapture, as cuda.h names
  // them, which driver-API programs and static runtimes call): tvmm sees this capture too, and neither
  // the free nor (vmm) the allocation under pressure below synchronises.
  void* z = must_alloc(2 << 20);
  expect(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "cuStreamBeginCapture");
  check(cudaFree(z), "cudaFree during a driver-API capture");
  void* y = nullptr;
  if (!um) {
    check(cudaMalloc(&y, n), "cudaMalloc during a driver-API capture, with the device full");
    fill(y, n, 8, s);
  }
  CUgraph graph2 = nullptr;
  expect(cuStreamEndCapture(s, &graph2) == CUDA_SUCCESS && graph2 != nullptr,
         "cuStreamEndCapture failed: the driver-API capture was invalidated");
  expect(cuGraphDestroy(graph2) == CUDA_SUCCESS, "cuGraphDestroy");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  for (std::size_t i = 0; i < before.size(); ++i) {
    expect(mismatches(before[i], block, 101 + i) == 0, "an allocation from before the capture changed");
    check(cudaFree(before[i]), "cudaFree");
  }
  check(cudaFree(out), "cudaFree");
  std::size_t free1 = 0;
  check(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  // What the captures freed stays for their graphs (b: 6 MiB, x: 2 MiB, z: 2 MiB), the rest is free again;
  // y is still the program's.
  if (y != nullptr) check(cudaFree(y), "cudaFree");
  expect(free1 == total - n - (std::size_t{4} << 20) - (y != nullptr ? n : 0),
         "memory freed during the capture was not kept for the graph");
  std::puts("ok");
  return 0;
}

// tvmm's hooks never change the calling thread's current context, whether it has none or one the program
// made itself, through allocations that drain and demote, frees, and queries.
int context() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  auto current = [] {
    CUcontext c = nullptr;
    expect(cuCtxGetCurrent(&c) == CUDA_SUCCESS, "cuCtxGetCurrent failed");
    return c;
  };
  auto exercise = [&](CUcontext expected, const char* who) {
    std::vector<void*> blocks;
    for (std::size_t done = 0; done < 3 * device; done += 2 << 20) {  // demotions: drains
      blocks.push_back(must_alloc(2 << 20));
      expect(current() == expected, std::string(who) + ": cudaMalloc changed the current context");
    }
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    expect(current() == expected, std::string(who) + ": cudaMemGetInfo changed the current context");
    for (void* p : blocks) {
      check(cudaFree(p), "cudaFree");
      expect(current() == expected, std::string(who) + ": cudaFree changed the current context");
    }
  };
  std::thread([&] { exercise(nullptr, "a thread with no context"); }).join();
  std::thread([&] {
    CUcontext own = nullptr;
    CUdevice d0 = 0;
    expect(cuDeviceGet(&d0, 0) == CUDA_SUCCESS && cuCtxCreate(&own, nullptr, 0, d0) == CUDA_SUCCESS,
           "cuCtxCreate failed");
    exercise(own, "a thread with its own context");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    expect(current() == own, "cudaDeviceSynchronize changed the current context");
    expect(cuCtxDestroy(own) == CUDA_SUCCESS, "cuCtxDestroy failed");
  }).join();
  std::puts("ok");
  return 0;
}

// Two GPUs: each call is served from the caller's current device (cudaSetDevice, or a context the thread
// made current), whose kernels can reach the memory; tvmm_malloc honours its device; each device has
// its own budgets.
int devices() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET"), host = env_size("TVMM_HOST_BUDGET");
  std::vector<std::pair<void*, int>> blocks;  // (allocation, device)
  for (int d : {1, 0}) {
    check(cudaSetDevice(d), "cudaSetDevice");
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    expect(total == device + host, "device " + std::to_string(d) + " does not have its own budgets");
    for (std::size_t done = 0; done < 2 * device; done += 4 << 20) {  // 2x the budget: remaps on each device
      void* p = must_alloc(4 << 20);
      cudaPointerAttributes attr{};
      check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
      expect(attr.device == d || attr.type == cudaMemoryTypeHost,
             "memory allocated on device " + std::to_string(d) + " belongs to device " + std::to_string(attr.device));
      fill(p, 4 << 20, blocks.size());  // a kernel of device d: an illegal address if d may not access it
      blocks.emplace_back(p, d);
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    check(cudaSetDevice(blocks[i].second), "cudaSetDevice");
    expect(mismatches(blocks[i].first, 4 << 20, i) == 0,
           "allocation " + std::to_string(i) + " on device " + std::to_string(blocks[i].second) + " has wrong bytes");
  }
  // The PyTorch entry point names its device.
  const auto [tvmm_malloc, tvmm_free] = torch_entry_points();
  check(cudaSetDevice(0), "cudaSetDevice");
  void* t = tvmm_malloc(2 << 20, 1, nullptr);
  expect(t != nullptr, "tvmm_malloc(device 1) failed");
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, t), "cudaPointerGetAttributes");
  expect(attr.device == 1, "tvmm_malloc(device 1) gave memory of device " + std::to_string(attr.device));
  check(cudaSetDevice(1), "cudaSetDevice");
  fill(t, 2 << 20, 77);
  expect(mismatches(t, 2 << 20, 77) == 0, "tvmm_malloc's memory has wrong bytes");
  tvmm_free(t, 2 << 20, 1, nullptr);
  for (auto& [p, d] : blocks) check(cudaFree(p), "cudaFree");
  std::puts("ok");
  return 0;
}

// fork on a GPU: the child cannot use CUDA. Its first allocation gets cudaErrorInitializationError with a
// reason (not a heap that fails deep in the driver), and a free of the parent's memory
// cudaErrorInvalidValue; the parent's memory is untouched.
int fork_child() {
  void* parent = must_alloc(2 << 20);
  fill(parent, 2 << 20, 77);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const char* mechanism = std::getenv("TVMM_TRANSPARENT_MEMORY");
  const bool um = mechanism != nullptr && std::strcmp(mechanism, "um") == 0;
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    void* p = nullptr;
    if (cudaMalloc(&p, 1 << 20) != cudaErrorInitializationError || p != nullptr) _exit(10);
    // (With um the parent's managed memory is not fenced: its free would reach the driver.)
    if (!um && cudaFree(parent) != cudaErrorInvalidValue) _exit(11);
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the child failed (status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  expect(mismatches(parent, 2 << 20, 77) == 0, "the parent's memory changed across the fork");
  check(cudaFree(parent), "cudaFree");
  std::puts("ok");
  return 0;
}

// Frees in stream order, with no device drain: tvmm_free (PyTorch's CUDAPluggableAllocator calls it for
// every tensor) and cudaFreeAsync return while the freeing stream still runs, and the memory comes back
// once the stream gets there (an allocation that needs it waits for that, not for the device).
int stream_ordered() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  std::size_t free0 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  const std::size_t big = total - (std::size_t{8} << 20);  // most of the capacity
  constexpr std::uint64_t kBusyNs = 300'000'000;
  for (const bool pytorch : {true, false}) {
    void* p = malloc_async(pytorch, big, s);
    fill(p, big, 3, s);
    tvmm_busy<<<1, 1, 0, s>>>(kBusyNs);  // the stream is busy well after the free returns
    check(cudaGetLastError(), "launching tvmm_busy");
    static std::atomic<bool> reached{false};  // the stream got to the free
    reached = false;
    check(cudaLaunchHostFunc(
              s, [](void*) { reached = true; }, nullptr),
          "cudaLaunchHostFunc");
    free_async(pytorch, p, big, s);
    expect(cudaStreamQuery(s) == cudaErrorNotReady,
           std::string(pytorch ? "tvmm_free" : "cudaFreeAsync") + " waited for the device (a drain)");
    // The memory comes back when the stream gets there: an allocation that needs it waits for that.
    void* q = must_alloc(big);
    expect(reached.load(), "an allocation reused memory the freeing stream may still use");
    fill(q, big, 4);
    expect(mismatches(q, big, 4) == 0, "the reused memory has wrong bytes");
    check(cudaFree(q), "cudaFree");
  }
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  std::size_t free1 = 0;
  check(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  expect(free1 == total, "memory freed in stream order was not all released");
  std::puts("ok");
  return 0;
}

// Pointer queries on tvmm's memory answer as for a cudaMalloc'd allocation, whichever tier its pages are
// on: device memory of the allocating device, the whole allocation as the range (PyTorch, CuPy and NCCL
// infer devices and bounds from pointers). Other memory: the driver's answers.
int pointers() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  const std::size_t n = (std::size_t{5} << 20) + 123;
  auto* p = static_cast<char*>(must_alloc(n));
  std::vector<void*> pressure;  // pushes p's pages out to host chunks
  for (std::size_t done = 0; done < device; done += 2 << 20) pressure.push_back(must_alloc(2 << 20));
  for (const std::size_t offset : {std::size_t{0}, std::size_t{3} << 20, n - 1}) {
    const auto at = reinterpret_cast<CUdeviceptr>(p + offset);
    unsigned type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    std::size_t size = 0;
    expect(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at) == CUDA_SUCCESS &&
               type == CU_MEMORYTYPE_DEVICE,
           "tvmm's memory is not device memory to cuPointerGetAttribute");
    expect(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, at) == CUDA_SUCCESS && ordinal == 0,
           "tvmm's memory is not device 0's");
    expect(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at) == CUDA_SUCCESS &&
               start == reinterpret_cast<CUdeviceptr>(p) &&
               cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at) == CUDA_SUCCESS && size == n,
           "cuPointerGetAttribute's range is not the allocation");
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    expect(cuMemGetAddressRange(&base, &bytes, at) == CUDA_SUCCESS && base == reinterpret_cast<CUdeviceptr>(p) &&
               bytes == n,
           "cuMemGetAddressRange is not the allocation");
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_HOST_POINTER};
    void* host = &type;
    type = 0;
    ordinal = -1;
    size = 0;
    void* data[] = {&type, &ordinal, &size, &host};
    expect(cuPointerGetAttributes(4, attrs, data, at) == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE && ordinal == 0 &&
               size == n && host == nullptr,
           "cuPointerGetAttributes does not describe the allocation");
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, p + offset), "cudaPointerGetAttributes");
    expect(attr.type == cudaMemoryTypeDevice && attr.device == 0 && attr.hostPointer == nullptr,
           "cudaPointerGetAttributes does not describe device memory of device 0");
  }
  // Not tvmm's: the driver answers.
  void* managed = nullptr;
  check(cudaMallocManaged(&managed, 1 << 20, cudaMemAttachGlobal), "cudaMallocManaged");
  unsigned is_managed = 0;
  expect(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, reinterpret_cast<CUdeviceptr>(managed)) ==
                 CUDA_SUCCESS &&
             is_managed == 1,
         "the driver's answer for managed memory was changed");
  check(cudaFree(managed), "cudaFree");
  for (void* q : pressure) check(cudaFree(q), "cudaFree");
  check(cudaFree(p), "cudaFree");
  std::puts("ok");
  return 0;
}

// The number after "key": in a flat JSON object, or -1.
long long json_number(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? -1 : std::atoll(json.c_str() + at + key.size() + 4);
}

std::string memory_stats(int device) {
  using Stats = int (*)(int, char*, std::size_t);
  auto* stats = reinterpret_cast<Stats>(::dlsym(RTLD_DEFAULT, "tvmm_memory_stats"));
  expect(stats != nullptr, "tvmm_memory_stats is not there (not under LD_PRELOAD?)");
  const int n = stats(device, nullptr, 0);
  expect(n >= 2, "tvmm_memory_stats failed");
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  expect(stats(device, out.data(), out.size()) == n, "tvmm_memory_stats changed its length");
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// What a PyTorch user reads: torch.cuda.memory_stats()'s keys from tvmm_memory_stats, and an
// out-of-memory error in PyTorch's words, naming each tier and the setting to raise.
int stats() {
  void* p = must_alloc(3 << 20);
  std::string j = memory_stats(-1);
  expect(json_number(j, "allocated_bytes.all.current") == 3 << 20, "allocated_bytes.all.current is wrong: " + j);
  expect(json_number(j, "reserved_bytes.all.current") == 4 << 20, "reserved_bytes.all.current is wrong: " + j);
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  void* big = nullptr;
  expect(cudaMalloc(&big, total) == cudaErrorMemoryAllocation, "an allocation past the capacity did not fail");
  expect(cudaGetLastError() == cudaErrorMemoryAllocation && cudaGetLastError() == cudaSuccess,
         "cudaGetLastError did not report the refused cudaMalloc once");
  check(cudaFree(p), "cudaFree");
  j = memory_stats(-1);
  expect(json_number(j, "num_ooms") == 1 && json_number(j, "allocated_bytes.all.current") == 0 &&
             json_number(j, "allocated_bytes.all.peak") == 3 << 20,
         "the stats after an out-of-memory error are wrong: " + j);
  expect(memory_stats(1) == "{}", "device 1 has stats but no heap");
  std::puts("ok");
  return 0;
}

// The null stream is the legacy default stream: tvmm_free(p, ..., stream 0) (PyTorch's default stream
// under the pluggable allocator) and cudaFreeAsync(p, 0) free in its order, without draining the device.
int null_stream_free() {
  std::size_t free0 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  const std::size_t big = total - (std::size_t{8} << 20);
  for (const bool pytorch : {true, false}) {
    void* p = malloc_async(pytorch, big, nullptr);
    fill(p, big, 3);
    tvmm_busy<<<1, 1>>>(300'000'000);  // the null stream is busy well after the free returns
    check(cudaGetLastError(), "launching tvmm_busy");
    static std::atomic<bool> reached{false};
    reached = false;
    check(cudaLaunchHostFunc(
              nullptr, [](void*) { reached = true; }, nullptr),
          "cudaLaunchHostFunc");
    const std::string before = memory_stats(-1);
    free_async(pytorch, p, big, nullptr);
    const std::string after = memory_stats(-1);
    const char* what = pytorch ? "tvmm_free on the null stream" : "cudaFreeAsync on the null stream";
    expect(json_number(after, "drains") == json_number(before, "drains"), std::string(what) + " drained the device");
    expect(json_number(after, "stream_ordered_frees") == json_number(before, "stream_ordered_frees") + 1,
           std::string(what) + " was not a stream-ordered free: " + after);
    void* q = must_alloc(big);  // needs the memory: waits for the null stream to get there
    expect(reached.load(), "an allocation reused memory the null stream may still use");
    fill(q, big, 4);
    expect(mismatches(q, big, 4) == 0, "the reused memory has wrong bytes");
    check(cudaFree(q), "cudaFree");
  }
  std::puts("ok");
  return 0;
}

// A remap on one device never holds up launches on another (a gate per device): device 0's drain waits
// for work of device 1 that only runs once another thread's launch on device 1 has gone through (as a
// collective's kernels wait for their peers'). One gate for the process would deadlock here.
int device_gates() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  std::thread watchdog([] {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    fail("deadlock: a remap on device 0 waited for a launch on device 1 that waited for the remap");
  });
  watchdog.detach();
  static std::atomic<bool> go{false};
  check(cudaSetDevice(1), "cudaSetDevice");
  void* one = must_alloc(2 << 20);  // device 1 has a heap: its launches are gated
  fill(one, 2 << 20, 51);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaStream_t s1 = nullptr;
  check(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaLaunchHostFunc(
            s1,
            [](void*) {
              while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            },
            nullptr),
        "cudaLaunchHostFunc");
  cudaEvent_t e1 = nullptr;
  check(cudaEventCreate(&e1), "cudaEventCreate");
  check(cudaEventRecord(e1, s1), "cudaEventRecord");
  check(cudaSetDevice(0), "cudaSetDevice");
  std::vector<void*> full;
  for (std::size_t done = 0; done < device; done += 2 << 20) {
    full.push_back(must_alloc(2 << 20));
    fill(full.back(), 2 << 20, 60 + full.size());
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaStream_t s0 = nullptr;
  check(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamWaitEvent(s0, e1, 0), "cudaStreamWaitEvent");  // device 0's work now waits for device 1's
  std::thread other([one] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // while device 0 remaps
    check(cudaSetDevice(1), "cudaSetDevice");
    fill(one, 2 << 20, 52);  // a launch on device 1
    go = true;
  });
  void* more = must_alloc(2 << 20);  // device 0 is full: demotes, draining device 0 first
  other.join();
  fill(more, 2 << 20, 70);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (std::size_t i = 0; i < full.size(); ++i) {
    expect(mismatches(full[i], 2 << 20, 61 + i) == 0, "device 0's allocation " + std::to_string(i) + " changed");
  }
  check(cudaSetDevice(1), "cudaSetDevice");
  expect(mismatches(one, 2 << 20, 52) == 0, "device 1's launch did not run");
  std::puts("ok");
  std::fflush(stdout);
  std::_Exit(0);  // the watchdog thread is still asleep
}

// The driver's stream-ordered and pitched allocations (a static runtime's cudaMallocAsync and
// cudaMallocPitch, driver-API programs) are served by tvmm as the runtime's are.
int driver_allocations() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  void* first = must_alloc(1 << 20);  // the heap exists: its stats can be compared
  const auto before = json_number(memory_stats(-1), "allocated_bytes.all.current");
  CUdeviceptr a = 0;
  expect(cuMemAllocAsync(&a, 3 << 20, s) == CUDA_SUCCESS && a != 0, "cuMemAllocAsync failed");
  expect(json_number(memory_stats(-1), "allocated_bytes.all.current") == before + (3 << 20),
         "cuMemAllocAsync was not served by tvmm");
  fill(reinterpret_cast<void*>(a), 3 << 20, 21, s);
  expect(mismatches(reinterpret_cast<void*>(a), 3 << 20, 21, s) == 0, "cuMemAllocAsync's memory has wrong bytes");
  const auto ordered = json_number(memory_stats(-1), "stream_ordered_frees");
  expect(cuMemFreeAsync(a, s) == CUDA_SUCCESS, "cuMemFreeAsync");
  expect(json_number(memory_stats(-1), "stream_ordered_frees") == ordered + 1, "cuMemFreeAsync was not stream-ordered");
  expect(cuMemFreeAsync(a, s) == CUDA_ERROR_INVALID_VALUE, "a double cuMemFreeAsync did not fail");
  CUdeviceptr z = 0;
  expect(cuMemAllocAsync(&z, 0, s) == CUDA_ERROR_INVALID_VALUE, "cuMemAllocAsync of 0 bytes did not fail");
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  expect(cuMemAllocPitch(&p, &pitch, 1000, 300, 3) == CUDA_ERROR_INVALID_VALUE, "an element size of 3 was accepted");
  expect(cuMemAllocPitch(&p, &pitch, 1000, 300, 8) == CUDA_SUCCESS && pitch == 1024, "cuMemAllocPitch");
  expect(json_number(memory_stats(-1), "allocated_bytes.all.current") == before + 1024 * 300,
         "cuMemAllocPitch was not served by tvmm");
  fill(reinterpret_cast<void*>(p), 1024 * 300, 22);
  expect(mismatches(reinterpret_cast<void*>(p), 1024 * 300, 22) == 0, "cuMemAllocPitch's memory has wrong bytes");
  expect(cuMemFree(p) == CUDA_SUCCESS, "cuMemFree");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  check(cudaFree(first), "cudaFree");
  std::puts("ok");
  return 0;
}

// A library that sizes its own driver allocations (cuMemCreate, memory pools) from cudaMemGetInfo is never
// led into a real out-of-memory: free never says more than the GPU could give an allocation outside tvmm,
// and tvmm gives its device memory back (its pages to the host, every byte kept) when one needs it. Run
// with a GPU of 32 MiB (TVMM_CUEMU_MEMORY) and tvmm's device budget of 16 MiB.
int foreign_allocations() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  const std::size_t gpu = env_size("TVMM_CUEMU_MEMORY");
  void* mine = must_alloc(device);  // tvmm's frames hold the budget
  fill(mine, device, 31);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  constexpr std::size_t g = std::size_t{2} << 20;
  for (const bool pool : {true, false}) {
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    expect(total == device + env_size("TVMM_HOST_BUDGET"), "cudaMemGetInfo's total is not the capacity");
    expect(free <= gpu && free >= gpu - device, "cudaMemGetInfo says " + std::to_string(free) +
                                                    " bytes free: more than the GPU could give, or not what it can");
    const std::size_t want = free / g * g;
    if (pool) {
      CUmemoryPool p = nullptr;
      expect(cuDeviceGetDefaultMemPool(&p, 0) == CUDA_SUCCESS, "cuDeviceGetDefaultMemPool");
      CUdeviceptr q = 0;
      expect(cuMemAllocFromPoolAsync(&q, want, p, nullptr) == CUDA_SUCCESS,
             "a pool allocation of what cudaMemGetInfo called free failed");
      fill(reinterpret_cast<void*>(q), want, 32);
      expect(mismatches(reinterpret_cast<void*>(q), want, 32) == 0, "the pool's memory has wrong bytes");
      expect(cuMemFreeAsync(q, nullptr) == CUDA_SUCCESS, "cuMemFreeAsync of the pool's memory");
    } else {
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = 0;
      CUmemGenericAllocationHandle h = 0;
      expect(cuMemCreate(&h, want, &prop, 0) == CUDA_SUCCESS,
             "cuMemCreate of what cudaMemGetInfo called free failed (a real out-of-memory)");
      expect(cuMemRelease(h) == CUDA_SUCCESS, "cuMemRelease");
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    expect(mismatches(mine, device, 31) == 0, "tvmm's memory changed when it gave device memory back");
    expect(json_number(memory_stats(-1), "bytes_given_back") > 0, "tvmm gave nothing back");
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // then tvmm takes memory again
    void* more = must_alloc(device);
    fill(more, device, 33);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaFree(more), "cudaFree");
  }
  check(cudaFree(mine), "cudaFree");
  std::puts("ok");
  return 0;
}

// A process whose first call to tvmm is tvmm_malloc naming device 1 (a torchrun rank after
// torch.cuda.set_device(1)) gets device 1's memory, usable by device 1's kernels.
int first_call_names_device_1() {
  const auto [tvmm_malloc, tvmm_free] = torch_entry_points();
  check(cudaSetDevice(1), "cudaSetDevice");
  void* t = tvmm_malloc(2 << 20, 1, nullptr);
  expect(t != nullptr, "tvmm_malloc(device 1) failed");
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, t), "cudaPointerGetAttributes");
  expect(attr.device == 1, "tvmm_malloc(device 1) gave memory of device " + std::to_string(attr.device));
  fill(t, 2 << 20, 78);  // device 1's kernel: an illegal address if only device 0 may access it
  expect(mismatches(t, 2 << 20, 78) == 0, "tvmm_malloc's memory has wrong bytes");
  tvmm_free(t, 2 << 20, 1, nullptr);
  std::puts("ok");
  return 0;
}

// Pitched allocations are tvmm's: rows padded to 512 bytes, the whole allocation usable by kernels.
int pitched() {
  void* p = nullptr;
  std::size_t pitch = 0;
  check(cudaMallocPitch(&p, &pitch, 1000, 300), "cudaMallocPitch");
  expect(pitch >= 1000 && pitch % 512 == 0, "cudaMallocPitch's pitch " + std::to_string(pitch) + " is not 512-aligned");
  std::string j = memory_stats(-1);
  expect(json_number(j, "allocated_bytes.all.current") == static_cast<long long>(pitch * 300),
         "cudaMallocPitch was not served by tvmm: " + j);
  fill(p, pitch * 300, 11);
  expect(mismatches(p, pitch * 300, 11) == 0, "the pitched allocation has wrong bytes");
  cudaPitchedPtr q{};
  check(cudaMalloc3D(&q, make_cudaExtent(700, 20, 30)), "cudaMalloc3D");
  expect(q.ptr != nullptr && q.pitch == 1024 && q.xsize == 700 && q.ysize == 20, "cudaMalloc3D's pitched pointer");
  fill(q.ptr, q.pitch * 20 * 30, 12);
  expect(mismatches(q.ptr, q.pitch * 20 * 30, 12) == 0, "the 3D allocation has wrong bytes");
  j = memory_stats(-1);
  expect(json_number(j, "allocated_bytes.all.current") == static_cast<long long>(pitch * 300 + 1024 * 20 * 30),
         "cudaMalloc3D was not served by tvmm: " + j);
  check(cudaFree(q.ptr), "cudaFree");
  check(cudaFree(p), "cudaFree");
  std::size_t bad_pitch = 0;
  expect(cudaMallocPitch(&p, &bad_pitch, SIZE_MAX - 10, 2) == cudaErrorInvalidValue,
         "an overflowing pitched size was not refused");
  (void)cudaGetLastError();
  std::puts("ok");
  return 0;
}

// Many small cudaMallocs share pages (a program of many tiny buffers does not use a page for each), and
// every one is usable by kernels at its own bytes.
int small_allocations() {
  constexpr int kCount = 400;
  std::vector<void*> ptrs;
  for (int i = 0; i < kCount; ++i) {
    const std::size_t n = 100 + 37 * static_cast<std::size_t>(i % 50);  // 100 B to ~1.9 KiB
    ptrs.push_back(must_alloc(n));
    fill(ptrs.back(), n, static_cast<std::uint64_t>(i));
  }
  const std::string j = memory_stats(-1);
  // Four size classes (256 B to 2 KiB slots), one page each: 8 MiB, not 400 pages.
  expect(json_number(j, "reserved_bytes.all.current") == 8 << 20,
         "400 small allocations did not share four pages: " + j);
  for (int i = 0; i < kCount; i += 7) {
    const std::size_t n = 100 + 37 * static_cast<std::size_t>(i % 50);
    expect(mismatches(ptrs[i], n, static_cast<std::uint64_t>(i)) == 0,
           "small allocation " + std::to_string(i) + " has wrong bytes (overlapping slots?)");
    CUdeviceptr base = 0;
    std::size_t size = 0;
    expect(cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptrs[i]) + 50) == CUDA_SUCCESS &&
               base == reinterpret_cast<CUdeviceptr>(ptrs[i]) && size == n,
           "cuMemGetAddressRange of a small allocation is not its own range");
  }
  for (void* p : ptrs) check(cudaFree(p), "cudaFree");
  expect(json_number(memory_stats(-1), "reserved_bytes.all.current") == 0, "the small allocations' pages stayed");
  std::puts("ok");
  return 0;
}

// --- placement by use -------------------------------------------------------------------------------------
// Workloads of repeated iterations whose working set is larger than the device budget, measured by the
// emulator's memory counters (cuemuKernelBytes: the bytes kernels found in the device's own memory and
// over the bus). Each prints "device share S" for the iterations after a warm-up, and checks every byte.
// tests/preload/placement.sh runs each with transparent.placement = "allocation" and "use".

using KernelBytes = CUresult (*)(int, unsigned long long*, unsigned long long*);

struct Measure {
  KernelBytes counters = reinterpret_cast<KernelBytes>(::dlsym(RTLD_DEFAULT, "cuemuKernelBytes"));
  unsigned long long local = 0, remote = 0;
  Measure() { expect(counters != nullptr, "the emulator's cuemuKernelBytes was not found"); }
  void start() { expect(counters(0, &local, &remote) == CUDA_SUCCESS, "cuemuKernelBytes"); }
  double share() const {
    unsigned long long l = 0, r = 0;
    expect(counters(0, &l, &r) == CUDA_SUCCESS, "cuemuKernelBytes");
    const double on = static_cast<double>(l - local), all = static_cast<double>(l - local + r - remote);
    return all == 0 ? 0 : on / all;
  }
};

// A verification pass whose mismatches add up in one counter (checked at the end).
struct Checker {
  unsigned long long* counter = nullptr;
  Checker() {
    counter = static_cast<unsigned long long*>(must_alloc(sizeof *counter));
    check(cudaMemset(counter, 0, sizeof *counter), "zeroing the counter");
  }
  void verify(const void* p, std::size_t n, std::uint64_t seed) {
    tvmm_verify<<<64, 256>>>(static_cast<const unsigned char*>(p), n, seed, counter);
    check(cudaGetLastError(), "launching tvmm_verify");
  }
  void expect_none(const std::string& what) {
    unsigned long long bad = 0;
    check(cudaMemcpy(&bad, counter, sizeof bad, cudaMemcpyDeviceToHost), "reading the counter");
    expect(bad == 0, what + ": " + std::to_string(bad) + " wrong bytes");
  }
};

constexpr int kIterations = 12, kWarmup = 4;

void report(const Measure& m, const char* workload) { std::printf("%s: device share %.3f\n", workload, m.share()); }

// A training step: weights allocated first, then large buffers used once (a dataset cache), then per
// iteration activations allocated in the forward pass and freed in the backward pass; each weight is
// read three times and rewritten once per iteration. Allocation order keeps the cache on the device.
int placement_model() {
  constexpr int kLayers = 6;
  constexpr std::size_t kWeight = 4 << 20, kAct = 2 << 20, kCache = 12 << 20;
  Checker chk;
  std::vector<void*> w;
  for (int l = 0; l < kLayers; ++l) {
    w.push_back(must_alloc(kWeight));
    fill(w.back(), kWeight, 100 + l);
  }
  void* cache[2] = {must_alloc(kCache), must_alloc(kCache)};
  fill(cache[0], kCache, 200);
  fill(cache[1], kCache, 201);
  Measure m;
  for (int it = 0; it < kIterations; ++it) {
    if (it == kWarmup) m.start();
    std::vector<void*> act;
    for (int l = 0; l < kLayers; ++l) {  // forward
      chk.verify(w[l], kWeight, 100 + l);
      act.push_back(must_alloc(kAct));
      fill(act.back(), kAct, 300 + l);
    }
    for (int l = kLayers - 1; l >= 0; --l) {  // backward, then the optimizer's update
      chk.verify(act[l], kAct, 300 + l);
      chk.verify(w[l], kWeight, 100 + l);
      chk.verify(w[l], kWeight, 100 + l);
      check(cudaFree(act[l]), "cudaFree");
      fill(w[l], kWeight, 100 + l);
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  report(m, "model");
  chk.verify(cache[0], kCache, 200);
  chk.verify(cache[1], kCache, 201);
  chk.expect_none("the model's memory");
  std::puts("ok");
  return 0;
}

// Twelve buffers of 4 MiB allocated once and used at very different rates: three of them six times per
// iteration, the rest once. Nothing is freed, so only uses can change where pages live.
int buffers_used_unevenly(const char* workload, bool hot_first, std::uint64_t seed) {
  constexpr int kBuffers = 12;
  constexpr std::size_t kSize = 4 << 20;
  Checker chk;
  std::vector<void*> b;
  for (int i = 0; i < kBuffers; ++i) {
    b.push_back(must_alloc(kSize));
    fill(b.back(), kSize, seed + i);
  }
  Measure m;
  for (int it = 0; it < kIterations; ++it) {
    if (it == kWarmup) m.start();
    for (int i = 0; i < kBuffers; ++i) {
      const bool hot = hot_first ? i < 3 : i >= kBuffers - 3;
      for (int k = 0; k < (hot ? 6 : 1); ++k) chk.verify(b[i], kSize, seed + i);
    }
    // A stream synchronise or a device synchronise: both are quiescent points.
    check(hot_first ? cudaStreamSynchronize(nullptr) : cudaDeviceSynchronize(), "synchronising");
  }
  report(m, workload);
  chk.expect_none("the buffers");
  std::puts("ok");
  return 0;
}

// The most used allocated first (embedding tables, say), where allocation order keeps them off the device.
int placement_skewed() { return buffers_used_unevenly("skewed", true, 400); }

// The control: the most used buffers are the newest, where allocation order already puts them. Placing by
// use must not do worse.
int placement_recent() { return buffers_used_unevenly("recent", false, 500); }

// TVMM_DISABLE=1: every hook passes through, as if tvmm were not loaded.
int disabled() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  expect(total != env_size("TVMM_DEVICE_BUDGET") + env_size("TVMM_HOST_BUDGET"),
         "cudaMemGetInfo reports tvmm's budgets while tvmm is disabled");
  void* p = must_alloc(4 << 20);
  fill(p, 4 << 20, 8);
  expect(mismatches(p, 4 << 20, 8) == 0, "the runtime's memory has wrong bytes");
  check(cudaFree(p), "cudaFree");
  const auto [tvmm_malloc, tvmm_free] = torch_entry_points();
  void* t = tvmm_malloc(1 << 20, 0, nullptr);
  expect(t != nullptr, "tvmm_malloc failed while tvmm is disabled");
  fill(t, 1 << 20, 9);
  expect(mismatches(t, 1 << 20, 9) == 0, "tvmm_malloc's memory has wrong bytes");
  tvmm_free(t, 1 << 20, 0, nullptr);
  expect(memory_stats(-1) == "{}", "a heap was made while tvmm is disabled");
  std::puts("ok");
  return 0;
}

// The emulated runtime's own rules (run without tvmm): devices, the context it works in, the last
// error, launches, pointer attributes and the driver's entry points.
int runtime() {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  expect(n == 2, "the emulator has " + std::to_string(n) + " devices, not 2");
  int dev = -1;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  expect(dev == 0, "a new thread's device is not 0");
  expect(cudaSetDevice(n) == cudaErrorInvalidDevice, "cudaSetDevice past the last device did not fail");
  expect(cudaGetLastError() == cudaErrorInvalidDevice && cudaGetLastError() == cudaSuccess,
         "cudaGetLastError did not return the last error once");
  // cudaSetDevice makes the device's primary context current; memory then comes from that device.
  check(cudaSetDevice(1), "cudaSetDevice(1)");
  CUcontext current = nullptr, primary1 = nullptr;
  expect(cuCtxGetCurrent(&current) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&primary1, 1) == CUDA_SUCCESS &&
             current == primary1,
         "cudaSetDevice(1) did not make device 1's primary context current");
  void* p = must_alloc(1 << 20);
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  expect(attr.type == cudaMemoryTypeDevice && attr.device == 1 && attr.devicePointer == p,
         "memory allocated after cudaSetDevice(1) is not device 1's");
  fill(p, 1 << 20, 21);
  expect(mismatches(p, 1 << 20, 21) == 0 && host_mismatches(p, 1 << 20, 21) == 0, "device 1's bytes are wrong");
  check(cudaFree(p), "cudaFree");
  int host = 0;
  check(cudaPointerGetAttributes(&attr, &host), "cudaPointerGetAttributes of host memory");
  expect(attr.type == cudaMemoryTypeUnregistered, "plain host memory is not cudaMemoryTypeUnregistered");
  // A thread whose current context the program made with the driver API: the runtime works in it.
  std::thread([] {
    CUcontext own = nullptr;
    CUdevice d1 = 0;
    expect(cuDeviceGet(&d1, 1) == CUDA_SUCCESS && cuCtxCreate(&own, nullptr, 0, d1) == CUDA_SUCCESS,
           "cuCtxCreate failed");
    int device = -1;
    check(cudaGetDevice(&device), "cudaGetDevice");
    expect(device == 1, "cudaGetDevice does not report the current context's device");
    void* q = must_alloc(4096);
    CUcontext ctx = nullptr;
    expect(
        cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, reinterpret_cast<CUdeviceptr>(q)) == CUDA_SUCCESS &&
            ctx == own,
        "the runtime did not allocate in the thread's own context");
    CUcontext still = nullptr;
    expect(cuCtxGetCurrent(&still) == CUDA_SUCCESS && still == own, "the runtime changed the thread's context");
    check(cudaFree(q), "cudaFree");
    expect(cuCtxDestroy(own) == CUDA_SUCCESS, "cuCtxDestroy failed");
  }).join();
  // The driver's entry points, as the runtime found them.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &status),
        "cudaGetDriverEntryPointByVersion");
  expect(fn != nullptr && status == cudaDriverEntryPointSuccess, "cuMemAlloc was not found");
  std::puts("ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  static const tvmm::test_client::Case cases[] = {
      {"oversubscribe", oversubscribe},
      {"passthrough", passthrough},
      {"threads", threads},
      {"launches", launches},
      {"context", context},
      {"devices", devices},
      {"fork", fork_child},
      {"stream-ordered", stream_ordered},
      {"stats", stats},
      {"pointers", pointers},
      {"pitched", pitched},
      {"small", small_allocations},
      {"disabled", disabled},
      {"driver", driver},
      {"capture", capture},
      {"runtime", runtime},
      {"null-stream-free", null_stream_free},
      {"device-gates", device_gates},
      {"driver-allocations", driver_allocations},
      {"foreign-allocations", foreign_allocations},
      {"torch-device", first_call_names_device_1},
      {"placement-model", placement_model},
      {"placement-skewed", placement_skewed},
      {"placement-recent", placement_recent},
  };
  return tvmm::test_client::run("cuda_client", argc, argv, cases);
}
