// The CUDA driver API hooks. A program with a static CUDA runtime (or one that uses the driver API)
// never calls a dynamic cudaMalloc: it reaches the driver through dlsym(libcuda, ...) and
// cuGetProcAddress. So tvmm interposes dlsym itself, and hands out its own cuMemAlloc_v2,
// cuMemFree_v2, cuMemGetInfo_v2 and cuGetProcAddress(_v2) in place of the driver's, keeping the driver's
// for memory that is not tvmm's. Exact names only; every other lookup is answered by glibc's dlsym.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "preload/runtime.hpp"

namespace {

using namespace tvmm::preload;
using CUresult = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = std::uint64_t;

// The driver's own functions, learnt when a lookup is intercepted (or found with RTLD_NEXT when the
// program linked libcuda directly and its calls bind to this library's definitions).
enum Slot { kGetProcAddress, kGetProcAddressV2, kMemAlloc, kMemFree, kMemGetInfo, kSlots };
constexpr const char* kSlotNames[kSlots] = {"cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2",
                                            "cuMemGetInfo_v2"};
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

// The slot a cuGetProcAddress lookup resolves to: base names, with the ABI the caller asks for.
int slot_of_base(const char* name, int version) noexcept {
  if (std::strcmp(name, "cuMemAlloc") == 0) return version >= 3020 ? kMemAlloc : -1;
  if (std::strcmp(name, "cuMemFree") == 0) return version >= 3020 ? kMemFree : -1;
  if (std::strcmp(name, "cuMemGetInfo") == 0) return version >= 3020 ? kMemGetInfo : -1;
  if (std::strcmp(name, "cuGetProcAddress") == 0) return version >= 12000 ? kGetProcAddressV2 : kGetProcAddress;
  return -1;
}

void substitute(const char* symbol, int version, void** pfn) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr || Inside::active()) return;
  const int s = slot_of_base(symbol, version);
  if (s < 0) return;
  remember(static_cast<Slot>(s), *pfn);
  *pfn = ours(static_cast<Slot>(s));
  log(Level::debug, "cuGetProcAddress(\"%s\", %d): tvmm's hook", symbol, version);
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, std::size_t bytes) {
  using F = CUresult (*)(CUdeviceptr*, std::size_t);
  if (Inside::active()) {
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
  if (p != nullptr && !Inside::active() && free_if_ours("cuMemFree_v2", p, false, &code)) return code;
  const auto next = driver<F>(kMemFree);
  return next != nullptr ? next(ptr) : no_driver("cuMemFree_v2");
}

CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  using F = CUresult (*)(std::size_t*, std::size_t*);
  if (Inside::active()) {
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
  if (r == kSuccess) substitute(symbol, version, pfn);
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using F = CUresult (*)(const char*, void**, int, cuuint64_t);
  const auto next = driver<F>(kGetProcAddress);
  if (next == nullptr) return no_driver("cuGetProcAddress");
  const CUresult r = next(symbol, pfn, version, flags);
  if (r == kSuccess) substitute(symbol, version, pfn);
  return r;
}

// glibc's dlsym, where the trampoline below jumps.
__attribute__((visibility("hidden"))) void* tvmm_glibc_dlsym = nullptr;

// The part of dlsym's decision for names that start with "cu".
__attribute__((visibility("hidden"))) void* tvmm_preload_dlsym_cuda(void* handle, const char* name) {
  if (Inside::active()) return nullptr;
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
