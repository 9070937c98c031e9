// The CUDA runtime API hooks. An unmodified program's cudaMalloc & friends land here (LD_PRELOAD puts
// this library first); memory tvmm did not allocate passes through to the real runtime, found with
// RTLD_NEXT. Exact names only: nothing here matches by prefix.
#include <cstddef>

#include "preload/runtime.hpp"

namespace {

using namespace tvmm::preload;
using cudaError_t = int;
using cudaStream_t = void*;

// The real function `name` of type F, or null when the program has no CUDA runtime below tvmm.
template <class F>
F real(const char* name) noexcept {
  return reinterpret_cast<F>(next_symbol(name));
}

int no_runtime(const char* call) noexcept {
  log(Level::warn, "%s: no CUDA runtime below tvmm to pass this call to", call);
  return kNotInitialized;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  using F = cudaError_t (*)(void**, std::size_t);
  if (Inside::active()) {
    static const auto next = real<F>("cudaMalloc");
    return next != nullptr ? next(ptr, bytes) : no_runtime("cudaMalloc");
  }
  return allocate("cudaMalloc", ptr, bytes);
}

cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  using F = cudaError_t (*)(void**, std::size_t, cudaStream_t);
  if (Inside::active()) {
    static const auto next = real<F>("cudaMallocAsync");
    return next != nullptr ? next(ptr, bytes, stream) : no_runtime("cudaMallocAsync");
  }
  // Usable in stream order at once: tvmm's memory is mapped before this returns.
  return allocate("cudaMallocAsync", ptr, bytes);
}

cudaError_t cudaFree(void* ptr) {
  using F = cudaError_t (*)(void*);
  static const auto next = real<F>("cudaFree");
  int code = kSuccess;
  if (ptr != nullptr && !Inside::active() && free_if_ours("cudaFree", ptr, false, &code)) return code;
  if (next == nullptr) return ptr == nullptr ? kSuccess : no_runtime("cudaFree");
  return next(ptr);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  using F = cudaError_t (*)(void*, cudaStream_t);
  static const auto next = real<F>("cudaFreeAsync");
  int code = kSuccess;
  if (ptr != nullptr && !Inside::active() && free_if_ours("cudaFreeAsync", ptr, true, &code)) return code;
  if (next == nullptr) return ptr == nullptr ? kSuccess : no_runtime("cudaFreeAsync");
  return next(ptr, stream);
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  using F = cudaError_t (*)(std::size_t*, std::size_t*);
  if (Inside::active()) {
    static const auto next = real<F>("cudaMemGetInfo");
    return next != nullptr ? next(free, total) : no_runtime("cudaMemGetInfo");
  }
  return mem_info("cudaMemGetInfo", free, total);
}

cudaError_t cudaDeviceSynchronize(void) {
  using F = cudaError_t (*)();
  static const auto next = real<F>("cudaDeviceSynchronize");
  const cudaError_t r = next != nullptr ? next() : kSuccess;
  if (r == kSuccess && !Inside::active()) quiescent(true);
  return r;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  using F = cudaError_t (*)(cudaStream_t);
  static const auto next = real<F>("cudaStreamSynchronize");
  const cudaError_t r = next != nullptr ? next(stream) : kSuccess;
  if (r == kSuccess && !Inside::active()) quiescent(false);  // other streams may still run: tvmm drains if it remaps
  return r;
}

// tvmm's pages move between device and host memory behind a fixed address, so they cannot be exported
// to another process.
cudaError_t cudaIpcGetMemHandle(void* handle, void* ptr) {
  using F = cudaError_t (*)(void*, void*);
  static const auto next = real<F>("cudaIpcGetMemHandle");
  tvmm::detail::TransparentHeap* h = heap_if_created();
  if (h != nullptr && h->contains(ptr)) {
    log(Level::error,
        "cudaIpcGetMemHandle(%p): memory from tvmm cannot be shared with another process (its pages move between "
        "device and host); run the exporting process without LD_PRELOAD of tvmm, or copy into memory allocated "
        "before tvmm was loaded",
        ptr);
    return kNotSupported;
  }
  return next != nullptr ? next(handle, ptr) : no_runtime("cudaIpcGetMemHandle");
}

}  // extern "C"
