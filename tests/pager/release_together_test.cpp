// tvmm::release_together: the stream pins of one kernel's operands share one release point, one per
// pager and stream (its event recorded when something must follow it: vmm/core/release_points.hpp),
// and every page of every pin released that way is evicted only after the stream's work queued before
// the release.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "backends/device/faulty/faulty_device.hpp"
#include "faulty_pager.hpp"
#include "test_support.hpp"
#include "vmm/core/release_points.hpp"

using namespace tvmm;
using device::Errc;
using Op = device::FaultyDevice::Op;
using test::make_faulty_pager;

namespace {

// Pins `a` and `b` on `s` for writing and queues a kernel that writes their patterns late (after the
// caller has released the pins and other pins have evicted them, unless eviction waits for it).
std::vector<Pin> write_late(Stream& s, Tensor& a, Tensor& b) {
  std::vector<Pin> pins;
  pins.push_back(a.pin(s, Access::write));
  pins.push_back(b.pin(s, Access::write));
  s.launch([pa = pins[0].data(), pb = pins[1].data(), na = a.size(), nb = b.size()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    test::fill(pa, na, 5);
    test::fill(pb, nb, 6);
  });
  return pins;
}

// A pager on a faulty device with two frames, and two tensors.
struct TwoFrames {
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(2, 16), dev);
  Tensor a = p.allocate(64 * KiB, {"a"});
  Tensor b = p.allocate(64 * KiB, {"b"});
};

// a and b hold what write_late's kernel wrote.
void expect_written_late(Tensor& a, Tensor& b) {
  for (auto [t, seed] : {std::pair{&a, 5}, std::pair{&b, 6}}) {
    auto pin = t->pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), t->size(), seed), 0u) << t->name();
  }
}

// Evicts everything on the two frames of the device: two fresh tensors pinned at once.
void evict_both(Pager& p) {
  auto c = p.allocate(64 * KiB, {"c"});
  auto d = p.allocate(64 * KiB, {"d"});
  auto pc = c.pin(Access::write);
  auto pd = d.pin(Access::write);
}

}  // namespace

TEST(ReleaseTogether, TakesOneReleasePointPerPagerAndStream) {
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(8, 16), dev);
  std::vector<Tensor> ts;
  for (int i = 0; i < 5; ++i) ts.push_back(p.allocate(64 * KiB));
  auto s1 = p.create_stream();
  auto s2 = p.create_stream();
  std::array<Pin, 7> pins;
  pins[0] = ts[0].pin(s1, Access::write);
  pins[1] = ts[1].pin(s2, Access::write);
  pins[2] = ts[2].pin(s1, Access::read);
  // pins[3] stays empty
  pins[4] = ts[3].pin(Access::write);  // host-synchronous
  pins[5] = ts[4].pin(s1, Access::read);
  pins[6] = ts[0].pin(s2, Access::read);  // a second pin of one tensor, on the other stream
  const auto before = dev->calls(Op::record_event);
  release_together(pins);
  // A release point's event is recorded when something must follow it (release_points.hpp).
  EXPECT_EQ(dev->calls(Op::record_event) - before, 0u) << "nothing waits for these release points yet";
  for (const auto& pin : pins) EXPECT_FALSE(pin);
  p.check_invariants();
  release_together(pins);  // all empty now: nothing happens
  // Host pins must follow the stream work: one event per stream covers every tensor released there.
  for (int i : {0, 1, 2, 4}) (void)ts[static_cast<std::size_t>(i)].pin(Access::read);
  EXPECT_EQ(dev->calls(Op::record_event) - before, 2u) << "one event for s1's three pins, one for s2's two";

  // Released one by one, the same pins take a point each; an event is recorded every
  // ReleasePoints::kRecordEvery points of a stream whether or not anything waits.
  std::vector<Pin> each;
  const auto one_by_one = dev->calls(Op::record_event);
  for (int i = 0; i < 8; ++i) {
    each.push_back(ts[static_cast<std::size_t>(i % 3)].pin(s1, Access::read));
    each.clear();
  }
  EXPECT_EQ(dev->calls(Op::record_event) - one_by_one, 8 / vmm::ReleasePoints::kRecordEvery);
  p.check_invariants();
}

// While the pager evicts, the pages just released are likely victims soon: a point taken after an
// eviction is recorded at release, not later behind the kernels queued since. Two frames, three tensors
// pinned in turn on one stream: the third pin evicts, so its release records; the first two do not.
TEST(ReleaseTogether, APointTakenWhileThePagerEvictsIsRecordedAtOnce) {
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(2, 16), dev);
  std::vector<Tensor> ts;
  for (int i = 0; i < 3; ++i) ts.push_back(p.allocate(64 * KiB));
  auto s = p.create_stream();
  std::vector<std::uint64_t> recorded_at_release;
  for (auto& t : ts) {
    auto pin = t.pin(s, Access::write);
    const auto before = dev->calls(Op::record_event);
    pin.release();
    recorded_at_release.push_back(dev->calls(Op::record_event) - before);
  }
  EXPECT_EQ(recorded_at_release, (std::vector<std::uint64_t>{0, 0, 1}));
  EXPECT_EQ(p.stats().evictions, 1u);
  p.check_invariants();
}

// A stream the pager synchronized or destroyed has its release points complete: nothing records an
// event for them (on a destroyed stream that would be an error), and evicting or freeing their tensors
// waits for nothing.
TEST(ReleaseTogether, PointsOfASynchronizedOrDestroyedStreamNeedNoEvent) {
  TwoFrames f;
  auto& [dev, p, a, b] = f;
  {
    auto s = p.create_stream();
    auto pins = write_late(s, a, b);
    release_together(pins);
    s.synchronize();
    const auto before = dev->calls(Op::record_event);
    (void)a.pin(Access::read);  // a host pin: the stream's work is known complete
    EXPECT_EQ(dev->calls(Op::record_event), before);
    pins = write_late(s, a, b);
    release_together(pins);
  }  // destroyed with a release point taken since
  const auto before = dev->calls(Op::record_event);
  evict_both(p);  // a and b are written back without waiting for (or recording on) the stream
  EXPECT_EQ(dev->calls(Op::record_event) - before, 2u) << "the two write-backs' own events, no release point";
  EXPECT_EQ(a.tier(), Tier::host);
  EXPECT_EQ(b.tier(), Tier::host);
  expect_written_late(a, b);
  p.check_invariants();
}

// Once its stream is destroyed, a release point's line lives on only in the uses that name it: the last
// one resolved (here by an eviction) drops it, and must do so after letting go of the line's lock.
// Until 2026-11-30 resolve() freed the line, mutex included, while holding that lock
// (ThreadSanitizer: heap-use-after-free, unlock of a destroyed mutex).
TEST(ReleaseTogether, TheLastPointOfADestroyedStreamFreesItsLineOnlyAfterUnlockingIt) {
  TwoFrames f;
  auto& [dev, p, a, b] = f;
  {
    auto s = p.create_stream();
    auto pin = a.pin(s, Access::write);
    s.launch([pa = pin.data(), n = a.size()] { test::fill(pa, n, 5); });
  }  // the pin released on the stream (one point, no event yet), then the stream synchronized and destroyed
  evict_both(p);  // resolves a's point: the line's last reference
  EXPECT_EQ(a.tier(), Tier::host);
  auto pin = a.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), a.size(), 5), 0u);
  p.check_invariants();
}

TEST(ReleaseTogether, EveryPinWaitsForTheSharedReleasePoint) {
  // a is pinned first, so it is evicted first, and b's write-back queues behind a's on the one
  // device-to-host stream: a's must wait for the kernel by its own release point. Both orders of the
  // pins in the released span, so that neither the first nor the last pin alone can carry it.
  for (const bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "released as {b, a}" : "released as {a, b}");
    Pager p(test::small_config(2, 16));
    auto a = p.allocate(64 * KiB, {"a"});
    auto b = p.allocate(64 * KiB, {"b"});
    auto s = p.create_stream();
    auto pins = write_late(s, a, b);
    if (reversed) std::swap(pins[0], pins[1]);
    release_together(pins);
    evict_both(p);  // must copy a and b out only after the kernel has written them
    ASSERT_EQ(a.tier(), Tier::host);
    ASSERT_EQ(b.tier(), Tier::host);
    expect_written_late(a, b);
    p.check_invariants();
  }
}

TEST(ReleaseTogether, MorePinsThanOneGroupAndPinsOfAnotherPager) {
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(24, 32), dev);
  Pager other(test::small_config(2, 4));
  auto s = p.create_stream();
  auto os = other.create_stream();
  std::vector<Tensor> ts;
  for (int i = 0; i < 20; ++i) ts.push_back(p.allocate(64 * KiB));
  auto o = other.allocate(64 * KiB);
  std::vector<Pin> pins;
  for (auto& t : ts) pins.push_back(t.pin(s, Access::write));
  pins.insert(pins.begin() + 7, o.pin(os, Access::write));
  const auto before = dev->calls(Op::record_event);
  release_together(pins);
  // The 20 pins go to the pager in groups of up to 16: two release points, their events recorded later.
  EXPECT_EQ(dev->calls(Op::record_event) - before, 0u);
  for (const auto& pin : pins) EXPECT_FALSE(pin);
  p.check_invariants();
  other.check_invariants();
  // Every page is unpinned: 24 fresh pages fit beside them only by evicting all 20.
  std::vector<Tensor> fresh;
  std::vector<Pin> held;
  for (int i = 0; i < 24; ++i) {
    fresh.push_back(p.allocate(64 * KiB));
    held.push_back(fresh.back().pin(Access::write));
  }
  p.check_invariants();
}

TEST(ReleaseTogether, AFailedRecordSynchronizesTheStreamForAll) {
  TwoFrames f;
  auto& [dev, p, a, b] = f;
  auto s = p.create_stream();
  auto pins = write_late(s, a, b);
  dev->fail_once(Op::record_event, Errc::invalid_value);
  release_together(pins);
  for (const auto& pin : pins) EXPECT_FALSE(pin);
  // The eviction must follow the release point: its record fails, so it waits for the kernel instead.
  evict_both(p);
  EXPECT_EQ(dev->injected(), 1u);
  expect_written_late(a, b);
  p.check_invariants();
}
