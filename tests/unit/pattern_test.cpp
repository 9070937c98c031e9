#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "kernels/pattern.hpp"

using namespace tvmm::kernels;

TEST(PatternKernel, FillThenVerifyAnySize) {
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 4096u, 4099u}) {
    std::vector<unsigned char> buf(n + 1, 0xAB);
    fill_pattern(buf.data(), n, 17);
    EXPECT_EQ(count_mismatches(buf.data(), n, 17), 0u) << n;
    EXPECT_EQ(buf[n], 0xAB) << "wrote past the end for n=" << n;
  }
}

TEST(PatternKernel, CountsEveryChangedByte) {
  std::vector<unsigned char> buf(1000);
  fill_pattern(buf.data(), buf.size(), 3);
  buf[0] ^= 1;
  buf[500] ^= 0x80;
  buf[999] ^= 0xFF;
  EXPECT_EQ(count_mismatches(buf.data(), buf.size(), 3), 3u);
  EXPECT_GT(count_mismatches(buf.data(), buf.size(), 4), 900u);  // another seed differs almost everywhere
}

TEST(PatternKernel, ChecksumDependsOnEveryWordAndItsPosition) {
  std::vector<std::uint64_t> a(64);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = i * 3 + 1;
  const auto base = checksum(a.data(), a.size());
  EXPECT_EQ(base, checksum(a.data(), a.size()));  // deterministic
  auto flipped = a;
  flipped[17] ^= 1ull << 40;
  EXPECT_NE(checksum(flipped.data(), flipped.size()), base);
  auto swapped = a;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(checksum(swapped.data(), swapped.size()), base);
  // Order-independent accumulation: two halves add up to the whole (as GPU threads add their parts).
  std::uint64_t halves = 0;
  for (std::size_t i = 0; i < a.size(); ++i) halves += pattern_word(a[i], i);
  EXPECT_EQ(halves, base);
}

TEST(PatternKernel, ComputeRunsTheRequestedMultiplyAdds) {
  std::vector<float> v(8, 2.0f);
  compute(v.data(), v.size(), 0);
  EXPECT_EQ(v[0], 2.0f);  // zero iterations change nothing
  compute(v.data(), v.size(), 1000);
  // x -> 0.999999 x + 0.000001 pulls x toward 1: after 1000 steps 2.0 is about 1.999.
  EXPECT_LT(v[0], 1.9995f);
  EXPECT_GT(v[0], 1.998f);
  EXPECT_EQ(v[0], v[7]);
}
