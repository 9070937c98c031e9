#include "vmm/transparent/remap_heap.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <new>
#include <vector>

#include "common/scope_guard.hpp"
#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

using device::ChunkLocation;
using device::DevPtr;

RemapHeap::RemapHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev)
    : TransparentHeap(config, std::move(drain), std::move(dev)) {
  const Config& c = this->config();
  // One page more than the tiers' address range: the staging page where remaps fill their target.
  space_ = std::make_unique<AddressSpace>(
      device(), c.va_size + page(), page(),
      "the heap reserves device.va_size = " + format_bytes(c.va_size) + " and one staging page");
  staging_ = space_->addr(*space_->allocate(1));
  lo_ = space_->base();
  hi_ = lo_ + std::uint64_t{space_->pages()} * page();
  widen_envelope(lo_, hi_);
  frames_.resize(space_->pages());
  device_ = std::make_unique<DeviceTier>(device(), page(), static_cast<std::uint32_t>(c.device_budget / page()));
  host_ = std::make_unique<DeviceTier>(device(), page(), static_cast<std::uint32_t>(c.host_budget / page()),
                                       ChunkLocation::host);
}

RemapHeap::~RemapHeap() {
  release_all();
  retry_releases();  // what stays mapped now stays so: the frames and the reservation then fail to go
}

DevPtr RemapHeap::do_reserve(std::size_t pages) {
  if (!unreleased_.empty()) retry_releases();
  const auto first = space_->allocate(static_cast<std::uint32_t>(pages));
  if (!first) {
    throw out_of_memory("tvmm: cannot allocate " + std::to_string(pages) +
                        " pages: no free run that long in the address reservation (va_size = " +
                        format_bytes(config().va_size) + "); raise TVMM_DEVICE_VA_SIZE");
  }
  return space_->addr(*first);
}

// The heap counts frames by budget; a pool has none to give beyond them only while the GPU has no memory
// for a new one (DeviceTier::try_acquire: other allocations took it since the budget was checked).
void RemapHeap::no_frame() {
  if (!device_->short_of_memory() && !host_->short_of_memory()) {
    throw out_of_memory("tvmm: no frame left for a new page (internal accounting error)");
  }
  auto state = [](const DeviceTier& t) {
    return t.short_of_memory() ? "memory for only " + std::to_string(t.created()) + " of its " +
                                     std::to_string(t.budget()) + " frames (other allocations hold the rest)"
                               : "all " + std::to_string(t.budget()) + " frames in use";
  };
  // The advice names the pool whose memory ran out: the device pool's comes from the GPU, the
  // host-located pool's from the machine's RAM.
  std::string advice;
  if (device_->short_of_memory())
    advice = "; free the GPU memory other allocations or processes hold, or lower TVMM_DEVICE_BUDGET";
  if (host_->short_of_memory()) {
    advice += std::string(advice.empty() ? "; " : "; and ") +
              "this machine could not give the host-located pool more memory: free host memory, or lower "
              "TVMM_HOST_BUDGET (" +
              format_bytes(static_cast<std::size_t>(host_->budget()) * page()) + ") to what the machine can hold";
  }
  throw out_of_memory("tvmm: no memory for a new page: the device pool has " + state(*device_) +
                      " and the host-located pool has " + state(*host_) + advice);
}

ChunkLocation RemapHeap::do_place(DevPtr va, ChunkLocation wanted) {
  ChunkLocation where = wanted;
  auto frame = pool(where).try_acquire();
  if (!frame && where == ChunkLocation::device && pool(where).short_of_memory()) {
    where = ChunkLocation::host;  // the GPU is short: the page starts on the host and is promoted later
    frame = pool(where).try_acquire();
  }
  if (!frame) {
    // No frame, and the pools that are short wait a second between creations. The heap has no page to
    // evict into: without a frame the program's allocation fails. So each short pool tries once more now
    // (the memory may be back: a transient failure, or another allocation freed); one cuMemCreate costs
    // little beside a failed cudaMalloc. (The emulator's allocation-failure sweep found a heap refusing
    // every allocation for a second after one creation failed for want of host memory.)
    for (const ChunkLocation loc : {ChunkLocation::device, ChunkLocation::host}) {
      if (loc == ChunkLocation::device && wanted != loc) continue;  // a page meant for the host stays there
      if (pool(loc).short_of_memory() && (frame = pool(loc).try_acquire(DeviceTier::Retry::now))) {
        where = loc;
        break;
      }
    }
  }
  if (!frame) no_frame();
  common::ScopeGuard give_back([&] { pool(where).release(*frame); });  // also on std::bad_alloc
  if (auto s = device().map(va, page(), pool(where).chunk(*frame)); !s.ok()) {
    throw_status(s, "map(page, frame)", __FILE__, __LINE__);
  }
  give_back.dismiss();
  frame_of(va) = *frame;
  return where;
}

void RemapHeap::do_placed(DevPtr va, std::size_t pages) { TVMM_CHECK(device().set_access(va, pages * page())); }

std::size_t RemapHeap::unmap_from(DevPtr va, std::size_t pages, const std::vector<ChunkLocation>& where,
                                  std::size_t from, device::Status* failed) noexcept {
  device::Status s;
  std::size_t i = from;
  if (from == 0 && !where.empty() && where.size() == pages) {
    // One unmap for a whole allocation (each page was its own map; unmap takes whole mappings).
    s = device().unmap(va, pages * page());
    if (s.ok()) i = pages;
  } else {
    while (i < where.size() && (s = device().unmap(va + i * page(), page())).ok()) ++i;
  }
  if (failed != nullptr) *failed = s;
  return i;
}

void RemapHeap::give_back_freed(DevPtr va, std::size_t pages, const std::vector<ChunkLocation>& where) noexcept {
  for (std::size_t i = 0; i < where.size(); ++i) pool(where[i]).release(frame_of(va + i * page()));
  space_->free(static_cast<std::uint32_t>((va - lo_) / page()), static_cast<std::uint32_t>(pages));
}

void RemapHeap::do_release(DevPtr va, std::size_t pages, const std::vector<ChunkLocation>& where) {
  device::Status failed;
  const std::size_t unmapped = unmap_from(va, pages, where, 0, &failed);
  if (unmapped == where.size()) {
    give_back_freed(va, pages, where);
    return;
  }
  // Keep the frames rather than reuse memory that may still be mapped, and try again later: a failure
  // may pass (before, the memory was lost for good).
  try {
    unreleased_.push_back({va, pages, where, unmapped});
    std::fprintf(stderr, "tvmm: unmapping a freed allocation failed (%s); tried again before each allocation\n",
                 device::errc_name(failed.code));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tvmm: unmapping a freed allocation failed (%s); its memory is leaked\n",
                 device::errc_name(failed.code));
  }
}

void RemapHeap::retry_releases() noexcept {
  std::erase_if(unreleased_, [&](Unreleased& u) {
    u.unmapped = unmap_from(u.va, u.pages, u.where, u.unmapped);
    if (u.unmapped != u.where.size()) return false;
    give_back_freed(u.va, u.pages, u.where);
    return true;
  });
}

bool RemapHeap::do_move(DevPtr va, ChunkLocation from, ChunkLocation to) {
  DeviceTier& target_pool = pool(to);
  const auto target = target_pool.try_acquire();
  if (!target) {
    if (target_pool.short_of_memory()) return false;  // the page stays where it is
    throw out_of_memory("tvmm: no frame to remap a page into (internal accounting error)");
  }
  const device::ChunkHandle chunk = target_pool.chunk(*target);
  const device::ChunkHandle old = pool(from).chunk(frame_of(va));
  const bool host_threads_touch = device().properties().host_accessible;
  void* const host_va = reinterpret_cast<void*>(va);
  common::ScopeGuard give_back([&] { target_pool.release(*target); });

  // 1. The target, mapped at the staging page.
  TVMM_CHECK(device().map(staging_, page(), chunk));
  common::ScopeGuard unmap_staging([&] { (void)device().unmap(staging_, page()); });
  TVMM_CHECK(device().set_access(staging_, page()));

  // 2. On the simulator the program's threads are its "kernels" and never drain: make the page
  //    read-only so no write lands in the old copy after it is taken (a fault handler waits for step 4).
  remapping_.store(true, std::memory_order_release);
  common::ScopeGuard end_window([&] {
    remap_epoch_.fetch_add(1, std::memory_order_acq_rel);
    remapping_.store(false, std::memory_order_release);
  });
  if (host_threads_touch) ::mprotect(host_va, page(), PROT_READ);
  common::ScopeGuard restore([&] {
    if (host_threads_touch) ::mprotect(host_va, page(), PROT_READ | PROT_WRITE);
  });

  // 3. Copy the page into the target (device to device: both ends are in the reservation).
  const auto kind = to == ChunkLocation::host ? device::CopyKind::device_to_host : device::CopyKind::host_to_device;
  TVMM_CHECK(device().copy_device(staging_, va, page(), kind, stream()));
  TVMM_CHECK(device().synchronize_stream(stream()));

  // 4. Swap: the address now maps the target, with access. If mapping it or granting access fails, the
  //    old chunk goes back, its bytes intact (the copy only read them). Before, a failed grant left the
  //    address mapped to the target without access while the target went back to its pool: the next
  //    kernel there faulted and the page's bytes were lost (the emulator's allocation-failure sweep).
  TVMM_CHECK(device().unmap(staging_, page()));
  unmap_staging.dismiss();
  TVMM_CHECK(device().unmap(va, page()));
  device::Status s = device().map(va, page(), chunk);
  const char* failed = "map(va, page, target)";
  if (s.ok() && !(s = device().set_access(va, page())).ok()) {
    failed = "set_access(va, page) of the target";
    if (!device().unmap(va, page()).ok()) {
      // The target stays mapped at the address: never reused (its frame is not given back). The page
      // keeps its old frame, which its release gives back to the pool it came from.
      give_back.dismiss();
      throw_status(s, failed, __FILE__, __LINE__);
    }
  }
  if (!s.ok()) {
    if (device().map(va, page(), old).ok()) (void)device().set_access(va, page());
    throw_status(s, failed, __FILE__, __LINE__);
  }
  restore.dismiss();
  give_back.dismiss();
  pool(from).release(frame_of(va));
  frame_of(va) = *target;
  return true;
}

}  // namespace tvmm::vmm
