// The simulator's own tests (modelled device time, model-timing queries and waits, streams created
// mid-run, faults on unmapped memory, throttling, the copy engines' order, VMM call costs) and the
// FaultyDevice adaptor's.
// The contracts every backend keeps are in device_backend_test.cpp (the conformance suite).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "backends/device/faulty/faulty_device.hpp"
#include "backends/device/sim/sim_device.hpp"
#include "device_scratch.hpp"
#include "test_support.hpp"

using namespace tvmm;
using namespace tvmm::device;

// A stream's device clock starts when it is created, and creating one waits for its worker thread,
// which can take milliseconds on a loaded machine (CI under ASan): a second stream's clock may start
// that much after the first's. Waiting for an event on each brings the host's time past all their
// starts, so a test's work on any of them starts at the host's time.
namespace {
bool align_stream_clocks(SimDevice& dev, std::initializer_list<StreamHandle> streams) {
  EventHandle e = nullptr;
  if (!dev.create_event(&e, EventKind::sync).ok()) return false;
  bool ok = true;
  for (StreamHandle s : streams) ok = ok && dev.record_event(e, s).ok() && dev.synchronize_event(e).ok();
  return dev.destroy_event(e).ok() && ok;
}

// A simulated device on model timing (the host's own time between calls does not count) whose buses
// move 1 MB in 1 ms, plus `latency` per copy.
SimDeviceConfig modelled_1gbs_bus(std::chrono::nanoseconds latency = {}) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.bandwidth_bytes_per_s = 1e9;
  c.copy_latency = latency;
  c.timing = "model";
  return c;
}

// The device time from `from` to `to` (timing events), in whole microseconds.
std::int64_t elapsed_us(SimDevice& dev, EventHandle from, EventHandle to) {
  std::chrono::nanoseconds out{0};
  EXPECT_TRUE(dev.event_elapsed(from, to, &out).ok());
  return std::chrono::duration_cast<std::chrono::microseconds>(out).count();
}
}  // namespace

// Simulator-specific: unmapped device addresses are really inaccessible, and throttling models a bus.
// Device time on the simulator (timing "model") is the model's, exactly: busy kernels their
// durations, copies their bus slots (latency + bytes / bandwidth, one direction at a time), waits the
// time of the event waited for. However late the OS wakes the stream threads, these do not change.
TEST(SimDevice, DeviceTimeIsTheModelledTimeExactly) {
  SimDevice dev(modelled_1gbs_bus(std::chrono::microseconds(10)), 4 * 64 * KiB);
  constexpr std::size_t mb = 1'000'000;
  void* h = nullptr;
  void* d = nullptr;
  ASSERT_TRUE(dev.alloc_host(2 * mb, &h).ok());
  ASSERT_TRUE(dev.alloc_host(2 * mb, &d).ok());
  StreamHandle s = nullptr, t = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.create_stream(&t).ok());
  // Otherwise t's clock could start after e1, and its wait for e1 end there.
  ASSERT_TRUE(align_stream_clocks(dev, {s, t}));
  EventHandle e0 = nullptr, e1 = nullptr, e2 = nullptr, e3 = nullptr;
  for (EventHandle* e : {&e0, &e1, &e2, &e3}) ASSERT_TRUE(dev.create_event(e, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(e0, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(4)).ok());
  ASSERT_TRUE(dev.memcpy_async(d, h, mb, CopyKind::host_to_device, s).ok());  // 1 ms + 10 us
  ASSERT_TRUE(dev.record_event(e1, s).ok());
  // Stream t waits for e1, then copies in the same direction: its slot follows s's on the bus.
  ASSERT_TRUE(dev.stream_wait_event(t, e1).ok());
  ASSERT_TRUE(dev.launch_busy(t, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(e2, t).ok());
  ASSERT_TRUE(
      dev.memcpy_async(static_cast<char*>(d) + mb, static_cast<char*>(h) + mb, mb, CopyKind::host_to_device, t).ok());
  ASSERT_TRUE(dev.record_event(e3, t).ok());
  ASSERT_TRUE(dev.synchronize_stream(t).ok());
  auto us = [&](EventHandle from, EventHandle to) { return elapsed_us(dev, from, to); };
  EXPECT_EQ(us(e0, e1), 4'000 + 1'010);
  EXPECT_EQ(us(e0, e2), 4'000 + 1'010 + 2'000);
  EXPECT_EQ(us(e2, e3), 1'010);
  for (EventHandle e : {e0, e1, e2, e3}) EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.destroy_stream(t).ok());
  EXPECT_TRUE(dev.free_host(h, 2 * mb).ok());
  EXPECT_TRUE(dev.free_host(d, 2 * mb).ok());
}

// With timing "model" the device's time lags the wall clock by however long the simulation has been
// idle or slow. A stream created mid-run by a thread that has waited for device work starts at that
// thread's host time, not at the wall clock: its first kernel runs right after the work the thread saw
// complete, not 100 ms of idle wall time later.
TEST(SimDevice, AModelledStreamCreatedMidRunStartsAtTheCreatorsHostTime) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.timing = "model";
  SimDevice dev(c, 4 * 64 * KiB);
  StreamHandle s = nullptr, t = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle e0 = nullptr, e1 = nullptr;
  for (EventHandle* e : {&e0, &e1}) ASSERT_TRUE(dev.create_event(e, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(e0, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());  // the host's time: e0 + 2 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(dev.create_stream(&t).ok());
  ASSERT_TRUE(dev.launch_busy(t, std::chrono::milliseconds(1)).ok());
  ASSERT_TRUE(dev.record_event(e1, t).ok());
  ASSERT_TRUE(dev.synchronize_stream(t).ok());
  std::chrono::nanoseconds elapsed{0};
  ASSERT_TRUE(dev.event_elapsed(e0, e1, &elapsed).ok());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(), 3'000);
  for (EventHandle e : {e0, e1}) EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.destroy_stream(t).ok());
}

// With timing "model" a thread's host time moves only when it waits, so an event query answers at that
// time: work the simulator has already run, but that completes later in device time, is not ready.
// (Otherwise what a query sees, and so every decision made on it, would depend on how fast the
// simulator's threads run against the host's.)
TEST(SimDevice, AModelledQueryAnswersAtTheThreadsHostTime) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.timing = "model";
  SimDevice dev(c, 4 * 64 * KiB);
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle e1 = nullptr, e2 = nullptr;
  ASSERT_TRUE(dev.create_event(&e1, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&e2, EventKind::timing).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(e1, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(e2, s).ok());
  // Another thread waits for both, so the simulator has run them; this thread has waited for neither.
  std::thread([&] { EXPECT_TRUE(dev.synchronize_stream(s).ok()); }).join();
  EXPECT_EQ(dev.query_event(e1).code, Errc::not_ready);
  EXPECT_EQ(dev.query_event(e2).code, Errc::not_ready);
  // Waiting for e1 moves this thread to e1's time: e1 is complete, e2 (2 ms later) still is not.
  ASSERT_TRUE(dev.synchronize_event(e1).ok());
  EXPECT_TRUE(dev.query_event(e1).ok());
  EXPECT_EQ(dev.query_event(e2).code, Errc::not_ready);
  ASSERT_TRUE(dev.synchronize_event(e2).ok());
  EXPECT_TRUE(dev.query_event(e2).ok());
  EXPECT_TRUE(dev.destroy_event(e1).ok());
  EXPECT_TRUE(dev.destroy_event(e2).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

// A simulated device on model timing with two streams and a copy that takes 134 us of device time but
// milliseconds of wall time (128 MiB at a modelled 1 TB/s): the tests below use that gap.
struct SlowCopyDevice {
  static constexpr std::size_t bytes = 128 * MiB;
  static SimDeviceConfig config() {
    SimDeviceConfig c;
    c.granularity = 64 * KiB;
    c.timing = "model";
    c.bandwidth_bytes_per_s = 1e12;
    return c;
  }
  SimDevice dev{config(), 4 * 64 * KiB};
  void* h = nullptr;
  void* d = nullptr;
  StreamHandle s = nullptr, t = nullptr;
  SlowCopyDevice() {
    if (!dev.alloc_host(bytes, &h).ok() || !dev.alloc_host(bytes, &d).ok() || !dev.create_stream(&s).ok() ||
        !dev.create_stream(&t).ok() || !align_stream_clocks(dev, {s, t})) {
      throw std::runtime_error("SlowCopyDevice: the simulator refused its setup");
    }
  }
  ~SlowCopyDevice() {  // runs only after a complete setup (the constructor throws otherwise)
    EXPECT_TRUE(dev.destroy_stream(s).ok());
    EXPECT_TRUE(dev.destroy_stream(t).ok());
    EXPECT_TRUE(dev.free_host(h, bytes).ok());
    EXPECT_TRUE(dev.free_host(d, bytes).ok());
  }
  SlowCopyDevice(const SlowCopyDevice&) = delete;
  SlowCopyDevice& operator=(const SlowCopyDevice&) = delete;
  Status copy_on(StreamHandle stream) { return dev.memcpy_async(d, h, bytes, CopyKind::host_to_device, stream); }
};

// ... and it does not depend on how far the simulator's threads have got: work that completes by the
// thread's host time in the model is complete even while the simulator is still running it (here a
// copy whose memcpy takes far longer than its modelled bus slot). Otherwise a run's decisions, and so
// its modelled figures, would change from run to run.
TEST(SimDevice, AModelledQueryDoesNotDependOnTheSimulatorsProgress) {
  SlowCopyDevice x;
  SimDevice& dev = x.dev;
  EventHandle copied = nullptr, ticked = nullptr;
  ASSERT_TRUE(dev.create_event(&copied, EventKind::sync).ok());
  ASSERT_TRUE(dev.create_event(&ticked, EventKind::sync).ok());
  ASSERT_TRUE(x.copy_on(x.s).ok());
  ASSERT_TRUE(dev.record_event(copied, x.s).ok());
  ASSERT_TRUE(dev.launch_busy(x.t, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(ticked, x.t).ok());
  ASSERT_TRUE(dev.synchronize_event(ticked).ok());  // this thread's host time: 2 ms in
  EXPECT_TRUE(dev.query_event(copied).ok());        // the copy ended 134 us in
  EXPECT_TRUE(dev.destroy_event(copied).ok());
  EXPECT_TRUE(dev.destroy_event(ticked).ok());
}

// A stream's wait ends when the record it waits for completes (cuStreamWaitEvent: the most recent
// record before the call), even if by the time the simulator gets to the wait the event has been
// recorded again and that later record has completed too.
TEST(SimDevice, AStreamWaitEndsAtTheRecordItWaitsFor) {
  SlowCopyDevice x;
  SimDevice& dev = x.dev;
  EventHandle start = nullptr, e = nullptr, after = nullptr;
  for (EventHandle* ev : {&start, &e, &after}) ASSERT_TRUE(dev.create_event(ev, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(start, x.s).ok());
  ASSERT_TRUE(dev.launch_busy(x.s, std::chrono::milliseconds(1)).ok());
  ASSERT_TRUE(dev.record_event(e, x.s).ok());  // the first record: 1 ms in
  // t gets to its wait only once the copy's memcpy is done, long after the later records below.
  ASSERT_TRUE(x.copy_on(x.t).ok());
  ASSERT_TRUE(dev.stream_wait_event(x.t, e).ok());
  ASSERT_TRUE(dev.record_event(after, x.t).ok());
  // Recorded again, many times (more than a small table of recent records would keep): 3 ms in and later.
  ASSERT_TRUE(dev.launch_busy(x.s, std::chrono::milliseconds(2)).ok());
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(dev.record_event(e, x.s).ok());
    ASSERT_TRUE(dev.launch_busy(x.s, std::chrono::microseconds(10)).ok());
  }
  ASSERT_TRUE(dev.synchronize_stream(x.t).ok());
  ASSERT_TRUE(dev.synchronize_stream(x.s).ok());
  std::chrono::nanoseconds waited{0};
  ASSERT_TRUE(dev.event_elapsed(start, after, &waited).ok());
  EXPECT_GE(waited, std::chrono::milliseconds(1));
  EXPECT_LT(waited, std::chrono::milliseconds(2));  // not a later record's 3 ms or more
  for (EventHandle ev : {start, e, after}) EXPECT_TRUE(dev.destroy_event(ev).ok());
}

// With timing "model" a host function on a stream takes no device time (host work takes none in the
// model): its wall time would make every later modelled time on the stream depend on how the OS ran
// the simulator's thread (tvmm-bench's verifying fills, the timeline's copy marks). With "wall" it
// takes what it takes.
TEST(SimDevice, AModelledHostFunctionTakesNoDeviceTime) {
  for (const char* timing : {"model", "wall"}) {
    SCOPED_TRACE(timing);
    SimDeviceConfig c;
    c.granularity = 64 * KiB;
    c.timing = timing;
    SimDevice dev(c, 4 * 64 * KiB);
    StreamHandle s = nullptr;
    ASSERT_TRUE(dev.create_stream(&s).ok());
    EventHandle a = nullptr, b = nullptr;
    ASSERT_TRUE(dev.create_event(&a, EventKind::timing).ok());
    ASSERT_TRUE(dev.create_event(&b, EventKind::timing).ok());
    ASSERT_TRUE(dev.record_event(a, s).ok());
    ASSERT_TRUE(dev.launch_host(
                       s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }, nullptr)
                    .ok());
    ASSERT_TRUE(dev.record_event(b, s).ok());
    ASSERT_TRUE(dev.synchronize_event(b).ok());
    std::chrono::nanoseconds t{0};
    ASSERT_TRUE(dev.event_elapsed(a, b, &t).ok());
    if (std::string(timing) == "model") {
      EXPECT_EQ(t.count(), 0);
    } else {
      EXPECT_GE(t, std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(dev.destroy_event(a).ok());
    EXPECT_TRUE(dev.destroy_event(b).ok());
    EXPECT_TRUE(dev.destroy_stream(s).ok());
  }
}

// Two streams copying in one direction under timing "model": the copies take the bus in the order
// they were queued, whichever stream's worker the OS runs first. Here s's worker is held 20 ms of
// wall time (by a host function, which takes no device time) before its copy, so t's worker reaches
// the copy engine first; until 2026-12-01 it took the first slot then, and which copy went first
// depended on thread scheduling (write-backs beside write-behind's copies: runs differed by 1-2%).
TEST(SimDevice, ModelledCopiesOfTwoStreamsTakeTheBusInTheOrderTheyWereQueued) {
  SimDevice dev(modelled_1gbs_bus(), 4 * 64 * KiB);
  constexpr std::size_t mb = 1'000'000;
  void* h = nullptr;
  void* d = nullptr;
  ASSERT_TRUE(dev.alloc_host(2 * mb, &h).ok());
  ASSERT_TRUE(dev.alloc_host(2 * mb, &d).ok());
  StreamHandle s = nullptr, t = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.create_stream(&t).ok());
  ASSERT_TRUE(align_stream_clocks(dev, {s, t}));
  EventHandle start = nullptr, first = nullptr, second = nullptr;
  for (EventHandle* e : {&start, &first, &second}) ASSERT_TRUE(dev.create_event(e, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(start, s).ok());
  ASSERT_TRUE(dev.launch_host(
                     s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr)
                  .ok());
  ASSERT_TRUE(dev.memcpy_async(d, h, mb, CopyKind::device_to_host, s).ok());  // queued first
  ASSERT_TRUE(dev.record_event(first, s).ok());
  ASSERT_TRUE(
      dev.memcpy_async(static_cast<char*>(d) + mb, static_cast<char*>(h) + mb, mb, CopyKind::device_to_host, t).ok());
  ASSERT_TRUE(dev.record_event(second, t).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  ASSERT_TRUE(dev.synchronize_stream(t).ok());
  auto us = [&](EventHandle to) { return elapsed_us(dev, start, to); };
  EXPECT_EQ(us(first), 1'000);   // without the order: 2'000 (t's copy went first)
  EXPECT_EQ(us(second), 2'000);  // after the copy queued before it
  for (EventHandle e : {start, first, second}) EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.destroy_stream(t).ok());
  EXPECT_TRUE(dev.free_host(h, 2 * mb).ok());
  EXPECT_TRUE(dev.free_host(d, 2 * mb).ok());
}

// ... and a copy queued later but ready sooner is not held behind an earlier copy that waits for a
// kernel: it takes a free stretch of the bus before that copy's slot where it fits, and goes after it
// where it does not.
TEST(SimDevice, AModelledCopyReadySoonerTakesAFreeStretchBeforeALaterSlot) {
  SimDevice dev(modelled_1gbs_bus(), 4 * 64 * KiB);
  constexpr std::size_t mb = 1'000'000;
  constexpr std::size_t big = 9'500'000;  // 9.5 ms: more than the 9 ms left before the waiting copy
  void* h = nullptr;
  void* d = nullptr;
  ASSERT_TRUE(dev.alloc_host(2 * mb + big, &h).ok());
  ASSERT_TRUE(dev.alloc_host(2 * mb + big, &d).ok());
  StreamHandle k = nullptr, s = nullptr, t = nullptr;
  for (StreamHandle* st : {&k, &s, &t}) ASSERT_TRUE(dev.create_stream(st).ok());
  ASSERT_TRUE(align_stream_clocks(dev, {k, s, t}));
  EventHandle start = nullptr, kernel = nullptr, waited = nullptr, sooner = nullptr, large = nullptr;
  for (EventHandle* e : {&start, &kernel, &waited, &sooner, &large})
    ASSERT_TRUE(dev.create_event(e, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(start, k).ok());
  ASSERT_TRUE(dev.launch_busy(k, std::chrono::milliseconds(10)).ok());
  ASSERT_TRUE(dev.record_event(kernel, k).ok());
  // s: a copy after the kernel (queued first); t: two copies ready at once (queued after it).
  ASSERT_TRUE(dev.stream_wait_event(s, kernel).ok());
  ASSERT_TRUE(dev.memcpy_async(d, h, mb, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.record_event(waited, s).ok());
  auto at = [](void* p, std::size_t off) { return static_cast<char*>(p) + off; };
  ASSERT_TRUE(dev.memcpy_async(at(d, mb), at(h, mb), mb, CopyKind::device_to_host, t).ok());
  ASSERT_TRUE(dev.record_event(sooner, t).ok());
  ASSERT_TRUE(dev.memcpy_async(at(d, 2 * mb), at(h, 2 * mb), big, CopyKind::device_to_host, t).ok());
  ASSERT_TRUE(dev.record_event(large, t).ok());
  for (StreamHandle st : {k, s, t}) ASSERT_TRUE(dev.synchronize_stream(st).ok());
  auto us = [&](EventHandle to) { return elapsed_us(dev, start, to); };
  EXPECT_EQ(us(waited), 11'000);  // the kernel's 10 ms, then its own slot
  EXPECT_EQ(us(sooner), 1'000);   // before it, at once
  EXPECT_EQ(us(large), 20'500);   // no room before it: after it
  for (EventHandle e : {start, kernel, waited, sooner, large}) EXPECT_TRUE(dev.destroy_event(e).ok());
  for (StreamHandle st : {k, s, t}) EXPECT_TRUE(dev.destroy_stream(st).ok());
  EXPECT_TRUE(dev.free_host(h, 2 * mb + big).ok());
  EXPECT_TRUE(dev.free_host(d, 2 * mb + big).ok());
}

TEST(SimDevice, ElapsedTimeIsNotReadyUntilBothEventsComplete) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  SimDevice dev(c, 4 * 64 * KiB);
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle a = nullptr, b = nullptr;
  ASSERT_TRUE(dev.create_event(&a, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&b, EventKind::timing).ok());
  std::atomic<bool> go{false};
  ASSERT_TRUE(dev.record_event(a, s).ok());
  ASSERT_TRUE(dev.launch_host(
                     s,
                     [](void* u) {
                       while (!static_cast<std::atomic<bool>*>(u)->load()) std::this_thread::yield();
                     },
                     &go)
                  .ok());
  ASSERT_TRUE(dev.record_event(b, s).ok());
  std::chrono::nanoseconds t{0};
  EXPECT_EQ(dev.event_elapsed(a, b, &t).code, Errc::not_ready);
  go = true;
  ASSERT_TRUE(dev.synchronize_event(b).ok());
  EXPECT_TRUE(dev.event_elapsed(a, b, &t).ok());
  EXPECT_GE(t.count(), 0);
  EXPECT_TRUE(dev.destroy_event(a).ok());
  EXPECT_TRUE(dev.destroy_event(b).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST(SimDevice, UnmappedAddressFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the simulator runs copy-engine threads
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  SimDevice dev(c, 4 * 64 * KiB);
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(64 * KiB, &va).ok());
  EXPECT_DEATH({ *reinterpret_cast<volatile char*>(va) = 1; }, "");
  EXPECT_TRUE(dev.release_reservation(va, 64 * KiB).ok());
}

TEST(SimDevice, ThrottledCopyTakesAtLeastTheModelledTime) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.bandwidth_bytes_per_s = 64.0 * 1024 * 1024;  // 64 MiB/s: 1 MiB takes >= 15.6 ms
  c.copy_latency = std::chrono::milliseconds(2);
  SimDevice dev(c, 4 * 64 * KiB);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_TRUE(dev.alloc_host(MiB, &a).ok());
  ASSERT_TRUE(dev.alloc_host(MiB, &b).ok());
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(dev.memcpy_async(b, a, MiB, CopyKind::host_to_device, s).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(elapsed, std::chrono::microseconds(15'625 + 2'000));  // a lower bound: sleeping never ends early
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.free_host(a, MiB).ok());
  EXPECT_TRUE(dev.free_host(b, MiB).ok());
}

// The host's modelled time from construction to elapsed(): timing events recorded on a stream of its own
// that runs nothing else, so each completes at the host's time when it is recorded.
struct ModelledHostTime {
  SimDevice& dev;
  StreamHandle idle = nullptr;
  EventHandle start = nullptr, end = nullptr;
  explicit ModelledHostTime(SimDevice& d) : dev(d) {
    EXPECT_TRUE(dev.create_stream(&idle).ok());
    EXPECT_TRUE(dev.create_event(&start, EventKind::timing).ok());
    EXPECT_TRUE(dev.create_event(&end, EventKind::timing).ok());
    EXPECT_TRUE(dev.record_event(start, idle).ok());
    EXPECT_TRUE(dev.synchronize_stream(idle).ok());  // the host's time now = the start event's
  }
  ModelledHostTime(const ModelledHostTime&) = delete;
  ModelledHostTime& operator=(const ModelledHostTime&) = delete;
  std::chrono::nanoseconds elapsed() {
    EXPECT_TRUE(dev.record_event(end, idle).ok());
    EXPECT_TRUE(dev.synchronize_stream(idle).ok());
    std::chrono::nanoseconds took{};
    EXPECT_TRUE(dev.event_elapsed(start, end, &took).ok());
    return took;
  }
  ~ModelledHostTime() {
    EXPECT_TRUE(dev.destroy_event(start).ok());
    EXPECT_TRUE(dev.destroy_event(end).ok());
    EXPECT_TRUE(dev.destroy_stream(idle).ok());
  }
};

namespace {
// A simulated device of `granularity` in model timing whose driver calls cost `costs`.
SimDeviceConfig modelled_costs(std::size_t granularity, const SimDeviceConfig::VmmCosts& costs) {
  SimDeviceConfig c;
  c.granularity = granularity;
  c.timing = "model";
  c.vmm_costs = costs;
  return c;
}
}  // namespace

// SimDeviceConfig::vmm_costs with model timing: each VMM call advances the calling thread's host time by
// its cost (set_access and unmap per mapping their range covers, create per granule), so work queued
// after the calls starts that much later in device time; free calls move nothing.
TEST(SimDevice, VmmCallCostsDelayWhatTheThreadQueuesNext) {
  using std::chrono::microseconds;
  constexpr std::size_t g = 64 * KiB;
  auto measure = [](const SimDeviceConfig::VmmCosts& costs) {
    SimDevice dev(modelled_costs(g, costs), 4 * g);
    ModelledHostTime host_time(dev);
    DevPtr va = 0;
    ChunkHandle one, two;
    EXPECT_TRUE(dev.reserve(3 * g, &va).ok());
    EXPECT_TRUE(dev.create_chunk(g, &one).ok());
    EXPECT_TRUE(dev.create_chunk(2 * g, &two).ok());  // two granules
    EXPECT_TRUE(dev.map(va, g, one).ok());
    EXPECT_TRUE(dev.map(va + g, 2 * g, two).ok());
    EXPECT_TRUE(dev.set_access(va, 3 * g).ok());  // two mappings
    EXPECT_TRUE(dev.unmap(va, 3 * g).ok());       // two mappings
    const auto took = host_time.elapsed();
    EXPECT_TRUE(dev.release_chunk(one).ok());
    EXPECT_TRUE(dev.release_chunk(two).ok());
    EXPECT_TRUE(dev.release_reservation(va, 3 * g).ok());
    return took;
  };
  EXPECT_EQ(measure({}), std::chrono::nanoseconds(0));
  const SimDeviceConfig::VmmCosts costs{microseconds(100), microseconds(200), microseconds(400), microseconds(1000)};
  EXPECT_EQ(measure(costs), microseconds(2 * 100 + 2 * 200 + 2 * 400 + 3 * 1000));
}

// The stream, event and launch calls' costs (VmmCosts::event_record, event_query, stream_wait, copy_call,
// launch), with model timing: each call advances the calling thread's host time by its cost after it has
// queued its work, so what the thread queues next starts that much later; free calls move nothing. A
// kernel's own time on the device is not the host's: the launch of a 50 us kernel costs the launch.
TEST(SimDevice, StreamEventAndLaunchCallCostsDelayWhatTheThreadQueuesNext) {
  using std::chrono::microseconds;
  constexpr std::size_t g = 64 * KiB;
  auto measure = [](const SimDeviceConfig::VmmCosts& costs) {
    SimDevice dev(modelled_costs(g, costs), 4 * g);
    StreamHandle s = nullptr;
    EventHandle e = nullptr;
    DevPtr va = 0;
    ChunkHandle chunk;
    void* host = nullptr;
    EXPECT_TRUE(dev.create_stream(&s).ok());
    EXPECT_TRUE(dev.create_event(&e, EventKind::sync).ok());
    EXPECT_TRUE(dev.reserve(g, &va).ok());
    EXPECT_TRUE(dev.create_chunk(g, &chunk).ok());
    EXPECT_TRUE(dev.map(va, g, chunk).ok());
    EXPECT_TRUE(dev.set_access(va, g).ok());
    EXPECT_TRUE(dev.alloc_host(g, &host).ok());
    std::chrono::nanoseconds took{};
    {
      // Its start record's cost is not seen: it waits for that record, which runs at the new stream's
      // clock, past the host's time (see AModelledStreamCreatedMidRunStartsAtTheCreatorsHostTime).
      ModelledHostTime host_time(dev);
      EXPECT_TRUE(dev.record_event(e, s).ok());
      (void)dev.query_event(e);
      EXPECT_TRUE(dev.stream_wait_event(s, e).ok());
      EXPECT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(va), host, g, CopyKind::host_to_device, s).ok());
      EXPECT_TRUE(dev.launch_busy(s, microseconds(50)).ok());
      HostFn nothing = [](void*) {};
      EXPECT_TRUE(dev.launch_host(s, nothing, nullptr).ok());
      took = host_time.elapsed();
    }
    EXPECT_TRUE(dev.synchronize_stream(s).ok());
    EXPECT_TRUE(dev.unmap(va, g).ok());
    EXPECT_TRUE(dev.release_chunk(chunk).ok());
    EXPECT_TRUE(dev.release_reservation(va, g).ok());
    EXPECT_TRUE(dev.free_host(host, g).ok());
    EXPECT_TRUE(dev.destroy_event(e).ok());
    EXPECT_TRUE(dev.destroy_stream(s).ok());
    return took;
  };
  EXPECT_EQ(measure({}), std::chrono::nanoseconds(0));
  SimDeviceConfig::VmmCosts costs;
  costs.event_record = microseconds(1);
  costs.event_query = microseconds(2);
  costs.stream_wait = microseconds(4);
  costs.copy_call = microseconds(8);
  costs.launch = microseconds(16);
  EXPECT_EQ(measure(costs), microseconds(1 + 2 + 4 + 8 + 2 * 16));
}

// A query's answer is the one at the call's start (model timing); its cost comes after. A kernel of 5 us
// is still running when a query costing 10 us begins, and has ended when the next one begins.
TEST(SimDevice, AModelledQueryAnswersAtItsStartThenSpendsItsCost) {
  SimDeviceConfig c;
  c.timing = "model";
  c.vmm_costs.event_query = std::chrono::microseconds(10);
  SimDevice dev(c, 4 * MiB);
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.create_event(&e, EventKind::sync).ok());
  ASSERT_TRUE(align_stream_clocks(dev, {s}));
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::microseconds(5)).ok());
  ASSERT_TRUE(dev.record_event(e, s).ok());
  EXPECT_EQ(dev.query_event(e).code, Errc::not_ready);
  EXPECT_TRUE(dev.query_event(e).ok());
  EXPECT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

// VmmCosts::set_access_d2h_wait: a set_access waits for the device-to-host copies still running, up to the
// cap per mapping, as an H200's does (docs/gpu.md); copies the other way do not hold it up.
TEST(SimDevice, AnAccessGrantWaitsForDeviceToHostCopiesUpToItsCap) {
  using std::chrono::microseconds;
  constexpr std::size_t g = 64 * KiB;
  auto measure = [](CopyKind kind) {
    SimDeviceConfig::VmmCosts costs;
    costs.set_access = microseconds(10);
    costs.set_access_d2h_wait = microseconds(300);
    SimDeviceConfig c = modelled_costs(g, costs);
    c.bandwidth_bytes_per_s = static_cast<double>(g) * 1000;  // a page per millisecond
    SimDevice dev(c, 4 * g);
    StreamHandle s = nullptr;
    EXPECT_TRUE(dev.create_stream(&s).ok());
    ModelledHostTime host_time(dev);
    DevPtr va = 0;
    ChunkHandle chunks[3];
    EXPECT_TRUE(dev.reserve(3 * g, &va).ok());
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(dev.create_chunk(g, &chunks[i]).ok());
      EXPECT_TRUE(dev.map(va + i * g, g, chunks[i]).ok());
    }
    EXPECT_TRUE(dev.set_access(va + 2 * g, g).ok());  // nothing running yet: 10 us
    void* host = nullptr;
    EXPECT_TRUE(dev.alloc_host(2 * g, &host).ok());
    auto* page = reinterpret_cast<void*>(va + 2 * g);
    for (int k = 0; k < 2; ++k) {  // 2 ms of copies
      EXPECT_TRUE((kind == CopyKind::device_to_host ? dev.memcpy_async(host, page, g, kind, s)
                                                    : dev.memcpy_async(page, host, g, kind, s))
                      .ok());
    }
    EXPECT_TRUE(dev.set_access(va, g).ok());      // 10 us, then 300 of the 2 ms still to run
    EXPECT_TRUE(dev.set_access(va + g, g).ok());  // the same
    const auto took = host_time.elapsed();
    EXPECT_TRUE(dev.synchronize_stream(s).ok());
    EXPECT_TRUE(dev.unmap(va, 3 * g).ok());
    for (auto& ch : chunks) EXPECT_TRUE(dev.release_chunk(ch).ok());
    EXPECT_TRUE(dev.release_reservation(va, 3 * g).ok());
    EXPECT_TRUE(dev.free_host(host, 2 * g).ok());
    EXPECT_TRUE(dev.destroy_stream(s).ok());
    return took;
  };
  EXPECT_EQ(measure(CopyKind::device_to_host), microseconds(10 + 2 * (10 + 300)));
  EXPECT_EQ(measure(CopyKind::host_to_device), microseconds(3 * 10));
}

// d2h_backlog: how long the device-to-host copies queued so far keep that bus busy, seen from the calling
// thread's host time; copies the other way do not count, and an unthrottled bus cannot say.
TEST(SimDevice, TheDeviceToHostBacklogCountsTheCopiesQueuedThatWay) {
  using std::chrono::milliseconds;
  constexpr std::size_t g = 64 * KiB;
  {
    SimDeviceConfig c;
    c.granularity = g;
    SimDevice dev(c, 4 * g);
    EXPECT_FALSE(dev.d2h_backlog().has_value()) << "a bus as fast as memcpy has no speed to count with";
  }
  SimDeviceConfig c;
  c.granularity = g;
  c.timing = "model";
  c.bandwidth_bytes_per_s = static_cast<double>(g) * 1000;  // a page per millisecond
  SimDevice dev(c, 4 * g);
  tvmm::test::DeviceScratch scratch(dev, g);
  void* page = scratch.device();
  void* host = scratch.host();
  const StreamHandle s = scratch.stream();
  EXPECT_EQ(dev.d2h_backlog(), milliseconds(0));
  ASSERT_TRUE(dev.memcpy_async(page, host, g, CopyKind::host_to_device, s).ok());
  EXPECT_EQ(dev.d2h_backlog(), milliseconds(0)) << "a copy to the device takes the other bus";
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(dev.memcpy_async(host, page, g, CopyKind::device_to_host, s).ok());
  EXPECT_EQ(dev.d2h_backlog(), milliseconds(2));
  ASSERT_TRUE(dev.synchronize_stream(s).ok());  // this thread's host time passes their end
  EXPECT_EQ(dev.d2h_backlog(), milliseconds(0));
}

// SimDeviceConfig::disk: with timing "model" each storage I/O the pager reports (storage_io_ended) is
// served by one modelled drive after the I/Os before it, for its bytes over its direction's speed, and the
// calling thread's host time moves on to its end; with "wall", or with both speeds 0, nothing is modelled.
TEST(SimDevice, AModelledDiskServesEachIoAfterTheOnesBeforeIt) {
  using std::chrono::milliseconds;
  constexpr std::size_t g = 64 * KiB;
  SimDeviceConfig c;
  c.granularity = g;
  c.timing = "model";
  EXPECT_FALSE(SimDevice(c, 4 * g).models_storage()) << "no speeds: disk I/O takes no modelled time";
  c.disk.read_bytes_per_s = static_cast<double>(g) * 1000;  // a page per millisecond
  c.disk.write_bytes_per_s = static_cast<double>(g) * 500;  // a page per 2 ms
  {
    SimDeviceConfig wall = c;
    wall.timing = "wall";
    EXPECT_FALSE(SimDevice(wall, 4 * g).models_storage()) << "the real drive takes its real time";
  }
  SimDevice dev(c, 4 * g);
  ASSERT_TRUE(dev.models_storage());
  ModelledHostTime host_time(dev);
  const auto t0 = dev.timeline_clock();
  dev.storage_io_ended(false, g, t0);  // a read: 1 ms
  EXPECT_EQ(dev.timeline_clock() - t0, milliseconds(1));
  dev.storage_io_ended(true, g, t0);  // a write submitted with it: after the read, 2 ms
  EXPECT_EQ(dev.timeline_clock() - t0, milliseconds(3));
  dev.storage_io_ended(false, 2 * g, t0 + milliseconds(10));  // submitted once the drive was idle
  EXPECT_EQ(dev.timeline_clock() - t0, milliseconds(12));
  EXPECT_EQ(host_time.elapsed(), milliseconds(12)) << "what the thread queues next starts after the I/O";
  // An I/O submitted earlier but reported last is still served after the others.
  dev.storage_io_ended(false, g, t0);
  EXPECT_EQ(dev.timeline_clock() - t0, milliseconds(13));
  // Reported at submission (storage_io_served), an I/O takes the drive at once while the thread goes on;
  // the thread's time reaches its end only when it waits for it, and an I/O reported next queues behind.
  const auto t1 = dev.timeline_clock();
  const auto read_end = dev.storage_io_served(false, g, t1);
  EXPECT_EQ(read_end - t1, milliseconds(1));
  EXPECT_EQ(dev.timeline_clock(), t1) << "not waited for yet";
  EXPECT_FALSE(dev.storage_io_done_by_now(read_end));
  dev.storage_io_ended(true, g, t1);  // a write submitted now: after the read
  EXPECT_EQ(dev.timeline_clock() - t1, milliseconds(3));
  EXPECT_TRUE(dev.storage_io_done_by_now(read_end));
  dev.storage_io_waited(read_end);  // already past: no time passes
  EXPECT_EQ(dev.timeline_clock() - t1, milliseconds(3));
}

// The test adaptor's hold: copies of one direction run only as released, in order; the other direction
// and the stream's later work follow them.
TEST(FaultyDevice, HeldCopiesRunOnlyOnceReleasedInOrder) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  FaultyDevice dev(std::make_unique<SimDevice>(c, 4 * 64 * KiB));
  constexpr std::size_t n = 64 * KiB;
  void* src = nullptr;
  void* dst = nullptr;
  ASSERT_TRUE(dev.alloc_host(2 * n, &src).ok());
  ASSERT_TRUE(dev.alloc_host(2 * n, &dst).ok());
  test::fill(src, 2 * n, 9);
  std::memset(dst, 0, 2 * n);
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle first = nullptr, second = nullptr;
  ASSERT_TRUE(dev.create_event(&first).ok());
  ASSERT_TRUE(dev.create_event(&second).ok());
  EXPECT_THROW(dev.hold(FaultyDevice::Op::map), std::invalid_argument);
  dev.hold(FaultyDevice::Op::copy_out);
  ASSERT_TRUE(dev.memcpy_async(dst, src, n, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.record_event(first, s).ok());
  ASSERT_TRUE(
      dev.memcpy_async(static_cast<char*>(dst) + n, static_cast<char*>(src) + n, n, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.record_event(second, s).ok());
  EXPECT_EQ(dev.held(FaultyDevice::Op::copy_out), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dev.query_event(first).code, Errc::not_ready);
  dev.release(FaultyDevice::Op::copy_out, 1);
  ASSERT_TRUE(dev.synchronize_event(first).ok());
  EXPECT_EQ(dev.held(FaultyDevice::Op::copy_out), 1u);
  EXPECT_EQ(test::mismatches(dst, n, 9), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dev.query_event(second).code, Errc::not_ready);
  dev.release_all();
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(test::mismatches(dst, 2 * n, 9), 0u);
  EXPECT_TRUE(dev.destroy_event(first).ok());
  EXPECT_TRUE(dev.destroy_event(second).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.free_host(src, 2 * n).ok());
  EXPECT_TRUE(dev.free_host(dst, 2 * n).ok());
}
