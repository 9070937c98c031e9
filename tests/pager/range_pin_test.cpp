// Range pins (only the pages holding a byte range are made resident) and sequential prefetch (after a
// pin, the next pages of the same tensor are paged in ahead of a front-to-back scan).
#include <gtest/gtest.h>

#include <string>

#include "test_support.hpp"

using namespace tvmm;

namespace {

constexpr std::size_t kPage = 64 * KiB;

// Writes page i of `t` with pattern seed + i, a page at a time (host pins of one page each).
void write_pages(Tensor& t, std::uint64_t seed) {
  for (std::size_t i = 0; i < t.size() / kPage; ++i) {
    auto pin = t.pin_range(i * kPage, kPage, Access::write);
    test::fill(pin.data(), kPage, seed + i);
  }
}

}  // namespace

TEST(RangePin, PinsOnlyThePagesHoldingTheRange) {
  Pager p(test::small_config(2, 16));
  auto t = p.allocate(8 * kPage);  // four times the device budget: it can never be pinned whole
  EXPECT_THROW((void)t.pin(Access::read), out_of_memory);
  write_pages(t, 100);
  // Bytes from the middle of page 3 to the middle of page 4: pages 3 and 4, nothing else.
  auto pin = t.pin_range(3 * kPage + kPage / 2, kPage, Access::read);
  EXPECT_EQ(pin.data(), static_cast<char*>(t.data()) + 3 * kPage + kPage / 2);
  EXPECT_EQ(pin.size(), kPage);
  EXPECT_EQ(t.tier(3 * kPage), Tier::device);
  EXPECT_EQ(t.tier(4 * kPage), Tier::device);
  EXPECT_EQ(t.tier(0), Tier::host);
  EXPECT_EQ(test::mismatches(static_cast<char*>(t.data()) + 3 * kPage, kPage, 103), 0u);
  EXPECT_EQ(test::mismatches(static_cast<char*>(t.data()) + 4 * kPage, kPage, 104), 0u);
  pin.release();
  for (std::size_t i = 0; i < 8; ++i) {  // every page kept its data through the evictions
    auto q = t.pin_range(i * kPage, kPage, Access::read);
    EXPECT_EQ(test::mismatches(q.data(), kPage, 100 + i), 0u) << "page " << i;
  }
  p.check_invariants();
}

TEST(RangePin, AWriteToPartOfAPageKeepsTheRestOfIt) {
  Pager p(test::small_config(1, 8));
  auto t = p.allocate(2 * kPage);
  write_pages(t, 7);
  {
    auto other = p.allocate(kPage);  // evicts t's pages
    auto pin = other.pin(Access::write);
  }
  ASSERT_EQ(t.tier(0), Tier::host);
  {
    // Overwrites bytes [100, 200) of page 0 only: the page must be loaded, not mapped fresh.
    auto pin = t.pin_range(100, 100, Access::write);
    std::memset(pin.data(), 0xAB, 100);
  }
  auto pin = t.pin_range(0, kPage, Access::read);
  const auto* b = static_cast<const unsigned char*>(pin.data());
  EXPECT_EQ(test::mismatches(b, 100, 7), 0u);
  for (std::size_t i = 100; i < 200; ++i) ASSERT_EQ(b[i], 0xAB) << i;
  // The pattern is position-dependent: compare the tail against a freshly filled page.
  std::vector<unsigned char> expect(kPage);
  test::fill(expect.data(), kPage, 7);
  EXPECT_EQ(std::memcmp(b + 200, expect.data() + 200, kPage - 200), 0);
}

TEST(RangePin, RangesOutsideTheTensorAreRejectedAndChangeNothing) {
  Pager p(test::small_config(2, 8));
  auto t = p.allocate(2 * kPage);
  write_pages(t, 3);
  const std::size_t size = t.size();
  for (const auto& [offset, bytes] : std::vector<std::pair<std::size_t, std::size_t>>{
           {0, 0}, {size, 1}, {size - 10, 11}, {1, SIZE_MAX}, {SIZE_MAX, 1}}) {
    try {
      (void)t.pin_range(offset, bytes, Access::read);
      FAIL() << "expected invalid_argument for [" << offset << ", +" << bytes << ")";
    } catch (const invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("pin_range"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(size) + " bytes"), std::string::npos) << msg;  // says the size
    }
  }
  auto pin = t.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), kPage, 3), 0u);
  EXPECT_EQ(p.stats().pins, 3u);  // the two page writes and this one: rejected ranges pinned nothing
}

TEST(SequentialPrefetch, AScanFindsThePagesAheadAlreadyLoaded) {
  auto scan = [](const char* prefetch) {
    Config c = test::small_config(4, 32);
    c.prefetch = prefetch;
    c.prefetch_distance = 2;
    Pager p(c);
    auto t = p.allocate(16 * kPage);
    write_pages(t, 40);
    const auto before = p.stats();
    for (std::size_t i = 0; i < 16; ++i) {  // front to back, a page at a time
      auto pin = t.pin_range(i * kPage, kPage, Access::read);
      EXPECT_EQ(test::mismatches(pin.data(), kPage, 40 + i), 0u) << prefetch << " page " << i;
    }
    const auto after = p.stats();
    p.check_invariants();
    return std::pair{after.misses - before.misses, after.prefetched - before.prefetched};
  };
  const auto [none_misses, none_prefetched] = scan("none");
  const auto [seq_misses, seq_prefetched] = scan("sequential");
  EXPECT_EQ(none_misses, 16u);  // LRU on a scan: the scan evicts the pages it will reach last
  EXPECT_EQ(none_prefetched, 0u);
  EXPECT_GT(seq_prefetched, 0u);
  EXPECT_LE(seq_misses * 3, none_misses) << "sequential prefetch should load most pages ahead of the scan: "
                                         << seq_misses << " misses, " << seq_prefetched << " prefetched";
}

// Config::prefetch_distance = 0 (the default) is sequential prefetch's own default, four pages: a pin
// of page 0 of a 16-page tensor loads pages 1 to 4 and not 5 (the device holds 8).
TEST(SequentialPrefetch, ByDefaultLoadsFourPagesAhead) {
  Config c = test::small_config(8, 32);
  c.prefetch = "sequential";
  Pager p(c);
  auto t = p.allocate(16 * kPage);
  write_pages(t, 60);  // leaves the last 8 pages resident
  ASSERT_EQ(t.tier(0), Tier::host);
  { auto pin = t.pin_range(0, kPage, Access::read); }
  for (std::size_t i = 1; i <= 4; ++i) EXPECT_EQ(t.tier(i * kPage), Tier::device) << "page " << i;
  EXPECT_EQ(t.tier(5 * kPage), Tier::host);
  p.check_invariants();
}
