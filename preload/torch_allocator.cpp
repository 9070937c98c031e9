// PyTorch's CUDAPluggableAllocator entry points (see include/tvmm/tvmm.h and docs/pytorch.md):
//   torch.cuda.memory.CUDAPluggableAllocator("libtvmm_preload.so", "tvmm_malloc", "tvmm_free")
// They use the same transparent heap as the cudaMalloc hooks.
#include <sys/types.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "preload/runtime.hpp"
#include "tvmm/tvmm.h"
#include "vmm/api/last_error.hpp"

using namespace tvmm::preload;

namespace {
// With TVMM_DISABLE: the CUDA runtime's own allocator, stream-ordered as PyTorch expects.
void* runtime_malloc(ssize_t size, void* stream) noexcept {
  static Real<int (*)(void**, std::size_t, void*)> real("cudaMallocAsync");
  void* p = nullptr;
  const auto f = real.get();
  if (f == nullptr || size < 0 || f(&p, static_cast<std::size_t>(size), stream) != kSuccess) return nullptr;
  return p;
}
void runtime_free(void* ptr, void* stream) noexcept {
  static Real<int (*)(void*, void*)> real("cudaFreeAsync");
  if (const auto f = real.get()) (void)f(ptr, stream);
}
}  // namespace

extern "C" {

void* tvmm_malloc(ssize_t size, int device, void* stream) {
  if (disabled()) return runtime_malloc(size, stream);
  (void)stream;  // mapped before this returns: usable on any stream
  if (size < 0) {
    try {  // nothing may escape into PyTorch's C++ (or C) caller
      tvmm::vmm::set_last_error("tvmm_malloc: size " + std::to_string(size) + " is negative");
    } catch (...) {
    }
    log(Level::warn, "tvmm_malloc: size %zd is negative", size);
    return nullptr;
  }
  void* p = nullptr;
  // PyTorch names the device: its heap (with device.ordinal = "auto"; else the one heap).
  (void)allocate("tvmm_malloc", &p, static_cast<std::size_t>(size), device);  // on failure: null, reason logged
  return p;
}

void tvmm_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  // Work still queued on `stream` may use the block: it is released in stream order, once that work is
  // done, with no device synchronisation (as PyTorch's caching allocator reuses a block only in stream
  // order; streams the block was record_stream'ed on are not known here).
  if (ptr == nullptr) return;
  if (disabled()) return runtime_free(ptr, stream);
  int code = kSuccess;
  if (!free_if_ours("tvmm_free", ptr, FreeKind::stream_ordered, stream, &code)) {
    try {
      tvmm::vmm::set_last_error("tvmm_free: " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                                " was not allocated by tvmm_malloc; nothing was freed");
    } catch (...) {
    }
    log(Level::warn, "tvmm_free(%p): not allocated by tvmm_malloc; nothing was freed", ptr);
  }
}

int tvmm_memory_stats(int device, char* buf, size_t size) {
  if (buf == nullptr && size != 0) {
    tvmm::vmm::set_last_error("tvmm_memory_stats: buf is NULL but size is not 0");
    return -1;
  }
  try {
    std::string json = "{}";
    if (device < -1 || device >= kMaxDevices) {
      tvmm::vmm::set_last_error("tvmm_memory_stats: no device " + std::to_string(device) + " (0 to " +
                                std::to_string(kMaxDevices - 1) + ", or -1 for the current one)");
      return -1;
    }
    if (tvmm::vmm::TransparentHeap* h = heap_if_created(device)) json = h->stats_json();
    if (size != 0) {
      const std::size_t n = std::min(json.size(), size - 1);
      std::memcpy(buf, json.data(), n);
      buf[n] = '\0';
    }
    return static_cast<int>(json.size());
  } catch (...) {
    tvmm::vmm::set_last_error("tvmm_memory_stats: out of memory");
    return -1;
  }
}

}  // extern "C"
