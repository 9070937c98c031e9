#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "backends/topology/topology.hpp"
#include "vmm/config/config_keys.hpp"

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

namespace tvmm {

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<std::size_t>(v))) {
    std::snprintf(buf, sizeof buf, "%zu %s", static_cast<std::size_t>(v), units[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

void Config::validate() const {
  // Every key with a fixed set of values, from the one key table (the file loader checks the same).
  for (const auto& k : vmm::config_keys()) {
    if (k.field == nullptr) continue;
    const std::string value = k.get(*this);
    const bool known = std::any_of(k.choices.begin(), k.choices.end(),
                                   [&](const std::string& c) { return vmm::toml_string(c) == value; });
    if (!known) {
      throw config_error(std::string(k.field) + " = " + value + " (" + std::string(k.section) + "." +
                         std::string(k.key) + " in a policy file) is not valid: expected " + k.expected);
    }
  }
  if (device_budget == 0) {
    throw config_error(
        "device.budget (Config::device_budget) is 0: the device tier needs at least one page; set it to e.g. "
        "\"256MiB\"");
  }
  if (host_budget == 0) {
    throw config_error(
        "host.budget (Config::host_budget) is 0: evicted pages need a host tier of at least one page; set it "
        "to e.g. \"1GiB\"");
  }
  if (wait_timeout.count() <= 0) {
    throw config_error(
        "pager.wait_timeout_ms (Config::wait_timeout) must be positive (it bounds how long a pin waits for "
        "others to unpin)");
  }
  if (sim.granularity == 0 || (sim.granularity & (sim.granularity - 1)) != 0) {
    throw config_error("device.sim.granularity (Config::sim.granularity) = " + format_bytes(sim.granularity) +
                       " must be a power of two (a real GPU reports 2 MiB)");
  }
  if (!std::isfinite(sim.bandwidth_bytes_per_s) || sim.bandwidth_bytes_per_s < 0.0) {
    throw config_error("sim.bandwidth_bytes_per_s = " + std::to_string(sim.bandwidth_bytes_per_s) +
                       ": expected a finite number of bytes per second >= 0 (0 = unthrottled)");
  }
  if (sim.copy_latency.count() < 0)
    throw config_error("device.sim.copy_latency_us (Config::sim.copy_latency) must be >= 0");
  for (const auto& [what, speed] : {std::pair{"sim.disk.read_bytes_per_s", sim.disk.read_bytes_per_s},
                                    std::pair{"sim.disk.write_bytes_per_s", sim.disk.write_bytes_per_s}}) {
    if (!std::isfinite(speed) || speed < 0.0) {
      throw config_error(std::string(what) + " = " + std::to_string(speed) +
                         ": expected a finite number of bytes per second >= 0 (0 = disk I/O takes no modelled time)");
    }
  }
  if (!std::isfinite(bus_bytes_per_s) || bus_bytes_per_s < 0.0) {
    throw config_error("bus_bytes_per_s = " + std::to_string(bus_bytes_per_s) +
                       ": expected a finite number of bytes per second >= 0 (0 = the PCIe link's, from sysfs)");
  }
  if (host_numa != "auto" && host_numa != "none" && host_numa != "interleave" &&
      (host_numa.empty() || host_numa.find_first_not_of("0123456789") != std::string::npos)) {
    throw config_error("host.numa (Config::host_numa) = \"" + host_numa +
                       "\": expected \"auto\", \"none\", \"interleave\" or a NUMA node id such as \"0\"");
  }
  if (unsigned d, b, v, f; !sim.pci_bus_id.empty() && !topology::parse_pci_bus_id(sim.pci_bus_id, &d, &b, &v, &f)) {
    throw config_error("device.sim.pci_bus_id (Config::sim.pci_bus_id) = \"" + sim.pci_bus_id +
                       "\": expected a PCI bus id like \"0000:65:00.0\" (as lspci -D prints it), or \"\"");
  }
  if (nvme.budget != 0 && nvme.paths.empty()) {
    throw config_error(
        "nvme.budget is set but nvme.paths is empty: give one directory per drive, e.g. "
        "paths = [\"/mnt/nvme0/tvmm\"]");
  }
  if (nvme.queue_depth == 0 || nvme.queue_depth > 4096) {
    throw config_error("nvme.queue_depth = " + std::to_string(nvme.queue_depth) + " must be between 1 and 4096");
  }
}

}  // namespace tvmm
