#pragma once
// Transparent mode on the VMM API (see transparent_heap.hpp): every page is mapped at its address, on a
// device frame or on a host-located chunk (ChunkLocation::host: cuMemCreate at the GPU's host NUMA
// node), and moves by a remap at a quiescent point, so a device access never faults.
//
// On a host-accessible backend (the simulator) the program's own threads touch pages at any time, so a
// page being remapped is made read-only first; in_remap_window() tells a fault handler whether a
// faulting address is inside a remap that will end, so it can wait and retry.

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "vmm/core/address_space.hpp"
#include "vmm/core/device_tier.hpp"
#include "vmm/transparent/transparent_heap.hpp"

namespace tvmm::vmm {

class RemapHeap final : public TransparentHeap {
 public:
  RemapHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev);
  ~RemapHeap() override;

  [[nodiscard]] const char* mechanism() const noexcept override { return "vmm"; }
  //! Async-signal-safe: the address is inside the heap's reservation.
  [[nodiscard]] bool contains(const void* ptr) const noexcept override {
    const auto p = reinterpret_cast<device::DevPtr>(ptr);
    return p >= lo_ && p < hi_;
  }
  //! Async-signal-safe: a remap is under way (a fault in the heap ends when it does).
  [[nodiscard]] bool remapping() const noexcept { return remapping_.load(std::memory_order_acquire); }
  //! Async-signal-safe: counts finished remaps (a fault handler retries a faulting access once per value).
  [[nodiscard]] std::uint64_t remap_epoch() const noexcept { return remap_epoch_.load(std::memory_order_acquire); }
  //! The heap's address range [first, second).
  [[nodiscard]] std::pair<device::DevPtr, device::DevPtr> range() const noexcept { return {lo_, hi_}; }

 private:
  device::DevPtr do_reserve(std::size_t pages) override;
  device::ChunkLocation do_place(device::DevPtr va, device::ChunkLocation wanted) override;
  void do_placed(device::DevPtr va, std::size_t pages) override;
  bool do_move(device::DevPtr va, device::ChunkLocation from, device::ChunkLocation to) override;
  void do_release(device::DevPtr va, std::size_t pages, const std::vector<device::ChunkLocation>& where) override;
  [[nodiscard]] bool moves_need_drain() const noexcept override { return true; }
  [[nodiscard]] bool may_take(device::ChunkLocation to) const noexcept override {
    return (to == device::ChunkLocation::device ? *device_ : *host_).may_acquire();
  }
  std::size_t do_give_back(std::size_t pages, std::size_t) override {
    return device_->release_idle(static_cast<std::uint32_t>(std::min<std::size_t>(pages, UINT32_MAX)));
  }
  [[nodiscard]] std::size_t idle_device_pages() const noexcept override { return device_->idle(); }

  [[noreturn]] void no_frame();
  // A freed allocation's pages: unmaps those of `where` from page `from` on (a whole allocation in one
  // call), stopping at the first that fails (its status in `*failed`); returns how many of `where` are
  // unmapped then.
  std::size_t unmap_from(device::DevPtr va, std::size_t pages, const std::vector<device::ChunkLocation>& where,
                         std::size_t from, device::Status* failed = nullptr) noexcept;
  // Gives a freed allocation's frames and addresses back, once every page of it is unmapped.
  void give_back_freed(device::DevPtr va, std::size_t pages, const std::vector<device::ChunkLocation>& where) noexcept;
  // Retries the unmaps that failed when their allocations were freed (before each reservation, and at
  // the heap's end).
  void retry_releases() noexcept;
  //! A freed allocation whose unmap failed: kept, with its frames, until an unmap succeeds (retried
  //! before each allocation), rather than lost for good. Memory that may still be mapped is never
  //! reused.
  struct Unreleased {
    device::DevPtr va;
    std::size_t pages;
    std::vector<device::ChunkLocation> where;
    std::size_t unmapped;  // pages of `where` unmapped already
  };
  std::vector<Unreleased> unreleased_;
  DeviceTier& pool(device::ChunkLocation where) noexcept {
    return where == device::ChunkLocation::device ? *device_ : *host_;
  }
  std::uint32_t& frame_of(device::DevPtr va) noexcept { return frames_[(va - lo_) / page()]; }

  std::unique_ptr<AddressSpace> space_;
  std::unique_ptr<DeviceTier> device_;
  std::unique_ptr<DeviceTier> host_;
  std::vector<std::uint32_t> frames_;  // per page of the reservation: its frame in its pool
  device::DevPtr staging_ = 0;         // one page of the reservation where a remap's target is filled
  device::DevPtr lo_ = 0, hi_ = 0;
  std::atomic<bool> remapping_{false};
  std::atomic<std::uint64_t> remap_epoch_{0};
};

}  // namespace tvmm::vmm
