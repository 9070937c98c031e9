// The CUDA runtime API hooks. An unmodified program's cudaMalloc & friends land here (LD_PRELOAD puts
// this library first); memory tvmm did not allocate passes through to the real runtime, found with
// RTLD_NEXT. Exact names only: nothing here matches by prefix.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "preload/runtime.hpp"

namespace {

using namespace tvmm::preload;
using cudaError_t = int;
using cudaStream_t = void*;

// The runtime's last error (cudaGetLastError, CUDA Runtime API reference: it "returns the last error
// that has been produced by any of the runtime calls in the same instance of the CUDA Runtime library
// in the host thread and resets it to cudaSuccess"; cudaPeekAtLastError returns it without the reset).
// A call tvmm serves never reaches the runtime, so its error is kept here, per thread, and reported by
// the next cudaGetLastError or cudaPeekAtLastError of this thread ahead of the runtime's own.
thread_local int t_served_error = kSuccess;

// The result of a call tvmm served: a failure becomes this thread's last error, as in the runtime.
int served(int code) noexcept {
  if (code != kSuccess) t_served_error = code;
  return code;
}

int no_runtime(const char* call) noexcept {
  log(Level::error, "%s: no CUDA runtime below tvmm to pass this call to", call);
  return kNotInitialized;
}

// A synchronising call with no runtime to pass it to (one loaded where tvmm cannot find it, or none):
// the driver's equivalent, cuCtxSynchronize or cuStreamSynchronize (a cudaStream_t is a CUstream,
// cudaStreamLegacy and cudaStreamPerThread included), or an error. Never a success that did not wait.
int synchronize_without_runtime(const char* call, bool whole_device, cudaStream_t stream) noexcept {
  if (whole_device) {
    if (void* f = loaded_driver_symbol("cuCtxSynchronize")) return reinterpret_cast<int (*)()>(f)();
  } else if (void* f = loaded_driver_symbol("cuStreamSynchronize")) {
    return reinterpret_cast<int (*)(cudaStream_t)>(f)(stream);
  }
  log(Level::error, "%s: the process has loaded neither a CUDA runtime nor the driver: cannot synchronise", call);
  return kNotInitialized;
}

using MallocAsyncFn = cudaError_t (*)(void**, std::size_t, cudaStream_t);
using FreeAsyncFn = cudaError_t (*)(void*, cudaStream_t);
using StreamSynchronizeFn = cudaError_t (*)(cudaStream_t);

// A program compiled with --default-stream per-thread calls the _ptsz forms (cuda_runtime_api.h), in which
// the null stream is the calling thread's default stream: `null_stream` is what a null stream names in
// `call` (null: the legacy stream, which free_if_ours and the driver take it for; or kPerThreadStream).

// Served by tvmm, usable in stream order at once: tvmm's memory is mapped before this returns.
cudaError_t malloc_async(Real<MallocAsyncFn>& real, const char* call, void** ptr, std::size_t bytes,
                         cudaStream_t stream) {
  if (pass_through()) {
    const auto next = real.get();
    return next != nullptr ? next(ptr, bytes, stream) : no_runtime(call);
  }
  return served(allocate(call, ptr, bytes));
}

cudaError_t free_async(Real<FreeAsyncFn>& real, const char* call, void* ptr, cudaStream_t stream,
                       cudaStream_t null_stream) {
  const auto next = real.get();
  int code = kSuccess;
  if (ptr != nullptr && !pass_through() &&
      free_if_ours(call, ptr, FreeKind::stream_ordered, stream != nullptr ? stream : null_stream, &code)) {
    return served(code);
  }
  if (next == nullptr) return ptr == nullptr ? kSuccess : no_runtime(call);
  return next(ptr, stream);
}

cudaError_t stream_synchronize(Real<StreamSynchronizeFn>& real, const char* call, cudaStream_t stream,
                               cudaStream_t null_stream) {
  const auto next = real.get();
  const cudaError_t r = next != nullptr
                            ? next(stream)
                            : synchronize_without_runtime(call, false, stream != nullptr ? stream : null_stream);
  if (r == kSuccess && !pass_through()) quiescent();
  return r;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  using F = cudaError_t (*)(void**, std::size_t);
  if (pass_through()) {
    static Real<F> real_fn("cudaMalloc");
    const auto next = real_fn.get();
    return next != nullptr ? next(ptr, bytes) : no_runtime("cudaMalloc");
  }
  return served(allocate("cudaMalloc", ptr, bytes));
}

cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  static Real<MallocAsyncFn> real_fn("cudaMallocAsync");
  return malloc_async(real_fn, "cudaMallocAsync", ptr, bytes, stream);
}

cudaError_t cudaMallocAsync_ptsz(void** ptr, std::size_t bytes, cudaStream_t stream) {
  static Real<MallocAsyncFn> real_fn("cudaMallocAsync_ptsz");
  return malloc_async(real_fn, "cudaMallocAsync_ptsz", ptr, bytes, stream);
}

struct PitchedPtr {  // cudaPitchedPtr (driver_types.h)
  void* ptr;
  std::size_t pitch, xsize, ysize;
};
struct Extent {  // cudaExtent
  std::size_t width, height, depth;
};

cudaError_t cudaMallocPitch(void** ptr, std::size_t* pitch, std::size_t width, std::size_t height) {
  using F = cudaError_t (*)(void**, std::size_t*, std::size_t, std::size_t);
  if (pass_through()) {
    static Real<F> real_fn("cudaMallocPitch");
    const auto next = real_fn.get();
    return next != nullptr ? next(ptr, pitch, width, height) : no_runtime("cudaMallocPitch");
  }
  std::size_t p = 0, bytes = 0;
  if (pitch == nullptr || !pitched_size(width, height, &p, &bytes)) return served(kInvalidValue);
  const int r = allocate("cudaMallocPitch", ptr, bytes);
  if (r == kSuccess) *pitch = p;
  return served(r);
}

cudaError_t cudaMalloc3D(PitchedPtr* out, Extent extent) {
  using F = cudaError_t (*)(PitchedPtr*, Extent);
  if (pass_through()) {
    static Real<F> real_fn("cudaMalloc3D");
    const auto next = real_fn.get();
    return next != nullptr ? next(out, extent) : no_runtime("cudaMalloc3D");
  }
  std::size_t p = 0, bytes = 0;
  if (out == nullptr || (extent.depth != 0 && extent.height > SIZE_MAX / extent.depth) ||
      !pitched_size(extent.width, extent.height * extent.depth, &p, &bytes)) {
    return served(kInvalidValue);
  }
  void* base = nullptr;
  const int r = allocate("cudaMalloc3D", &base, bytes);
  if (r == kSuccess) *out = PitchedPtr{base, p, extent.width, extent.height};
  return served(r);
}

cudaError_t cudaFree(void* ptr) {
  using F = cudaError_t (*)(void*);
  static Real<F> real_fn("cudaFree");
  const auto next = real_fn.get();
  int code = kSuccess;
  if (ptr != nullptr && !pass_through() && free_if_ours("cudaFree", ptr, FreeKind::now, nullptr, &code)) {
    return served(code);
  }
  if (next == nullptr) return ptr == nullptr ? kSuccess : no_runtime("cudaFree");
  return next(ptr);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  static Real<FreeAsyncFn> real_fn("cudaFreeAsync");
  return free_async(real_fn, "cudaFreeAsync", ptr, stream, nullptr);
}

cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  static Real<FreeAsyncFn> real_fn("cudaFreeAsync_ptsz");
  return free_async(real_fn, "cudaFreeAsync_ptsz", ptr, stream, kPerThreadStream);
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  using F = cudaError_t (*)(std::size_t*, std::size_t*);
  if (pass_through()) {
    static Real<F> real_fn("cudaMemGetInfo");
    const auto next = real_fn.get();
    return next != nullptr ? next(free, total) : no_runtime("cudaMemGetInfo");
  }
  return served(mem_info("cudaMemGetInfo", free, total));
}

cudaError_t cudaDeviceSynchronize(void) {
  using F = cudaError_t (*)();
  static Real<F> real_fn("cudaDeviceSynchronize");
  const auto next = real_fn.get();
  const cudaError_t r = next != nullptr ? next() : synchronize_without_runtime("cudaDeviceSynchronize", true, nullptr);
  if (r == kSuccess && !pass_through()) quiescent();
  return r;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  static Real<StreamSynchronizeFn> real_fn("cudaStreamSynchronize");
  return stream_synchronize(real_fn, "cudaStreamSynchronize", stream, nullptr);
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  static Real<StreamSynchronizeFn> real_fn("cudaStreamSynchronize_ptsz");
  return stream_synchronize(real_fn, "cudaStreamSynchronize_ptsz", stream, kPerThreadStream);
}

// cudaPointerGetAttributes: for tvmm's memory, device memory of its heap's device (the pages move between
// device and host behind the address; the runtime would describe the one page's mapping). Others: the
// runtime. The struct is cuda_runtime_api.h's cudaPointerAttributes.
struct PointerAttributes {
  int type;  // cudaMemoryType: 2 = cudaMemoryTypeDevice
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};

cudaError_t cudaPointerGetAttributes(PointerAttributes* attr, const void* ptr) {
  using F = cudaError_t (*)(PointerAttributes*, const void*);
  PointerInfo info;
  if (attr != nullptr && !pass_through() && pointer_info(ptr, &info)) {
    *attr = {};
    attr->type = 2;
    attr->device = info.device;
    attr->device_pointer = const_cast<void*>(ptr);
    return kSuccess;
  }
  static Real<F> real_fn("cudaPointerGetAttributes");
  const auto next = real_fn.get();
  return next != nullptr ? next(attr, ptr) : no_runtime("cudaPointerGetAttributes");
}

// tvmm's pages move between device and host memory behind a fixed address, so they cannot be exported
// to another process.
cudaError_t cudaIpcGetMemHandle(void* handle, void* ptr) {
  using F = cudaError_t (*)(void*, void*);
  static Real<F> real_fn("cudaIpcGetMemHandle");
  const auto next = real_fn.get();
  if (heap_containing(ptr) != nullptr) {
    log(Level::error,
        "cudaIpcGetMemHandle(%p): memory from tvmm cannot be shared with another process (its pages move between "
        "device and host); run the exporting process without LD_PRELOAD of tvmm, or copy into memory allocated "
        "before tvmm was loaded",
        ptr);
    return served(kNotSupported);
  }
  return next != nullptr ? next(handle, ptr) : no_runtime("cudaIpcGetMemHandle");
}

// The last error: a failure of a call tvmm served first (it never reached the runtime), then the
// runtime's own. cudaGetLastError resets both, cudaPeekAtLastError neither.
cudaError_t cudaGetLastError(void) {
  using F = cudaError_t (*)();
  static Real<F> real_fn("cudaGetLastError");
  const auto next = real_fn.get();
  const cudaError_t runtime = next != nullptr ? next() : kSuccess;
  const int ours = std::exchange(t_served_error, kSuccess);
  return ours != kSuccess ? ours : runtime;
}

cudaError_t cudaPeekAtLastError(void) {
  using F = cudaError_t (*)();
  static Real<F> real_fn("cudaPeekAtLastError");
  const auto next = real_fn.get();
  const cudaError_t runtime = next != nullptr ? next() : kSuccess;
  return t_served_error != kSuccess ? t_served_error : runtime;
}

}  // extern "C"
