#include "backends/topology/placement.hpp"

#include <hwloc.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <new>
#include <system_error>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::topology {

namespace {

std::string join(const std::vector<unsigned>& v) {
  std::string s;
  for (unsigned x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string node_list(const Topology& topo) {
  std::vector<unsigned> ids;
  for (const auto& n : topo.nodes()) ids.push_back(n.id);
  return join(ids);
}

std::atomic<bool> warned{false};

void warn_once(const std::string& what) {
  if (!warned.exchange(true)) {
    std::fprintf(stderr, "tvmm: %s; continuing with unbound host memory (this warning is shown once)\n", what.c_str());
  }
}

}  // namespace

std::string Placement::describe() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::node: return "node " + join(nodes) + (strict ? " (strict)" : " (preferred)");
    case Kind::interleave: return "interleave over nodes " + join(nodes);
  }
  return "none";
}

Placement decide(const Topology& topo, std::string_view numa, bool strict, std::string_view gpu_bus_id) {
  Placement p;
  p.strict = strict;
  if (numa == "none") {
    p.why = "host.numa = \"none\"";
    return p;
  }
  if (topo.nodes().empty()) {
    p.why = "the topology shows no NUMA node";
    return p;
  }
  if (numa == "interleave") {
    p.kind = Placement::Kind::interleave;
    for (const auto& n : topo.nodes()) p.nodes.push_back(n.id);
    p.why = "host.numa = \"interleave\"";
    return p;
  }
  p.kind = Placement::Kind::node;
  if (numa == "auto") {
    if (!gpu_bus_id.empty()) {
      if (auto near = topo.node_near_pci(gpu_bus_id)) {
        p.nodes = {*near};
        p.why = "host.numa = \"auto\": the GPU at " + std::string(gpu_bus_id) + " is on node " + std::to_string(*near);
        return p;
      }
      p.why = "host.numa = \"auto\": the topology does not place the GPU at " + std::string(gpu_bus_id) +
              " on one node, so the lowest node";
    } else {
      p.why =
          "host.numa = \"auto\": the GPU's PCI bus id is not known (on the simulator, set "
          "device.sim.pci_bus_id), so the lowest node";
    }
    p.nodes = {topo.nodes().front().id};
    return p;
  }
  unsigned id = 0;
  const auto* end = numa.data() + numa.size();
  const auto [ptr, ec] = std::from_chars(numa.data(), end, id);
  if (ec != std::errc() || ptr != end || numa.empty()) {
    throw config_error("host.numa = \"" + std::string(numa) +
                       "\": expected \"auto\", \"none\", \"interleave\" or a NUMA node id (this machine has " +
                       node_list(topo) + ")");
  }
  if (topo.node(id) == nullptr) {
    throw config_error("host.numa = " + std::string(numa) + ": there is no NUMA node " + std::string(numa) +
                       " here (this machine has " + node_list(topo) + "); pick one of those or \"auto\"");
  }
  p.nodes = {id};
  p.why = "host.numa = " + std::string(numa);
  return p;
}

HostBuffer::HostBuffer(const Topology* topo, const Placement& placement, std::size_t bytes) : bytes_(bytes) {
  p_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p_ == MAP_FAILED) {
    const int err = errno;
    p_ = nullptr;
    // Address space, not memory (MAP_NORESERVE): only a budget beyond what the process may map fails here.
    throw out_of_memory("cannot reserve " + format_bytes(bytes) + " of address space for the host tier (mmap: " +
                        std::strerror(err) + "); lower host.budget (TVMM_HOST_BUDGET)");
  }
  if (placement.kind == Placement::Kind::none || topo == nullptr) {
    outcome_ = "unbound: " + (placement.why.empty() ? std::string("no placement") : placement.why);
    return;
  }
  if (!topo->this_system()) {
    outcome_ = "unbound: the topology is not this machine's";
    return;
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (unsigned n : placement.nodes) hwloc_bitmap_set(set, n);
  const auto policy = placement.kind == Placement::Kind::interleave ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
  int flags = HWLOC_MEMBIND_BYNODESET;
  if (placement.strict) flags |= HWLOC_MEMBIND_STRICT;
  const int rc = hwloc_set_area_membind(topo->raw(), p_, bytes, set, policy, flags);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0) {
    outcome_ = "unbound: binding to " + placement.describe() + " failed: " + std::generic_category().message(err);
    warn_once("binding the host tier to " + placement.describe() + " failed (" + std::generic_category().message(err) +
              ")");
    return;
  }
  bound_ = true;
  outcome_ = "bound: " + placement.describe();
}

HostBuffer::~HostBuffer() {
  if (p_ != nullptr) ::munmap(p_, bytes_);
}

void rearm_binding_warning() noexcept { warned = false; }

bool bind_thread(pthread_t thread, const std::vector<unsigned>& cpus, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cpus) {
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  const int rc = pthread_setaffinity_np(thread, sizeof set, &set);
  if (rc != 0 && why != nullptr) *why = std::generic_category().message(rc);
  return rc == 0;
}

std::vector<unsigned> thread_cpus(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> out;
  if (pthread_getaffinity_np(thread, sizeof set, &set) != 0) return out;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::vector<unsigned> memory_nodes(const Topology& topo, const void* p, std::size_t bytes) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  std::vector<unsigned> out;
  if (hwloc_get_area_memlocation(topo.raw(), p, bytes, set, HWLOC_MEMBIND_BYNODESET) == 0) {
    for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
      out.push_back(static_cast<unsigned>(i));
  }
  hwloc_bitmap_free(set);
  return out;
}

}  // namespace tvmm::topology
