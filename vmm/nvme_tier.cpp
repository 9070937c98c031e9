#include "vmm/nvme_tier.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>

namespace tvmm::detail {

NvmeTier::NvmeTier(std::unique_ptr<storage::StorageBackend> backend, std::size_t page_size)
    : backend_(std::move(backend)), page_size_(page_size), slots_(backend_->slots()) {
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

std::uint64_t NvmeTier::checksum(const void* data, std::uint32_t slot) const noexcept {
  // The seed mixes in the slot: a read that lands on another slot's (valid) data still fails.
  return XXH3_64bits_withSeed(data, page_size_, 0x9E3779B97F4A7C15ULL * (std::uint64_t{slot} + 1));
}

void NvmeTier::run(std::span<Io> ios) {
  if (ios.empty()) return;
  std::vector<storage::IoRequest> reqs(ios.size());
  for (std::size_t i = 0; i < ios.size(); ++i) {
    Io& io = ios[i];
    if (io.op == storage::IoOp::write) io.checksum = checksum(io.buf, io.slot);
    reqs[i] = {io.op, io.slot, io.buf, i};
  }
  std::vector<std::int64_t> results(ios.size());
  int rc = 0;
  {
    std::lock_guard lk(io_mu_);
    rc = storage::run_batch(*backend_, reqs, results);
  }
  const auto full = static_cast<std::int64_t>(page_size_);
  for (std::size_t i = 0; i < ios.size(); ++i) {
    Io& io = ios[i];
    const std::int64_t r = rc != 0 ? rc : results[i];
    io.error = r == full ? 0 : r < 0 ? static_cast<int>(r) : -EIO;  // a short transfer is an I/O error
    const bool write = io.op == storage::IoOp::write;
    if (io.error == 0 && !write && checksum(io.buf, io.slot) != io.checksum) io.error = kCorrupt;
    if (io.error == 0) {
      (write ? counters_.pages_written : counters_.pages_read).fetch_add(1, std::memory_order_relaxed);
    } else if (io.error == kCorrupt) {
      counters_.corrupt_reads.fetch_add(1, std::memory_order_relaxed);
    } else {
      (write ? counters_.write_errors : counters_.read_errors).fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace tvmm::detail
