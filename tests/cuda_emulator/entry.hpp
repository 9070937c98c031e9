#pragma once
// How the emulator's entry points are written: each registers itself under its base name and the CUDA
// version that introduced its ABI (the PFN_<name>_v<version> typedefs of cudaTypedefs.h), and
// cuGetProcAddress_v2 picks the newest variant no newer than the version asked for.

#include <new>

#include "emulator.hpp"

namespace cuemu {

struct Export {
  const char* name;  //!< base name: "cuMemGetInfo"
  int version;       //!< the CUDA version that introduced this ABI: 3020
  bool per_thread;   //!< the _ptsz / _ptds variant (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
  void* fn;
};
//! Every registered entry point.
std::vector<Export>& exports();

struct Register {
  Register(const char* name, int version, void* fn, bool per_thread = false) {
    exports().push_back({name, version, per_thread, fn});
  }
};

//! Checks made by every entry point but cuGetProcAddress and the error-name calls: a call from a host
//! callback is refused (cuda.h 18070, cuLaunchHostFunc: "The host function must not make any CUDA API
//! calls. Attempting to use a CUDA API may result in CUDA_ERROR_NOT_PERMITTED, but this is not
//! required"; the emulator always refuses, as cuStreamAddCallback's callbacks are, cuda.h 15288), and
//! so is any call before cuInit with CUDA_ERROR_NOT_INITIALIZED (cuda.h 5188: cuInit "must be called
//! before any other function from the driver API").
CUresult entry() noexcept;
//! entry(), then a current context that is alive.
CUresult entry_ctx(Context** out) noexcept;

//! Stream-capture rules for a call that is illegal while a stream captures (cuda.h's
//! \note_capture_legacy / cudaStreamCaptureModeGlobal): invalidates every capture the rule reaches and
//! returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, or CUDA_SUCCESS when nothing captures.
CUresult unsafe_during_capture(Context* ctx) noexcept;

//! An entry point as the driver's would be: it never throws. An emulator call that cannot allocate
//! returns CUDA_ERROR_OUT_OF_MEMORY ("the API call failed because it was unable to allocate enough
//! memory or other resources to perform the requested operation", cuda.h's CUresult), so that a
//! process whose allocations fail (tests/faults/allocation_failure_test.cpp) sees a driver error, as
//! on a GPU, not a C++ exception through a C interface; any other exception is CUDA_ERROR_UNKNOWN.
//! Registered in place of the entry point itself by CUEMU_EXPORT.
template <auto F>
struct Guarded;
template <class... A, CUresult (*F)(A...)>
struct Guarded<F> {
  static CUresult call(A... a) noexcept {
    try {
      return F(a...);
    } catch (const std::bad_alloc&) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    } catch (...) {
      return CUDA_ERROR_UNKNOWN;
    }
  }
};

}  // namespace cuemu

#define CUEMU_CAT2(a, b) a##b
#define CUEMU_CAT(a, b) CUEMU_CAT2(a, b)
//! Registers `fn` (guarded: Guarded) as `name` at ABI `version`.
#define CUEMU_EXPORT(name, version, fn)                              \
  static const ::cuemu::Register CUEMU_CAT(cuemu_export_, __LINE__)( \
      name, version, reinterpret_cast<void*>(&::cuemu::Guarded<&fn>::call))
#define CUEMU_EXPORT_PT(name, version, fn)                           \
  static const ::cuemu::Register CUEMU_CAT(cuemu_export_, __LINE__)( \
      name, version, reinterpret_cast<void*>(&::cuemu::Guarded<&fn>::call), true)
#define CUEMU_ENTER()                                                        \
  do {                                                                       \
    if (const CUresult r_ = ::cuemu::entry(); r_ != CUDA_SUCCESS) return r_; \
  } while (0)
#define CUEMU_ENTER_CTX(ctx)                                                         \
  ::cuemu::Context* ctx = nullptr;                                                   \
  do {                                                                               \
    if (const CUresult r_ = ::cuemu::entry_ctx(&ctx); r_ != CUDA_SUCCESS) return r_; \
  } while (0)
