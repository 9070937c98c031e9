#include <gtest/gtest.h>

#include "vmm/page_table.hpp"

using namespace tvmm::detail;

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
