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

void NvmeTier::complete(Io& io, std::int64_t r) noexcept {
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
}

bool NvmeTier::take_async_completion(const storage::IoCompletion& c) noexcept {
  if ((c.tag & kAsyncTag) == 0) return false;
  for (Async& a : async_) {
    if (a.tag == (c.tag & ~kAsyncTag) && !a.ended) {
      complete(a.io, c.result);
      a.ended = true;
      break;
    }
  }
  return true;
}

void NvmeTier::run(std::span<Io> ios, const Hooks& hooks) {
  if (ios.empty()) return;
  std::size_t done = 0;
  auto finish = [&](std::size_t i, std::int64_t r) {
    complete(ios[i], r);
    ++done;
    hooks.done(i);
  };
  // A pipeline of `depth_` requests, page by page: a request is submitted as soon as its frame is
  // ready and a place in the queue is free; a write is checksummed just before it is submitted and a
  // read verified as soon as it completes, so hashing overlaps the transfers still in flight.
  // Allocated before anything is submitted: once a request is in flight, nothing here may throw.
  // Asynchronous reads in flight take places in the queue too; their completions, reaped here, are
  // kept for poll_async and wait_async.
  std::vector<storage::IoCompletion> got(depth_);
  std::lock_guard lk(io_mu_);
  std::size_t next = 0;
  std::size_t mine = 0;  // this batch's requests in flight
  auto fill = [&] {
    while (next < ios.size() && backend_->outstanding() < depth_) {
      const bool idle = mine == 0;
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
      if (rc != 0) {
        finish(req.tag, rc);
      } else {
        ++mine;
      }
    }
  };
  fill();
  while (done < ios.size()) {
    const std::size_t n = backend_->reap(got, 1);
    // Refill the queue before verifying: the drive works on the next requests while this thread hashes.
    for (std::size_t i = 0; i < n; ++i) mine -= take_async_completion(got[i]) ? 0 : 1;
    fill();
    for (std::size_t i = 0; i < n; ++i) {
      if ((got[i].tag & kAsyncTag) == 0) finish(got[i].tag, got[i].result);
    }
    if (n == 0) fill();  // nothing was in flight
  }
}

bool NvmeTier::submit_async(const Io& io, std::uint64_t tag) {
  std::unique_lock lk(io_mu_, std::try_to_lock);
  if (!lk.owns_lock() || backend_->outstanding() >= depth_) return false;
  async_.reserve(async_.size() + 1);  // may throw, before anything is submitted
  const storage::IoRequest req{storage::IoOp::read, io.slot, io.buf, tag | kAsyncTag,
                               static_cast<std::uint32_t>(io.bytes)};
  int rc = 0;
  try {
    rc = backend_->submit(std::span(&req, 1));
  } catch (const std::bad_alloc&) {
    rc = -ENOMEM;
  }
  if (rc != 0) return false;
  async_.push_back({tag & ~kAsyncTag, io, false});
  async_count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void NvmeTier::reap_async(bool block) noexcept {
  storage::IoCompletion got[8];
  std::size_t n = 0;
  do {
    try {
      n = backend_->reap(std::span(got), block ? 1 : 0);
    } catch (...) {
      n = 0;  // the backends' reap does not throw; nothing is lost by trying again later
    }
    for (std::size_t i = 0; i < n; ++i) take_async_completion(got[i]);
    block = false;
  } while (n == std::size(got));
}

bool NvmeTier::take_ended(std::uint64_t tag, Io& out) noexcept {
  for (auto it = async_.begin(); it != async_.end(); ++it) {
    if (it->tag == tag && it->ended) {
      out = it->io;
      async_.erase(it);
      async_count_.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

bool NvmeTier::poll_async(std::uint64_t tag, Io& out) noexcept {
  std::unique_lock lk(io_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  if (take_ended(tag, out)) return true;
  reap_async(false);
  return take_ended(tag, out);
}

bool NvmeTier::wait_async(std::uint64_t tag, Io& out) noexcept {
  std::lock_guard lk(io_mu_);
  for (;;) {
    if (take_ended(tag, out)) return true;
    const bool known = std::any_of(async_.begin(), async_.end(), [&](const Async& a) { return a.tag == tag; });
    if (!known || backend_->outstanding() == 0) return false;
    reap_async(true);
  }
}

NvmeTier::~NvmeTier() {
  // Reads still in flight must end before the backend (and the buffers they fill) go.
  std::lock_guard lk(io_mu_);
  while (backend_->outstanding() != 0) reap_async(true);
}

}  // namespace tvmm::vmm
