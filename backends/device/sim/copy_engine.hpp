#pragma once
// A simulated copy engine (one per direction). It is a lane with its own bus clock rather than a
// thread: the stream worker that issues a copy runs it while holding the lane, so copies of one
// direction are serialised across all streams while the two directions overlap, and a throttled copy
// reserves the next slot on the bus clock (latency + bytes / bandwidth) and completes at its end. The
// bus clock is device time (see sim_stream.hpp): a slot starts when the issuing stream reaches the copy
// or when the previous slot ends, whichever is later.
// A thread per engine modelled the same thing but cost two extra thread wake-ups per copy (measured:
// ~107 us fixed cost per copy on a 2-core VM, more than a 2 MiB memcpy).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace tvmm::device::sim {

//! Physical memory as the simulator holds it: a range of a memfd.
struct FileSpan {
  int fd = -1;
  std::int64_t offset = 0;
};

class CopyEngine {
 public:
  CopyEngine(double bandwidth_bytes_per_s, std::chrono::nanoseconds latency);
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Performs a copy that a stream issues at device time `start`; returns its device end time, once
  // the wall clock has reached it. Unthrottled, the copy takes the memcpy's real time. With `from`
  // and `to` set (a copy between two device addresses) the bytes move between the physical memory
  // behind them with copy_file_range, as a GPU's copy engine moves them, untouched by any host thread.
  // With both addresses null it moves nothing and takes the time (a managed-memory prefetch).
  std::chrono::steady_clock::time_point copy(void* dst, const void* src, std::size_t bytes,
                                             std::chrono::steady_clock::time_point start,
                                             const FileSpan* from = nullptr, const FileSpan* to = nullptr);

  //! A throttled copy's time on the bus: the latency plus bytes / bandwidth (the latency alone without
  //! a bandwidth).
  [[nodiscard]] std::chrono::nanoseconds slot(std::size_t bytes) const noexcept;
  [[nodiscard]] double bandwidth() const noexcept { return bandwidth_; }

 private:
  const double bandwidth_;
  const std::chrono::nanoseconds latency_;
  std::mutex mu_;  // the lane: one copy on the bus at a time
  std::chrono::steady_clock::time_point busy_until_{};
};

}  // namespace tvmm::device::sim
