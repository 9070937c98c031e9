#pragma once
// NUMA placement, in one owner: decides the host tier's node (host.numa), allocates the tier's memory
// there, binds the device backend's worker threads to that node's CPUs (host.bind_threads) and, with
// an NVMe tier, its I/O threads. A machine whose topology is unknown keeps everything unbound and says
// so (Pager::placement()).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "backends/storage/storage_backend.hpp"
#include "backends/topology/placement.hpp"
#include "backends/topology/topology.hpp"
#include "tvmm/config.hpp"
#include "tvmm/pager.hpp"

namespace tvmm::vmm {

class HostPlacement {
 public:
  //! Decides the node, allocates `bytes` of host memory for the host tier and binds `device`'s worker
  //! threads. Throws what topology::HostBuffer throws (out of memory; host.numa_strict refused).
  HostPlacement(const Config& config, device::DeviceBackend& device, std::size_t bytes);
  HostPlacement(const HostPlacement&) = delete;
  HostPlacement& operator=(const HostPlacement&) = delete;

  //! The host tier's memory (`bytes` long; lives as long as this object).
  [[nodiscard]] void* memory() const noexcept { return host_mem_->data(); }
  //! Binds the NVMe tier's I/O threads to the host tier's node, if the device's threads were bound.
  void bind_io_threads(storage::StorageBackend& storage);
  //! What was decided and why, for Pager::placement().
  [[nodiscard]] Placement describe() const;

 private:
  [[nodiscard]] std::vector<unsigned> worker_cpus() const;

  bool bind_threads_;
  std::shared_ptr<const topology::Topology> topo_;  // null with host.numa = none and no thread binding
  topology::Placement placement_;
  std::unique_ptr<topology::HostBuffer> host_mem_;
  std::string threads_outcome_;
};

}  // namespace tvmm::vmm
