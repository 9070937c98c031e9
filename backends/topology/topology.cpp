#include "backends/topology/topology.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace tvmm::topology {

namespace {

std::vector<unsigned> bitmap_indexes(hwloc_const_bitmap_t set) {
  std::vector<unsigned> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(static_cast<unsigned>(i));
  return out;
}

hwloc_topology_t init_with_io() {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) throw std::runtime_error("hwloc: cannot initialise a topology");
  // PCI devices (and bridges to place them) are needed to find a GPU's nearest node.
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return t;
}

}  // namespace

bool parse_pci_bus_id(std::string_view text, unsigned* domain, unsigned* bus, unsigned* dev, unsigned* func) {
  // [DDDD:]BB:DD.F, hexadecimal digits only (no "0x", no signs, nothing after).
  auto field = [&](std::string_view& t, char end, unsigned max, unsigned* out) {
    const auto stop = end == 0 ? t.size() : t.find(end);
    if (stop == 0 || stop == std::string_view::npos || stop > 8) return false;  // CUDA prints 8-digit domains
    unsigned v = 0;
    for (char c : t.substr(0, stop)) {
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<unsigned>(d);
    }
    if (v > max) return false;
    *out = v;
    t.remove_prefix(end == 0 ? stop : stop + 1);
    return true;
  };
  std::string_view t = text;
  unsigned d = 0;
  const bool has_domain = std::count(t.begin(), t.end(), ':') == 2;
  if (has_domain && !field(t, ':', 0xffff, &d)) return false;
  unsigned b = 0, v = 0, f = 0;
  if (!field(t, ':', 0xff, &b) || !field(t, '.', 0x1f, &v) || !field(t, 0, 0x7, &f) || !t.empty()) return false;
  *domain = d;
  *bus = b;
  *dev = v;
  *func = f;
  return true;
}

Topology::Topology(hwloc_topology* topo, bool this_system) : topo_(topo), this_system_(this_system) {
  try {
    read();
  } catch (...) {  // std::bad_alloc: no destructor runs for an object not yet built, so free the topology here
    hwloc_topology_destroy(topo_);
    topo_ = nullptr;
    throw;
  }
}

Topology Topology::load() {
  hwloc_topology_t t = init_with_io();
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    throw std::runtime_error("hwloc: cannot read this machine's topology");
  }
  return Topology(t, true);
}

std::shared_ptr<const Topology> Topology::machine() {
  static std::once_flag once;
  static std::shared_ptr<const Topology> shared;
  std::call_once(once, [] { shared = std::make_shared<const Topology>(load()); });
  return shared;
}

Topology Topology::from_xml_file(const std::string& path) {
  hwloc_topology_t t = init_with_io();
  if (hwloc_topology_set_xml(t, path.c_str()) != 0 || hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    throw std::runtime_error("hwloc: cannot load the topology XML file " + path +
                             " (an `lstopo --of xml` export is expected)");
  }
  return Topology(t, false);
}

Topology::Topology(Topology&& other) noexcept
    : topo_(std::exchange(other.topo_, nullptr)),
      this_system_(other.this_system_),
      nodes_(std::move(other.nodes_)),
      pci_(std::move(other.pci_)) {}

Topology& Topology::operator=(Topology&& other) noexcept {
  if (this != &other) {
    if (topo_ != nullptr) hwloc_topology_destroy(topo_);
    topo_ = std::exchange(other.topo_, nullptr);
    this_system_ = other.this_system_;
    nodes_ = std::move(other.nodes_);
    pci_ = std::move(other.pci_);
  }
  return *this;
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

void Topology::read() {
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n)) != nullptr;) {
    nodes_.push_back({n->os_index, n->attr != nullptr ? n->attr->numanode.local_memory : 0, bitmap_indexes(n->cpuset)});
  }
  for (hwloc_obj_t d = nullptr; (d = hwloc_get_next_pcidev(topo_, d)) != nullptr;) {
    const auto& a = d->attr->pcidev;
    char id[32];
    std::snprintf(id, sizeof id, "%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
    PciDevice dev;
    dev.bus_id = id;
    dev.vendor = a.vendor_id;
    dev.device = a.device_id;
    dev.class_id = a.class_id;
    // The device's locality is its first non-I/O ancestor; it names one node only if that ancestor's
    // nodeset has exactly one (a device attached to the whole machine of a multi-node box has none).
    hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo_, d);
    if (parent != nullptr && parent->nodeset != nullptr && hwloc_bitmap_weight(parent->nodeset) == 1) {
      dev.node = static_cast<unsigned>(hwloc_bitmap_first(parent->nodeset));
    }
    pci_.push_back(std::move(dev));
  }
}

const NumaNode* Topology::node(unsigned id) const noexcept {
  for (const auto& n : nodes_) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

std::optional<std::string> linux_pci_bus_id(std::string_view text) {
  unsigned d = 0, b = 0, v = 0, f = 0;
  if (!parse_pci_bus_id(text, &d, &b, &v, &f)) return std::nullopt;
  char id[32];
  std::snprintf(id, sizeof id, "%04x:%02x:%02x.%01x", d, b, v, f);
  return std::string(id);
}

std::optional<unsigned> Topology::node_near_pci(std::string_view bus_id) const {
  const auto id = linux_pci_bus_id(bus_id);
  if (!id) return std::nullopt;
  for (const auto& dev : pci_) {
    if (dev.bus_id == *id) return dev.node;
  }
  return std::nullopt;
}

}  // namespace tvmm::topology
