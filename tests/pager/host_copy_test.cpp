// Host copies: a page paged in from the host tier keeps its slot while its contents are unchanged and
// the tier has room, so evicting it again moves nothing. A write makes the copy stale; a full tier
// takes copies back. No byte is ever lost.
#include <gtest/gtest.h>

#include <vector>

#include "test_support.hpp"

using namespace tvmm;
using test::mismatches;
using test::write;

namespace {

constexpr std::size_t kPage = 64 * KiB;

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
  EXPECT_EQ(mismatches(a, 1), 0u);  // a resident, keeping its copy; b on the host
  p.check_invariants();             // retires a's page-in: the copy is kept
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
