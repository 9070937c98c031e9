#pragma once
// The device tier: a pool of physical frames of page_size bytes. Frames are created on first need, up
// to the budget, then recycled forever: creating physical memory costs hundreds of microseconds on a
// real GPU, so the hot path never creates or releases it. All methods require the pager lock.
// The transparent heap uses a second pool of host-located chunks (ChunkLocation::host): the same
// mechanism, other memory.

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/device/device_backend.hpp"

namespace tvmm::vmm {

class DeviceTier {
 public:
  DeviceTier(device::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
             device::ChunkLocation where = device::ChunkLocation::device);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  //! A free frame (recycled, or newly created while under budget), or nullopt when all are in use. When
  //! the device has no memory for a new frame, nullopt too (the caller evicts into the frames there
  //! are): the tier is then short (said once on stderr) and tries creating again a second later, or at
  //! once while it has no frame at all. Throws for other device failures.
  std::optional<std::uint32_t> try_acquire();
  //! Takes `frame` if it is idle (a page whose address is still mapped to it gets it back without a
  //! driver call); false if it is in use, or not created. O(1).
  bool take(std::uint32_t frame) noexcept;
  void release(std::uint32_t frame) noexcept;
  //! Whether try_acquire would give a frame or try to create one now (false: all in use and none may be
  //! created, or the device is short and the next try is not due), without doing either.
  [[nodiscard]] bool may_acquire() const noexcept { return !free_.empty() || may_create(); }
  //! Gives up to `frames` idle frames' memory back to the device (release_chunk), for allocations made
  //! outside tvmm; returns how many. The tier then counts as short: it creates no frame for a second (so
  //! the memory is there for the allocation that needed it), then tries again as after any shortage.
  std::uint32_t release_idle(std::uint32_t frames) noexcept;
  //! Frames created and not in use.
  [[nodiscard]] std::uint32_t idle() const noexcept { return static_cast<std::uint32_t>(free_.size()); }
  [[nodiscard]] device::ChunkHandle chunk(std::uint32_t frame) const noexcept { return chunks_[frame]; }

  [[nodiscard]] std::uint32_t budget() const noexcept { return budget_; }
  //! The frames the tier can count on now: its budget, or the frames it has while the device has no
  //! memory for more (admission and capacity use this, so no frame that does not exist is counted). A
  //! tier with no frame at all tries again at once, so it still counts on its budget.
  [[nodiscard]] std::uint32_t usable() const noexcept { return short_ && created() != 0 ? created() : budget_; }
  //! True while the device had no memory for the tier's last new frame.
  [[nodiscard]] bool short_of_memory() const noexcept { return short_; }
  [[nodiscard]] std::uint32_t in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::uint32_t peak() const noexcept { return peak_; }
  [[nodiscard]] std::uint32_t created() const noexcept {
    return static_cast<std::uint32_t>(chunks_.size() - gone_.size());
  }

 private:
  device::DeviceBackend& dev_;
  std::size_t page_size_;
  std::uint32_t budget_;
  device::ChunkLocation where_;
  std::uint32_t in_use_ = 0;
  std::uint32_t peak_ = 0;
  std::vector<device::ChunkHandle> chunks_;  // by frame number; those in gone_ hold no memory
  std::vector<std::uint32_t> free_;          // created and idle
  std::vector<std::uint32_t> free_at_;       // by frame number: its index in free_, or kNotFree (take())
  static constexpr std::uint32_t kNotFree = UINT32_MAX;
  void push_free(std::uint32_t frame) noexcept;
  std::uint32_t pop_free() noexcept;
  std::vector<std::uint32_t> gone_;  // frame numbers whose memory was given back (release_idle)
  using Clock = std::chrono::steady_clock;
  //! A new frame may be tried: within the budget, and the device is not short (or the next try is due;
  //! a tier with no frame at all always tries).
  [[nodiscard]] bool may_create() const noexcept {
    return created() < budget_ && (created() == 0 || Clock::now() >= retry_at_);
  }
  bool short_ = false;          // the device had no memory for the last new frame
  Clock::time_point retry_at_;  // while short: no new frame is tried before then
};

}  // namespace tvmm::vmm
