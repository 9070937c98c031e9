#pragma once
// Storage backend on io_uring (liburing): O_DIRECT slot files, batched submission up to the queue depth,
// completions matched by user data, fixed (registered) buffers for the host tier's frames when
// RLIMIT_MEMLOCK allows, and bounded re-issue of a whole request on -EAGAIN or a short transfer.

#include <liburing.h>
#include <sys/uio.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "backends/storage/slot_files.hpp"
#include "backends/storage/storage_backend.hpp"

namespace tvmm::storage {

class UringStorage final : public StorageBackend {
 public:
  //! Null with `*err` = -errno when io_uring cannot start here (seccomp, kernel.io_uring_disabled).
  static std::unique_ptr<UringStorage> create(const StorageOptions& options, int* err);
  ~UringStorage() override;

  [[nodiscard]] const char* name() const noexcept override { return "uring"; }
  [[nodiscard]] std::uint32_t slots() const noexcept override { return files_.slots(); }
  [[nodiscard]] std::size_t slot_size() const noexcept override { return files_.slot_size(); }
  bool register_buffers(void* base, std::size_t bytes) noexcept override;
  [[nodiscard]] int submit(std::span<const IoRequest> reqs) override;
  std::size_t reap(std::span<IoCompletion> out, std::size_t min) override;
  [[nodiscard]] std::size_t outstanding() const noexcept override {
    return waiting_.size() + in_flight_ + ready_.size();
  }
  //! Whether register_buffers succeeded (tests and `tvmm info`).
  [[nodiscard]] bool buffers_registered() const noexcept { return !regions_.empty(); }

 private:
  struct Op {
    IoRequest req;
    unsigned attempts = 0;
  };
  UringStorage(const StorageOptions& options, io_uring ring);
  // Moves waiting requests into free submission entries and submits them.
  void pump();
  void prep(std::uint32_t index) noexcept;
  // Handles one completion: a final result goes to ready_ (within the room submit() reserved); a retry
  // is prepared again in its own entry, still in flight, and submitted by reap(). Never allocates: the
  // kernel has consumed the completion, which must not be lost.
  void complete(std::uint32_t index, int res) noexcept;
  // Index of the registered region holding [buf, buf+len), if any.
  std::optional<int> fixed_index(const void* buf, std::size_t len) const noexcept;

  SlotFiles files_;
  io_uring ring_;
  unsigned depth_;
  std::vector<Op> ops_;              // one per queue entry
  std::vector<std::uint32_t> free_;  // free indices into ops_
  std::deque<Op> waiting_;           // submitted by the caller, not yet given to the kernel
  std::size_t in_flight_ = 0;        // given to the kernel
  bool resubmit_ = false;            // complete() prepared retries not yet submitted
  std::vector<IoCompletion> ready_;  // final results not yet reaped
  std::vector<iovec> regions_;       // registered buffers
};

}  // namespace tvmm::storage
