#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <string>
#include <thread>

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
  EXPECT_NE(config_error_of(c).find("device.budget (Config::device_budget) is 0"), std::string::npos);
  c = test::small_config(4, 8);
  c.host_budget = 0;
  EXPECT_NE(config_error_of(c).find("host.budget (Config::host_budget) is 0"), std::string::npos);
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

// Frames and host slots have 32-bit numbers: a budget of 2^32 pages or more used to wrap in the casts
// (a host budget of 2^32 pages and one more became a host tier of one slot).
TEST(Config, ABudgetOfMoreThan2To32PagesIsRejected) {
  const std::size_t page = test::small_config(4, 8).sim.granularity;
  for (const bool host : {false, true}) {
    auto c = test::small_config(4, 8);
    (host ? c.host_budget : c.device_budget) = (std::size_t{1} << 32) * page + page;
    c.va_size = 1 * GiB;
    const auto msg = config_error_of(c);
    EXPECT_NE(msg.find(host ? "host.budget = " : "device.budget = "), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than 2^32 pages"), std::string::npos) << msg;
  }
}

// A va_size near SIZE_MAX wrapped when rounded up to pages ("cannot reserve 0 B").
TEST(Config, AVaSizeNearTheLargestIsRejectedNotWrapped) {
  auto c = test::small_config(4, 8);
  c.va_size = std::numeric_limits<std::size_t>::max();
  const auto msg = config_error_of(c);
  EXPECT_NE(msg.find("device.va_size = "), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than 2^32 pages"), std::string::npos) << msg;
}

// milliseconds::max() ("wait forever") overflowed the deadline, so every wait failed at once with
// "no pin was released within 9223372036854775807 ms". It now waits for the release.
TEST(Config, AWaitTimeoutOfForeverWaitsForTheRelease) {
  auto c = test::small_config(4, 8);
  c.wait_timeout = std::chrono::milliseconds::max();
  Pager p(c);
  EXPECT_EQ(p.config().wait_timeout, std::chrono::milliseconds(1'000'000'000'000));
  auto whole = p.allocate(4 * c.page_size);
  auto other = p.allocate(c.page_size);
  std::atomic<bool> released{false};
  std::atomic<bool> pinned_after_release{false};
  std::string failure;
  {
    auto pin = whole.pin();  // every frame
    std::thread waiter([&] {
      try {
        auto q = other.pin();  // waits for a frame
        pinned_after_release = released.load();
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = true;
    pin = Pin{};
    waiter.join();
  }
  EXPECT_TRUE(pinned_after_release) << failure;
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
