// Bad input gets a clear error and leaves the pager's state intact.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "backends/device/faulty/faulty_device.hpp"
#include "test_support.hpp"
#include "vmm/api/last_error.hpp"
#include "vmm/api/make_pager.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/pager_impl.hpp"

using namespace tvmm;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(PagerErrors, ZeroSize) {
  Pager p(test::small_config(4, 8));
  try {
    (void)p.allocate(0, {"weights"});
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "size is 0 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "weights")) << e.what();
  }
  EXPECT_EQ(p.stats().allocations, 0u);
  p.check_invariants();
}

TEST(PagerErrors, LargerThanAllTiersTogether) {
  Pager p(test::small_config(4, 8));  // 4 + 8 - 1 = 11 pages can be allocated
  auto keep = p.allocate(3 * 64 * KiB);
  {
    auto pin = keep.pin(Access::write);
    test::fill(pin.data(), keep.size(), 42);
  }
  try {
    (void)p.allocate(9 * 64 * KiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "cannot allocate 576 KiB")) << msg;  // what was asked
    EXPECT_TRUE(contains(msg, "512 KiB free")) << msg;             // what is free
    EXPECT_TRUE(contains(msg, "raise the budgets")) << msg;
  }
  // Also a std::bad_alloc and a tvmm::error.
  EXPECT_THROW((void)p.allocate(std::size_t{1} << 40), std::bad_alloc);
  EXPECT_THROW((void)p.allocate(std::size_t{1} << 40), tvmm::error);
  // State intact: the earlier tensor is whole and the rest of the capacity is still usable.
  auto more = p.allocate(8 * 64 * KiB);
  EXPECT_EQ(p.stats().live_bytes, 11 * 64 * KiB);
  auto pin = keep.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), keep.size(), 42), 0u);
  p.check_invariants();
}

TEST(PagerErrors, DoubleFree) {
  Pager p(test::small_config(4, 8));
  void* raw = p.allocate(64 * KiB).release();
  auto other = p.allocate(64 * KiB);
  p.free(raw);
  try {
    p.free(raw);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "double free")) << e.what();
    EXPECT_TRUE(contains(e.what(), "nothing was changed")) << e.what();
  }
  EXPECT_THROW(p.free(reinterpret_cast<void*>(0x1234)), invalid_argument);
  // Freeing a Tensor-owned address through the raw API is refused too.
  EXPECT_THROW(p.free(other.data()), invalid_argument);
  EXPECT_EQ(p.stats().live_bytes, 64 * KiB);
  { auto pin = other.pin(Access::write); }
  p.check_invariants();
}

TEST(PagerErrors, TensorLargerThanDeviceBudgetCannotBePinned) {
  Pager p(test::small_config(2, 8));
  auto big = p.allocate(3 * 64 * KiB);
  try {
    (void)big.pin();
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_TRUE(contains(e.what(), "needs 3 device pages but the device budget is 2")) << e.what();
  }
  p.check_invariants();
  EXPECT_EQ(p.stats().device_used_bytes, 0u);
}

TEST(PagerErrors, PinnedWorkingSetLargerThanDeviceIsAnErrorNotAHang) {
  auto c = test::small_config(3, 8);
  c.wait_timeout = std::chrono::milliseconds(100);
  Pager p(c);
  auto a = p.allocate(2 * 64 * KiB);
  auto b = p.allocate(2 * 64 * KiB);
  auto pa = a.pin(Access::write);
  test::fill(pa.data(), a.size(), 5);
  try {
    auto pb = b.pin(Access::write);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_TRUE(contains(e.what(), "pinned working set exceeds the device budget")) << e.what();
  }
  // Intact: a is still pinned and whole; after releasing it, b can be pinned.
  EXPECT_EQ(test::mismatches(pa.data(), a.size(), 5), 0u);
  p.check_invariants();
  pa.release();
  auto pb = b.pin(Access::write);
  // 3 frames: b took the free one and evicted one page of a.
  EXPECT_EQ((a.tier(0) == Tier::device) + (a.tier(64 * KiB) == Tier::device), 1);
  p.check_invariants();
}

TEST(PagerErrors, EmptyHandlesAreRejected) {
  Pager p(test::small_config(2, 8));
  Tensor t;
  EXPECT_THROW((void)t.pin(), invalid_argument);
  Stream s;
  auto real = p.allocate(64 * KiB);
  EXPECT_THROW((void)real.pin(s), invalid_argument);
  EXPECT_THROW(s.synchronize(), invalid_argument);
  EXPECT_THROW((void)real.tier(64 * KiB), invalid_argument);
  EXPECT_THROW((void)p.tier_of(nullptr), invalid_argument);
  t.reset();  // no-op
  Pin pin;
  pin.release();  // no-op
}

// A reservation the device refuses names the reservation, how its size was chosen and the fix (it
// said "the device has no physical memory left", about address space).
TEST(PagerErrors, AnAddressReservationTheDeviceRefusesNamesVaSize) {
  for (std::size_t va : {std::size_t{0}, 64 * MiB}) {
    Config c = test::small_config(2, 4);
    c.va_size = va;
    auto dev = std::make_unique<device::FaultyDevice>(device::make_device_backend(c));
    dev->fail_always(device::FaultyDevice::Op::reserve, device::Errc::out_of_memory);
    const std::string m = test::message_of([&] { (void)vmm::make_pager(c, std::move(dev)); });
    EXPECT_NE(m.find("cannot reserve"), std::string::npos) << m;
    EXPECT_NE(m.find("device address space"), std::string::npos) << m;
    EXPECT_NE(m.find(va == 0 ? "device.va_size is auto: 4 x (device budget 128 KiB + host budget 256 KiB)"
                             : "device.va_size = 64 MiB was set"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("Set device.va_size"), std::string::npos) << m;
    EXPECT_EQ(m.find("physical memory"), std::string::npos) << m;
  }
  // A device that failed is not a size to change: the error says what failed, not to set va_size.
  Config c = test::small_config(2, 4);
  auto dev = std::make_unique<device::FaultyDevice>(device::make_device_backend(c));
  dev->fail_always(device::FaultyDevice::Op::reserve, device::Errc::driver_error);
  try {
    (void)vmm::make_pager(c, std::move(dev));
    ADD_FAILURE() << "a failed reservation was accepted";
  } catch (const config_error& e) {
    ADD_FAILURE() << "a driver error was reported as a configuration error: " << e.what();
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("reserve(device.va_size)"), std::string::npos) << e.what();
  }
}

// The page table takes 64 bytes of host memory per page of the reservation, at once: a reservation
// whose table would take more than a quarter of the machine's memory is refused, saying so.
TEST(PagerErrors, AReservationWhosePageTableWouldNotFitIsRefused) {
  Config c = test::small_config(2, 4);
  c.va_size = (std::size_t{1} << 32) - 1;  // pages of 64 KiB: a 256 GiB page table
  c.va_size *= 64 * KiB;
  const std::string m = test::message_of([&] { Pager p(c); });
  EXPECT_NE(m.find("page table"), std::string::npos) << m;
  EXPECT_NE(m.find("of host memory"), std::string::npos) << m;
  EXPECT_NE(m.find("device.va_size"), std::string::npos) << m;
}

// A stream belongs to the pager that made it: another pager's stream is refused, nothing pinned.
TEST(PagerErrors, AStreamOfAnotherPagerIsRefused) {
  Pager p(test::small_config(2, 4));
  Pager other(test::small_config(2, 4));
  auto theirs = other.create_stream();
  auto t = p.allocate(64 * KiB);
  const std::string m = test::message_of([&] { auto pin = t.pin(theirs, Access::write); });
  EXPECT_TRUE(contains(m, "the stream belongs to another tvmm::Pager")) << m;
  EXPECT_THROW(t.prefetch(theirs), invalid_argument);
  EXPECT_THROW((void)t.pin_range(theirs, 0, 100, Access::read), invalid_argument);
  EXPECT_EQ(t.tier(), Tier::none);  // nothing was pinned or loaded
  EXPECT_EQ(p.stats().pins, 0u);
  auto mine = p.create_stream();
  { auto pin = t.pin(mine, Access::write); }
  p.check_invariants();
}

// A failed backend call names the code behind it for what it is: an errno with its meaning, or the
// driver's own code (a CUresult is no errno: CUDA_ERROR_OUT_OF_MEMORY is 2, ENOENT is 2 too).
TEST(PagerErrors, AFailedBackendCallSaysWhetherItsCodeIsAnErrnoOrTheDrivers) {
  const auto message = [](device::Status s) { return test::message_of([&] { TVMM_CHECK(s); }); };
  const std::string os = message(device::Status::fail(device::Errc::system_error, ENOSPC));
  EXPECT_NE(os.find("failed with system_error (errno " + std::to_string(ENOSPC) + ": No space left on device)"),
            std::string::npos)
      << os;
  const std::string driver = message(device::Status::driver_fail(device::Errc::out_of_memory, 2));
  EXPECT_NE(driver.find("failed with out_of_memory (driver code 2)"), std::string::npos) << driver;
  EXPECT_EQ(driver.find("errno"), std::string::npos) << driver;
  // Out of memory is not only the device's: a driver that cannot create an event says so too.
  EXPECT_NE(driver.find("no memory or other resources left for this call"), std::string::npos) << driver;
  EXPECT_EQ(driver.find("no physical memory"), std::string::npos) << driver;
  // With the driver's name for its code (cuGetErrorName), the name comes first.
  const std::string named =
      message(device::Status::driver_fail(device::Errc::out_of_memory, 2, "CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_NE(named.find("failed with out_of_memory (CUDA_ERROR_OUT_OF_MEMORY, driver code 2)"), std::string::npos)
      << named;
  const std::string plain = message(device::Status::fail(device::Errc::invalid_value));
  EXPECT_NE(plain.find("failed with invalid_value at "), std::string::npos) << plain;
}

// Every error class of errors.hpp has its own C status, its text kept as the last error: a pin's timeout
// (timeout_error) used to come back as TVMM_ERROR_INTERNAL, "a bug: please report it".
TEST(PagerErrors, EveryErrorClassHasItsOwnCStatus) {
  const auto status_of = [](auto&& raise) {
    try {
      raise();
    } catch (...) {
      return vmm::status_of_current_exception();
    }
    return TVMM_SUCCESS;
  };
  EXPECT_EQ(status_of([] { throw invalid_argument("a"); }), TVMM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([] { throw out_of_memory("b"); }), TVMM_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(status_of([] { throw config_error("c"); }), TVMM_ERROR_CONFIG);
  EXPECT_EQ(status_of([] { throw device_error("d", "invalid_value"); }), TVMM_ERROR_DEVICE);
  EXPECT_EQ(status_of([] { throw io_error("e", EIO); }), TVMM_ERROR_IO);
  EXPECT_EQ(status_of([] { throw timeout_error("pages stayed in transit"); }), TVMM_ERROR_TIMEOUT);
  EXPECT_STREQ(tvmm_last_error(), "pages stayed in transit");
  EXPECT_EQ(status_of([] { throw std::runtime_error("f"); }), TVMM_ERROR_INTERNAL);
  for (int s = TVMM_SUCCESS; s <= TVMM_ERROR_TIMEOUT; ++s) {
    EXPECT_EQ(std::string(tvmm_status_name(static_cast<tvmm_status>(s))).find("unknown"), std::string::npos) << s;
  }
  EXPECT_STREQ(tvmm_status_name(TVMM_ERROR_TIMEOUT), "TVMM_ERROR_TIMEOUT");
}
