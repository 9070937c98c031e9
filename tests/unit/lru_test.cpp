#include <gtest/gtest.h>

#include <vector>

#include "policies/eviction_policy.hpp"
#include "policies/lru.hpp"
#include "tvmm/errors.hpp"

using namespace tvmm::detail;
using tvmm::policies::LruPolicy;

namespace {
std::vector<std::size_t> take_all(LruPolicy& lru, PageEntry* base, std::size_t max) {
  std::vector<std::size_t> order;
  lru.select(max, [&](PageEntry& p) {
    order.push_back(static_cast<std::size_t>(&p - base));
    return true;
  });
  return order;
}
}  // namespace

TEST(Lru, VictimsInLeastRecentlyUsedOrder) {
  std::vector<PageEntry> pages(5);
  LruPolicy lru;
  for (auto& p : pages) lru.insert(p);
  lru.touch(&pages[1], 1);
  lru.touch(&pages[3], 2);  // pages 3 and 4
  lru.touch(&pages[0], 1);
  EXPECT_EQ(take_all(lru, pages.data(), 5), (std::vector<std::size_t>{2, 1, 3, 4, 0}));
  EXPECT_EQ(lru.size(), 0u);
}

TEST(Lru, DeclinedCandidatesStayAndAreSkipped) {
  std::vector<PageEntry> pages(4);
  LruPolicy lru;
  for (auto& p : pages) lru.insert(p);
  std::vector<std::size_t> taken;
  const auto n = lru.select(2, [&](PageEntry& p) {
    const auto i = static_cast<std::size_t>(&p - pages.data());
    if (i == 0) return false;  // e.g. pinned
    taken.push_back(i);
    return true;
  });
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(taken, (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(take_all(lru, pages.data(), 9), (std::vector<std::size_t>{0, 3}));
}

TEST(Lru, RemoveAndTouchOfUntrackedPagesAreIgnored) {
  std::vector<PageEntry> pages(3);
  LruPolicy lru;
  lru.insert(pages[0]);
  lru.insert(pages[1]);
  lru.remove(pages[0]);
  lru.remove(pages[0]);
  lru.touch(&pages[2], 1);  // never inserted
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_EQ(take_all(lru, pages.data(), 3), (std::vector<std::size_t>{1}));
}

TEST(Lru, FactoryRejectsUnknownName) {
  EXPECT_STREQ(tvmm::policies::make_eviction_policy("lru")->name(), "lru");
  try {
    (void)tvmm::policies::make_eviction_policy("lfu");
    FAIL() << "expected config_error";
  } catch (const tvmm::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("lfu"), std::string::npos);
  }
}
