// Ordering at fewer driver calls: the pager orders streams and copies after what they depend on
// (last kernels, write-backs, page-ins) with as few event queries, records and stream waits as it can.
// Each test checks both halves: the call counts it saves, and that work still waits for its data
// (copies held back with FaultyDevice::hold, kernels held by gates).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <initializer_list>
#include <thread>
#include <utility>

#include "backends/device/faulty/faulty_device.hpp"
#include "common/scope_guard.hpp"
#include "faulty_pager.hpp"
#include "test_support.hpp"

using namespace tvmm;
using Op = device::FaultyDevice::Op;
using test::make_faulty_pager;

// Two frames, `a` and `b` written with `seed`; then, with write-backs held, `c1` pinned for writing on
// stream `s` evicts `a` (least recently used), whose write-back stays held until released.
struct HeldWriteBackOfA {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
  Stream s = pager.create_stream();
  Tensor a = pager.allocate(64 * KiB), b = pager.allocate(64 * KiB);
  Tensor c1 = pager.allocate(64 * KiB), c2 = pager.allocate(64 * KiB);
  Pin pin1;
  explicit HeldWriteBackOfA(std::uint64_t seed) {
    for (Tensor* t : {&a, &b}) {
      auto pin = t->pin(Access::write);
      test::fill(pin.data(), t->size(), seed);
    }
    dev->hold(Op::copy_out);
    pin1 = c1.pin(s, Access::write);
  }
  // Lets every held copy run, waits for `s` and `others`, drops pin1 and `pin2`, checks the pager.
  void settle(std::initializer_list<Stream*> others, Pin& pin2) {
    dev->release_all();
    s.synchronize();
    for (Stream* o : others) o->synchronize();
    pin1 = Pin();
    pin2 = Pin();
    pager.check_invariants();
  }
};

// A victim dropped without a copy (its contents discarded) hands its frame over at once: the new page
// does not wait behind a write-back queued earlier for another victim.
TEST(PagerDroppedVictims, DoNotWaitForEarlierWriteBacks) {
  HeldWriteBackOfA t(7);
  auto& [dev, pager, s, a, b, c1, c2, pin1] = t;
  ASSERT_EQ(dev->held(Op::copy_out), 1u);
  b.discard();
  auto s2 = pager.create_stream();        // s waits for c1's frame
  auto pin2 = c2.pin(s2, Access::write);  // evicts b: dropped, nothing to copy
  std::atomic<bool> ran{false};
  s2.launch([&ran] { ran = true; });  // ordered after c2's frame is usable
  for (int i = 0; i < 400 && !ran; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(ran) << "the dropped victim's frame waited for a's held write-back";
  EXPECT_EQ(dev->held(Op::copy_out), 1u);
  t.settle({&s2}, pin2);
  EXPECT_EQ(test::mismatches(a, 7), 0u);
}

// A victim dropped without a copy whose last kernel still runs hands its frame over behind that kernel
// alone: the frame's next user waits for the kernel, but not for a write-back queued earlier for another
// victim. (Before, the eviction recorded an event on the copy stream, behind a's held write-back, and
// c2's kernel waited for that too: checked, `ran` stayed false after `go`.)
TEST(PagerDroppedVictims, WithTheirLastKernelRunningWaitOnlyForThatKernel) {
  HeldWriteBackOfA t(7);
  auto& [dev, pager, s, a, b, c1, c2, pin1] = t;
  ASSERT_EQ(dev->held(Op::copy_out), 1u);
  std::atomic<bool> go{false};
  common::ScopeGuard let_go([&] {  // a failed ASSERT must leave nothing waiting
    go = true;
    dev->release_all();
  });
  auto s3 = pager.create_stream();
  {
    Pin use = b.pin(s3, Access::read);
    s3.launch([&go] {
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  b.discard();
  auto s2 = pager.create_stream();
  auto pin2 = c2.pin(s2, Access::write);  // evicts b: dropped, its kernel still running
  std::atomic<bool> ran{false};
  s2.launch([&ran] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran) << "c2's frame was used while b's last kernel still ran";
  go = true;
  EXPECT_TRUE(test::eventually([&] { return ran.load(); }, std::chrono::milliseconds(2000)))
      << "the dropped victim's frame waited for a's held write-back";
  EXPECT_EQ(dev->held(Op::copy_out), 1u);
  t.settle({&s2, &s3}, pin2);
  EXPECT_EQ(test::mismatches(a, 7), 0u);
}

// A chunk with nothing to copy whose frames follow several events (victims dropped behind their own last
// kernels, on two streams) is usable only once every one has completed: c's work waits for both kernels.
TEST(PagerDroppedVictims, AChunkBehindSeveralKernelsWaitsForEach) {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
  Tensor b1 = pager.allocate(64 * KiB, {"b1"}), b2 = pager.allocate(64 * KiB, {"b2"});
  Tensor c = pager.allocate(128 * KiB, {"c"});
  for (Tensor* t : {&b1, &b2}) {
    auto pin = t->pin(Access::write);
    test::fill(pin.data(), t->size(), 17);
  }
  std::array<std::atomic<bool>, 2> go{};
  common::ScopeGuard let_go([&] { go[0] = go[1] = true; });
  Stream s1 = pager.create_stream(), s2 = pager.create_stream(), s3 = pager.create_stream();
  for (int i : {0, 1}) {
    Stream& st = i == 0 ? s1 : s2;
    Pin use = (i == 0 ? b1 : b2).pin(st, Access::read);
    st.launch([&go, i] {
      while (!go[i]) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  b1.discard();
  b2.discard();
  const auto before = dev->calls(Op::copy_in) + dev->calls(Op::copy_out);
  Pin pin_c = c.pin(s3, Access::write);  // takes b1's and b2's frames, each behind its own kernel
  EXPECT_EQ(dev->calls(Op::copy_in) + dev->calls(Op::copy_out) - before, 0u) << "a copy was made";
  std::atomic<bool> ran{false};
  s3.launch([&ran] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(ran) << "c's frames were used while both dropped pages' kernels still ran";
  go[0] = true;  // b1 was discarded first: its frame is the chunk's first, and its event the first met
  s1.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(ran) << "c's frames were used while b2's kernel still ran";
  go[1] = true;
  s2.synchronize();
  s3.synchronize();
  EXPECT_TRUE(ran);
  pin_c = Pin();
  pager.check_invariants();
}

// A page dropped with only its page-in pending hands that event over, and the page-in of a fresh page
// is the write-back its frame followed: an older write-back than one a victim evicted with it records.
// The chunk's event must be the later of the two. Here c takes a's frame (a's write-back, held) and b's
// (b's page-in: x's earlier write-back, completed but never queried, since every reap stops at d's
// kernel, held by a gate). Before the fix the chunk took x's write-back as its latest: c's kernel ran,
// and wrote a's frame, while a's write-back was still to read it (checked: `ran`, and a's bytes).
TEST(PagerDroppedVictims, AHandedOverWriteBackDoesNotHideALaterOne) {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(3, 8), dev);
  Tensor d = pager.allocate(64 * KiB, {"d"}), x = pager.allocate(64 * KiB, {"x"});
  Tensor a = pager.allocate(64 * KiB, {"a"}), e = pager.allocate(64 * KiB, {"e"});
  Tensor b = pager.allocate(64 * KiB, {"b"}), c = pager.allocate(128 * KiB, {"c"});
  for (Tensor* t : {&d, &x, &a}) {
    auto pin = t->pin(Access::write);
    test::fill(pin.data(), t->size(), 17);
  }
  std::atomic<bool> go{false};
  common::ScopeGuard let_go([&] {
    go = true;
    dev->release_all();
  });
  Stream s1 = pager.create_stream(), s2 = pager.create_stream(), s3 = pager.create_stream(), s4 = pager.create_stream(),
         s5 = pager.create_stream();
  {
    Pin use = d.pin(s1, Access::read);
    s1.launch([&go] {
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  { Pin other = a.pin(s5, Access::read); }  // a later release than d's, so d is taken as discarded
  s5.synchronize();
  d.discard();
  { Pin first = e.pin(s2, Access::write); }  // takes d's frame behind d's kernel: every reap stops there
  dev->hold(Op::copy_out);
  { Pin first = b.pin(s3, Access::write); }  // evicts x (write-back held); b's page-in is that write-back
  ASSERT_EQ(dev->held(Op::copy_out), 1u);
  dev->release(Op::copy_out, 1);  // x's write-back runs; nothing queries its event
  s3.synchronize();
  { Pin other = e.pin(s2, Access::read); }  // a later release than b's
  b.discard();
  Pin pin_c = c.pin(s4, Access::write);  // evicts a (write-back held) and b (dropped behind x's)
  ASSERT_EQ(dev->held(Op::copy_out), 1u) << "the test needs a's write-back in c's chunk";
  std::atomic<bool> ran{false};
  s4.launch([&ran, p = pin_c.data(), n = c.size()] {
    test::fill(p, n, 99);
    ran = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran) << "c's kernel ran before a's write-back had read a's frame";
  dev->release_all();
  go = true;
  for (Stream* st : {&s1, &s2, &s3, &s4, &s5}) st->synchronize();
  EXPECT_TRUE(ran);
  pin_c = Pin();
  pager.check_invariants();
  auto back = a.pin(Access::read);
  EXPECT_EQ(test::mismatches(back.data(), a.size(), 17), 0u) << "a's host copy holds c's bytes";
}

// A pin's slow path reaps (queries the oldest transfers' events: a driver call each on a GPU) once:
// on entry when it has pages to bring back, else at its first eviction (acquire_frames' `reaped`), and,
// holding the lock since, not again.
TEST(PagerQueries, ASlowPathThatEvictsReapsOnce) {
  HeldWriteBackOfA t(5);  // a's write-back is held, so never complete here
  auto& [dev, pager, s, a, b, c1, c2, pin1] = t;
  ASSERT_EQ(dev->held(Op::copy_out), 1u);
  const auto queries = pager.stats().driver.query.calls;
  auto pin2 = c2.pin(s, Access::write);  // evicts b
  // One reap queries two events that are not complete (a's held write-back's among them), and nothing
  // else queries: 2 in all, where reaping again before the eviction made 4 (checked with a reap put
  // back on entry).
  EXPECT_EQ(pager.stats().driver.query.calls - queries, 2u) << "the slow path reaped more than once";
  EXPECT_EQ(dev->held(Op::copy_out), 2u);
  t.settle({}, pin2);
  for (Tensor* x : {&a, &b}) EXPECT_EQ(test::mismatches(*x, 5), 0u);
}

// Two frames; a and b written and then pushed to the host tier by c and d.
struct TwoOnTheHost {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
  Stream s = pager.create_stream(), s2 = pager.create_stream();
  Tensor a = pager.allocate(64 * KiB, {"a"}), b = pager.allocate(64 * KiB, {"b"});
  Tensor c = pager.allocate(64 * KiB, {"c"}), d = pager.allocate(64 * KiB, {"d"});
  TwoOnTheHost() {
    for (Tensor* t : {&a, &b, &c, &d}) {
      auto pin = t->pin(Access::write);
      test::fill(pin.data(), t->size(), 11);
    }
  }
  void expect_intact() {
    pager.check_invariants();
    for (Tensor* t : {&a, &b, &c, &d}) {
      auto back = t->pin(Access::read);
      EXPECT_EQ(test::mismatches(back.data(), t->size(), 11), 0u);
    }
  }
};

// A stream pin of pages on the device whose page-in is still running (prefetched, or loaded by an
// earlier pin), behind an older page-in batch, makes no query: it neither reaps (nothing of it needs a
// frame or is in transit, and the reap's first query would be about the older batch) nor asks whether
// its page-in is done; its stream waits for the page-in, which a query would have found running anyway.
// Checked without each half: 1 query (not reaping, but asking) or 2 (reaping: the held page-ins' and
// the last write-back's events).
TEST(PagerQueries, APinOfPagesStillLoadingOrdersItsStreamWithoutQuerying) {
  TwoOnTheHost t;
  ASSERT_EQ(t.a.tier(), Tier::host);
  ASSERT_EQ(t.b.tier(), Tier::host);
  t.dev->hold(Op::copy_in);
  common::ScopeGuard let_go([&] { t.dev->release_all(); });  // a failed ASSERT must not leave copies held
  { Pin first = t.a.pin(t.s2, Access::read); }               // loads a: the oldest page-in batch, held
  { Pin first = t.b.pin(t.s2, Access::read); }               // loads b: a later batch, held too
  ASSERT_EQ(t.dev->held(Op::copy_in), 2u);
  const auto before = t.pager.stats().driver;
  Pin again = t.b.pin(t.s, Access::read);
  const auto after = t.pager.stats().driver;
  EXPECT_EQ(after.query.calls - before.query.calls, 0u) << "the pin queried events";
  EXPECT_EQ(after.stream_wait.calls - before.stream_wait.calls, 1u) << "s was not ordered after b's page-in";
  std::atomic<bool> ran{false};
  t.s.launch([&ran] { ran = true; });  // s itself has nothing queued before: only the wait holds it
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran) << "work queued on s after the pin ran before b's page-in";
  t.dev->release_all();
  t.s.synchronize();
  t.s2.synchronize();
  EXPECT_TRUE(ran);
  again = Pin();
  t.expect_intact();
}

// Page-ins that ended unnoticed behind an oldest batch that no page names any more (its page, a
// prefetch, was evicted before its use) stop keeping their pages pending within 8 slow-path pins: every
// 8th pin that finds only pages on the device reaps. Without that (only the oldest-batch rule), no pin
// names that batch, nothing reaps, and every pin of b took the slow path and a stream wait (checked).
TEST(PagerQueries, PagesBehindAnOrphanedOldestBatchStopBeingPendingWithinEightPins) {
  TwoOnTheHost t;
  t.dev->hold(Op::copy_in);
  common::ScopeGuard let_go([&] { t.dev->release_all(); });
  t.a.prefetch(t.s2);  // a: loading (held), the oldest batch; it takes c's frame
  Tensor e = t.pager.allocate(64 * KiB, {"e"});
  {
    Pin hold_d = t.d.pin(Access::read);
    Pin pin_e = e.pin(t.s, Access::write);  // evicts a before its use: no page names its batch now
  }
  { Pin first = t.b.pin(t.s, Access::read); }  // loads b: a later batch, held too
  ASSERT_EQ(t.dev->held(Op::copy_in), 2u);
  t.dev->release_all();
  t.s.synchronize();
  t.s2.synchronize();  // both batches have ended, and nothing has reaped since
  int pins = 0;
  for (bool waited = true; waited && pins < 16; ++pins) {
    const auto before = t.pager.stats().driver.stream_wait.calls;
    { Pin again = t.b.pin(t.s, Access::read); }
    waited = t.pager.stats().driver.stream_wait.calls != before;
  }
  EXPECT_LE(pins, 8) << "b's page stayed pending";
  t.s.synchronize();
  t.expect_intact();
}

// A victim whose page-in still runs (prefetched, never used since) is evicted without querying that
// page-in: its frame's next user is ordered after it all the same, so the page-in cannot land in the
// frame after the new tensor's kernel wrote it (checked: without that order e reads back a's bytes).
// The pin queries 2 events (the reap's oldest page-in and write-back), where querying a's page-in made
// 3 (checked).
TEST(PagerQueries, AVictimStillLoadingIsEvictedWithoutQueryingItsPageIn) {
  TwoOnTheHost t;
  ASSERT_EQ(t.a.tier(), Tier::host);
  t.dev->hold(Op::copy_in);
  common::ScopeGuard let_go([&] { t.dev->release_all(); });
  t.a.prefetch(t.s2);  // a: loading (held), clean, its host copy kept; no use of it on record
  Tensor e = t.pager.allocate(64 * KiB, {"e"});
  Pin hold_d = t.d.pin(Access::read);  // of the two frames, a's is the only one to take
  const auto before = t.pager.stats().driver;
  Pin pin_e = e.pin(t.s, Access::write);  // evicts a: dropped (its copy is current), after its page-in
  const auto after = t.pager.stats().driver;
  EXPECT_EQ(after.query.calls - before.query.calls, 2u) << "the eviction queried a's page-in";

  void* const p = pin_e.data();
  t.s.launch([p] { test::fill(p, 64 * KiB, 23); });
  t.dev->release_all();
  t.s.synchronize();
  t.s2.synchronize();
  pin_e = Pin();
  hold_d = Pin();
  EXPECT_EQ(test::mismatches(e, 23), 0u) << "a's page-in landed in e's frame after e was written";
  t.expect_intact();
}

// A pin orders its stream after the latest of its pages' page-ins on the page-in stream only: the
// earlier ones there complete before it (one stream runs in order). x's two pages load in two batches,
// both held; pinning all of x makes two stream waits (the page-in stream's, for the write-back of the
// frame's previous page, and s's), where waiting for each batch made three (checked).
TEST(PagerQueries, APinWaitsOnceForItsPageInsOnOneStream) {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
  Stream s = pager.create_stream();
  Tensor x = pager.allocate(128 * KiB, {"x"}), y = pager.allocate(128 * KiB, {"y"});
  for (Tensor* t : {&x, &y}) {
    auto pin = t->pin(Access::write);
    test::fill(pin.data(), t->size(), 13);
  }
  ASSERT_EQ(x.tier(), Tier::host);
  dev->hold(Op::copy_in);
  common::ScopeGuard let_go([&] { dev->release_all(); });
  { Pin first = x.pin_range(s, 0, 64 * KiB, Access::read); }  // loads x's first page: a batch, held
  const auto before = pager.stats().driver;
  Pin whole = x.pin(s, Access::read);  // loads the second page: a later batch, held too
  const auto after = pager.stats().driver;
  ASSERT_EQ(dev->held(Op::copy_in), 2u);
  EXPECT_EQ(after.stream_wait.calls - before.stream_wait.calls, 2u);
  std::atomic<std::size_t> bad{1};
  s.launch([&bad, p = whole.data(), n = x.size()] { bad = test::mismatches(p, n, 13); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  dev->release(Op::copy_in, 1);  // the first batch only: s still waits for the second
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(bad.load(), 1u) << "s ran before x's second page arrived";
  dev->release_all();
  s.synchronize();
  EXPECT_EQ(bad.load(), 0u) << "s ran before x's pages arrived";
  whole = Pin();
  pager.check_invariants();
  auto back = y.pin(Access::read);
  EXPECT_EQ(test::mismatches(back.data(), y.size(), 13), 0u);
}

// A stream the pager created remembers the latest page-in it was made to wait for, and a later pin on
// it of pages loaded before that makes no stream wait: its work follows them already (the page-in stream
// runs in order). Another stream still waits. Checked without the memory: the second pin on s made one.
TEST(PagerQueries, AStreamOrderedAfterALaterPageInDoesNotWaitForAnEarlierOne) {
  TwoOnTheHost t;
  t.dev->hold(Op::copy_in);
  common::ScopeGuard let_go([&] { t.dev->release_all(); });
  { Pin first = t.a.pin(t.s2, Access::read); }  // loads a: a batch, held
  { Pin first = t.b.pin(t.s2, Access::read); }  // loads b: a later batch, held too
  ASSERT_EQ(t.dev->held(Op::copy_in), 2u);
  auto waits = [&] { return t.pager.stats().driver.stream_wait.calls; };
  auto before = waits();
  { Pin pin_b = t.b.pin(t.s, Access::read); }  // s waits for b's page-in
  EXPECT_EQ(waits() - before, 1u);
  before = waits();
  std::atomic<bool> ran{false};
  {
    Pin pin_a = t.a.pin(t.s, Access::read);  // a's page-in is earlier: s follows it already
    EXPECT_EQ(waits() - before, 0u) << "s waited again for an earlier page-in";
    t.s.launch([&ran] { ran = true; });
  }
  Stream s3 = t.pager.create_stream();
  before = waits();
  { Pin pin_a = t.a.pin(s3, Access::read); }
  EXPECT_EQ(waits() - before, 1u) << "a stream that never waited was not ordered after a's page-in";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran) << "work on s ran before the page-ins it follows";
  t.dev->release_all();
  t.s.synchronize();
  t.s2.synchronize();
  s3.synchronize();
  EXPECT_TRUE(ran);
  t.expect_intact();
}

// A pin whose page waits for the oldest page-in batch reaps, so a page-in that ended while nothing
// reaped is retired there and the next pin of the page hits: no stream wait, no lock. Without that rule
// the page stayed pending, and every pin of it took the slow path and a stream wait, for as long as no
// eviction, free or prefetch reaped (checked: the third pin made a stream wait).
TEST(PagerQueries, APageInThatEndedUnnoticedIsRetiredByTheNextPinOfItsPages) {
  TwoOnTheHost t;
  ASSERT_EQ(t.a.tier(), Tier::host);
  { Pin first = t.a.pin(t.s, Access::read); }   // loads a, the only page-in batch
  t.s.synchronize();                            // it has ended, and nothing has reaped since
  { Pin second = t.a.pin(t.s, Access::read); }  // a's batch is the oldest: this pin reaps and retires it
  const auto before = t.pager.stats();
  Pin third = t.a.pin(t.s, Access::read);
  const auto after = t.pager.stats();
  EXPECT_EQ(after.driver.stream_wait.calls - before.driver.stream_wait.calls, 0u) << "a's page stayed pending";
  EXPECT_EQ(after.driver.query.calls - before.driver.query.calls, 0u);
  EXPECT_EQ(after.hits - before.hits, 1u);
  third = Pin();
  t.s.synchronize();
  t.expect_intact();
}
