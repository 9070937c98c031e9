#pragma once
// The page table: one PageEntry per page of the address-space reservation, indexed by
// (addr - base) / page_size. Each entry's state lives in one atomic word (vmcache-style) so the pin hit
// path is a single compare-and-swap; the other fields change only under the pager lock.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

namespace tvmm::vmm {

struct Allocation;
struct Event;

//! Named states of a page.
enum class PageState : std::uint8_t {
  unused = 0,   //!< Not part of a live allocation.
  fresh = 1,    //!< Allocated, never made resident: no tier holds data.
  host = 2,     //!< Data in a host-tier slot; address not in use (PageEntry::mapped may keep a mapping).
  device = 3,   //!< Data in a device frame mapped at the page's address.
  transit = 4,  //!< Locked by one thread that is moving or releasing it; others wait.
  nvme = 5,     //!< Data in an NVMe-tier slot (checksum in the entry); address not in use, as for host.
};

const char* to_string(PageState s) noexcept;

//! Layout of the state word: state (3 bits) | page-in pending (1) | writing behind (1) | dirty (1) |
//! discarded (1) | host copy (1) | pins (23, from bit 8) | frozen (1) | version (32). (Eviction
//! policies keep their per-page state, such as CLOCK's referenced bit, in arrays of their own.)
//! "Dirty" means the page's NVMe slot (if it keeps one) no longer holds its current data: set by every
//! pin that may write (in the same CAS that counts the pin), cleared when the page is written to NVMe.
//! "Page-in pending" means the page is resident but its page-in copy may still be running: a pin must
//! order itself after that copy, so the lock-free hit path declines such pages.
namespace word {
inline constexpr std::uint64_t kStateMask = 0x7;
inline constexpr std::uint64_t kPending = 0x8;
//! A write-behind copy (PagerImpl::write_behind) from the page's frame into its host slot may still be
//! running: the slot is not let go (not even when a write makes the copy stale) and the frame is not
//! handed to another page before that copy completes. Set with kHostCopy while the page is resident
//! and unpinned; kept across state changes; cleared only when the copy is retired (reap).
inline constexpr std::uint64_t kWritingBehind = 0x10;
inline constexpr std::uint64_t kDirty = 0x20;  //!< the NVMe copy is stale (kept across state changes)
//! The contents are dead (Tensor::discard): evicting the page drops it without a write-back. Kept across
//! state changes; cleared by a pin that may write, and when the page is dropped or freed.
inline constexpr std::uint64_t kDiscarded = 0x40;
//! A resident page's host slot still holds its current contents (the slot it was paged in from, kept,
//! or one a write-behind copies it to): evicting it drops it without a write-back. Set when a page-in
//! from the slot is published or a write-behind starts; cleared
//! by a pin that may write (always on the slow path, which lets the slot go), by discard, when the slot
//! is taken back for another page (HostCopies::take_back_one), and when the page leaves the device.
inline constexpr std::uint64_t kHostCopy = 0x80;
inline constexpr int kPinShift = 8;
inline constexpr std::uint64_t kPinOne = std::uint64_t{1} << kPinShift;
inline constexpr std::uint64_t kPinMax = (std::uint64_t{1} << 23) - 1;
inline constexpr std::uint64_t kPinMask = kPinMax << kPinShift;
//! Set by PagerImpl::check_invariants, under the pager lock, while it counts pins: the lock-free pin
//! and unpin paths leave a frozen word alone (a pin takes the slow path, an unpin waits for the lock),
//! so the count it takes is a snapshot. Kept across state changes.
inline constexpr std::uint64_t kFrozen = std::uint64_t{1} << 31;
inline constexpr int kVersionShift = 32;
inline constexpr std::uint64_t kVersionOne = std::uint64_t{1} << kVersionShift;

constexpr PageState state(std::uint64_t w) noexcept { return static_cast<PageState>(w & kStateMask); }
constexpr bool pending(std::uint64_t w) noexcept { return (w & kPending) != 0; }
constexpr bool dirty(std::uint64_t w) noexcept { return (w & kDirty) != 0; }
constexpr bool discarded(std::uint64_t w) noexcept { return (w & kDiscarded) != 0; }
constexpr bool host_copy(std::uint64_t w) noexcept { return (w & kHostCopy) != 0; }
constexpr bool writing_behind(std::uint64_t w) noexcept { return (w & kWritingBehind) != 0; }
constexpr bool frozen(std::uint64_t w) noexcept { return (w & kFrozen) != 0; }
constexpr std::uint64_t pins(std::uint64_t w) noexcept { return (w & kPinMask) >> kPinShift; }
constexpr std::uint32_t version(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w >> kVersionShift); }
//! `w` with a new state and pending flag, the same pins, dirty, discarded, host-copy, writing-behind and
//! frozen bits, and the version advanced.
constexpr std::uint64_t with_state(std::uint64_t w, PageState s, bool pend = false) noexcept {
  return ((w & (kPinMask | kDirty | kDiscarded | kHostCopy | kWritingBehind | kFrozen)) |
          static_cast<std::uint64_t>(s) | (pend ? kPending : 0)) +
         ((w >> kVersionShift) + 1) * kVersionOne;
}
}  // namespace word

//! A page evicted from the device (in transit, its write-back to a host slot queued) that someone
//! claimed before the write-back completed: a spill, to write it on to NVMe as soon as it has arrived,
//! or a pin that reads it, to load it back from that slot behind the copy (PagerImpl::load_pages).
//! reap() then leaves the page to the claimant.
enum class Spill : std::uint8_t {
  none = 0,
  claimed = 1,  //!< the write-back may still be running; reap() retires it and marks it `arrived`
  arrived = 2,  //!< write-back retired: the claimant publishes the page when done
};

inline constexpr std::uint32_t kNoFrame = UINT32_MAX;
//! PageEntry::mapped of an address whose mapping is there but not to be kept (see there).
inline constexpr std::uint32_t kUnknownMapping = UINT32_MAX - 1;
inline constexpr std::uint32_t kNoSlot = UINT32_MAX;

struct PageEntry {
  std::atomic<std::uint64_t> word{0};  //!< state word (see word::)
  std::uint32_t frame = kNoFrame;      //!< device frame, when state is device (or transit from device)
  std::uint32_t host_slot = kNoSlot;   //!< host slot: the data (host state), the write-back target
                                       //!< (evicting), the source of a page-in still pending, or a
                                       //!< copy kept while resident (word::kHostCopy)
  std::uint32_t nvme_slot = kNoSlot;   //!< NVMe slot: the data (nvme state), or a copy kept while the
                                       //!< page is elsewhere (current unless the word says dirty)
  //! The frame the page's address is mapped to: its own frame while resident. When the page leaves the
  //! device its mapping stays (a kept mapping: the frame may hold another page meanwhile), so that a
  //! later page-in into the same frame needs no map, access grant or unmap; a page-in into another
  //! frame unmaps it first. kNoFrame: nothing mapped; kUnknownMapping: mapped where a failed rollback
  //! left it (access not known to be granted), so always unmapped before the next map.
  std::uint32_t mapped = kNoFrame;
  Spill spill = Spill::none;  //!< claimed while its write-back runs, by a spill or a pin (see Spill)
  //! The page left the device with live contents since write-behind last copied it (or since it was
  //! allocated): write-behind copies only such pages of a tensor (PagerImpl::copy_behind). Guarded by mu_.
  bool left_live = false;
  //! `mapped` was set by a page-in's mapping calls made before its victims' write-backs were queued
  //! (PagerImpl::map_early): that page-in counts it as a remap, not as a kept mapping. Guarded by mu_.
  bool mapped_early = false;
  Allocation* owner = nullptr;  //!< the allocation this page belongs to
  Event* ready = nullptr;       //!< page-in completion while pending (one reference held)
  std::uint64_t checksum = 0;   //!< XXH3 of the NVMe slot's data, seeded with the slot

  [[nodiscard]] PageState state() const noexcept { return word::state(word.load(std::memory_order_acquire)); }

  // The state word's transitions: the whole state machine is here. Each keeps the bits it does not name,
  // with one atomic operation or a CAS loop, since pins change without the lock. Where a transition
  // depends on the pager's state (its count of pinned pages, free host slots), the pager passes that
  // part in as a callable.

  //! Sets the state and the pending flag (keeping pins, dirty, discarded, host copy, frozen).
  void set_state(PageState s, bool pending = false) noexcept;
  //! The page-in the page waited for has completed: pins may take the hit path again.
  void clear_pending() noexcept {
    std::uint64_t w = word.load(std::memory_order_relaxed);
    while (!word.compare_exchange_weak(w, w & ~word::kPending, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
  }
  //! A pin that may write: the NVMe copy goes stale and discarded contents live again.
  void mark_written() noexcept {
    word.fetch_or(word::kDirty, std::memory_order_acq_rel);
    word.fetch_and(~word::kDiscarded, std::memory_order_acq_rel);
  }
  //! Marks the contents dead (Tensor::discard), only while unpinned; false if a pin holds the page.
  [[nodiscard]] bool mark_discarded_if_unpinned() noexcept {
    std::uint64_t w = word.load(std::memory_order_acquire);
    do {
      if (word::pins(w) != 0) return false;
    } while (!word.compare_exchange_weak(w, (w | word::kDiscarded) & ~word::kDirty, std::memory_order_acq_rel,
                                         std::memory_order_acquire));
    return true;
  }
  void mark_dirty() noexcept { word.fetch_or(word::kDirty, std::memory_order_acq_rel); }
  //! The page's NVMe slot holds its current data (written there, or nothing to hold).
  void clear_dirty() noexcept { word.fetch_and(~word::kDirty, std::memory_order_acq_rel); }
  //! Dropped with its contents: neither discarded nor dirty any more.
  void clear_discarded() noexcept { word.fetch_and(~(word::kDiscarded | word::kDirty), std::memory_order_acq_rel); }
  //! A resident page's host slot holds its contents (a page-in from it was published).
  void set_host_copy() noexcept { word.fetch_or(word::kHostCopy, std::memory_order_acq_rel); }
  //! The host slot no longer holds a copy of the resident contents; returns the word before.
  std::uint64_t clear_host_copy() noexcept { return word.fetch_and(~word::kHostCopy, std::memory_order_acq_rel); }
  //! A resident page with no pin, no host copy and no write-behind running starts one: sets kHostCopy
  //! and kWritingBehind in one CAS from `w`; false if the word changed (a pin came, say).
  bool start_writing_behind(std::uint64_t w) noexcept {
    if (word::state(w) != PageState::device || word::pins(w) != 0 || word::host_copy(w) || word::writing_behind(w) ||
        word::frozen(w))
      return false;
    return word.compare_exchange_strong(w, w | word::kHostCopy | word::kWritingBehind, std::memory_order_acq_rel,
                                        std::memory_order_relaxed);
  }
  //! The write-behind copy was retired; returns the word before.
  std::uint64_t end_writing_behind() noexcept {
    return word.fetch_and(~word::kWritingBehind, std::memory_order_acq_rel);
  }
  //! Freed: no contents, no copies (the lock holds every other writer off).
  void forget_contents() noexcept {
    word.fetch_and(~(word::kDirty | word::kDiscarded | word::kHostCopy), std::memory_order_relaxed);
  }
  //! A pin taken or dropped under the pager lock; returns the word before. (The lock-free ones are
  //! try_pin_resident and try_unpin: they leave a frozen word alone.)
  std::uint64_t add_pin() noexcept { return word.fetch_add(word::kPinOne, std::memory_order_acq_rel); }
  std::uint64_t remove_pin() noexcept { return word.fetch_sub(word::kPinOne, std::memory_order_acq_rel); }

  //! The pin hit path, without the lock: adds a pin to a resident page whose page-in has completed;
  //! `dirty` (0 or word::kDirty) marks a pin that may write, which makes the NVMe copy stale and
  //! discarded contents live again, in the same CAS. Declines (false, nothing changed) a page that is
  //! not resident, still pending, at the pin limit, frozen, or, for a pin that may write, keeping a
  //! host copy (the slow path lets that slot go under the lock).
  //! `count(+1)` runs before this call's first pin of the page can show in the word, `count(-1)` when
  //! that count is taken back (the CAS lost to another thread's first pin, or the call declined): a
  //! count of pinned pages kept by the caller never reads lower than the truth.
  template <class Count>
  bool try_pin_resident(std::uint64_t dirty, Count&& count) noexcept {
    std::uint64_t w = word.load(std::memory_order_acquire);
    bool counted = false;
    for (;;) {
      if (word::state(w) != PageState::device || word::pending(w) || word::pins(w) == word::kPinMax ||
          word::frozen(w) || (dirty != 0 && word::host_copy(w))) {
        if (counted) count(-1);
        return false;
      }
      if (const bool first = word::pins(w) == 0; first != counted) {
        count(first ? +1 : -1);
        counted = first;
      }
      if (word.compare_exchange_weak(w, ((w + word::kPinOne) | dirty) & ~(dirty != 0 ? word::kDiscarded : 0),
                                     std::memory_order_acq_rel, std::memory_order_acquire)) {
        return true;
      }
    }
  }
  //! The unpin without the lock: drops one pin and returns the word before, or nothing while the word
  //! is frozen (the caller waits for the lock, which check_invariants holds until it thaws the word,
  //! and tries again).
  [[nodiscard]] std::optional<std::uint64_t> try_unpin() noexcept {
    std::uint64_t w = word.load(std::memory_order_acquire);
    do {
      if (word::frozen(w)) return std::nullopt;
    } while (!word.compare_exchange_weak(w, w - word::kPinOne, std::memory_order_acq_rel, std::memory_order_acquire));
    return w;
  }
  //! The eviction claim: an unpinned resident page goes to transit (its claimer moves it; others
  //! wait). `accept(w)` decides, for each word the claim sees, whether to take the page; it may run more
  //! than once (a pin or flag changed in between) and the claim succeeds on the last word it accepted.
  template <class Accept>
  bool try_claim_for_eviction(Accept&& accept) {
    std::uint64_t w = word.load(std::memory_order_acquire);
    do {
      if (word::state(w) != PageState::device || word::pins(w) != 0 || !accept(w)) return false;
    } while (!word.compare_exchange_weak(w, word::with_state(w, PageState::transit), std::memory_order_acq_rel,
                                         std::memory_order_acquire));
    return true;
  }

  //! True if the NVMe slot holds the current data (given the state word `w`).
  [[nodiscard]] bool clean_on_nvme(std::uint64_t w) const noexcept { return nvme_slot != kNoSlot && !word::dirty(w); }
  //! True if the host slot is a kept copy of a resident page's current contents (see kHostCopy).
  [[nodiscard]] bool clean_on_host(std::uint64_t w) const noexcept {
    return host_slot != kNoSlot && word::host_copy(w);
  }
  //! True if evicting the page (state word `w`) needs no write-back: its host or NVMe copy is current,
  //! or its contents were discarded.
  [[nodiscard]] bool droppable(std::uint64_t w) const noexcept {
    return word::discarded(w) || clean_on_host(w) || clean_on_nvme(w);
  }
  //! check_invariants counts pins: lock-free pins and unpins leave a frozen word alone.
  void freeze() noexcept { word.fetch_or(word::kFrozen, std::memory_order_acq_rel); }
  void thaw() noexcept { word.fetch_and(~word::kFrozen, std::memory_order_acq_rel); }
};

static_assert(sizeof(PageEntry) <= 64, "page metadata must stay within 64 bytes per page");

class PageTable {
 public:
  explicit PageTable(std::uint32_t pages) : pages_(pages), entries_(new PageEntry[pages]) {}
  [[nodiscard]] PageEntry& operator[](std::uint32_t index) noexcept { return entries_[index]; }
  [[nodiscard]] const PageEntry& operator[](std::uint32_t index) const noexcept { return entries_[index]; }
  [[nodiscard]] std::uint32_t size() const noexcept { return pages_; }
  [[nodiscard]] std::uint32_t index_of(const PageEntry& e) const noexcept {
    return static_cast<std::uint32_t>(&e - entries_.get());
  }

 private:
  std::uint32_t pages_;
  std::unique_ptr<PageEntry[]> entries_;
};

//! The pager's lazy queues hold page indices that may have gone stale: drops the stale ones (those
//! `valid` rejects) and duplicates (a page keeps its latest place) once `q` grows well past `valid_max`,
//! the most that can be valid.
void compact_lazy(std::deque<std::uint32_t>& q, std::size_t valid_max, const PageTable& table,
                  bool (*valid)(const PageEntry&));

}  // namespace tvmm::vmm
