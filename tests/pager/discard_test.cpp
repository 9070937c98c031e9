// Tensor::discard: dead contents leave every tier without a copy; live data is never lost.
#include <gtest/gtest.h>

#include <string>

#include "test_support.hpp"

using namespace tvmm;

namespace {

constexpr std::size_t kPage = 64 * KiB;

}  // namespace

TEST(Discard, ResidentPagesAreDroppedWithoutAWriteBackAndComeBackFresh) {
  Pager p(test::small_config(2, 8));
  auto a = p.allocate(2 * kPage, {"a"});
  auto b = p.allocate(2 * kPage, {"b"});
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), a.size(), 1);
  }
  a.discard();
  EXPECT_EQ(a.tier(), Tier::device) << "resident pages stay mapped until an eviction needs their frames";
  const auto before = p.stats();
  { auto pin = b.pin(Access::write); }  // needs both of a's frames
  const auto after = p.stats();
  EXPECT_EQ(after.device_to_host.pages, before.device_to_host.pages) << "discarded pages were written back";
  EXPECT_EQ(after.clean_evictions - before.clean_evictions, 2u);
  EXPECT_EQ(a.tier(), Tier::none);
  EXPECT_EQ(after.host_used_bytes, 0u);
  p.check_invariants();
}

TEST(Discard, HostPagesLetTheirSlotsGoAtOnce) {
  Pager p(test::small_config(1, 4));
  auto a = p.allocate(kPage);
  auto b = p.allocate(kPage);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), kPage, 2);
  }
  { auto pin = b.pin(Access::write); }  // a goes to the host tier
  ASSERT_EQ(a.tier(), Tier::host);
  ASSERT_EQ(p.stats().host_used_bytes, kPage);
  a.discard();
  EXPECT_EQ(a.tier(), Tier::none);
  EXPECT_EQ(p.stats().host_used_bytes, 0u);
  // It is usable again: written afresh, it keeps its new contents across evictions.
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), kPage, 3);
  }
  { auto pin = b.pin(Access::read); }
  auto pin = a.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), kPage, 3), 0u);
  p.check_invariants();
}

TEST(Discard, APinnedTensorIsRefusedAndKeepsItsData) {
  Pager p(test::small_config(1, 4));
  auto a = p.allocate(kPage, {"weights"});
  auto b = p.allocate(kPage);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), kPage, 4);
    const auto msg = test::message_of([&] { a.discard(); });
    EXPECT_NE(msg.find("cannot discard"), std::string::npos) << msg;
    EXPECT_NE(msg.find("weights"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pinned"), std::string::npos) << msg;
    EXPECT_THROW(a.discard(), invalid_argument);
  }
  { auto pin = b.pin(Access::write); }  // a is written back: it was not marked dead
  ASSERT_EQ(a.tier(), Tier::host);
  auto pin = a.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), kPage, 4), 0u);
}

TEST(Discard, AWritePinBeforeTheEvictionBringsTheContentsBackToLife) {
  Pager p(test::small_config(1, 4));
  auto a = p.allocate(kPage);
  auto b = p.allocate(kPage);
  { auto pin = a.pin(Access::write); }
  a.discard();
  const auto before = p.stats();
  {
    auto pin = a.pin(Access::write);  // still resident: a hit, no page-in
    test::fill(pin.data(), kPage, 5);
  }
  EXPECT_EQ(p.stats().misses, before.misses);
  { auto pin = b.pin(Access::write); }  // a must be written back now
  EXPECT_EQ(p.stats().device_to_host.pages, before.device_to_host.pages + 1);
  auto pin = a.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), kPage, 5), 0u);
  p.check_invariants();
}

TEST(Discard, DiscardedPagesAreTheFirstVictimsWhateverThePolicy) {
  Pager p(test::small_config(2, 4));  // LRU
  auto a = p.allocate(kPage);
  auto b = p.allocate(kPage);
  auto c = p.allocate(kPage);
  {
    auto pin = a.pin(Access::write);
    test::fill(pin.data(), kPage, 6);
  }
  { auto pin = b.pin(Access::write); }
  b.discard();                          // the most recently used: LRU alone would evict a
  { auto pin = c.pin(Access::write); }  // one frame needed
  EXPECT_EQ(a.tier(), Tier::device);
  EXPECT_EQ(b.tier(), Tier::none);
  EXPECT_EQ(p.stats().device_to_host.pages, 0u);
  p.check_invariants();
}

TEST(Discard, AFreshTensorAndARepeatedDiscardAreNoOps) {
  Pager p(test::small_config(2, 4));
  auto a = p.allocate(kPage);
  a.discard();
  EXPECT_EQ(a.tier(), Tier::none);
  { auto pin = a.pin(Access::write); }
  a.discard();
  a.discard();
  Tensor empty;
  EXPECT_THROW(empty.discard(), invalid_argument);
  p.check_invariants();
}
