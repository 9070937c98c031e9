// pcie_copy_bytes_per_s: a GPU's PCI Express link to the host as sysfs describes it, on hand-made sysfs
// trees (the device, the bridges above it and the /sys/bus/pci/devices links to them).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>

#include "backends/device/host_link.hpp"
#include "test_support.hpp"

using tvmm::device::kPcieCopyShare;
using tvmm::device::pcie_copy_bytes_per_s;
namespace fs = std::filesystem;

namespace {

// A sysfs-like tree: devices/pci0000:00/<root port>/<switch port>/<gpu>, and bus/<id> links to each.
struct Tree {
  tvmm::test::TempDir dir;
  fs::path root = fs::path(dir.path()) / "devices" / "pci0000:00";
  fs::path bus = fs::path(dir.path()) / "bus";

  // A device at `parent`/`id` with these link files ("" leaves the file out); returns its directory.
  fs::path add(const fs::path& parent, const std::string& id, const std::string& speed, const std::string& width) {
    const fs::path d = parent / id;
    fs::create_directories(d);
    fs::create_directories(bus);
    if (!speed.empty()) std::ofstream(d / "max_link_speed") << speed << "\n";
    if (!width.empty()) std::ofstream(d / "max_link_width") << width << "\n";
    // Current figures of an idle GPU, trained down: never read.
    std::ofstream(d / "current_link_speed") << "2.5 GT/s PCIe\n";
    std::ofstream(d / "current_link_width") << "1\n";
    fs::create_directory_symlink(d, bus / id);
    return d;
  }
  std::optional<double> of(const std::string& id) const { return pcie_copy_bytes_per_s(id, bus.string()); }
};

double gbs(double gts, double lanes, double encoding) { return gts * 1e9 * lanes * encoding / 8 * kPcieCopyShare; }

}  // namespace

TEST(HostLink, APcie5x16GpuBehindItsRootPortCopiesAt82PercentOf63GBs) {
  Tree t;
  const auto port = t.add(t.root, "0000:00:01.0", "32.0 GT/s PCIe", "16");
  t.add(port, "0000:01:00.0", "32.0 GT/s PCIe", "16");
  const auto v = t.of("0000:01:00.0");
  ASSERT_TRUE(v.has_value());
  EXPECT_DOUBLE_EQ(*v, gbs(32, 16, 128.0 / 130.0));
  EXPECT_NEAR(*v / 1e9, 51.7, 0.1) << "an H200 copied 50.7-52.4 GB/s each way";
}

TEST(HostLink, TheDriversFormOfTheBusIdFindsSysfsName) {
  Tree t;
  t.add(t.root, "0000:1a:00.0", "16.0 GT/s PCIe", "16");
  EXPECT_DOUBLE_EQ(*t.of("00000000:1A:00.0"), gbs(16, 16, 128.0 / 130.0)) << "cuDeviceGetPCIBusId's form";
  EXPECT_DOUBLE_EQ(*t.of("1a:00.0"), gbs(16, 16, 128.0 / 130.0)) << "no domain: domain 0";
  EXPECT_FALSE(t.of("not-a-bus-id").has_value());
}

TEST(HostLink, TheSlowestAndNarrowestLinkOnTheWayToTheRootBounds) {
  Tree t;
  const auto root_port = t.add(t.root, "0000:00:01.0", "16.0 GT/s PCIe", "16");      // a PCIe 4.0 host
  const auto switch_port = t.add(root_port, "0000:01:00.0", "32.0 GT/s PCIe", "8");  // an x8 uplink
  t.add(switch_port, "0000:02:00.0", "32.0 GT/s PCIe", "16");
  EXPECT_DOUBLE_EQ(*t.of("0000:02:00.0"), gbs(16, 8, 128.0 / 130.0));
}

TEST(HostLink, EachGenerationHasItsLineEncoding) {
  for (const auto& [speed, gts, encoding] :
       {std::tuple{"2.5 GT/s PCIe", 2.5, 0.8}, std::tuple{"5.0 GT/s PCIe", 5.0, 0.8},
        std::tuple{"8.0 GT/s PCIe", 8.0, 128.0 / 130.0}, std::tuple{"64.0 GT/s PCIe", 64.0, 242.0 / 256.0}}) {
    Tree t;
    t.add(t.root, "0000:03:00.0", speed, "16");
    EXPECT_DOUBLE_EQ(*t.of("0000:03:00.0"), gbs(gts, 16, encoding)) << speed;
  }
}

TEST(HostLink, ABridgeThatSaysNothingUsableIsPassedOver) {
  Tree t;
  const auto port = t.add(t.root, "0000:00:01.0", "Unknown", "0");  // a virtual machine's bare port
  t.add(port, "0000:01:00.0", "16.0 GT/s PCIe", "16");
  EXPECT_DOUBLE_EQ(*t.of("0000:01:00.0"), gbs(16, 16, 128.0 / 130.0));
}

TEST(HostLink, NoFigureWithoutTheDeviceOrItsOwnLink) {
  Tree t;
  EXPECT_FALSE(t.of("0000:09:00.0").has_value()) << "no such device";
  EXPECT_FALSE(t.of("").has_value()) << "no bus id";
  t.add(t.root, "0000:04:00.0", "", "16");
  EXPECT_FALSE(t.of("0000:04:00.0").has_value()) << "no max_link_speed";
  t.add(t.root, "0000:05:00.0", "Unknown", "16");
  EXPECT_FALSE(t.of("0000:05:00.0").has_value()) << "an unknown speed";
  t.add(t.root, "0000:06:00.0", "16.0 GT/s PCIe", "0");
  EXPECT_FALSE(t.of("0000:06:00.0").has_value()) << "no lanes";
  EXPECT_FALSE(pcie_copy_bytes_per_s("0000:01:00.0", "/nonexistent/sys/bus/pci/devices").has_value());
}
