#pragma once
// Placement of the host tier and of worker threads on NUMA nodes (config `host.numa`,
// `host.numa_strict`, `host.bind_threads`). The host tier's frames are bound before anything touches
// them (and so before a GPU driver pins them: pinned pages cannot migrate); a binding that fails is
// reported once on stderr and the pager goes on unbound, never silently.

#include <pthread.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "backends/topology/topology.hpp"

namespace tvmm::topology {

//! Where the host tier's frames go, and why.
struct Placement {
  enum class Kind : std::uint8_t { none, node, interleave };
  Kind kind = Kind::none;
  std::vector<unsigned> nodes;  //!< node: one; interleave: every node
  bool strict = false;          //!< only those nodes (MPOL_BIND), else preferred (MPOL_PREFERRED)
  std::string why;              //!< what decided it, for people
  //! "node 1 (strict)", "interleave over nodes 0,1", "none".
  [[nodiscard]] std::string describe() const;
};

//! Decides the placement for `numa`: "none"; "interleave" (every node); a node id ("1"); or "auto",
//! the node nearest the GPU with PCI bus id `gpu_bus_id` (empty: unknown), else node 0 (the lowest).
//! Throws tvmm::config_error for a node id the topology does not have, or another value.
Placement decide(const Topology& topo, std::string_view numa, bool strict, std::string_view gpu_bus_id);

//! Anonymous memory for the host tier, bound as `placement` says before it is touched.
class HostBuffer {
 public:
  //! `topo` may be null when the placement is none. Throws tvmm::out_of_memory (a std::bad_alloc)
  //! naming host.budget if mmap cannot reserve the address space.
  HostBuffer(const Topology* topo, const Placement& placement, std::size_t bytes);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  [[nodiscard]] void* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  //! True if the placement was applied (false for none, or when binding failed).
  [[nodiscard]] bool bound() const noexcept { return bound_; }
  //! What happened: "bound: node 1 (preferred)", "unbound: host.numa = none", "unbound: <error>".
  [[nodiscard]] const std::string& outcome() const noexcept { return outcome_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  bool bound_ = false;
  std::string outcome_;
};

//! Lets the next failed binding warn again (the warning is shown once per process; for tests).
void rearm_binding_warning() noexcept;

//! Restricts `thread` to `cpus`. False, with the reason in `why`, if the OS refuses.
bool bind_thread(pthread_t thread, const std::vector<unsigned>& cpus, std::string* why);
//! The CPUs `thread` may run on.
std::vector<unsigned> thread_cpus(pthread_t thread);
//! The NUMA nodes holding the touched pages of [p, p + bytes) (asks the kernel, via hwloc).
std::vector<unsigned> memory_nodes(const Topology& topo, const void* p, std::size_t bytes);

}  // namespace tvmm::topology
