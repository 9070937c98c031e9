#pragma once
// Transparent mode's fallback where the device has no host-located VMM memory (see
// transparent_heap.hpp): each allocation is managed memory (cuMemAllocManaged), which device and host
// both reach at one address while the driver migrates its pages. The heap's policy still decides
// where each page should live and says so to the driver: its preferred location
// (cuMemAdvise SET_PREFERRED_LOCATION) and a prefetch (cuMemPrefetchAsync) to it. A move never
// unmaps anything, so it needs no quiescent point.

#include <map>
#include <memory>
#include <vector>

#include "vmm/transparent/transparent_heap.hpp"

namespace tvmm::vmm {

class ManagedHeap final : public TransparentHeap {
 public:
  ManagedHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev);
  ~ManagedHeap() override;

  [[nodiscard]] const char* mechanism() const noexcept override { return "um"; }
  //! Inside a live managed allocation of this heap.
  [[nodiscard]] bool contains(const void* ptr) const noexcept override;

 private:
  device::DevPtr do_reserve(std::size_t pages) override;
  device::ChunkLocation do_place(device::DevPtr va, device::ChunkLocation wanted) override;
  void do_placed(device::DevPtr va, std::size_t pages) override;
  bool do_move(device::DevPtr va, device::ChunkLocation from, device::ChunkLocation to) override;
  void do_release(device::DevPtr va, std::size_t pages, const std::vector<device::ChunkLocation>& where) override;
  [[nodiscard]] bool moves_need_drain() const noexcept override { return false; }
  [[nodiscard]] bool may_take(device::ChunkLocation) const noexcept override { return true; }
  std::size_t do_give_back(std::size_t, std::size_t demoted) override;
  [[nodiscard]] std::size_t idle_device_pages() const noexcept override { return 0; }
  void place(device::DevPtr va, device::ChunkLocation where);

  mutable std::mutex ranges_mu_;                  // guards ranges_ (contains() runs without the heap lock)
  std::map<device::DevPtr, std::size_t> ranges_;  // allocation -> bytes (whole pages)
};

}  // namespace tvmm::vmm
