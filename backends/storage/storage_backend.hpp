#pragma once
// Contract of the storage-backend plug-point: fixed-size slots in pre-allocated files, read and written
// asynchronously in batches. The NVMe tier (vmm/nvme_tier) is its only user in the pager; the storage
// conformance suite (tests/conformance) and the throughput benchmark use it directly.
//
//   slot s of n files lives in file s % n at offset (s / n) * slot_size: several directories (one per
//   drive) stripe the slots across drives.
//   submit(reqs)   queues every request or none: a request naming a slot out of range, a buffer not
//                  aligned to kIoAlignment or a length that is not a multiple of it or passes the slot
//                  makes it return -EINVAL and queue nothing. Never blocks on
//                  the device; requests beyond the queue depth wait inside the backend.
//   reap(out, min) blocks until at least min(min, outstanding()) completions are ready, then moves up to
//                  out.size() of them into `out` (any order; matched by tag) and returns how many.
//                  A completion's result is the request's length (request_bytes) on success, otherwise
//                  -errno (a backend retries -EAGAIN and short transfers a bounded number of times
//                  before reporting them). Callers must treat any other result as a failure.
// Backends are not internally synchronised: one thread at a time (the NVMe tier serialises batches).
// Failures at start-up (a directory that cannot hold the files, no space for the budget) throw.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tvmm::storage {

//! Buffers and slot sizes must be multiples of this (O_DIRECT).
inline constexpr std::size_t kIoAlignment = 4096;

enum class IoOp : std::uint8_t { read, write };

//! One transfer between a buffer and the start of a slot.
struct IoRequest {
  IoOp op = IoOp::read;
  std::uint32_t slot = 0;
  void* buf = nullptr;    //!< request_bytes() bytes, aligned to kIoAlignment
  std::uint64_t tag = 0;  //!< returned in the completion
  //! Bytes to move from the slot's start: 0 = the whole slot; otherwise a multiple of kIoAlignment, at
  //! most the slot size (a page that holds less than a slot of data moves only that, rounded up).
  std::uint32_t bytes = 0;
};

struct IoCompletion {
  std::uint64_t tag = 0;
  std::int64_t result = 0;  //!< the request's length on success, otherwise -errno or a short byte count
};

//! Where and how a backend keeps its slots.
struct StorageOptions {
  std::vector<std::string> paths;  //!< directories; slots are striped across them
  std::size_t slot_size = 0;       //!< bytes per slot, a multiple of kIoAlignment
  std::uint32_t slots = 0;         //!< number of slots (all reserved with fallocate at start)
  unsigned queue_depth = 32;       //!< requests in flight at once
  bool direct = true;              //!< O_DIRECT (bypass the page cache)
  bool use_tmpfile = true;         //!< O_TMPFILE; false forces the O_CREAT|O_EXCL + unlink fallback (tests)
};

class StorageBackend {
 public:
  virtual ~StorageBackend() = default;
  StorageBackend() = default;
  StorageBackend(const StorageBackend&) = delete;
  StorageBackend& operator=(const StorageBackend&) = delete;

  [[nodiscard]] virtual const char* name() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t slots() const noexcept = 0;
  [[nodiscard]] virtual std::size_t slot_size() const noexcept = 0;
  //! Offers a memory block that most buffers will lie in (the host tier's frames) for fixed-buffer
  //! I/O; returns whether the backend registered it. Optional: false means plain transfers.
  virtual bool register_buffers(void* /*base*/, std::size_t /*bytes*/) noexcept { return false; }
  //! Restricts the backend's worker threads to `cpus`. Returns how many threads it bound (0 for a
  //! backend without threads: io_uring's work runs in the kernel), or -1 if the OS refused.
  virtual int bind_workers(const std::vector<unsigned>& /*cpus*/) noexcept { return 0; }
  //! Queues the requests (all or none); 0, or -EINVAL for a bad request.
  [[nodiscard]] virtual int submit(std::span<const IoRequest> reqs) = 0;
  //! See the contract above.
  virtual std::size_t reap(std::span<IoCompletion> out, std::size_t min) = 0;
  //! Requests submitted and not yet reaped.
  [[nodiscard]] virtual std::size_t outstanding() const noexcept = 0;
};

//! Creates the backend registered as `name` (backends/storage/registry.cpp: "uring", "posix"), or for
//! "auto" the first registered one that starts here (uring, or posix when io_uring is unavailable,
//! e.g. blocked by seccomp or kernel.io_uring_disabled), saying on stderr why the ones before did not.
//! Throws tvmm::config_error for an unknown name or a named backend that cannot start,
//! tvmm::out_of_memory when the directories lack space for the slots, tvmm::io_error for other file
//! errors.
std::unique_ptr<StorageBackend> make_storage_backend(const std::string& name, const StorageOptions& options);

//! The bytes `r` moves with slots of `slot_size` bytes: IoRequest::bytes, or the whole slot for 0.
[[nodiscard]] inline std::size_t request_bytes(const IoRequest& r, std::size_t slot_size) noexcept {
  return r.bytes == 0 ? slot_size : r.bytes;
}
//! 0 if every request names a slot below `slots`, an aligned, non-null buffer and a length that is a
//! multiple of kIoAlignment no larger than `slot_size`; else -EINVAL.
[[nodiscard]] int validate_requests(std::span<const IoRequest> reqs, std::uint32_t slots,
                                    std::size_t slot_size) noexcept;

//! Runs `reqs` to completion: submits them and reaps until all are done; results[i] is the result of
//! reqs[i]. Returns -EINVAL (and runs nothing) if submit refuses the batch.
int run_batch(StorageBackend& backend, std::span<const IoRequest> reqs, std::span<std::int64_t> results);

//! "No space left on device (ENOSPC)" for a positive errno.
std::string errno_text(int err);

//! 0 if an io_uring instance can be created here, else -errno (EPERM: seccomp or
//! kernel.io_uring_disabled; ENOSYS: a kernel without io_uring).
int probe_uring() noexcept;

}  // namespace tvmm::storage
