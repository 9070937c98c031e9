#include "backends/storage/uring/uring_storage.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace tvmm::storage {

namespace {
constexpr unsigned kMaxAgain = 16;                        // -EAGAIN: the kernel had no resources right now
constexpr unsigned kMaxShort = 4;                         // short transfers: re-issue the whole request
constexpr std::size_t kMaxRegion = std::size_t{1} << 30;  // io_uring limits one registered buffer to 1 GiB
}  // namespace

int probe_uring() noexcept {
  io_uring ring{};
  const int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) return rc;
  io_uring_queue_exit(&ring);
  return 0;
}

std::unique_ptr<UringStorage> UringStorage::create(const StorageOptions& options, int* err) {
  io_uring ring{};
  const unsigned depth = options.queue_depth == 0 ? 1 : options.queue_depth;
  const int rc = io_uring_queue_init(depth, &ring, 0);
  if (rc < 0) {
    *err = rc;
    return nullptr;
  }
  try {
    return std::unique_ptr<UringStorage>(new UringStorage(options, ring));
  } catch (...) {
    io_uring_queue_exit(&ring);
    throw;
  }
}

UringStorage::UringStorage(const StorageOptions& options, io_uring ring)
    : files_(options), ring_(ring), depth_(options.queue_depth == 0 ? 1 : options.queue_depth), ops_(depth_) {
  free_.reserve(depth_);
  for (std::uint32_t i = depth_; i-- > 0;) free_.push_back(i);
}

UringStorage::~UringStorage() {
  // Requests in flight write into caller memory: let them finish before the ring goes.
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  io_uring_queue_exit(&ring_);  // also unregisters the buffers
}

bool UringStorage::register_buffers(void* base, std::size_t bytes) noexcept {
  if (!regions_.empty() || base == nullptr || bytes == 0) return false;
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return false;
  if (lim.rlim_cur != RLIM_INFINITY && bytes > lim.rlim_cur) return false;  // registering would fail: plain I/O
  std::vector<iovec> regions;
  for (std::size_t off = 0; off < bytes; off += kMaxRegion) {
    regions.push_back({static_cast<std::byte*>(base) + off, std::min(kMaxRegion, bytes - off)});
  }
  if (io_uring_register_buffers(&ring_, regions.data(), static_cast<unsigned>(regions.size())) != 0) return false;
  regions_ = std::move(regions);
  return true;
}

std::optional<int> UringStorage::fixed_index(const void* buf, std::size_t len) const noexcept {
  const auto* p = static_cast<const std::byte*>(buf);
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    const auto* b = static_cast<const std::byte*>(regions_[i].iov_base);
    if (p >= b && p + len <= b + regions_[i].iov_len) return static_cast<int>(i);
  }
  return std::nullopt;
}

int UringStorage::submit(std::span<const IoRequest> reqs) {
  if (const int rc = validate_requests(reqs, files_.slots(), files_.slot_size()); rc != 0) return rc;
  // Room for every result first: complete() runs after the kernel has consumed a completion, and must
  // not lose it to a failed allocation. All or none: a failure here queues nothing.
  ready_.reserve(outstanding() + reqs.size());
  const std::size_t before = waiting_.size();
  try {
    for (const auto& r : reqs) waiting_.push_back(Op{r, 0});
  } catch (...) {
    waiting_.resize(before);
    throw;
  }
  pump();
  return 0;
}

void UringStorage::prep(std::uint32_t index) noexcept {
  const Op& op = ops_[index];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: at most depth_ entries are in flight
  const int fd = files_.fd(op.req.slot);
  const auto off = static_cast<std::uint64_t>(files_.offset(op.req.slot));
  const auto len = static_cast<unsigned>(request_bytes(op.req, files_.slot_size()));
  if (const auto fixed = fixed_index(op.req.buf, len)) {
    if (op.req.op == IoOp::read) {
      io_uring_prep_read_fixed(sqe, fd, op.req.buf, len, off, *fixed);
    } else {
      io_uring_prep_write_fixed(sqe, fd, op.req.buf, len, off, *fixed);
    }
  } else if (op.req.op == IoOp::read) {
    io_uring_prep_read(sqe, fd, op.req.buf, len, off);
  } else {
    io_uring_prep_write(sqe, fd, op.req.buf, len, off);
  }
  io_uring_sqe_set_data64(sqe, index);
}

void UringStorage::pump() {
  unsigned queued = 0;
  while (!waiting_.empty() && !free_.empty()) {
    const auto index = free_.back();
    free_.pop_back();
    ops_[index] = waiting_.front();
    waiting_.pop_front();
    prep(index);
    ++queued;
  }
  if (queued == 0) return;
  in_flight_ += queued;
  // Entries the kernel does not take now stay in the submission ring; reap() submits them again.
  (void)io_uring_submit(&ring_);
}

void UringStorage::complete(std::uint32_t index, int res) noexcept {
  Op& op = ops_[index];
  const auto want = static_cast<int>(request_bytes(op.req, files_.slot_size()));
  const bool again = res == -EAGAIN || res == -EINTR;
  const bool short_io = res >= 0 && res < want;
  if ((again && op.attempts < kMaxAgain) || (short_io && op.attempts < kMaxShort)) {
    ++op.attempts;
    prep(index);  // re-issue the whole request in its own entry (nothing to allocate); reap() submits it
    resubmit_ = true;
    return;
  }
  ready_.push_back({op.req.tag, short_io ? -EIO : res});  // within the room submit() reserved
  free_.push_back(index);                                 // within ops_.size(): never allocates
  --in_flight_;
}

std::size_t UringStorage::reap(std::span<IoCompletion> out, std::size_t min) {
  for (;;) {
    // Collect whatever the kernel has finished.
    io_uring_cqe* cqe = nullptr;
    while (in_flight_ > 0 && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const auto index = static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      complete(index, res);
    }
    if (std::exchange(resubmit_, false)) (void)io_uring_submit(&ring_);
    pump();
    const std::size_t want = std::min(min, outstanding());
    if (ready_.size() >= want || ready_.size() >= out.size()) break;
    if (in_flight_ == 0) break;
    // Submits entries still in the ring (if an earlier submit was refused) and waits for one.
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // The ring itself failed: fail what has not reached the kernel, keep waiting for what has.
      for (const Op& op : waiting_) ready_.push_back({op.req.tag, rc});
      waiting_.clear();
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) break;
    }
  }
  const std::size_t n = std::min(out.size(), ready_.size());
  std::copy(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n), out.begin());
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

}  // namespace tvmm::storage
