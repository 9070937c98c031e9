// Host copies: a page paged in from the host tier keeps its slot while its contents are unchanged and
// the tier has room, so evicting it again moves nothing. A write makes the copy stale; a full tier
// takes copies back. No byte is ever lost.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/device/faulty/faulty_device.hpp"
#include "faulty_pager.hpp"
#include "test_support.hpp"

using namespace tvmm;
using test::mismatches;
using test::write;
using Op = device::FaultyDevice::Op;

namespace {

constexpr std::size_t kPage = 64 * KiB;

// Lets every held copy run `after` from now, or when the test ends, also by a failed assertion (the
// pager's destructor synchronizes its streams): a pin that waits for a held copy returns late instead
// of never. A safety net only: `after` is far longer than the tests' steps, even under sanitizers.
class ReleaseHeld {
 public:
  ReleaseHeld(device::FaultyDevice* dev, std::chrono::milliseconds after)
      : dev_(dev), thread_([this, after] {
          std::unique_lock lk(mu_);
          cv_.wait_for(lk, after, [this] { return done_; });
          dev_->release_all();
        }) {}
  ~ReleaseHeld() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    dev_->release_all();
  }
  ReleaseHeld(const ReleaseHeld&) = delete;
  ReleaseHeld& operator=(const ReleaseHeld&) = delete;

 private:
  device::FaultyDevice* dev_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

TEST(HostCopy, APageReadSinceItsPageInIsEvictedWithoutAWriteBack) {
  Pager p(test::small_config(1, 8));
  auto a = p.allocate(kPage, {"a"});
  auto b = p.allocate(kPage, {"b"});
  write(a, 1);
  write(b, 2);  // a is written back to the host tier
  ASSERT_EQ(a.tier(), Tier::host);
  EXPECT_EQ(mismatches(a, 1), 0u);  // a is paged in from its slot, which it keeps; b is written back
  const auto before = p.stats();
  EXPECT_EQ(mismatches(b, 2), 0u);  // a is evicted again: its host copy is current
  const auto after = p.stats();
  EXPECT_EQ(after.device_to_host.pages, before.device_to_host.pages) << "a clean page was written back";
  EXPECT_EQ(after.clean_evictions - before.clean_evictions, 1u);
  EXPECT_EQ(a.tier(), Tier::host);
  EXPECT_EQ(mismatches(a, 1), 0u);
  p.check_invariants();
}

TEST(HostCopy, AWriteMakesTheCopyStaleAndLetsItsSlotGo) {
  Pager p(test::small_config(1, 8));
  auto a = p.allocate(kPage, {"a"});
  auto b = p.allocate(kPage, {"b"});
  write(a, 1);
  write(b, 2);
  EXPECT_EQ(mismatches(a, 1), 0u);    // a resident, keeping its copy; b on the host
  ASSERT_EQ(a.tier(), Tier::device);  // reaps: retires a's page-in, and the copy is kept
  p.check_invariants();
  EXPECT_EQ(p.stats().host_used_bytes, 2 * kPage) << "a's copy and b";
  {
    auto pin = a.pin(Access::read_write);
    EXPECT_EQ(p.stats().host_used_bytes, kPage) << "a's copy is stale once it may be written";
    test::fill(pin.data(), kPage, 3);
  }
  const auto before = p.stats();
  EXPECT_EQ(mismatches(b, 2), 0u);  // a is evicted: written back, since its copy was stale
  EXPECT_EQ(p.stats().device_to_host.pages - before.device_to_host.pages, 1u);
  EXPECT_EQ(mismatches(a, 3), 0u) << "the write was lost";
  p.check_invariants();
}

TEST(HostCopy, AWriteThroughTheHitPathMakesTheCopyStaleToo) {
  Pager p(test::small_config(2, 8));
  auto a = p.allocate(kPage, {"a"});
  auto b = p.allocate(kPage, {"b"});
  auto c = p.allocate(kPage, {"c"});
  write(a, 1);
  write(b, 2);
  write(c, 3);  // a goes to the host tier
  EXPECT_EQ(mismatches(a, 1), 0u);
  p.check_invariants();
  { auto pin = a.pin(Access::read); }  // resident and complete: the lock-free hit path
  write(a, 4);                         // a write pin must not keep a stale copy
  const auto before = p.stats();
  EXPECT_EQ(mismatches(b, 2), 0u);
  EXPECT_EQ(mismatches(c, 3), 0u);  // evicts a
  ASSERT_EQ(a.tier(), Tier::host);
  EXPECT_GT(p.stats().device_to_host.pages, before.device_to_host.pages);
  EXPECT_EQ(mismatches(a, 4), 0u) << "the write was lost";
  p.check_invariants();
}

TEST(HostCopy, AFullHostTierTakesACopyBackForAWriteBack) {
  // 2 device frames + 10 host slots, less the page kept for swapping: 11 one-page tensors fill it.
  Pager p(test::small_config(2, 10));
  std::vector<Tensor> ts;
  for (int i = 0; i < 11; ++i) ts.push_back(p.allocate(kPage));
  for (int i = 0; i < 4; ++i) write(ts[i], 100 + i);  // 0 and 1 go to the host tier
  {
    auto hold = ts[0].pin(Access::read);  // paged in, keeping its copy, and held resident while
    p.check_invariants();                 // every other tensor is written through the other frame
    for (int i = 4; i < 11; ++i) write(ts[i], 100 + i);
  }
  EXPECT_EQ(mismatches(ts[0], 100), 0u);  // 0 is now more recent than 10, the next victim
  EXPECT_EQ(p.stats().host_used_bytes, 10 * kPage) << "0's copy and tensors 1-9: the tier is full";
  EXPECT_EQ(mismatches(ts[1], 101), 0u);  // 10's write-back needs a slot: 0's copy gives it up
  EXPECT_EQ(ts[0].tier(), Tier::device);
  EXPECT_EQ(ts[10].tier(), Tier::host);
  p.check_invariants();
  const auto before = p.stats();
  EXPECT_EQ(mismatches(ts[2], 102), 0u);  // evicts 0, which has no copy any more: a write-back
  EXPECT_EQ(p.stats().device_to_host.pages - before.device_to_host.pages, 1u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(mismatches(ts[i], 100 + i), 0u) << "tensor " << i;
  p.check_invariants();
}

// Two device frames and two host slots; a on the host tier, b and c resident and dirty.
// hold_page_in_of_a() holds the page-ins, pins a on `s` (evicting b into the last free slot) and
// returns once b's write-back has run: the host tier is full, and a's page-in still reads its slot.
class FullHostTier : public ::testing::Test {
 protected:
  FullHostTier() {
    write(a, 1);
    write(b, 2);
    write(c, 3);
  }
  void hold_page_in_of_a() {
    ASSERT_EQ(a.tier(), Tier::host);
    dev->hold(Op::copy_in);
    { auto pin = a.pin(s, Access::read); }
    ASSERT_EQ(dev->held(Op::copy_in), 1u);
    ASSERT_TRUE(test::eventually([&] { return b.tier() == Tier::host; }));
    EXPECT_EQ(p.stats().host_used_bytes, 2 * kPage);
  }
  void expect_every_byte() {
    EXPECT_EQ(mismatches(a, 1), 0u) << "c's write-back overwrote the slot before a's page-in read it";
    EXPECT_EQ(mismatches(b, 2), 0u);
    EXPECT_EQ(mismatches(c, 3), 0u);
    EXPECT_EQ(mismatches(a, 1), 0u);  // evicted and read back again
    p.check_invariants();
  }
  device::FaultyDevice* dev = nullptr;
  Pager p = test::make_faulty_pager(test::small_config(2, 2), dev);
  Stream s = p.create_stream();
  Tensor a = p.allocate(kPage, {"a"}), b = p.allocate(kPage, {"b"}), c = p.allocate(kPage, {"c"});
};

// With the host tier full, the slot a running page-in reads from is lent to the write-back of the
// policy's victim, ordered after that page-in; the page-in's page only loses its host copy. Without
// the loan, the dirty victim c cannot be claimed and b's pin waits for a's page-in (let go here by
// ReleaseHeld after 10 s) before it can take a's slot.
TEST_F(FullHostTier, LendsARunningPageInsSlotToAWriteBack) {
  ReleaseHeld unblock(dev, std::chrono::seconds(10));
  hold_page_in_of_a();
  // b's pin needs a frame: c, the least recent, is dirty and no slot is free but a's, whose page-in
  // is still held. c's write-back takes it, after a's page-in has read it.
  { auto pin = b.pin(s, Access::read); }
  EXPECT_EQ(dev->held(Op::copy_in), 2u) << "b's pin waited for a's page-in";  // a's and b's page-ins
  dev->release_all();
  s.synchronize();
  EXPECT_EQ(c.tier(), Tier::host) << "the policy's victim was evicted";
  EXPECT_EQ(a.tier(), Tier::device) << "the page being loaded stayed";
  p.check_invariants();
  expect_every_byte();  // a has no host copy now: evicting it writes it back
}

// If the eviction that borrowed a slot fails before its write-back is queued, the slot goes back to
// the page-in it came from: the victim's next write-back into it would not know to wait for that
// page-in. Without the give-back, c keeps a's slot and its next eviction overwrites it at once, while
// a's page-in (held) has not read it yet.
TEST_F(FullHostTier, AFailedEvictionGivesABorrowedSlotBack) {
  ReleaseHeld unblock(dev, std::chrono::seconds(10));
  hold_page_in_of_a();
  // c's write-back into a's slot: its copy stream's wait for a's page-in fails.
  dev->fail_once(Op::stream_wait_event, device::Errc::invalid_value);
  EXPECT_THROW({ auto pin = b.pin(s, Access::read); }, device_error);
  EXPECT_EQ(c.tier(), Tier::device) << "the victim stays resident";
  { auto pin = b.pin(s, Access::read); }  // evicts c again, borrowing a's slot again, after its page-in
  EXPECT_EQ(dev->held(Op::copy_in), 2u) << "b's pin waited for a's page-in";
  dev->release_all();
  s.synchronize();
  expect_every_byte();
}
