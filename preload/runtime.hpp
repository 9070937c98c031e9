#pragma once
// The interposer's process-wide state: the transparent heap (created on first use), the real functions
// behind each hook, logging (TVMM_LOG), the fork and exit handlers, and the error boundary every hook
// goes through. No CUDA header is needed: the hooks use the C ABI's plain types, and the CUDA error
// codes they return are the same numbers in the runtime and the driver API.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "vmm/transparent/transparent_heap.hpp"

namespace tvmm::preload {

//! cuda.h's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the default streams, named in any context.
inline void* const kLegacyStream = reinterpret_cast<void*>(1);
inline void* const kPerThreadStream = reinterpret_cast<void*>(2);

//! Error codes, identical in cudaError_t and CUresult.
enum Code : int {
  kSuccess = 0,
  kInvalidValue = 1,    // cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE
  kOutOfMemory = 2,     // cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
  kNotInitialized = 3,  // cudaErrorInitializationError / CUDA_ERROR_NOT_INITIALIZED
  kNotSupported = 801,  // cudaErrorNotSupported / CUDA_ERROR_NOT_SUPPORTED
  kUnknown = 999,       // cudaErrorUnknown / CUDA_ERROR_UNKNOWN
};

enum class Level : int { off = 0, error, warn, info, debug };
//! TVMM_LOG: off, error, warn (the default), info or debug.
Level log_level() noexcept;
//! One line "tvmm: <text>" on stderr when `level` is enabled.
void log(Level level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));

//! glibc's dlsym (the interposer defines its own).
void* real_dlsym(void* handle, const char* name) noexcept;
//! The next definition of `name` after this library (RTLD_NEXT), never this library's own.
void* next_symbol(const char* name) noexcept;
//! The program's own definition of `name`: RTLD_NEXT, else the first loaded object that defines it (a
//! CUDA runtime a Python extension loaded RTLD_LOCAL is outside RTLD_NEXT's reach), never this
//! library's. Null when no loaded object has it.
void* real_function(const char* name) noexcept;
//! A driver entry point by its exported name, from the libcuda.so.1 the process has loaded (never
//! loading it), or null.
void* loaded_driver_symbol(const char* name) noexcept;

//! The program's function `name` of type F, looked up on first use and again on every call until found
//! (a runtime may be loaded after the first call), then kept.
template <class F>
class Real {
 public:
  explicit Real(const char* name) noexcept : name_(name) {}
  F get() noexcept {
    void* f = fn_.load(std::memory_order_acquire);
    if (f == nullptr && (f = real_function(name_)) != nullptr) fn_.store(f, std::memory_order_release);
    return reinterpret_cast<F>(f);
  }

 private:
  const char* name_;
  std::atomic<void*> fn_{nullptr};
};

//! The most devices transparent mode serves (ordinals 0 to kMaxDevices - 1).
inline constexpr int kMaxDevices = 64;
//! The launch gate (launch_gate.hpp) of the heap serving the caller's current device (the device a
//! launch from this thread runs on), or -1 when that device has no heap. Lock-free; the device of the
//! thread's current context is cached per thread.
int gate_of_current_device() noexcept;
//! A context was destroyed: every thread's record of its current context's device is stale.
void forget_context_devices() noexcept;
//! The launch gate of the heap whose memory `address` may be in, or -1 (memory that is not tvmm's needs
//! no gate). Lock-free.
int gate_of(std::uint64_t address) noexcept;

//! The heap of `device` (-1: the caller's current device, that of its current context or else the
//! runtime's, when device.ordinal = "auto" on the CUDA backend; otherwise the one heap), created on
//! first call from TVMM_CONFIG and the TVMM_* variables; nullptr when it cannot be (the reason is logged
//! once and kept in init_error()).
vmm::TransparentHeap* heap(int device = -1) noexcept;
//! The heap of `device` (-1: the caller's current device) if it exists already (never creates one).
vmm::TransparentHeap* heap_if_created(int device) noexcept;
//! The heap whose memory `ptr` is in, of those created (never creates one), or nullptr.
vmm::TransparentHeap* heap_containing(const void* ptr) noexcept;
//! Why heap() returned nullptr.
const std::string& init_error() noexcept;
//! True when `ptr` is in the address range of a heap inherited from the parent across fork.
bool from_parent_before_fork(const void* ptr) noexcept;

//! Set while a hook runs tvmm's own code: CUDA calls tvmm makes then go straight to the real functions.
class Inside {
 public:
  Inside() noexcept { ++depth_; }
  ~Inside() { --depth_; }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
  [[nodiscard]] static bool active() noexcept { return depth_ > 0; }

 private:
  static thread_local int depth_;
};

//! TVMM_DISABLE=1 (or true, yes, on): every hook passes its call straight to the real function, as if
//! tvmm were not loaded (read once).
bool disabled() noexcept;
//! A hook passes its call through: tvmm's own code is running (Inside), or tvmm is disabled.
inline bool pass_through() noexcept { return Inside::active() || disabled(); }

// ---- what every hook family does (the runtime, the driver and the PyTorch entry points) -------------

//! Allocates `bytes` in transparent mode into *out (0 bytes: *out = null, success), from the heap of
//! `device` (-1: the caller's current device).
int allocate(const char* call, void** out, std::size_t bytes, int device = -1) noexcept;
//! What the pointer queries answer for tvmm's memory (PyTorch, CuPy and NCCL infer devices and bounds
//! from pointers): the allocation `ptr` points into and the device whose heap it is from. False when
//! `ptr` is not in a live allocation of tvmm's (the driver answers then).
struct PointerInfo {
  std::uintptr_t start = 0;
  std::size_t bytes = 0;
  int device = 0;
};
bool pointer_info(const void* ptr, PointerInfo* out) noexcept;

//! How a hook frees: at once (draining first, as cudaFree does), or in stream order: after the work
//! queued on `stream` so far (on a GPU: no drain; on the simulator at the next quiescent point).
enum class FreeKind { now, stream_ordered };
//! If tvmm owns `ptr` (or owned it before a fork), frees it as `kind` says, sets *code and returns true.
//! False: not tvmm's; the caller passes it to the real function.
bool free_if_ours(const char* call, void* ptr, FreeKind kind, void* stream, int* code) noexcept;
//! Pitched allocations (cudaMallocPitch, cudaMalloc3D, cuMemAllocPitch): each row padded to a multiple of
//! 512 bytes (the texture pitch alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, of every GPU tvmm
//! supports), so 2D copies and texture binding accept the pitch. The pitch for `width` bytes and pitch *
//! rows, or false when that overflows.
bool pitched_size(std::size_t width, std::size_t rows, std::size_t* pitch, std::size_t* bytes) noexcept;
//! An allocation outside tvmm (cuMemCreate, a memory pool's) found no device memory on `device` (-1: the
//! caller's current one): tvmm's heap there gives `bytes` back if it can (idle frames, then its coldest
//! pages demoted to the host). True when it gave some, so the call is worth trying again.
bool give_back_device_memory(const char* call, int device, std::size_t bytes) noexcept;
//! cudaMemGetInfo / cuMemGetInfo: total = the heap's capacity (device + host budgets); free = what is left
//! of it, but never more than an allocation outside tvmm could get on the device (the driver's free
//! memory plus what tvmm would give back), so a library that sizes its own driver allocations from it
//! (cuMemCreate, memory pools) is never led into a real out-of-memory.
int mem_info(const char* call, std::size_t* free, std::size_t* total) noexcept;
//! After a synchronising call succeeded: a quiescent point. The heap drains again before it moves or
//! releases anything, under the launch gate: other threads may have queued work since the call returned.
void quiescent() noexcept;

//! Placement by use: true when some heap places by use (transparent.placement = "use"), so the launch
//! hooks' reading of arguments is worth its cost. Lock-free.
bool any_heap_places_by_use() noexcept;
//! Placement by use: device work names `address` (a word of a launch's parameters, a copy's or memset's
//! address); passed to the heap whose memory it is in, if any. Lock-free: the launch hooks call it while
//! they hold the launch gate.
void note_use(std::uint64_t address) noexcept;

//! Graph captures under way in the process, as the capture hooks see them begin and end. While any is,
//! tvmm never synchronises the device (that would invalidate the capture).
//! A stream is identified by its handle; the per-thread default stream by the thread (stream_key).
void capture_began(const void* stream) noexcept;
void capture_ended(const void* stream) noexcept;
bool capture_under_way() noexcept;

//! Runs `f` (which returns a Code) and turns any exception into the code the caller expects, with a
//! one-line reason on stderr naming `call`.
template <class F>
int boundary(const char* call, F&& f) noexcept;

//! The Code for the exception in flight (inside a catch block), logged with `call`.
int code_of_current_exception(const char* call) noexcept;

template <class F>
int boundary(const char* call, F&& f) noexcept {
  Inside inside;
  try {
    return f();
  } catch (...) {
    return code_of_current_exception(call);
  }
}

}  // namespace tvmm::preload
