#pragma once
// A simulated copy engine: one thread per direction that performs copies in order and, when throttled,
// takes as long as a bus of the given bandwidth and latency would (modelled time, not busy-waiting).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace tvmm::backend::sim {

class CopyEngine {
 public:
  CopyEngine(std::string name, double bandwidth_bytes_per_s, std::chrono::nanoseconds latency);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Performs the copy on the engine thread; returns when it (and its modelled duration) has completed.
  // Called by stream workers; copies from several streams share the engine in arrival order.
  void copy(void* dst, const void* src, std::size_t bytes);

 private:
  struct Job {
    void* dst;
    const void* src;
    std::size_t bytes;
    bool done = false;
  };
  void run();

  const std::string name_;
  const double bandwidth_;
  const std::chrono::nanoseconds latency_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Job*> queue_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point busy_until_{};
  std::thread thread_;
};

}  // namespace tvmm::backend::sim
