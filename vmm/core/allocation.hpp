#pragma once
// An allocation (a tensor): a run of pages in the address space, with its name and the release points
// of stream pins whose work may still be running.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "vmm/core/event_pool.hpp"
#include "vmm/core/release_points.hpp"

namespace tvmm::vmm {

struct ArenaPage;

//! A run of an allocation's pages: `count` pages from page `first` of it (what a pin holds).
struct PageSpan {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

struct Allocation {
  std::uint64_t id = 0;  //!< unique for the pager's life; names the tensor in access traces
  device::DevPtr base = 0;
  std::size_t bytes = 0;
  std::uint32_t first_page = 0;
  std::uint32_t pages = 0;
  std::string name;
  //! References: the owner (a Tensor, or the raw owner after Tensor::release) plus one per live Pin.
  //! The memory is reclaimed when the count reaches zero.
  std::atomic<std::uint32_t> refs{1};
  //! Owned through a raw pointer (after Tensor::release); guarded by the pager lock.
  bool raw_owned = false;
  //! Below the admission threshold: pinned for life (one extra pin and reference, released when the
  //! owner lets go), so never evicted. Arena pages are pinned for life too.
  bool pinned_for_life = false;
  //! A user's tensor (false for an arena page, which the arena owns).
  bool owned = true;
  //! Below the NVMe admission threshold (Config::nvme_min_bytes): its pages never go to NVMe.
  bool host_only = false;
  //! For a small allocation packed into the arena: its page and run of 256-byte units. Such an
  //! allocation owns no page-table entries (the arena page's backing allocation does).
  ArenaPage* arena = nullptr;
  std::uint32_t arena_unit = 0;
  std::uint32_t arena_units = 0;

  //! The latest release point of a stream pin per stream (vmm/core/release_points.hpp: its event is
  //! recorded when something must follow it); an eviction's write-back and a free wait for them. A
  //! later release on the same stream supersedes an earlier one (stream order), so this stays as small
  //! as the number of streams.
  struct Use {
    device::StreamHandle stream;
    ReleaseTicket point;
  };
  std::mutex uses_mu;
  std::vector<Use> uses;
  //! uses.size(), readable without uses_mu: a host pin skips the lock when nothing is outstanding.
  std::atomic<std::uint32_t> use_count{0};
  //! The pager's pin count at this tensor's latest stream unpin (0: none yet). Tensors released with
  //! the pager's latest mark (PagerImpl::latest_release_) were used by the work queued last on a
  //! stream: next-use eviction defers them (policies/belady_policy.hpp).
  std::atomic<std::uint64_t> released_at{0};
};

}  // namespace tvmm::vmm
