#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "test_support.hpp"

using namespace tvmm;

namespace {
std::string config_error_of(const Config& c) {
  try {
    Pager p(c);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, ZeroBudgetsAreRejected) {
  auto c = test::small_config(4, 8);
  c.device_budget = 0;
  EXPECT_NE(config_error_of(c).find("device_budget is 0"), std::string::npos);
  c = test::small_config(4, 8);
  c.host_budget = 0;
  EXPECT_NE(config_error_of(c).find("host_budget is 0"), std::string::npos);
}

TEST(Config, PageSizeMustBeAMultipleOfGranularity) {
  auto c = test::small_config(4, 8);
  c.page_size = 96 * KiB;  // granularity is 64 KiB
  const auto msg = config_error_of(c);
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
  EXPECT_NE(msg.find("64 KiB"), std::string::npos) << msg;
}

TEST(Config, LargerPagesThanGranularityWork) {
  auto c = test::small_config(4, 8);
  c.page_size = 128 * KiB;
  c.device_budget = 4 * 128 * KiB;
  c.host_budget = 8 * 128 * KiB;
  Pager p(c);
  EXPECT_EQ(p.config().page_size, 128 * KiB);
  auto t = p.allocate(200 * KiB);
  auto pin = t.pin();
  test::fill(pin.data(), t.size(), 7);
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 7), 0u);
}

TEST(Config, BudgetSmallerThanAPageIsRejected) {
  auto c = test::small_config(4, 8);
  c.device_budget = 1000;
  EXPECT_NE(config_error_of(c).find("smaller than one page"), std::string::npos);
}

TEST(Config, UnknownBackendAndPolicyAreRejected) {
  auto c = test::small_config(4, 8);
  c.device_backend = "tpu";
  EXPECT_NE(config_error_of(c).find("\"tpu\""), std::string::npos);
  c = test::small_config(4, 8);
  c.eviction = "random";
  EXPECT_NE(config_error_of(c).find("\"random\""), std::string::npos);
  c = test::small_config(4, 8);
  c.sim.timing = "fast";
  const auto msg = config_error_of(c);
  EXPECT_NE(msg.find("\"fast\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"model\""), std::string::npos) << msg;  // says what would do
}

TEST(Config, DeviceBudgetAboveCapacityIsRejected) {
  auto c = test::small_config(4, 8);
  c.sim.capacity = 2 * 64 * KiB;
  EXPECT_NE(config_error_of(c).find("exceeds the device's memory"), std::string::npos);
}

TEST(Config, BadGranularityIsRejected) {
  auto c = test::small_config(4, 8);
  c.sim.granularity = 3000;
  EXPECT_NE(config_error_of(c).find("power of two"), std::string::npos);
}

TEST(Config, ANegativeOrNonFiniteBusSpeedIsRejected) {
  auto c = test::small_config(4, 8);
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    c.bus_bytes_per_s = bad;
    EXPECT_NE(config_error_of(c).find("bus_bytes_per_s"), std::string::npos) << bad;
  }
  c.bus_bytes_per_s = 25e9;  // a PCIe 4.0 x16 link's copies
  EXPECT_EQ(config_error_of(c), "");
}

TEST(Config, FormatBytes) {
  EXPECT_EQ(format_bytes(300), "300 B");
  EXPECT_EQ(format_bytes(2 * MiB), "2 MiB");
  EXPECT_EQ(format_bytes(3 * GiB / 2), "1.50 GiB");
}
