// The timeline (timeline.file / TVMM_TIMELINE): valid Chrome trace-event JSON with the promised lanes
// (copy engines, the NVMe I/O queue, streams, pinning threads, evictions) and an event per page move,
// NVMe batch, pin, pin stall and eviction.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

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
