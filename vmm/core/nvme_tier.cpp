#include "vmm/core/nvme_tier.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>

namespace tvmm::vmm {

NvmeTier::NvmeTier(std::unique_ptr<storage::StorageBackend> backend, std::size_t page_size, unsigned depth)
    : backend_(std::move(backend)), page_size_(page_size), depth_(std::max(1U, depth)), slots_(backend_->slots()) {
  free_.reserve(slots_);
  for (std::uint32_t s = slots_; s-- > 0;) free_.push_back(s);  // low slots first
}

std::optional<std::uint32_t> NvmeTier::try_acquire() noexcept {
  if (free_.empty()) return std::nullopt;
  const auto s = free_.back();
  free_.pop_back();
  peak_ = std::max(peak_, ++in_use_);
  return s;
}

void NvmeTier::release(std::uint32_t slot) noexcept {
  free_.push_back(slot);
  --in_use_;
}

std::size_t NvmeTier::io_bytes(std::size_t used) const noexcept {
  const std::size_t rounded = (used + storage::kIoAlignment - 1) / storage::kIoAlignment * storage::kIoAlignment;
  return used == 0 ? page_size_ : std::min(page_size_, rounded);
}

std::uint64_t NvmeTier::checksum(const void* data, std::uint32_t slot, std::size_t bytes) const noexcept {
  // The seed mixes in the slot: a read that lands on another slot's (valid) data still fails.
  return XXH3_64bits_withSeed(data, bytes == 0 ? page_size_ : bytes, 0x9E3779B97F4A7C15ULL * (std::uint64_t{slot} + 1));
}

void NvmeTier::run(std::span<Io> ios, const Hooks& hooks) {
  if (ios.empty()) return;
  std::size_t done = 0;
  auto finish = [&](std::size_t i, std::int64_t r) {
    Io& io = ios[i];
    const bool write = io.op == storage::IoOp::write;
    const auto full = static_cast<std::int64_t>(bytes_of(io));
    io.error = r == full ? 0 : r < 0 ? static_cast<int>(r) : -EIO;  // a short transfer is an I/O error
    if (io.error == 0 && !write && checksum(io.buf, io.slot, io.bytes) != io.checksum) io.error = kCorrupt;
    if (io.error == kNotReady) {
      // not an I/O error: nothing was submitted
    } else if (io.error == 0) {
      (write ? counters_.pages_written : counters_.pages_read).fetch_add(1, std::memory_order_relaxed);
      (write ? counters_.bytes_written : counters_.bytes_read).fetch_add(bytes_of(io), std::memory_order_relaxed);
    } else if (io.error == kCorrupt) {
      counters_.corrupt_reads.fetch_add(1, std::memory_order_relaxed);
    } else {
      (write ? counters_.write_errors : counters_.read_errors).fetch_add(1, std::memory_order_relaxed);
    }
    ++done;
    hooks.done(i);
  };
  // A pipeline of `depth_` requests, page by page: a request is submitted as soon as its frame is
  // ready and a place in the queue is free; a write is checksummed just before it is submitted and a
  // read verified as soon as it completes, so hashing overlaps the transfers still in flight.
  // Allocated before anything is submitted: once a request is in flight, nothing here may throw.
  std::vector<storage::IoCompletion> got(depth_);
  std::lock_guard lk(io_mu_);
  std::size_t next = 0;
  auto fill = [&] {
    while (next < ios.size() && backend_->outstanding() < depth_) {
      const bool idle = backend_->outstanding() == 0;
      if (!hooks.ready(next, idle)) {
        if (!idle) return;  // checked again after the next completion
        finish(next++, kNotReady);
        continue;
      }
      Io& io = ios[next];
      if (io.op == storage::IoOp::write) io.checksum = checksum(io.buf, io.slot, io.bytes);
      const storage::IoRequest req{io.op, io.slot, io.buf, next, static_cast<std::uint32_t>(io.bytes)};
      ++next;
      int rc = 0;
      try {
        rc = backend_->submit(std::span(&req, 1));
      } catch (const std::bad_alloc&) {
        rc = -ENOMEM;  // the backends queue all or none: this request was not submitted
      }
      if (rc != 0) finish(req.tag, rc);
    }
  };
  fill();
  while (done < ios.size()) {
    const std::size_t n = backend_->reap(got, 1);
    // Refill the queue before verifying: the drive works on the next requests while this thread hashes.
    fill();
    for (std::size_t i = 0; i < n; ++i) finish(got[i].tag, got[i].result);
    if (n == 0) fill();  // nothing was in flight
  }
}

}  // namespace tvmm::vmm
