#include "backends/device/sim/copy_engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace tvmm::device::sim {

CopyEngine::CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency, bool ordered)
    : bandwidth_(bandwidth_bytes_per_s), latency_(latency), ordered_(ordered) {}

std::uint64_t CopyEngine::take_ticket() noexcept {
  if (!ordered_) return 0;
  std::lock_guard lk(mu_);
  return ++tickets_;
}

namespace {

void move_bytes(void* dst, const void* src, std::size_t bytes, const FileSpan* from, const FileSpan* to) {
  if (dst == nullptr && src == nullptr) return;  // a managed-memory prefetch: time, no data
  if (from == nullptr || to == nullptr) {
    std::memcpy(dst, src, bytes);
    return;
  }
  loff_t in = from->offset, out = to->offset;
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::copy_file_range(from->fd, &in, to->fd, &out, bytes - done, 0);
    if (n <= 0) {  // not expected between two memfds; fall back to the mapped addresses
      std::memcpy(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, bytes - done);
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::chrono::nanoseconds CopyEngine::slot(std::size_t bytes) const noexcept {
  const auto transfer =
      bandwidth_ > 0.0
          ? std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bandwidth_ * 1e9))
          : std::chrono::nanoseconds{0};
  return latency_ + transfer;
}

CopyEngine::time_point CopyEngine::reserve(time_point start, std::chrono::nanoseconds length) {
  if (!ordered_) {
    const auto begin = std::max(start, busy_until_);
    busy_until_ = begin + length;
    return begin;
  }
  // The earliest stretch of `length` at or after `start` that no slot overlaps: walk the slots from the
  // last one that begins before `start`, moving the candidate past each slot it would overlap.
  auto begin = std::max(start, forgotten_);
  auto it = slots_.upper_bound(begin);
  if (it != slots_.begin()) --it;
  for (; it != slots_.end(); ++it) {
    if (it->second <= begin) continue;       // ends before the candidate
    if (begin + length <= it->first) break;  // fits before this slot
    begin = std::max(begin, it->second);     // overlaps it: try after it
  }
  const auto end = begin + length;
  if (length.count() > 0) {
    // Joined to a slot that ends where it begins (the usual case: one stream's copies back to back).
    auto at = slots_.lower_bound(begin);
    if (at != slots_.begin() && std::prev(at)->second == begin) {
      auto prev = std::prev(at);
      prev->second = end;
      if (at != slots_.end() && at->first == end) {
        prev->second = at->second;
        slots_.erase(at);
      }
    } else if (at != slots_.end() && at->first == end) {
      const auto after = at->second;
      slots_.erase(at);
      slots_.emplace(begin, after);
    } else {
      slots_.emplace(begin, end);
    }
    while (slots_.size() > kKeptSlots) {  // the oldest stretch now counts as busy for good
      forgotten_ = std::max(forgotten_, slots_.begin()->second);
      slots_.erase(slots_.begin());
    }
  }
  return begin;
}

std::chrono::steady_clock::time_point CopyEngine::copy(void* dst, const void* src, std::size_t bytes,
                                                       std::chrono::steady_clock::time_point start,
                                                       std::uint64_t ticket, const FileSpan* from, const FileSpan* to) {
  using clock = std::chrono::steady_clock;
  const bool throttled = bandwidth_ > 0.0 || latency_.count() > 0;
  clock::time_point finish{};
  {
    std::unique_lock lk(mu_);
    // Ordered: the copies queued before this one reserve their slots first (see the header).
    if (ticket != 0) turn_cv_.wait(lk, [&] { return serving_ == ticket; });
    if (throttled) {
      finish = reserve(start, slot(bytes)) + slot(bytes);
      move_bytes(dst, src, bytes, from, to);
    } else {
      const auto t0 = clock::now();
      move_bytes(dst, src, bytes, from, to);
      const auto took = clock::now() - t0;
      finish = reserve(start, std::chrono::duration_cast<std::chrono::nanoseconds>(took)) + took;
    }
    if (ticket != 0) {
      ++serving_;
      turn_cv_.notify_all();
    }
  }
  // The modelled completion; the lane is free for the next copy to reserve its own slot.
  std::this_thread::sleep_until(finish);
  return finish;
}

}  // namespace tvmm::device::sim
