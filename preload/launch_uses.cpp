#include "preload/launch_uses.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "preload/runtime.hpp"

namespace tvmm::preload {

namespace {

// cuda.h: CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE.
void* const kParamEnd = nullptr;
void* const kParamBufferPointer = reinterpret_cast<void*>(1);
void* const kParamBufferSize = reinterpret_cast<void*>(2);
// The most parameter bytes a kernel takes (32764 since CUDA 12.1): a bound on what is read.
constexpr std::size_t kMaxParamBytes = 32764;
// The most parameters asked about (each takes a byte at least; a driver that answered every index would
// otherwise never stop).
constexpr std::size_t kMaxParams = kMaxParamBytes;

// Where each parameter of a function lies in the buffer the device sees: only the sizes matter here
// (kernelParams gives one pointer per parameter), and only parameters of 8 bytes or more can hold one.
struct Layout {
  std::vector<std::uint32_t> sizes;  // per parameter; empty: not known (kernelParams are not read)
};

using ParamInfo = int (*)(void*, std::size_t, std::size_t*, std::size_t*);

// cuFuncGetParamInfo, then cuKernelGetParamInfo (a CUkernel may be launched as a CUfunction, cuda.h
// cuLaunchKernel), from the loaded driver; null before CUDA 12.4.
struct Queries {
  ParamInfo func = nullptr;
  ParamInfo kernel = nullptr;
};
const Queries& queries() noexcept {
  static const Queries q{reinterpret_cast<ParamInfo>(loaded_driver_symbol("cuFuncGetParamInfo")),
                         reinterpret_cast<ParamInfo>(loaded_driver_symbol("cuKernelGetParamInfo"))};
  return q;
}

// cuda.h's CUDA_ERROR_INVALID_HANDLE: not a CUfunction (a CUkernel launched as one, say).
constexpr int kInvalidHandle = 400;

// The sizes `ask` gives for `function`'s parameters; *first is what it answered for index 0.
std::vector<std::uint32_t> sizes_from(ParamInfo ask, void* function, int* first) {
  std::vector<std::uint32_t> sizes;
  std::size_t offset = 0, size = 0;
  const Inside inside;  // the driver's own calls, not the program's
  for (;;) {
    const int r = sizes.size() < kMaxParams ? ask(function, sizes.size(), &offset, &size) : kInvalidValue;
    if (sizes.empty()) *first = r;
    if (r != kSuccess) return sizes;  // past the last parameter (CUDA_ERROR_INVALID_VALUE), or not known
    sizes.push_back(static_cast<std::uint32_t>(size));
  }
}

Layout describe(void* function) {
  Layout l;
  const Queries& q = queries();
  int first = kInvalidHandle;
  if (q.func != nullptr) l.sizes = sizes_from(q.func, function, &first);
  // Only a handle cuFuncGetParamInfo does not know is asked of cuKernelGetParamInfo.
  if (l.sizes.empty() && first == kInvalidHandle && q.kernel != nullptr)
    l.sizes = sizes_from(q.kernel, function, &first);
  return l;  // empty: no parameters, or none the driver describes (kernelParams are not read)
}

// Every layout ever made (a thread may still hold one while another forgets them), the current ones by
// function, and the generation that module unloads advance. The tables are never destroyed: the hooks
// run during exit too, after this library's static destructors (a CUDA runtime's own destructor, run by
// the dynamic linker last, unloads its modules, and the unload hooks call forget_layouts). Clearing a
// destroyed map there wrote into freed memory and corrupted the heap: seen on an H200 with the toolkit's
// libcudart ("malloc_consolidate(): unaligned fastbin chunk detected" at exit; the cause found by
// bisection there, docs/gpu.md), and reproduced with the emulated runtime, which unloads as late.
struct Layouts {
  std::mutex mu;
  std::deque<Layout> all;                                // under mu
  std::unordered_map<void*, const Layout*> by_function;  // under mu
};
Layouts& layouts() {
  static Layouts* const tables = new Layouts;  // deliberately never deleted (above)
  return *tables;
}
std::atomic<std::uint64_t> g_generation{1};

// A per-thread direct-mapped cache in front of the table: a launch of a known function takes no lock.
struct Cached {
  void* function = nullptr;
  std::uint64_t generation = 0;
  const Layout* layout = nullptr;
};
constexpr std::size_t kCacheSize = 64;
thread_local Cached t_cache[kCacheSize];

const Layout* layout_of(void* function) noexcept {
  const std::uint64_t gen = g_generation.load(std::memory_order_acquire);
  Cached& c = t_cache[(reinterpret_cast<std::uintptr_t>(function) >> 4) % kCacheSize];
  if (c.function == function && c.generation == gen) return c.layout;
  const Layout* l = nullptr;
  try {
    Layouts& t = layouts();
    std::lock_guard lk(t.mu);
    if (auto it = t.by_function.find(function); it != t.by_function.end()) {
      l = it->second;
    } else {
      t.all.push_back(describe(function));
      l = &t.all.back();
      t.by_function.emplace(function, l);
    }
  } catch (...) {  // out of memory: this launch is not read
    return nullptr;
  }
  c = {function, gen, l};
  return l;
}

// Each 8-byte word of [p, p + n) that may be an address (the words of a struct passed by value too).
void note_words(const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t at = 0; at + 8 <= n; at += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + at, 8);
    if (w != 0) note_use(w);
  }
}

}  // namespace

void note_launch(void* function, void** params, void** extra) noexcept {
  if (!any_heap_places_by_use()) return;
  if (params != nullptr) {
    const Layout* l = layout_of(function);
    if (l == nullptr) return;
    for (std::size_t i = 0; i < l->sizes.size(); ++i) {
      if (l->sizes[i] >= 8 && params[i] != nullptr)
        note_words(static_cast<const unsigned char*>(params[i]), l->sizes[i]);
    }
    return;
  }
  if (extra == nullptr) return;
  // cuda.h (cuLaunchKernel): extra is a list of (name, value) pairs ended by CU_LAUNCH_PARAM_END; the
  // buffer is ignored without its size.
  const unsigned char* buffer = nullptr;
  const std::size_t* size = nullptr;
  for (std::size_t i = 0; i < 64 && extra[i] != kParamEnd; i += 2) {
    if (extra[i] == kParamBufferPointer) {
      buffer = static_cast<const unsigned char*>(extra[i + 1]);
    } else if (extra[i] == kParamBufferSize) {
      size = static_cast<const std::size_t*>(extra[i + 1]);
    } else {
      return;  // a setting this code does not know: read nothing
    }
  }
  if (buffer != nullptr && size != nullptr) note_words(buffer, std::min(*size, kMaxParamBytes));
}

void note_address(std::uint64_t address) noexcept {
  if (address != 0 && any_heap_places_by_use()) note_use(address);
}

void forget_layouts() noexcept {
  try {
    Layouts& t = layouts();
    std::lock_guard lk(t.mu);
    t.by_function.clear();
  } catch (...) {  // std::mutex::lock does not fail in practice; the generation below still advances
  }
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace tvmm::preload
