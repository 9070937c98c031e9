#pragma once
// A fake CUDA driver for the CUDA backend's unit tests (cuda_backend_test.cpp): the backend's own
// function-pointer table (device::cuda::Api), filled with functions that record each call and behave
// like a GPU where the backend depends on it. No GPU and no driver are needed.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/device/cuda/cuda_api.hpp"
#include "tvmm/config.hpp"

namespace tvmm::test::fake_cuda {

namespace cu = tvmm::device::cuda;

inline constexpr std::size_t kGranularity = 64 * KiB;

// One recorded driver call: its name, the address and size it concerned, and a stream or event.
struct Call {
  std::string name;
  std::uintptr_t ptr = 0;
  std::size_t bytes = 0;
  const void* handle = nullptr;  // stream (copies, records, waits) or event (waited for)
  const void* event = nullptr;   // event recorded or waited on
};

// The fake GPU: every stream runs its work at once (so ordering is the order of calls), device
// addresses are host memory reserved with mmap, so copies and host callables really move bytes. Each
// allocation (cuMemCreate) is a memfd, and cuMemMap maps it shared, so one allocation mapped at two
// addresses shows the same bytes at both, as on a GPU (the pager copies through each frame's own
// address and kernels read the tensor's).
struct Fake {
  std::mutex mu;
  std::vector<Call> log;
  std::vector<std::pair<void*, std::size_t>> reservations;
  std::uint64_t next_handle = 1;
  std::vector<int> memfds;  // by handle - 1: the allocation's memory (-1 once released)
  int streams = 0, events = 0;
  bool host_numa = false;              // the device supports host-located VMM chunks (on host node 1)
  bool managed = false;                // the device supports managed memory with concurrent access
  int current_device = 0;              // cuCtxGetDevice's answer while a context is current
  CUresult map_result = CUDA_SUCCESS;  // what cuMemMap returns (a failure maps nothing)
  void add(Call c) {
    std::lock_guard lk(mu);
    log.push_back(std::move(c));
  }
};
//! The fake the driver table below records into: set by a test for its length.
extern Fake* g_fake;

//! The calling thread's stack of current contexts (cuCtxPushCurrent / cuCtxPopCurrent).
std::vector<CUcontext>& fake_stack();

//! The recorded calls named `name`, in order.
std::vector<Call> calls(const std::string& name);

// Index of the first call matching `pred` at or after `from`, or SIZE_MAX.
template <class Pred>
std::size_t find_call(std::size_t from, Pred pred) {
  std::lock_guard lk(g_fake->mu);
  for (std::size_t i = from; i < g_fake->log.size(); ++i) {
    if (pred(g_fake->log[i])) return i;
  }
  return SIZE_MAX;
}

//! The driver table: each entry records its call in *g_fake and answers as the fake GPU does.
std::shared_ptr<const cu::Api> fake_api();

}  // namespace tvmm::test::fake_cuda
