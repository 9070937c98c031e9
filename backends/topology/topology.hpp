#pragma once
// The machine's topology, read with hwloc: NUMA nodes (memory, CPUs) and PCI devices with the node
// nearest each. Loaded from this machine (with I/O devices) or from an hwloc XML file, so placement
// decisions can be tested against machines the tests do not run on.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct hwloc_topology;

namespace tvmm::topology {

//! A NUMA node: its OS index, local memory and the OS indexes of its CPUs.
struct NumaNode {
  unsigned id = 0;
  std::uint64_t memory_bytes = 0;
  std::vector<unsigned> cpus;
};

//! A PCI device: bus id ("0000:65:00.0"), vendor and device ids, class, and its nearest NUMA node
//! (none when the topology does not say, e.g. a single-node machine reporting no locality).
struct PciDevice {
  std::string bus_id;
  std::uint16_t vendor = 0;
  std::uint16_t device = 0;
  std::uint16_t class_id = 0;  //!< e.g. 0x0302 (3D controller), 0x0300 (VGA)
  std::optional<unsigned> node;
  //! A display or 3D controller from NVIDIA (vendor 0x10de).
  [[nodiscard]] bool is_nvidia_gpu() const noexcept {
    return vendor == 0x10de && (class_id == 0x0300 || class_id == 0x0302);
  }
};

class Topology {
 public:
  //! This machine, with PCI devices. Throws std::runtime_error if hwloc cannot read it.
  static Topology load();
  //! This machine, loaded once per process and shared (loading with I/O devices takes milliseconds).
  static std::shared_ptr<const Topology> machine();
  //! An hwloc XML export (`lstopo --of xml`), for tests and `tvmm info --topology`. Throws
  //! std::runtime_error naming the file if it cannot be read or parsed.
  static Topology from_xml_file(const std::string& path);

  Topology(Topology&& other) noexcept;
  Topology& operator=(Topology&& other) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();

  //! NUMA nodes by OS index (at least one: a machine without NUMA shows one node with all CPUs).
  [[nodiscard]] const std::vector<NumaNode>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const NumaNode* node(unsigned id) const noexcept;
  //! Every PCI device hwloc reports.
  [[nodiscard]] const std::vector<PciDevice>& pci_devices() const noexcept { return pci_; }
  //! The NUMA node nearest the PCI device with this bus id ("0000:65:00.0" or "65:00.0"); none if the
  //! device is unknown or has no locality.
  [[nodiscard]] std::optional<unsigned> node_near_pci(std::string_view bus_id) const;
  //! True when this describes the running machine (binding calls act on it), false for XML.
  [[nodiscard]] bool this_system() const noexcept { return this_system_; }
  //! The hwloc handle, for binding calls (placement.cpp).
  [[nodiscard]] hwloc_topology* raw() const noexcept { return topo_; }

 private:
  explicit Topology(hwloc_topology* topo, bool this_system);
  void read();

  hwloc_topology* topo_ = nullptr;
  bool this_system_ = false;
  std::vector<NumaNode> nodes_;
  std::vector<PciDevice> pci_;
};

//! Parses a PCI bus id: "DDDD:BB:DD.F" or "BB:DD.F" (domain 0), hexadecimal. False if malformed.
bool parse_pci_bus_id(std::string_view text, unsigned* domain, unsigned* bus, unsigned* dev, unsigned* func);
//! A PCI bus id as Linux names the device ("0000:1a:00.0": 4-digit domain, small hex digits), from any
//! form parse_pci_bus_id reads (the CUDA driver's is "00000000:1A:00.0"); nullopt if malformed.
std::optional<std::string> linux_pci_bus_id(std::string_view text);

}  // namespace tvmm::topology
