#pragma once
// The device tier: a pool of physical frames of page_size bytes. Frames are created on first need, up
// to the budget, then recycled forever: creating physical memory costs hundreds of microseconds on a
// real GPU, so the hot path never creates or releases it. All methods require the pager lock.
// With a frame window (the pager's tier), each frame is also mapped, once, at an address of its own in a
// reservation of the tier's (frame_addr): the pager's copies go there, so that a copy never depends on
// which tensor address the frame is mapped at, nor on when that mapping changes (docs/architecture.md,
// "Frame addresses").
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
  //! Whether each frame is also mapped at an address of its own (frame_addr), for copies.
  enum class Window : bool { none, mapped };
  //! With Window::mapped, reserves budget_frames pages of address space at once (throws on failure).
  DeviceTier(device::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
             device::ChunkLocation where = device::ChunkLocation::device, Window window = Window::none);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  //! A free frame (recycled, or newly created while under budget), or nullopt when all are in use. When
  //! the device has no memory for a new frame, nullopt too (the caller evicts into the frames there
  //! are): the tier is then short (said once on stderr) and tries creating again a second later, or at
  //! once while it has no frame at all. Throws for other device failures.
  //! `Retry::now`: while short, tries creating a frame before the second is up, for a caller with no
  //! frame to evict into, whose alternative is to fail (transparent mode's heap: a failed cudaMalloc).
  enum class Retry : bool { after_a_second, now };
  std::optional<std::uint32_t> try_acquire(Retry retry = Retry::after_a_second);
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
  //! A tier with a frame window gives none back (0): its frames stay mapped there for the tier's life
  //! (transparent mode's heap, the one caller, has no window).
  std::uint32_t release_idle(std::uint32_t frames) noexcept;
  //! Frames created and not in use.
  [[nodiscard]] std::uint32_t idle() const noexcept { return static_cast<std::uint32_t>(free_.size()); }
  [[nodiscard]] device::ChunkHandle chunk(std::uint32_t frame) const noexcept { return chunks_[frame]; }
  //! The address `frame` is mapped at for as long as it exists, with access granted (Window::mapped
  //! only): the same memory as the tensor addresses mapped to it, which may change meanwhile.
  [[nodiscard]] device::DevPtr frame_addr(std::uint32_t frame) const noexcept {
    return window_ + device::DevPtr{frame} * page_size_;
  }

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
  device::DevPtr window_ = 0;  // the frames' own addresses (Window::mapped), or 0
  std::uint32_t in_use_ = 0;
  std::uint32_t peak_ = 0;
  std::vector<device::ChunkHandle> chunks_;  // by frame number; those in gone_ hold no memory
  std::vector<std::uint32_t> free_;          // created and idle
  std::vector<std::uint32_t> free_at_;       // by frame number: its index in free_, or kNotFree (take())
  static constexpr std::uint32_t kNotFree = UINT32_MAX;
  void push_free(std::uint32_t frame) noexcept;
  // Creates frame `f`'s memory (and maps it in the window); false when the device has no memory for it.
  // Throws for other failures, leaving nothing behind.
  bool create(std::uint32_t f, device::ChunkHandle* out);
  // Unmaps frame `f` from the window (if any) and gives its memory back; false (with a warning) if the
  // device refuses either. For the destructor.
  bool destroy(std::uint32_t f, const char* what) noexcept;
  std::uint32_t pop_free() noexcept;
  std::vector<std::uint32_t> gone_;  // frame numbers whose memory was given back (release_idle)
  using Clock = std::chrono::steady_clock;
  //! A new frame may be tried: within the budget, and the device is not short (or the next try is due;
  //! a tier with no frame at all always tries).
  [[nodiscard]] bool may_create(Retry retry = Retry::after_a_second) const noexcept {
    return created() < budget_ && (retry == Retry::now || created() == 0 || Clock::now() >= retry_at_);
  }
  bool short_ = false;          // the device had no memory for the last new frame
  Clock::time_point retry_at_;  // while short: no new frame is tried before then
};

}  // namespace tvmm::vmm
