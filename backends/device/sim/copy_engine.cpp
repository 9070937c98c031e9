#include "backends/device/sim/copy_engine.hpp"

#include <cstring>

namespace tvmm::backend::sim {

CopyEngine::CopyEngine(std::string name, double bandwidth_bytes_per_s, std::chrono::nanoseconds latency)
    : name_(std::move(name)), bandwidth_(bandwidth_bytes_per_s), latency_(latency) {
  thread_ = std::thread([this] { run(); });
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void CopyEngine::copy(void* dst, const void* src, std::size_t bytes) {
  Job job{dst, src, bytes};
  std::unique_lock lk(mu_);
  queue_.push_back(&job);
  work_cv_.notify_one();
  done_cv_.wait(lk, [&] { return job.done; });
}

void CopyEngine::run() {
  using clock = std::chrono::steady_clock;
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    Job* job = queue_.front();
    queue_.pop_front();
    lk.unlock();

    // The modelled finish time: the engine is a single bus lane, so a copy starts when the previous one
    // finished (or now), then costs latency + bytes / bandwidth.
    auto finish = clock::time_point{};
    const bool throttled = bandwidth_ > 0.0 || latency_.count() > 0;
    if (throttled) {
      const auto start = std::max(clock::now(), busy_until_);
      const auto transfer = bandwidth_ > 0.0 ? std::chrono::nanoseconds(static_cast<std::int64_t>(
                                                   static_cast<double>(job->bytes) / bandwidth_ * 1e9))
                                             : std::chrono::nanoseconds{0};
      finish = start + latency_ + transfer;
      busy_until_ = finish;
    }
    std::memcpy(job->dst, job->src, job->bytes);
    if (throttled) std::this_thread::sleep_until(finish);

    lk.lock();
    job->done = true;
    done_cv_.notify_all();
  }
}

}  // namespace tvmm::backend::sim
