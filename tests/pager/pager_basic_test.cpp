#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace tvmm;

TEST(Pager, AllocatedTensorStartsWithNoData) {
  Pager p(test::small_config(4, 8));
  auto t = p.allocate(100 * KiB, {"a"});
  EXPECT_EQ(t.size(), 100 * KiB);
  EXPECT_EQ(t.name(), "a");
  EXPECT_NE(t.data(), nullptr);
  EXPECT_EQ(t.tier(), Tier::none);
  EXPECT_EQ(p.stats().device_used_bytes, 0u);
}

TEST(Pager, HostPinMakesDataReadableAndWritable) {
  Pager p(test::small_config(4, 8));
  auto t = p.allocate(150 * KiB);
  {
    auto pin = t.pin(Access::write);
    EXPECT_EQ(pin.data(), t.data());
    EXPECT_EQ(t.tier(), Tier::device);
    test::fill(pin.data(), t.size(), 1);
  }
  auto pin = t.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 1), 0u);
  const auto s = p.stats();
  EXPECT_EQ(s.pins, 2u);
  EXPECT_EQ(s.misses, 3u);  // three fresh pages made resident once
  EXPECT_EQ(s.hits, 3u);
}

TEST(Pager, AddressesAreStableAcrossEvictions) {
  Pager p(test::small_config(2, 16));
  std::vector<Tensor> ts;
  std::vector<void*> addrs;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(p.allocate(64 * KiB));
    addrs.push_back(ts.back().data());
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      auto pin = ts[i].pin(round == 0 ? Access::write : Access::read_write);
      EXPECT_EQ(pin.data(), addrs[i]);
      if (round == 0) {
        test::fill(pin.data(), ts[i].size(), i);
      } else {
        EXPECT_EQ(test::mismatches(pin.data(), ts[i].size(), i), 0u) << "tensor " << i << " round " << round;
      }
    }
  }
  for (std::size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(ts[i].data(), addrs[i]);
  EXPECT_GT(p.stats().evictions, 0u);
  p.check_invariants();
}

TEST(Pager, EvictedPagesGoToHostAndComeBack) {
  Pager p(test::small_config(1, 4));
  auto a = p.allocate(64 * KiB);
  auto b = p.allocate(64 * KiB);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 3);
  }
  {
    auto pin = b.pin(Access::write);
    test::fill(pin.data(), b.size(), 4);
  }
  EXPECT_EQ(a.tier(), Tier::host);
  EXPECT_EQ(b.tier(), Tier::device);
  EXPECT_EQ(p.tier_of(a.data()), Tier::host);
  auto s = p.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.device_to_host.pages, 1u);
  EXPECT_EQ(s.device_to_host.bytes, 64 * KiB);
  {
    auto pin = a.pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), a.size(), 3), 0u);
  }
  s = p.stats();
  EXPECT_EQ(s.host_to_device.pages, 1u);
  EXPECT_EQ(b.tier(), Tier::host);
  p.check_invariants();
}

// A tensor of 1.5 pages: its last page's copies move only the half page the tensor holds, both ways.
TEST(Pager, ATensorsPartialLastPageMovesOnlyItsBytes) {
  Pager p(test::small_config(2, 16));
  auto a = p.allocate(96 * KiB, {"a"});  // pages of 64 KiB
  auto b = p.allocate(128 * KiB, {"b"});
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 5);
  }
  const auto s0 = p.stats();
  { auto pin = b.pin(Access::write); }  // evicts both pages of a
  const auto s1 = p.stats();
  EXPECT_EQ(s1.device_to_host.pages - s0.device_to_host.pages, 2u);
  EXPECT_EQ(s1.device_to_host.bytes - s0.device_to_host.bytes, 96 * KiB);
  {
    auto pin = a.pin(Access::read);  // evicts b (128 KiB out), loads a (96 KiB in)
    EXPECT_EQ(test::mismatches(pin.data(), a.size(), 5), 0u);
  }
  const auto s2 = p.stats();
  EXPECT_EQ(s2.host_to_device.pages - s1.host_to_device.pages, 2u);
  EXPECT_EQ(s2.host_to_device.bytes - s1.host_to_device.bytes, 96 * KiB);
  EXPECT_EQ(s2.device_to_host.bytes - s1.device_to_host.bytes, 128 * KiB);
  p.check_invariants();
}

TEST(Pager, WriteAccessSkipsThePageIn) {
  Pager p(test::small_config(1, 4));
  auto a = p.allocate(64 * KiB);
  auto b = p.allocate(64 * KiB);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 1);
  }
  { auto pin = b.pin(Access::write); }
  ASSERT_EQ(a.tier(), Tier::host);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 2);
  }
  EXPECT_EQ(p.stats().host_to_device.pages, 0u);  // overwritten, so never loaded
  { auto pin = b.pin(Access::read); }
  {
    auto pin = a.pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), a.size(), 2), 0u);
  }
  p.check_invariants();
}

TEST(Pager, PinnedPagesAreNeverEvicted) {
  Pager p(test::small_config(3, 16));
  auto keep = p.allocate(2 * 64 * KiB);
  auto pin = keep.pin(Access::write);
  test::fill(pin.data(), keep.size(), 99);
  std::vector<Tensor> others;
  for (int i = 0; i < 10; ++i) others.push_back(p.allocate(64 * KiB));
  for (int round = 0; round < 3; ++round) {
    for (auto& t : others) {
      auto op = t.pin(Access::write);
      test::fill(op.data(), t.size(), 5);
      ASSERT_EQ(keep.tier(0), Tier::device);
      ASSERT_EQ(keep.tier(64 * KiB), Tier::device);
    }
  }
  EXPECT_EQ(test::mismatches(pin.data(), keep.size(), 99), 0u);
  EXPECT_GE(p.stats().evictions, 25u);
}

TEST(Pager, StreamPinOrdersKernelsAfterPageIns) {
  Pager p(test::small_config(2, 8));
  auto s = p.create_stream();
  std::vector<Tensor> ts;
  for (int i = 0; i < 6; ++i) ts.push_back(p.allocate(64 * KiB));
  for (std::size_t i = 0; i < ts.size(); ++i) {
    auto pin = ts[i].pin(s, Access::write);
    void* d = pin.data();
    const auto n = ts[i].size();
    s.launch([d, n, i] { test::fill(d, n, i + 100); });
  }  // pins released in stream order; evictions wait for the kernels
  std::atomic<std::size_t> bad{0};
  for (std::size_t i = 0; i < ts.size(); ++i) {
    auto pin = ts[i].pin(s, Access::read);
    void* d = pin.data();
    const auto n = ts[i].size();
    s.launch([d, n, i, &bad] { bad += test::mismatches(d, n, i + 100); });
  }
  s.synchronize();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(p.stats().evictions, 0u);
}

TEST(Pager, PrefetchLoadsWithoutPinning) {
  Pager p(test::small_config(2, 8));
  auto s = p.create_stream();
  auto a = p.allocate(2 * 64 * KiB);
  auto b = p.allocate(2 * 64 * KiB);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 8);
  }
  { auto pin = b.pin(Access::write); }
  ASSERT_EQ(a.tier(), Tier::host);
  a.prefetch(s);
  s.synchronize();
  EXPECT_EQ(a.tier(0), Tier::device);
  EXPECT_EQ(a.tier(64 * KiB), Tier::device);
  EXPECT_EQ(p.stats().prefetched, 2u);
  const auto misses = p.stats().misses;
  auto pin = a.pin(Access::read);
  EXPECT_EQ(p.stats().misses, misses);  // the pin found it resident
  EXPECT_EQ(test::mismatches(pin.data(), a.size(), 8), 0u);
}

TEST(Pager, PrefetchNeverEvictsPinnedPages) {
  Pager p(test::small_config(2, 8));
  auto s = p.create_stream();
  auto a = p.allocate(2 * 64 * KiB);
  auto b = p.allocate(2 * 64 * KiB);
  { auto pin = a.pin(Access::write); }
  auto pb = b.pin(Access::write);  // a is on the host now; b holds every frame
  a.prefetch(s);
  s.synchronize();
  EXPECT_EQ(a.tier(), Tier::host);
  EXPECT_EQ(b.tier(), Tier::device);
}

TEST(Pager, FreeWhilePinnedDefersReclaim) {
  Pager p(test::small_config(2, 8));
  auto t = p.allocate(64 * KiB);
  auto pin = t.pin(Access::write);
  test::fill(pin.data(), t.size(), 1);
  t.reset();
  EXPECT_EQ(test::mismatches(pin.data(), pin.size(), 1), 0u);  // still usable through the pin
  EXPECT_EQ(p.stats().live_bytes, 64 * KiB);
  pin.release();
  EXPECT_EQ(p.stats().live_bytes, 0u);
  EXPECT_EQ(p.stats().device_used_bytes, 0u);
  p.check_invariants();
}

TEST(Pager, ReleasedTensorIsFreedByAddress) {
  Pager p(test::small_config(2, 8));
  void* raw = p.allocate(64 * KiB).release();
  EXPECT_EQ(p.tier_of(raw), Tier::none);
  p.free(raw);
  EXPECT_EQ(p.stats().live_bytes, 0u);
}

TEST(Pager, FreedMemoryIsReused) {
  Pager p(test::small_config(2, 3));  // capacity 4 pages
  for (int i = 0; i < 20; ++i) {
    auto a = p.allocate(2 * 64 * KiB);
    auto b = p.allocate(2 * 64 * KiB - 1);  // together: all of the capacity
    {
      auto pin = a.pin(Access::write);
      test::fill(pin.data(), a.size(), i);
    }
    { auto pin = b.pin(Access::write); }
    auto pin = a.pin(Access::read);
    ASSERT_EQ(test::mismatches(pin.data(), a.size(), i), 0u);
  }
  p.check_invariants();
}

TEST(Pager, HostPinWaitsForEarlierStreamWork) {
  Pager p(test::small_config(2, 8));
  auto s = p.create_stream();
  auto t = p.allocate(64 * KiB);
  {
    auto pin = t.pin(s, Access::write);
    s.launch([d = pin.data(), n = t.size()] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      test::fill(d, n, 31);
    });
  }
  auto pin = t.pin(Access::read);  // must not return before the kernel above has written
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 31), 0u);
}

TEST(Pager, StreamPinThatEvictsDoesNotBlockTheThread) {
  Pager p(test::small_config(1, 8));
  auto s1 = p.create_stream();
  auto s2 = p.create_stream();
  auto a = p.allocate(64 * KiB);
  auto b = p.allocate(64 * KiB);
  std::atomic<bool> gate{false};
  {
    auto pin = a.pin(s1, Access::write);
    s1.launch([&gate, d = pin.data(), n = a.size()] {
      while (!gate.load()) std::this_thread::yield();  // a's last use is still running...
      test::fill(d, n, 61);
    });
  }
  // ...when b needs a's frame. The old design waited here for a's write-back, which waits for the gate.
  std::atomic<bool> watchdog_opened{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 200 && !gate.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!gate.exchange(true)) watchdog_opened = true;
  });
  {
    auto pin = b.pin(s2, Access::write);  // must return with the gate still closed
    EXPECT_FALSE(gate.load()) << "the pin waited for the victim's last use";
    s2.launch([d = pin.data(), n = b.size()] { test::fill(d, n, 62); });
  }
  gate = true;
  watchdog.join();
  EXPECT_FALSE(watchdog_opened.load());
  s1.synchronize();
  s2.synchronize();
  // Ordering held: a's write-back happened after its kernel, and b's kernel wrote only after that.
  {
    auto pin = a.pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), a.size(), 61), 0u);
  }
  {
    auto pin = b.pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), b.size(), 62), 0u);
  }
  p.check_invariants();
}

// A stream pin that reads a page whose write-back is still queued (behind another page's write-back,
// which waits for that page's last kernel) loads it back from that copy's host slot, its page-in ordered
// after the copy, and returns at once: before, the pin waited on the host for the write-back
// (docs/architecture.md, "Eviction").
TEST(Pager, StreamPinOfAPageBeingWrittenBackDoesNotBlockTheThread) {
  Pager p(test::small_config(2, 8));  // lru
  auto s1 = p.create_stream();
  auto s2 = p.create_stream();
  auto a = p.allocate(64 * KiB);
  auto c = p.allocate(64 * KiB);
  auto b = p.allocate(64 * KiB);
  auto d = p.allocate(64 * KiB);
  {
    auto pin = a.pin(s1, Access::write);
    s1.launch([dst = pin.data(), n = a.size()] { test::fill(dst, n, 81); });
  }
  std::atomic<bool> gate{false};
  {
    auto pin = c.pin(s2, Access::write);
    s2.launch([&gate, dst = pin.data(), n = c.size()] {
      while (!gate.load()) std::this_thread::yield();  // c's last use is still running...
      test::fill(dst, n, 83);
    });
  }
  s1.synchronize();
  { auto pin = a.pin(s1, Access::read); }   // a used last: c goes first
  s1.synchronize();                         // and a's uses are over
  { auto pin = b.pin(s1, Access::write); }  // ...when b takes c's frame: c's write-back waits for the gate,
  { auto pin = d.pin(s1, Access::write); }  // and a's, queued after it, for c's (one copy stream)
  EXPECT_EQ(a.tier(), Tier::transit);
  std::atomic<bool> watchdog_opened{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 200 && !gate.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!gate.exchange(true)) watchdog_opened = true;
  });
  std::atomic<std::size_t> a_wrong{SIZE_MAX};
  {
    auto pin = a.pin(s1, Access::read);  // a is still being written back: must return with the gate closed
    EXPECT_FALSE(gate.load()) << "the pin waited for the page's write-back";
    s1.launch([&a_wrong, src = pin.data(), n = a.size()] { a_wrong = test::mismatches(src, n, 81); });
  }
  gate = true;
  watchdog.join();
  EXPECT_FALSE(watchdog_opened.load());
  s1.synchronize();
  s2.synchronize();
  EXPECT_EQ(a_wrong.load(), 0u) << "the kernel read a before its write-back and page-in had brought it back";
  for (auto [t, seed] : {std::pair<Tensor*, int>{&a, 81}, {&c, 83}}) {
    auto pin = t->pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), t->size(), seed), 0u) << seed;
  }
  p.check_invariants();
}

TEST(Pager, StreamTimerMeasuresTheDeviceTimeOfBusyKernels) {
  Config c = test::small_config(2, 4);
  c.sim.timing = "model";  // host work takes no device time: the figures are exact
  Pager p(c);
  auto s = p.create_stream();
  StreamTimer timer(s);
  EXPECT_THROW((void)timer.elapsed(), invalid_argument);  // not started
  EXPECT_THROW(timer.stop(), invalid_argument);
  timer.start();
  s.busy_for(std::chrono::milliseconds(3));
  s.busy_for(std::chrono::milliseconds(2));
  EXPECT_THROW((void)timer.elapsed(), invalid_argument);  // not stopped
  timer.stop();
  EXPECT_EQ(timer.elapsed(), std::chrono::milliseconds(5));  // the simulator's device time is exact
  // A second measurement reuses the timer.
  timer.start();
  s.busy_for(std::chrono::microseconds(700));
  timer.stop();
  EXPECT_EQ(timer.elapsed(), std::chrono::microseconds(700));
  EXPECT_THROW(s.busy_for(std::chrono::nanoseconds(-1)), invalid_argument);
  auto other = p.create_stream();
  Stream moved = std::move(other);
  EXPECT_THROW(other.busy_for(std::chrono::milliseconds(1)), invalid_argument);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(StreamTimer{other}, invalid_argument);                            // NOLINT(bugprone-use-after-move)
}

TEST(Pager, WithWallTimingAHostGapBetweenKernelsCountsAndWithModelTimingItDoesNot) {
  for (const char* timing : {"wall", "model"}) {
    Config c = test::small_config(2, 4);
    c.sim.timing = timing;
    Pager p(c);
    auto s = p.create_stream();
    StreamTimer timer(s);
    timer.start();
    s.busy_for(std::chrono::milliseconds(1));
    s.synchronize();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the host works; the stream is idle
    s.busy_for(std::chrono::milliseconds(1));
    timer.stop();
    const auto t = timer.elapsed();
    if (std::string(timing) == "wall") {
      EXPECT_GE(t, std::chrono::milliseconds(32)) << timing;
    } else {
      EXPECT_EQ(t, std::chrono::milliseconds(2)) << timing;
    }
  }
}

TEST(Pager, StatsAndPinLogFilesAreWritten) {
  test::TempDir dir;
  const std::string stats_path = dir.path() + "/stats.json";
  const std::string log_path = dir.path() + "/pins.jsonl";
  {
    Config c = test::small_config(2, 4);
    c.stats_file = stats_path;
    c.pin_log_file = log_path;
    c.min_bytes = KiB;  // the 100-byte tensor below goes to the resident arena
    Pager p(c);
    auto t = p.allocate(2 * 64 * KiB);
    p.mark_iteration();
    { auto pin = t.pin(Access::write); }  // fresh pages: mapped, a miss
    { auto pin = t.pin(Access::read); }   // resident: a hit
    auto small = p.allocate(100);         // in the resident arena
    { auto pin = small.pin(Access::read); }
    p.mark_iteration();
  }
  const std::string stats = test::read_file(stats_path);
  EXPECT_NE(stats.find("\"pins\": 4"), std::string::npos) << stats;  // with the arena page's pin for life
  EXPECT_NE(stats.find("\"device_to_host\": {\"bytes\": 65536, \"pages\": 1}"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"driver\": {\"map\": {\"calls\": "), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"launch\": {\"calls\": "), std::string::npos) << stats;
  EXPECT_EQ(stats.back(), '\n');
  const std::string log = test::read_file(log_path);
  std::vector<std::string> lines;
  for (std::size_t at = 0, end; (end = log.find('\n', at)) != std::string::npos; at = end + 1) {
    lines.push_back(log.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 6u) << log;
  EXPECT_EQ(lines[0].rfind("{\"iteration\": 0, \"t_us\": ", 0), 0u) << lines[0];
  EXPECT_NE(lines[1].find("\"pin\": 0, "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"tensor\": 1, \"pages\": 2, \"access\": \"write\", \"hit\": false"), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("\"tensor\": 1, \"pages\": 2, \"access\": \"read\", \"hit\": true"), std::string::npos)
      << lines[2];
  // The small allocation opens an arena page (tensor 2, pinned for life at allocation), then is pinned
  // itself: always resident, no pages of its own.
  EXPECT_NE(lines[3].find("\"tensor\": 2, \"pages\": 1, \"access\": \"write\""), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("\"tensor\": 3, \"pages\": 0, \"access\": \"read\", \"hit\": true"), std::string::npos)
      << lines[4];
  EXPECT_EQ(lines[5].rfind("{\"iteration\": 1, ", 0), 0u) << lines[5];
}

TEST(Pager, AnUnwritableStatsOrPinLogFileFailsWhenThePagerIsBuilt) {
  for (const char* key : {"stats.file", "pin_log.file"}) {
    Config c = test::small_config(2, 4);
    (std::string(key) == "stats.file" ? c.stats_file : c.pin_log_file) = "/nonexistent-dir/x.json";
    try {
      Pager p(c);
      FAIL() << "expected config_error for " << key;
    } catch (const config_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(key), std::string::npos) << msg;
      EXPECT_NE(msg.find("/nonexistent-dir/x.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
    }
  }
}
