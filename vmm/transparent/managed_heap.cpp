#include "vmm/transparent/managed_heap.hpp"

#include <cstdio>

#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

using device::ChunkLocation;
using device::DevPtr;

ManagedHeap::ManagedHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev)
    : TransparentHeap(config, std::move(drain), std::move(dev)) {}

ManagedHeap::~ManagedHeap() { release_all(); }

bool ManagedHeap::contains(const void* ptr) const noexcept {
  const auto p = reinterpret_cast<DevPtr>(ptr);
  try {
    std::lock_guard lk(ranges_mu_);
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) return false;
    --it;
    return p < it->first + it->second;
  } catch (...) {
    return false;
  }
}

DevPtr ManagedHeap::do_reserve(std::size_t pages) {
  // Allocating managed memory is not permitted while a stream captures in global mode (it would end the
  // capture, as cudaMallocManaged does): refuse without touching the driver, the capture stays valid.
  if (capture_under_way()) {
    throw device_error(
        "tvmm: transparent mode's um mechanism cannot allocate while a graph is captured "
        "(the driver does not permit a managed allocation then): allocate before the capture, "
        "or use transparent.memory = \"vmm\" (TVMM_TRANSPARENT_MEMORY=vmm)",
        "not_supported");
  }
  void* p = nullptr;
  if (auto s = device().alloc_managed(pages * page(), &p); !s.ok()) {
    if (s.code == device::Errc::out_of_memory) {
      throw out_of_memory("tvmm: the driver has no managed memory left for " + format_bytes(pages * page()));
    }
    throw_status(s, "alloc_managed", __FILE__, __LINE__);
  }
  const auto va = reinterpret_cast<DevPtr>(p);
  widen_envelope(va, va + pages * page());
  std::lock_guard lk(ranges_mu_);
  try {
    ranges_.emplace(va, pages * page());
  } catch (...) {  // std::bad_alloc: a range no record knows would never be freed
    (void)device().free_managed(p, pages * page());
    throw;
  }
  return va;
}

void ManagedHeap::place(DevPtr va, ChunkLocation where) {
  void* p = reinterpret_cast<void*>(va);
  TVMM_CHECK(device().advise_managed(p, page(), where));
  TVMM_CHECK(device().prefetch_managed(p, page(), where, stream()));
}

ChunkLocation ManagedHeap::do_place(DevPtr va, ChunkLocation wanted) {
  place(va, wanted);
  return wanted;
}

// Prefetches run in stream order on the heap's own stream; the program's streams need not wait for
// them (managed memory is coherent), so nothing is synchronised here.
void ManagedHeap::do_placed(DevPtr, std::size_t) {}

bool ManagedHeap::do_move(DevPtr va, ChunkLocation, ChunkLocation to) {
  place(va, to);
  return true;
}

// A demoted page leaves device memory when its prefetch to the host has run: wait for the heap's stream.
std::size_t ManagedHeap::do_give_back(std::size_t, std::size_t demoted) {
  if (demoted != 0) TVMM_CHECK(device().synchronize_stream(stream()));
  return demoted;
}

void ManagedHeap::do_release(DevPtr va, std::size_t pages, const std::vector<ChunkLocation>&) {
  // The heap's prefetches of these pages must be done before the memory goes.
  (void)device().synchronize_stream(stream());
  if (auto s = device().free_managed(reinterpret_cast<void*>(va), pages * page()); !s.ok()) {
    std::fprintf(stderr, "tvmm: freeing managed memory failed (%s); it is leaked\n", device::errc_name(s.code));
  }
  std::lock_guard lk(ranges_mu_);
  ranges_.erase(va);
}

}  // namespace tvmm::vmm
