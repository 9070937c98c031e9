#pragma once
// An allocation (a tensor): a run of pages in the address space, with its name and the release points
// of stream pins whose work may still be running.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "vmm/event_pool.hpp"

namespace tvmm::detail {

struct Allocation {
  backend::DevPtr base = 0;
  std::size_t bytes = 0;
  std::uint32_t first_page = 0;
  std::uint32_t pages = 0;
  std::string name;
  //! References: the owner (a Tensor, or the raw owner after Tensor::release) plus one per live Pin.
  //! The memory is reclaimed when the count reaches zero.
  std::atomic<std::uint32_t> refs{1};
  //! Owned through a raw pointer (after Tensor::release); guarded by the pager lock.
  bool raw_owned = false;

  //! Release points of stream pins (events recorded on the pin's stream at unpin) that may not have
  //! completed; an eviction's write-back and a free wait for them. Guarded by uses_mu.
  std::mutex uses_mu;
  std::vector<EventRef> uses;
};

}  // namespace tvmm::detail
