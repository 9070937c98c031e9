// The timeline (timeline.file / TVMM_TIMELINE): valid Chrome trace-event JSON with the promised lanes
// (copy engines, the NVMe I/O queue, streams, pinning threads, evictions) and an event per page move,
// NVMe batch, pin, pin stall and eviction, dated by the device backend's timeline clock (modelled time
// on the simulator with timing "model").
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tvmm/tvmm.hpp"

using namespace tvmm;
using json = nlohmann::json;

namespace {

struct Trace {
  std::map<int, std::string> lanes;             // tid -> name
  std::map<std::string, std::vector<json>> on;  // lane name -> its events
};

Trace read_trace(const std::string& path) {
  const json doc = json::parse(test::read_file(path));  // throws on invalid JSON
  Trace t;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") t.lanes[e.at("tid").get<int>()] = e.at("args").at("name");
  }
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    EXPECT_TRUE(t.lanes.count(e.at("tid").get<int>())) << "an event on an unnamed lane: " << e.dump();
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    if (e.at("ph") == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
    t.on[t.lanes[e.at("tid").get<int>()]].push_back(e);
  }
  return t;
}

std::size_t count(const std::vector<json>& events, const std::string& name) {
  std::size_t n = 0;
  for (const auto& e : events) n += e.at("name") == name;
  return n;
}

}  // namespace

TEST(Timeline, IsChromeTraceJsonWithALanePerCopyEngineStreamThreadAndIoQueue) {
  test::TempDir dir, nvme_dir;
  const std::string path = dir.path() + "/trace.json";
  Stats stats;
  {
    Config c = test::small_config(2, 4);
    c.nvme.paths = {nvme_dir.path()};
    c.nvme.budget = 16 * 64 * KiB;
    c.nvme.backend = "posix";
    c.nvme.direct = false;
    c.timeline_file = path;
    Pager p(c);
    auto s = p.create_stream();
    std::vector<Tensor> ts;
    for (int i = 0; i < 8; ++i) ts.push_back(p.allocate(64 * KiB));  // 4x device + host: NVMe is used
    for (int round = 0; round < 2; ++round) {
      for (auto& t : ts) {
        auto pin = t.pin(s, Access::read_write);
        s.synchronize();
      }
    }
    { auto pin = ts[0].pin(Access::read); }  // a host pin: the thread's lane
    stats = p.stats();
  }
  const Trace t = read_trace(path);
  std::set<std::string> names;
  for (const auto& [tid, name] : t.lanes) names.insert(name);
  for (const char* lane :
       {"copy engine: host to device", "copy engine: device to host", "I/O queue: nvme", "evictions", "stream 1"}) {
    EXPECT_TRUE(names.count(lane)) << "no lane " << lane;
  }
  EXPECT_TRUE(
      std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.rfind("pins: thread ", 0) == 0; }));
  // An event per page move, eviction and pin, matching the counters.
  EXPECT_EQ(count(t.on.at("copy engine: host to device"), "page in"), stats.host_to_device.pages);
  EXPECT_EQ(count(t.on.at("copy engine: device to host"), "write-back"), stats.device_to_host.pages);
  EXPECT_EQ(t.on.at("evictions").size(), stats.evictions);
  EXPECT_EQ(count(t.on.at("stream 1"), "pin (hit)") + count(t.on.at("stream 1"), "pin (miss)"), 16u);
  EXPECT_GT(count(t.on.at("I/O queue: nvme"), "nvme write"), 0u);
  EXPECT_GT(count(t.on.at("I/O queue: nvme"), "nvme read"), 0u);
}

TEST(Timeline, ShortEnvironmentNamesSetTheStatsFileAndTheTimeline) {
  test::ScopedEnv stats("TVMM_STATS", "/tmp/s.json");
  test::ScopedEnv timeline("TVMM_TIMELINE", "/tmp/t.json");
  Config c;
  const auto applied = apply_environment(c);
  EXPECT_EQ(c.stats_file, "/tmp/s.json");
  EXPECT_EQ(c.timeline_file, "/tmp/t.json");
  EXPECT_NE(std::find(applied.begin(), applied.end(), "TVMM_STATS"), applied.end());
  // The long name wins when both are set.
  test::ScopedEnv long_name("TVMM_STATS_FILE", "/tmp/long.json");
  Config d;
  apply_environment(d);
  EXPECT_EQ(d.stats_file, "/tmp/long.json");
}

TEST(Timeline, TheOldEnvironmentNamesStillSetItAndTheCurrentOnesWin) {
  for (const char* old : {"TVMM_TRACE", "TVMM_TRACE_EVENTS"}) {
    test::ScopedEnv trace(old, "/tmp/old.json");
    Config c;
    const auto applied = apply_environment(c);
    EXPECT_EQ(c.timeline_file, "/tmp/old.json") << old;
    EXPECT_NE(std::find(applied.begin(), applied.end(), old), applied.end()) << old;
  }
  test::ScopedEnv old("TVMM_TRACE", "/tmp/old.json");
  test::ScopedEnv old_long("TVMM_TRACE_EVENTS", "/tmp/old-long.json");
  Config c;
  apply_environment(c);
  EXPECT_EQ(c.timeline_file, "/tmp/old-long.json");  // an old long name before an old short one
  test::ScopedEnv current("TVMM_TIMELINE", "/tmp/new.json");
  const auto applied = apply_environment(c);
  EXPECT_EQ(c.timeline_file, "/tmp/new.json");
  EXPECT_NE(std::find(applied.begin(), applied.end(), "TVMM_TIMELINE"), applied.end());
  EXPECT_EQ(std::find(applied.begin(), applied.end(), "TVMM_TRACE"), applied.end());
}

TEST(Timeline, ASecondTraceOnTheSameThreadNamesItsOwnLanes) {
  test::TempDir dir;
  for (int i = 0; i < 2; ++i) {  // the second pager may reuse the first's addresses
    const std::string path = dir.path() + "/trace" + std::to_string(i) + ".json";
    {
      Config c = test::small_config(2, 4);
      c.timeline_file = path;
      Pager p(c);
      auto t = p.allocate(64 * KiB);
      auto pin = t.pin(Access::write);  // a host pin: an instant on this thread's lane
    }
    const Trace t = read_trace(path);  // fails on an event whose lane is not named in this file
    EXPECT_TRUE(std::any_of(t.lanes.begin(), t.lanes.end(),
                            [](const auto& l) { return l.second.rfind("pins: thread ", 0) == 0; }));
  }
}

// With the simulator's timing "model" the events are dated in modelled time, as the device timed them:
// the host's own work takes none (a 300 ms sleep between two pins does not separate them), and a
// mapping call's modelled cost does. Until the timeline read the backend's clock it used the wall clock.
TEST(Timeline, OnTheModelledSimulatorEventsAreInModelledTime) {
  test::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  {
    Config c = test::small_config(2, 4);
    c.sim.timing = "model";
    c.sim.bandwidth_bytes_per_s = 1e9;  // a page in 66 us
    c.sim.vmm_costs.map = std::chrono::milliseconds(5);
    c.timeline_file = path;
    Pager p(c);
    auto s = p.create_stream();
    std::vector<Tensor> ts;
    for (int i = 0; i < 3; ++i) ts.push_back(p.allocate(64 * KiB));
    s.busy_for(std::chrono::milliseconds(1));
    s.synchronize();  // this thread now has the device's modelled time
    for (auto& t : ts) {
      auto pin = t.pin(s, Access::write);  // its address is mapped to a frame: 5 ms of modelled host time
      if (&t == &ts[0]) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // host work: no time
    }
    { auto pin = ts[0].pin(s, Access::read); }  // evicted by the third: a page-in, after a write-back
    s.synchronize();
  }
  const Trace t = read_trace(path);
  std::vector<double> pins;  // microseconds
  for (const auto& e : t.on.at("stream 1")) pins.push_back(e.at("ts").get<double>());
  ASSERT_EQ(pins.size(), 4u);
  for (std::size_t i = 1; i < pins.size(); ++i) EXPECT_GE(pins[i], pins[i - 1]);
  EXPECT_GE(pins[0], 5e3);              // after its page's map
  EXPECT_GE(pins[1] - pins[0], 5e3);    // another map
  EXPECT_LT(pins[1] - pins[0], 100e3);  // but not the sleep
  // The copies are dated on the same modelled clock: the page-in is queued after the write-back that
  // frees its frame, and completes no sooner than its 66 us on the bus, after the write-back's end.
  const auto& in = t.on.at("copy engine: host to device");
  const auto& out = t.on.at("copy engine: device to host");
  ASSERT_EQ(in.size(), 1u);
  ASSERT_GE(out.size(), 1u);
  EXPECT_GE(in[0].at("ts").get<double>(), pins[2]);
  EXPECT_GE(in[0].at("dur").get<double>(), 60.0);
  EXPECT_GE(in[0].at("ts").get<double>() + in[0].at("dur").get<double>(),
            out[0].at("ts").get<double>() + out[0].at("dur").get<double>());
}
