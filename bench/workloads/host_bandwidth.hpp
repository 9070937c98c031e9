#pragma once
// tvmm-bench --workload host-bandwidth: host-tier copy bandwidth with the frames bound to the GPU's
// NUMA node ("near"), to another node ("far", on machines with more than one) and unbound.

#include <string>

namespace tvmm::bench {

struct HostBandwidthOptions {
  std::size_t tensor_mib = 64;  // each of 4 tensors; the device holds one
  int sweeps = 3;
  std::string pci_bus_id;  // the simulated GPU's, so "near" is the node the topology puts it on
  std::string json;        // write records here too
};

//! Runs the matrix, prints a table (and JSON if asked); returns the exit status.
int run_host_bandwidth(const HostBandwidthOptions& options);

}  // namespace tvmm::bench
