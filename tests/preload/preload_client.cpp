// A program that knows nothing of tvmm: it calls the CUDA runtime (here the test stub, libtvmm_stub_cudart)
// and, for the driver cases, the driver through dlsym and cuGetProcAddress (the stub libcuda). The tests
// run it under LD_PRELOAD=libtvmm_preload.so with TVMM_DEVICE_BACKEND=sim, so its "device memory" is
// the simulated GPU's, readable and writable from the host. Each subcommand prints "ok" on success
// and exits 1 with the reason otherwise.
#include <dlfcn.h>
#include <signal.h>
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

#include "kernels/pattern.hpp"
#include "tests/preload/client_support.hpp"
#include "tvmm/tvmm.hpp"

extern "C" {
int cudaMalloc(void** p, std::size_t n);
int cudaFree(void* p);
int cudaMallocAsync(void** p, std::size_t n, void* stream);
int cudaFreeAsync(void* p, void* stream);
int cudaMemGetInfo(std::size_t* free, std::size_t* total);
int cudaDeviceSynchronize(void);
int cudaStreamSynchronize(void* stream);
int cudaIpcGetMemHandle(void* handle, void* p);
int stub_cudart_malloc(void** p, std::size_t n);
int stub_cudart_live(void);
}

namespace {

using tvmm::kernels::count_mismatches;
using tvmm::kernels::fill_pattern;

using tvmm::test_client::env_size;
using tvmm::test_client::expect;
using tvmm::test_client::fail;

void* must_alloc(std::size_t n) {
  void* p = nullptr;
  const int r = cudaMalloc(&p, n);
  if (r != 0 || p == nullptr) fail("cudaMalloc(" + std::to_string(n) + ") returned " + std::to_string(r));
  return p;
}

// 4x the device budget, each allocation written at once and every byte re-read at the end: later
// allocations push earlier ones out to the host, which must keep their bytes.
int oversubscribe() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  std::size_t free0 = 0, total = 0;
  expect(cudaMemGetInfo(&free0, &total) == 0, "cudaMemGetInfo failed");
  const std::size_t host = env_size("TVMM_HOST_BUDGET");
  expect(total == device + host, "cudaMemGetInfo total " + std::to_string(total) + " is not the device + host budgets");
  expect(free0 == total, "free memory before any allocation is not the total");
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t allocated = 0;
  for (unsigned i = 0; allocated < 4 * device; ++i) {
    const std::size_t n = (i % 3 + 1) * (std::size_t{1} << 20) + 4096 * i;  // not page multiples
    void* p = must_alloc(n);
    fill_pattern(p, n, i);
    blocks.emplace_back(p, n);
    allocated += n;
    // The oldest allocation keeps its bytes while newer ones push it around.
    expect(count_mismatches(blocks[0].first, blocks[0].second, 0) == 0,
           "allocation 0 changed after allocation " + std::to_string(i));
  }
  std::size_t free1 = 0;
  expect(cudaMemGetInfo(&free1, &total) == 0 && free1 < free0 - allocated + (std::size_t{2} << 20) &&
             free1 <= free0 - allocated,
         "cudaMemGetInfo's free memory did not drop by what was allocated");
  expect(cudaDeviceSynchronize() == 0, "cudaDeviceSynchronize failed");  // a quiescent point
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::size_t bad = count_mismatches(blocks[i].first, blocks[i].second, i);
    expect(bad == 0, "allocation " + std::to_string(i) + " has " + std::to_string(bad) + " wrong bytes");
  }
  for (auto& [p, n] : blocks) expect(cudaFree(p) == 0, "cudaFree failed");
  std::size_t free2 = 0;
  expect(cudaMemGetInfo(&free2, &total) == 0 && free2 == total, "memory is not all free after freeing everything");
  // Past the capacity: an error code, not a crash, and nothing changes.
  void* big = nullptr;
  expect(cudaMalloc(&big, total + 1) == 2, "an allocation past device + host budgets did not fail with 2");
  std::puts("ok");
  return 0;
}

// Memory the program got elsewhere goes to the real runtime's cudaFree.
int passthrough() {
  void* foreign = nullptr;
  expect(stub_cudart_malloc(&foreign, 4096) == 0, "the stub runtime did not allocate");
  const int live = stub_cudart_live();
  expect(cudaFree(foreign) == 0, "cudaFree of the runtime's own pointer failed");
  expect(stub_cudart_live() == live - 1, "cudaFree of a foreign pointer did not reach the real runtime");
  expect(cudaFree(nullptr) == 0, "cudaFree(NULL) failed");
  // cudaIpcGetMemHandle: tvmm's memory is refused with a reason; other memory passes through.
  char handle[64];
  void* mine = must_alloc(4096);
  expect(cudaIpcGetMemHandle(handle, mine) == 801, "cudaIpcGetMemHandle on tvmm memory did not fail with 801");
  expect(stub_cudart_malloc(&foreign, 64) == 0 && cudaIpcGetMemHandle(handle, foreign) == 0,
         "cudaIpcGetMemHandle on foreign memory did not pass through");
  expect(cudaFree(mine) == 0 && cudaFree(foreign) == 0, "frees failed");
  // Stream-ordered allocation and free.
  void* a = nullptr;
  expect(cudaMallocAsync(&a, 1 << 20, nullptr) == 0 && a != nullptr, "cudaMallocAsync failed");
  fill_pattern(a, 1 << 20, 5);
  expect(cudaFreeAsync(a, nullptr) == 0, "cudaFreeAsync failed");
  expect(cudaFreeAsync(a, nullptr) != 0, "a second cudaFreeAsync of the same pointer succeeded");
  expect(cudaStreamSynchronize(nullptr) == 0, "cudaStreamSynchronize failed");
  std::puts("ok");
  return 0;
}

int double_free() {
  auto* p = static_cast<char*>(must_alloc(3 << 20));
  expect(cudaFree(p + 4096) == 1, "cudaFree of an interior pointer did not give cudaErrorInvalidValue");
  fill_pattern(p, 3 << 20, 9);  // still allocated and intact
  expect(count_mismatches(p, 3 << 20, 9) == 0, "the allocation changed after a bad free");
  expect(cudaFree(p) == 0, "cudaFree failed");
  expect(cudaFree(p) == 1, "a double free did not give cudaErrorInvalidValue");
  std::puts("ok");
  return 0;
}

// 8 threads allocate, write, re-read and free at once, together needing more than the device, so
// pages are remapped while other threads write theirs.
int threads() {
  constexpr int kThreads = 8, kRounds = 16;
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([t, &errors] {
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t n = (std::size_t{1} << 20) * static_cast<std::size_t>(1 + (t + r) % 3);
        void* p = nullptr;
        if (cudaMalloc(&p, n) != 0) {
          ++errors;
          continue;
        }
        const auto seed = static_cast<std::uint64_t>(t * 1000 + r);
        fill_pattern(p, n, seed);
        mine.emplace_back(p, n);
        // Write the older blocks again while other threads' allocations remap pages: a write must
        // never land in a page's old copy.
        for (std::size_t i = 0; i + 1 < mine.size(); ++i) {
          fill_pattern(mine[i].first, mine[i].second,
                       static_cast<std::uint64_t>(t * 1000 + r - static_cast<int>(mine.size() - 1 - i)));
        }
        if (mine.size() > 2) {  // keep a few alive, free the oldest
          const auto [q, m] = mine.front();
          const auto qseed = static_cast<std::uint64_t>(t * 1000 + r - 2);
          if (count_mismatches(q, m, qseed) != 0) ++errors;
          if (cudaFree(q) != 0) ++errors;
          mine.erase(mine.begin());
        }
      }
      for (std::size_t i = 0; i < mine.size(); ++i) {
        const auto seed = static_cast<std::uint64_t>(t * 1000 + kRounds - static_cast<int>(mine.size() - i));
        if (count_mismatches(mine[i].first, mine[i].second, seed) != 0) ++errors;
        if (cudaFree(mine[i].first) != 0) ++errors;
      }
    });
  }
  for (auto& th : pool) th.join();
  expect(errors.load() == 0, std::to_string(errors.load()) + " errors across the threads");
  std::size_t free = 0, total = 0;
  expect(cudaMemGetInfo(&free, &total) == 0 && free == total, "memory leaked across the threads");
  std::puts("ok");
  return 0;
}

// Waits up to 20 s for `pid`; -1 if it is still running then (it is killed), else its exit status.
int wait_for_child(pid_t pid) {
  for (int waited_ms = 0; waited_ms < 20000; waited_ms += 10) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// fork: the child gets a heap of its own; the parent's memory stays the parent's.
int fork_child() {
  void* parent = must_alloc(2 << 20);
  fill_pattern(parent, 2 << 20, 77);
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    std::vector<void*> blocks;
    const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
    for (std::size_t done = 0; done < 2 * device; done += 2 << 20) {
      void* p = nullptr;
      if (cudaMalloc(&p, 2 << 20) != 0) _exit(10);
      fill_pattern(p, 2 << 20, done);
      blocks.push_back(p);
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (count_mismatches(blocks[i], 2 << 20, i * (2 << 20)) != 0) _exit(11);
      if (cudaFree(blocks[i]) != 0) _exit(12);
    }
    if (cudaFree(parent) != 1) _exit(13);  // the parent's: an error, not a crash
    _exit(0);
  }
  const int status = wait_for_child(pid);
  expect(status == 0, status == -1 ? std::string("the child hung for 20 s")
                                   : "the child failed (status " + std::to_string(status) + ")");
  expect(count_mismatches(parent, 2 << 20, 77) == 0, "the parent's memory changed across the fork");
  expect(cudaFree(parent) == 0, "the parent's free failed");
  std::puts("ok");
  return 0;
}

// The driver API as a static-runtime program reaches it: dlopen libcuda, dlsym, cuGetProcAddress.
int driver(const char* libcuda) {
  using Alloc = int (*)(unsigned long long*, std::size_t);
  using Free = int (*)(unsigned long long);
  using Info = int (*)(std::size_t*, std::size_t*);
  using Proc = int (*)(const char*, void**, int, std::uint64_t, int*);
  void* h = ::dlopen(libcuda, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) fail(std::string("dlopen: ") + ::dlerror());
  auto* alloc = reinterpret_cast<Alloc>(::dlsym(h, "cuMemAlloc_v2"));
  auto* free_ = reinterpret_cast<Free>(::dlsym(h, "cuMemFree_v2"));
  auto* info = reinterpret_cast<Info>(::dlsym(h, "cuMemGetInfo_v2"));
  auto* proc = reinterpret_cast<Proc>(::dlsym(h, "cuGetProcAddress_v2"));
  auto* allocs = reinterpret_cast<int (*)()>(::dlsym(h, "stub_cuda_allocs"));
  expect(alloc && free_ && info && proc && allocs, "dlsym did not find the driver's functions");
  // Through dlsym.
  unsigned long long d = 0;
  expect(alloc(&d, 3 << 20) == 0 && d != 0, "cuMemAlloc_v2 failed");
  expect(allocs() == 0, "cuMemAlloc_v2 from dlsym reached the driver instead of tvmm");
  fill_pattern(reinterpret_cast<void*>(d), 3 << 20, 4);
  std::size_t free = 0, total = 0;
  expect(info(&free, &total) == 0 && total == env_size("TVMM_DEVICE_BUDGET") + env_size("TVMM_HOST_BUDGET"),
         "cuMemGetInfo_v2 did not report tvmm's budgets");
  // Through cuGetProcAddress, base names at a 12.x ABI.
  void* f = nullptr;
  expect(proc("cuMemAlloc", &f, 12000, 0, nullptr) == 0 && f != nullptr, "cuGetProcAddress(cuMemAlloc) failed");
  unsigned long long e = 0;
  expect(reinterpret_cast<Alloc>(f)(&e, 1 << 20) == 0 && allocs() == 0,
         "cuMemAlloc from cuGetProcAddress reached the driver instead of tvmm");
  void* g = nullptr;
  expect(proc("cuGetProcAddress", &g, 12000, 0, nullptr) == 0 && g != nullptr, "cuGetProcAddress of itself failed");
  void* f2 = nullptr;
  expect(reinterpret_cast<Proc>(g)("cuMemFree", &f2, 12000, 0, nullptr) == 0, "nested cuGetProcAddress failed");
  expect(reinterpret_cast<Free>(f2)(e) == 0, "cuMemFree from a nested lookup failed");
  void* sync = nullptr;
  expect(proc("cuCtxSynchronize", &sync, 12000, 0, nullptr) == 0 && sync != nullptr,
         "a lookup tvmm does not hook failed");
  // The 2D and 3D peer copies the runtime queues through cuGetProcAddress (cudaMemcpy2D as
  // cuMemcpy2DUnaligned, cudaMemcpy3DPeer[Async]) come back as tvmm's gated hooks, in both default-stream
  // flavours, and reach the driver.
  auto* copies = reinterpret_cast<int (*)()>(::dlsym(h, "stub_cuda_copies"));
  expect(copies != nullptr, "the stub driver has no copy counter");
  struct Copy {
    const char* base;
    const char* hook[2];  // tvmm's export: legacy default stream, per-thread default stream
    bool async;
  };
  const Copy kCopies[] = {{"cuMemcpy2DUnaligned", {"cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds"}, false},
                          {"cuMemcpy3DPeer", {"cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds"}, false},
                          {"cuMemcpy3DPeerAsync", {"cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz"}, true}};
  int expected = 0;
  for (const Copy& c : kCopies) {
    for (const int pt : {0, 1}) {  // cuGetProcAddress flag 2: CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
      void* fn = nullptr;
      const std::string what = std::string(c.base) + (pt != 0 ? " (per-thread)" : "");
      expect(proc(c.base, &fn, 12000, pt != 0 ? 2 : 0, nullptr) == 0 && fn != nullptr, what + ": lookup failed");
      expect(fn == ::dlsym(RTLD_DEFAULT, c.hook[pt]), what + ": cuGetProcAddress did not hand out tvmm's hook");
      const int r = c.async ? reinterpret_cast<int (*)(const void*, void*)>(fn)(nullptr, nullptr)
                            : reinterpret_cast<int (*)(const void*)>(fn)(nullptr);
      expect(r == 0 && copies() == ++expected, what + ": tvmm's hook did not reach the driver");
    }
  }
  // Memory that is not tvmm's goes to the driver.
  auto* driver_alloc = reinterpret_cast<Alloc>(::dlsym(h, "stub_cuda_malloc"));
  auto* frees = reinterpret_cast<int (*)()>(::dlsym(h, "stub_cuda_frees"));
  unsigned long long theirs = 0;
  expect(driver_alloc != nullptr && frees != nullptr && driver_alloc(&theirs, 64) == 0, "the stub driver failed");
  expect(free_(theirs) == 0 && frees() == 1, "cuMemFree_v2 of the driver's own memory did not reach the driver");
  expect(count_mismatches(reinterpret_cast<void*>(d), 3 << 20, 4) == 0, "driver-allocated bytes changed");
  expect(free_(d) == 0, "cuMemFree_v2 failed");
  expect(free_(d) == 1, "a double cuMemFree_v2 did not give CUDA_ERROR_INVALID_VALUE");
  // dlsym(RTLD_NEXT) still answers relative to the caller: from this program, the first definition
  // after it is tvmm's cudaMalloc, exactly as without the dlsym hook.
  expect(::dlsym(RTLD_NEXT, "cudaMalloc") == ::dlsym(RTLD_DEFAULT, "cudaMalloc"),
         "dlsym(RTLD_NEXT) was resolved relative to tvmm, not the caller");
  std::puts("ok");
  return 0;
}

// One rank of several: allocates 3x its device budget through the runtime, and checks its budgets.
int rank() {
  const std::size_t device = env_size("TVMM_DEVICE_BUDGET");
  std::size_t free = 0, total = 0;
  expect(cudaMemGetInfo(&free, &total) == 0 && total == device + env_size("TVMM_HOST_BUDGET"),
         "cudaMemGetInfo does not show this rank's budgets");
  std::vector<void*> blocks;
  for (std::size_t done = 0; done < 3 * device; done += 2 << 20) {
    blocks.push_back(must_alloc(2 << 20));
    fill_pattern(blocks.back(), 2 << 20, done);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    expect(count_mismatches(blocks[i], 2 << 20, i * (2 << 20)) == 0, "rank data changed");
    expect(cudaFree(blocks[i]) == 0, "cudaFree failed");
  }
  // The explicit API of the same process, with this rank's NVMe directory ({local_rank} in
  // TVMM_NVME_PATHS): more than device + host, so pages go to this rank's files and come back.
  tvmm::Config c;
  tvmm::apply_environment(c);
  const char* local = std::getenv("LOCAL_RANK");
  expect(c.nvme.paths.size() == 1 && c.nvme.paths[0].ends_with(std::string("nvme-") + (local ? local : "?")),
         "TVMM_NVME_PATHS was not substituted per rank");
  tvmm::Pager pager(c);
  std::vector<tvmm::Tensor> tensors;
  const std::size_t want = c.device_budget + c.host_budget + c.nvme.budget / 2;
  for (std::size_t done = 0, i = 0; done < want; done += 2 << 20, ++i) {
    tensors.push_back(pager.allocate(2 << 20));
    auto pin = tensors.back().pin(tvmm::Access::write);
    fill_pattern(pin.data(), 2 << 20, 1000 + i);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto pin = tensors[i].pin(tvmm::Access::read);
    expect(count_mismatches(pin.data(), 2 << 20, 1000 + i) == 0, "an NVMe round trip changed bytes");
  }
  expect(pager.stats().host_to_nvme.pages > 0, "nothing went to this rank's NVMe files");
  std::puts("ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "oversubscribe") return oversubscribe();
  if (cmd == "passthrough") return passthrough();
  if (cmd == "double-free") return double_free();
  if (cmd == "threads") return threads();
  if (cmd == "fork") return fork_child();
  if (cmd == "driver" && argc > 2) return driver(argv[2]);
  if (cmd == "rank") return rank();
  std::fprintf(stderr,
               "usage: preload_client oversubscribe|passthrough|double-free|threads|fork|rank|driver LIBCUDA\n");
  return 2;
}
