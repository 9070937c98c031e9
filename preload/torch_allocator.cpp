// PyTorch's CUDAPluggableAllocator entry points (see include/tvmm/tvmm.h and docs/pytorch.md):
//   torch.cuda.memory.CUDAPluggableAllocator("libtvmm_preload.so", "tvmm_malloc", "tvmm_free")
// They use the same transparent heap as the cudaMalloc hooks.
#include <sys/types.h>

#include <string>

#include "preload/runtime.hpp"
#include "tvmm/tvmm.h"
#include "vmm/detail/last_error.hpp"

using namespace tvmm::preload;

extern "C" {

void* tvmm_malloc(ssize_t size, int device, void* stream) {
  (void)stream;  // mapped before this returns: usable on any stream
  if (size < 0) {
    tvmm::detail::set_last_error("tvmm_malloc: size " + std::to_string(size) + " is negative");
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
  int code = kSuccess;
  if (!free_if_ours("tvmm_free", ptr, FreeKind::stream_ordered, stream, &code)) {
    tvmm::detail::set_last_error("tvmm_free: " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                                 " was not allocated by tvmm_malloc; nothing was freed");
    log(Level::warn, "tvmm_free(%p): not allocated by tvmm_malloc; nothing was freed", ptr);
  }
}

}  // extern "C"
