#include "backends/storage/posix/posix_storage.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "backends/topology/placement.hpp"

namespace tvmm::storage {

namespace {
constexpr unsigned kMaxWorkers = 16;
constexpr unsigned kMaxAttempts = 4;
}  // namespace

PosixStorage::PosixStorage(const StorageOptions& options) : files_(options) {
  const unsigned n = std::clamp(options.queue_depth, 1U, kMaxWorkers);
  try {
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { worker(); });
  } catch (...) {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

PosixStorage::~PosixStorage() {
  {
    std::unique_lock lk(mu_);
    // Requests in flight write into caller memory: finish them before the workers go.
    done_cv_.wait(lk, [&] { return queue_.empty() && outstanding_ == ready_.size(); });
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int PosixStorage::submit(std::span<const IoRequest> reqs) {
  if (const int rc = validate_requests(reqs, files_.slots(), files_.slot_size()); rc != 0) return rc;
  {
    std::lock_guard lk(mu_);
    // Room for every result first: a worker must not fail to report a finished transfer. (Each
    // allocation throws before anything is queued: all or none.)
    ready_.reserve(outstanding_ + reqs.size());
    queue_.insert(queue_.end(), reqs.begin(), reqs.end());
    outstanding_ += reqs.size();
  }
  work_cv_.notify_all();
  return 0;
}

std::int64_t PosixStorage::transfer(const IoRequest& r) const noexcept {
  const auto len = request_bytes(r, files_.slot_size());
  const int fd = files_.fd(r.slot);
  const off_t off = files_.offset(r.slot);
  ssize_t res = 0;
  for (unsigned attempt = 0; attempt < kMaxAttempts; ++attempt) {
    res = r.op == IoOp::read ? ::pread(fd, r.buf, len, off) : ::pwrite(fd, r.buf, len, off);
    if (res == static_cast<ssize_t>(len)) return res;
    if (res < 0 && errno != EINTR && errno != EAGAIN) return -errno;
  }
  return res < 0 ? -errno : -EIO;  // still short (or interrupted) after every attempt
}

void PosixStorage::worker() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    const IoRequest r = queue_.front();
    queue_.pop_front();
    lk.unlock();
    const IoCompletion c{r.tag, transfer(r)};
    lk.lock();
    ready_.push_back(c);  // within the room submit() reserved
    done_cv_.notify_all();
  }
}

std::size_t PosixStorage::reap(std::span<IoCompletion> out, std::size_t min) {
  std::unique_lock lk(mu_);
  const std::size_t want = std::min({min, outstanding_, out.size()});
  done_cv_.wait(lk, [&] { return ready_.size() >= want; });
  const std::size_t n = std::min(out.size(), ready_.size());
  std::copy(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n), out.begin());
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
  outstanding_ -= n;
  return n;
}

std::size_t PosixStorage::outstanding() const noexcept {
  std::lock_guard lk(mu_);
  return outstanding_;
}

int PosixStorage::bind_workers(const std::vector<unsigned>& cpus) noexcept {
  for (auto& t : workers_) {
    if (!topology::bind_thread(t.native_handle(), cpus, nullptr)) return -1;
  }
  return static_cast<int>(workers_.size());
}

}  // namespace tvmm::storage
