// The CUDA driver API hooks. A program with a static CUDA runtime (or one that uses the driver API)
// never calls a dynamic cudaMalloc: it reaches the driver through dlsym(libcuda, ...) and
// cuGetProcAddress. So tvmm interposes dlsym itself, and hands out its own cuMemAlloc_v2,
// cuMemFree_v2, cuMemGetInfo_v2 and cuGetProcAddress(_v2) in place of the driver's, keeping the driver's
// for memory that is not tvmm's. Exact names only; every other lookup is answered by glibc's dlsym.
//
// The calls that queue device work (kernel and graph launches, copies) are handed out the same way,
// wrapped in the launch gate (launch_gate.hpp). Every CUDA runtime, dynamic or static, takes its
// driver entry points from cuGetProcAddress, so this one place sees every launch and copy a program
// makes, `kernel<<<...>>>` included.
//
// The file, in order (each part starts with a "// ---" line):
//   slots             the hooked entry points: their names, the ABI versions cuGetProcAddress resolves to
//                     them, and the driver's own functions behind them
//   allocation        cuMemAlloc/Free, their stream-ordered and pitched forms, room made for cuMemCreate and
//                     pool allocations, cuMemGetInfo, and cuGetProcAddress itself
//   pointer queries   cuPointerGetAttribute(s), cuMemGetAddressRange for tvmm's memory
//   device work       launches, copies and memsets, inside the launch gates and noting their uses
//   graph capture     capture begin and end, which tvmm counts
//   lifetimes         module and library unloads, context destruction (caches forgotten)
//   dlsym             the interposed dlsym and its trampoline, and the table of this file's hooks
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "preload/launch_gate.hpp"
#include "preload/launch_uses.hpp"
#include "preload/runtime.hpp"

namespace {

using namespace tvmm::preload;
using CUresult = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = std::uint64_t;

// --- slots ---------------------------------------------------------------------------------------------

// The driver's own functions, learnt when a lookup is intercepted (or found with RTLD_NEXT when the
// program linked libcuda directly and its calls bind to this library's definitions).
// The gated entry points come in a legacy-stream and a per-thread-default-stream variant (_ptsz, _ptds),
// each a slot of its own.
enum Slot {
  kGetProcAddress,
  kGetProcAddressV2,
  kMemAlloc,
  kMemFree,
  kMemGetInfo,
  kPointerGetAttribute,
  kPointerGetAttributes,
  kMemGetAddressRange,
  kLaunchKernel,
  kLaunchKernelPtsz,
  kLaunchKernelEx,
  kLaunchKernelExPtsz,
  kGraphLaunch,
  kGraphLaunchPtsz,
  kMemcpyHtoDAsync,
  kMemcpyHtoDAsyncPtsz,
  kMemcpyDtoHAsync,
  kMemcpyDtoHAsyncPtsz,
  kMemcpyDtoDAsync,
  kMemcpyDtoDAsyncPtsz,
  kMemcpyHtoD,
  kMemcpyHtoDPtds,
  kMemcpyDtoH,
  kMemcpyDtoHPtds,
  kMemcpyDtoD,
  kMemcpyDtoDPtds,
  kMemcpy,
  kMemcpyPt,
  kMemcpyAsync,
  kMemcpyAsyncPt,
  kMemcpyPeer,
  kMemcpyPeerPt,
  kMemcpyPeerAsync,
  kMemcpyPeerAsyncPt,
  kMemcpy2D,
  kMemcpy2DPt,
  kMemcpy2DAsync,
  kMemcpy2DAsyncPt,
  kMemcpy3D,
  kMemcpy3DPt,
  kMemcpy3DAsync,
  kMemcpy3DAsyncPt,
  kMemcpy2DUnaligned,
  kMemcpy2DUnalignedPt,
  kMemcpy3DPeer,
  kMemcpy3DPeerPt,
  kMemcpy3DPeerAsync,
  kMemcpy3DPeerAsyncPt,
  kMemsetD8,
  kMemsetD8Pt,
  kMemsetD16,
  kMemsetD16Pt,
  kMemsetD32,
  kMemsetD32Pt,
  kMemsetD8Async,
  kMemsetD8AsyncPt,
  kMemsetD16Async,
  kMemsetD16AsyncPt,
  kMemsetD32Async,
  kMemsetD32AsyncPt,
  kLaunchCooperativeKernel,
  kLaunchCooperativeKernelPt,
  kModuleUnload,
  kLibraryUnload,
  kStreamBeginCapture,
  kStreamBeginCapturePt,
  kStreamBeginCaptureToGraph,
  kStreamBeginCaptureToGraphPt,
  kStreamEndCapture,
  kStreamEndCapturePt,
  kMemAllocAsync,
  kMemAllocAsyncPt,
  kMemFreeAsync,
  kMemFreeAsyncPt,
  kMemAllocPitch,
  kMemCreate,
  kMemAllocFromPoolAsync,
  kMemAllocFromPoolAsyncPt,
  kCtxDestroy,
  kSlots
};
constexpr const char* kSlotNames[kSlots] = {"cuGetProcAddress",
                                            "cuGetProcAddress_v2",
                                            "cuMemAlloc_v2",
                                            "cuMemFree_v2",
                                            "cuMemGetInfo_v2",
                                            "cuPointerGetAttribute",
                                            "cuPointerGetAttributes",
                                            "cuMemGetAddressRange_v2",
                                            "cuLaunchKernel",
                                            "cuLaunchKernel_ptsz",
                                            "cuLaunchKernelEx",
                                            "cuLaunchKernelEx_ptsz",
                                            "cuGraphLaunch",
                                            "cuGraphLaunch_ptsz",
                                            "cuMemcpyHtoDAsync_v2",
                                            "cuMemcpyHtoDAsync_v2_ptsz",
                                            "cuMemcpyDtoHAsync_v2",
                                            "cuMemcpyDtoHAsync_v2_ptsz",
                                            "cuMemcpyDtoDAsync_v2",
                                            "cuMemcpyDtoDAsync_v2_ptsz",
                                            "cuMemcpyHtoD_v2",
                                            "cuMemcpyHtoD_v2_ptds",
                                            "cuMemcpyDtoH_v2",
                                            "cuMemcpyDtoH_v2_ptds",
                                            "cuMemcpyDtoD_v2",
                                            "cuMemcpyDtoD_v2_ptds",
                                            "cuMemcpy",
                                            "cuMemcpy_ptds",
                                            "cuMemcpyAsync",
                                            "cuMemcpyAsync_ptsz",
                                            "cuMemcpyPeer",
                                            "cuMemcpyPeer_ptds",
                                            "cuMemcpyPeerAsync",
                                            "cuMemcpyPeerAsync_ptsz",
                                            "cuMemcpy2D_v2",
                                            "cuMemcpy2D_v2_ptds",
                                            "cuMemcpy2DAsync_v2",
                                            "cuMemcpy2DAsync_v2_ptsz",
                                            "cuMemcpy3D_v2",
                                            "cuMemcpy3D_v2_ptds",
                                            "cuMemcpy3DAsync_v2",
                                            "cuMemcpy3DAsync_v2_ptsz",
                                            "cuMemcpy2DUnaligned_v2",
                                            "cuMemcpy2DUnaligned_v2_ptds",
                                            "cuMemcpy3DPeer",
                                            "cuMemcpy3DPeer_ptds",
                                            "cuMemcpy3DPeerAsync",
                                            "cuMemcpy3DPeerAsync_ptsz",
                                            "cuMemsetD8_v2",
                                            "cuMemsetD8_v2_ptds",
                                            "cuMemsetD16_v2",
                                            "cuMemsetD16_v2_ptds",
                                            "cuMemsetD32_v2",
                                            "cuMemsetD32_v2_ptds",
                                            "cuMemsetD8Async",
                                            "cuMemsetD8Async_ptsz",
                                            "cuMemsetD16Async",
                                            "cuMemsetD16Async_ptsz",
                                            "cuMemsetD32Async",
                                            "cuMemsetD32Async_ptsz",
                                            "cuLaunchCooperativeKernel",
                                            "cuLaunchCooperativeKernel_ptsz",
                                            "cuModuleUnload",
                                            "cuLibraryUnload",
                                            "cuStreamBeginCapture_v2",
                                            "cuStreamBeginCapture_v2_ptsz",
                                            "cuStreamBeginCaptureToGraph",
                                            "cuStreamBeginCaptureToGraph_ptsz",
                                            "cuStreamEndCapture",
                                            "cuStreamEndCapture_ptsz",
                                            "cuMemAllocAsync",
                                            "cuMemAllocAsync_ptsz",
                                            "cuMemFreeAsync",
                                            "cuMemFreeAsync_ptsz",
                                            "cuMemAllocPitch_v2",
                                            "cuMemCreate",
                                            "cuMemAllocFromPoolAsync",
                                            "cuMemAllocFromPoolAsync_ptsz",
                                            "cuCtxDestroy_v2"};
static_assert(kSlotNames[kSlots - 1] != nullptr, "a slot without its exported name");
// cuGetProcAddress's flag for the per-thread default stream variants (cuda.h).
constexpr cuuint64_t kPerThreadDefaultStream = 2;
std::atomic<void*> g_real[kSlots];

void* ours(Slot s) noexcept;

// Records the driver's function for `s`; never this library's own (that would recurse).
void remember(Slot s, void* fn) noexcept {
  if (fn != nullptr && fn != ours(s)) g_real[s].store(fn, std::memory_order_release);
}

template <class F>
F driver(Slot s) noexcept {
  void* fn = g_real[s].load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = next_symbol(kSlotNames[s]);
    remember(s, fn);
  }
  return reinterpret_cast<F>(fn);
}

int no_driver(const char* call) noexcept {
  log(Level::warn, "%s: no CUDA driver below tvmm to pass this call to", call);
  return kNotInitialized;
}

// A hooked driver entry point by its exported name, or -1.
int slot_of_export(const char* name) noexcept {
  for (int s = 0; s < kSlots; ++s) {
    if (std::strcmp(name, kSlotNames[s]) == 0) return s;
  }
  return -1;
}

// The slot a cuGetProcAddress lookup resolves to: base names, with the ABI the caller asks for (the
// versions that introduced each ABI, cudaTypedefs.h) and the default-stream flavour.
int slot_of_base(const char* name, int version, cuuint64_t flags) noexcept {
  const int pt = (flags & kPerThreadDefaultStream) != 0 ? 1 : 0;
  struct Base {
    const char* name;
    int since;
    int slot;
    bool per_thread_variant;
  };
  static constexpr Base kBases[] = {
      {"cuMemAlloc", 3020, kMemAlloc, false},
      {"cuMemFree", 3020, kMemFree, false},
      {"cuMemGetInfo", 3020, kMemGetInfo, false},
      {"cuPointerGetAttribute", 4000, kPointerGetAttribute, false},
      {"cuPointerGetAttributes", 7000, kPointerGetAttributes, false},
      {"cuMemGetAddressRange", 3020, kMemGetAddressRange, false},
      {"cuLaunchKernel", 4000, kLaunchKernel, true},
      {"cuLaunchKernelEx", 11060, kLaunchKernelEx, true},
      {"cuGraphLaunch", 10000, kGraphLaunch, true},
      {"cuMemcpyHtoDAsync", 3020, kMemcpyHtoDAsync, true},
      {"cuMemcpyDtoHAsync", 3020, kMemcpyDtoHAsync, true},
      {"cuMemcpyDtoDAsync", 3020, kMemcpyDtoDAsync, true},
      {"cuMemcpyHtoD", 3020, kMemcpyHtoD, true},
      {"cuMemcpyDtoH", 3020, kMemcpyDtoH, true},
      {"cuMemcpyDtoD", 3020, kMemcpyDtoD, true},
      {"cuMemcpy", 4000, kMemcpy, true},
      {"cuMemcpyAsync", 4000, kMemcpyAsync, true},
      {"cuMemcpyPeer", 4000, kMemcpyPeer, true},
      {"cuMemcpyPeerAsync", 4000, kMemcpyPeerAsync, true},
      {"cuMemcpy2D", 3020, kMemcpy2D, true},
      {"cuMemcpy2DAsync", 3020, kMemcpy2DAsync, true},
      {"cuMemcpy3D", 3020, kMemcpy3D, true},
      {"cuMemcpy3DAsync", 3020, kMemcpy3DAsync, true},
      {"cuMemcpy2DUnaligned", 3020, kMemcpy2DUnaligned, true},
      {"cuMemcpy3DPeer", 4000, kMemcpy3DPeer, true},
      {"cuMemcpy3DPeerAsync", 4000, kMemcpy3DPeerAsync, true},
      {"cuMemsetD8", 3020, kMemsetD8, true},
      {"cuMemsetD16", 3020, kMemsetD16, true},
      {"cuMemsetD32", 3020, kMemsetD32, true},
      {"cuMemsetD8Async", 3020, kMemsetD8Async, true},
      {"cuMemsetD16Async", 3020, kMemsetD16Async, true},
      {"cuMemsetD32Async", 3020, kMemsetD32Async, true},
      {"cuLaunchCooperativeKernel", 9000, kLaunchCooperativeKernel, true},
      {"cuModuleUnload", 2000, kModuleUnload, false},
      {"cuLibraryUnload", 12000, kLibraryUnload, false},
      // The capture mode argument came with 10010 (cudaTypedefs.h); a program asking for the 10000 form
      // gets the driver's, and its captures are not seen.
      {"cuStreamBeginCapture", 10010, kStreamBeginCapture, true},
      {"cuStreamBeginCaptureToGraph", 12030, kStreamBeginCaptureToGraph, true},
      {"cuStreamEndCapture", 10000, kStreamEndCapture, true},
      {"cuMemAllocAsync", 11020, kMemAllocAsync, true},
      {"cuMemFreeAsync", 11020, kMemFreeAsync, true},
      {"cuMemAllocPitch", 3020, kMemAllocPitch, false},
      {"cuMemCreate", 10020, kMemCreate, false},
      {"cuMemAllocFromPoolAsync", 11020, kMemAllocFromPoolAsync, true},
      {"cuCtxDestroy", 4000, kCtxDestroy, false},
  };
  if (std::strcmp(name, "cuGetProcAddress") == 0) return version >= 12000 ? kGetProcAddressV2 : kGetProcAddress;
  for (const Base& b : kBases) {
    if (std::strcmp(name, b.name) == 0) return version >= b.since ? b.slot + (b.per_thread_variant ? pt : 0) : -1;
  }
  return -1;
}

void substitute(const char* symbol, int version, cuuint64_t flags, void** pfn) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr || pass_through()) return;
  const int s = slot_of_base(symbol, version, flags);
  if (s < 0) return;
  remember(static_cast<Slot>(s), *pfn);
  *pfn = ours(static_cast<Slot>(s));
  log(Level::debug, "cuGetProcAddress(\"%s\", %d): tvmm's hook", symbol, version);
}

}  // namespace

extern "C" {

// --- allocation ----------------------------------------------------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, std::size_t bytes) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t);
  if (pass_through()) {
    const auto next = driver<F>(kMemAlloc);
    return next != nullptr ? next(ptr, bytes) : no_driver("cuMemAlloc_v2");
  }
  if (ptr == nullptr) return kInvalidValue;
  void* p = nullptr;
  const int r = allocate("cuMemAlloc_v2", &p, bytes);
  // cuMemAlloc of 0 bytes is an error in the driver API (unlike cudaMalloc).
  if (r == kSuccess && bytes == 0) return kInvalidValue;
  *ptr = reinterpret_cast<std::uintptr_t>(p);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  using F = CUresult (*)(CUdeviceptr);
  int code = kSuccess;
  void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  if (p != nullptr && !pass_through() && free_if_ours("cuMemFree_v2", p, FreeKind::now, nullptr, &code)) return code;
  const auto next = driver<F>(kMemFree);
  return next != nullptr ? next(ptr) : no_driver("cuMemFree_v2");
}

// Stream-ordered allocation through the driver (a static runtime's cudaMallocAsync, driver-API programs):
// served as cudaMallocAsync is, mapped before the call returns, so usable in stream order at once.
}  // extern "C"
namespace {
CUresult alloc_async(Slot s, const char* call, CUdeviceptr* ptr, std::size_t bytes, void* stream) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t, void*);
  if (pass_through()) {
    const auto next = driver<F>(s);
    return next != nullptr ? next(ptr, bytes, stream) : no_driver(call);
  }
  if (ptr == nullptr) return kInvalidValue;
  void* p = nullptr;
  const int r = allocate(call, &p, bytes);
  if (r == kSuccess && bytes == 0) return kInvalidValue;  // as cuMemAlloc: 0 bytes is an invalid value
  *ptr = reinterpret_cast<std::uintptr_t>(p);
  return r;
}

// tvmm's memory in the order of `stream` (the null stream: the legacy one, or the thread's in _ptsz);
// other memory goes to the driver.
CUresult free_async(Slot s, const char* call, CUdeviceptr ptr, void* stream, bool ptsz) {
  using F = CUresult (*)(CUdeviceptr, void*);
  int code = kSuccess;
  void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  void* named = stream == nullptr && ptsz ? kPerThreadStream : stream;
  if (p != nullptr && !pass_through() && free_if_ours(call, p, FreeKind::stream_ordered, named, &code)) return code;
  const auto next = driver<F>(s);
  return next != nullptr ? next(ptr, stream) : no_driver(call);
}

// cuMemCreate's CUmemAllocationProp starts {type, requestedHandleTypes, location {type, id}} (cuda.h).
struct PropHead {
  int type;
  int handle_types;
  int location_type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int location_id;
};
constexpr int kLocationDevice = 1;

// Runs `call` (a device allocation outside tvmm); if the device has no memory for it, tvmm gives device
// memory back (its coldest pages to the host) and the call is tried once more.
template <class Call>
CUresult with_room(const char* name, int device, std::size_t bytes, Call call) {
  CUresult r = call();
  if (r == kOutOfMemory && !pass_through() && give_back_device_memory(name, device, bytes)) r = call();
  return r;
}
}  // namespace
extern "C" {

CUresult cuMemAllocAsync(CUdeviceptr* ptr, std::size_t bytes, void* stream) {
  return alloc_async(kMemAllocAsync, "cuMemAllocAsync", ptr, bytes, stream);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, std::size_t bytes, void* stream) {
  return alloc_async(kMemAllocAsyncPt, "cuMemAllocAsync_ptsz", ptr, bytes, stream);
}
CUresult cuMemFreeAsync(CUdeviceptr ptr, void* stream) {
  return free_async(kMemFreeAsync, "cuMemFreeAsync", ptr, stream, false);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, void* stream) {
  return free_async(kMemFreeAsyncPt, "cuMemFreeAsync_ptsz", ptr, stream, true);
}

// cuda.h (cuMemAllocPitch): "ElementSizeBytes may be 4, 8 or 16"; the pitch is "the width in bytes of the
// allocation". Served by tvmm: rows padded to 512 bytes, as cudaMallocPitch.
CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, std::size_t* pitch, std::size_t width, std::size_t height,
                            unsigned element) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned);
  if (pass_through()) {
    const auto next = driver<F>(kMemAllocPitch);
    return next != nullptr ? next(ptr, pitch, width, height, element) : no_driver("cuMemAllocPitch_v2");
  }
  std::size_t p = 0, bytes = 0;
  if (ptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
      (element != 4 && element != 8 && element != 16) || !pitched_size(width, height, &p, &bytes)) {
    return kInvalidValue;
  }
  void* out = nullptr;
  const int r = allocate("cuMemAllocPitch_v2", &out, bytes);
  if (r == kSuccess) {
    *ptr = reinterpret_cast<std::uintptr_t>(out);
    *pitch = p;
  }
  return r;
}

// Physical memory the program (PyTorch's expandable segments, NCCL's buffers, XLA) creates and maps
// itself: the driver's, never tvmm's; but when the device has no memory for it, tvmm makes room.
CUresult cuMemCreate(unsigned long long* handle, std::size_t size, const void* prop, unsigned long long flags) {
  using F = CUresult (*)(unsigned long long*, std::size_t, const void*, unsigned long long);
  const auto next = driver<F>(kMemCreate);
  if (next == nullptr) return no_driver("cuMemCreate");
  const auto* head = static_cast<const PropHead*>(prop);
  if (head == nullptr || head->location_type != kLocationDevice) return next(handle, size, prop, flags);
  return with_room("cuMemCreate", head->location_id, size, [&] { return next(handle, size, prop, flags); });
}

// A memory pool's allocation (cudaMallocFromPoolAsync, XLA's and others' pools): the driver's, with room
// made as for cuMemCreate, on the device whose default pool it is (cuDeviceGetDefaultMemPool), else on the
// caller's current device (a pool the program created: the driver says nothing of its location).
}  // extern "C"
namespace {
int device_of_pool(void* pool) noexcept {
  using DefaultPool = CUresult (*)(void**, int);
  static auto* const default_pool = reinterpret_cast<DefaultPool>(loaded_driver_symbol("cuDeviceGetDefaultMemPool"));
  for (int d = 0; default_pool != nullptr && d < kMaxDevices; ++d) {
    if (heap_if_created(d) == nullptr) continue;
    void* p = nullptr;
    if (default_pool(&p, d) == kSuccess && p == pool) return d;
  }
  return -1;
}

CUresult alloc_from_pool(Slot s, const char* call, CUdeviceptr* ptr, std::size_t bytes, void* pool, void* stream) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t, void*, void*);
  const auto next = driver<F>(s);
  if (next == nullptr) return no_driver(call);
  return with_room(call, device_of_pool(pool), bytes, [&] { return next(ptr, bytes, pool, stream); });
}
}  // namespace
extern "C" {
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, std::size_t bytes, void* pool, void* stream) {
  return alloc_from_pool(kMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", ptr, bytes, pool, stream);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, std::size_t bytes, void* pool, void* stream) {
  return alloc_from_pool(kMemAllocFromPoolAsyncPt, "cuMemAllocFromPoolAsync_ptsz", ptr, bytes, pool, stream);
}

CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  using F = CUresult (*)(std::size_t*, std::size_t*);
  if (pass_through()) {
    const auto next = driver<F>(kMemGetInfo);
    return next != nullptr ? next(free, total) : no_driver("cuMemGetInfo_v2");
  }
  return mem_info("cuMemGetInfo_v2", free, total);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags, void* status) {
  using F = CUresult (*)(const char*, void**, int, cuuint64_t, void*);
  const auto next = driver<F>(kGetProcAddressV2);
  if (next == nullptr) return no_driver("cuGetProcAddress_v2");
  const CUresult r = next(symbol, pfn, version, flags, status);
  if (r == kSuccess) substitute(symbol, version, flags, pfn);
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using F = CUresult (*)(const char*, void**, int, cuuint64_t);
  const auto next = driver<F>(kGetProcAddress);
  if (next == nullptr) return no_driver("cuGetProcAddress");
  const CUresult r = next(symbol, pfn, version, flags);
  if (r == kSuccess) substitute(symbol, version, flags, pfn);
  return r;
}

// --- pointer queries -----------------------------------------------------------------------------------

// Pointer queries. A tvmm page lives on a device frame or a host-located chunk and moves between them,
// so the driver would describe one page (its mapping) and, for a page on the host, host memory. For a
// live allocation of tvmm's these answer what a cudaMalloc'd allocation would give: device memory of
// the heap's device, the whole allocation as the range. Other attributes, and other memory: the driver.
namespace {
// cuda.h's CUpointer_attribute and CUmemorytype values (the interposer needs no CUDA header).
constexpr int kAttrMemoryType = 2, kAttrDevicePointer = 3, kAttrHostPointer = 4, kAttrIsManaged = 8,
              kAttrDeviceOrdinal = 9, kAttrRangeStart = 11, kAttrRangeSize = 12, kAttrMapped = 13;
constexpr unsigned kMemoryTypeDevice = 2;

// Writes attribute `attr` of tvmm's allocation `info` for `ptr` to *data: kSuccess, kInvalidValue (an
// attribute device memory does not have), or -1 (not one tvmm answers: ask the driver).
int tvmm_attribute(const PointerInfo& info, int attr, CUdeviceptr ptr, void* data) noexcept {
  switch (attr) {
    case kAttrMemoryType: *static_cast<unsigned*>(data) = kMemoryTypeDevice; return kSuccess;
    case kAttrDevicePointer: *static_cast<CUdeviceptr*>(data) = ptr; return kSuccess;
    case kAttrHostPointer: return kInvalidValue;  // device memory has no host address
    case kAttrIsManaged: *static_cast<unsigned*>(data) = 0; return kSuccess;
    case kAttrDeviceOrdinal: *static_cast<int*>(data) = info.device; return kSuccess;
    case kAttrRangeStart: *static_cast<CUdeviceptr*>(data) = info.start; return kSuccess;
    case kAttrRangeSize: *static_cast<std::size_t*>(data) = info.bytes; return kSuccess;
    case kAttrMapped: *static_cast<unsigned*>(data) = 1; return kSuccess;
    default: return -1;
  }
}
}  // namespace

CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr ptr) {
  using F = CUresult (*)(void*, int, CUdeviceptr);
  PointerInfo info;
  if (data != nullptr && !pass_through() &&
      pointer_info(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(ptr)), &info)) {
    if (const int r = tvmm_attribute(info, attr, ptr, data); r >= 0) return r;
  }
  const auto next = driver<F>(kPointerGetAttribute);
  return next != nullptr ? next(data, attr, ptr) : no_driver("cuPointerGetAttribute");
}

CUresult cuPointerGetAttributes(unsigned n, int* attrs, void** data, CUdeviceptr ptr) {
  using F = CUresult (*)(unsigned, int*, void**, CUdeviceptr);
  const auto next = driver<F>(kPointerGetAttributes);
  if (next == nullptr) return no_driver("cuPointerGetAttributes");
  const CUresult r = next(n, attrs, data, ptr);  // every attribute, then tvmm's answers over them
  PointerInfo info;
  if (r != kSuccess || attrs == nullptr || data == nullptr || pass_through() ||
      !pointer_info(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(ptr)), &info)) {
    return r;
  }
  for (unsigned i = 0; i < n; ++i) {
    if (data[i] == nullptr) continue;
    // cuda.h (cuPointerGetAttributes): an attribute a pointer does not have reads as its default; a host
    // pointer of device memory is NULL.
    if (attrs[i] == kAttrHostPointer) {
      *static_cast<void**>(data[i]) = nullptr;
    } else {
      (void)tvmm_attribute(info, attrs[i], ptr, data[i]);
    }
  }
  return r;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  PointerInfo info;
  if (!pass_through() && pointer_info(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(ptr)), &info)) {
    if (base != nullptr) *base = info.start;
    if (size != nullptr) *size = info.bytes;
    return kSuccess;
  }
  const auto next = driver<F>(kMemGetAddressRange);
  return next != nullptr ? next(base, size, ptr) : no_driver("cuMemGetAddressRange_v2");
}

// --- device work ---------------------------------------------------------------------------------------

// The calls that queue device work: the driver's function, inside a shared hold of the launch gate,
// after noting the tvmm memory they name (placement by use, launch_uses.hpp). Handles and structures
// pass through untouched, so their types here are opaque pointers of the same size and class as cuda.h's.
// `gates`: the gates to hold (launch_gate.hpp): a launch's device's, or the heaps its addresses are in.
#define TVMM_GATED_NOTING(slot, symbol, params, args, gates, note) \
  CUresult symbol params {                                         \
    using F = CUresult(*) params;                                  \
    const auto next = driver<F>(slot);                             \
    if (next == nullptr) return no_driver(#symbol);                \
    const bool ours = Inside::active();                            \
    const GateEntry entry(ours, gates);                            \
    if (!ours) note;                                               \
    return next args;                                              \
  }
#define TVMM_GATED(slot, symbol, params, args) TVMM_GATED_NOTING(slot, symbol, params, args, TVMM_GATE_DEVICE, (void)0)
#define TVMM_GATE_DEVICE gate_of_current_device()
#define TVMM_GATE_D gate_of(d)
#define TVMM_GATE_S gate_of(s)
#define TVMM_GATE_DS gate_of(d), gate_of(s)
#define TVMM_LAUNCH_PARAMS                                                                                 \
  (void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, \
   void* stream, void** params, void** extra)
#define TVMM_LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
// cuLaunchKernelEx's CUlaunchConfig and its attributes pass through; the function and its parameters are
// read as cuLaunchKernel's.
#define TVMM_LAUNCH_EX_PARAMS (const void* config, void* f, void** params, void** extra)
#define TVMM_COOPERATIVE_PARAMS                                                                            \
  (void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, \
   void* stream, void** params)
#define TVMM_COOPERATIVE_ARGS (f, gx, gy, gz, bx, by, bz, shared, stream, params)
#define TVMM_NOTE_LAUNCH note_launch(f, params, extra)
#define TVMM_NOTE_D note_address(d)
#define TVMM_NOTE_S note_address(s)
#define TVMM_NOTE_DS (note_address(d), note_address(s))
TVMM_GATED_NOTING(kLaunchKernel, cuLaunchKernel, TVMM_LAUNCH_PARAMS, TVMM_LAUNCH_ARGS, TVMM_GATE_DEVICE,
                  TVMM_NOTE_LAUNCH)
TVMM_GATED_NOTING(kLaunchKernelPtsz, cuLaunchKernel_ptsz, TVMM_LAUNCH_PARAMS, TVMM_LAUNCH_ARGS, TVMM_GATE_DEVICE,
                  TVMM_NOTE_LAUNCH)
TVMM_GATED_NOTING(kLaunchKernelEx, cuLaunchKernelEx, TVMM_LAUNCH_EX_PARAMS, (config, f, params, extra),
                  TVMM_GATE_DEVICE, TVMM_NOTE_LAUNCH)
TVMM_GATED_NOTING(kLaunchKernelExPtsz, cuLaunchKernelEx_ptsz, TVMM_LAUNCH_EX_PARAMS, (config, f, params, extra),
                  TVMM_GATE_DEVICE, TVMM_NOTE_LAUNCH)
TVMM_GATED_NOTING(kLaunchCooperativeKernel, cuLaunchCooperativeKernel, TVMM_COOPERATIVE_PARAMS, TVMM_COOPERATIVE_ARGS,
                  TVMM_GATE_DEVICE, note_launch(f, params, nullptr))
TVMM_GATED_NOTING(kLaunchCooperativeKernelPt, cuLaunchCooperativeKernel_ptsz, TVMM_COOPERATIVE_PARAMS,
                  TVMM_COOPERATIVE_ARGS, TVMM_GATE_DEVICE, note_launch(f, params, nullptr))
TVMM_GATED(kGraphLaunch, cuGraphLaunch, (void* exec, void* stream), (exec, stream))
TVMM_GATED(kGraphLaunchPtsz, cuGraphLaunch_ptsz, (void* exec, void* stream), (exec, stream))
TVMM_GATED_NOTING(kMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void* s, std::size_t n, void* st),
                  (d, s, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemcpyHtoDAsyncPtsz, cuMemcpyHtoDAsync_v2_ptsz,
                  (CUdeviceptr d, const void* s, std::size_t n, void* st), (d, s, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, (void* d, CUdeviceptr s, std::size_t n, void* st),
                  (d, s, n, st), TVMM_GATE_S, TVMM_NOTE_S)
TVMM_GATED_NOTING(kMemcpyDtoHAsyncPtsz, cuMemcpyDtoHAsync_v2_ptsz, (void* d, CUdeviceptr s, std::size_t n, void* st),
                  (d, s, n, st), TVMM_GATE_S, TVMM_NOTE_S)
TVMM_GATED_NOTING(kMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, std::size_t n, void* st),
                  (d, s, n, st), TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyDtoDAsyncPtsz, cuMemcpyDtoDAsync_v2_ptsz,
                  (CUdeviceptr d, CUdeviceptr s, std::size_t n, void* st), (d, s, n, st), TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyHtoD, cuMemcpyHtoD_v2, (CUdeviceptr d, const void* s, std::size_t n), (d, s, n), TVMM_GATE_D,
                  TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemcpyHtoDPtds, cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void* s, std::size_t n), (d, s, n),
                  TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemcpyDtoH, cuMemcpyDtoH_v2, (void* d, CUdeviceptr s, std::size_t n), (d, s, n), TVMM_GATE_S,
                  TVMM_NOTE_S)
TVMM_GATED_NOTING(kMemcpyDtoHPtds, cuMemcpyDtoH_v2_ptds, (void* d, CUdeviceptr s, std::size_t n), (d, s, n),
                  TVMM_GATE_S, TVMM_NOTE_S)
TVMM_GATED_NOTING(kMemcpyDtoD, cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, std::size_t n), (d, s, n), TVMM_GATE_DS,
                  TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyDtoDPtds, cuMemcpyDtoD_v2_ptds, (CUdeviceptr d, CUdeviceptr s, std::size_t n), (d, s, n),
                  TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpy, cuMemcpy, (CUdeviceptr d, CUdeviceptr s, std::size_t n), (d, s, n), TVMM_GATE_DS,
                  TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyPt, cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, std::size_t n), (d, s, n), TVMM_GATE_DS,
                  TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyAsync, cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, std::size_t n, void* st), (d, s, n, st),
                  TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyAsyncPt, cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, std::size_t n, void* st),
                  (d, s, n, st), TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyPeer, cuMemcpyPeer, (CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, std::size_t n),
                  (d, dc, s, sc, n), TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyPeerPt, cuMemcpyPeer_ptds, (CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, std::size_t n),
                  (d, dc, s, sc, n), TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyPeerAsync, cuMemcpyPeerAsync,
                  (CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, std::size_t n, void* st), (d, dc, s, sc, n, st),
                  TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED_NOTING(kMemcpyPeerAsyncPt, cuMemcpyPeerAsync_ptsz,
                  (CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, std::size_t n, void* st), (d, dc, s, sc, n, st),
                  TVMM_GATE_DS, TVMM_NOTE_DS)
TVMM_GATED(kMemcpy2D, cuMemcpy2D_v2, (const void* copy), (copy))
TVMM_GATED(kMemcpy2DPt, cuMemcpy2D_v2_ptds, (const void* copy), (copy))
TVMM_GATED(kMemcpy2DAsync, cuMemcpy2DAsync_v2, (const void* copy, void* st), (copy, st))
TVMM_GATED(kMemcpy2DAsyncPt, cuMemcpy2DAsync_v2_ptsz, (const void* copy, void* st), (copy, st))
TVMM_GATED(kMemcpy3D, cuMemcpy3D_v2, (const void* copy), (copy))
TVMM_GATED(kMemcpy3DPt, cuMemcpy3D_v2_ptds, (const void* copy), (copy))
TVMM_GATED(kMemcpy3DAsync, cuMemcpy3DAsync_v2, (const void* copy, void* st), (copy, st))
TVMM_GATED(kMemcpy3DAsyncPt, cuMemcpy3DAsync_v2_ptsz, (const void* copy, void* st), (copy, st))
// cudaMemcpy2D and cudaMemcpy2DToArray reach the driver as cuMemcpy2DUnaligned (the runtime asks
// cuGetProcAddress for it), and cudaMemcpy3DPeer[Async] as cuMemcpy3DPeer[Async]. A 3D peer copy holds
// the current device's gate, as the other 2D/3D forms do (their addresses are inside the descriptor).
TVMM_GATED(kMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2, (const void* copy), (copy))
TVMM_GATED(kMemcpy2DUnalignedPt, cuMemcpy2DUnaligned_v2_ptds, (const void* copy), (copy))
TVMM_GATED(kMemcpy3DPeer, cuMemcpy3DPeer, (const void* copy), (copy))
TVMM_GATED(kMemcpy3DPeerPt, cuMemcpy3DPeer_ptds, (const void* copy), (copy))
TVMM_GATED(kMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, (const void* copy, void* st), (copy, st))
TVMM_GATED(kMemcpy3DPeerAsyncPt, cuMemcpy3DPeerAsync_ptsz, (const void* copy, void* st), (copy, st))
TVMM_GATED_NOTING(kMemsetD8, cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, std::size_t n), (d, v, n), TVMM_GATE_D,
                  TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD8Pt, cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, std::size_t n), (d, v, n),
                  TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD16, cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, std::size_t n), (d, v, n), TVMM_GATE_D,
                  TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD16Pt, cuMemsetD16_v2_ptds, (CUdeviceptr d, unsigned short v, std::size_t n), (d, v, n),
                  TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD32, cuMemsetD32_v2, (CUdeviceptr d, unsigned v, std::size_t n), (d, v, n), TVMM_GATE_D,
                  TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD32Pt, cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned v, std::size_t n), (d, v, n), TVMM_GATE_D,
                  TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD8Async, cuMemsetD8Async, (CUdeviceptr d, unsigned char v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD8AsyncPt, cuMemsetD8Async_ptsz, (CUdeviceptr d, unsigned char v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD16Async, cuMemsetD16Async, (CUdeviceptr d, unsigned short v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD16AsyncPt, cuMemsetD16Async_ptsz, (CUdeviceptr d, unsigned short v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD32Async, cuMemsetD32Async, (CUdeviceptr d, unsigned v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)
TVMM_GATED_NOTING(kMemsetD32AsyncPt, cuMemsetD32Async_ptsz, (CUdeviceptr d, unsigned v, std::size_t n, void* st),
                  (d, v, n, st), TVMM_GATE_D, TVMM_NOTE_D)

// --- graph capture -------------------------------------------------------------------------------------

// Graph capture. While any stream captures, tvmm serves allocations without moving pages, keeps freed
// memory for the graph's replays and never synchronises (a device synchronise would invalidate the
// capture). Every CUDA runtime begins and ends captures through these entry points (cuGetProcAddress),
// whatever the program calls: cudaStreamBeginCapture, its _ptsz form, or the driver API.
}  // extern "C"
namespace {
// What identifies a capturing stream: its handle, or for the per-thread default stream (CU_STREAM_PER_THREAD,
// or the null stream in a _ptsz call) the calling thread, whose stream it is.
const void* stream_key(void* stream, bool ptsz) noexcept {
  static thread_local const char per_thread = 0;
  return stream == kPerThreadStream || (stream == nullptr && ptsz) ? &per_thread : stream;
}

// A begin holds every launch gate, so a remap that has closed its gate (and drains next) sees every capture
// that began before, and none begins until its remap is done (TransparentHeap::drain_once).
template <class F, class... A>
CUresult begin_capture(Slot s, const char* name, void* stream, bool ptsz, A... args) {
  const auto next = driver<F>(s);
  if (next == nullptr) return no_driver(name);
  const AllGatesEntry entry(Inside::active());
  const CUresult r = next(stream, args...);
  if (r == kSuccess) capture_began(stream_key(stream, ptsz));
  return r;
}

// The capture sequence ends with the call, unless the driver says the stream still captures (an end
// refused, e.g. from another thread in global mode: cuda.h, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD).
CUresult end_capture(Slot s, const char* name, void* stream, void** graph, bool ptsz) {
  using F = CUresult (*)(void*, void**);
  const auto next = driver<F>(s);
  if (next == nullptr) return no_driver(name);
  const CUresult r = next(stream, graph);
  if (r != kSuccess) {
    using IsCapturing = CUresult (*)(void*, int*);
    auto* query =
        reinterpret_cast<IsCapturing>(loaded_driver_symbol(ptsz ? "cuStreamIsCapturing_ptsz" : "cuStreamIsCapturing"));
    int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
    if (query != nullptr && query(stream, &status) == kSuccess && status != 0) return r;
  }
  capture_ended(stream_key(stream, ptsz));
  return r;
}
}  // namespace
extern "C" {

CUresult cuStreamBeginCapture_v2(void* stream, int mode) {
  return begin_capture<CUresult (*)(void*, int)>(kStreamBeginCapture, "cuStreamBeginCapture_v2", stream, false, mode);
}
CUresult cuStreamBeginCapture_v2_ptsz(void* stream, int mode) {
  return begin_capture<CUresult (*)(void*, int)>(kStreamBeginCapturePt, "cuStreamBeginCapture_v2_ptsz", stream, true,
                                                 mode);
}
using BeginToGraph = CUresult (*)(void*, void*, const void*, const void*, std::size_t, int);
CUresult cuStreamBeginCaptureToGraph(void* stream, void* graph, const void* deps, const void* edges, std::size_t n,
                                     int mode) {
  return begin_capture<BeginToGraph>(kStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", stream, false, graph,
                                     deps, edges, n, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(void* stream, void* graph, const void* deps, const void* edges, std::size_t n,
                                          int mode) {
  return begin_capture<BeginToGraph>(kStreamBeginCaptureToGraphPt, "cuStreamBeginCaptureToGraph_ptsz", stream, true,
                                     graph, deps, edges, n, mode);
}
CUresult cuStreamEndCapture(void* stream, void** graph) {
  return end_capture(kStreamEndCapture, "cuStreamEndCapture", stream, graph, false);
}
CUresult cuStreamEndCapture_ptsz(void* stream, void** graph) {
  return end_capture(kStreamEndCapturePt, "cuStreamEndCapture_ptsz", stream, graph, true);
}

}  // extern "C"

// --- lifetimes -----------------------------------------------------------------------------------------

// A module or library unloaded: a function handle it held may be reused for another kernel with other
// parameters, so the parameter layouts learnt so far are forgotten (launch_uses.hpp), before the unload
// (no launch of a handle about to go reads a stale layout afterwards) and after it (none learnt during it
// survives).
namespace {
CUresult unload(Slot s, const char* call, void* handle) {
  using F = CUresult (*)(void*);
  const auto next = driver<F>(s);
  if (next == nullptr) return no_driver(call);
  forget_layouts();
  const CUresult r = next(handle);
  forget_layouts();
  return r;
}
}  // namespace
extern "C" {
CUresult cuModuleUnload(void* module) { return unload(kModuleUnload, "cuModuleUnload", module); }
CUresult cuLibraryUnload(void* library) { return unload(kLibraryUnload, "cuLibraryUnload", library); }

// A context destroyed: a new one may get its address on another device, so the per-thread record of
// which device each context is on is forgotten (gate_of_current_device).
CUresult cuCtxDestroy_v2(void* ctx) {
  using F = CUresult (*)(void*);
  const auto next = driver<F>(kCtxDestroy);
  if (next == nullptr) return no_driver("cuCtxDestroy_v2");
  const CUresult r = next(ctx);
  forget_context_devices();
  return r;
}
#undef TVMM_GATED
#undef TVMM_GATED_NOTING
#undef TVMM_LAUNCH_PARAMS
#undef TVMM_LAUNCH_ARGS
#undef TVMM_LAUNCH_EX_PARAMS
#undef TVMM_COOPERATIVE_PARAMS
#undef TVMM_COOPERATIVE_ARGS
#undef TVMM_NOTE_LAUNCH
#undef TVMM_NOTE_D
#undef TVMM_NOTE_S
#undef TVMM_NOTE_DS
#undef TVMM_GATE_DEVICE
#undef TVMM_GATE_D
#undef TVMM_GATE_S
#undef TVMM_GATE_DS

// --- dlsym ---------------------------------------------------------------------------------------------

// glibc's dlsym, where the trampoline below jumps.
__attribute__((visibility("hidden"))) void* tvmm_glibc_dlsym = nullptr;

// The part of dlsym's decision for names that start with "cu".
__attribute__((visibility("hidden"))) void* tvmm_preload_dlsym_cuda(void* handle, const char* name) {
  if (pass_through()) return nullptr;
  const int s = slot_of_export(name);
  if (s < 0) return nullptr;
  void* theirs = real_dlsym(handle, name);
  if (theirs == nullptr) return nullptr;
  remember(static_cast<Slot>(s), theirs);
  log(Level::debug, "dlsym(\"%s\"): tvmm's hook", name);
  return ours(static_cast<Slot>(s));
}

// dlsym's decision: tvmm's hook for a hooked driver symbol that `handle` really has, else null (glibc's
// dlsym answers). Also sets tvmm_glibc_dlsym for the trampoline. Sanitizer runtimes look up their real
// functions with dlsym while they start, before their own state exists, so this first step is not
// instrumented and calls nothing that is.
__attribute__((visibility("hidden"), no_sanitize("address", "undefined", "thread"))) void* tvmm_preload_dlsym_hook(
    void* handle, const char* name) {
  if (tvmm_glibc_dlsym == nullptr) {
    void* f = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    tvmm_glibc_dlsym = f != nullptr ? f : ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }
  if (name == nullptr || handle == RTLD_NEXT || name[0] != 'c' || name[1] != 'u') return nullptr;
  return tvmm_preload_dlsym_cuda(handle, name);
}

}  // extern "C"

namespace {
void* ours(Slot s) noexcept {
  switch (s) {
    case kGetProcAddress: return reinterpret_cast<void*>(&cuGetProcAddress);
    case kGetProcAddressV2: return reinterpret_cast<void*>(&cuGetProcAddress_v2);
    case kMemAlloc: return reinterpret_cast<void*>(&cuMemAlloc_v2);
    case kMemFree: return reinterpret_cast<void*>(&cuMemFree_v2);
    case kMemGetInfo: return reinterpret_cast<void*>(&cuMemGetInfo_v2);
    case kPointerGetAttribute: return reinterpret_cast<void*>(&cuPointerGetAttribute);
    case kPointerGetAttributes: return reinterpret_cast<void*>(&cuPointerGetAttributes);
    case kMemGetAddressRange: return reinterpret_cast<void*>(&cuMemGetAddressRange_v2);
    case kLaunchKernel: return reinterpret_cast<void*>(&cuLaunchKernel);
    case kLaunchKernelPtsz: return reinterpret_cast<void*>(&cuLaunchKernel_ptsz);
    case kLaunchKernelEx: return reinterpret_cast<void*>(&cuLaunchKernelEx);
    case kLaunchKernelExPtsz: return reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz);
    case kGraphLaunch: return reinterpret_cast<void*>(&cuGraphLaunch);
    case kGraphLaunchPtsz: return reinterpret_cast<void*>(&cuGraphLaunch_ptsz);
    case kMemcpyHtoDAsync: return reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2);
    case kMemcpyHtoDAsyncPtsz: return reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2_ptsz);
    case kMemcpyDtoHAsync: return reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2);
    case kMemcpyDtoHAsyncPtsz: return reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2_ptsz);
    case kMemcpyDtoDAsync: return reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2);
    case kMemcpyDtoDAsyncPtsz: return reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2_ptsz);
    case kMemcpyHtoD: return reinterpret_cast<void*>(&cuMemcpyHtoD_v2);
    case kMemcpyHtoDPtds: return reinterpret_cast<void*>(&cuMemcpyHtoD_v2_ptds);
    case kMemcpyDtoH: return reinterpret_cast<void*>(&cuMemcpyDtoH_v2);
    case kMemcpyDtoHPtds: return reinterpret_cast<void*>(&cuMemcpyDtoH_v2_ptds);
    case kMemcpyDtoD: return reinterpret_cast<void*>(&cuMemcpyDtoD_v2);
    case kMemcpyDtoDPtds: return reinterpret_cast<void*>(&cuMemcpyDtoD_v2_ptds);
    case kMemcpy: return reinterpret_cast<void*>(&cuMemcpy);
    case kMemcpyPt: return reinterpret_cast<void*>(&cuMemcpy_ptds);
    case kMemcpyAsync: return reinterpret_cast<void*>(&cuMemcpyAsync);
    case kMemcpyAsyncPt: return reinterpret_cast<void*>(&cuMemcpyAsync_ptsz);
    case kMemcpyPeer: return reinterpret_cast<void*>(&cuMemcpyPeer);
    case kMemcpyPeerPt: return reinterpret_cast<void*>(&cuMemcpyPeer_ptds);
    case kMemcpyPeerAsync: return reinterpret_cast<void*>(&cuMemcpyPeerAsync);
    case kMemcpyPeerAsyncPt: return reinterpret_cast<void*>(&cuMemcpyPeerAsync_ptsz);
    case kMemcpy2D: return reinterpret_cast<void*>(&cuMemcpy2D_v2);
    case kMemcpy2DPt: return reinterpret_cast<void*>(&cuMemcpy2D_v2_ptds);
    case kMemcpy2DAsync: return reinterpret_cast<void*>(&cuMemcpy2DAsync_v2);
    case kMemcpy2DAsyncPt: return reinterpret_cast<void*>(&cuMemcpy2DAsync_v2_ptsz);
    case kMemcpy3D: return reinterpret_cast<void*>(&cuMemcpy3D_v2);
    case kMemcpy3DPt: return reinterpret_cast<void*>(&cuMemcpy3D_v2_ptds);
    case kMemcpy3DAsync: return reinterpret_cast<void*>(&cuMemcpy3DAsync_v2);
    case kMemcpy3DAsyncPt: return reinterpret_cast<void*>(&cuMemcpy3DAsync_v2_ptsz);
    case kMemcpy2DUnaligned: return reinterpret_cast<void*>(&cuMemcpy2DUnaligned_v2);
    case kMemcpy2DUnalignedPt: return reinterpret_cast<void*>(&cuMemcpy2DUnaligned_v2_ptds);
    case kMemcpy3DPeer: return reinterpret_cast<void*>(&cuMemcpy3DPeer);
    case kMemcpy3DPeerPt: return reinterpret_cast<void*>(&cuMemcpy3DPeer_ptds);
    case kMemcpy3DPeerAsync: return reinterpret_cast<void*>(&cuMemcpy3DPeerAsync);
    case kMemcpy3DPeerAsyncPt: return reinterpret_cast<void*>(&cuMemcpy3DPeerAsync_ptsz);
    case kMemsetD8: return reinterpret_cast<void*>(&cuMemsetD8_v2);
    case kMemsetD8Pt: return reinterpret_cast<void*>(&cuMemsetD8_v2_ptds);
    case kMemsetD16: return reinterpret_cast<void*>(&cuMemsetD16_v2);
    case kMemsetD16Pt: return reinterpret_cast<void*>(&cuMemsetD16_v2_ptds);
    case kMemsetD32: return reinterpret_cast<void*>(&cuMemsetD32_v2);
    case kMemsetD32Pt: return reinterpret_cast<void*>(&cuMemsetD32_v2_ptds);
    case kMemsetD8Async: return reinterpret_cast<void*>(&cuMemsetD8Async);
    case kMemsetD8AsyncPt: return reinterpret_cast<void*>(&cuMemsetD8Async_ptsz);
    case kMemsetD16Async: return reinterpret_cast<void*>(&cuMemsetD16Async);
    case kMemsetD16AsyncPt: return reinterpret_cast<void*>(&cuMemsetD16Async_ptsz);
    case kMemsetD32Async: return reinterpret_cast<void*>(&cuMemsetD32Async);
    case kMemsetD32AsyncPt: return reinterpret_cast<void*>(&cuMemsetD32Async_ptsz);
    case kLaunchCooperativeKernel: return reinterpret_cast<void*>(&cuLaunchCooperativeKernel);
    case kLaunchCooperativeKernelPt: return reinterpret_cast<void*>(&cuLaunchCooperativeKernel_ptsz);
    case kModuleUnload: return reinterpret_cast<void*>(&cuModuleUnload);
    case kLibraryUnload: return reinterpret_cast<void*>(&cuLibraryUnload);
    case kStreamBeginCapture: return reinterpret_cast<void*>(&cuStreamBeginCapture_v2);
    case kStreamBeginCapturePt: return reinterpret_cast<void*>(&cuStreamBeginCapture_v2_ptsz);
    case kStreamBeginCaptureToGraph: return reinterpret_cast<void*>(&cuStreamBeginCaptureToGraph);
    case kStreamBeginCaptureToGraphPt: return reinterpret_cast<void*>(&cuStreamBeginCaptureToGraph_ptsz);
    case kStreamEndCapture: return reinterpret_cast<void*>(&cuStreamEndCapture);
    case kStreamEndCapturePt: return reinterpret_cast<void*>(&cuStreamEndCapture_ptsz);
    case kMemAllocAsync: return reinterpret_cast<void*>(&cuMemAllocAsync);
    case kMemAllocAsyncPt: return reinterpret_cast<void*>(&cuMemAllocAsync_ptsz);
    case kMemFreeAsync: return reinterpret_cast<void*>(&cuMemFreeAsync);
    case kMemFreeAsyncPt: return reinterpret_cast<void*>(&cuMemFreeAsync_ptsz);
    case kMemAllocPitch: return reinterpret_cast<void*>(&cuMemAllocPitch_v2);
    case kMemCreate: return reinterpret_cast<void*>(&cuMemCreate);
    case kMemAllocFromPoolAsync: return reinterpret_cast<void*>(&cuMemAllocFromPoolAsync);
    case kMemAllocFromPoolAsyncPt: return reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz);
    case kCtxDestroy: return reinterpret_cast<void*>(&cuCtxDestroy_v2);
    case kSlots: break;
  }
  return nullptr;
}
}  // namespace

// dlsym itself. glibc's dlsym resolves RTLD_NEXT relative to its caller's return address, so the
// answer for every name tvmm does not hook must come from glibc as if the program had called it: on
// x86-64 a trampoline asks the hook, then *jumps* (not calls) to glibc's dlsym with the caller's
// arguments and return address intact. Elsewhere a C fallback resolves RTLD_NEXT relative to tvmm.
#if defined(__x86_64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    endbr64
    push %rdi
    .cfi_adjust_cfa_offset 8
    push %rsi
    .cfi_adjust_cfa_offset 8
    sub $8, %rsp
    .cfi_adjust_cfa_offset 8
    call tvmm_preload_dlsym_hook
    add $8, %rsp
    .cfi_adjust_cfa_offset -8
    pop %rsi
    .cfi_adjust_cfa_offset -8
    pop %rdi
    .cfi_adjust_cfa_offset -8
    test %rax, %rax
    jnz 1f
    jmp *tvmm_glibc_dlsym(%rip)
1:
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
extern "C" void* dlsym(void* handle, const char* name) {
  if (void* hook = tvmm_preload_dlsym_hook(handle, name)) return hook;
  return real_dlsym(handle, name);
}
#endif
