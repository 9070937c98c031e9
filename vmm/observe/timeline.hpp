#pragma once
// The timeline (config timeline.file, or TVMM_TIMELINE): what the pager did, when, as Chrome
// trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open. One lane ("thread") per
// copy engine, per I/O queue, per stream and per host thread that pins:
//   copy engine: host to device / device to host   a span per page move, from queued to completed
//   I/O queue: nvme                               a span per NVMe read or write batch
//   stream N                                      an instant per stream pin (the tensor, hit or miss)
//   pins: thread T                                a span per pin stall (the calling thread waited)
//   evictions                                     an instant per page evicted from the device
// Events are kept in memory and written when the pager is destroyed. Thread-safe. Times are the
// device backend's timeline clock (DeviceBackend::timeline_clock): the wall clock on a GPU, the
// modelled time on the simulator with timing "model", so that a simulated run's copies, pins and
// stalls line up as the model timed them.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "vmm/observe/output.hpp"

namespace tvmm::vmm {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  //! Opens `path` now (a bad path is a config_error at construction, as for the other outputs).
  //! `clock` dates the events (the calling thread's present time on a timeline every thread shares);
  //! empty = Clock::now.
  explicit Timeline(const std::string& path, std::function<Clock::time_point()> clock = {});
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  //! The present time by the timeline's clock, for the events' times.
  [[nodiscard]] Clock::time_point now() const noexcept { return clock_ ? clock_() : Clock::now(); }
  //! A lane by name, created on first use (its id is stable).
  std::uint32_t lane(const std::string& name);
  //! The lane "pins: thread T" of the calling thread.
  std::uint32_t thread_lane();
  //! A span [start, end) on `lane`. `args` is a JSON object's members ("\"page\": 3"), or empty.
  void span(std::uint32_t lane, const char* name, Clock::time_point start, Clock::time_point end,
            std::string args = {}) noexcept;
  //! An instant at `at` on `lane`.
  void instant(std::uint32_t lane, const char* name, Clock::time_point at, std::string args = {}) noexcept;
  //! Writes the timeline and closes the file (idempotent).
  void close() noexcept;

  //! Lane ids the pager uses on its hot paths, created at construction.
  std::uint32_t copy_in = 0, copy_out = 0, nvme = 0, evictions = 0;

 private:
  struct Event {
    const char* name;
    char phase;  // 'X' span, 'i' instant
    std::uint32_t lane;
    double ts_us, dur_us;
    std::string args;
  };
  [[nodiscard]] double us(Clock::time_point t) const noexcept;

  OutputFile out_;
  std::uint64_t number_;  // this timeline among all the process has made (thread_lane's cache key)
  std::function<Clock::time_point()> clock_;
  Clock::time_point start_ = now();
  std::mutex mu_;
  std::vector<std::string> lanes_;
  std::vector<Event> events_;
  bool closed_ = false;
};

}  // namespace tvmm::vmm
