#pragma once
// Transparent mode's memory (the LD_PRELOAD interposer and the PyTorch entry points).
//
// The program never pins, so the heap cannot know when device work touches a page. So every page of a
// live allocation stays usable at its address for the allocation's life, on the device or on the
// host, and the heap only decides *where* each page lives:
//   - an allocation under pressure demotes the least recently used device pages to the host, so the
//     new allocation (the hottest memory there is) gets device memory;
//   - maintain() (called at the program's synchronising calls) releases deferred frees and promotes the
//     most recently used host pages into device memory that frees left idle.
// Capacity is the device budget plus the host budget; the NVMe tier needs the explicit API.
//
// This class holds that policy and the bookkeeping; a subclass is the mechanism that puts a page
// somewhere:
//   RemapHeap   (remap_heap.*)   VMM: a page is mapped on a device frame or a host-located chunk, and
//                                moves by a remap, only at quiescent points (after `drain`);
//   ManagedHeap (managed_heap.*) the um fallback: managed memory, placed with advice and prefetches.
// make_transparent_heap picks one. Thread-safe: one mutex.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "tvmm/config.hpp"

namespace tvmm::vmm {

class TransparentHeap {
 public:
  //! Called each time the heap is about to drain the device (wait, with the backend's
  //! synchronize_device, for all work queued in the device's context, the program's included) before
  //! it moves or frees pages, and before it releases memory freed in stream order. The interposer closes
  //! its launch gate there (until the heap operation ends).
  using Drain = std::function<void()>;
  //! True while some stream of the program captures a graph: then nothing may synchronise the device
  //! (a device synchronise invalidates a capture; CUDA runtime API, "Stream capture").
  using Capturing = std::function<bool()>;

  virtual ~TransparentHeap();
  TransparentHeap(const TransparentHeap&) = delete;
  TransparentHeap& operator=(const TransparentHeap&) = delete;

  //! "vmm" or "um".
  [[nodiscard]] virtual const char* mechanism() const noexcept = 0;

  //! A new allocation of `bytes` (> 0), usable at once, placed on the device when it fits after
  //! demoting colder pages. Throws tvmm::out_of_memory past the capacity or the address space.
  void* allocate(std::size_t bytes);
  //! Frees an allocation at once (draining first, as cudaFree does). Throws tvmm::invalid_argument for
  //! a pointer that is not a live allocation's start (a double free).
  void free(void* ptr);
  //! Stream-ordered free (cudaFreeAsync): the memory is released at the next quiescent point.
  void free_deferred(void* ptr);
  //! Stream-ordered free without a drain (tvmm_free, cudaFreeAsync on a GPU): an event recorded on the
  //! program's `stream` (a CUstream of the device's context) marks the end of the work queued there so
  //! far, and the pages are released once it has completed (checked at every later allocation and
  //! quiescent point; an allocation that needs them waits for that event only). When the event cannot be
  //! recorded there, frees as free() does. Throws tvmm::invalid_argument as free() does.
  void free_after(void* ptr, device::StreamHandle stream);
  //! True when `ptr` lies inside memory this heap handed out or may hand out (so a free of it is the
  //! heap's to judge, and must not go to another allocator).
  [[nodiscard]] virtual bool contains(const void* ptr) const noexcept = 0;
  //! The size of the live allocation starting at `ptr`, or 0.
  [[nodiscard]] std::size_t size_of(const void* ptr) const;
  //! The live allocation `ptr` points into: its start and the bytes asked for; {0, 0} when none.
  [[nodiscard]] std::pair<device::DevPtr, std::size_t> allocation_of(const void* ptr) const;
  //! Where the page holding `ptr` lives now (device or host), or nothing when `ptr` is in no live
  //! allocation's pages.
  [[nodiscard]] std::optional<device::ChunkLocation> location_of(const void* ptr) const;
  //! Placement by use (transparent.placement = "use"): device work was just queued with `ptr` among its
  //! arguments (a word of a kernel launch's parameters, a copy's or a memset's address). Takes no lock and
  //! never waits, so the launch hooks may call it while they hold the launch gate, on any thread, even
  //! while the heap remaps. An address outside the heap's memory is ignored (a false match inside it only
  //! misleads placement). A hint: it decides where pages live, never whether they are usable.
  void note_use(const void* ptr) noexcept;
  //! Lock-free filter for note_use: false means `ptr` is in none of the heap's memory (no false negatives).
  [[nodiscard]] bool may_contain(const void* ptr) const noexcept {
    const auto p = reinterpret_cast<device::DevPtr>(ptr);
    return p >= env_lo_.load(std::memory_order_relaxed) && p < env_hi_.load(std::memory_order_relaxed);
  }
  //! True when the heap places by use (note_use is worth calling).
  [[nodiscard]] bool places_by_use() const noexcept { return by_use_; }
  //! A quiescent point: `drained` says the caller has already waited for all device work; otherwise the
  //! heap drains when it has something to do. Releases deferred frees, then promotes host pages into idle
  //! device frames and, placing by use, swaps host pages that the work since the last quiescent point
  //! used clearly more than some device pages with those (a bounded number per call).
  void maintain(bool drained);
  //! Tells the heap how to know that a graph capture is under way. While one is, the heap never drains:
  //! an allocation is served without moving pages (the device's idle frames, then the host), a free
  //! (either kind) keeps its memory for the graph's replays, which use the addresses the capture saw,
  //! until the heap is destroyed, and quiescent points do nothing.
  void set_capture_probe(Capturing capturing);

  //! Gives device memory back for an allocation made outside the heap (the program's cuMemCreate or
  //! memory-pool allocation failed for want of it): idle device frames first, then the coldest device
  //! pages are demoted to the host and their frames released; returns the bytes given back (0 during a
  //! capture, or with no host room to demote into). The heap takes no new device memory for a second
  //! after, then tries again as it does after any shortage, so memory freed later comes back to it.
  std::size_t give_back_device_memory(std::size_t bytes);
  //! The device memory an allocation outside the heap could get now: what the driver reports free, plus
  //! what give_back_device_memory could release (idle frames, and device pages that fit on the host);
  //! SIZE_MAX where the backend reports no free memory (the simulator: nothing else allocates there).
  [[nodiscard]] std::size_t device_memory_reachable() const;

  //! Byte totals for cudaMemGetInfo: capacity = device + host budget.
  struct Usage {
    std::size_t capacity = 0;   //!< bytes the program can allocate in all
    std::size_t used = 0;       //!< bytes of live allocations (whole pages)
    std::size_t on_device = 0;  //!< bytes of them on the device
  };
  [[nodiscard]] Usage usage() const;

  struct Counters {
    std::uint64_t allocations = 0, frees = 0, deferred_frees = 0;
    std::uint64_t pages_demoted = 0, pages_promoted = 0;  //!< moves device->host and host->device
    std::uint64_t drains = 0, quiescent_points = 0;
    std::uint64_t kept_for_graphs = 0;       //!< frees during a graph capture: the memory stays for the graph
    std::uint64_t stream_ordered_frees = 0;  //!< free_after: released when the freeing stream got there
    std::uint64_t ooms = 0;                  //!< allocations refused for want of capacity (PyTorch's num_ooms)
    std::uint64_t uses_noted = 0;            //!< note_use calls that named the heap's memory (collected so far)
    std::uint64_t pages_swapped = 0;         //!< pages demoted for a more used host page at quiescent points
    std::uint64_t pages_given_back = 0;      //!< device memory released for allocations outside the heap
    //! Placing by use, an estimate of the device share of the bytes the program's work touches: for each
    //! noted use, the bytes it likely touched (the whole block it named; one slot of a slab of small
    //! allocations) on the device when the uses were collected, and in all.
    std::uint64_t used_bytes_on_device = 0, used_bytes = 0;
    std::uint64_t alloc_retries = 0;  //!< allocations that first waited for frees to complete (num_alloc_retries)
    std::size_t allocated_bytes = 0;  //!< bytes the program asked for, live now (allocated_bytes.all.current)
    std::size_t allocated_peak = 0;   //!< and at most (allocated_bytes.all.peak)
    std::size_t peak_used = 0;
  };
  [[nodiscard]] Counters counters() const;
  //! The counters and budgets as one JSON object (written to stats.file at exit).
  [[nodiscard]] std::string stats_json() const;

  [[nodiscard]] const Config& config() const noexcept { return cfg_; }
  [[nodiscard]] device::DeviceBackend& device() noexcept { return *dev_; }

 protected:
  //! Validates and resolves `config` against `dev` (page size, budgets).
  TransparentHeap(const Config& config, Drain drain, std::unique_ptr<device::DeviceBackend> dev);

  [[nodiscard]] std::size_t page() const noexcept { return page_; }
  //! Releases every allocation: the subclass's destructor calls it while its mechanism still exists.
  void release_all() noexcept;
  [[nodiscard]] device::StreamHandle stream() const noexcept { return stream_; }
  //! True while a graph capture is under way (set_capture_probe); the mechanism must not synchronise.
  [[nodiscard]] bool capture_under_way() const { return capturing(); }

  // ---- the mechanism (called with the heap's mutex held) ----
  //! Address space for `pages` pages, nothing placed yet. Throws out_of_memory when there is none.
  virtual device::DevPtr do_reserve(std::size_t pages) = 0;
  //! Puts the new page at `va` on `wanted` (its contents are undefined) and returns where it went: the
  //! host when the GPU has no memory for a device frame (taken by others since the budget was checked).
  //! Throws out_of_memory when neither has room.
  virtual device::ChunkLocation do_place(device::DevPtr va, device::ChunkLocation wanted) = 0;
  //! After every page of a new allocation at `va` is placed.
  virtual void do_placed(device::DevPtr va, std::size_t pages) = 0;
  //! Moves the page at `va`, keeping its bytes, from where it is to `to`; false (nothing done) when
  //! `to` has no memory for another page now. On failure the page stays where it was with its bytes,
  //! and this throws.
  virtual bool do_move(device::DevPtr va, device::ChunkLocation from, device::ChunkLocation to) = 0;
  //! Releases an allocation of `pages` pages at `va`, of which the first where.size() were placed.
  virtual void do_release(device::DevPtr va, std::size_t pages, const std::vector<device::ChunkLocation>& where) = 0;
  //! Whether a move must wait for the program's device work first (a remap does; a prefetch does not).
  [[nodiscard]] virtual bool moves_need_drain() const noexcept = 0;
  //! Whether do_move to `to` may find memory there now (checked before draining for a move: a GPU short
  //! of memory must not cost a drain at every synchronising call).
  [[nodiscard]] virtual bool may_take(device::ChunkLocation to) const noexcept = 0;
  //! Releases device memory the heap holds without using it, up to `pages` pages' worth, after
  //! `demoted` of its pages were just moved to the host; returns the pages' worth released (vmm: idle
  //! device frames; um: the demoted pages, once their prefetches have landed).
  virtual std::size_t do_give_back(std::size_t pages, std::size_t demoted) = 0;
  //! Device memory the heap holds that no page uses, in pages (vmm: idle frames; um: none).
  [[nodiscard]] virtual std::size_t idle_device_pages() const noexcept = 0;
  //! The mechanism's memory lies in [lo, hi) (lock-free readers may see the old bounds for a moment; the
  //! bounds only grow).
  void widen_envelope(device::DevPtr lo, device::DevPtr hi) noexcept;

 private:
  // What the program frees: a block of whole pages, or a small allocation inside a slab.
  struct Freeable {
    std::size_t bytes = 0;                // asked for
    bool deferred = false;                // freed with free_deferred, released at the next quiescent point
    bool kept = false;                    // freed during a capture: kept for the graph's replays (never released)
    device::EventHandle after = nullptr;  // free_after: released once this event has completed
  };
  struct Block : Freeable {
    std::uint64_t last_use = 0;  // the clock at its allocation or its latest noted use
    // Its noted uses, each worth half as much once half_life() more uses have been collected in the heap
    // (the decay follows the program's activity, not how often it synchronises): `score` as of the use
    // clock `scored_at`.
    double score = 0;
    std::uint64_t scored_at = 0;
    bool slab = false;                         // one page of small allocations (the heap's, not the program's)
    std::vector<device::ChunkLocation> where;  // per page
  };
  // What note_use records per page of address space (indexed by page number modulo the table's size).
  struct UseSlot {
    std::atomic<std::uint64_t> stamp{0};  // the clock at the latest use
    std::atomic<std::uint32_t> uses{0};   // uses since they were last collected
  };
  // Allocations of at most page / 8 bytes share pages: each size class (a power of two, at least 256
  // bytes, cudaMalloc's alignment) has one-page slabs cut into slots of that size.
  struct Small : Freeable {
    device::DevPtr slab = 0;
  };
  struct Slab {
    std::size_t slot = 0;    // bytes per slot
    std::vector<bool> used;  // per slot
    std::size_t in_use = 0;  // slots used (live, or freed and not yet released)
  };
  using Lock = std::unique_lock<std::mutex>;

  //! The pages of a new block for `bytes` (`asked`: the program's request, for messages), placed; with
  //! `program`, counted as the program's allocation.
  device::DevPtr allocate_block(Lock& lk, std::size_t bytes, std::size_t asked, bool program, bool& drained);
  void* allocate_small(Lock& lk, std::size_t bytes, bool& drained);
  //! The program's live allocation starting at `p` (a block or a small one), or nullptr.
  Freeable* live(device::DevPtr p);
  //! Releases what the program freed at `p` (a block, or a small allocation and then its slab if empty).
  void release(Lock& lk, device::DevPtr p);
  void release_small(Lock& lk, std::map<device::DevPtr, Small>::iterator it);
  //! Waits for all device work once per operation (`drained`); false when a graph capture began before
  //! the drain could start (nothing may synchronise then: the caller moves and releases nothing).
  bool drain_once(bool& drained);
  //! Before the heap synchronises or releases memory: the Drain callback (the interposer closes its launch
  //! gate, so no capture begins until the heap operation ends), then true unless a capture is under way.
  bool fence_captures();
  //! True for a second after device memory was given back (give_back_device_memory): no page goes to the
  //! device meanwhile, so the allocation outside the heap that needed the memory finds it.
  [[nodiscard]] bool device_held_back() const noexcept;
  [[nodiscard]] bool capturing() const { return capturing_ && capturing_(); }
  //! A free during a capture: the allocation is no longer the program's, and its memory stays.
  void keep_for_graph(Freeable& b);
  void release_block(Lock& lk, std::map<device::DevPtr, Block>::iterator it);
  void release_deferred(Lock& lk);
  //! Releases the free_after blocks whose event has completed (`wait`: waits for every one).
  void release_stream_ordered(Lock& lk, bool wait);
  //! Moves up to `pages` of the coldest device pages to the host; returns how many moved.
  std::size_t demote(Lock& lk, std::size_t pages, bool& drained);
  //! The live blocks (and those kept for a graph) in rank order (ranked()).
  using Ranking = std::vector<std::pair<device::DevPtr, Block*>>;
  //! Moves host pages into idle device frames, from the hottest block of `hot` (ranked(true)) down.
  void promote(Lock& lk, const Ranking& hot, bool& drained);
  //! Placing by use: moves the uses noted since the last collection from the slots into the blocks.
  void collect_uses();
  //! Placing by use: swaps host pages of the most used blocks with device pages of clearly less used ones
  //! (a quarter more heat and one use more), at most a quarter of the device budget per call.
  void rebalance(Lock& lk, const Ranking& hot, bool& drained);
  //! A block's score decayed to the present use clock.
  [[nodiscard]] double heat(const Block& b) const noexcept;
  //! Uses after which a use counts half: twice the live blocks (about an iteration of a program that
  //! names each of its allocations once or twice per iteration), at least 64.
  [[nodiscard]] double half_life() const noexcept;
  //! The live blocks (and those kept for a graph) in rank order: coldest first, or hottest first.
  Ranking ranked(bool hottest_first);
  UseSlot& use_slot(device::DevPtr p) noexcept { return uses_[(p / page_) & use_mask_]; }
  std::uint64_t use_clock_ = 0;  // uses collected so far (under mu_)
  //! Forgets the uses noted on [va, va + pages) (the memory was freed or is new).
  void clear_uses(device::DevPtr va, std::size_t pages) noexcept;
  //! do_move and the counts; false when `to` has no memory for the page now (it stays).
  bool move(device::DevPtr va, device::ChunkLocation& where, device::ChunkLocation to, bool& drained);

  Config cfg_;
  Drain drain_;
  Capturing capturing_;
  std::unique_ptr<device::DeviceBackend> dev_;
  std::size_t page_ = 0;
  std::size_t device_pages_ = 0, host_pages_ = 0;  // the budgets in pages
  device::StreamHandle stream_ = nullptr;

  mutable std::mutex mu_;
  std::map<device::DevPtr, Block> blocks_;                // by address
  std::map<device::DevPtr, Small> small_;                 // small allocations, by address
  std::map<device::DevPtr, Slab> slabs_;                  // by the slab block's address
  std::map<std::size_t, std::set<device::DevPtr>> open_;  // slot size -> slabs with a free slot
  std::size_t used_pages_ = 0, on_device_ = 0;
  std::size_t deferred_ = 0;          // blocks freed with free_deferred, not yet released
  std::set<device::DevPtr> ordered_;  // freed with free_after (blocks and small ones), not yet released
  std::chrono::steady_clock::time_point held_back_until_{};  // see device_held_back
  // last_use stamps: advanced (under mu_) by each allocation and quiescent point, read by note_use.
  std::atomic<std::uint64_t> clock_{0};
  Counters counters_;

  // Placement by use (note_use): lock-free slots, and the bounds of the memory the mechanism hands out.
  bool by_use_ = false;
  std::unique_ptr<UseSlot[]> uses_;
  std::size_t use_mask_ = 0;
  std::atomic<device::DevPtr> env_lo_{~device::DevPtr{0}};
  std::atomic<device::DevPtr> env_hi_{0};
};

//! The heap `config` asks for (`transparent.memory`): "vmm" (RemapHeap), "um" (ManagedHeap), or
//! "auto": vmm where the device has host-located VMM memory, else um where it has managed memory, else
//! a device_error saying neither is there. `why` (if non-null) receives the reason for the choice, for
//! the log. With `backend` non-null uses it instead of creating the one the config names (tests).
std::unique_ptr<TransparentHeap> make_transparent_heap(const Config& config, TransparentHeap::Drain drain,
                                                       std::string* why = nullptr,
                                                       std::unique_ptr<device::DeviceBackend> backend = nullptr);

}  // namespace tvmm::vmm
