#include "vmm/observe/timeline.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "vmm/config/config_keys.hpp"

namespace tvmm::vmm {

namespace {
std::atomic<std::uint64_t> g_timelines{0};  // timelines made so far in this process
}  // namespace

Timeline::Timeline(const std::string& path, std::function<Clock::time_point()> clock)
    : out_(path, "timeline.file"), number_(++g_timelines), clock_(std::move(clock)) {
  copy_in = lane("copy engine: host to device");
  copy_out = lane("copy engine: device to host");
  nvme = lane("I/O queue: nvme");
  evictions = lane("evictions");
}

Timeline::~Timeline() { close(); }

std::uint32_t Timeline::lane(const std::string& name) {
  std::lock_guard lk(mu_);
  const auto it = std::find(lanes_.begin(), lanes_.end(), name);
  if (it != lanes_.end()) return static_cast<std::uint32_t>(it - lanes_.begin()) + 1;
  lanes_.push_back(name);
  return static_cast<std::uint32_t>(lanes_.size());
}

std::uint32_t Timeline::thread_lane() {
  // Cached per thread for the timeline it was made for (by number: a later one may reuse the address).
  thread_local std::uint64_t owner = 0;
  thread_local std::uint32_t id = 0;
  if (owner != number_) {
    id = lane("pins: thread " + std::to_string(::syscall(SYS_gettid)));
    owner = number_;
  }
  return id;
}

double Timeline::us(Clock::time_point t) const noexcept {
  // The clock is each calling thread's own (DeviceBackend::timeline_clock): one that lags the thread
  // that made the timeline is dated at the timeline's start, never before it.
  return std::max(0.0, std::chrono::duration<double, std::micro>(t - start_).count());
}

void Timeline::span(std::uint32_t lane, const char* name, Clock::time_point start, Clock::time_point end,
                    std::string args) noexcept {
  try {
    std::lock_guard lk(mu_);
    events_.push_back({name, 'X', lane, us(start), std::max(0.0, us(end) - us(start)), std::move(args)});
  } catch (...) {  // out of memory: the timeline loses an event, the pager goes on
  }
}

void Timeline::instant(std::uint32_t lane, const char* name, Clock::time_point at, std::string args) noexcept {
  try {
    std::lock_guard lk(mu_);
    events_.push_back({name, 'i', lane, us(at), 0.0, std::move(args)});
  } catch (...) {
  }
}

void Timeline::close() noexcept {
  std::lock_guard lk(mu_);
  if (closed_) return;
  closed_ = true;
  std::FILE* f = out_.get();
  if (f != nullptr) {
    std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    std::fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": \"tvmm\"}}");
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      std::fprintf(f,
                   ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %zu, \"args\": {\"name\": %s}}",
                   i + 1, toml_string(lanes_[i]).c_str());
      std::fprintf(f,
                   ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": %zu, \"args\": "
                   "{\"sort_index\": %zu}}",
                   i + 1, i + 1);
    }
    for (const Event& e : events_) {
      std::fprintf(f, ",\n{\"name\": \"%s\", \"ph\": \"%c\", \"pid\": 1, \"tid\": %u, \"ts\": %.3f", e.name, e.phase,
                   e.lane, e.ts_us);
      if (e.phase == 'X') std::fprintf(f, ", \"dur\": %.3f", e.dur_us);
      if (e.phase == 'i') std::fprintf(f, ", \"s\": \"t\"");
      if (!e.args.empty()) std::fprintf(f, ", \"args\": {%s}", e.args.c_str());
      std::fprintf(f, "}");
    }
    std::fprintf(f, "\n]}\n");
  }
  out_.close();
}

}  // namespace tvmm::vmm
