#include "vmm/core/host_placement.hpp"

#include <cstdio>

namespace tvmm::vmm {

HostPlacement::HostPlacement(const Config& config, device::DeviceBackend& dev, std::size_t bytes)
    : bind_threads_(config.bind_threads) {
  if (config.host_numa != "none" || config.bind_threads) {
    try {
      topo_ = topology::Topology::machine();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: %s; the host tier and the worker threads stay unbound\n", ex.what());
    }
  }
  if (topo_) {
    placement_ = topology::decide(*topo_, config.host_numa, config.host_numa_strict, dev.properties().pci_bus_id);
  } else {
    placement_.why = config.host_numa == "none" ? "host.numa = \"none\"" : "the machine's topology is unknown";
  }
  host_mem_ = std::make_unique<topology::HostBuffer>(topo_.get(), placement_, bytes);
  const auto cpus = worker_cpus();
  if (cpus.empty()) {
    threads_outcome_ = !config.bind_threads
                           ? "not bound: host.bind_threads = false"
                           : "not bound: the host tier is not on one node (" + placement_.describe() + ")";
    return;
  }
  std::string list;
  for (unsigned c : cpus) list += (list.empty() ? "" : ",") + std::to_string(c);
  const auto st = dev.set_worker_cpus(cpus);
  threads_outcome_ =
      st.ok() ? "stream threads bound to CPUs " + list + " (node " + std::to_string(placement_.nodes.front()) + ")"
              : std::string("stream threads not bound: ") + device::errc_name(st.code);
  if (!st.ok() && st.code != device::Errc::not_supported) {
    std::fprintf(stderr, "tvmm: binding the device's worker threads to CPUs %s failed (%s); they stay unbound\n",
                 list.c_str(), device::errc_name(st.code));
  }
}

std::vector<unsigned> HostPlacement::worker_cpus() const {
  if (!bind_threads_ || !topo_ || placement_.kind != topology::Placement::Kind::node) return {};
  const auto* node = topo_->node(placement_.nodes.front());
  return node != nullptr ? node->cpus : std::vector<unsigned>{};
}

void HostPlacement::bind_io_threads(storage::StorageBackend& storage) {
  const auto cpus = worker_cpus();
  if (cpus.empty()) return;
  const int n = storage.bind_workers(cpus);
  if (n < 0) {
    std::fprintf(stderr, "tvmm: binding the NVMe tier's I/O threads failed; they stay unbound\n");
    threads_outcome_ += "; I/O threads not bound (the OS refused)";
  } else if (n > 0) {
    threads_outcome_ += "; " + std::to_string(n) + " I/O threads too";
  }
}

Placement HostPlacement::describe() const {
  return {placement_.describe(), placement_.why, host_mem_->outcome(), threads_outcome_};
}

}  // namespace tvmm::vmm
