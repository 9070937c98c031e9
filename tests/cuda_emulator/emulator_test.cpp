// The CUDA driver emulator's own rules, one test (at least) per rule of docs/cuda-emulator.md. Each
// scenario runs in a child process that loads the emulator fresh with its own settings (the driver reads
// them at cuInit, once per process) and reaches every entry point through cuGetProcAddress_v2, as tvmm
// does. Failures in the child are printed and make it exit non-zero.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/pattern.hpp"

#if defined(TVMM_HAVE_GPU_KERNELS)
namespace tvmm::kernels {
extern const unsigned char gpu_fatbin[];
}
#endif
namespace {
// nvcc's fatbin of tvmm's kernels (PTX ISA 9.0 and an ABI-8 sm_90 cubin), or null in a build without nvcc.
#if defined(TVMM_HAVE_GPU_KERNELS)
const void* const kTvmmFatbin = tvmm::kernels::gpu_fatbin;
#else
const void* const kTvmmFatbin = nullptr;
#endif
}  // namespace

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Cu {
  void* lib = nullptr;
  GetProc get = nullptr;
  template <class F>
  F at(const char* name, int version) const {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || p == nullptr) {
      std::fprintf(stderr, "emulator has no %s at %d\n", name, version);
      std::_Exit(3);
    }
    return reinterpret_cast<F>(p);
  }
  [[nodiscard]] std::string name(CUresult r) const {
    const char* n = nullptr;
    at<decltype(&::cuGetErrorName)>("cuGetErrorName", 6000)(r, &n);
    return n != nullptr ? n : "CUresult " + std::to_string(static_cast<int>(r));
  }
};

// The entry point `name` with cuda.h's signature for it, at ABI version 12000 (or `v`).
#define CU(name) cu.at<decltype(&::name)>(#name, 12000)
#define CU_AT(name, v) cu.at<decltype(&::name)>(#name, v)
// An older ABI than cuda.h declares: `type` is its function pointer type.
#define CU_OLD(name, v, type) cu.at<type>(#name, v)

int& failures() {
  static int n = 0;
  return n;
}
#define EXPECT_CU(expected, call)                                                                \
  do {                                                                                           \
    const CUresult got_ = (call);                                                                \
    if (got_ != (expected)) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s\n  returned %s, expected %s\n", __FILE__, __LINE__, #call, \
                   cu.name(got_).c_str(), cu.name(expected).c_str());                            \
      ++failures();                                                                              \
    }                                                                                            \
  } while (0)
#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures();                                                                 \
    }                                                                               \
  } while (0)

using Env = std::vector<std::pair<std::string, std::string>>;

constexpr unsigned kChildSeconds = 60;

// Runs `body` in a child process with `env` set; the result is "" or the child's report. With
// `initialise`, cuInit(0) is called first.
std::string in_child(const Env& env, const std::function<void(const Cu&)>& body, bool initialise = true) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return "pipe failed";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(kChildSeconds);  // a scenario that hangs (a wait nothing completes) fails here, not at ctest's timeout
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    std::vector<std::string> inherited;  // the scenario's settings only, whatever the parent's are
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "TVMM_CUEMU_", 11) == 0) inherited.emplace_back(*e, std::strcspn(*e, "="));
    }
    for (const auto& k : inherited) ::unsetenv(k.c_str());
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    Cu cu;
    cu.lib = ::dlopen(TVMM_CUDA_EMULATOR, RTLD_NOW | RTLD_LOCAL);
    if (cu.lib == nullptr) {
      std::fprintf(stderr, "cannot load %s: %s\n", TVMM_CUDA_EMULATOR, ::dlerror());
      std::_Exit(2);
    }
    cu.get = reinterpret_cast<GetProc>(::dlsym(cu.lib, "cuGetProcAddress_v2"));
    if (cu.get == nullptr) std::_Exit(2);
    if (initialise) EXPECT_CU(CUDA_SUCCESS, CU(cuInit)(0));
    body(cu);
    std::fflush(stderr);
    std::_Exit(failures() == 0 ? 0 : 1);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "child " +
         std::string(WIFSIGNALED(status)
                         ? "killed by signal " + std::to_string(WTERMSIG(status)) +
                               (WTERMSIG(status) == SIGALRM
                                    ? " (SIGALRM: still running after " + std::to_string(kChildSeconds) + " s, hung)"
                                    : "")
                         : "exited " + std::to_string(WEXITSTATUS(status))) +
         ":\n" + out;
}
#define RUN(env, ...)                                       \
  do {                                                      \
    const std::string report_ = in_child(env, __VA_ARGS__); \
    EXPECT_TRUE(report_.empty()) << report_;                \
  } while (0)

// A context of device `ordinal`, current on this thread (the primary context, retained).
CUcontext primary(const Cu& cu, int ordinal = 0) {
  CUcontext ctx = nullptr;
  EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRetain)(&ctx, ordinal));
  EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSetCurrent)(ctx));
  return ctx;
}

CUmemAllocationProp device_prop(int ordinal = 0) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = ordinal;
  return p;
}
CUmemAllocationProp host_prop(int numa = 0) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  p.location.id = numa;
  return p;
}
CUmemAccessDesc rw(int ordinal) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = ordinal;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

constexpr std::size_t MiB = std::size_t{1} << 20;

// A mapped, device-0-accessible range of `chunks` chunks of 2 MiB; returns its base.
CUdeviceptr mapped(const Cu& cu, int chunks, int ordinal = 0) {
  CUdeviceptr va = 0;
  EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, chunks * 2 * MiB, 0, 0, 0));
  const CUmemAllocationProp p = device_prop(ordinal);
  for (int i = 0; i < chunks; ++i) {
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va + i * 2 * MiB, 2 * MiB, 0, h, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h));  // the mapping keeps it
  }
  const CUmemAccessDesc a = rw(ordinal);
  EXPECT_CU(CUDA_SUCCESS, CU(cuMemSetAccess)(va, chunks * 2 * MiB, &a, 1));
  return va;
}

}  // namespace

// --- loading ---------------------------------------------------------------------------------------------

TEST(CudaEmulator, GetProcAddressReturnsTheVariantTheVersionSelects) {
  RUN({}, [](const Cu& cu) {
    void* v1 = nullptr;
    void* v2 = nullptr;
    CUdriverProcAddressQueryResult st{};
    // cuMemAdvise: the CUdevice form until 12020, then the CUmemLocation form (cudaTypedefs.h).
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemAdvise", &v1, 12010, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && v1 != nullptr);
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemAdvise", &v2, 12020, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && v2 != nullptr && v2 != v1);
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemPrefetchAsync", &v1, 12000, 0, &st));
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemPrefetchAsync", &v2, 13000, 0, &st));
    CHECK(v1 != nullptr && v2 != nullptr && v1 != v2);
    // cuMemGetInfo: _v2 (size_t) from 3020; cuCtxGetDevice takes a context from 13000.
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemGetInfo", &v1, 3020, 0, &st));
    CHECK(v1 != nullptr);
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuCtxGetDevice", &v1, 12000, 0, &st));
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuCtxGetDevice", &v2, 13000, 0, &st));
    CHECK(v1 != v2);
    // Unknown: success, NULL, SYMBOL_NOT_FOUND. Too old a version: NULL, VERSION_NOT_SUFFICIENT.
    v1 = &st;
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuNoSuchFunction", &v1, 12000, 0, &st));
    CHECK(v1 == nullptr && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuMemCreate", &v1, 10010, 0, &st));
    CHECK(v1 == nullptr && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    // A version newer than the driver's: CUDA_ERROR_INVALID_VALUE; unknown flags too.
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.get("cuMemCreate", &v1, 99000, 0, &st));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.get("cuMemCreate", &v1, 12000, 8, &st));
    // symbolStatus is optional.
    EXPECT_CU(CUDA_SUCCESS, cu.get("cuInit", &v1, 2000, 0, nullptr));
    CHECK(v1 != nullptr);
  });
}

// A program linked with -lcuda, or one that uses dlsym, binds to the versioned names libcuda exports
// (cuda.h: "#define cuMemAlloc cuMemAlloc_v2", ...): each is the entry point of that ABI, and an ABI the
// emulator does not have (the 32-bit cuMemAlloc of CUDA 2.0) is not exported at all.
TEST(CudaEmulator, ExportedSymbolsAreTheVersionedEntryPoints) {
  RUN(
      {},
      [](const Cu& cu) {
        for (const char* name : {"cuInit",
                                 "cuDriverGetVersion",
                                 "cuGetProcAddress",
                                 "cuGetProcAddress_v2",
                                 "cuDeviceTotalMem_v2",
                                 "cuCtxCreate_v2",
                                 "cuCtxCreate_v4",
                                 "cuCtxDestroy_v2",
                                 "cuCtxPushCurrent_v2",
                                 "cuCtxPopCurrent_v2",
                                 "cuCtxSynchronize",
                                 "cuCtxSynchronize_v2",
                                 "cuCtxGetDevice",
                                 "cuCtxGetDevice_v2",
                                 "cuMemAlloc_v2",
                                 "cuMemFree_v2",
                                 "cuMemGetInfo_v2",
                                 "cuMemAdvise",
                                 "cuMemAdvise_v2",
                                 "cuMemPrefetchAsync",
                                 "cuMemPrefetchAsync_v2",
                                 "cuMemGetAddressRange_v2",
                                 "cuMemcpyHtoD_v2",
                                 "cuMemcpyDtoHAsync_v2",
                                 "cuStreamDestroy_v2",
                                 "cuEventDestroy_v2",
                                 "cuEventElapsedTime_v2",
                                 "cuStreamBeginCapture_v2",
                                 "cuStreamGetCaptureInfo_v3",
                                 "cuGraphInstantiateWithFlags",
                                 "cuLaunchKernel",
                                 "cuFuncGetParamInfo",
                                 "cuMemAllocPitch_v2",
                                 "cuMemAllocAsync",
                                 "cuMemFreeAsync",
                                 "cuMemAllocFromPoolAsync",
                                 "cuDeviceGetDefaultMemPool",
                                 "cuMemCreate",
                                 "cuMemMap"}) {
          if (::dlsym(cu.lib, name) == nullptr) {
            std::fprintf(stderr, "libcuda.so.1 does not export %s\n", name);
            ++failures();
          }
        }
        CHECK(::dlsym(cu.lib, "cuMemAlloc") == nullptr);  // the CUDA 2.0 ABI (unsigned int sizes)
        CHECK(::dlsym(cu.lib, "cuCtxCreate") == nullptr);
        // Calls through the exported names behave as the entry points do.
        auto* init = reinterpret_cast<decltype(&::cuInit)>(::dlsym(cu.lib, "cuInit"));
        auto* alloc = reinterpret_cast<decltype(&::cuMemAlloc_v2)>(::dlsym(cu.lib, "cuMemAlloc_v2"));
        auto* htod = reinterpret_cast<decltype(&::cuMemcpyHtoD_v2)>(::dlsym(cu.lib, "cuMemcpyHtoD_v2"));
        auto* dtoh = reinterpret_cast<decltype(&::cuMemcpyDtoH_v2)>(::dlsym(cu.lib, "cuMemcpyDtoH_v2"));
        auto* sync = reinterpret_cast<CUresult (*)()>(::dlsym(cu.lib, "cuCtxSynchronize"));
        auto* free_ = reinterpret_cast<decltype(&::cuMemFree_v2)>(::dlsym(cu.lib, "cuMemFree_v2"));
        if (init == nullptr || alloc == nullptr || htod == nullptr || dtoh == nullptr || sync == nullptr ||
            free_ == nullptr) {
          return;
        }
        CUdeviceptr d = 0;
        EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, alloc(&d, 4096));
        EXPECT_CU(CUDA_SUCCESS, init(0));
        EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, sync());
        primary(cu);
        EXPECT_CU(CUDA_SUCCESS, alloc(&d, 4096));
        const std::uint64_t in = 0x1234567890abcdefULL;
        std::uint64_t out = 0;
        EXPECT_CU(CUDA_SUCCESS, htod(d, &in, sizeof in));
        EXPECT_CU(CUDA_SUCCESS, dtoh(&out, d, sizeof out));
        CHECK(out == in);
        EXPECT_CU(CUDA_SUCCESS, sync());
        EXPECT_CU(CUDA_SUCCESS, free_(d));
        EXPECT_CU(CUDA_ERROR_INVALID_VALUE, free_(d));
      },
      false);
}

// Every variant the emulator registers is one cudaTypedefs.h declares (PFN_<name>_v<version>), so no
// entry point answers with an ABI the driver never had.
TEST(CudaEmulator, EveryVariantIsOneCudaTypedefsDeclares) {
  std::ifstream in(TVMM_CUDA_TYPEDEFS);
  ASSERT_TRUE(in) << TVMM_CUDA_TYPEDEFS;
  std::stringstream text;
  text << in.rdbuf();
  const std::string typedefs = text.str();
  const char* names[] = {"cuInit",
                         "cuDriverGetVersion",
                         "cuDeviceGetCount",
                         "cuDeviceGet",
                         "cuDeviceGetAttribute",
                         "cuDeviceGetName",
                         "cuDeviceGetPCIBusId",
                         "cuDeviceTotalMem",
                         "cuDevicePrimaryCtxRetain",
                         "cuDevicePrimaryCtxRelease",
                         "cuDevicePrimaryCtxGetState",
                         "cuCtxCreate",
                         "cuCtxDestroy",
                         "cuCtxPushCurrent",
                         "cuCtxPopCurrent",
                         "cuCtxSetCurrent",
                         "cuCtxGetCurrent",
                         "cuCtxGetDevice",
                         "cuCtxSynchronize",
                         "cuGetErrorName",
                         "cuGetErrorString",
                         "cuGetProcAddress",
                         "cuMemAddressReserve",
                         "cuMemAddressFree",
                         "cuMemCreate",
                         "cuMemRelease",
                         "cuMemRetainAllocationHandle",
                         "cuMemMap",
                         "cuMemUnmap",
                         "cuMemSetAccess",
                         "cuMemGetAccess",
                         "cuMemGetAllocationGranularity",
                         "cuMemGetAllocationPropertiesFromHandle",
                         "cuMemAlloc",
                         "cuMemFree",
                         "cuMemGetInfo",
                         "cuMemAllocHost",
                         "cuMemFreeHost",
                         "cuMemHostRegister",
                         "cuMemHostUnregister",
                         "cuMemAllocManaged",
                         "cuMemAdvise",
                         "cuMemPrefetchAsync",
                         "cuPointerGetAttribute",
                         "cuPointerGetAttributes",
                         "cuMemGetAddressRange",
                         "cuStreamCreate",
                         "cuStreamDestroy",
                         "cuStreamSynchronize",
                         "cuStreamQuery",
                         "cuStreamWaitEvent",
                         "cuEventCreate",
                         "cuEventDestroy",
                         "cuEventRecord",
                         "cuEventQuery",
                         "cuEventSynchronize",
                         "cuEventElapsedTime",
                         "cuMemcpyHtoDAsync",
                         "cuMemcpyDtoHAsync",
                         "cuMemcpyDtoDAsync",
                         "cuMemcpyHtoD",
                         "cuMemcpyDtoH",
                         "cuMemsetD8",
                         "cuMemsetD8Async",
                         "cuLaunchHostFunc",
                         "cuStreamBeginCapture",
                         "cuStreamEndCapture",
                         "cuStreamIsCapturing",
                         "cuStreamGetCaptureInfo",
                         "cuGraphInstantiate",
                         "cuGraphInstantiateWithFlags",
                         "cuGraphLaunch",
                         "cuGraphDestroy",
                         "cuGraphExecDestroy",
                         "cuModuleLoadData",
                         "cuModuleLoadFatBinary",
                         "cuModuleUnload",
                         "cuModuleGetFunction",
                         "cuLaunchKernel"};
  const std::string report = in_child({}, [&](const Cu& cu) {
    for (const char* name : names) {
      // Every version a variant could be registered at: the versions cudaTypedefs.h names for it, and
      // the ones in between; each pointer returned must be one a declared version selects.
      std::set<int> declared;
      const std::regex re(std::string("PFN_") + name + R"(_v(\d+)\))");
      for (auto it = std::sregex_iterator(typedefs.begin(), typedefs.end(), re); it != std::sregex_iterator(); ++it) {
        declared.insert(std::stoi((*it)[1]));
      }
      CHECK(!declared.empty());
      void* last = nullptr;
      for (int v = 2000; v <= 13000; v += 10) {
        void* p = nullptr;
        CUdriverProcAddressQueryResult st{};
        (void)cu.get(name, &p, v, 0, &st);
        if (p != nullptr && p != last && declared.count(v) == 0) {
          std::fprintf(stderr, "%s changes variant at %d, which cudaTypedefs.h does not declare\n", name, v);
          ++failures();
        }
        if (p != nullptr) last = p;
      }
      CHECK(last != nullptr);
    }
  });
  EXPECT_TRUE(report.empty()) << report;
}

TEST(CudaEmulator, EveryCallBeforeCuInitFails) {
  const std::string report = in_child(
      {},
      [](const Cu& cu) {
        int n = 0;
        EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, CU(cuDeviceGetCount)(&n));
        CUdeviceptr p = 0;
        EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, CU(cuMemAddressReserve)(&p, 2 * MiB, 0, 0, 0));
        int v = 0;  // cuDriverGetVersion and the error names work before cuInit
        EXPECT_CU(CUDA_SUCCESS, CU(cuDriverGetVersion)(&v));
        CHECK(v == CUDA_VERSION);                            // the headers' version by default
        EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuInit)(1));  // flags must be 0
        EXPECT_CU(CUDA_SUCCESS, CU(cuInit)(0));
        EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetCount)(&n));
      },
      false);
  EXPECT_TRUE(report.empty()) << report;
}

// --- devices ---------------------------------------------------------------------------------------------

TEST(CudaEmulator, DevicesAndTheirAttributesComeFromTheEnvironment) {
  RUN({}, [](const Cu& cu) {
    int n = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetCount)(&n));
    CHECK(n == 2);  // the default
    char bus0[16], bus1[16];
    EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetPCIBusId)(bus0, sizeof bus0, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetPCIBusId)(bus1, sizeof bus1, 1));
    CHECK(std::strlen(bus0) == 12 && std::strcmp(bus0, bus1) != 0);
    int v = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    CHECK(v == 1);
    CUdevice d = 0;
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, CU(cuDeviceGet)(&d, 2));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
  });
  RUN((Env{{"TVMM_CUEMU_DEVICES", "3"},
           {"TVMM_CUEMU_MEMORY", "1GiB"},
           {"TVMM_CUEMU_MEMORY_2", "512MiB"},
           {"TVMM_CUEMU_DRIVER_VERSION", "12020"},
           {"TVMM_CUEMU_DISABLE", "vmm,host_numa,managed"}}),
      [](const Cu& cu) {
        int n = 0, v = 0;
        EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetCount)(&n));
        CHECK(n == 3);
        std::size_t total = 0;
        EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceTotalMem)(&total, 1));
        CHECK(total == 1024 * MiB);
        EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceTotalMem)(&total, 2));
        CHECK(total == 512 * MiB);
        EXPECT_CU(CUDA_SUCCESS, CU(cuDriverGetVersion)(&v));
        CHECK(v == 12020);
        for (auto attr : {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                          CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                          CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS}) {
          EXPECT_CU(CUDA_SUCCESS, CU(cuDeviceGetAttribute)(&v, attr, 0));
          CHECK(v == 0);
        }
        CUdeviceptr p = 0;
        EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, CU(cuMemAddressReserve)(&p, 2 * MiB, 0, 0, 0));
      });
}

TEST(CudaEmulator, FreeMemoryShrinksAsOtherAllocationsTakeIt) {
  RUN((Env{{"TVMM_CUEMU_MEMORY", "64MiB"}}), [](const Cu& cu) {
    primary(cu);
    std::size_t free0 = 0, total = 0, free1 = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free0, &total));
    CHECK(free0 == 64 * MiB && total == 64 * MiB);
    CUdeviceptr other = 0;  // another user of the GPU takes 40 MiB
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAlloc)(&other, 40 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free1, &total));
    CHECK(free1 == 24 * MiB);
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, CU(cuMemCreate)(&h, 32 * MiB, &p, 0));  // past the free memory
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 24 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(other));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free1, &total));
    CHECK(free1 == 64 * MiB);
  });
}

TEST(CudaEmulator, GranularityIsPerPropertyAndOption) {
  RUN((Env{{"TVMM_CUEMU_GRANULARITY", "2MiB"},
           {"TVMM_CUEMU_GRANULARITY_RECOMMENDED", "4MiB"},
           {"TVMM_CUEMU_HOST_GRANULARITY", "8MiB"}}),
      [](const Cu& cu) {
        std::size_t g = 0;
        const CUmemAllocationProp d = device_prop(), h = host_prop();
        EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAllocationGranularity)(&g, &d, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CHECK(g == 2 * MiB);
        EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAllocationGranularity)(&g, &d, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        CHECK(g == 4 * MiB);
        EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAllocationGranularity)(&g, &h, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CHECK(g == 8 * MiB);
        CUmemGenericAllocationHandle handle = 0;
        EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemCreate)(&handle, 2 * MiB, &h, 0));  // not a host multiple
        EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&handle, 8 * MiB, &h, 0));
        EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(handle));
        CUmemAllocationProp bad = h;
        bad.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;  // cuda.h 12795
        EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemCreate)(&handle, 8 * MiB, &bad, 0));
      });
}

// --- contexts --------------------------------------------------------------------------------------------

TEST(CudaEmulator, ContextsAreAPerThreadStackAndCallsNeedOne) {
  RUN({}, [](const Cu& cu) {
    CUstream s = nullptr;
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, CU(cuStreamCreate)(&s, 0));  // no context yet
    CUcontext p0 = nullptr, p1 = nullptr, mine = nullptr, got = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRetain)(&p0, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRetain)(&p1, 1));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxGetCurrent)(&got));
    CHECK(got == nullptr);  // retaining does not make current
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxPushCurrent)(p0));
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuCtxCreate, 12050)(&mine, nullptr, 0, 1));  // pushed on top
    CUdevice dev = -1;
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxGetDevice)(&dev));
    CHECK(dev == 1);
    std::thread([&] {  // another thread has its own, empty stack
      CUcontext other = reinterpret_cast<CUcontext>(1);
      EXPECT_CU(CUDA_SUCCESS, CU(cuCtxGetCurrent)(&other));
      CHECK(other == nullptr);
      CUdevice d2 = 0;
      EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, CU(cuCtxGetDevice)(&d2));
    })
        .join();
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxDestroy)(mine));  // current: popped
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxGetCurrent)(&got));
    CHECK(got == p0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSetCurrent)(p1));  // replaces the top
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxPopCurrent)(&got));
    CHECK(got == p1);
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, CU(cuCtxPopCurrent)(&got));  // empty
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxPushCurrent)(p0));
    CUdevice d3 = 0;
    using GetDeviceV13 = CUresult (*)(CUdevice*, CUcontext);  // cudaTypedefs.h PFN_cuCtxGetDevice_v13000
    EXPECT_CU(CUDA_SUCCESS, CU_OLD(cuCtxGetDevice, 13000, GetDeviceV13)(&d3, p1));  // takes the context
    CHECK(d3 == 1);
  });
}

TEST(CudaEmulator, PrimaryContextsAreRetainedAndReleasedByCount) {
  RUN({}, [](const Cu& cu) {
    CUcontext a = nullptr, b = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRetain)(&a, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRetain)(&b, 0));
    CHECK(a == b);  // one per device
    unsigned flags = 0;
    int active = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRelease)(0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxGetState)(0, &flags, &active));
    CHECK(active == 1);
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSetCurrent)(a));
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxRelease)(0));  // the last reference: reset
    EXPECT_CU(CUDA_SUCCESS, CU(cuDevicePrimaryCtxGetState)(0, &flags, &active));
    CHECK(active == 0);
    CUstream s = nullptr;  // still current on this thread, but not initialised
    EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, CU(cuStreamCreate)(&s, 0));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, CU(cuDevicePrimaryCtxRelease)(0));  // not retained
  });
}

// --- virtual memory --------------------------------------------------------------------------------------

TEST(CudaEmulator, ReservationsAreAlignedAndTheirArgumentsChecked) {
  RUN({}, [](const Cu& cu) {
    CUdeviceptr va = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 8 * MiB, 4 * MiB, 0, 0));
    CHECK(va != 0 && va % (4 * MiB) == 0);
    CUdeviceptr bad = 0;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressReserve)(&bad, 100, 0, 0, 0));      // not whole pages
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressReserve)(&bad, 2 * MiB, 3, 0, 0));  // not a power of 2
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressReserve)(&bad, 2 * MiB, 0, 0, 1));  // flags
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree)(va, 4 * MiB));                // not its size
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressFree)(va, 8 * MiB));
  });
}

TEST(CudaEmulator, MapsStayInsideReservationsAndNeverOverlap) {
  RUN({}, [](const Cu& cu) {
    CUdeviceptr va = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 8 * MiB, 0, 0, 0));
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 4 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h2, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemCreate)(&h2, 3 * MiB, &p, 0));          // not a multiple
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap)(va + 6 * MiB, 4 * MiB, 0, h, 0));  // past the end
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap)(va, 2 * MiB, 2 * MiB, h, 0));      // offset must be 0
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap)(va, 6 * MiB, 0, h, 0));            // past the handle
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap)(va + MiB, 2 * MiB, 0, h2, 0));     // misaligned
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va, 4 * MiB, 0, h, 0));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemMap)(va + 2 * MiB, 2 * MiB, 0, h2, 0));  // over a mapping
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va + 4 * MiB, 2 * MiB, 0, h2, 0));
    // Unmap only whole mappings (cuda.h 13056): not a part of one, but a run of whole ones is fine.
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemUnmap)(va, 2 * MiB));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAddressFree)(va, 8 * MiB));  // still mapped
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemUnmap)(va, 6 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h2));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemRelease)(h2));  // released already
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressFree)(va, 8 * MiB));
  });
}

TEST(CudaEmulator, AccessIsGrantedPerDeviceOnlyOverMappedRanges) {
  RUN({}, [](const Cu& cu) {
    CUdeviceptr va = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 6 * MiB, 0, 0, 0));
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va, 2 * MiB, 0, h, 0));
    const CUmemAccessDesc a0 = rw(0);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemSetAccess)(va, 4 * MiB, &a0, 1));  // half is not mapped
    CUmemAccessDesc bad = rw(7);
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, CU(cuMemSetAccess)(va, 2 * MiB, &bad, 1));
    CUmemAccessDesc host{};
    host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    host.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemSetAccess)(va, 2 * MiB, &host, 1));  // a device chunk
    unsigned long long flags = 99;
    CUmemLocation l0{CU_MEM_LOCATION_TYPE_DEVICE, 0}, l1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAccess)(&flags, &l0, va));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);  // a new mapping has no access
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemSetAccess)(va, 2 * MiB, &a0, 1));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAccess)(&flags, &l0, va));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAccess)(&flags, &l1, va));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);  // per device
    // Host-NUMA chunks: host access makes the bytes visible at the address.
    const CUmemAllocationProp hp = host_prop();
    CUmemGenericAllocationHandle hh = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&hh, 2 * MiB, &hp, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va + 2 * MiB, 2 * MiB, 0, hh, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemSetAccess)(va + 2 * MiB, 2 * MiB, &host, 1));
    auto* bytes = reinterpret_cast<unsigned char*>(va + 2 * MiB);
    bytes[7] = 42;
    CHECK(bytes[7] == 42);
  });
}

TEST(CudaEmulator, ReleaseWhileMappedFreesOnTheLastUnmap) {
  RUN((Env{{"TVMM_CUEMU_MEMORY", "16MiB"}}), [](const Cu& cu) {
    primary(cu);
    CUdeviceptr va = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 4 * MiB, 0, 0, 0));
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va, 2 * MiB, 0, h, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va + 2 * MiB, 2 * MiB, 0, h, 0));  // one chunk at two addresses
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h));
    // Any mapped address gives the handle back, one more reference to release (cuda.h 13243).
    CUmemGenericAllocationHandle again = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRetainAllocationHandle)(&again, reinterpret_cast<void*>(va + 2 * MiB + 5)));
    CHECK(again == h);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemRetainAllocationHandle)(&again, reinterpret_cast<void*>(va + 9 * MiB)));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(again));
    std::size_t free = 0, total = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 14 * MiB);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemUnmap)(va, 2 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 14 * MiB);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemUnmap)(va + 2 * MiB, 2 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 16 * MiB);
  });
}

// Device memory is not host memory: touching a device address from the host faults.
TEST(CudaEmulator, HostCodeThatTouchesDeviceMemoryFaults) {
  const std::string report = in_child({}, [](const Cu& cu) {
    const CUdeviceptr va = mapped(cu, 1);
    *reinterpret_cast<volatile int*>(va) = 1;  // must not return
    std::fprintf(stderr, "host wrote to device memory\n");
    ++failures();
  });
  // Killed by SIGSEGV, or (under AddressSanitizer) reported as a SEGV.
  const bool faulted = report.find("killed by signal " + std::to_string(SIGSEGV)) != std::string::npos ||
                       report.find("SEGV") != std::string::npos;
  EXPECT_TRUE(faulted) << report;
}

// A copy to a range the device was not granted access to is an illegal address: the copy fails when it
// runs, and from then on every call returns the error.
TEST(CudaEmulator, AnIllegalAddressIsStickyForTheProcess) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUdeviceptr va = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 2 * MiB, 0, 0, 0));
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va, 2 * MiB, 0, h, 0));  // mapped, no access granted
    std::vector<char> host(4096, 1);
    CUdeviceptr nowhere = 0x10;  // not device memory at all: refused at the call
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpyHtoDAsync)(nowhere, host.data(), 16, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyHtoDAsync)(va, host.data(), host.size(), nullptr));  // queued
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuStreamSynchronize)(nullptr));
    int n = 0;
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuDeviceGetCount)(&n));
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuMemUnmap)(va, 2 * MiB));
  });
  // Access for device 0 does not let device 1 in.
  RUN({}, [](const Cu& cu) {
    const CUdeviceptr va = mapped(cu, 1, 0);
    primary(cu, 1);
    std::vector<char> host(64, 1);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyHtoDAsync)(va, host.data(), host.size(), nullptr));
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuCtxSynchronize)());
  });
}

// After a sticky error, event records still complete (they are bookkeeping, not device work), so that
// nothing waiting on an event hangs: here a graph's wait node, already waiting on an event that a
// stream records after a 300 ms kernel, when another stream faults. A report of the error waits for
// the kernel that had begun, not for the wait (it hung every later call when records were skipped).
TEST(CudaEmulator, AfterAStickyErrorEventRecordsStillWakeTheirWaiters) {
  const std::string busy_ptx =
      ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry tvmm_busy(\n"
      ".param .u64 tvmm_busy_param_0\n)\n{\nret;\n}\n";
  RUN({}, [&](const Cu& cu) {
    primary(cu);
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, busy_ptx.c_str()));
    CUfunction busy = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&busy, m, "tvmm_busy"));
    CUstream x = nullptr, g = nullptr, f = nullptr;
    for (CUstream* s : {&x, &g, &f}) EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(s, CU_STREAM_NON_BLOCKING));
    CUevent e = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&e, CU_EVENT_DISABLE_TIMING));
    std::uint64_t ns = 300'000'000;
    void* args[] = {&ns};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchKernel)(busy, 1, 1, 1, 1, 1, 1, 0, x, args, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(e, x));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(g, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamWaitEvent)(g, e, 0));
    CUgraph graph = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamEndCapture)(g, &graph));
    CUgraphExec exec = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphInstantiateWithFlags)(&exec, graph, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphLaunch)(exec, g));  // its wait node now waits for x's record
    CUdeviceptr va = 0;                                   // mapped, no access granted: a copy to it faults
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&va, 2 * MiB, 0, 0, 0));
    const CUmemAllocationProp p = device_prop();
    CUmemGenericAllocationHandle h = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &p, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(va, 2 * MiB, 0, h, 0));
    static const char byte = 1;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyHtoDAsync)(va, &byte, 1, f));
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuStreamSynchronize)(f));
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuStreamSynchronize)(g));  // the wait ended
    EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, CU(cuEventSynchronize)(e));
  });
}

// --- streams and events ----------------------------------------------------------------------------------

TEST(CudaEmulator, WorkRunsLaterThanTheCallInStreamOrder) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    static std::atomic<bool> go{false};
    static std::vector<int> order;
    static std::thread::id ran_on;
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                s,
                                [](void*) {
                                  while (!go.load()) std::this_thread::yield();
                                  ran_on = std::this_thread::get_id();
                                  order.push_back(1);
                                },
                                nullptr));
    CUevent e = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&e, CU_EVENT_DEFAULT));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventQuery)(e));  // never recorded: an empty set of work
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(e, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                s, [](void*) { order.push_back(2); }, nullptr));
    EXPECT_CU(CUDA_ERROR_NOT_READY, CU(cuEventQuery)(e));
    EXPECT_CU(CUDA_ERROR_NOT_READY, CU(cuStreamQuery)(s));
    go = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    CHECK((order == std::vector<int>{1, 2}));
    CHECK(ran_on != std::this_thread::get_id());  // on a driver thread, not the caller's
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventQuery)(e));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamDestroy)(s));
    EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, CU(cuStreamDestroy)(nullptr));
  });
}

TEST(CudaEmulator, TheLegacyStreamSynchronisesWithBlockingStreamsOnly) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUstream blocking = nullptr, free_running = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&blocking, CU_STREAM_DEFAULT));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&free_running, CU_STREAM_NON_BLOCKING));
    // Each stream held by its own flag: the legacy stream must wait for the blocking one, and must not
    // wait for the non-blocking one (still held when the legacy event completes).
    static std::atomic<bool> go_blocking{false}, go_free{false};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                blocking,
                                [](void*) {
                                  while (!go_blocking.load()) std::this_thread::yield();
                                },
                                nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                free_running,
                                [](void*) {
                                  while (!go_free.load()) std::this_thread::yield();
                                },
                                nullptr));
    CUevent legacy = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&legacy, CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(legacy, nullptr));  // waits for the blocking stream
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_CU(CUDA_ERROR_NOT_READY, CU(cuEventQuery)(legacy));
    go_blocking = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventSynchronize)(legacy));  // completes while free_running is still held
    EXPECT_CU(CUDA_ERROR_NOT_READY, CU(cuStreamQuery)(free_running));
    go_free = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(free_running));
  });
}

// cuMemsetD8(Async): N bytes set in stream order, through the page table with the device's rights; an
// address the emulator does not know is CUDA_ERROR_INVALID_VALUE at the call.
TEST(CudaEmulator, MemsetsWriteInStreamOrder) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUdeviceptr d = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAlloc)(&d, 3 * MiB));
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemsetD8Async)(d, 0x5a, 3 * MiB, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemsetD8Async)(d + MiB, 0x17, 10, s));
    std::vector<unsigned char> out(3 * MiB);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyDtoHAsync)(out.data(), d, out.size(), s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const unsigned char want = i >= MiB && i < MiB + 10 ? 0x17 : 0x5a;
      if (out[i] != want) {
        std::fprintf(stderr, "byte %zu is %d, not %d\n", i, out[i], want);
        ++failures();
        break;
      }
    }
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemsetD8)(0x1000, 0, 16));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemsetD8)(d, 1, 16));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSynchronize)());
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(d));
  });
}

// cuMemcpy2D/2DUnaligned/2DAsync/3D/3DAsync: rows of WidthInBytes at each side's pitch (and, in 3D, slices
// of pitch x height), each side host, device or unified memory, checked as cuda.h says.
TEST(CudaEmulator, TwoAndThreeDimensionalCopiesMoveRowsAtEachSidesPitch) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    constexpr std::size_t kPitch = 512, kRows = 8, kWidth = 100, kX = 16;
    CUdeviceptr d = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAlloc)(&d, 4 * kPitch * kRows));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemsetD8)(d, 0, 4 * kPitch * kRows));
    std::vector<unsigned char> host(kWidth * kRows);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
    // Host rows packed (pitch = width) into device rows at x = 16 of a 512-byte pitch.
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = host.data();
    c.srcPitch = kWidth;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = d;
    c.dstXInBytes = kX;
    c.dstPitch = kPitch;
    c.WidthInBytes = kWidth;
    c.Height = kRows;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy2D)(&c));
    std::vector<unsigned char> all(kPitch * kRows);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyDtoH)(all.data(), d, all.size()));
    for (std::size_t y = 0; y < kRows; ++y) {
      for (std::size_t x = 0; x < kPitch; ++x) {
        const bool inside = x >= kX && x < kX + kWidth;
        const unsigned char want = inside ? host[y * kWidth + (x - kX)] : 0;
        if (all[y * kPitch + x] != want) {
          std::fprintf(stderr, "row %zu byte %zu is %d, not %d\n", y, x, all[y * kPitch + x], want);
          ++failures();
          y = kRows;
          break;
        }
      }
    }
    // Back, unified on both sides (the kinds inferred), on a stream, with the unaligned form's twin.
    std::vector<unsigned char> back(kWidth * kRows, 0);
    CUDA_MEMCPY2D b{};
    b.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    b.srcDevice = d;
    b.srcXInBytes = kX;
    b.srcPitch = kPitch;
    b.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    b.dstDevice = reinterpret_cast<CUdeviceptr>(back.data());
    b.dstPitch = kWidth;
    b.WidthInBytes = kWidth;
    b.Height = kRows;
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy2DAsync)(&b, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    CHECK(back == host);
    std::fill(back.begin(), back.end(), 0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy2DUnaligned)(&b));
    CHECK(back == host);
    // 3D: two slices of 4 rows each, device to device, then checked through a 2D copy of the rows.
    CUDA_MEMCPY3D t{};
    t.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    t.srcDevice = d;
    t.srcXInBytes = kX;
    t.srcPitch = kPitch;
    t.srcHeight = 4;
    t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    t.dstDevice = d + 2 * kPitch * kRows;
    t.dstPitch = kWidth;
    t.dstHeight = 4;
    t.WidthInBytes = kWidth;
    t.Height = 4;
    t.Depth = 2;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy3D)(&t));
    std::fill(back.begin(), back.end(), 0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyDtoH)(back.data(), d + 2 * kPitch * kRows, back.size()));
    CHECK(back == host);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy3DAsync)(&t, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    // Bad descriptors, each refused before anything is queued.
    CUDA_MEMCPY2D bad = c;
    bad.dstPitch = kX + kWidth - 1;  // "dstPitch must be greater than or equal to WidthInBytes + dstXInBytes"
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(&bad));
    bad = c;
    bad.dstDevice = 0x1000;  // not device memory
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(&bad));
    bad = c;
    bad.Height = 2 * MiB / kPitch + 1;  // past the end of the allocation's 2 MiB granule (dst is checked first)
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(&bad));
    bad = c;
    bad.dstMemoryType = CU_MEMORYTYPE_ARRAY;  // arrays are not emulated
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, CU(cuMemcpy2D)(&bad));
    bad = c;
    bad.srcMemoryType = static_cast<CUmemorytype>(0);  // no such type
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(&bad));
    bad = c;
    bad.dstY = SIZE_MAX / 2;  // the start address would wrap
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(&bad));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy2D)(nullptr));
    CUDA_MEMCPY3D lod = t;
    lod.srcLOD = 1;  // "must be set to 0"
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy3D)(&lod));
    lod = t;
    lod.srcHeight = 3;  // "srcHeight must be greater than or equal to Height + srcY"
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemcpy3D)(&lod));
    c.Height = 0;  // nothing to copy
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpy2D)(&c));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamDestroy)(s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(d));
  });
}

TEST(CudaEmulator, StreamWaitEventOrdersAcrossStreams) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUstream a = nullptr, b = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&a, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&b, CU_STREAM_NON_BLOCKING));
    static std::atomic<bool> go{false};
    static std::atomic<int> step{0};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                a,
                                [](void*) {
                                  while (!go.load()) std::this_thread::yield();
                                  step = 1;
                                },
                                nullptr));
    CUevent e = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&e, CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(e, a));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuStreamWaitEvent)(b, e, 1));  // EXTERNAL outside a capture
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamWaitEvent)(b, e, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                b, [](void*) { step = step.load() == 1 ? 2 : -1; }, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(step.load() == 0);
    go = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(b));
    CHECK(step.load() == 2);
  });
}

TEST(CudaEmulator, ElapsedTimeFailsAsDocumented) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUevent a = nullptr, b = nullptr, untimed = nullptr, never = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&a, CU_EVENT_DEFAULT));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&b, CU_EVENT_BLOCKING_SYNC));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&untimed, CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&never, CU_EVENT_DEFAULT));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuEventCreate)(&never, CU_EVENT_INTERPROCESS));  // needs DISABLE_TIMING
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    static std::atomic<bool> go{false};
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(a, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(untimed, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                s,
                                [](void*) {
                                  while (!go.load()) std::this_thread::yield();
                                },
                                nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(b, s));
    float ms = 0;
    EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, CU_AT(cuEventElapsedTime, 12080)(&ms, a, never));    // never recorded
    EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, CU_AT(cuEventElapsedTime, 12080)(&ms, a, untimed));  // DISABLE_TIMING
    EXPECT_CU(CUDA_ERROR_NOT_READY, CU_AT(cuEventElapsedTime, 12080)(&ms, a, b));             // not complete
    go = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventSynchronize)(b));
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuEventElapsedTime, 12080)(&ms, a, b));
    CHECK(ms >= 0);
  });
}

// A host function may make no driver call (cuda.h 18070): every call from one returns NOT_PERMITTED.
TEST(CudaEmulator, DriverCallsFromAHostFunctionAreRefused) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    static CUresult inside = CUDA_SUCCESS;
    static decltype(&::cuDeviceGetCount) count = nullptr;
    count = CU(cuDeviceGetCount);
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                nullptr,
                                [](void*) {
                                  int n = 0;
                                  inside = count(&n);
                                },
                                nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSynchronize)());
    EXPECT_CU(CUDA_ERROR_NOT_PERMITTED, inside);
  });
}

// cuEventSynchronize blocks on a CU_EVENT_BLOCKING_SYNC event and spins a core otherwise (cuda.h 16080).
TEST(CudaEmulator, OnlyBlockingSyncEventsWaitWithoutSpinning) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    auto cpu_ms_of_a_wait = [&](unsigned flags) {
      CUstream s = nullptr;
      EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
      EXPECT_CU(CUDA_SUCCESS,
                CU(cuLaunchHostFunc)(
                    s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr));
      CUevent e = nullptr;
      EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&e, flags));
      EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(e, s));
      timespec t0{}, t1{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      EXPECT_CU(CUDA_SUCCESS, CU(cuEventSynchronize)(e));
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      return static_cast<double>(t1.tv_sec - t0.tv_sec) * 1e3 + static_cast<double>(t1.tv_nsec - t0.tv_nsec) / 1e6;
    };
    CHECK(cpu_ms_of_a_wait(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) < 20);
    CHECK(cpu_ms_of_a_wait(CU_EVENT_DISABLE_TIMING) > 20);
  });
}

// --- stream capture --------------------------------------------------------------------------------------

TEST(CudaEmulator, CaptureRecordsWorkThatTheGraphReplays) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuStreamBeginCapture)(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    static std::atomic<int> runs{0};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                s, [](void*) { ++runs; }, nullptr));
    CUstreamCaptureStatus st{};
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamIsCapturing)(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamEndCapture)(s, &g));
    CHECK(runs.load() == 0);  // captured, not run
    CUgraphExec x = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphInstantiateWithFlags)(&x, g, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphLaunch)(x, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphLaunch)(x, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    CHECK(runs.load() == 2);
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphExecDestroy)(x));
    EXPECT_CU(CUDA_SUCCESS, CU(cuGraphDestroy)(g));
  });
}

TEST(CudaEmulator, CallsIllegalDuringCaptureInvalidateIt) {
  RUN({}, [](const Cu& cu) {
    primary(cu);
    CUstream s = nullptr, blocking = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&blocking, CU_STREAM_DEFAULT));
    CUgraph g = nullptr;
    // A context synchronise during a capture: refused, and the capture is lost.
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CU(cuCtxSynchronize)());
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuStreamEndCapture)(s, &g));
    CHECK(g == nullptr);
    // A query of the capturing stream.
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CU(cuStreamQuery)(s));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuStreamEndCapture)(s, &g));
    // A synchronous copy or a free (not stream-ordered) in global mode.
    CUdeviceptr p = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAlloc)(&p, 2 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CU(cuMemFree)(p));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuStreamEndCapture)(s, &g));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(p));
    // The legacy stream while a blocking stream captures: an implicit dependency.
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUstreamCaptureStatus st{};
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, CU(cuStreamIsCapturing)(nullptr, &st));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, CU(cuLaunchHostFunc)(
                                                      nullptr, [](void*) {}, nullptr));
    // Work on the invalidated capture is refused, and leaves an event as it was: one never recorded
    // still queries as done and a synchronize returns (it hung waiting for a record that never ran).
    CUevent refused = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&refused, CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuEventRecord)(refused, blocking));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuStreamWaitEvent)(blocking, refused, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventQuery)(refused));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventSynchronize)(refused));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventDestroy)(refused));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CU(cuStreamEndCapture)(blocking, &g));
    // An event recorded in a capture cannot be queried (CUDA_ERROR_CAPTURED_EVENT).
    CUevent e = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventCreate)(&e, CU_EVENT_DISABLE_TIMING));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventRecord)(e, s));
    EXPECT_CU(CUDA_ERROR_CAPTURED_EVENT, CU(cuEventQuery)(e));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamEndCapture)(s, &g));
    EXPECT_CU(CUDA_SUCCESS, CU(cuEventQuery)(e));
    // Ending from another thread (not relaxed), or on a stream that does not capture.
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamBeginCapture)(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    std::thread([&] {
      primary(cu);
      CUgraph other = nullptr;
      EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, CU(cuStreamEndCapture)(s, &other));
    }).join();
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamEndCapture)(s, &g));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, CU(cuStreamEndCapture)(s, &g));
  });
}

// --- modules and kernels ---------------------------------------------------------------------------------

namespace {

// PTX text for a kernel the emulator runs on the CPU (tvmm_fill), at PTX ISA `isa` for sm_`sm`.
std::string ptx(const char* isa, int sm) {
  return std::string(".version ") + isa + "\n.target sm_" + std::to_string(sm) +
         "\n.address_size 64\n.visible .entry tvmm_fill(\n.param .u64 tvmm_fill_param_0,\n"
         ".param .u64 tvmm_fill_param_1,\n.param .u64 tvmm_fill_param_2\n)\n{\nret;\n}\n"
         ".visible .entry mystery(\n.param .u32 mystery_param_0\n)\n{\nret;\n}\n";
}

// A fatbin container holding `text` as one uncompressed PTX entry (the layout the emulator reads).
std::vector<unsigned char> fatbin_of(const std::string& text, int isa_major, int isa_minor, int sm) {
  std::vector<unsigned char> payload(text.begin(), text.end());
  payload.resize((payload.size() + 1 + 7) / 8 * 8, 0);
  std::vector<unsigned char> out(16 + 64 + payload.size(), 0);
  auto put32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(&out[at], &v, 4); };
  auto put64 = [&](std::size_t at, std::uint64_t v) { std::memcpy(&out[at], &v, 8); };
  put32(0, 0xBA55ED50);
  out[4] = 1;
  out[6] = 16;
  put64(8, 64 + payload.size());
  out[16] = 1;  // PTX
  out[18] = 1;
  out[19] = 1;
  put32(20, 64);
  put64(24, payload.size());
  put32(16 + 24, (static_cast<std::uint32_t>(isa_major) << 16) | static_cast<std::uint32_t>(isa_minor));
  put32(16 + 28, static_cast<std::uint32_t>(sm));
  put64(16 + 40, 0x11);
  std::memcpy(&out[80], payload.data(), payload.size());
  return out;
}

}  // namespace

TEST(CudaEmulator, ModulesLoadOnlyCodeTheDriverAndDeviceCanRun) {
  const std::string p90 = ptx("9.0", 90), p82 = ptx("8.2", 90), p80_sm80 = ptx("8.0", 80);
  RUN({}, [&](const Cu& cu) {  // driver 13.0, sm_90
    primary(cu);
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, p90.c_str()));
    CUfunction f = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&f, m, "tvmm_fill"));
    EXPECT_CU(CUDA_ERROR_NOT_FOUND, CU(cuModuleGetFunction)(&f, m, "tvmm_absent"));
    const auto fat = fatbin_of(p90, 9, 0, 90);
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, fat.data()));
    EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, CU(cuModuleLoadData)(&m, "not an image"));
    if (kTvmmFatbin != nullptr) EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, kTvmmFatbin));
  });
  RUN((Env{{"TVMM_CUEMU_DRIVER_VERSION", "12020"}}), [&](const Cu& cu) {  // a CUDA 12.2 driver
    primary(cu);
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CU(cuModuleLoadData)(&m, p90.c_str()));  // PTX ISA 9.0
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, p82.c_str()));
    // nvcc 13's fatbin: PTX ISA 9.0 and an ABI-8 cubin, neither of which a 12.2 driver takes.
    if (kTvmmFatbin != nullptr) {
      EXPECT_CU(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CU(cuModuleLoadData)(&m, kTvmmFatbin));
    }
  });
  RUN((Env{{"TVMM_CUEMU_SM", "80"}}), [&](const Cu& cu) {  // an A100: sm_90 code does not run
    primary(cu);
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, CU(cuModuleLoadData)(&m, p90.c_str()));
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, p80_sm80.c_str()));
    if (kTvmmFatbin != nullptr) EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, CU(cuModuleLoadData)(&m, kTvmmFatbin));
  });
}

TEST(CudaEmulator, KernelsRunByNameWithTheirArgumentsChecked) {
  const std::string text = ptx("9.0", 90);
  RUN({}, [&](const Cu& cu) {
    primary(cu);
    const CUdeviceptr va = mapped(cu, 2);  // two chunks: the fill crosses a chunk boundary
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, text.c_str()));
    CUfunction fill = nullptr, mystery = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&fill, m, "tvmm_fill"));
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&mystery, m, "mystery"));
    CUdeviceptr dst = va + 2 * MiB - 100;
    std::size_t bytes = 1000;
    std::uint64_t seed = 9;
    void* params[] = {&dst, &bytes, &seed};
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuLaunchKernel)(fill, 0, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuLaunchKernel)(fill, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr));
    void* extra_short[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes,
                           CU_LAUNCH_PARAM_END};
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuLaunchKernel)(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, extra_short));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuLaunchKernel)(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, CU(cuLaunchKernel)(mystery, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchKernel)(fill, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
    // The same through `extra`: one buffer, each parameter at its alignment.
    struct {
      CUdeviceptr dst;
      std::size_t bytes;
      std::uint64_t seed;
    } args{va, 64, 3};
    std::size_t size = sizeof args;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchKernel)(fill, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra));
    std::vector<unsigned char> back(1000);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyDtoH)(back.data(), dst, back.size()));
    CHECK(tvmm::kernels::count_mismatches(back.data(), back.size(), 9) == 0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemcpyDtoH)(back.data(), va, 64));
    CHECK(tvmm::kernels::count_mismatches(back.data(), 64, 3) == 0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleUnload)(m));
    EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, CU(cuLaunchKernel)(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  });
}

TEST(CudaEmulator, ParameterLayoutAndWhereKernelsFindTheirBytesAreReported) {
  const std::string text = ptx("9.0", 90);
  RUN({}, [&](const Cu& cu) {
    primary(cu);
    CUmodule m = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleLoadData)(&m, text.c_str()));
    CUfunction fill = nullptr, mystery = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&fill, m, "tvmm_fill"));
    EXPECT_CU(CUDA_SUCCESS, CU(cuModuleGetFunction)(&mystery, m, "mystery"));
    // cuFuncGetParamInfo: each parameter's offset and size; an index past the last is an invalid value.
    std::size_t offset = 1, size = 1;
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuFuncGetParamInfo, 12040)(fill, 2, &offset, &size));
    CHECK(offset == 16 && size == 8);
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuFuncGetParamInfo, 12040)(mystery, 0, &offset, nullptr));
    CHECK(offset == 0);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuFuncGetParamInfo, 12040)(fill, 3, &offset, &size));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuFuncGetParamInfo, 12040)(mystery, 1, &offset, &size));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuFuncGetParamInfo, 12040)(fill, 0, nullptr, &size));
    // The memory counters: a kernel's bytes on a device chunk are local, on a host-NUMA chunk remote.
    using Counters = CUresult (*)(int, unsigned long long*, unsigned long long*);
    const auto counters = reinterpret_cast<Counters>(::dlsym(cu.lib, "cuemuKernelBytes"));
    CHECK(counters != nullptr);
    if (counters == nullptr) return;
    const CUdeviceptr dev = mapped(cu, 1);
    CUdeviceptr host = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAddressReserve)(&host, 2 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = 0;
    const CUmemAllocationProp hp = host_prop();
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemCreate)(&h, 2 * MiB, &hp, 0));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemMap)(host, 2 * MiB, 0, h, 0));
    const CUmemAccessDesc a = rw(0);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemSetAccess)(host, 2 * MiB, &a, 1));
    unsigned long long local = 1, remote = 1;
    EXPECT_CU(CUDA_SUCCESS, counters(0, &local, &remote));
    CHECK(local == 0 && remote == 0);
    std::size_t bytes = 1000;
    std::uint64_t seed = 5;
    CUdeviceptr dst = dev;
    void* params[] = {&dst, &bytes, &seed};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchKernel)(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    dst = host;
    bytes = 300;
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchKernel)(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSynchronize)());
    EXPECT_CU(CUDA_SUCCESS, counters(0, &local, &remote));
    CHECK(local == 1000 && remote == 300);
    EXPECT_CU(CUDA_SUCCESS, counters(1, &local, &remote));  // another device's kernels: none
    CHECK(local == 0 && remote == 0);
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, counters(2, &local, &remote));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemUnmap)(host, 2 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemRelease)(h));
  });
}

TEST(CudaEmulator, PitchedAndStreamOrderedAllocationsFollowTheirRules) {
  RUN((Env{{"TVMM_CUEMU_MEMORY", "16MiB"}}), [](const Cu& cu) {
    primary(cu);
    CUdeviceptr p = 0;
    std::size_t pitch = 0;
    using Pitch = CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned);
    const auto alloc_pitch = CU_OLD(cuMemAllocPitch, 3020, Pitch);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, alloc_pitch(&p, &pitch, 1000, 10, 3));  // element size 4, 8 or 16
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, alloc_pitch(&p, &pitch, 0, 10, 4));
    EXPECT_CU(CUDA_SUCCESS, alloc_pitch(&p, &pitch, 1000, 10, 4));
    CHECK(pitch == 1024);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(p));
    // The default pool; an allocation freed in stream order goes when its stream gets there.
    CUmemoryPool pool = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuDeviceGetDefaultMemPool, 11020)(&pool, 0));
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a = 0, b = 0;
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemAllocAsync, 11020)(&a, 8 * MiB, s));
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemAllocFromPoolAsync, 11020)(&b, 8 * MiB, pool, s));
    CUdeviceptr c = 0;
    EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, CU_AT(cuMemAllocAsync, 11020)(&c, 2 * MiB, s));  // 16 MiB in use
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuMemAllocFromPoolAsync, 11020)(&c, MiB, nullptr, s));
    static std::atomic<bool> go{false};
    EXPECT_CU(CUDA_SUCCESS, CU(cuLaunchHostFunc)(
                                s,
                                [](void*) {
                                  while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                },
                                nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemFreeAsync, 11020)(a, s));
    std::size_t free = 1, total = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 0);  // not yet: the stream has not got to the free
    go = true;
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 8 * MiB);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuMemFreeAsync, 11020)(a, s));  // freed already
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemFreeAsync, 11020)(b, s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamSynchronize)(s));
    EXPECT_CU(CUDA_SUCCESS, CU(cuStreamDestroy)(s));
  });
}

// --- managed memory and pointers -------------------------------------------------------------------------

TEST(CudaEmulator, ManagedMemoryIsAdvisedAndPrefetchedWithinCapacity) {
  RUN((Env{{"TVMM_CUEMU_MEMORY", "16MiB"}}), [](const Cu& cu) {
    primary(cu);
    CUdeviceptr m = 0;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuMemAllocManaged)(&m, 4 * MiB, 0));  // one attach flag needed
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAllocManaged)(&m, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
    std::memset(reinterpret_cast<void*>(m), 1, 24 * MiB);                             // host-accessible
    using AdviseV1 = CUresult (*)(CUdeviceptr, std::size_t, CUmem_advise, CUdevice);  // PFN_cuMemAdvise_v8000
    using PrefetchV1 = CUresult (*)(CUdeviceptr, std::size_t, CUdevice, CUstream);    // PFN_cuMemPrefetchAsync_v8000
    EXPECT_CU(CUDA_SUCCESS, CU_OLD(cuMemAdvise, 8000, AdviseV1)(m, 24 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
    const CUmemLocation dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0}, host{CU_MEM_LOCATION_TYPE_HOST, 0};
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemAdvise, 12020)(m, 24 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
              CU_AT(cuMemAdvise, 12020)(m + 30 * MiB, MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    // Prefetching 24 MiB to a 16 MiB device: residency is bounded by the device's memory.
    EXPECT_CU(CUDA_SUCCESS, CU_OLD(cuMemPrefetchAsync, 8000, PrefetchV1)(m, 24 * MiB, 0, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSynchronize)());
    std::size_t free = 0, total = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 0);
    EXPECT_CU(CUDA_SUCCESS, CU_AT(cuMemPrefetchAsync, 12020)(m, 24 * MiB, host, 0, nullptr));
    EXPECT_CU(CUDA_SUCCESS, CU(cuCtxSynchronize)());
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetInfo)(&free, &total));
    CHECK(free == 16 * MiB);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU_AT(cuMemPrefetchAsync, 12020)(m, MiB, dev0, 1, nullptr));  // flags
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemFree)(m));
  });
  RUN((Env{{"TVMM_CUEMU_DISABLE", "managed"}}), [](const Cu& cu) {
    primary(cu);
    CUdeviceptr m = 0;
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, CU(cuMemAllocManaged)(&m, MiB, CU_MEM_ATTACH_GLOBAL));
  });
}

TEST(CudaEmulator, PointerAttributesDescribeEachKindOfMemory) {
  RUN({}, [](const Cu& cu) {
    CUcontext ctx = primary(cu);
    CUdeviceptr dev = 0, managed = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAlloc)(&dev, 3 * MiB));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemAllocManaged)(&managed, MiB, CU_MEM_ATTACH_GLOBAL));
    std::vector<char> registered(8192);
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemHostRegister)(registered.data(), registered.size(), 0));
    EXPECT_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CU(cuMemHostRegister)(registered.data() + 10, 10, 0));
    const CUdeviceptr vmm = mapped(cu, 1);
    unsigned type = 0, is_managed = 0;
    int ordinal = -1;
    CUcontext owner = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev + 100));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttribute)(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, dev));
    CHECK(owner == ctx);
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttribute)(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, managed));
    CHECK(is_managed == 1);
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                      reinterpret_cast<CUdeviceptr>(registered.data())));
    CHECK(type == CU_MEMORYTYPE_HOST);
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttribute)(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, vmm));
    CHECK(ordinal == 0);
    int local = 0;
    const auto unknown = reinterpret_cast<CUdeviceptr>(&local);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown));
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    type = 99;
    void* data[] = {&type};
    EXPECT_CU(CUDA_SUCCESS, CU(cuPointerGetAttributes)(1, attrs, data, unknown));  // defaults, no error
    CHECK(type == 0);
    CUdeviceptr base = 0;
    std::size_t size = 0;
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemGetAddressRange)(&base, &size, dev + 5));
    CHECK(base == dev && size >= 3 * MiB);
    EXPECT_CU(CUDA_ERROR_NOT_FOUND, CU(cuMemGetAddressRange)(&base, &size, unknown));
    EXPECT_CU(CUDA_SUCCESS, CU(cuMemHostUnregister)(registered.data()));
    EXPECT_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CU(cuMemHostUnregister)(registered.data()));
  });
}

TEST(CudaEmulator, ErrorNamesComeFromCudaH) {
  RUN({}, [](const Cu& cu) {
    const char* n = nullptr;
    EXPECT_CU(CUDA_SUCCESS, CU(cuGetErrorName)(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &n));
    CHECK(n != nullptr && std::strcmp(n, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT") == 0);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, CU(cuGetErrorName)(static_cast<CUresult>(998), &n));
    CHECK(n == nullptr);
  });
}
