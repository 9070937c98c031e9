// Write-behind (Config::write_behind): while the access trace replays, a write whose data earlier
// iterations evicted before the next write is copied to the host tier once it is unpinned, and its
// eviction then moves nothing. A write after the copy, a free or a discard while it runs, and a copy
// that fails lose no byte and no slot; a copy that ends while a reap asks about it leaves no page off
// the device still marked as written behind.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "device_scratch.hpp"
#include "faulty_pager.hpp"
#include "test_support.hpp"

using namespace tvmm;
using test::mismatches;
using test::write;

namespace {

constexpr std::size_t kPage = 64 * KiB;

// Four one-page tensors over three frames, pinned from the host like a training step: written in turn
// (forward), then read back in reverse (backward). With Belady's eviction, each iteration evicts A
// when D is written (A is read last) and D when A is read back (D is written again first), each a
// few pins after its write: time for a copy behind.
Config step_config(bool write_behind) {
  Config c = test::small_config(3, 16);
  c.eviction = "belady";
  c.write_behind = write_behind;
  return c;
}

struct Step {
  std::vector<Tensor> ts;
  std::vector<std::uint64_t> seed = std::vector<std::uint64_t>(4, 0);
  std::size_t bad = 0;
  int iteration = 0;

  explicit Step(Pager& p) {
    for (const char* name : {"A", "B", "C", "D"}) ts.push_back(p.allocate(kPage, {name}));
  }
  void forward(std::size_t i) {
    seed[i] = static_cast<std::uint64_t>(iteration * 10 + static_cast<int>(i) + 1);
    write(ts[i], seed[i]);
  }
  void backward(std::size_t i) { bad += mismatches(ts[i], seed[i]); }
  void run(Pager& p, int iterations) {
    for (int k = 0; k < iterations; ++k, ++iteration) {
      p.mark_iteration();
      for (std::size_t i = 0; i < 4; ++i) forward(i);
      for (std::size_t i = 4; i-- > 0;) backward(i);
    }
  }
};

// The eviction figures the write-behind comparisons check, from `before` to `after`.
Stats evictions_between(const Stats& before, const Stats& after) {
  Stats d{};
  d.evictions = after.evictions - before.evictions;
  d.clean_evictions = after.clean_evictions - before.clean_evictions;
  d.written_behind = after.written_behind - before.written_behind;
  d.device_to_host.pages = after.device_to_host.pages - before.device_to_host.pages;
  return d;
}

using Op = device::FaultyDevice::Op;

// The step on a pager whose device injects faults and holds copies, after 4 iterations that record
// the trace and learn that A's write is evicted before A is written again.
struct Learnt {
  device::FaultyDevice* dev = nullptr;
  Pager p;
  Step s;
  Learnt() : p(test::make_faulty_pager(step_config(true), dev)), s(p) { s.run(p, 4); }
  // The next iteration's first two pins with device-to-host copies held: A's write is copied behind
  // after B's pin, and that copy stays in flight until released. Returns the copies held.
  std::uint64_t hold_the_copy_behind_a() {
    p.mark_iteration();
    dev->hold(Op::copy_out);
    s.forward(0);
    s.forward(1);
    return dev->held(Op::copy_out);
  }
  // Then C's and D's writes with that copy still held: D's evicts A, dropped (its copy current), and
  // waits for the copy out of A's frame, which a helper thread lets run 50 ms later.
  void evict_a_during_the_copy_behind() {
    std::thread release([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      dev->release_all();
    });
    s.forward(2);
    s.forward(3);
    release.join();
  }
};

}  // namespace

TEST(WriteBehind, ALearntWriteIsCopiedBehindAndItsEvictionMovesNothing) {
  Stats with{}, without{};
  for (const bool on : {true, false}) {
    Pager p(step_config(on));
    Step s(p);
    s.run(p, 4);  // record, replay and learn
    const auto before = p.stats();
    s.run(p, 2);
    const auto after = p.stats();
    EXPECT_EQ(s.bad, 0u);
    p.check_invariants();
    (on ? with : without) = evictions_between(before, after);
  }
  EXPECT_EQ(without.written_behind, 0u);
  EXPECT_EQ(without.clean_evictions, 0u) << "every victim is dirty without write-behind";
  ASSERT_EQ(with.evictions, without.evictions) << "write-behind changes when pages move, not which";
  EXPECT_EQ(with.written_behind, with.evictions) << "each evicted write was copied behind";
  EXPECT_EQ(with.clean_evictions, with.evictions) << "and each eviction then moved nothing";
  EXPECT_EQ(with.device_to_host.pages, without.device_to_host.pages) << "no copy was wasted";
}

// A host tier that fills up takes its kept copies back for the next write-backs, before their pages'
// evictions: a copy behind made then saves nothing. So no write is copied in an iteration in which the
// tier filled up, nor in the one after it; once it has not filled for a whole iteration, writes are
// copied again.
TEST(WriteBehind, NothingIsCopiedBehindWhileTheHostTierFillsUp) {
  for (const std::size_t host_pages : {2, 3}) {
    Config c = step_config(true);
    c.host_budget =
        host_pages * kPage;  // one page off the device at a time: with 2 slots, a copy behind fills the tier
    Pager p(c);
    Step s(p);
    s.run(p, 8);
    EXPECT_EQ(s.bad, 0u) << host_pages;
    p.check_invariants();
    if (host_pages == 2) {
      EXPECT_EQ(p.stats().written_behind, 0u) << "copied behind into a tier that fills at every eviction";
    } else {
      EXPECT_GT(p.stats().written_behind, 0u) << "a tier with a slot to spare takes copies behind";
    }
  }
}

TEST(WriteBehind, OffTheTraceNothingIsCopiedBehind) {
  Config c = step_config(true);  // LRU does not read the trace, so it is not recorded
  c.eviction = "lru";
  Pager lru(c);
  Step s(lru);
  s.run(lru, 6);
  EXPECT_EQ(s.bad, 0u);
  EXPECT_EQ(lru.stats().written_behind, 0u);
}

TEST(WriteBehind, AWriteAfterTheCopyMakesItStaleAndTheEvictionWritesThePageBack) {
  Learnt l;
  auto& [dev, p, s] = l;
  ASSERT_GT(p.stats().written_behind, 0u);
  ASSERT_EQ(l.hold_the_copy_behind_a(), 1u);
  // A pin the trace does not expect (it is dropped) writes A again while the copy runs.
  write(s.ts[0], 99);
  s.seed[0] = 99;
  p.check_invariants();
  dev->release_all();
  const auto before = p.stats();
  s.forward(2);
  s.forward(3);
  s.backward(1);  // B, C and D used after A: A is evicted (the policy is LRU without a trace)
  ASSERT_EQ(s.ts[0].tier(), Tier::host);
  EXPECT_EQ(p.stats().clean_evictions, before.clean_evictions) << "A's stale copy was taken as current";
  EXPECT_EQ(mismatches(s.ts[0], 99), 0u) << "the second write was lost";
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(mismatches(s.ts[i], s.seed[i]), 0u) << i;
  EXPECT_EQ(s.bad, 0u);
  p.check_invariants();
}

TEST(WriteBehind, FreeingATensorWaitsForItsCopyBehindAndGivesTheSlotBack) {
  Learnt l;
  auto& [dev, p, s] = l;
  ASSERT_EQ(l.hold_the_copy_behind_a(), 1u);
  const auto slots_held = p.stats().host_used_bytes;
  std::atomic<bool> freed{false};
  std::thread t([&] {
    s.ts[0].reset();  // waits: the copy into A's slot still runs
    freed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(freed.load()) << "the slot would be reused under a running copy";
  dev->release_all();
  t.join();
  EXPECT_LT(p.stats().host_used_bytes, slots_held) << "A's slot went back to the tier";
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(mismatches(s.ts[i], s.seed[i]), 0u) << i;
  p.check_invariants();
}

TEST(WriteBehind, ADiscardWhileTheCopyRunsLetsTheSlotGoOnceItEnds) {
  Learnt l;
  auto& [dev, p, s] = l;
  ASSERT_EQ(l.hold_the_copy_behind_a(), 1u);
  const auto slots_held = p.stats().host_used_bytes;
  s.ts[0].discard();
  p.check_invariants();
  EXPECT_EQ(p.stats().host_used_bytes, slots_held) << "the slot stays while the copy writes into it";
  dev->release_all();
  s.forward(2);
  s.forward(3);  // evicts A: dropped, its contents dead
  p.check_invariants();
  EXPECT_LT(p.stats().host_used_bytes, slots_held + 2 * kPage);
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(mismatches(s.ts[i], s.seed[i]), 0u) << i;
  write(s.ts[0], 5);  // the tensor lives on
  EXPECT_EQ(mismatches(s.ts[0], 5), 0u);
  p.check_invariants();
}

TEST(WriteBehind, AFailedCopyLeavesThePageDirtyAndItsEvictionWritesItBack) {
  Learnt l;
  auto& [dev, p, s] = l;
  p.mark_iteration();
  const auto before = p.stats();
  dev->fail_once(Op::copy_out, device::Errc::driver_error);
  s.forward(0);
  s.forward(1);  // the copy behind A fails: reported, nothing else changes
  EXPECT_EQ(dev->injected(), 1u);
  EXPECT_EQ(p.stats().written_behind, before.written_behind);
  p.check_invariants();
  s.forward(2);
  s.forward(3);  // evicts A, written back
  EXPECT_EQ(s.ts[0].tier(), Tier::host);
  EXPECT_GT(p.stats().device_to_host.pages, before.device_to_host.pages);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(mismatches(s.ts[i], s.seed[i]), 0u) << i;
  p.check_invariants();
}

TEST(WriteBehind, AnEvictionDuringTheCopyHandsTheFrameOverOnlyAfterIt) {
  Learnt l;
  auto& [dev, p, s] = l;
  ASSERT_EQ(l.hold_the_copy_behind_a(), 1u);
  l.evict_a_during_the_copy_behind();  // D's write must wait for the copy out of A's frame
  for (std::size_t i = 4; i-- > 0;) s.backward(i);
  EXPECT_EQ(s.bad, 0u) << "A's copy read the frame after D was written into it";
  p.check_invariants();
}

// reap() asks whether the oldest batch of copies behind is done before it asks about write-backs. A
// copy can end between the two questions (a query made a moment before it ended answers not ready),
// and a victim whose eviction followed that copy is then found done: it must not leave the device
// before the batch is retired, or it reaches the host tier still marked as written behind (the
// emulated allocation sweep caught that in 2 of 120 runs). Here A is evicted while its copy
// behind is held; once both have ended, the next reap's k-th query answers not ready, for every k.
TEST(WriteBehind, AVictimLeavesTheDeviceOnlyOnceTheCopyBehindItFollowedIsRetired) {
  for (unsigned k = 0;; ++k) {
    SCOPED_TRACE("query " + std::to_string(k) + " answers not ready");
    Learnt l;
    auto& [dev, p, s] = l;
    ASSERT_EQ(l.hold_the_copy_behind_a(), 1u);
    l.evict_a_during_the_copy_behind();
    ASSERT_TRUE(dev->synchronize_device().ok());  // both have ended; the next reap retires them
    dev->fail_once(Op::query_event, device::Errc::not_ready, k);
    (void)s.ts[0].tier();  // reaps
    p.check_invariants();
    for (std::size_t i = 4; i-- > 0;) s.backward(i);
    EXPECT_EQ(s.bad, 0u);
    p.check_invariants();
    if (dev->injected() == 0 || HasFailure()) break;  // that reap made k queries or fewer: each answered once
  }
}

// Write-behind copies a tensor's pages that left the device, not all of it. A (two pages), B, C, D (one
// each) over four frames, written in turn and read back in reverse: writing D evicts one page of A (read
// last, so Belady's victim), and the other stays. Copying both pages of A behind would add a copy per
// iteration that saves nothing.
TEST(WriteBehind, OnlyThePagesThatLeftAreCopiedBehind) {
  Stats with{}, without{};
  for (const bool on : {true, false}) {
    Config c = test::small_config(4, 16);
    c.eviction = "belady";
    c.write_behind = on;
    Pager p(c);
    std::vector<Tensor> ts;
    ts.push_back(p.allocate(2 * kPage, {"A"}));
    for (const char* name : {"B", "C", "D"}) ts.push_back(p.allocate(kPage, {name}));
    std::vector<std::uint64_t> seed(4, 0);
    std::size_t bad = 0;
    Stats before{};
    for (int it = 0; it < 7; ++it) {
      if (it == 4) before = p.stats();  // recorded, replayed and learnt: the last three count
      p.mark_iteration();
      for (std::size_t i = 0; i < 4; ++i) {
        seed[i] = static_cast<std::uint64_t>(it * 10) + i + 1;
        write(ts[i], seed[i]);
      }
      for (std::size_t i = 4; i-- > 0;) bad += mismatches(ts[i], seed[i]);
    }
    const auto after = p.stats();
    EXPECT_EQ(bad, 0u);
    p.check_invariants();
    (on ? with : without) = evictions_between(before, after);
  }
  ASSERT_EQ(with.evictions, without.evictions) << "write-behind changes when pages move, not which";
  EXPECT_GT(with.clean_evictions, 0u) << "some evictions were made clean by a copy behind";
  EXPECT_EQ(with.written_behind, with.clean_evictions) << "each page copied behind left the device";
  EXPECT_EQ(with.device_to_host.pages, without.device_to_host.pages) << "so no copy was wasted";
}

// A learnt write is copied behind only onto a device-to-host bus that would otherwise idle
// (DeviceBackend::d2h_backlog): while copies queued before keep the bus busy it waits, so that it does
// not delay the write-backs that pins wait for, and a later pin copies it once the bus is free. Here a
// copy of the test's own keeps the (modelled) bus busy for 40 ms.
TEST(WriteBehind, AWriteWaitsWhileTheDeviceToHostBusIsBusy) {
  constexpr std::size_t kBusy = 40;  // pages, a millisecond each
  std::uint64_t copied_at_b_pin[2] = {0, 0};
  for (const bool busy : {false, true}) {
    Config c = step_config(true);
    c.sim.timing = "model";  // host time moves only where the host waits: the busy copy stays ahead
    c.sim.bandwidth_bytes_per_s = static_cast<double>(kPage) * 1000;
    c.sim.capacity = 4 * kPage;  // a page beyond the pager's 3 frames for the busy copy
    device::FaultyDevice* dev = nullptr;
    Pager p(test::make_faulty_pager(c, dev));
    Step s(p);
    s.run(p, 4);                               // record, replay and learn: A's write is copied behind after B's pin
    test::DeviceScratch scratch(*dev, kPage);  // released before the pager that owns `dev`
    const device::StreamHandle t = scratch.stream();
    p.mark_iteration();
    if (busy) {
      for (std::size_t k = 0; k < kBusy; ++k) {
        ASSERT_TRUE(
            dev->memcpy_async(scratch.host(), scratch.device(), kPage, device::CopyKind::device_to_host, t).ok());
      }
    }
    const auto before = p.stats().written_behind;
    s.forward(0);
    s.forward(1);
    copied_at_b_pin[busy ? 1 : 0] = p.stats().written_behind - before;
    ASSERT_TRUE(dev->synchronize_stream(t).ok());  // the bus is free from here
    s.forward(2);
    s.forward(3);
    for (std::size_t i = 4; i-- > 0;) s.backward(i);
    ++s.iteration;
    EXPECT_GT(p.stats().written_behind - before, copied_at_b_pin[busy ? 1 : 0]) << "busy " << busy;
    EXPECT_EQ(s.bad, 0u);
    p.check_invariants();
  }
  EXPECT_EQ(copied_at_b_pin[0], 1u) << "with the bus idle, A is copied behind after B's pin";
  EXPECT_EQ(copied_at_b_pin[1], 0u) << "with the bus busy, A waits";
}
