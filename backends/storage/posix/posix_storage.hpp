#pragma once
// Storage backend on pread/pwrite, run by worker threads (one per queue slot, at most 16): the fallback
// where io_uring is unavailable (seccomp, kernel.io_uring_disabled), and selectable by config.
// Short transfers and EINTR/EAGAIN re-issue the whole request a bounded number of times.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/storage/slot_files.hpp"
#include "backends/storage/storage_backend.hpp"

namespace tvmm::storage {

class PosixStorage final : public StorageBackend {
 public:
  explicit PosixStorage(const StorageOptions& options);
  ~PosixStorage() override;

  [[nodiscard]] const char* name() const noexcept override { return "posix"; }
  [[nodiscard]] std::uint32_t slots() const noexcept override { return files_.slots(); }
  [[nodiscard]] std::size_t slot_size() const noexcept override { return files_.slot_size(); }
  [[nodiscard]] int submit(std::span<const IoRequest> reqs) override;
  std::size_t reap(std::span<IoCompletion> out, std::size_t min) override;
  [[nodiscard]] std::size_t outstanding() const noexcept override;
  int bind_workers(const std::vector<unsigned>& cpus) noexcept override;

 private:
  void worker();
  [[nodiscard]] std::int64_t transfer(const IoRequest& r) const noexcept;

  SlotFiles files_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<IoRequest> queue_;
  std::vector<IoCompletion> ready_;
  std::size_t outstanding_ = 0;  // submitted, not reaped
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tvmm::storage
