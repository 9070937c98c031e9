// The simulated GPU's streams, events and copy engines used from several threads at once.
#include <gtest/gtest.h>

#include <atomic>
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
