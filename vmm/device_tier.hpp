#pragma once
// The device tier: a pool of physical frames of page_size bytes. Frames are created on first need, up
// to the budget, then recycled forever: creating physical memory costs hundreds of microseconds on a
// real GPU, so the hot path never creates or releases it. All methods require the pager lock.
// The transparent heap uses a second pool of host-located chunks (ChunkLocation::host): the same
// mechanism, other memory.

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/device/device_backend.hpp"

namespace tvmm::detail {

class DeviceTier {
 public:
  DeviceTier(backend::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
             backend::ChunkLocation where = backend::ChunkLocation::device);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  //! A free frame (recycled, or newly created while under budget), or nullopt when all are in use.
  std::optional<std::uint32_t> try_acquire();
  void release(std::uint32_t frame) noexcept;
  [[nodiscard]] backend::ChunkHandle chunk(std::uint32_t frame) const noexcept { return chunks_[frame]; }

  [[nodiscard]] std::uint32_t budget() const noexcept { return budget_; }
  [[nodiscard]] std::uint32_t in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::uint32_t peak() const noexcept { return peak_; }
  [[nodiscard]] std::uint32_t created() const noexcept { return static_cast<std::uint32_t>(chunks_.size()); }

 private:
  backend::DeviceBackend& dev_;
  std::size_t page_size_;
  std::uint32_t budget_;
  backend::ChunkLocation where_;
  std::uint32_t in_use_ = 0;
  std::uint32_t peak_ = 0;
  std::vector<backend::ChunkHandle> chunks_;
  std::vector<std::uint32_t> free_;
};

}  // namespace tvmm::detail
