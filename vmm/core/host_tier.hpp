#pragma once
// The host tier: `slots` frames of page_size bytes in one block allocated (and bound to a NUMA node) by
// the pager, registered with the device backend for fast copies (pinned on a real GPU) for the tier's
// life. All methods require the lock.

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/device/device_backend.hpp"

namespace tvmm::vmm {

class HostTier {
 public:
  HostTier(device::DeviceBackend& dev, void* base, std::size_t page_size, std::uint32_t slots);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  std::optional<std::uint32_t> try_acquire() noexcept;
  void release(std::uint32_t slot) noexcept;
  [[nodiscard]] void* ptr(std::uint32_t slot) const noexcept { return base_ + std::size_t{slot} * page_size_; }

  [[nodiscard]] std::uint32_t budget() const noexcept { return slots_; }
  [[nodiscard]] std::uint32_t in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::uint32_t free_count() const noexcept { return slots_ - in_use_; }
  [[nodiscard]] std::uint32_t peak() const noexcept { return peak_; }
  //! How many times the tier has filled up: try_acquire handed out its last free slot. The next page
  //! that needs a slot then takes a kept copy's back or spills a page to NVMe.
  [[nodiscard]] std::uint64_t fills() const noexcept { return fills_; }

 private:
  device::DeviceBackend& dev_;
  std::size_t page_size_;
  std::uint32_t slots_;
  std::byte* base_ = nullptr;
  std::uint32_t in_use_ = 0;
  std::uint32_t peak_ = 0;
  std::uint64_t fills_ = 0;
  std::vector<std::uint32_t> free_;
};

}  // namespace tvmm::vmm
