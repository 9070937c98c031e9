#pragma once
// The NVMe tier: `slots` page slots in a storage backend's files, a checksum per page and the batched
// I/O that moves pages between host frames and slots. Slot bookkeeping (try_acquire, release) needs
// the pager lock; run() must be called WITHOUT it: it blocks until the batch has completed, and
// batches from several threads run one after another. Reads may also stay in flight across calls
// (submit_async, then poll_async or wait_async): the pager's read-ahead.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "backends/storage/storage_backend.hpp"
#include "common/function_ref.hpp"

namespace tvmm::vmm {

inline constexpr auto kAlwaysReady = [](std::size_t, bool) noexcept { return true; };
inline constexpr auto kNothing = [](std::size_t) noexcept {};

//! Per-request hooks of NvmeTier::run(), called on run()'s thread (pager lock not held). Neither may
//! throw. By default every frame is ready and completions need nothing more.
struct NvmeIoHooks {
  //! Before ios[i] is submitted (in order): true once its frame may be used, e.g. a write's data has
  //! arrived from the device. `block`: nothing is in flight, so wait until it may; false then means it
  //! never will, and the request ends with NvmeTier::kNotReady unsubmitted. Without `block`, false
  //! defers it until the next completion.
  common::FunctionRef<bool(std::size_t i, bool block)> ready = kAlwaysReady;
  //! As soon as ios[i] has ended (its `error` set), e.g. to queue a verified page's copy to the device
  //! while later reads are still running.
  common::FunctionRef<void(std::size_t i)> done = kNothing;
};

class NvmeTier {
 public:
  //! A result of run(): the data in the slot does not match the page's checksum.
  static constexpr int kCorrupt = -1000;
  //! A result of run(): the request was never submitted, its frame never became ready (Hooks::ready).
  static constexpr int kNotReady = -1001;

  //! `depth`: requests kept in flight by run().
  NvmeTier(std::unique_ptr<storage::StorageBackend> backend, std::size_t page_size, unsigned depth);
  ~NvmeTier();
  NvmeTier(const NvmeTier&) = delete;
  NvmeTier& operator=(const NvmeTier&) = delete;

  // --- slots (pager lock held) ---
  std::optional<std::uint32_t> try_acquire() noexcept;
  void release(std::uint32_t slot) noexcept;
  [[nodiscard]] std::uint32_t budget() const noexcept { return slots_; }
  [[nodiscard]] std::uint32_t in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::uint32_t peak() const noexcept { return peak_; }

  // --- I/O (pager lock NOT held) ---
  struct Io {
    storage::IoOp op;
    std::uint32_t slot;
    void* buf;               //!< a host frame
    std::uint64_t checksum;  //!< write: set by run(); read: the expected value (of the same `bytes`)
    int error = 0;           //!< set by run(): 0, -errno, kCorrupt or kNotReady
    //! Bytes moved from the page's start and covered by its checksum: io_bytes() of the bytes the page
    //! holds (a tensor's last page may hold less than a page); 0 = the whole page. A page is read back
    //! with the length it was written with.
    std::size_t bytes = 0;
  };
  //! The I/O length for a page holding `used` bytes: rounded up to storage::kIoAlignment, at most a
  //! page (0 = a whole page). A tensor's partial last page moves only that much to and from the drive.
  [[nodiscard]] std::size_t io_bytes(std::size_t used) const noexcept;
  //! The bytes `io` moves.
  [[nodiscard]] std::size_t bytes_of(const Io& io) const noexcept { return io.bytes == 0 ? page_size_ : io.bytes; }
  using Hooks = NvmeIoHooks;
  //! Writes (checksumming each page) and reads (verifying each page) the whole batch, keeping `depth`
  //! requests in flight; each Io's `error` says how it ended. Throws only std::bad_alloc, and only
  //! before it submits anything (every Io is then untouched).
  void run(std::span<Io> ios, const Hooks& hooks = {});
  // --- asynchronous reads: in flight across calls, beside run()'s batches ---
  //! Submits the read `io` (op must be read) and returns at once; `tag` names it to poll_async and
  //! wait_async. False, with nothing submitted, when the I/O lock is busy (another thread runs a
  //! batch: never waits for it, so the pager lock may be held), `depth` requests are in flight already,
  //! or the backend refused the request. Throws only std::bad_alloc, with nothing submitted.
  bool submit_async(const Io& io, std::uint64_t tag);
  //! If the read `tag` has ended, moves it to `out` (its `error` set and its data verified, as run()
  //! does) and returns true; otherwise collects what has ended without waiting and returns false. Never
  //! waits for the I/O lock (false while another thread holds it).
  bool poll_async(std::uint64_t tag, Io& out) noexcept;
  //! Waits (pager lock NOT held) until the read `tag` has ended, then moves it to `out` as poll_async.
  //! False if no such read is in flight.
  bool wait_async(std::uint64_t tag, Io& out) noexcept;
  //! Asynchronous reads submitted and not yet taken by poll_async or wait_async.
  [[nodiscard]] std::size_t async_in_flight() const noexcept { return async_count_.load(std::memory_order_relaxed); }

  //! XXH3-64 of a page's first `bytes` bytes (0: the whole page), seeded with its slot so that data
  //! read from the wrong slot fails the check.
  [[nodiscard]] std::uint64_t checksum(const void* data, std::uint32_t slot, std::size_t bytes = 0) const noexcept;

  [[nodiscard]] storage::StorageBackend& backend() noexcept { return *backend_; }
  [[nodiscard]] const char* backend_name() const noexcept { return backend_->name(); }

  struct Counters {
    std::atomic<std::uint64_t> pages_written{0}, pages_read{0}, write_errors{0}, read_errors{0}, corrupt_reads{0};
    std::atomic<std::uint64_t> bytes_written{0}, bytes_read{0};  //!< what those pages moved (Io::bytes)
  };
  [[nodiscard]] const Counters& counters() const noexcept { return counters_; }

 private:
  std::unique_ptr<storage::StorageBackend> backend_;
  std::size_t page_size_;
  unsigned depth_;
  std::uint32_t slots_;
  std::uint32_t in_use_ = 0;
  std::uint32_t peak_ = 0;
  std::vector<std::uint32_t> free_;
  // Sets io.error from a completion's result (verifying a read) and counts it.
  void complete(Io& io, std::int64_t result) noexcept;
  // A completion reaped by run() or the asynchronous calls (io_mu_ held): an asynchronous read's is
  // recorded in async_; false for run()'s own.
  bool take_async_completion(const storage::IoCompletion& c) noexcept;
  // Reaps what has ended (at least one with `block`) into async_ (io_mu_ held, no batch running).
  void reap_async(bool block) noexcept;
  // Moves the ended read `tag` out of async_ (io_mu_ held).
  bool take_ended(std::uint64_t tag, Io& out) noexcept;

  //! Backend tags of asynchronous reads carry this bit (run()'s tags are their batch indices).
  static constexpr std::uint64_t kAsyncTag = std::uint64_t{1} << 63;
  struct Async {
    std::uint64_t tag;
    Io io;
    bool ended = false;
  };

  std::mutex io_mu_;          // one batch at a time: backends are single-threaded
  std::vector<Async> async_;  // asynchronous reads in flight or ended, not yet taken (io_mu_)
  std::atomic<std::size_t> async_count_{0};
  Counters counters_;
};

}  // namespace tvmm::vmm
