// tvmm-bench --out: summary.json validates against the fields docs/benchmarks.md documents, the CSV
// files and plots are there; the kernel-as-pager peer runs or says why not.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "bench/peers/kernel_pager.hpp"
#include "bench/workloads/report.hpp"
#include "test_support.hpp"

namespace tvmm::bench {
namespace {

using nlohmann::json;

// The "summary.json fields" table of docs/benchmarks.md: field -> type (number, integer, string, object).
std::map<std::string, std::string> documented_fields() {
  const auto doc = test::read_file(std::string(TVMM_SOURCE_DIR) + "/docs/benchmarks.md");
  const auto start = doc.find("## summary.json fields");
  EXPECT_NE(start, std::string::npos) << "docs/benchmarks.md has no \"## summary.json fields\" section";
  std::map<std::string, std::string> fields;
  std::istringstream in(doc.substr(start));
  std::string line;
  std::getline(in, line);
  const std::regex row(R"(^\| `([a-z_]+)` \| (number|integer|string|boolean|object) \|)");
  while (std::getline(in, line) && line.rfind("## ", 0) != 0) {
    std::smatch m;
    if (std::regex_search(line, m, row)) fields[m[1]] = m[2];
  }
  return fields;
}

bool has_type(const json& v, const std::string& type) {
  if (type == "number") return v.is_number() || v.is_null();  // null: not finite (no Belady bytes to divide by)
  if (type == "integer") return v.is_number_unsigned() || v.is_number_integer();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  return v.is_object();
}

// A directory on a real disk for the NVMe tier and the kernel peer (the build tree, not a tmpfs /tmp).
std::string disk_dir() {
  struct statfs fs {};
  const std::string build = TVMM_BINARY_DIR;
  if (::statfs("/var/tmp", &fs) == 0 && fs.f_type != TMPFS_MAGIC) return "/var/tmp";
  return build;
}

TEST(BenchSummary, ValidatesAgainstItsDocumentedFields) {
  const auto fields = documented_fields();
  ASSERT_FALSE(fields.empty());
  // The documentation and the code list the same fields.
  std::set<std::string> in_code(summary_fields().begin(), summary_fields().end());
  std::set<std::string> in_doc;
  for (const auto& [k, v] : fields) in_doc.insert(k);
  EXPECT_EQ(in_code, in_doc);

  test::TempDir dir;
  const auto out = dir.path() + "/out";
  const std::string cmd = std::string(TVMM_BENCH_BIN) +
                          " --workload train --layers 3 --tensor-mib 2 --iterations 3 --ratios 2,3 --policies "
                          "lru,trace --compute-us 100 --host-fraction 0.5 --disk-dir " +
                          disk_dir() + " --out " + out + " > " + dir.path() + "/stdout 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(dir.path() + "/stdout");
  const auto summary = json::parse(test::read_file(out + "/summary.json"));
  ASSERT_TRUE(summary.is_array());
  ASSERT_EQ(summary.size(), 4u);  // 2 ratios x 2 policies
  for (const auto& rec : summary) {
    for (const auto& [name, type] : fields) {
      ASSERT_TRUE(rec.contains(name)) << "record lacks " << name << ": " << rec.dump();
      EXPECT_TRUE(has_type(rec[name], type)) << name << " is not a " << type << ": " << rec[name].dump();
    }
    EXPECT_EQ(rec["workload"], "train");
    EXPECT_EQ(rec["backend"], "sim");
    EXPECT_EQ(rec["warmup_iterations"], 2);  // --iterations 3: the default warm-up, then one measured
    EXPECT_EQ(rec["measured_iterations"], 1);
    EXPECT_GT(rec["step_time_s"].get<double>(), 0);
    EXPECT_GT(rec["bytes_moved"].get<double>(), 0);
    // Nothing beats the ideal bound, and the window bound is the tighter of the two.
    EXPECT_GE(rec["time_vs_bound"].get<double>(), 0.99);
    EXPECT_GE(rec["window_bound_s"].get<double>(), rec["bound_s"].get<double>());
    // Every peer is there: measured (with a step time or bytes) or skipped with a reason.
    const auto& peers = rec["peers"];
    for (const char* p : {"bound", "belady", "naive", "all_in_memory", "kernel", "tvmm_wall", "unified_memory"}) {
      ASSERT_TRUE(peers.contains(p)) << p;
      const auto& v = peers[p];
      const bool measured = v.contains("step_time_s") || v.contains("bytes_moved");
      const bool skipped =
          v.contains("skipped") && v["skipped"].is_string() && !v["skipped"].get<std::string>().empty();
      EXPECT_TRUE(measured != skipped) << p << ": " << v.dump();
    }
    EXPECT_TRUE(peers["naive"].contains("step_time_s"));
    EXPECT_EQ(peers["bound"]["step_time_s"], rec["bound_s"]);
    EXPECT_EQ(peers["bound"]["window_step_time_s"], rec["window_bound_s"]);
    // The lower bound is the largest of its five figures; the window program's split adds up.
    const auto& terms = peers["bound"]["lower_terms"];
    for (const char* k : {"compute_s", "loads_s", "window_s", "window_in_s", "window_out_s", "window_compute_s",
                          "window_launch_wait_s", "launches_s", "disk_s"})
      ASSERT_TRUE(terms.contains(k) && terms[k].is_number()) << k << ": " << terms.dump();
    EXPECT_DOUBLE_EQ(
        rec["lower_bound_s"].get<double>(),
        std::max({terms["compute_s"].get<double>(), terms["loads_s"].get<double>(), terms["window_s"].get<double>(),
                  terms["launches_s"].get<double>(), terms["disk_s"].get<double>()}));
    EXPECT_NEAR(terms["window_in_s"].get<double>() + terms["window_out_s"].get<double>() +
                    terms["window_compute_s"].get<double>() + terms["window_launch_wait_s"].get<double>(),
                terms["window_s"].get<double>(), 1e-12);
    ASSERT_TRUE(terms["runs"].is_array());
    for (const auto& run : terms["runs"]) {
      EXPECT_GT(std::max(run["in_s"].get<double>(), run["out_s"].get<double>()), run["compute_s"].get<double>());
      EXPECT_GT(run["kernels"].get<std::size_t>(), 0u);
      EXPECT_GE(run["launch_wait_s"].get<double>(), 0.0);
    }
    EXPECT_DOUBLE_EQ(rec["bytes_in"].get<double>() + rec["bytes_out"].get<double>(), rec["bytes_moved"].get<double>());
    EXPECT_GT(rec["bus_bytes_per_s"].get<double>(), 0);
    EXPECT_TRUE(peers["unified_memory"].contains("skipped"));  // needs a GPU
  }
  // CSV files with their header, the gnuplot script, and the PNGs when gnuplot is installed.
  for (const char* csv : {"/runs.csv", "/train.csv"}) {
    EXPECT_EQ(test::read_file(out + csv).rfind("workload,policy,oversubscription,step_time_s,", 0), 0u) << csv;
  }
  // Both bounds are rows of the CSV and dashed lines of the step-time plot.
  const auto train_csv = test::read_file(out + "/train.csv");
  for (const char* row : {"\ntrain,bound,", "\ntrain,window_bound,"}) {
    EXPECT_NE(train_csv.find(row), std::string::npos) << row;
  }
  const auto gp = test::read_file(out + "/plots.gp");
  EXPECT_NE(gp.find("step_time_train.png"), std::string::npos);
  EXPECT_NE(gp.find("\"window_bound\" ? column(4)*1000 : NaN) with linespoints dt 2"), std::string::npos);
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    for (const char* png : {"/step_time_train.png", "/wall_time_train.png", "/bytes_vs_belady_train.png"}) {
      const auto bytes = test::read_file(out + png);
      ASSERT_GT(bytes.size(), 8u) << png;
      EXPECT_EQ(bytes.substr(1, 3), "PNG") << png;
    }
  }
}

// Steps of 0 (no compute, no costs, the working set in memory) on a log axis: gnuplot stopped at "all
// points y value undefined", drawing none of the plots after it, and the run exited 1 with its results
// written. The axis is linear there, and a plot gnuplot cannot draw no longer fails the run.
TEST(BenchSummary, StepsOfZeroArePlottedAndTheRunSucceeds) {
  test::TempDir dir;
  const std::string out = dir.path() + "/out", log = dir.path() + "/stdout";
  const int rc = std::system((std::string(TVMM_BENCH_BIN) +
                              " --workload scan --tensors 4 --tensor-mib 2 --compute-us 0 --vmm-costs off --peers "
                              "memory --policies lru --ratios 2 --iterations 3 --disk-dir " +
                              disk_dir() + " --out " + out + " > " + log + " 2>&1")
                                 .c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << test::read_file(log);
  EXPECT_NE(test::read_file(log).find("results in " + out), std::string::npos) << test::read_file(log);
  const std::string gp = test::read_file(out + "/plots.gp");
  const auto step_plot = gp.find("step_time_scan.png");
  ASSERT_NE(step_plot, std::string::npos) << gp;
  EXPECT_EQ(gp.find("logscale y", step_plot), gp.find("unset logscale y", step_plot) + 6) << gp;
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_EQ(test::read_file(log).find("gnuplot failed"), std::string::npos) << test::read_file(log);
    for (const char* png : {"/step_time_scan.png", "/bytes_vs_belady_scan.png"}) {
      EXPECT_GT(test::read_file(out + png).size(), 8u) << png;
    }
  }
}

TEST(BenchSummary, KernelPeerRunsUnderACgroupOrSaysWhy) {
  const auto w = make_scan(32, 2 * MiB, 50);
  KernelPagerOptions o;
  o.memory_limit = 32 * MiB;  // half the arena (the child's own few MiB count too)
  o.disk_dir = disk_dir();
  o.iterations = 3;
  o.warmup = 1;
  const auto r = run_kernel_pager(w, o);
  if (!r.ran) {
    EXPECT_FALSE(r.skipped.empty());
    ASSERT_EQ(r.skipped.find("killed"), std::string::npos) << "the peer itself failed: " << r.skipped;
    GTEST_SKIP() << "the kernel peer cannot run here: " << r.skipped;
  }
  EXPECT_TRUE(r.cgroup == "v1" || r.cgroup == "v2");
  EXPECT_GE(r.step_time_s, w.compute_us() * 1e-6);  // compute is slept, faults come on top
  EXPECT_GT(r.disk_read_bytes, 0);                  // 64 MiB scanned through 32 MiB: the kernel reads back
}

TEST(BenchSummary, KernelPeerOnTmpfsIsSkippedWithTheReason) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  KernelPagerOptions o;
  o.memory_limit = 8 * MiB;
  o.disk_dir = "/dev/shm";
  const auto r = run_kernel_pager(make_scan(2, 2 * MiB, 1), o);
  EXPECT_FALSE(r.ran);
  EXPECT_NE(r.skipped.find("tmpfs"), std::string::npos) << r.skipped;
}

}  // namespace
}  // namespace tvmm::bench

namespace tvmm::bench {
namespace {

// The "page in" spans of a timeline file (Chrome trace-event JSON), or -1 when it does not parse.
long page_ins(const std::string& path) {
  try {
    const auto doc = json::parse(test::read_file(path));
    long n = 0;
    for (const auto& e : doc.at("traceEvents")) n += e.at("name") == "page in";
    return n;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

// --timeline FILE: the pager's timeline of each policy run, FILE itself for a single run and one file
// per run otherwise (the workload, ratio and policy before the extension); a directory that does not
// exist is refused before anything runs.
TEST(BenchCli, TimelineWritesEachPolicyRunsPagerTimeline) {
  test::TempDir dir;
  const std::string common = std::string(TVMM_BENCH_BIN) +
                             " --workload train --layers 3 --tensor-mib 2 --iterations 3 --policies lru --peers none "
                             "--compute-us 100 --host-fraction 1 --disk-dir " +
                             disk_dir();
  const std::string log = dir.path() + "/stdout";
  ASSERT_EQ(std::system((common + " --ratios 2 --timeline " + dir.path() + "/one.json > " + log + " 2>&1").c_str()), 0)
      << test::read_file(log);
  EXPECT_GT(page_ins(dir.path() + "/one.json"), 0);
  EXPECT_NE(test::read_file(log).find("timeline (open it in ui.perfetto.dev): " + dir.path() + "/one.json"),
            std::string::npos)
      << test::read_file(log);

  ASSERT_EQ(std::system((common + " --ratios 2 3 --timeline " + dir.path() + "/t.json > " + log + " 2>&1").c_str()), 0)
      << test::read_file(log);
  EXPECT_GT(page_ins(dir.path() + "/t.train.2x.lru.json"), 0);
  EXPECT_GT(page_ins(dir.path() + "/t.train.3x.lru.json"), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/t.json"));

  const int rc =
      std::system((common + " --ratios 2 --timeline " + dir.path() + "/missing/t.json > " + log + " 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(test::read_file(log).find("--timeline " + dir.path() + "/missing/t.json: there is no such directory"),
            std::string::npos)
      << test::read_file(log);
}

// --out and --json are checked before anything runs, as --timeline is: a bad path used to be found after
// every run, losing a whole suite's results. No run's line is printed.
TEST(BenchCli, ABadOutputPathIsRefusedBeforeAnyRun) {
  test::TempDir dir;
  const std::string common = std::string(TVMM_BENCH_BIN) +
                             " --workload train --layers 3 --tensor-mib 2 --iterations 3 --policies lru --peers none "
                             "--compute-us 100 --host-fraction 1 --ratios 2 --disk-dir " +
                             disk_dir();
  const std::string log = dir.path() + "/stdout";
  std::ofstream(dir.path() + "/a-file") << "x";
  const std::pair<std::string, std::string> cases[] = {
      {" --out " + dir.path() + "/missing/deeper", "--out " + dir.path() + "/missing/deeper: cannot create"},
      {" --out " + dir.path() + "/a-file", "--out " + dir.path() + "/a-file: not a directory"},
      {" --json " + dir.path() + "/missing/s.json", "--json " + dir.path() + "/missing/s.json: there is no such"},
      {" --json " + dir.path(), "--json " + dir.path() + ": it is a directory"},
  };
  for (const auto& [option, message] : cases) {
    const int rc = std::system((common + option + " > " + log + " 2>&1").c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 2) << option;
    const std::string text = test::read_file(log);
    EXPECT_NE(text.find(message), std::string::npos) << option << ": " << text;
    EXPECT_EQ(text.find("workload train"), std::string::npos) << option << " ran before refusing: " << text;
  }
  EXPECT_EQ(
      std::system(
          (common + " --out " + dir.path() + "/new --json " + dir.path() + "/new.json > " + log + " 2>&1").c_str()),
      0)
      << test::read_file(log);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/new/summary.json"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/new.json"));
}

// nan passes CLI::Range (every comparison with it is false) and used to fail deep inside a run, or run
// as something else (--zipf nan ran uniform): every floating-point option refuses it.
TEST(BenchCli, NanIsRefusedAtTheOption) {
  test::TempDir dir;
  const std::string log = dir.path() + "/stdout";
  for (const char* option : {"--ratios", "--compute-us", "--host-fraction", "--latency-us", "--zipf", "--bus-gbs"}) {
    const int rc = std::system((std::string(TVMM_BENCH_BIN) + " --workload random --tensors 4 --tensor-mib 2 " +
                                option + " nan --peers none --policies lru > " + log + " 2>&1")
                                   .c_str());
    EXPECT_NE(WEXITSTATUS(rc), 0) << option;
    EXPECT_NE(test::read_file(log).find("Value nan is not a number"), std::string::npos)
        << option << ": " << test::read_file(log);
  }
}

// --quick sets the sizes itself: each size given with it is said to be ignored (they were, silently).
TEST(BenchCli, QuickSaysWhichGivenSizesItIgnores) {
  test::TempDir dir;
  const std::string log = dir.path() + "/stdout";
  const int rc = std::system((std::string(TVMM_BENCH_BIN) +
                              " --workload scan --tensors 4 --tensor-mib 8 --compute-us 7 --quick --ratios 2 "
                              "--policies lru --peers none --disk-dir " +
                              disk_dir() + " > " + log + " 2>&1")
                                 .c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << test::read_file(log);
  const std::string text = test::read_file(log);
  EXPECT_NE(text.find("--tensor-mib is ignored: --quick sets its own"), std::string::npos) << text;
  EXPECT_NE(text.find("--compute-us is ignored: --quick sets its own"), std::string::npos) << text;
  EXPECT_EQ(text.find("--tensors is ignored"), std::string::npos) << text;  // --quick keeps the tensor count
}

// --warmup N: N iterations run before the measured ones, recorded in each record. --iterations then
// defaults to N + 4; --quick and --suite set their own count (and say so when --iterations is given);
// one that leaves nothing to measure is refused before anything runs. What is measured changes with
// it: trace prefetch has nothing to load in the recorded iteration, and loads in the replays.
TEST(BenchCli, WarmupSetsTheIterationsNotMeasured) {
  test::TempDir dir;
  const std::string common = std::string(TVMM_BENCH_BIN) +
                             " --workload train --layers 3 --tensor-mib 2 --policies trace --peers none "
                             "--compute-us 100 --ratios 2 --host-fraction 1 --disk-dir " +
                             disk_dir();
  const std::string log = dir.path() + "/stdout";
  const std::string out = dir.path() + "/records.json";
  auto run = [&](const std::string& args) {
    const int rc = std::system((common + " " + args + " --json " + out + " > " + log + " 2>&1").c_str());
    EXPECT_EQ(rc, 0) << args << ": " << test::read_file(log);
    const auto records = json::parse(test::read_file(out));
    EXPECT_EQ(records.size(), 1u) << records.dump();
    return records.at(0);
  };
  const auto warm = run("--warmup 3");
  EXPECT_EQ(warm["warmup_iterations"], 3);
  EXPECT_EQ(warm["measured_iterations"], 4);
  EXPECT_GT(warm["prefetched"].get<std::uint64_t>(), 0u);

  const auto cold = run("--warmup 0 --iterations 1");  // the recorded iteration alone
  EXPECT_EQ(cold["warmup_iterations"], 0);
  EXPECT_EQ(cold["measured_iterations"], 1);
  EXPECT_EQ(cold["prefetched"].get<std::uint64_t>(), 0u);

  const auto quick = run("--quick --warmup 1 --iterations 10");
  EXPECT_EQ(quick["measured_iterations"], 3);
  EXPECT_NE(test::read_file(log).find("--iterations 10 is ignored: --quick measures 3 iterations after --warmup 1"),
            std::string::npos)
      << test::read_file(log);

  const int rc = std::system((common + " --warmup 3 --iterations 3 > " + log + " 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(test::read_file(log).find(
                "--iterations 3 leaves no iteration to measure after --warmup 3; pass --iterations 4 or more"),
            std::string::npos)
      << test::read_file(log);
}

}  // namespace tvmm::bench
