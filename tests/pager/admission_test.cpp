// Admission: allocations below min_bytes are never evicted, and those that fit a page share pages of
// the resident small-object arena.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace tvmm;

namespace {

Config admission_config(std::size_t device_pages, std::size_t host_pages, std::size_t min_bytes) {
  Config c = test::small_config(device_pages, host_pages);  // 64 KiB pages
  c.min_bytes = min_bytes;
  return c;
}

std::uintptr_t page_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p) / (64 * KiB); }

}  // namespace

TEST(Admission, SmallAllocationsShareAnArenaPage) {
  Pager p(admission_config(4, 8, 16 * KiB));
  std::vector<Tensor> small;
  std::set<std::uintptr_t> pages;
  for (int i = 0; i < 40; ++i) {  // 40 x 1000 B: 4 units of 256 B each, 160 units of the 256 per page
    small.push_back(p.allocate(1000, {"s" + std::to_string(i)}));
    pages.insert(page_of(small.back().data()));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.back().data()) % 256, 0u);  // cudaMalloc's alignment
  }
  EXPECT_EQ(pages.size(), 1u);
  EXPECT_EQ(p.stats().device_used_bytes, 64 * KiB);  // one frame for all of them
  for (std::size_t i = 0; i < small.size(); ++i) {
    auto pin = small[i].pin(Access::write);
    test::fill(pin.data(), small[i].size(), i + 1);
  }
  for (std::size_t i = 0; i < small.size(); ++i) {  // no allocation overlaps another
    auto pin = small[i].pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), small[i].size(), i + 1), 0u) << i;
  }
  p.check_invariants();
}

TEST(Admission, SmallAllocationsAreNeverEvicted) {
  Pager p(admission_config(3, 16, 16 * KiB));
  auto s = p.create_stream();
  auto small = p.allocate(4000);
  {
    auto pin = small.pin(s, Access::write);
    s.launch([d = pin.data()] { test::fill(d, 4000, 77); });
  }
  std::vector<Tensor> big;
  for (int i = 0; i < 8; ++i) big.push_back(p.allocate(64 * KiB));
  for (int round = 0; round < 3; ++round) {
    for (auto& t : big) {
      auto pin = t.pin(s, Access::write);
      ASSERT_EQ(small.tier(), Tier::device);
    }
  }
  EXPECT_GT(p.stats().evictions, 0u);
  auto pin = small.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), small.size(), 77), 0u);
  p.check_invariants();
}

TEST(Admission, BelowThresholdButLargerThanAPageIsPinnedForLife) {
  Config c = admission_config(4, 16, 120 * KiB);
  c.wait_timeout = std::chrono::milliseconds(100);
  Pager p(c);
  auto mid = p.allocate(100 * KiB);  // 2 pages, under the threshold: pinned for life
  {
    auto pin = mid.pin(Access::write);
    test::fill(pin.data(), mid.size(), 9);
  }
  auto two = p.allocate(128 * KiB);  // 2 pages, at or above the threshold: evictable
  auto three = p.allocate(128 * KiB);
  auto big = p.allocate(256 * KiB);  // 4 pages: can never be resident beside mid's 2
  EXPECT_THROW((void)big.pin(Access::write), out_of_memory);
  for (int i = 0; i < 4; ++i) {
    { auto pin = two.pin(Access::write); }
    { auto pin = three.pin(Access::write); }  // evicts two: only 2 frames are not mid's
  }
  EXPECT_GE(p.stats().evictions, 6u);
  EXPECT_EQ(mid.tier(0), Tier::device);
  EXPECT_EQ(mid.tier(64 * KiB), Tier::device);
  {
    auto pin = mid.pin(Access::read);
    EXPECT_EQ(test::mismatches(pin.data(), mid.size(), 9), 0u);
  }
  mid.reset();                        // the pin for life goes with the owner
  auto pin = big.pin(Access::write);  // now all 4 frames can be had
  p.check_invariants();
}

// The pager's own pin of a tensor kept for life is not the user's: discard used to refuse such a tensor
// forever ("page 0 is pinned; release every pin of the tensor first"), with no pin of the user's alive.
TEST(Admission, ATensorPinnedForLifeCanBeDiscardedOnceTheUsersPinsAreGone) {
  Pager p(admission_config(4, 16, 120 * KiB));
  auto mid = p.allocate(100 * KiB);  // 2 pages, under the threshold: pinned for life
  {
    auto pin = mid.pin(Access::write);
    EXPECT_THROW(mid.discard(), invalid_argument);  // the user's pin still counts
  }
  EXPECT_NO_THROW(mid.discard());
  EXPECT_EQ(mid.tier(0), Tier::device);  // it stays where it is kept
  {
    auto pin = mid.pin(Access::write);  // and is pinned as before
    test::fill(pin.data(), mid.size(), 3);
    EXPECT_EQ(test::mismatches(pin.data(), mid.size(), 3), 0u);
  }
  p.check_invariants();
}

TEST(Admission, FreedSmallAllocationsAreReusedAndEmptyPagesReleased) {
  Pager p(admission_config(2, 8, 16 * KiB));
  for (int round = 0; round < 50; ++round) {
    std::vector<Tensor> ts;
    for (int i = 0; i < 30; ++i) ts.push_back(p.allocate(2000));
    EXPECT_LE(p.stats().device_used_bytes, 64 * KiB);
  }
  EXPECT_EQ(p.stats().device_used_bytes, 0u);  // the arena page went with its last allocation
  EXPECT_EQ(p.stats().live_bytes, 0u);
  p.check_invariants();
}

TEST(Admission, SmallRawFreeAndDoubleFree) {
  Pager p(admission_config(2, 8, 16 * KiB));
  void* a = p.allocate(100).release();
  void* b = p.allocate(100).release();
  EXPECT_NE(a, b);
  p.free(a);
  EXPECT_THROW(p.free(a), invalid_argument);
  p.free(b);
  p.check_invariants();
}

TEST(Admission, HostPinOfASmallTensorWaitsForStreamWork) {
  Pager p(admission_config(2, 8, 16 * KiB));
  auto s = p.create_stream();
  auto t = p.allocate(512);
  {
    auto pin = t.pin(s, Access::write);
    s.launch([d = pin.data()] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      test::fill(d, 512, 3);
    });
  }
  auto pin = t.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 3), 0u);
}

TEST(Admission, ZeroThresholdMakesEverythingEvictable) {
  Pager p(admission_config(1, 8, 0));
  auto a = p.allocate(100);
  auto b = p.allocate(100);
  EXPECT_NE(page_of(a.data()), page_of(b.data()));  // no arena: a page each
  { auto pin = a.pin(Access::write); }
  { auto pin = b.pin(Access::write); }
  EXPECT_EQ(a.tier(), Tier::host);
}

// A thread that opens a new arena page does so without the lock; if another thread frees room in an
// older page meanwhile, the allocation goes there and the new page must not stay behind, empty and
// pinned for life (it did: device_used_bytes stayed at one page and a pin of the whole budget failed).
TEST(Admission, AnArenaPageOpenedWhileAnotherFreesRoomIsNotLeaked) {
  Config c = admission_config(4, 8, 48 * KiB);
  c.sim.copy_latency = std::chrono::milliseconds(200);  // the new page's frame waits for a slow write-back
  c.wait_timeout = std::chrono::milliseconds(2'000);
  Pager p(c);
  auto first = p.allocate(32 * KiB);  // two fill one arena page
  auto second = p.allocate(32 * KiB);
  auto big = p.allocate(3 * 64 * KiB);  // and a dirty tensor the rest of the device
  { auto pin = big.pin(Access::write); }
  ASSERT_EQ(p.stats().device_used_bytes, 4 * 64 * KiB);
  Tensor third;
  std::thread opener([&] { third = p.allocate(32 * KiB); });  // needs a new page: evicts, waits 200 ms
  while (p.stats().evictions == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  first.reset();  // room in the old page while the opener waits, unlocked, for its frame
  opener.join();
  p.check_invariants();                                      // no arena page without an allocation
  EXPECT_EQ(page_of(third.data()), page_of(second.data()));  // it took the room freed meanwhile
  second.reset();
  third.reset();
  EXPECT_EQ(p.stats().live_bytes, 3 * 64 * KiB);
  big.reset();
  EXPECT_EQ(p.stats().device_used_bytes, 0u);  // no arena page is left pinned
  auto whole = p.allocate(4 * 64 * KiB);
  EXPECT_NO_THROW({ auto pin = whole.pin(Access::write); });  // the whole budget can be pinned again
  p.check_invariants();
}
