#include "vmm/transparent/remap_heap.hpp"

#include <sys/mman.h>

#include <cstdio>

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

RemapHeap::~RemapHeap() { release_all(); }

DevPtr RemapHeap::do_reserve(std::size_t pages) {
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
  throw out_of_memory("tvmm: no memory for a new page: the device pool has " + state(*device_) +
                      " and the host-located pool has " + state(*host_) +
                      "; free the GPU memory other allocations or processes hold, or lower TVMM_DEVICE_BUDGET");
}

ChunkLocation RemapHeap::do_place(DevPtr va, ChunkLocation wanted) {
  ChunkLocation where = wanted;
  auto frame = pool(where).try_acquire();
  if (!frame && where == ChunkLocation::device && pool(where).short_of_memory()) {
    where = ChunkLocation::host;  // the GPU is short: the page starts on the host and is promoted later
    frame = pool(where).try_acquire();
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

void RemapHeap::do_release(DevPtr va, std::size_t pages, const std::vector<ChunkLocation>& where) {
  // One unmap for a whole allocation (each page was its own map; unmap takes whole mappings).
  const bool whole = where.size() == pages;
  device::Status s = whole ? device().unmap(va, pages * page()) : device::Status::success();
  for (std::size_t i = 0; !whole && i < where.size() && s.ok(); ++i) s = device().unmap(va + i * page(), page());
  if (!s.ok()) {
    // Keep the frames rather than reuse memory that may still be mapped.
    std::fprintf(stderr, "tvmm: unmapping a freed allocation failed (%s); its memory is leaked\n",
                 device::errc_name(s.code));
    return;
  }
  for (std::size_t i = 0; i < where.size(); ++i) pool(where[i]).release(frame_of(va + i * page()));
  space_->free(static_cast<std::uint32_t>((va - lo_) / page()), static_cast<std::uint32_t>(pages));
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

  // 4. Swap: the address now maps the target. If mapping it fails, the old chunk goes back.
  TVMM_CHECK(device().unmap(staging_, page()));
  unmap_staging.dismiss();
  TVMM_CHECK(device().unmap(va, page()));
  if (auto s = device().map(va, page(), chunk); !s.ok()) {
    if (device().map(va, page(), old).ok()) (void)device().set_access(va, page());
    throw_status(s, "map(va, page, target)", __FILE__, __LINE__);
  }
  TVMM_CHECK(device().set_access(va, page()));
  restore.dismiss();
  give_back.dismiss();
  pool(from).release(frame_of(va));
  frame_of(va) = *target;
  return true;
}

}  // namespace tvmm::vmm
