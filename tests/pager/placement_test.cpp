// NUMA placement on the machine the tests run on: the host tier's frames really sit on the chosen
// node (asked of the kernel), worker threads really run on the node's CPUs (affinity read back), and
// a binding that cannot be done falls back to unbound memory with one warning.
#include <gtest/gtest.h>

#include <pthread.h>

#include <cstring>
#include <string>

#include "backends/device/sim/sim_device.hpp"
#include "backends/topology/placement.hpp"
#include "test_support.hpp"

using namespace tvmm;
using topology::Topology;

namespace {

// Containers often forbid memory-policy calls (Docker's default seccomp profile blocks mbind without
// CAP_SYS_NICE): there the pager falls back (tested below) and these checks cannot run.
bool binding_forbidden(const std::string& outcome) {
  return outcome.find("not permitted") != std::string::npos || outcome.find("not implemented") != std::string::npos;
}

std::vector<unsigned> stream_thread_cpus(Stream& s) {
  std::vector<unsigned> cpus;
  s.launch([&cpus] { cpus = topology::thread_cpus(pthread_self()); });
  s.synchronize();
  return cpus;
}

}  // namespace

TEST(NumaPlacement, HostMemoryBoundToANodeIsPlacedThereByTheKernel) {
  const auto machine = Topology::machine();
  const unsigned node = machine->nodes().back().id;  // the last node: on a multi-node box, not just node 0
  topology::HostBuffer b(machine.get(), topology::decide(*machine, std::to_string(node), false, ""), 4 * MiB);
  if (binding_forbidden(b.outcome())) GTEST_SKIP() << b.outcome();
  ASSERT_TRUE(b.bound()) << b.outcome();
  std::memset(b.data(), 1, b.size());  // placement happens at first touch
  EXPECT_EQ(topology::memory_nodes(*machine, b.data(), b.size()), (std::vector<unsigned>{node}));
}

TEST(NumaPlacement, ThePagerBindsItsHostTierAndSaysWhere) {
  Config c = test::small_config(2, 8);
  Pager p(c);  // host.numa = "auto": on the simulator without a bus id, the lowest node
  const auto pl = p.placement();
  if (binding_forbidden(pl.host_outcome)) GTEST_SKIP() << pl.host_outcome;
  const auto lowest = Topology::machine()->nodes().front().id;
  EXPECT_EQ(pl.host_policy, "node " + std::to_string(lowest) + " (preferred)");
  EXPECT_EQ(pl.host_outcome, "bound: " + pl.host_policy);
  EXPECT_NE(pl.host_reason.find("device.sim.pci_bus_id"), std::string::npos) << pl.host_reason;

  c.host_numa = "none";
  Pager none(c);
  EXPECT_EQ(none.placement().host_policy, "none");
  EXPECT_EQ(none.placement().host_outcome, "unbound: host.numa = \"none\"");
}

TEST(NumaPlacement, AMissingNodeIsAConfigErrorNamingTheNodesThere) {
  Config c = test::small_config(2, 8);
  c.host_numa = "4095";
  try {
    Pager p(c);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no NUMA node 4095"), std::string::npos) << msg;
    EXPECT_NE(msg.find("this machine has " + std::to_string(Topology::machine()->nodes().front().id)),
              std::string::npos)
        << msg;
  }
}

TEST(NumaPlacement, ABindingThatCannotBeDoneFallsBackUnboundWithOneWarning) {
  const auto machine = Topology::machine();
  topology::Placement impossible;  // a node no machine here has, bypassing decide()'s check
  impossible.kind = topology::Placement::Kind::node;
  impossible.nodes = {1000};
  topology::rearm_binding_warning();
  testing::internal::CaptureStderr();
  topology::HostBuffer a(machine.get(), impossible, 1 * MiB);
  topology::HostBuffer b(machine.get(), impossible, 1 * MiB);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(a.bound());
  EXPECT_NE(a.outcome().find("unbound: binding to node 1000 (preferred) failed"), std::string::npos) << a.outcome();
  EXPECT_NE(err.find("binding the host tier to node 1000 (preferred) failed"), std::string::npos) << err;
  EXPECT_NE(err.find("continuing with unbound host memory"), std::string::npos) << err;
  EXPECT_EQ(err.find("tvmm:"), err.rfind("tvmm:")) << "warned more than once: " << err;
  std::memset(a.data(), 2, a.size());  // still usable memory
}

TEST(NumaPlacement, WorkerThreadsRunOnTheHostTiersNode) {
  const auto machine = Topology::machine();
  Pager p(test::small_config(2, 8));
  auto s = p.create_stream();
  EXPECT_EQ(stream_thread_cpus(s), machine->nodes().front().cpus);
  EXPECT_NE(p.placement().threads.find("stream threads bound to CPUs"), std::string::npos) << p.placement().threads;

  Config off = test::small_config(2, 8);
  off.bind_threads = false;
  Pager q(off);
  EXPECT_EQ(q.placement().threads, "not bound: host.bind_threads = false");
}

TEST(NumaPlacement, TheSimulatorBindsExistingAndNewStreamThreads) {
  const auto all = topology::thread_cpus(pthread_self());
  if (all.size() < 2) GTEST_SKIP() << "one CPU: nothing to restrict";
  SimDeviceConfig c;
  c.granularity = 64 * KiB;
  device::SimDevice dev(c, 4 * 64 * KiB);
  device::StreamHandle before = nullptr;
  ASSERT_TRUE(dev.create_stream(&before).ok());
  const std::vector<unsigned> one = {all.back()};
  ASSERT_TRUE(dev.set_worker_cpus(one).ok());
  device::StreamHandle after = nullptr;
  ASSERT_TRUE(dev.create_stream(&after).ok());
  for (auto s : {before, after}) {
    std::vector<unsigned> seen;
    ASSERT_TRUE(dev.launch_host(
                       s,
                       [](void* u) { *static_cast<std::vector<unsigned>*>(u) = topology::thread_cpus(pthread_self()); },
                       &seen)
                    .ok());
    ASSERT_TRUE(dev.synchronize_stream(s).ok());
    EXPECT_EQ(seen, one);
  }
  EXPECT_EQ(dev.set_worker_cpus({}).code, device::Errc::invalid_value);
  EXPECT_TRUE(dev.destroy_stream(before).ok());
  EXPECT_TRUE(dev.destroy_stream(after).ok());
}
