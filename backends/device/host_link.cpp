#include "backends/device/host_link.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "backends/topology/topology.hpp"

namespace tvmm::device {

namespace {

// The first number in `dir`/`name` ("32.0 GT/s PCIe", "16"); nullopt without a file or a number > 0
// ("Unknown speed", "0").
std::optional<double> leading_number(const std::filesystem::path& dir, const char* name) {
  std::ifstream in(dir / name);
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !(v > 0) || v > 1e6) return std::nullopt;
  return v;
}

// Payload bits per transferred bit at `gts` gigatransfers per second and lane.
double encoding(double gts) {
  if (gts <= 5.0) return 8.0 / 10.0;      // PCIe 1.x and 2.x
  if (gts <= 32.0) return 128.0 / 130.0;  // PCIe 3.0 to 5.0
  return 242.0 / 256.0;                   // PCIe 6.0 FLIT mode (its FEC and CRC bytes)
}

}  // namespace

std::optional<double> pcie_copy_bytes_per_s(const std::string& bus_id, const std::string& pci_devices) {
  // The driver prints an 8-digit domain and capital hex digits ("00000000:1A:00.0"), sysfs a 4-digit
  // domain and small ones ("0000:1a:00.0").
  const auto id = topology::linux_pci_bus_id(bus_id);
  if (!id) return std::nullopt;
  std::error_code ec;
  // /sys/bus/pci/devices/<id> links to the device's place in the tree
  // (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0): each directory above it holding a link is a
  // bridge on the way to the root complex.
  std::filesystem::path dir = std::filesystem::canonical(std::filesystem::path(pci_devices) / *id, ec);
  if (ec) return std::nullopt;
  double gts = std::numeric_limits<double>::infinity();
  double lanes = std::numeric_limits<double>::infinity();
  bool device = true;
  for (; !dir.empty() && dir != dir.parent_path(); dir = dir.parent_path(), device = false) {
    const auto speed = leading_number(dir, "max_link_speed");
    const auto width = leading_number(dir, "max_link_width");
    if (!speed || !width) {
      if (device) return std::nullopt;                                  // the device itself says nothing usable
      if (!std::filesystem::exists(dir / "max_link_speed", ec)) break;  // past the root port
      continue;  // a bridge that says nothing usable: the others still bound the link
    }
    gts = std::min(gts, *speed);
    lanes = std::min(lanes, *width);
  }
  return gts * 1e9 * lanes * encoding(gts) / 8.0 * kPcieCopyShare;
}

}  // namespace tvmm::device
