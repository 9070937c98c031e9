#include "backends/device/sim/sim_stream.hpp"

#include <algorithm>
#include <thread>

#include "backends/device/sim/copy_engine.hpp"
#include "backends/topology/placement.hpp"

namespace tvmm::backend::sim {

namespace {
// This thread's host time (see sim_stream.hpp): with Timing::wall the wall clock less t_lag, with
// Timing::model t_seen.
thread_local DeviceClock::duration t_lag{0};
thread_local DeviceClock::time_point t_seen{};
DeviceClock::time_point host_now(Timing timing) noexcept {
  return timing == Timing::model ? t_seen : DeviceClock::now() - t_lag;
}
// The thread found work complete at device time `at`; `since` is its host time when it began waiting
// for it (or now, for a query that did not wait). Its host time becomes the later of the two.
void observe(Timing timing, DeviceClock::time_point at, DeviceClock::time_point since) noexcept {
  if (timing == Timing::model) {
    t_seen = std::max(t_seen, at);
    return;
  }
  const auto now = DeviceClock::now();
  t_lag = now - std::min(now, std::max(since, at));
}
}  // namespace

void spend_host_time(Timing timing, DeviceClock::duration d) {
  if (d <= DeviceClock::duration::zero()) return;
  if (timing == Timing::model) {
    t_seen += d;
    return;
  }
  std::this_thread::sleep_for(d);
}

std::uint64_t SimEvent::begin_record() {
  std::lock_guard lk(mu_);
  return ++recorded_;
}

void SimEvent::complete(std::uint64_t generation, DeviceClock::time_point at) {
  // Notify while holding the lock: a waiter that sees the completion may destroy the event at once.
  std::lock_guard lk(mu_);
  if (generation > completed_) {
    completed_ = generation;
    at_ = at;
  }
  cv_.notify_all();
}

bool SimEvent::completed_at(DeviceClock::time_point* out) const {
  std::lock_guard lk(mu_);
  if (recorded_ == 0 || completed_ < recorded_) return false;
  *out = at_;
  return true;
}

std::uint64_t SimEvent::latest() const {
  std::lock_guard lk(mu_);
  return recorded_;
}

bool SimEvent::is_complete() const {
  std::unique_lock lk(mu_);
  if (timing_ == Timing::model) {
    // The answer must not depend on how far the simulator's threads have got in wall time: wait until
    // the recorded work has run (its device time is then known), then compare. The wait moves no
    // modelled host time.
    const auto target = recorded_;
    cv_.wait(lk, [&] { return completed_ >= target; });
    return at_ <= t_seen;
  }
  if (completed_ < recorded_) return false;
  observe(timing_, at_, host_now(timing_));
  return true;
}

DeviceClock::time_point SimEvent::wait(std::uint64_t generation) const {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return completed_ >= generation; });
  return at_;
}

void SimEvent::wait_latest() const {
  const auto since = host_now(timing_);
  std::unique_lock lk(mu_);
  const auto target = recorded_;
  cv_.wait(lk, [&] { return completed_ >= target; });
  observe(timing_, at_, since);
}

SimStream::SimStream(CopyEngine* h2d, CopyEngine* d2h, Timing timing)
    : h2d_(h2d), d2h_(d2h), timing_(timing), clock_(DeviceClock::now()) {
  thread_ = std::thread([this] { run(); });
}

SimStream::~SimStream() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void SimStream::enqueue(SimOp op) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    op.queued = host_now(timing_);
    queue_.push_back(op);
    ++submitted_;
    wake = worker_waiting_;
  }
  if (wake) work_cv_.notify_one();
}

bool SimStream::bind(const std::vector<unsigned>& cpus) {
  return topology::bind_thread(thread_.native_handle(), cpus, nullptr);
}

void SimStream::synchronize() {
  const auto since = host_now(timing_);
  std::unique_lock lk(mu_);
  const auto target = submitted_;
  idle_cv_.wait(lk, [&] { return completed_ >= target; });
  observe(timing_, done_at_, since);
}

void SimStream::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      worker_waiting_ = true;
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      worker_waiting_ = false;
      continue;
    }
    const SimOp op = queue_.front();
    queue_.pop_front();
    lk.unlock();
    execute(op);
    lk.lock();
    ++completed_;
    done_at_ = clock_;
    idle_cv_.notify_all();
  }
}

void SimStream::execute(const SimOp& op) {
  const auto start = std::max(clock_, op.queued);
  switch (op.kind) {
    case SimOp::Kind::copy:
      clock_ = (op.copy_kind == CopyKind::host_to_device ? h2d_ : d2h_)
                   ->copy(op.dst, op.src, op.bytes, start, op.file_src.fd >= 0 ? &op.file_src : nullptr,
                          op.file_dst.fd >= 0 ? &op.file_dst : nullptr);
      break;
    case SimOp::Kind::host: {
      const auto t0 = DeviceClock::now();
      op.fn(op.user);
      clock_ = start + (DeviceClock::now() - t0);
      break;
    }
    case SimOp::Kind::busy:
      clock_ = start + op.duration;
      std::this_thread::sleep_until(clock_);
      break;
    case SimOp::Kind::record:
      clock_ = start;
      op.event->complete(op.generation, clock_);
      break;
    case SimOp::Kind::wait: clock_ = std::max(start, op.event->wait(op.generation)); break;
  }
}

}  // namespace tvmm::backend::sim
