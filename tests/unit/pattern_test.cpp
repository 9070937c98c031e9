#include <gtest/gtest.h>

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
