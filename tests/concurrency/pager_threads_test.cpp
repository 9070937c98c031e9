// Concurrency: threads pin, write, unpin, re-pin and verify their own tensors under a device budget of
// a few pages. Also run under ThreadSanitizer (ctest label "concurrency").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device_bytes.hpp"
#include "test_support.hpp"

using namespace tvmm;

namespace {

// Calls check_invariants() on a thread of its own every `pause` until stop() (or destruction), counting
// the checks and keeping the first violation's text. Read the counts after stop().
class InvariantChecker {
 public:
  InvariantChecker(Pager& p, std::chrono::microseconds pause)
      : thread_([this, &p, pause] {
          while (!stop_.load()) {
            ++checks_;
            try {
              p.check_invariants();
            } catch (const std::exception& e) {
              if (violations_++ == 0) first_violation_ = e.what();
            }
            std::this_thread::sleep_for(pause);
          }
        }) {}
  ~InvariantChecker() { stop(); }
  InvariantChecker(const InvariantChecker&) = delete;
  InvariantChecker& operator=(const InvariantChecker&) = delete;
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] std::size_t checks() const { return checks_; }
  [[nodiscard]] std::size_t violations() const { return violations_; }
  [[nodiscard]] const std::string& first_violation() const { return first_violation_; }

 private:
  std::atomic<bool> stop_{false};
  std::size_t checks_ = 0, violations_ = 0;
  std::string first_violation_;
  std::thread thread_;  // last: it starts once the members above exist
};

// With `nvme_dir`, the host tier holds 6 pages and the rest goes to an NVMe tier there, and one pin in
// three is read-only (so clean pages are dropped without a write-back while others write). With
// `check_meanwhile`, one more thread calls check_invariants() in a loop while the others work.
void hammer(bool streams, int threads, int iterations, std::size_t device_pages, const char* policy = "lru",
            const std::string& nvme_dir = "", bool check_meanwhile = false) {
  auto cfg = test::small_config(device_pages, nvme_dir.empty() ? 64 : 6);
  if (!nvme_dir.empty()) {
    cfg.nvme.paths = {nvme_dir};
    cfg.nvme.budget = 64 * 64 * KiB;
    cfg.nvme.queue_depth = 4;
  }
  cfg.eviction = policy;
  cfg.wait_timeout = std::chrono::milliseconds(60'000);
  test::TestPager tp(cfg);  // the simulator, or the CUDA backend (TVMM_TEST_DEVICE=cuda)
  Pager& p = *tp;
  std::optional<InvariantChecker> checker;
  if (check_meanwhile) checker.emplace(p, std::chrono::microseconds(200));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      std::vector<Tensor> mine;
      std::vector<std::uint64_t> seeds;
      for (int i = 0; i < 3; ++i) {
        mine.push_back(p.allocate((1 + (t + i) % 2) * 64 * KiB - 100 * static_cast<std::size_t>(i),
                                  {"t" + std::to_string(t) + "." + std::to_string(i)}));
        seeds.push_back(0);
      }
      Stream s = streams ? p.create_stream() : Stream();
      for (int it = 0; it < iterations; ++it) {
        const auto k = rng() % mine.size();
        const std::uint64_t old_seed = seeds[k];
        const bool read_only = !nvme_dir.empty() && old_seed != 0 && rng() % 3 == 0;
        if (read_only) {
          auto pin = mine[k].pin(Access::read);
          tp.check(nullptr, pin.data(), mine[k].size(), old_seed);
          continue;
        }
        const std::uint64_t new_seed = (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint64_t>(it + 1);
        Tensor& tensor = mine[k];
        auto pin = streams ? tensor.pin(s, Access::read_write) : tensor.pin(Access::read_write);
        Stream* on = streams ? &s : nullptr;
        if (old_seed != 0) tp.check(on, pin.data(), tensor.size(), old_seed);
        tp.fill(on, pin.data(), tensor.size(), new_seed);
        seeds[k] = new_seed;
      }
      if (streams) s.synchronize();
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (seeds[k] == 0) continue;
        auto pin = mine[k].pin(Access::read);
        tp.check(nullptr, pin.data(), mine[k].size(), seeds[k]);
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(tp.mismatches(), 0u);
  if (checker) {
    checker->stop();
    EXPECT_EQ(checker->violations(), 0u) << "of " << checker->checks()
                                         << " checks; the first: " << checker->first_violation();
    EXPECT_GT(checker->checks(), 10u);  // it ran while the others worked
    std::printf("%zu checks while the threads worked\n", checker->checks());
  }
  const auto st = p.stats();
  EXPECT_LE(st.device_peak_bytes, st.device_budget);
  EXPECT_LE(st.host_peak_bytes, st.host_budget);
  EXPECT_GT(st.evictions, 0u);
  EXPECT_EQ(st.live_bytes, 0u);
  p.check_invariants();
}

}  // namespace

TEST(PagerThreads, EightThreadsHostPins) { hammer(false, 8, 150, 4); }

TEST(PagerThreads, EightThreadsStreamPins) { hammer(true, 8, 150, 4); }

// CLOCK's touch sets a bit in the page word without the policy lock while sweeps clear it.
TEST(PagerThreads, EightThreadsStreamPinsClock) { hammer(true, 8, 150, 4, "clock"); }

// Three tiers: spills to NVMe and staged reads run without the pager lock while other threads pin.
TEST(PagerThreads, EightThreadsStreamPinsThreeTiers) {
  test::TempDir dir;
  hammer(true, 8, 120, 4, "lru", dir.path());
}

TEST(PagerThreads, EightThreadsHostPinsThreeTiers) {
  test::TempDir dir;
  hammer(false, 8, 120, 4, "lru", dir.path());
}

// check_invariants() is correct while other threads pin, evict, spill and stage pages: it reported
// false violations before (frames held across the NVMe reads, pin counts changed without the lock).
TEST(PagerThreads, InvariantsHoldWhileEightThreadsHostPinThreeTiers) {
  test::TempDir dir;
  hammer(false, 8, 120, 4, "lru", dir.path(), true);
}

TEST(PagerThreads, InvariantsHoldWhileEightThreadsStreamPinThreeTiers) {
  test::TempDir dir;
  hammer(true, 8, 120, 4, "clock", dir.path(), true);
}

TEST(PagerThreads, InvariantsHoldWhileEightThreadsHostPin) { hammer(false, 8, 150, 4, "lru", "", true); }

TEST(PagerThreads, SharedTensorPinnedByManyThreads) {
  Pager p(test::small_config(3, 16));
  auto shared = p.allocate(2 * 64 * KiB);
  {
    auto pin = shared.pin(Access::write);
    test::fill(pin.data(), shared.size(), 77);
  }
  std::atomic<std::size_t> bad{0};
  std::vector<std::thread> ws;
  for (int t = 0; t < 8; ++t) {
    ws.emplace_back([&, t] {
      auto own = p.allocate(64 * KiB);
      for (int i = 0; i < 100; ++i) {
        {
          auto pin = own.pin(Access::write);
          test::fill(pin.data(), own.size(), static_cast<std::uint64_t>(t));
        }
        auto pin = shared.pin(Access::read);
        bad += test::mismatches(pin.data(), shared.size(), 77);
      }
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0u);
  p.check_invariants();
}

// Range pins of one tensor from several threads, each writing and checking its own pages, while
// sequential prefetch pages in ahead of every pin (often into another thread's pages).
TEST(PagerThreads, RangePinsOfOneTensorWithSequentialPrefetch) {
  constexpr std::size_t page = 64 * KiB;
  constexpr int threads = 4;
  constexpr std::size_t per_thread = 6;
  auto cfg = test::small_config(4, 40);
  cfg.prefetch = "sequential";
  cfg.prefetch_distance = 2;
  cfg.wait_timeout = std::chrono::milliseconds(60'000);
  Pager p(cfg);
  auto t = p.allocate(threads * per_thread * page);
  std::atomic<std::size_t> bad{0};
  std::vector<std::thread> ws;
  for (int w = 0; w < threads; ++w) {
    ws.emplace_back([&, w] {
      std::vector<std::uint64_t> seeds(per_thread, 0);
      const std::size_t base = static_cast<std::size_t>(w) * per_thread;
      for (int it = 0; it < 60; ++it) {
        const std::size_t i = static_cast<std::size_t>(it) % per_thread;  // a scan over its own pages
        auto pin = t.pin_range((base + i) * page, page, Access::read_write);
        if (seeds[i] != 0) bad += test::mismatches(pin.data(), page, seeds[i]);
        seeds[i] = (static_cast<std::uint64_t>(w) << 32) | static_cast<std::uint64_t>(it + 1);
        test::fill(pin.data(), page, seeds[i]);
      }
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(p.stats().prefetched, 0u);
  p.check_invariants();
}

TEST(PagerThreads, ConcurrentAllocateAndFree) {
  Pager p(test::small_config(4, 32));
  std::vector<std::thread> ws;
  std::atomic<std::size_t> bad{0};
  for (int t = 0; t < 8; ++t) {
    ws.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        auto x = p.allocate(64 * KiB * (1 + static_cast<std::size_t>(i % 2)));
        auto pin = x.pin(Access::write);
        test::fill(pin.data(), x.size(), static_cast<std::uint64_t>(t * 1000 + i));
        bad += test::mismatches(pin.data(), x.size(), static_cast<std::uint64_t>(t * 1000 + i));
      }
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(p.stats().live_bytes, 0u);
  p.check_invariants();
}

TEST(PagerThreads, ConcurrentSmallAllocationsInTheArena) {
  auto cfg = test::small_config(4, 32);
  cfg.min_bytes = 16 * KiB;  // everything below goes to the shared arena pages
  Pager p(cfg);
  std::vector<std::thread> ws;
  std::atomic<std::size_t> bad{0};
  for (int t = 0; t < 8; ++t) {
    ws.emplace_back([&, t] {
      auto s = p.create_stream();
      for (int i = 0; i < 40; ++i) {
        std::vector<Tensor> mine;
        for (int k = 0; k < 5; ++k) mine.push_back(p.allocate(300 + static_cast<std::size_t>(k * 700)));
        for (std::size_t k = 0; k < mine.size(); ++k) {
          auto pin = mine[k].pin(s, Access::write);
          const auto seed = static_cast<std::uint64_t>(t * 100000 + i * 10 + static_cast<int>(k));
          s.launch([d = pin.data(), n = mine[k].size(), seed] { test::fill(d, n, seed); });
        }
        for (std::size_t k = 0; k < mine.size(); ++k) {
          auto pin = mine[k].pin(Access::read);  // waits for the kernel above
          bad += test::mismatches(pin.data(), mine[k].size(),
                                  static_cast<std::uint64_t>(t * 100000 + i * 10 + static_cast<int>(k)));
        }
      }
    });
  }
  for (auto& w : ws) w.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(p.stats().live_bytes, 0u);
  p.check_invariants();
}

TEST(PagerThreads, TracePrefetchWithInterleavedThreads) {
  // Threads interleave their pins, so the recorded order rarely repeats: the trace is dropped and
  // re-recorded again and again. Whatever it prefetches, every byte must stay correct.
  auto cfg = test::small_config(4, 64);
  cfg.prefetch = "trace";
  cfg.eviction = "belady";
  cfg.prefetch_distance = 3;
  Pager p(cfg);
  std::atomic<std::size_t> bad{0};
  std::atomic<bool> stop{false};
  std::thread marker([&] {
    while (!stop.load()) {
      p.mark_iteration();
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<std::thread> ws;
  for (int t = 0; t < 4; ++t) {
    ws.emplace_back([&, t] {
      auto s = p.create_stream();
      std::vector<Tensor> mine;
      std::vector<std::uint64_t> seeds(3, 0);
      for (int i = 0; i < 3; ++i) mine.push_back(p.allocate(64 * KiB));
      for (int it = 0; it < 60; ++it) {
        for (std::size_t k = 0; k < mine.size(); ++k) {
          auto pin = mine[k].pin(s, Access::read_write);
          const auto old_seed = seeds[k];
          const auto new_seed = static_cast<std::uint64_t>(t * 1000000 + it * 10 + static_cast<int>(k) + 1);
          s.launch([&bad, d = pin.data(), old_seed, new_seed] {
            if (old_seed != 0) bad += test::mismatches(d, 64 * KiB, old_seed);
            test::fill(d, 64 * KiB, new_seed);
          });
          seeds[k] = new_seed;
        }
      }
      s.synchronize();
      for (std::size_t k = 0; k < mine.size(); ++k) {
        auto pin = mine[k].pin(Access::read);
        bad += test::mismatches(pin.data(), 64 * KiB, seeds[k]);
      }
    });
  }
  for (auto& w : ws) w.join();
  stop = true;
  marker.join();
  EXPECT_EQ(bad.load(), 0u);
  p.check_invariants();
}

// Write-behind (Config::write_behind) on a stream replaying a training-like order, while another thread
// checks the invariants (a write-behind copy holds its slot) and a third interleaves its own pins,
// which keep dropping the trace: copies started, made stale, dropped and retired race with the hit
// path's CAS, and every byte stays correct. ThreadSanitizer checks the locking.
TEST(PagerThreads, WriteBehindWhileOtherThreadsPinAndCheck) {
  auto cfg = test::small_config(4, 64);
  cfg.eviction = "belady";
  cfg.write_behind = true;
  Pager p(cfg);
  std::atomic<std::size_t> bad{0};
  InvariantChecker checker(p, std::chrono::microseconds(300));
  auto run = [&](int id, int iterations, bool marks) {
    auto s = p.create_stream();
    std::vector<Tensor> mine;
    std::vector<std::uint64_t> seeds(6, 0);
    for (int i = 0; i < 6; ++i) mine.push_back(p.allocate(64 * KiB));
    const std::vector<std::size_t> order = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
    for (int it = 0; it < iterations; ++it) {
      if (marks) p.mark_iteration();
      for (std::size_t step = 0; step < order.size(); ++step) {
        const std::size_t k = order[step];
        const bool writes = step < 6;  // forward writes, backward reads
        auto pin = mine[k].pin(s, writes ? Access::read_write : Access::read);
        const auto old_seed = seeds[k];
        const auto new_seed = writes ? static_cast<std::uint64_t>(id * 1000000 + it * 10 + static_cast<int>(k) + 1) : 0;
        s.launch([&bad, d = pin.data(), old_seed, new_seed] {
          if (old_seed != 0) bad += test::mismatches(d, 64 * KiB, old_seed);
          if (new_seed != 0) test::fill(d, 64 * KiB, new_seed);
        });
        if (writes) seeds[k] = new_seed;
      }
    }
    s.synchronize();
    for (std::size_t k = 0; k < mine.size(); ++k) {
      auto pin = mine[k].pin(Access::read);
      bad += test::mismatches(pin.data(), 64 * KiB, seeds[k]);
    }
  };
  std::thread main_loop([&] { run(1, 40, true); });
  main_loop.join();  // alone first: the trace replays and writes are copied behind
  const auto alone = p.stats().written_behind;
  std::thread other([&] { run(2, 20, false); });
  std::thread again([&] { run(3, 20, true); });
  other.join();
  again.join();
  checker.stop();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(alone, 0u) << "the replayed loop copied nothing behind";
  EXPECT_EQ(checker.violations(), 0u) << checker.first_violation();
  p.check_invariants();
}

// Each thread runs "kernels" of two operands on its own stream and releases both pins together, while
// the threads' pins evict each other's pages and another thread checks the invariants.
TEST(PagerThreads, OperandPinsReleasedTogetherWhileOthersEvict) {
  Pager p(test::small_config(6, 64));  // 4 threads x 3 pages: twice the device
  std::atomic<std::size_t> bad{0};
  InvariantChecker checker(p, std::chrono::microseconds(300));
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 11u);
      auto s = p.create_stream();
      std::vector<Tensor> mine;
      std::vector<std::uint64_t> seeds(3, 0);
      for (int i = 0; i < 3; ++i) mine.push_back(p.allocate(64 * KiB));
      std::vector<Pin> pins;
      for (int it = 0; it < 150; ++it) {
        const std::size_t a = rng() % 3, b = (a + 1 + rng() % 2) % 3;  // two different tensors
        pins.clear();
        pins.push_back(mine[a].pin(s, Access::read_write));
        pins.push_back(mine[b].pin(s, Access::read_write));
        const std::uint64_t sa = seeds[a], sb = seeds[b];
        const std::uint64_t na = (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint64_t>(2 * it + 1);
        const std::uint64_t nb = na + 1;
        s.launch([&bad, da = pins[0].data(), db = pins[1].data(), sa, sb, na, nb] {
          if (sa != 0) bad += test::mismatches(da, 64 * KiB, sa);
          if (sb != 0) bad += test::mismatches(db, 64 * KiB, sb);
          test::fill(da, 64 * KiB, na);
          test::fill(db, 64 * KiB, nb);
        });
        seeds[a] = na;
        seeds[b] = nb;
        release_together(pins);
      }
      s.synchronize();
      for (std::size_t k = 0; k < mine.size(); ++k) {
        if (seeds[k] == 0) continue;
        auto pin = mine[k].pin(Access::read);
        bad += test::mismatches(pin.data(), 64 * KiB, seeds[k]);
      }
    });
  }
  for (auto& w : workers) w.join();
  checker.stop();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(checker.violations(), 0u) << checker.first_violation();
  EXPECT_GT(p.stats().evictions, 0u);
  p.check_invariants();
}

// The timeline is fed from every pinning thread and from the copy streams' completion callbacks at
// once; ThreadSanitizer checks its locking, and the file must still name every lane it uses.
TEST(PagerThreads, TimelineFromManyThreads) {
  test::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  {
    auto cfg = test::small_config(4, 64);
    cfg.timeline_file = path;
    Pager p(cfg);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&p, t] {
        auto s = p.create_stream();
        auto a = p.allocate(2 * 64 * KiB);
        for (int i = 0; i < 40; ++i) {
          auto pin = (i + t) % 2 == 0 ? a.pin(s, Access::read_write) : a.pin(Access::read_write);
        }
        s.synchronize();
      });
    }
    for (auto& th : threads) th.join();
  }
  const std::string text = test::read_file(path);
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\"", 0), 0u);
  EXPECT_NE(text.find("copy engine: host to device"), std::string::npos);
  EXPECT_NE(text.find("\"stream 4\""), std::string::npos);  // four threads, a stream each
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
}
