#include "bench/workloads/host_bandwidth.hpp"

#include <cstdio>
#include <optional>
#include <sstream>
#include <vector>

#include "backends/topology/topology.hpp"
#include "bench/workloads/json_records.hpp"
#include "bench/workloads/page_moves.hpp"
#include "tvmm/tvmm.hpp"

namespace tvmm::bench {

namespace {

struct Row {
  std::string label, numa, outcome;
  double gbs = 0;
};

// Page-ins and write-backs through the host tier at memcpy speed (unthrottled bus): four tensors over
// a device that holds one, each pinned read-write in turn, so every pin moves one tensor in and one out.
Row measure(const HostBandwidthOptions& o, const std::string& label, const std::string& numa) {
  Config cfg;
  cfg.page_size = 2 * MiB;
  const std::size_t tensor = o.tensor_mib * MiB;
  cfg.device_budget = tensor;
  cfg.host_budget = 4 * tensor;
  cfg.host_numa = numa;
  cfg.sim.pci_bus_id = o.pci_bus_id;
  Pager pager(cfg);
  const double gbs = page_move_gbs(pager, 4, tensor, o.sweeps);
  return {label, numa, pager.placement().host_outcome, gbs};
}

}  // namespace

int run_host_bandwidth(const HostBandwidthOptions& o) {
  const auto topo = topology::Topology::machine();
  std::vector<std::pair<std::string, std::string>> cases;  // label, host.numa
  cases.emplace_back("near", "auto");
  // The far node: the first one that is not where auto goes.
  std::optional<unsigned> near;
  if (!o.pci_bus_id.empty()) near = topo->node_near_pci(o.pci_bus_id);
  if (!near) near = topo->nodes().front().id;
  for (const auto& n : topo->nodes()) {
    if (n.id != *near) {
      cases.emplace_back("far", std::to_string(n.id));
      break;
    }
  }
  cases.emplace_back("unbound", "none");
  std::vector<Row> rows;
  try {
    for (const auto& [label, numa] : cases) rows.push_back(measure(o, label, numa));
  } catch (const error& e) {
    std::fprintf(stderr, "tvmm-bench: %s\n", e.what());
    return 1;
  }
  std::printf(
      "workload host-bandwidth: 4 tensors of %zu MiB over a device holding one, %d sweeps, unthrottled "
      "(memcpy) copies on the simulated GPU\n",
      o.tensor_mib, o.sweeps);
  if (topo->nodes().size() == 1) {
    std::printf(
        "this machine has one NUMA node: there is no far node, and near and unbound are the same memory "
        "(one figure; their difference is noise)\n");
  }
  std::printf("%-8s %-6s %10s  %s\n", "frames", "numa", "GB/s", "host tier");
  for (const auto& r : rows) {
    std::printf("%-8s %-6s %10.2f  %s\n", r.label.c_str(), r.numa.c_str(), r.gbs, r.outcome.c_str());
  }
  if (!o.json.empty()) {
    std::vector<std::string> records;
    for (const auto& r : rows) {
      std::ostringstream rec;
      rec << "{\"workload\": \"host-bandwidth\", \"frames\": \"" << r.label << "\", \"numa\": \"" << r.numa
          << "\", \"numa_nodes\": " << topo->nodes().size() << ", \"gbs\": " << r.gbs << "}";
      records.push_back(rec.str());
    }
    if (!write_json_records(o.json, records)) return 1;
  }
  return 0;
}

}  // namespace tvmm::bench
