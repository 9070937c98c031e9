#pragma once
// The device virtual-address reservation, carved into page-aligned ranges for allocations (first fit
// over a coalescing free list). Addresses never move: a range belongs to one allocation for its life.

#include <cstdint>
#include <optional>
#include <string_view>

#include "backends/device/device_backend.hpp"
#include "common/range_allocator.hpp"

namespace tvmm::vmm {

class AddressSpace {
 public:
  //! Reserves `bytes` (a multiple of page_size) on the device. If the device refuses, throws
  //! tvmm::config_error saying so, with `origin` (how the size was chosen: "device.va_size = ...").
  AddressSpace(device::DeviceBackend& dev, std::size_t bytes, std::size_t page_size, std::string_view origin);
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  //! First page of a free run of `pages`, or nullopt when no run is long enough. Throws std::bad_alloc,
  //! changing nothing, when it cannot keep a node for the run's free. Caller holds the lock.
  std::optional<std::uint32_t> allocate(std::uint32_t pages);
  //! Returns a run (never allocates: allocate() kept its node). Caller holds the lock.
  void free(std::uint32_t first, std::uint32_t pages);

  [[nodiscard]] device::DevPtr base() const noexcept { return base_; }
  [[nodiscard]] std::uint32_t pages() const noexcept { return pages_; }
  [[nodiscard]] std::uint32_t largest_free_run() const noexcept { return runs_.largest_free_run(); }
  [[nodiscard]] device::DevPtr addr(std::uint32_t page) const noexcept { return base_ + page * page_size_; }
  //! The page index of `p`, or nullopt outside the reservation.
  [[nodiscard]] std::optional<std::uint32_t> page_of(device::DevPtr p) const noexcept {
    if (p < base_ || p >= base_ + std::uint64_t{pages_} * page_size_) return std::nullopt;
    return static_cast<std::uint32_t>((p - base_) / page_size_);
  }

 private:
  device::DeviceBackend& dev_;
  std::size_t page_size_;
  std::size_t bytes_;
  device::DevPtr base_ = 0;
  std::uint32_t pages_;
  common::RangeAllocator<std::uint32_t> runs_;
};

}  // namespace tvmm::vmm
