#pragma once
// Transparent mode's memory (the LD_PRELOAD interposer and the PyTorch entry points).
//
// The program never pins, so the heap cannot know when device work touches a page, and a device access
// to an unmapped address is fatal. So every page of a live allocation stays mapped at its address: on
// a device frame, or on a host-located chunk (ChunkLocation::host) that device work reaches over the
// bus. Moving a page between the two is a remap, and remaps happen only at quiescent points, when the
// `drain` callback has waited for all of the program's device work:
//   - an allocation under pressure demotes the least recently used device pages to host chunks, so the
//     new allocation (the hottest memory there is) gets device frames;
//   - maintain() (called at the program's synchronising calls) frees deferred frees and promotes the
//     most recently used host pages into device frames that frees left idle.
// Capacity is the device budget plus the host budget; the NVMe tier needs the explicit API.
//
// Thread-safe: one mutex. On a host-accessible backend (the simulator) the program's own threads may
// touch pages at any time, so a page being remapped is made read-only first; remap_window() tells a
// fault handler whether a faulting address is inside a remap that will end, so it can wait and retry.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "tvmm/config.hpp"
#include "vmm/address_space.hpp"
#include "vmm/device_tier.hpp"

namespace tvmm::detail {

class TransparentHeap {
 public:
  //! Waits until all device work the program queued so far has completed (cudaDeviceSynchronize).
  using Drain = std::function<void()>;

  //! Creates the backend the config names; with `backend` non-null uses it instead (tests).
  TransparentHeap(const Config& config, Drain drain, std::unique_ptr<backend::DeviceBackend> backend = nullptr);
  ~TransparentHeap();
  TransparentHeap(const TransparentHeap&) = delete;
  TransparentHeap& operator=(const TransparentHeap&) = delete;

  //! A new allocation of `bytes` (> 0), mapped and accessible, placed on the device when it fits after
  //! demoting colder pages. Throws tvmm::out_of_memory past the capacity or the address space.
  void* allocate(std::size_t bytes);
  //! Frees an allocation at once (draining first, as cudaFree does). Throws tvmm::invalid_argument for
  //! a pointer inside the heap that is not a live allocation's start (a double free).
  void free(void* ptr);
  //! Stream-ordered free (cudaFreeAsync): the memory is released at the next quiescent point.
  void free_deferred(void* ptr);
  //! True when `ptr` lies inside the heap's address range (whether or not it is allocated).
  [[nodiscard]] bool contains(const void* ptr) const noexcept;
  //! The size of the live allocation starting at `ptr`, or 0.
  [[nodiscard]] std::size_t size_of(const void* ptr) const;
  //! Marks the allocation containing `ptr` as just used (a hint: kernel arguments, prefetch calls).
  void touch(const void* ptr) noexcept;
  //! A quiescent point: `drained` says the caller has already waited for all device work; otherwise the
  //! heap drains when it has something to do. Releases deferred frees, then promotes host pages.
  void maintain(bool drained);

  //! Byte totals for cudaMemGetInfo: capacity = device + host budget.
  struct Usage {
    std::size_t capacity = 0;   //!< bytes the program can allocate in all
    std::size_t used = 0;       //!< bytes of live allocations (whole pages)
    std::size_t on_device = 0;  //!< bytes of them on device frames
  };
  [[nodiscard]] Usage usage() const;

  struct Counters {
    std::uint64_t allocations = 0, frees = 0, deferred_frees = 0;
    std::uint64_t pages_demoted = 0, pages_promoted = 0;  //!< remaps device->host and host->device
    std::uint64_t drains = 0, quiescent_points = 0;
    std::size_t peak_used = 0;
  };
  [[nodiscard]] Counters counters() const;
  //! The counters and budgets as one JSON object (written to stats.file at exit).
  [[nodiscard]] std::string stats_json() const;

  [[nodiscard]] const Config& config() const noexcept { return cfg_; }
  [[nodiscard]] backend::DeviceBackend& device() noexcept { return *dev_; }

  //! Async-signal-safe: true if `addr` is in this heap and a remap is under way (so a fault there ends
  //! when the remap does: wait until remapping() is false, then retry the access).
  [[nodiscard]] bool in_remap_window(const void* addr) const noexcept {
    return remapping_.load(std::memory_order_acquire) && contains(addr);
  }
  [[nodiscard]] bool remapping() const noexcept { return remapping_.load(std::memory_order_acquire); }
  //! Async-signal-safe: counts finished remaps (a fault handler retries a faulting access once per value).
  [[nodiscard]] std::uint64_t remap_epoch() const noexcept { return remap_epoch_.load(std::memory_order_acquire); }
  //! The heap's address range [first, second).
  [[nodiscard]] std::pair<backend::DevPtr, backend::DevPtr> range() const noexcept { return {lo_, hi_}; }

 private:
  struct Page {
    std::uint32_t frame = 0;
    backend::ChunkLocation where = backend::ChunkLocation::device;
  };
  struct Block {
    std::uint32_t first = 0;  // first page in the address space
    std::size_t bytes = 0;
    std::uint64_t last_use = 0;
    bool deferred = false;  // freed with free_deferred, released at the next quiescent point
    std::vector<Page> pages;
  };
  using Lock = std::unique_lock<std::mutex>;

  DeviceTier& pool(backend::ChunkLocation where) noexcept {
    return where == backend::ChunkLocation::device ? *device_ : *host_;
  }
  void drain_once(bool& drained);
  void release_block(Lock& lk, std::map<backend::DevPtr, Block>::iterator it);
  void release_deferred(Lock& lk);
  std::size_t demote(Lock& lk, std::size_t pages, const Block* keep);
  std::size_t promote(Lock& lk);
  void remap(Lock& lk, backend::DevPtr va, Page& page, backend::ChunkLocation to);
  [[nodiscard]] std::size_t free_pages(const Lock& lk) const noexcept;

  Config cfg_;
  Drain drain_;
  std::unique_ptr<backend::DeviceBackend> dev_;
  std::size_t page_;
  std::unique_ptr<AddressSpace> space_;
  std::unique_ptr<DeviceTier> device_;
  std::unique_ptr<DeviceTier> host_;
  backend::StreamHandle stream_ = nullptr;
  backend::DevPtr staging_ = 0;  // one page of the reservation where a remap's target is filled
  backend::DevPtr lo_ = 0, hi_ = 0;

  mutable std::mutex mu_;
  std::map<backend::DevPtr, Block> blocks_;  // by address
  std::size_t used_pages_ = 0;
  std::uint64_t clock_ = 0;  // last_use stamps
  Counters counters_;
  std::atomic<bool> remapping_{false};
  std::atomic<std::uint64_t> remap_epoch_{0};
};

}  // namespace tvmm::detail
