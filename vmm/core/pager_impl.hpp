#pragma once
// The pager's residency core: ties the address space, page table, device, host and NVMe tiers, eviction
// policy and transfer engine together, and implements pin, unpin, page-in, eviction, retiring
// transfers, spill, stage-in and free, which call one another under one lock. What is not residency
// has its own owner, held here: prefetch decisions (Prefetcher), kept host copies (HostCopies), NUMA
// placement (HostPlacement) and what the pager reports (Observability).
//
// Locking: one pager mutex (mu_) guards page-table fields other than the state word, the tiers, the
// allocation map and the pending page-in list. The pin hit path takes no pager lock: it CASes the state
// word and touches the policy (which has its own lock). Lock order: mu_ -> policy lock; mu_ ->
// Allocation::uses_mu. No thread waits for a transfer while holding mu_.

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "policies/access_trace.hpp"
#include "policies/eviction_policy.hpp"
#include "tvmm/pager.hpp"
#include "vmm/core/address_space.hpp"
#include "vmm/core/allocation.hpp"
#include "vmm/core/device_tier.hpp"
#include "vmm/core/event_pool.hpp"
#include "vmm/core/host_copies.hpp"
#include "vmm/core/host_placement.hpp"
#include "vmm/core/host_tier.hpp"
#include "vmm/core/nvme_tier.hpp"
#include "vmm/core/page_table.hpp"
#include "vmm/core/prefetcher.hpp"
#include "vmm/core/release_points.hpp"
#include "vmm/core/resolve_config.hpp"
#include "vmm/core/small_arena.hpp"
#include "vmm/core/transfer_engine.hpp"
#include "vmm/core/write_behind.hpp"
#include "vmm/observe/observability.hpp"

namespace tvmm::vmm {

using policies::AccessTrace;

class PagerImpl {
 public:
  //! With `backend` null, creates the backend named by the config; otherwise uses `backend` (tests
  //! wrap a backend, e.g. in FaultyDevice). Likewise `storage` for the NVMe tier (used only when the
  //! config gives the tier a budget).
  explicit PagerImpl(const Config& config, std::unique_ptr<device::DeviceBackend> backend = nullptr,
                     std::unique_ptr<storage::StorageBackend> storage = nullptr);
  ~PagerImpl();
  PagerImpl(const PagerImpl&) = delete;
  PagerImpl& operator=(const PagerImpl&) = delete;

  Allocation* allocate(std::size_t bytes, Hints hints);
  //! The owner lets go (Tensor destroyed/reset, or Pager::free). Reclaims when no pin remains.
  void drop_owner(Allocation* a) noexcept;
  void mark_raw(Allocation* a) noexcept;
  void free_raw(void* ptr);

  //! The pages holding bytes [offset, offset + bytes) of `a` (none for an arena allocation), and the
  //! access to pin them with: Access::write becomes read_write where the range covers a page only in
  //! part, so the rest of that page keeps its contents. Throws tvmm::invalid_argument for a range
  //! outside the tensor or of 0 bytes.
  struct Range {
    PageSpan span;
    Access access;
  };
  Range range(const Allocation* a, std::size_t offset, std::size_t bytes, Access access) const;
  [[nodiscard]] static PageSpan whole(const Allocation* a) noexcept { return {0, a->arena ? 0 : a->pages}; }

  //! Pins the pages of `span` (stream == nullptr: host-synchronous). On success one reference is added
  //! to `a` for the Pin.
  void pin(Allocation* a, PageSpan span, Access access, device::StreamHandle stream);
  void unpin(Allocation* a, PageSpan span, device::StreamHandle stream) noexcept;
  //! Unpins several pins of one stream (or host pins, with stream == nullptr) at one release point:
  //! one event recorded for all of them (tvmm::release_together).
  struct Unpin {
    Allocation* alloc;
    PageSpan span;
  };
  void unpin_together(std::span<const Unpin> unpins, device::StreamHandle stream) noexcept;
  void prefetch(Allocation* a, device::StreamHandle stream);
  //! Tensor::discard: the contents of `a` are dead. Host and NVMe pages let their slots go at once;
  //! resident pages become the first victims and are dropped without a write-back.
  void discard(Allocation* a);
  void mark_iteration();

  // Both retire completed transfers first, so a finished eviction reads as `host`.
  [[nodiscard]] Tier tier_of(device::DevPtr addr);
  [[nodiscard]] Tier tier(const Allocation* a, std::size_t offset);
  [[nodiscard]] Stats stats() const;
  [[nodiscard]] Placement placement() const { return placement_->describe(); }
  //! Checks every invariant under the lock; correct while other threads use the pager (it briefly
  //! stops lock-free pins and unpins of resident pages while it counts them). Throws on a violation.
  void check_invariants() const;
  [[nodiscard]] const Config& config() const noexcept { return cfg_; }
  [[nodiscard]] device::DeviceBackend& device() noexcept { return *dev_; }

  device::StreamHandle create_stream();
  void destroy_stream(device::StreamHandle s) noexcept;
  void launch(device::StreamHandle s, std::function<void()> fn);
  void launch_busy(device::StreamHandle s, std::chrono::nanoseconds duration);
  void synchronize(device::StreamHandle s);
  // Timing events for StreamTimer (separate from the pool: the pool's events are recycled).
  device::EventHandle create_event();
  void destroy_event(device::EventHandle e) noexcept;
  void record_event(device::EventHandle e, device::StreamHandle s);
  // Waits for `end`, then returns the device time from `start` to it.
  std::chrono::nanoseconds elapsed(device::EventHandle start, device::EventHandle end);

 private:
  using Lock = std::unique_lock<std::mutex>;
  using Clock = std::chrono::steady_clock;

  struct LoadBatch {  // page-ins (and, for uncopied pages, the write-backs they wait for)
    EventRef done;
    std::vector<std::uint32_t> pages;
  };
  struct EvictionBatch {  // write-backs whose victims are still mapped at their old addresses
    std::vector<std::uint32_t> pages;
    //! Per page: its write-back (and every earlier one) has completed; for a page dropped without a
    //! copy, the one thing it waited for (its last use or its page-in), or null with nothing pending
    //! (its frame was free at once).
    std::vector<EventRef> done;
    std::size_t retired = 0;  // pages [0, retired) are retired, in order (an event done later waits)
  };
  // Frames for a chunk. after[i] is what every use of frames[i] must follow (null for a frame that was
  // free): the write-back of its previous page, or, for a page dropped without a copy whose frame waited
  // for one thing only, that thing itself (its last use, or its page-in, which may be an older
  // write-back: the one its own frame followed; see evict). All write-backs are recorded on one copy
  // stream, so the later of two such events implies the earlier: `latest` is the latest by
  // Event::seq, whatever the order they were added in. Frames are added in eviction order, and
  // pair_frames may then permute them (recorded[i]: where frames[i] was added). The other events are
  // kept apart (`others`): nothing implies them.
  struct Frames {
    std::vector<std::uint32_t> frames;
    std::vector<EventRef> after;
    std::vector<std::uint32_t> recorded;  // empty: in the order added
    EventRef latest;                      // the latest write-back added (it implies the others), or null
    std::vector<Event*> others;           // the events in `after` not on the write-back stream, each once
    //! Room for `more` frames past those held, so that add() does not allocate.
    void reserve_more(std::size_t more) {
      frames.reserve(frames.size() + more);
      after.reserve(after.size() + more);
      others.reserve(others.size() + more);
    }
    void add(std::uint32_t frame, EventRef e) {
      if (e && e.get()->write_back) {
        // Not simply the last added: a handed-over page-in may be an older write-back (evict).
        if (!latest || e.get()->implies(*latest.get())) latest = e;
      } else if (e && std::find(others.begin(), others.end(), e.get()) == others.end()) {
        others.push_back(e.get());  // held by `after`
      }
      frames.push_back(frame);
      after.push_back(std::move(e));
    }
    void clear() noexcept {
      frames.clear();
      after.clear();
      recorded.clear();
      latest = EventRef();
      others.clear();
    }
    //! The latest write-back any frame follows (it implies the others on the write-back stream), or null.
    [[nodiscard]] Event* latest_after() const noexcept { return latest.get(); }
    //! The one event every frame's use must follow, if there is one (null if none, or if several).
    [[nodiscard]] const EventRef* only_after() const noexcept {
      if (others.empty()) return latest ? &latest : nullptr;
      if (latest || others.size() > 1) return nullptr;
      for (const EventRef& e : after) {
        if (e.get() == others.front()) return &e;
      }
      return nullptr;
    }
    //! Calls `follow` with each event that, once waited for, orders work after every frame's `after`:
    //! the latest write-back and each of the others.
    template <typename F>
    void follow_all(F&& follow) const {
      for (Event* e : others) follow(e);
      if (latest) follow(latest.get());
    }
    //! Indices into frames, in the order they were added (the write-backs' recording order).
    [[nodiscard]] std::vector<std::size_t> in_recording_order() const;
  };

  [[nodiscard]] PageEntry* pages_of(const Allocation* a) noexcept { return &table_[a->first_page]; }
  [[nodiscard]] device::DevPtr va_of(const PageEntry& p) const noexcept { return va_.addr(table_.index_of(p)); }
  //! Where the pager's copies reach the memory of `frame` (DeviceTier::frame_addr): never a tensor
  //! address, whose mapping may move to another frame while a copy of its old one is still queued.
  [[nodiscard]] device::DevPtr frame_addr(std::uint32_t frame) const noexcept { return device_->frame_addr(frame); }
  //! What a page move's fixed cost (a copy's launch and latency, about 5 us: tvmm-bench's modelled
  //! per-copy latency, `--latency-us`) is worth in bytes on a 50 GB/s bus. The eviction policies that
  //! read the trace weigh a page's next use by (its bytes + this) / (a page + this): a tensor's partial
  //! last page costs less to move, but never nothing (policies::PageOwner::cost).
  static constexpr std::size_t kMoveOverheadBytes = 256 * 1024;
  //! What moving `p` weighs in bus time, in bytes: its bytes plus a copy's fixed cost.
  [[nodiscard]] std::size_t move_weight(const PageEntry& p) const noexcept {
    return used_bytes(p) + kMoveOverheadBytes;
  }
  //! The bytes of `p` its tensor holds, which page copies move: a page, or less for a tensor's last page
  //! when its size is not a multiple of the page size (the rest of that page is never read).
  [[nodiscard]] std::size_t used_bytes(const PageEntry& p) const noexcept {
    const Allocation* a = p.owner;
    if (a == nullptr) return page_size_;
    const std::size_t start = std::size_t{table_.index_of(p) - a->first_page} * page_size_;
    return a->bytes > start ? std::min(page_size_, a->bytes - start) : page_size_;
  }

  // Pin counts. The *_locked variants are for callers holding mu_.
  //! `dirty`: the pin may write, so the page's NVMe copy (if any) goes stale (set in the same CAS).
  bool try_pin_resident(PageEntry& p, std::uint64_t dirty) noexcept;
  void pin_page(PageEntry& p) noexcept;
  void unpin_page(PageEntry& p) noexcept;
  void unpin_page_locked(PageEntry& p) noexcept;
  void wake_waiters() noexcept;

  // The address reservation (constructor step, after cfg_ is resolved): checks the NVMe directories
  // first (unless the caller supplied the storage backend) and the page table's host memory.
  std::unique_ptr<AddressSpace> reserve_address_space(const Config& given, bool storage_given) const;
  // `owned`: a user's tensor (in owned_, counted in stats), or false for an arena page.
  Allocation* allocate_pages(std::size_t bytes, Hints hints, bool owned);
  Allocation* allocate_small(std::size_t bytes, Hints hints);
  // Pins a fresh allocation until its owner lets go; on failure frees it and rethrows.
  void pin_for_life(Allocation* a);
  void reclaim_small(Allocation* a) noexcept;
  // Trace prefetch: starts the page-ins of the pins ahead that prefetch_ names, evicting only unpinned
  // pages it does not protect.
  void prefetch_ahead(const std::vector<AccessTrace::Ahead>& ahead) noexcept;
  // Write-behind (Config::write_behind), after each pin while the trace replays: copies behind the
  // tensors written by earlier pins that are unpinned now, then, if `access` may write, asks
  // write_behind_ whether this write is to be copied behind once its kernel is done.
  void write_behind(const Allocation* a, Access access) noexcept;
  // Queues the write-behind copies of the tensors in behind_todo_ that no pin holds (under mu_).
  void copy_behind();
  // The event of the write-behind batch that copies `page` (the latest, if several), or null (under mu_).
  [[nodiscard]] Event* behind_event_of(std::uint32_t page) const noexcept;
  // Sequential prefetch: starts the page-ins of the host pages of `next` (Prefetcher::after).
  void prefetch_after(Allocation* a, PageSpan next) noexcept;
  void pin_slow(Allocation* a, PageSpan span, Access access, device::StreamHandle stream);
  void wait_for_uses(Allocation* a);
  // Stream release points of `a` (caller holds a->uses_mu): drops the complete ones; with `record`,
  // every one left has its event afterwards (recorded now where none covers it). Or take them all,
  // each with its event (the complete ones dropped).
  void prune_uses(Allocation& a, bool record);
  // Records `point` (on `stream`, at pin count `mark`) as a's latest release point on that stream.
  void note_release(Allocation& a, device::StreamHandle stream, ReleaseTicket point, std::uint64_t mark);
  // Waits for the last stream uses of `a`, which no one references any more, and forgets them; a
  // release path: never throws, and allocates nothing but a use's event if it was never recorded (if
  // that fails, ReleasePoints::resolve synchronizes the stream instead). Failures are logged.
  void wait_for_last_uses(Allocation* a) noexcept;
  // Waits for `e`, logging (not throwing) a failure: for paths that cannot report. False once the
  // device is lost (nothing completes any more).
  bool wait_quietly(Event* e, const Allocation* a) noexcept;
  // Page-ins of `span` of `a` not known to be complete (one reference each, deduplicated); caller holds
  // mu_. It does not query them: the caller orders its stream (or thread) after each, and a stream wait
  // costs the host about what a query does (0.78 against 0.63 us on an H200) while nearly every page-in
  // a pin finds pending is still running (99% of them on the replays), so a query first only adds one.
  // Waiting on one that has completed is harmless: cuStreamWaitEvent "makes all future work submitted
  // to hStream wait for all work captured in hEvent" and uses "the most recently captured state at the
  // time of the API call" (cuda.h), and the references returned keep each event from being recorded
  // again (EventPool reuses an event only once no one holds it). The eviction's wait for a victim's
  // page-in relies on the same rule.
  std::vector<EventRef> pending_page_ins(const Allocation* a, PageSpan span);
  // Pages of `span` of `a` on the host tier, at most `limit`; caller holds mu_.
  std::vector<PageEntry*> host_pages(const Allocation* a, PageSpan span, std::size_t limit = SIZE_MAX);
  // Whether a page of the span is on the host or NVMe tier or in transit (under mu_).
  [[nodiscard]] bool leaving_or_away(const Allocation* a, PageSpan span) const noexcept;
  // Whether a page of `span` of `a` waits for the oldest page-in batch not yet retired (under mu_).
  [[nodiscard]] bool waits_for_oldest_load(const Allocation* a, PageSpan span) const noexcept;
  // nvme_->run without mu_ (taken back on return, also by an exception), as a span on the trace's I/O
  // lane (`what`: "nvme write" or "nvme read"). `frames_held`: device frames the caller holds for pages
  // that do not record them yet (counted in frames_in_hand_ meanwhile).
  void run_nvme(Lock& lk, std::span<NvmeTier::Io> ios, const NvmeTier::Hooks& hooks, const char* what,
                std::size_t frames_held);
  // Makes every page of `span` of `a` resident; returns the page-in events a user must order after.
  // `reaped`: as for load_pages.
  std::vector<EventRef> make_resident(Lock& lk, Allocation* a, PageSpan span, Access access, Clock::time_point deadline,
                                      std::uint64_t& misses, bool reaped);
  //! Pages an eviction must not take (prefetch_ahead's: those needed sooner than its target).
  using Protect = common::FunctionRef<bool(const PageEntry&)>;
  // Loads `todo` (fresh or host pages); with may_wait false, loads only what free or evictable frames
  // allow and returns the number loaded. Evictions it makes skip the pages `protect` names. `reaped`:
  // the caller has just reaped, holding `lk` since (see acquire_frames).
  // `arrivals` (empty, or one per page of `todo`): the pages of `todo` in transit are taken back while
  // their write-backs run (in_flight_write_backs), each claimed here (Spill::claimed: reap() leaves it
  // to this call) and its page-in ordered after its arrival event.
  std::size_t load_pages(Lock& lk, std::vector<PageEntry*>& todo, Access access, Clock::time_point deadline,
                         bool may_wait, const Protect* protect = nullptr, bool reaped = false,
                         std::span<const EventRef> arrivals = {});
  // Maps `got.frames` at `pages` and queues their page-ins; on success the pages are resident. A page
  // whose `before` is transit was taken back in flight: its page-in follows `arrivals[i]`.
  void load_chunk(std::span<PageEntry* const> pages, std::span<const PageState> before, Frames& got, Access access,
                  std::span<const EventRef> arrivals = {});
  // The pages of a span whose write-back from the device is still running (in an eviction batch not
  // yet retired, the host slot the copy's target, no spill or write-behind copy involved) while every
  // stream use of their tensors has completed, with each copy's event in `arrivals`: a pin that reads
  // them loads them back from those slots (load_pages) instead of waiting on the host for the copies.
  std::vector<PageEntry*> in_flight_write_backs(PageEntry* pages, std::uint32_t count, std::vector<EventRef>& arrivals);
  // A claimed page that was not loaded goes back to its eviction (or, if reap() has retired that
  // meanwhile, to the host tier); one that was loaded leaves its eviction batch, which reap() then
  // skips.
  void give_back_in_flight(PageEntry& p) noexcept;
  void left_in_flight(PageEntry& p) noexcept;
  // Where `page` stands in an eviction batch not yet retired (its entry and its write-back's event), or
  // nulls if in none.
  struct InFlight {
    std::uint32_t* page = nullptr;
    EventRef* done = nullptr;
  };
  [[nodiscard]] InFlight in_flight_entry(std::uint32_t page) noexcept;
  // The steps of a chunk's page-in, shared by load_chunk and stage_in:
  //! Maps got.frames[i] at pages[i], unless pages[i]'s address is mapped there already (a kept
  //! mapping: no driver call); a page mapped to another frame is unmapped first. All or nothing: on
  //! failure no page has a new mapping.
  void map_chunk(std::span<PageEntry* const> pages, const Frames& got);
  //! Maps frames[i] at pages[i] as map_chunk does (the same all or nothing); returns how many pages
  //! needed the calls (the others' addresses were mapped there already).
  std::size_t map_pages(std::span<PageEntry* const> pages, std::span<const std::uint32_t> frames);
  //! Before evict() queues the write-backs of `victims` (claimed, their frames about to join `got`):
  //! maps each page of `pages` that will not keep its mapping at a frame no write-back of the batch
  //! copies from and no page of `pages` is mapped to (pair_frames then gives it that frame), so that
  //! its access grant does not wait for the write-backs. Best effort: on failure map_chunk makes the
  //! calls again.
  void map_early(std::span<PageEntry* const> pages, const Frames& got, std::span<PageEntry* const> victims) noexcept;
  //! After a failure once mapped: drains the copies queued (or, if the device cannot drain, keeps the
  //! frames out of the pool). The pages keep their mappings, as evicted pages do. The caller restores
  //! the pages' states.
  void abort_chunk(Frames& got) noexcept;
  //! The pages become resident with got.frames, pending until `done` (if any); `copied(i)`: page i's
  //! host slot is the source of its page-in (released at reap), else its host copy, if any, is dropped.
  //! May throw std::bad_alloc, only before it changes anything.
  void publish_chunk(std::span<PageEntry* const> pages, std::span<const PageState> before, Frames& got,
                     const EventRef& done, common::FunctionRef<bool(std::size_t)> copied);
  //! Between 1 and pages.size() frames for the first pages of `pages` (0 only without may_wait),
  //! paired by pair_frames. A page's kept frame is taken first when idle, and its resident page is
  //! the preferred victim (see EvictionPolicy::select). Before choosing victims it reaps (retired
  //! transfers free host slots and make pages evictable), except the first time with `reaped`: the
  //! caller has just done so, holding `lk` since, and each reap queries the oldest transfers' events (a
  //! driver call each on a GPU). A later pass, or a wait, reaps again.
  //! `blocked` (may be null): set, with no frame returned, instead of waiting when no frame can come
  //! but by writing a victim back, the host tier is full, no spill can free a slot and no page-in is
  //! in flight to free one, while pages of `pages` hold host slots: the caller's own claimed pages
  //! block it (load_pages then gives one back to the host tier, for a spill to take).
  Frames acquire_frames(Lock& lk, std::span<PageEntry* const> pages, Clock::time_point deadline, bool may_wait,
                        const Protect* protect = nullptr, bool reaped = false, bool* blocked = nullptr);
  //! Permutes got so that each of the first got.frames.size() pages whose address is still mapped to
  //! one of the frames gets that frame.
  void pair_frames(std::span<PageEntry* const> pages, Frames& got) const;
  void release_frames(Frames& got) noexcept;
  // Gives claimed victims back, resident with their frames and known to the policy again (an eviction
  // that could not go ahead). The caller wakes the waiters.
  void unclaim(std::span<PageEntry* const> victims) noexcept;
  // Claims up to `count` victims, skipping the pages `protect` names and preferring the pages that hold
  // the frames `loading`'s addresses are still mapped to.
  std::vector<PageEntry*> select_victims(std::size_t count, const Protect* protect = nullptr,
                                         std::span<PageEntry* const> loading = {});
  void evict(std::vector<PageEntry*>& victims, Frames& got);
  //! Unmaps the mapped addresses among pages [first, first + count), a call per run of adjacent
  //! mapped pages, and clears their PageEntry::mapped; returns how many failed (those keep `mapped`).
  std::size_t unmap_range(std::uint32_t first, std::uint32_t count) noexcept;
  // A host slot that a running page-in reads from, lent to a victim's write-back (evict): the
  // write-back waits for `page_in`. Should the eviction fail before that copy is queued, the slot
  // goes back to `lender`.
  struct Loan {
    PageEntry* lender;
    EventRef page_in;
    PageEntry* victim;
  };
  // Host slots that running page-ins read from and could lend to a write-back (eviction.cpp); borrow_slot
  // moves one (the oldest page-in's) to `victim` and clears its page's host copy. Under mu_.
  [[nodiscard]] std::size_t lendable_slots() const noexcept;
  [[nodiscard]] static bool lends_slot(const PageEntry& p) noexcept;
  std::optional<Loan> borrow_slot(PageEntry& victim) noexcept;
  // Retires completed page-ins and write-backs; true if it retired any.
  bool reap(Lock& lk);
  void reclaim(Allocation* a) noexcept;
  // Waits on cv_ until notified or the deadline; false once the deadline has passed.
  bool wait_for_change(Lock& lk, Clock::time_point deadline);
  // Waits for the oldest transfer in flight (and retires it), or else as wait_for_change.
  bool wait_progress(Lock& lk, Clock::time_point deadline);
  [[nodiscard]] std::string describe_device(std::uint64_t* pinned_pages = nullptr) const;
  // For an error about pinned pages: " (tensors smaller than policy.admission.min_bytes = X stay pinned
  // for life)" where such tensors can take whole pages, else "".
  [[nodiscard]] std::string life_pins_note() const;

  // --- NVMe tier (vmm/core/spill.cpp); all with mu_ held, and those taking `lk` unlock it for I/O ---
  //! Records that `p` entered the host tier (candidates for spilling, newest first).
  void note_host(const PageEntry& p) noexcept;
  //! Records that `p` keeps an NVMe slot while it lives elsewhere (a slot that may be taken back).
  void note_slot_kept(const PageEntry& p) noexcept;
  //! Frees up to `want` host slots by moving to NVMe the pages needed last: with a trace, the farthest
  //! next use; without, newest first (pages still on their way from the device, each written once its
  //! own write-back has completed, then host pages; clean ones without a write). Pages of host-only
  //! allocations are skipped. Returns the number freed (a page on its way counts once its slot is
  //! free); throws io_error / out_of_memory (ENOSPC) if a write failed, after putting every page back
  //! where it was.
  std::size_t spill(Lock& lk, std::size_t want);
  //! Loads up to a queue depth of `a`'s NVMe pages onto the device: reads each into a host slot,
  //! verifies its checksum and queues its page-in at once, while later reads are still running. The
  //! pages keep their NVMe slots as clean copies. Returns the number loaded; throws io_error naming
  //! page and slot if a read failed (the others are loaded; the failed page stays on NVMe).
  std::size_t stage_in(Lock& lk, Allocation* a, PageSpan span, Clock::time_point deadline);
  //! Between 1 and `want` free host slots, spilling or waiting for them; throws out_of_memory at the
  //! deadline.
  std::vector<std::uint32_t> acquire_host_slots(Lock& lk, std::size_t want, Clock::time_point deadline);
  //! NVMe read-ahead, while a trace replays and NvmeConfig::read_ahead (after each pin; mu_ not held):
  //! reads the NVMe pages that the next kReadAheadPins pins need into host slots, nearest first, up to
  //! kReadAheadPages in flight, submitted without waiting, so the drive works while the thread goes on
  //! queueing the device's work (a pin that needs such a page waits only for what is left of its read).
  //! Only into a free host slot, and only while another stays free for evictions' write-backs: it
  //! never spills or drops a kept host copy to make room. Each page stays in transit until
  //! finish_reads publishes it on the host tier, keeping its NVMe slot as a clean copy. A failure
  //! leaves the page on NVMe for its pin to read (logged).
  void read_ahead() noexcept;
  //! Publishes the read-aheads that have ended, oldest first (on the model clock, those whose modelled
  //! end has passed). With `block`, waits for the oldest first, without mu_. True if any was published.
  bool finish_reads(Lock& lk, bool block);
  //! Whether a read-ahead of one of pages [first, first + count) is in flight (mu_ held).
  [[nodiscard]] bool reading_ahead(std::uint32_t first, std::uint32_t count) const noexcept;
  //! How far and how much read-ahead runs. Each page read ahead holds a host slot from its read to its
  //! page-in, which the host tier's other pages then lack (docs/benchmarks.md, "NVMe read-ahead"):
  //! with slots made by spilling, one page in flight took 0.973x the step of no read-ahead over 34
  //! replay rows (six traces at 1.5-4x, six held-out ones at 2x and 3x) where two or four took
  //! 0.974-0.975x but slowed three rows by 4-10% (more pages written and read back), and with four,
  //! looking 32 pins ahead rather than 8 took ResNet-18 at 2x from 27.29 to 28.62 ms.
  //! Free slots only (now): 0.983x, no replay row slower by more than 1%; over the quick suite's 15
  //! synthetic rows 0.996x, with `infer` at 1.5x 5.5% slower.
  static constexpr std::size_t kReadAheadPins = 8;
  static constexpr std::size_t kReadAheadPages = 1;
  //! Read-ahead reads only while this many host slots are free (one stays free for an eviction's
  //! write-back).
  static constexpr std::size_t kReadAheadFreeSlots = 2;
  //! An evicted page whose NVMe copy is current is copied to a free host slot rather than dropped only
  //! while this many more slots stay free than its eviction batch's write-backs take: the next pin's
  //! victim's write-back, and read-ahead's kReadAheadFreeSlots (evict; docs/benchmarks.md, "Clean
  //! victims onto free host slots"). With one rather than three, `infer` at 1.5x took 7% longer.
  static constexpr std::size_t kCleanVictimSpareSlots = kReadAheadFreeSlots + 1;
  //! A free NVMe slot, or one taken back from a page that keeps a copy elsewhere.
  std::optional<std::uint32_t> acquire_nvme_slot() noexcept;

  Config cfg_;
  std::unique_ptr<device::DeviceBackend> dev_;
  std::size_t page_size_ = 0;
  std::unique_ptr<AddressSpace> va_storage_;
  AddressSpace& va_;
  std::unique_ptr<PageTable> table_storage_;
  PageTable& table_;
  EventPool events_;
  SmallArena arena_;       // guarded by mu_
  Observability observe_;  // counters, stats file, pin log, timeline (before xfer_, which records in it)
  Prefetcher prefetch_;    // the access trace and what to load ahead
  // The pin count at the latest stream unpin (Allocation::released_at): which tensors the work queued
  // last used. Written by unpin without the lock (a hint; a race only changes a preference).
  std::atomic<std::uint64_t> latest_release_{0};
  std::uint64_t next_id_ = 1;                             // guarded by mu_
  std::unordered_map<std::uint64_t, Allocation*> by_id_;  // live allocations; guarded by mu_
  std::unique_ptr<DeviceTier> device_;
  std::unique_ptr<HostPlacement> placement_;  // the host tier's memory and its node (outlives host_)
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<HostCopies> host_copies_;  // kept copies of resident pages in host_'s spare room
  std::unique_ptr<NvmeTier> nvme_;           // null without an NVMe budget
  std::deque<std::uint32_t> host_fifo_;      // pages that entered the host tier, in order (lazy: checked on use)
  std::deque<std::uint32_t> slot_keepers_;   // pages keeping an NVMe slot elsewhere (lazy: checked on use)
  std::deque<std::uint32_t> discarded_;      // resident pages whose contents were discarded: first victims (lazy)
  std::unique_ptr<TransferEngine> xfer_;
  std::unique_ptr<ReleasePoints> releases_;  // stream pins' release points (after xfer_, which records them)
  std::unique_ptr<policies::EvictionPolicy> policy_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // page left transit, pins dropped, frames or slots freed
  std::atomic<std::uint32_t> waiters_{0};
  // Pages with pins > 0; ahead of the truth while a lock-free pin or unpin is between its steps (pin.cpp).
  std::atomic<std::uint64_t> pinned_pages_{0};
  // Threads in make_resident (a pin loading its pages). Only a pin loading alone gives a claimed page
  // back when the host tier is full of its own pages (load_pages): two that did so took each other's
  // pages back and forth for ever. Changed and read under mu_ (atomic: the decrement may run unlocked).
  std::atomic<std::uint32_t> loading_pins_{0};
  std::uint32_t frames_in_hand_ = 0;   // taken from the pool by a thread that let go of mu_; guarded by mu_
  std::uint64_t allocated_pages_ = 0;  // guarded by mu_
  std::uint64_t host_only_pages_ = 0;  // pages of allocations kept off NVMe; guarded by mu_
  std::uint64_t capacity_spare_ = 0;   // pages beyond the device tier's frames that allocations may use
  std::unordered_map<device::DevPtr, Allocation*> owned_;  // owned allocations by base; guarded by mu_
  struct ReadAhead {
    std::uint32_t page;
    std::chrono::steady_clock::time_point end;  // on a modelled drive, when the read ends (else its submission)
  };
  std::vector<ReadAhead> reads_ahead_;       // read-aheads in flight, in the order submitted; guarded by mu_
  std::deque<LoadBatch> loads_;              // page-ins not yet retired
  std::deque<EvictionBatch> evictions_;      // write-backs not yet retired
  std::deque<LoadBatch> behind_;             // write-behind copies not yet retired
  WriteBehind write_behind_;                 // which writes to copy behind; guarded by mu_
  std::vector<std::uint64_t> behind_todo_;   // tensors to copy behind once unpinned (mu_)
  std::atomic<bool> behind_waiting_{false};  // behind_todo_ is not empty (a hint for pin)
  // Slow-path pins since the last reap that found only pages on the device and left them pending
  // (pin_slow; under mu_). At kReapAfterPins such pins one reaps: a page-in that ended unnoticed, or
  // an oldest batch no page names any more (its pages evicted or freed before it was retired), keeps
  // the pages behind it pending for at most that many pins, at a reap's few queries per as many pins.
  std::uint32_t pins_since_reap_ = 0;
  static constexpr std::uint32_t kReapAfterPins = 8;
  //! Per device frame: the page resident in it (its frame), or kNoPage; guarded by mu_.
  std::vector<std::uint32_t> frame_page_;
  static constexpr std::uint32_t kNoPage = UINT32_MAX;
  //! The driver's host time per page that map_chunk maps anew (its old mapping's unmap, the map and its
  //! share of the access grant), a moving average of what the device's host clock measured; guarded by
  //! mu_. 0 until a page has been mapped.
  std::chrono::nanoseconds remap_cost_{0};
  //! Whether a remap costs enough that eviction should prefer the page holding an incoming page's old
  //! frame (select_victims): at least 10 µs of host time per page, whatever the page size. A GPU's driver
  //! takes tens of µs per mapping, large or small (docs/benchmarks.md, "VMM call costs"); the
  //! simulator's host clock counts only the costs it models (none unless configured), and with none
  //! eviction is exactly the policy's. Until 2026-12-02 the threshold grew with the page (10 µs per
  //! 2 MiB, a quarter of copying it at 50 GB/s), so with 8 MiB pages and more the preference was off
  //! on a GPU's costs: the pages a pin writes afresh, which copy nothing, were remapped on every load
  //! (docs/benchmarks.md, "Kept mappings with pages of 8 and 16 MiB").
  [[nodiscard]] bool remaps_costly() const noexcept { return remap_cost_ >= std::chrono::microseconds(10); }
};

//! Builds a public Pager around an implementation (for tests that supply their own backend).
struct PagerAccess {
  static Pager make(const Config& config, std::unique_ptr<device::DeviceBackend> backend,
                    std::unique_ptr<storage::StorageBackend> storage = nullptr) {
    return Pager(std::make_unique<PagerImpl>(config, std::move(backend), std::move(storage)));
  }
};

}  // namespace tvmm::vmm
