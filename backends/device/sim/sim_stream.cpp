#include "backends/device/sim/sim_stream.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "backends/device/sim/copy_engine.hpp"
#include "backends/topology/placement.hpp"

namespace tvmm::device::sim {

namespace {
constexpr DeviceClock::duration kSpinBelow = std::chrono::microseconds(50);
// This thread's host time (see sim_stream.hpp): with Timing::wall the wall clock less t_lag, with
// Timing::model t_seen.
thread_local DeviceClock::duration t_lag{0};
thread_local DeviceClock::time_point t_seen{};
thread_local DeviceClock::duration t_charged{0};  // host time spent in modelled driver calls
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

DeviceClock::duration charged_host_time() noexcept { return t_charged; }
DeviceClock::time_point host_time(Timing timing) noexcept { return host_now(timing); }
void host_waited_until(Timing timing, DeviceClock::time_point at) noexcept {
  if (timing == Timing::model) t_seen = std::max(t_seen, at);
}

void spend_host_time(Timing timing, DeviceClock::duration d) {
  if (d <= DeviceClock::duration::zero()) return;
  t_charged += d;
  if (timing == Timing::model) {
    t_seen += d;
    return;
  }
  // A sleep overshoots by tens of microseconds (more than an event call costs): a short cost spins.
  if (d < kSpinBelow) {
    const auto until = DeviceClock::now() + d;
    while (DeviceClock::now() < until) {
    }
    return;
  }
  std::this_thread::sleep_for(d);
}

void StreamProgress::advance(DeviceClock::time_point floor) noexcept {
  floor_.store(floor.time_since_epoch().count(), std::memory_order_release);
  ticks_.fetch_add(1, std::memory_order_acq_rel);
  ticks_.notify_all();
}

void StreamProgress::close() noexcept { advance(DeviceClock::time_point::max()); }

DeviceClock::time_point StreamProgress::floor() const noexcept {
  return DeviceClock::time_point(DeviceClock::duration(floor_.load(std::memory_order_acquire)));
}

void SimEvent::begin_record(const std::shared_ptr<Record>& record, std::shared_ptr<const StreamProgress> on) noexcept {
  std::lock_guard lk(mu_);
  progress_ = std::move(on);
  record->generation = ++recorded_;
  latest_ = record;
}

std::shared_ptr<const SimEvent::Record> SimEvent::latest_record() const {
  std::lock_guard lk(mu_);
  return latest_;
}

void SimEvent::complete(Record& record, DeviceClock::time_point at) {
  // Notify while holding the lock: a waiter that sees the completion may destroy the event at once.
  std::lock_guard lk(mu_);
  record.done = true;
  record.at = at;
  if (record.generation > completed_) {
    completed_ = record.generation;
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
  if (timing_ == Timing::model) {
    // The answer must not depend on how far the simulator's threads have got in wall time: wait (in
    // wall time; no modelled host time passes) until either the record has run, so its device time is
    // known, or everything left on its stream ends after this thread's host time.
    for (;;) {
      std::shared_ptr<const StreamProgress> on;
      std::uint64_t pending = 0;
      {
        std::lock_guard lk(mu_);
        if (completed_ >= recorded_) return at_ <= t_seen;
        on = progress_;
        pending = recorded_;
      }
      // Read before looking again: if the record is still pending after the floor was read, it ends at
      // or after that floor (read after it, the floor could be a later operation's). If it completed
      // before the tick was read, the tick would not change again.
      const std::uint64_t tick = on->ticks();
      const auto floor = on->floor();
      {
        std::lock_guard lk(mu_);
        if (completed_ >= recorded_) return at_ <= t_seen;
        if (recorded_ != pending) continue;  // recorded again meanwhile, perhaps on another stream
      }
      if (floor > t_seen) return false;
      on->wait_for_tick(tick);
    }
  }
  std::lock_guard lk(mu_);
  if (completed_ < recorded_) return false;
  observe(timing_, at_, host_now(timing_));
  return true;
}

DeviceClock::time_point SimEvent::wait(const Record* record) const {
  // That record's own completion: the event may have been recorded again, and that record completed,
  // by the time a stream gets to this wait (cuStreamWaitEvent waits for the record before the call).
  if (record == nullptr) return DeviceClock::time_point{};  // never recorded: nothing to wait for
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return record->done; });
  return record->at;
}

void SimEvent::wait_latest() const {
  const auto since = host_now(timing_);
  std::unique_lock lk(mu_);
  const auto target = recorded_;
  cv_.wait(lk, [&] { return completed_ >= target; });
  observe(timing_, at_, since);
}

namespace {
DeviceClock::time_point start_clock(Timing timing, DeviceClock::time_point origin) noexcept {
  const auto now = DeviceClock::now();
  if (timing != Timing::model) return now;
  const auto host = host_now(timing);
  return host > origin && host < now ? host : now;
}
}  // namespace

SimStream::SimStream(CopyEngine* h2d, CopyEngine* d2h, Timing timing, DeviceClock::time_point origin)
    : h2d_(h2d), d2h_(d2h), timing_(timing), clock_(start_clock(timing, origin)) {
  progress_->advance(clock_);
  thread_ = std::thread([this] { run(); });
  // The stream is handed out once its worker runs: a thread still starting up may be inside the C
  // library or a sanitizer's allocator (thread set-up allocates), and a fork made meanwhile would give
  // the child that lock held for good.
  std::unique_lock lk(mu_);
  idle_cv_.wait(lk, [&] { return started_; });
}

SimStream::~SimStream() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  progress_->close();  // a query still holding it: its event has completed (the queue was drained)
}

void SimStream::enqueue(SimOp op) { enqueue(std::move(op), nullptr, nullptr); }

void SimStream::enqueue(SimOp op, void (*queued)(const SimOp& op, void* ctx) noexcept, void* ctx) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    op.queued = host_now(timing_);
    queue_.push_back(op);  // may throw (std::bad_alloc): then nothing is queued
    // Queued for good: the copy's place in its engine's order (before the worker can take it).
    if (op.kind == SimOp::Kind::copy) queue_.back().ticket = engine(op.copy_kind)->take_ticket();
    if (queued != nullptr) queued(queue_.back(), ctx);
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
  started_ = true;
  idle_cv_.notify_all();
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
    progress_->advance(std::max(clock_, op.queued));  // this operation starts then, the rest later
    execute(op);
    progress_->advance(clock_);
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
      clock_ = engine(op.copy_kind)
                   ->copy(op.dst, op.src, op.bytes, start, op.ticket, op.file_src.fd >= 0 ? &op.file_src : nullptr,
                          op.file_dst.fd >= 0 ? &op.file_dst : nullptr);
      break;
    case SimOp::Kind::host: {
      // The function runs at its start on the device: what it reads of the host time (the pager's
      // timeline dates a copy's completion so) is that, in model timing as in wall.
      if (timing_ == Timing::model) t_seen = start;
      const auto t0 = DeviceClock::now();
      op.fn(op.user);
      // In model timing host work takes no device time (as everywhere in the model): the function's
      // wall time would make the stream's later modelled times depend on how the OS ran this thread.
      clock_ = timing_ == Timing::model ? start : start + (DeviceClock::now() - t0);
      break;
    }
    case SimOp::Kind::busy:
      clock_ = start + op.duration;
      std::this_thread::sleep_until(clock_);
      break;
    case SimOp::Kind::record:
      clock_ = start;
      op.event->complete(*op.record, clock_);
      break;
    case SimOp::Kind::wait: clock_ = std::max(start, op.event->wait(op.until.get())); break;
  }
}

}  // namespace tvmm::device::sim
