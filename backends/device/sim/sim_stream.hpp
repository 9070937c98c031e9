#pragma once
// Streams and events of the simulated GPU: a stream is an in-order queue executed by its own worker
// thread; an event completes when the work recorded before it has run.
//
// Device time. Each stream keeps a device clock (from its creation): the modelled time at which its
// last operation ended. An operation starts at that clock, or at the host time at which it was
// queued if that is later. Each host thread's host time runs with the wall clock, less a lag: when
// the thread waits for device work (synchronize, an event wait) and it completes at device time D,
// its host time becomes the later of D and its host time when it began to wait, so the time it
// spent blocked only because the simulation ran late does not count (a query that finds work
// complete does the same with no wait). With Timing::model a thread's host time is just the latest
// D it waited for: host work takes no device time, and a query reports work complete only if it
// completed by the thread's host time (work the simulator has run but that ends later in device
// time is not ready). To know that, a query waits in wall time until the simulator has run the
// recorded work or has got past the thread's host time on that stream (StreamProgress), so what a
// thread sees does not depend on how fast the simulator runs against the host; and the copy engines
// give copies their bus slots in the order they were queued (CopyEngine, ordered), not in the order
// the OS runs the stream workers, so a run's modelled figures repeat exactly. (A stream's host
// function must therefore not wait for a thread that queries an event recorded after it; CUDA
// forbids API calls from host functions anyway: cuLaunchHostFunc. The same holds for FaultyDevice's
// gates, which block a stream in a host step until a test releases them: tests that use them keep
// wall timing.) A copy takes its slot on the direction's bus (CopyEngine), a busy kernel its
// duration, a host callable its real run time (none with Timing::model), and a wait ends at the
// modelled completion time of the record it waits for. The worker then sleeps until the wall clock
// reaches the operation's modelled end, so work never completes early; when it
// completes late (the OS woke the thread late, or a memcpy ran slower than the modelled bus), the
// lateness does not carry into later modelled times. Events carry the device time of their
// completion, so elapsed device time (event_elapsed) measures the model: a benchmark's result does
// not depend on the host machine's timer noise or memcpy speed. Host work between waits counts at
// wall-clock speed.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "backends/device/sim/copy_engine.hpp"

namespace tvmm::device::sim {

class CopyEngine;

using DeviceClock = std::chrono::steady_clock;

// How host threads' time is kept (SimDeviceConfig::timing).
enum class Timing : std::uint8_t {
  wall,   // host time runs with the wall clock, less the lateness it observed in waits
  model,  // host time is the latest device time the thread observed: host work takes none
};

// The calling thread spends `d` of host time in a driver call (SimDeviceConfig::vmm_costs): with
// Timing::model its host time advances by `d`, with Timing::wall it sleeps for `d` (spins, below 50 us).
void spend_host_time(Timing timing, DeviceClock::duration d);
// The calling thread's host time (see above).
DeviceClock::time_point host_time(Timing timing) noexcept;
// The host time the calling thread has spent in driver calls so far (spend_host_time), in either timing.
DeviceClock::duration charged_host_time() noexcept;
// The calling thread waited outside the device (for a modelled disk I/O) until device time `at`: with
// Timing::model its host time becomes the later of `at` and what it was; with Timing::wall nothing
// happens (the real wait took its real time). Not charged as driver time.
void host_waited_until(Timing timing, DeviceClock::time_point at) noexcept;

// How far a stream's worker has got, shared with the events recorded on it (a query may outlive the
// stream). Every operation of the stream not yet completed ends at or after device time `floor`;
// `ticks` changes (and waiters wake) whenever the worker starts or ends an operation.
class StreamProgress {
 public:
  void advance(DeviceClock::time_point floor) noexcept;
  void close() noexcept;  // the stream is gone: nothing of it remains to end
  [[nodiscard]] DeviceClock::time_point floor() const noexcept;
  [[nodiscard]] std::uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_acquire); }
  void wait_for_tick(std::uint64_t seen) const noexcept { ticks_.wait(seen, std::memory_order_acquire); }

 private:
  std::atomic<DeviceClock::rep> floor_{0};
  std::atomic<std::uint64_t> ticks_{0};
};

class SimEvent {
 public:
  SimEvent(Timing timing, bool timed) : timing_(timing), timed_(timed) {}
  //! Created for timing (EventKind::timing): event_elapsed accepts it.
  [[nodiscard]] bool timed() const noexcept { return timed_; }
  // One record's completion, shared by the record operation and the waits queued on it (under the
  // event's lock).
  struct Record {
    std::uint64_t generation = 0;
    bool done = false;
    DeviceClock::time_point at{};
  };
  // Makes `record` (queued on the stream whose progress is `on`, which completes it later) the event's
  // latest. Allocates nothing: SimDevice calls it once the record's operation is queued, under the
  // stream's lock, so a record that cannot be queued leaves the event as it was (as a failed
  // cuEventRecord does).
  void begin_record(const std::shared_ptr<Record>& record, std::shared_ptr<const StreamProgress> on) noexcept;
  // The latest record (null if none), for a stream wait queued now: cuStreamWaitEvent waits for the
  // record before the call, not for one made later.
  [[nodiscard]] std::shared_ptr<const Record> latest_record() const;
  // Completes `record` at device time `at`.
  void complete(Record& record, DeviceClock::time_point at);
  [[nodiscard]] std::uint64_t latest() const;
  [[nodiscard]] bool is_complete() const;
  // Waits for `record` (null: never recorded, nothing to wait for); returns the device time at which
  // it completed.
  DeviceClock::time_point wait(const Record* record) const;
  void wait_latest() const;
  // The device time of the latest completion, if every record has completed and there was one.
  [[nodiscard]] bool completed_at(DeviceClock::time_point* out) const;

 private:
  const Timing timing_;
  const bool timed_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
  DeviceClock::time_point at_{};
  std::shared_ptr<const StreamProgress> progress_;  // of the stream of the latest record
  std::shared_ptr<Record> latest_;                  // the latest record
};

struct SimOp {
  enum class Kind : std::uint8_t { copy, host, busy, record, wait };
  Kind kind{};
  CopyKind copy_kind{};
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  FileSpan file_src, file_dst;  // a device-to-device copy: the memory behind src and dst (fd -1 otherwise)
  HostFn fn = nullptr;
  void* user = nullptr;
  SimEvent* event = nullptr;
  std::shared_ptr<SimEvent::Record> record;       // record: the one it completes
  std::shared_ptr<const SimEvent::Record> until;  // wait: the one it waits for (null: none)
  std::chrono::nanoseconds duration{0};           // busy
  DeviceClock::time_point queued{};               // the queuing thread's host time
  std::uint64_t ticket = 0;                       // copy: its place in its engine's order (CopyEngine::take_ticket)
};

class SimStream {
 public:
  // engines[0] copies host-to-device, engines[1] device-to-host.
  // `origin`: when the device was created. A stream's device clock starts at the wall clock; with
  // Timing::model, a stream created by a thread whose host time is past `origin` (it has observed
  // device work) starts at that host time instead: the model's device time lags the wall clock by
  // however long the simulation has run, and a stream created mid-run at the wall clock would put its
  // first operation that far in the device's future.
  SimStream(CopyEngine* h2d, CopyEngine* d2h, Timing timing, DeviceClock::time_point origin);
  ~SimStream();  // drains queued work, then joins the worker
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  void enqueue(SimOp op);
  // As enqueue, and once the operation is queued (it cannot fail then), runs `queued(op)` under the
  // stream's lock, before the worker can take the operation.
  void enqueue(SimOp op, void (*queued)(const SimOp& op, void* ctx) noexcept, void* ctx);
  void synchronize();
  [[nodiscard]] const std::shared_ptr<StreamProgress>& progress() const noexcept { return progress_; }
  // Restricts the worker thread to `cpus`; false if the OS refuses.
  bool bind(const std::vector<unsigned>& cpus);

 private:
  void run();
  void execute(const SimOp& op);  // on the worker thread; advances clock_
  [[nodiscard]] CopyEngine* engine(CopyKind kind) const noexcept {
    return kind == CopyKind::host_to_device ? h2d_ : d2h_;
  }

  CopyEngine* const h2d_;
  CopyEngine* const d2h_;
  const Timing timing_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<SimOp> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  bool started_ = false;  // the worker has entered run() (the constructor waits for it)
  bool worker_waiting_ = false;
  bool stop_ = false;
  DeviceClock::time_point clock_;      // device time: when the last operation ended (worker thread only)
  DeviceClock::time_point done_at_{};  // clock_ after the last completed operation (under mu_)
  std::shared_ptr<StreamProgress> progress_ = std::make_shared<StreamProgress>();
  std::thread thread_;
};

}  // namespace tvmm::device::sim
