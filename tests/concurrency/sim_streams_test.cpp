// The simulated GPU's streams, events and copy engines used from several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "backends/device/sim/sim_device.hpp"
#include "test_support.hpp"

using namespace tvmm;
using namespace tvmm::device;

TEST(SimStreams, ManyStreamsShareTheCopyEngines) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  SimDevice dev(c, 8 * 64 * KiB);
  constexpr int kThreads = 6;
  std::vector<std::thread> ws;
  std::atomic<std::size_t> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    ws.emplace_back([&, t] {
      StreamHandle s = nullptr;
      ASSERT_TRUE(dev.create_stream(&s).ok());
      EventHandle e = nullptr;
      ASSERT_TRUE(dev.create_event(&e).ok());
      void* a = nullptr;
      void* b = nullptr;
      ASSERT_TRUE(dev.alloc_host(64 * KiB, &a).ok());
      ASSERT_TRUE(dev.alloc_host(64 * KiB, &b).ok());
      for (int i = 0; i < 50; ++i) {
        const auto seed = static_cast<std::uint64_t>(t * 100 + i);
        test::fill(a, 64 * KiB, seed);
        ASSERT_TRUE(
            dev.memcpy_async(b, a, 64 * KiB, i % 2 ? CopyKind::host_to_device : CopyKind::device_to_host, s).ok());
        ASSERT_TRUE(dev.record_event(e, s).ok());
        ASSERT_TRUE(dev.synchronize_event(e).ok());
        bad += test::mismatches(b, 64 * KiB, seed);
      }
      EXPECT_TRUE(dev.destroy_event(e).ok());
      EXPECT_TRUE(dev.destroy_stream(s).ok());
      EXPECT_TRUE(dev.free_host(a, 64 * KiB).ok());
      EXPECT_TRUE(dev.free_host(b, 64 * KiB).ok());
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0u);
}

// Under timing "model" the copy engines give copies their bus slots in the order they were queued,
// so the modelled times do not depend on how the OS runs the streams' workers. One program (four
// streams, copies both ways, kernels, a stream waiting for another's event) runs twice; each stream's
// worker is held a different wall time before each copy (host functions take no modelled time), so
// the workers reach the engines in other orders. Every event's modelled time must be the same.
namespace {
std::vector<std::int64_t> run_copy_program(unsigned delay_seed) {
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  c.bandwidth_bytes_per_s = 1e9;  // 64 KiB in 65.5 us
  c.timing = "model";
  SimDevice dev(c, 8 * 64 * KiB);
  constexpr int kStreams = 4, kCopies = 8;
  std::vector<StreamHandle> streams(kStreams);
  for (auto& s : streams) EXPECT_TRUE(dev.create_stream(&s).ok());
  void* a = nullptr;
  void* b = nullptr;
  EXPECT_TRUE(dev.alloc_host(kStreams * 64 * KiB, &a).ok());
  EXPECT_TRUE(dev.alloc_host(kStreams * 64 * KiB, &b).ok());
  EventHandle start = nullptr;
  EXPECT_TRUE(dev.create_event(&start, EventKind::timing).ok());
  for (auto s : streams) {  // every stream's clock past its creation (see align_stream_clocks)
    EXPECT_TRUE(dev.record_event(start, s).ok());
    EXPECT_TRUE(dev.synchronize_event(start).ok());
  }
  EXPECT_TRUE(dev.record_event(start, streams[0]).ok());
  std::vector<EventHandle> marks;
  std::uint64_t x = delay_seed;
  for (int i = 0; i < kCopies; ++i) {
    for (int k = 0; k < kStreams; ++k) {
      StreamHandle s = streams[static_cast<std::size_t>(k)];
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto us = static_cast<std::uintptr_t>((x >> 33) % 1500);  // up to 1.5 ms of wall time
      EXPECT_TRUE(dev.launch_host(
                         s,
                         [](void* d) {
                           std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<std::uintptr_t>(d)));
                         },
                         reinterpret_cast<void*>(us))
                      .ok());
      if (k == 3 && !marks.empty()) {
        EXPECT_TRUE(dev.stream_wait_event(s, marks[marks.size() - 2]).ok());  // stream 1's latest copy
      }
      if (k == 2) {
        EXPECT_TRUE(dev.launch_busy(s, std::chrono::microseconds(40 * (i % 3))).ok());
      }
      char* from = static_cast<char*>(a) + k * 64 * KiB;
      char* to = static_cast<char*>(b) + k * 64 * KiB;
      EXPECT_TRUE(
          dev.memcpy_async(to, from, 64 * KiB, k % 2 ? CopyKind::host_to_device : CopyKind::device_to_host, s).ok());
      EventHandle e = nullptr;
      EXPECT_TRUE(dev.create_event(&e, EventKind::timing).ok());
      EXPECT_TRUE(dev.record_event(e, s).ok());
      marks.push_back(e);
    }
  }
  std::vector<std::int64_t> at;
  for (auto s : streams) EXPECT_TRUE(dev.synchronize_stream(s).ok());
  for (EventHandle e : marks) {
    std::chrono::nanoseconds t{0};
    EXPECT_TRUE(dev.event_elapsed(start, e, &t).ok());
    at.push_back(t.count());
    EXPECT_TRUE(dev.destroy_event(e).ok());
  }
  EXPECT_TRUE(dev.destroy_event(start).ok());
  for (auto s : streams) EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.free_host(a, kStreams * 64 * KiB).ok());
  EXPECT_TRUE(dev.free_host(b, kStreams * 64 * KiB).ok());
  return at;
}
}  // namespace

TEST(SimStreams, ModelledCopiesRepeatExactlyHoweverTheWorkersAreScheduled) {
  const auto first = run_copy_program(1);
  const auto second = run_copy_program(2);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << "event " << i;
}
