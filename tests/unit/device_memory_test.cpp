// device::DeviceMemory: one granule of device memory outside any pager (the byte checks' counter); and
// the device registry that makes backends by name.
#include "backends/device/device_memory.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "backends/device/faulty/faulty_device.hpp"
#include "backends/device/registry.hpp"
#include "test_support.hpp"

using namespace tvmm;
using device::Errc;

namespace {
// A simulated device with physical memory for exactly one granule: a chunk left behind makes the next
// creation fail.
std::unique_ptr<device::FaultyDevice> one_granule_device() {
  Config c = test::small_config(1, 1);
  auto dev = std::make_unique<device::FaultyDevice>(device::make_device_backend(c));
  EXPECT_EQ(dev->properties().capacity, dev->properties().granularity);
  return dev;
}
}  // namespace

TEST(DeviceMemory, OpensOneAccessibleGranuleAndReleasesItOnClose) {
  auto dev = one_granule_device();
  {
    device::DeviceMemory m(*dev);
    ASSERT_TRUE(m.open().ok());
    EXPECT_EQ(m.size(), dev->properties().granularity);
    EXPECT_NE(m.va(), 0u);
    std::memset(reinterpret_cast<void*>(m.va()), 7, m.size());  // the simulator's device memory is host memory
    const char* step = nullptr;
    EXPECT_EQ(m.open(&step).code, Errc::invalid_value);  // open twice: refused, the granule kept
    EXPECT_STREQ(step, "open (already open)");
    EXPECT_EQ(reinterpret_cast<unsigned char*>(m.va())[m.size() - 1], 7);
    m.close();
    EXPECT_EQ(m.size(), 0u);
    ASSERT_TRUE(m.open().ok());  // the one granule was given back, so it can be had again
  }
  device::DeviceMemory again(*dev);  // and the destructor gave it back too
  EXPECT_TRUE(again.open().ok());
}

TEST(DeviceMemory, AFailedStepIsNamedAndWhatWasMadeIsUndone) {
  auto dev = one_granule_device();
  for (auto [op, name] : {std::pair{device::FaultyDevice::Op::reserve, "reserve"},
                          std::pair{device::FaultyDevice::Op::create_chunk, "create_chunk"},
                          std::pair{device::FaultyDevice::Op::map, "map"},
                          std::pair{device::FaultyDevice::Op::set_access, "set_access"}}) {
    dev->fail_once(op, Errc::driver_error);
    device::DeviceMemory m(*dev);
    const char* step = nullptr;
    EXPECT_EQ(m.open(&step).code, Errc::driver_error) << name;
    EXPECT_STREQ(step, name);
    EXPECT_EQ(m.size(), 0u) << name;
    EXPECT_TRUE(m.open().ok()) << "after a failed " << name << ", the granule was not given back";
  }
}

// The device registry (backends/device/registry.cpp) builds each name it lists, and make_device_backend
// refuses any other name, listing the registered ones.
TEST(DeviceRegistry, BuildsTheSimulatorByNameAndRefusesUnknownNames) {
  ASSERT_NE(device::find_device_backend("sim"), nullptr);
  ASSERT_NE(device::find_device_backend("cuda"), nullptr);
  EXPECT_EQ(device::find_device_backend("tpu"), nullptr);
  Config c = test::small_config(4, 8);
  c.device_backend = "sim";
  EXPECT_EQ(device::make_device_backend(c)->properties().name, "sim");
  c.device_backend = "tpu";
  try {
    (void)device::make_device_backend(c);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    for (const auto& b : device::device_backends()) {
      EXPECT_NE(std::string(e.what()).find("\"" + std::string(b.name) + "\""), std::string::npos) << e.what();
    }
  }
}
