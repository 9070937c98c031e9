#include "backends/device/sim/sim_stream.hpp"

#include "backends/device/sim/copy_engine.hpp"

namespace tvmm::backend::sim {

std::uint64_t SimEvent::begin_record() {
  std::lock_guard lk(mu_);
  return ++recorded_;
}

void SimEvent::complete(std::uint64_t generation) {
  // Notify while holding the lock: a waiter that sees the completion may destroy the event at once.
  std::lock_guard lk(mu_);
  if (generation > completed_) completed_ = generation;
  cv_.notify_all();
}

std::uint64_t SimEvent::latest() const {
  std::lock_guard lk(mu_);
  return recorded_;
}

bool SimEvent::is_complete() const {
  std::lock_guard lk(mu_);
  return completed_ >= recorded_;
}

void SimEvent::wait(std::uint64_t generation) const {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return completed_ >= generation; });
}

void SimEvent::wait_latest() const {
  std::unique_lock lk(mu_);
  const auto target = recorded_;
  cv_.wait(lk, [&] { return completed_ >= target; });
}

SimStream::SimStream(CopyEngine* h2d, CopyEngine* d2h) : h2d_(h2d), d2h_(d2h) {
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

void SimStream::enqueue(const SimOp& op) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    queue_.push_back(op);
    ++submitted_;
    wake = worker_waiting_;
  }
  if (wake) work_cv_.notify_one();
}

void SimStream::synchronize() {
  std::unique_lock lk(mu_);
  const auto target = submitted_;
  idle_cv_.wait(lk, [&] { return completed_ >= target; });
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
    idle_cv_.notify_all();
  }
}

void SimStream::execute(const SimOp& op) {
  switch (op.kind) {
    case SimOp::Kind::copy:
      (op.copy_kind == CopyKind::host_to_device ? h2d_ : d2h_)->copy(op.dst, op.src, op.bytes);
      break;
    case SimOp::Kind::host: op.fn(op.user); break;
    case SimOp::Kind::record: op.event->complete(op.generation); break;
    case SimOp::Kind::wait: op.event->wait(op.generation); break;
  }
}

}  // namespace tvmm::backend::sim
