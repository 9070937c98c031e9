// Topology and placement decisions against an hwloc XML topology of a machine the tests do not run
// on: two packages with one NUMA node each (CPUs 0-1, 64 GiB; CPUs 2-3, 32 GiB), a NIC at
// 0000:01:00.0 behind package 0 and an NVIDIA GPU (3D controller) at 0000:65:00.0 behind package 1.
#include <gtest/gtest.h>

#include <string>

#include "backends/topology/placement.hpp"
#include "tvmm/errors.hpp"

using namespace tvmm::topology;

namespace {
Topology two_nodes() { return Topology::from_xml_file(TVMM_SOURCE_DIR "/tests/data/topology/two-nodes-gpu.xml"); }
}  // namespace

TEST(Topology, ListsNodesWithMemoryAndCpusAndPciDevicesWithTheirNodes) {
  const auto t = two_nodes();
  EXPECT_FALSE(t.this_system());
  ASSERT_EQ(t.nodes().size(), 2u);
  EXPECT_EQ(t.nodes()[0].id, 0u);
  EXPECT_EQ(t.nodes()[0].memory_bytes, 64ull << 30);
  EXPECT_EQ(t.nodes()[0].cpus, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(t.nodes()[1].memory_bytes, 32ull << 30);
  EXPECT_EQ(t.nodes()[1].cpus, (std::vector<unsigned>{2, 3}));
  ASSERT_EQ(t.pci_devices().size(), 2u);
  const auto& gpu = t.pci_devices()[1];
  EXPECT_EQ(gpu.bus_id, "0000:65:00.0");
  EXPECT_TRUE(gpu.is_nvidia_gpu());
  EXPECT_FALSE(t.pci_devices()[0].is_nvidia_gpu());  // the NIC
  EXPECT_EQ(t.node_near_pci("0000:65:00.0"), 1u);
  EXPECT_EQ(t.node_near_pci("65:00.0"), 1u);  // domain 0 implied
  EXPECT_EQ(t.node_near_pci("0000:01:00.0"), 0u);
  EXPECT_EQ(t.node_near_pci("0000:99:00.0"), std::nullopt);  // no such device
  EXPECT_EQ(t.node_near_pci("not a bus id"), std::nullopt);
}

TEST(Topology, AMissingOrBadXmlFileIsReportedWithItsPath) {
  try {
    (void)Topology::from_xml_file("/nonexistent/topo.xml");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topo.xml"), std::string::npos) << e.what();
  }
}

TEST(Topology, PciBusIdsAreParsedStrictly) {
  unsigned d = 9, b = 9, v = 9, f = 9;
  EXPECT_TRUE(parse_pci_bus_id("0000:65:00.0", &d, &b, &v, &f));
  EXPECT_EQ(b, 0x65u);
  EXPECT_TRUE(parse_pci_bus_id("0001:b3:1f.7", &d, &b, &v, &f));
  EXPECT_EQ(d, 1u);
  EXPECT_EQ(v, 0x1fu);
  EXPECT_EQ(f, 7u);
  for (const char* bad : {"", "65:00", "0000:65:00.0x", "0000:65:20.0", "0000:65:00.8", "gpu0"}) {
    EXPECT_FALSE(parse_pci_bus_id(bad, &d, &b, &v, &f)) << bad;
  }
}

TEST(Placement, AutoPicksTheNodeNearestTheGpu) {
  const auto t = two_nodes();
  const auto p = decide(t, "auto", false, "0000:65:00.0");
  EXPECT_EQ(p.kind, Placement::Kind::node);
  EXPECT_EQ(p.nodes, (std::vector<unsigned>{1}));
  EXPECT_EQ(p.describe(), "node 1 (preferred)");
  EXPECT_NE(p.why.find("0000:65:00.0 is on node 1"), std::string::npos) << p.why;
  // Without a bus id (the simulator unless configured) or with an unknown one: the lowest node, saying why.
  const auto unknown = decide(t, "auto", false, "");
  EXPECT_EQ(unknown.nodes, (std::vector<unsigned>{0}));
  EXPECT_NE(unknown.why.find("device.sim.pci_bus_id"), std::string::npos) << unknown.why;
  EXPECT_EQ(decide(t, "auto", false, "0000:99:00.0").nodes, (std::vector<unsigned>{0}));
}

TEST(Placement, AnExplicitNodeIsHonouredAndStrictnessKept) {
  const auto t = two_nodes();
  const auto p = decide(t, "0", true, "0000:65:00.0");  // the far node from the GPU, on purpose
  EXPECT_EQ(p.nodes, (std::vector<unsigned>{0}));
  EXPECT_TRUE(p.strict);
  EXPECT_EQ(p.describe(), "node 0 (strict)");
}

TEST(Placement, InterleaveSpreadsOverEveryNodeAndNoneBindsNothing) {
  const auto t = two_nodes();
  const auto p = decide(t, "interleave", false, "0000:65:00.0");
  EXPECT_EQ(p.kind, Placement::Kind::interleave);
  EXPECT_EQ(p.nodes, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(p.describe(), "interleave over nodes 0,1");
  const auto none = decide(t, "none", false, "0000:65:00.0");
  EXPECT_EQ(none.kind, Placement::Kind::none);
  EXPECT_TRUE(none.nodes.empty());
}

TEST(Placement, UnknownNodesAndValuesAreConfigErrorsListingTheNodes) {
  const auto t = two_nodes();
  for (const char* bad : {"7", "node1", "-1", ""}) {
    try {
      (void)decide(t, bad, false, "");
      FAIL() << "expected config_error for '" << bad << "'";
    } catch (const tvmm::config_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("host.numa"), std::string::npos) << msg;
      EXPECT_NE(msg.find("0,1"), std::string::npos) << msg;  // the nodes there are
    }
  }
}

TEST(Placement, MemoryIsNotBoundThroughATopologyOfAnotherMachine) {
  const auto t = two_nodes();
  HostBuffer b(&t, decide(t, "1", false, ""), 1 << 20);
  EXPECT_FALSE(b.bound());
  EXPECT_NE(b.outcome().find("not this machine"), std::string::npos) << b.outcome();
}
