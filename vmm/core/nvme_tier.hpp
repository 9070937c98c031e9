#pragma once
// The NVMe tier: `slots` page slots in a storage backend's files, a checksum per page and the batched
// I/O that moves pages between host frames and slots. Slot bookkeeping (try_acquire, release) needs
// the pager lock; run() must be called WITHOUT it: it blocks until the batch has completed, and
// batches from several threads run one after another.

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
  std::mutex io_mu_;  // one batch at a time: backends are single-threaded
  Counters counters_;
};

}  // namespace tvmm::vmm
