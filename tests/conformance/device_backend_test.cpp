// The device-backend conformance suite: one suite, instantiated for every backend in the device
// registry (backends/device/registry.cpp), as Registered/DeviceBackendConformance.<test>/<backend>.
// Built into tvmm_tests for the backends that need no GPU (the simulator), and again into
// tvmm_gpu_tests (TVMM_CONFORMANCE_CUDA, ctest label "gpu", and on the CUDA emulator) for those that
// do (CUDA), where every test skips with the reason when there is no driver or GPU.
// Each test checks a contract in backends/device/device_backend.hpp.
// Sections: the conformance suite (every backend); the simulator's own tests (modelled device
// time, model-timing queries and waits, faults on unmapped memory, throttling, VMM call costs) and the
// FaultyDevice adaptor's; the CUDA backend's kernels (TVMM_CONFORMANCE_CUDA only).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "backends/device/device_memory.hpp"
#if defined(TVMM_CONFORMANCE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif
#include "backends/device/faulty/faulty_device.hpp"
#include "backends/device/registry.hpp"
#include "backends/device/sim/sim_device.hpp"
#include "test_support.hpp"

using namespace tvmm;
using namespace tvmm::device;

namespace {

// The registered backends this binary checks (backends/device/registry.cpp): those that need a GPU in
// tvmm_gpu_tests, the others in tvmm_tests. A new backend is picked up by its registry line.
std::vector<const DeviceBackendInfo*> backends_under_test() {
#if defined(TVMM_CONFORMANCE_CUDA)
  constexpr bool gpu = true;
#else
  constexpr bool gpu = false;
#endif
  std::vector<const DeviceBackendInfo*> out;
  for (const auto& b : device_backends()) {
    if (b.needs_gpu == gpu) out.push_back(&b);
  }
  return out;
}

class DeviceBackendConformance : public ::testing::TestWithParam<const DeviceBackendInfo*> {
 protected:
  void SetUp() override {
    Config c;  // a small simulated device (a real GPU has its own capacity and granularity)
    c.sim.granularity = 64 * KiB;
    c.sim.capacity = c.device_budget = 8 * c.sim.granularity;
    c.cuda_device = 0;
    try {
      dev_ = GetParam()->make(c);
    } catch (const device_error& e) {
      if (!GetParam()->needs_gpu) throw;
      TVMM_SKIP_WITHOUT_GPU("no " << GetParam()->name << " device here: " << e.what());
    }
    g_ = dev_->properties().granularity;
  }
  std::unique_ptr<DeviceBackend> dev_;
  std::size_t g_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Registered, DeviceBackendConformance, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& backend) { return std::string(backend.param->name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceBackendConformance);

TEST_P(DeviceBackendConformance, ReservationIsAlignedAndReleasable) {
  auto& dev = *this->dev_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * this->g_, &va).ok());
  EXPECT_EQ(va % this->g_, 0u);
  EXPECT_TRUE(dev.release_reservation(va, 4 * this->g_).ok());
  EXPECT_EQ(dev.reserve(this->g_ + 1, &va).code, Errc::invalid_value);
}

TEST_P(DeviceBackendConformance, MapSetAccessUnmapRoundTrip) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * g, &va).ok());
  ChunkHandle a, b;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  EXPECT_EQ(dev.map(va, g, b).code, Errc::already_mapped);
  // One access grant over a run of two mappings.
  ASSERT_TRUE(dev.set_access(va, 2 * g).ok());
  EXPECT_EQ(dev.set_access(va + 2 * g, g).code, Errc::not_mapped);
  if (dev.properties().host_accessible) {
    test::fill(reinterpret_cast<void*>(va), 2 * g, 11);
    // Data lives in the chunk: unmapping and mapping the chunk elsewhere shows the same bytes.
    ASSERT_TRUE(dev.unmap(va, g).ok());
    ASSERT_TRUE(dev.map(va + 3 * g, g, a).ok());
    ASSERT_TRUE(dev.set_access(va + 3 * g, g).ok());
    EXPECT_EQ(test::mismatches(reinterpret_cast<void*>(va + 3 * g), g, 11), 0u);
    ASSERT_TRUE(dev.unmap(va + 3 * g, g).ok());
  } else {
    ASSERT_TRUE(dev.unmap(va, g).ok());
  }
  EXPECT_EQ(dev.unmap(va, g).code, Errc::not_mapped);
  EXPECT_EQ(dev.release_chunk(b).code, Errc::invalid_value);  // still mapped
  ASSERT_TRUE(dev.unmap(va + g, g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_reservation(va, 4 * g).ok());
}

// The pager frees a tensor's pages with one unmap per run of adjacent mappings (PagerImpl::unmap_range):
// one call over whole mappings made by separate map calls. cuda.h forbids only a sub-range of one
// mapping ("cuMemUnmap cannot unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap").
TEST_P(DeviceBackendConformance, OneUnmapCoversARunOfMappings) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * g, &va).ok());
  ChunkHandle a, b, c;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.create_chunk(2 * g, &c).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  ASSERT_TRUE(dev.map(va + 2 * g, 2 * g, c).ok());
  ASSERT_TRUE(dev.set_access(va, 4 * g).ok());
  EXPECT_TRUE(dev.unmap(va, 4 * g).ok());  // three mappings, one call
  // Every page is free again: each maps anew (and none is still mapped).
  EXPECT_EQ(dev.unmap(va, g).code, Errc::not_mapped);
  ASSERT_TRUE(dev.map(va, g, b).ok());
  ASSERT_TRUE(dev.map(va + g, 2 * g, c).ok());
  EXPECT_TRUE(dev.unmap(va, 3 * g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, 4 * g).ok());
}

// The contract's kernels: a fill and a verify run in stream order, or are not_supported, and then the
// backend says why (the simulator has none: its workloads check bytes on the host). Bad arguments are
// refused before reaching the backend.
TEST_P(DeviceBackendConformance, KernelsRunOrSayWhyNot) {
  auto& dev = *this->dev_;
  DeviceMemory memory(dev);  // one accessible granule
  ASSERT_TRUE(memory.open().ok());
  const DevPtr va = memory.va();
  const auto g = memory.size();
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EXPECT_EQ(dev.fill(nullptr, va, g, 1).code, Errc::invalid_value);
  EXPECT_EQ(dev.verify(s, va, g, 1, 0).code, Errc::invalid_value);
  const Status filled = dev.fill(s, va, g / 2, 1);
  if (filled.code == Errc::not_supported) {
    EXPECT_FALSE(dev.kernels_unavailable().empty());
    EXPECT_EQ(dev.verify(s, va, g / 2, 1, va + g / 2).code, Errc::not_supported);
  } else {
    EXPECT_TRUE(filled.ok()) << dev.describe(filled);
  }
  EXPECT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, MapOutsideReservationIsRejected) {
  auto& dev = *this->dev_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(2 * this->g_, &va).ok());
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(this->g_, &c).ok());
  EXPECT_EQ(dev.map(va + 2 * this->g_, this->g_, c).code, Errc::invalid_value);
  EXPECT_EQ(dev.map(va + 1, this->g_, c).code, Errc::invalid_value);  // misaligned
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, 2 * this->g_).ok());
}

TEST_P(DeviceBackendConformance, CapacityIsAHardLimit) {
  auto& dev = *this->dev_;
  if (dev.properties().name == "cuda") GTEST_SKIP() << "would take every byte of the GPU's memory";
  const auto cap = dev.properties().capacity / this->g_;
  std::vector<ChunkHandle> chunks(cap);
  for (auto& c : chunks) ASSERT_TRUE(dev.create_chunk(this->g_, &c).ok());
  ChunkHandle extra;
  EXPECT_EQ(dev.create_chunk(this->g_, &extra).code, Errc::out_of_memory);
  ASSERT_TRUE(dev.release_chunk(chunks.back()).ok());
  EXPECT_TRUE(dev.create_chunk(this->g_, &chunks.back()).ok());  // freed memory is reusable
  for (auto& c : chunks) EXPECT_TRUE(dev.release_chunk(c).ok());
}

// synchronize_device waits for the work of every stream (transparent mode drains the program's with it).
TEST_P(DeviceBackendConformance, SynchronizeDeviceWaitsForEveryStream) {
  auto& dev = *this->dev_;
  StreamHandle s[2] = {nullptr, nullptr};
  ASSERT_TRUE(dev.create_stream(&s[0]).ok());
  ASSERT_TRUE(dev.create_stream(&s[1]).ok());
  std::atomic<int> done{0};
  for (StreamHandle stream : s) {
    ASSERT_TRUE(dev.launch_host(
                       stream,
                       [](void* u) {
                         std::this_thread::sleep_for(std::chrono::milliseconds(100));
                         static_cast<std::atomic<int>*>(u)->fetch_add(1);
                       },
                       &done)
                    .ok());
  }
  ASSERT_TRUE(dev.synchronize_device().ok());
  EXPECT_EQ(done.load(), 2);
  for (StreamHandle stream : s) EXPECT_TRUE(dev.destroy_stream(stream).ok());
}

// memory_info: the driver's count of the device's memory, which a device chunk takes from; or
// not_supported where nothing else allocates the device (the simulator).
TEST_P(DeviceBackendConformance, MemoryInfoCountsChunksOrIsNotSupported) {
  auto& dev = *this->dev_;
  std::size_t free0 = 0, total = 0;
  const Status s = dev.memory_info(&free0, &total);
  EXPECT_FALSE(dev.memory_info(nullptr, &total).ok());
  if (s.code == Errc::not_supported) return;
  ASSERT_TRUE(s.ok());
  EXPECT_LE(free0, total);
  const std::size_t g = dev.properties().granularity;
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(g, &c).ok());
  std::size_t free1 = 0;
  ASSERT_TRUE(dev.memory_info(&free1, &total).ok());
  EXPECT_LE(free1 + g, free0);  // (on a machine where nothing else frees device memory meanwhile)
  EXPECT_TRUE(dev.release_chunk(c).ok());
}

TEST_P(DeviceBackendConformance, StreamRunsWorkInOrderAndEventsTrackIt) {
  auto& dev = *this->dev_;
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle e = nullptr;
  ASSERT_TRUE(dev.create_event(&e).ok());
  EXPECT_TRUE(dev.query_event(e).ok());  // never recorded: complete
  std::atomic<bool> release{false};
  std::vector<int> order;
  struct Ctx {
    std::atomic<bool>* release;
    std::vector<int>* order;
  } ctx{&release, &order};
  ASSERT_TRUE(dev.launch_host(
                     s,
                     [](void* u) {
                       auto* c = static_cast<Ctx*>(u);
                       while (!c->release->load()) std::this_thread::yield();
                       c->order->push_back(1);
                     },
                     &ctx)
                  .ok());
  ASSERT_TRUE(dev.record_event(e, s).ok());
  ASSERT_TRUE(dev.launch_host(
                     s, [](void* u) { static_cast<Ctx*>(u)->order->push_back(2); }, &ctx)
                  .ok());
  EXPECT_EQ(dev.query_event(e).code, Errc::not_ready);
  release = true;
  ASSERT_TRUE(dev.synchronize_event(e).ok());
  EXPECT_TRUE(dev.query_event(e).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, StreamWaitEventOrdersAcrossStreams) {
  auto& dev = *this->dev_;
  StreamHandle a = nullptr, b = nullptr;
  ASSERT_TRUE(dev.create_stream(&a).ok());
  ASSERT_TRUE(dev.create_stream(&b).ok());
  EventHandle e = nullptr;
  ASSERT_TRUE(dev.create_event(&e).ok());
  std::atomic<bool> gate{false};
  std::atomic<int> seen{-1};
  ASSERT_TRUE(dev.launch_host(
                     a,
                     [](void* u) {
                       auto* g = static_cast<std::atomic<bool>*>(u);
                       while (!g->load()) std::this_thread::yield();
                     },
                     &gate)
                  .ok());
  ASSERT_TRUE(dev.record_event(e, a).ok());
  ASSERT_TRUE(dev.stream_wait_event(b, e).ok());
  struct Ctx {
    std::atomic<bool>* gate;
    std::atomic<int>* seen;
  } ctx{&gate, &seen};
  ASSERT_TRUE(dev.launch_host(
                     b,
                     [](void* u) {
                       auto* c = static_cast<Ctx*>(u);
                       c->seen->store(c->gate->load() ? 1 : 0);
                     },
                     &ctx)
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.load(), -1);  // b is held behind a's event
  gate = true;
  ASSERT_TRUE(dev.synchronize_stream(b).ok());
  EXPECT_EQ(seen.load(), 1);
  EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(a).ok());
  EXPECT_TRUE(dev.destroy_stream(b).ok());
}

TEST_P(DeviceBackendConformance, BusyKernelsTakeAtLeastTheirDurationOfDeviceTime) {
  auto& dev = *this->dev_;
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  if (dev.launch_busy(s, std::chrono::nanoseconds(0)).code == Errc::not_supported) {
    EXPECT_TRUE(dev.destroy_stream(s).ok());
    GTEST_SKIP() << dev.properties().name << " has no busy kernel yet";
  }
  EventHandle a = nullptr, b = nullptr, never = nullptr;
  ASSERT_TRUE(dev.create_event(&a, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&b, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&never, EventKind::timing).ok());
  std::chrono::nanoseconds t{0};
  EXPECT_EQ(dev.event_elapsed(a, never, &t).code, Errc::invalid_value);  // never recorded
  EventHandle sync_only = nullptr;  // a sync event cannot be timed, recorded or not
  ASSERT_TRUE(dev.create_event(&sync_only).ok());
  EXPECT_EQ(dev.launch_busy(s, std::chrono::nanoseconds(-1)).code, Errc::invalid_value);
  ASSERT_TRUE(dev.record_event(a, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(5)).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(3)).ok());
  ASSERT_TRUE(dev.record_event(b, s).ok());
  ASSERT_TRUE(dev.synchronize_event(b).ok());
  ASSERT_TRUE(dev.event_elapsed(a, b, &t).ok());
  EXPECT_GE(t, std::chrono::milliseconds(8));
  EXPECT_LT(t, std::chrono::seconds(5));
  ASSERT_TRUE(dev.record_event(sync_only, s).ok());
  ASSERT_TRUE(dev.synchronize_event(sync_only).ok());
  EXPECT_EQ(dev.event_elapsed(a, sync_only, &t).code, Errc::invalid_value);
  for (EventHandle e : {a, b, never, sync_only}) EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, CopiesMoveBytesBothWays) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(g, &va).ok());
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(g, &c).ok());
  ASSERT_TRUE(dev.map(va, g, c).ok());
  ASSERT_TRUE(dev.set_access(va, g).ok());
  void* h1 = nullptr;
  void* h2 = nullptr;
  ASSERT_TRUE(dev.alloc_host(g, &h1).ok());
  ASSERT_TRUE(dev.alloc_host(g, &h2).ok());
  test::fill(h1, g, 5);
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(va), h1, g, CopyKind::host_to_device, s).ok());
  ASSERT_TRUE(dev.memcpy_async(h2, reinterpret_cast<void*>(va), g, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(test::mismatches(h2, g, 5), 0u);
  const auto counters = dev.counters();
  EXPECT_EQ(counters.copies, 2u);
  EXPECT_EQ(counters.copy_bytes, 2 * g);
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.free_host(h1, g).ok());
  EXPECT_TRUE(dev.free_host(h2, g).ok());
  EXPECT_TRUE(dev.unmap(va, g).ok());
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, g).ok());
}

}  // namespace

#if !defined(TVMM_CONFORMANCE_CUDA)  // the simulator's and the test adaptor's own tests
// Simulator-specific: unmapped device addresses are really inaccessible, and throttling models a bus.
// Device time on the simulator (timing "model") is the model's, exactly: busy kernels their
// durations, copies their bus slots (latency + bytes / bandwidth, one direction at a time), waits the
// time of the event waited for. However late the OS wakes the stream threads, these do not change.
TEST(SimDevice, DeviceTimeIsTheModelledTimeExactly) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.bandwidth_bytes_per_s = 1e9;  // 1 MB in 1 ms
  c.copy_latency = std::chrono::microseconds(10);
  c.timing = "model";  // the host's own time between calls does not count
  SimDevice dev(c, 4 * 64 * KiB);
  constexpr std::size_t mb = 1'000'000;
  void* h = nullptr;
  void* d = nullptr;
  ASSERT_TRUE(dev.alloc_host(2 * mb, &h).ok());
  ASSERT_TRUE(dev.alloc_host(2 * mb, &d).ok());
  StreamHandle s = nullptr, t = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.create_stream(&t).ok());
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
  auto us = [&](EventHandle from, EventHandle to) {
    std::chrono::nanoseconds out{0};
    EXPECT_TRUE(dev.event_elapsed(from, to, &out).ok());
    return std::chrono::duration_cast<std::chrono::microseconds>(out).count();
  };
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
        !dev.create_stream(&t).ok() || !align_clocks()) {
      throw std::runtime_error("SlowCopyDevice: the simulator refused its setup");
    }
  }
  // A stream's device clock starts when it is created, and creating one waits for its worker thread,
  // which can take milliseconds on a loaded machine: t's clock may start that much after s's. Waiting
  // for an event on each brings the host's time past both, so the tests' work on either stream starts
  // at the host's time.
  bool align_clocks() {
    EventHandle e = nullptr;
    if (!dev.create_event(&e, EventKind::sync).ok()) return false;
    const bool ok = dev.record_event(e, s).ok() && dev.synchronize_event(e).ok() && dev.record_event(e, t).ok() &&
                    dev.synchronize_event(e).ok();
    return dev.destroy_event(e).ok() && ok;
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

// SimDeviceConfig::vmm_costs with model timing: each VMM call advances the calling thread's host time by
// its cost (set_access and unmap per mapping their range covers, create per granule), so work queued
// after the calls starts that much later in device time; free calls move nothing.
TEST(SimDevice, VmmCallCostsDelayWhatTheThreadQueuesNext) {
  using std::chrono::microseconds;
  constexpr std::size_t g = 64 * KiB;
  auto measure = [](const SimDeviceConfig::VmmCosts& costs) {
    SimDeviceConfig c;
    c.granularity = g;
    c.timing = "model";
    c.vmm_costs = costs;
    SimDevice dev(c, 4 * g);
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

// VmmCosts::set_access_d2h_wait: a set_access waits for the device-to-host copies still running, up to the
// cap per mapping, as an H200's does (docs/gpu.md); copies the other way do not hold it up.
TEST(SimDevice, AnAccessGrantWaitsForDeviceToHostCopiesUpToItsCap) {
  using std::chrono::microseconds;
  constexpr std::size_t g = 64 * KiB;
  auto measure = [](CopyKind kind) {
    SimDeviceConfig c;
    c.granularity = g;
    c.timing = "model";
    c.bandwidth_bytes_per_s = static_cast<double>(g) * 1000;  // a page per millisecond
    c.vmm_costs.set_access = microseconds(10);
    c.vmm_costs.set_access_d2h_wait = microseconds(300);
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
#endif  // !TVMM_CONFORMANCE_CUDA

#if defined(TVMM_CONFORMANCE_CUDA)
// The GPU kernels on a real GPU: fill writes the same bytes as the CPU reference, verify counts exactly
// the bytes that differ, and a busy kernel keeps its stream busy for its duration.
TEST(CudaKernels, FillVerifyAndBusyOnTheGpu) {
  std::unique_ptr<DeviceBackend> owner;
  try {
    owner = make_cuda_device(0);
  } catch (const device_error& e) {
    TVMM_SKIP_WITHOUT_GPU("no CUDA device here: " << e.what());
  }
  auto& dev = static_cast<CudaDevice&>(*owner);
  const std::size_t g = dev.properties().granularity;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(2 * g, &va).ok());
  ChunkHandle a, b;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  ASSERT_TRUE(dev.set_access(va, 2 * g).ok());
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  void* host = nullptr;
  ASSERT_TRUE(dev.alloc_host(g, &host).ok());
  const DevPtr counter = va + g;
  auto read_counter = [&] {
    std::uint64_t v = 0;
    EXPECT_TRUE(dev.memcpy_async(host, reinterpret_cast<void*>(counter), 8, CopyKind::device_to_host, s).ok());
    EXPECT_TRUE(dev.synchronize_stream(s).ok());
    std::memcpy(&v, host, 8);
    return v;
  };
  std::memset(host, 0, g);
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(counter), host, 8, CopyKind::host_to_device, s).ok());
  const Status filled = dev.fill(s, va, g - 3, 5);  // an odd size: the tail bytes too
#if defined(TVMM_HAVE_GPU_KERNELS)
  if (filled.code == Errc::not_supported) TVMM_SKIP_WITHOUT_GPU(dev.kernels_unavailable());
#else
  if (filled.code == Errc::not_supported) GTEST_SKIP() << dev.kernels_unavailable();  // built without nvcc
#endif
  ASSERT_TRUE(filled.ok());
  ASSERT_TRUE(dev.verify(s, va, g - 3, 5, counter).ok());
  EXPECT_EQ(read_counter(), 0u);
  ASSERT_TRUE(dev.memcpy_async(host, reinterpret_cast<void*>(va), g - 3, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(test::mismatches(host, g - 3, 5), 0u);  // the CPU reference agrees byte for byte
  static_cast<unsigned char*>(host)[100] ^= 0xFF;   // one changed byte, written back
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(va), host, g - 3, CopyKind::host_to_device, s).ok());
  ASSERT_TRUE(dev.verify(s, va, g - 3, 5, counter).ok());
  EXPECT_EQ(read_counter(), 1u);
  EventHandle e0 = nullptr, e1 = nullptr;
  ASSERT_TRUE(dev.create_event(&e0, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&e1, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(e0, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(e1, s).ok());
  ASSERT_TRUE(dev.synchronize_event(e1).ok());
  std::chrono::nanoseconds t{0};
  ASSERT_TRUE(dev.event_elapsed(e0, e1, &t).ok());
  EXPECT_GE(t, std::chrono::microseconds(1900));
  EXPECT_LT(t, std::chrono::milliseconds(50));
  EXPECT_TRUE(dev.destroy_event(e0).ok());
  EXPECT_TRUE(dev.destroy_event(e1).ok());
  EXPECT_TRUE(dev.free_host(host, g).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.unmap(va, g).ok());
  EXPECT_TRUE(dev.unmap(va + g, g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_reservation(va, 2 * g).ok());
}
#endif  // TVMM_CONFORMANCE_CUDA
