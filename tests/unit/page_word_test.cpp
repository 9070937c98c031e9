#include <gtest/gtest.h>

#include "vmm/core/page_table.hpp"

using namespace tvmm::vmm;

TEST(PageWord, StateChangeKeepsPinsAndAdvancesVersion) {
  std::uint64_t w = 0;
  w = word::with_state(w, PageState::device);
  w += 3 * word::kPinOne;
  const auto v = word::version(w);
  const auto w2 = word::with_state(w, PageState::transit, true);
  EXPECT_EQ(word::state(w2), PageState::transit);
  EXPECT_TRUE(word::pending(w2));
  EXPECT_EQ(word::pins(w2), 3u);
  EXPECT_EQ(word::version(w2), v + 1);
  const auto w3 = word::with_state(w2, PageState::host);
  EXPECT_FALSE(word::pending(w3));
  EXPECT_EQ(word::pins(w3), 3u);
}

TEST(PageWord, StateChangeKeepsTheDirtyAndDiscardedMarks) {
  const std::uint64_t w = word::with_state(0, PageState::device) | word::kDirty | word::kDiscarded;
  const auto w2 = word::with_state(w, PageState::transit);
  EXPECT_TRUE(word::dirty(w2));
  EXPECT_TRUE(word::discarded(w2));
  EXPECT_FALSE(word::discarded(word::with_state(0, PageState::device)));
}

TEST(PageWord, SetStateOnEntry) {
  PageEntry e;
  e.word.store(word::kPinOne * 2);
  e.set_state(PageState::device, true);
  EXPECT_EQ(e.state(), PageState::device);
  EXPECT_EQ(word::pins(e.word.load()), 2u);
  EXPECT_TRUE(word::pending(e.word.load()));
}

TEST(PageWord, EntryFitsBudget) { EXPECT_LE(sizeof(PageEntry), 64u); }

namespace {
PageEntry& resident(PageEntry& e, std::uint64_t flags = 0) {
  e.word.store(word::with_state(0, PageState::device) | flags);
  return e;
}
}  // namespace

TEST(PageWord, HitPathPinCountsTheFirstPinOnceAndMarksAWriter) {
  PageEntry e;
  resident(e, word::kDiscarded);
  int count = 0;
  auto counter = [&](int step) { count += step; };
  ASSERT_TRUE(e.try_pin_resident(0, counter));
  EXPECT_EQ(count, 1);                          // the first pin is counted
  EXPECT_TRUE(word::discarded(e.word.load()));  // a reader leaves discarded contents dead
  ASSERT_TRUE(e.try_pin_resident(word::kDirty, counter));
  EXPECT_EQ(count, 1);  // a second pin is not
  EXPECT_EQ(word::pins(e.word.load()), 2u);
  EXPECT_TRUE(word::dirty(e.word.load()));
  EXPECT_FALSE(word::discarded(e.word.load()));  // a writer brings them back to life
}

TEST(PageWord, HitPathPinDeclinesWhatOnlyTheSlowPathMayPin) {
  const std::pair<const char*, std::uint64_t> refused[] = {
      {"pending", word::with_state(0, PageState::device, true)},
      {"host", word::with_state(0, PageState::host)},
      {"transit", word::with_state(0, PageState::transit)},
      {"frozen", word::with_state(0, PageState::device) | word::kFrozen},
      {"at the pin limit", word::with_state(0, PageState::device) | word::kPinMask},
  };
  for (const auto& [what, w] : refused) {
    PageEntry e;
    e.word.store(w);
    int count = 0;
    EXPECT_FALSE(e.try_pin_resident(0, [&](int step) { count += step; })) << what;
    EXPECT_EQ(count, 0) << what;
    EXPECT_EQ(e.word.load(), w) << what;
  }
  // A writer declines a page keeping a host copy (the slow path lets the slot go); a reader takes it.
  PageEntry e;
  resident(e, word::kHostCopy);
  EXPECT_FALSE(e.try_pin_resident(word::kDirty, [](int) {}));
  EXPECT_TRUE(e.try_pin_resident(0, [](int) {}));
}

TEST(PageWord, LockFreeUnpinLeavesAFrozenWordAlone) {
  PageEntry e;
  resident(e);
  e.add_pin();
  e.freeze();
  const auto frozen = e.word.load();
  EXPECT_FALSE(e.try_unpin().has_value());
  EXPECT_EQ(e.word.load(), frozen);
  e.thaw();
  const auto before = e.try_unpin();
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(word::pins(*before), 1u);
  EXPECT_EQ(word::pins(e.word.load()), 0u);
}

TEST(PageWord, EvictionClaimTakesOnlyUnpinnedResidentPagesItAccepts) {
  PageEntry e;
  resident(e);
  e.add_pin();
  int asked = 0;
  EXPECT_FALSE(e.try_claim_for_eviction([&](std::uint64_t) { return ++asked, true; }));
  EXPECT_EQ(asked, 0);  // a pinned page is not even offered
  e.remove_pin();
  EXPECT_FALSE(e.try_claim_for_eviction([](std::uint64_t) { return false; }));
  EXPECT_EQ(e.state(), PageState::device);
  const auto version = word::version(e.word.load());
  EXPECT_TRUE(e.try_claim_for_eviction([](std::uint64_t w) { return word::state(w) == PageState::device; }));
  EXPECT_EQ(e.state(), PageState::transit);
  EXPECT_EQ(word::version(e.word.load()), version + 1);
  EXPECT_FALSE(e.try_claim_for_eviction([](std::uint64_t) { return true; }));  // already claimed
}

TEST(PageWord, DroppableWhenACopyIsCurrentOrTheContentsAreDead) {
  PageEntry e;
  resident(e);
  EXPECT_FALSE(e.droppable(e.word.load()));
  e.nvme_slot = 3;
  EXPECT_TRUE(e.droppable(e.word.load()));                  // a clean NVMe copy
  EXPECT_FALSE(e.droppable(e.word.load() | word::kDirty));  // a stale one
  e.nvme_slot = kNoSlot;
  e.host_slot = 5;
  EXPECT_FALSE(e.droppable(e.word.load()));  // a slot that is not a kept copy
  EXPECT_TRUE(e.droppable(e.word.load() | word::kHostCopy));
  e.host_slot = kNoSlot;
  EXPECT_TRUE(e.droppable(e.word.load() | word::kDiscarded));
}

TEST(PageWord, AWriteBehindStartsOnlyOnAnUnpinnedResidentPageAndOutlivesStateChanges) {
  PageEntry p;
  p.word.store(word::with_state(0, PageState::device));
  ASSERT_TRUE(p.start_writing_behind(p.word.load()));
  auto w = p.word.load();
  EXPECT_TRUE(word::host_copy(w));
  EXPECT_TRUE(word::writing_behind(w));
  EXPECT_FALSE(p.start_writing_behind(w)) << "one at a time";
  p.set_state(PageState::transit);  // evicted meanwhile: the bit stays until the copy is retired
  EXPECT_TRUE(word::writing_behind(p.word.load()));
  EXPECT_TRUE(word::writing_behind(p.end_writing_behind()));
  EXPECT_FALSE(word::writing_behind(p.word.load()));

  PageEntry pinned;
  pinned.word.store(word::with_state(0, PageState::device) + word::kPinOne);
  EXPECT_FALSE(pinned.start_writing_behind(pinned.word.load()));
  PageEntry host;
  host.word.store(word::with_state(0, PageState::host));
  EXPECT_FALSE(host.start_writing_behind(host.word.load()));
  PageEntry stale;  // the word changed since it was read: no start
  stale.word.store(word::with_state(0, PageState::device));
  const auto old = stale.word.load();
  stale.word.fetch_add(word::kPinOne);
  EXPECT_FALSE(stale.start_writing_behind(old));
}
