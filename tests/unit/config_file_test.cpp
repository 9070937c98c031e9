// Policy config files: every key, every error case with its promised message, environment overrides,
// the example configs, and the docs listing every key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "test_support.hpp"
#include "vmm/config/config_keys.hpp"

using namespace tvmm;

namespace {

std::string error_of(std::string_view toml) {
  try {
    (void)parse_config(toml, "test.toml");
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

using test::ScopedEnv;

}  // namespace

TEST(ConfigFile, EveryKeyIsRead) {
  const auto c = parse_config(R"(
[device]
backend = "sim"
budget = "96MiB"
page_size = "4MiB"
va_size = "8GiB"
bus_gbs = 26
[device.sim]
capacity = "128MiB"
granularity = "1MiB"
bandwidth_gbs = 12.5
copy_latency_us = 3
[host]
budget = 1073741824
[pager]
wait_timeout_ms = 250
[policy.eviction]
name = "clock"
write_behind = false
)");
  EXPECT_EQ(c.device_backend, "sim");
  EXPECT_EQ(c.device_budget, 96 * MiB);
  EXPECT_EQ(c.page_size, 4 * MiB);
  EXPECT_EQ(c.va_size, 8 * GiB);
  EXPECT_EQ(c.sim.capacity, 128 * MiB);
  EXPECT_EQ(c.sim.granularity, 1 * MiB);
  EXPECT_DOUBLE_EQ(c.sim.bandwidth_bytes_per_s, 12.5e9);
  EXPECT_EQ(c.sim.copy_latency, std::chrono::microseconds(3));
  EXPECT_EQ(c.host_budget, GiB);
  EXPECT_EQ(c.wait_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c.eviction, "clock");
  EXPECT_DOUBLE_EQ(c.bus_bytes_per_s, 26e9);
  EXPECT_FALSE(c.write_behind) << "on by default: the file turns it off";
  EXPECT_TRUE(Config{}.write_behind);
}

TEST(ConfigFile, AbsentKeysKeepDefaultsAndAutoMeansResolveLater) {
  const auto c = parse_config("[device]\npage_size = \"auto\"\n");
  const Config d;
  EXPECT_EQ(c.page_size, 0u);
  EXPECT_EQ(c.device_budget, d.device_budget);
  EXPECT_EQ(c.eviction, d.eviction);
}

TEST(ConfigFile, Sizes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("512MiB"), 512 * MiB);
  EXPECT_EQ(parse_size(" 2 GiB "), 2 * GiB);
  EXPECT_EQ(parse_size("1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(parse_size("64kib"), 64 * KiB);
  EXPECT_EQ(parse_size("1GB"), 1000000000u);
  EXPECT_EQ(parse_size("10B"), 10u);
  for (const char* bad : {"", "MiB", "-1MiB", "1.2.3", "12 parsecs", ".", ".KiB"}) {  // "." and ".KiB" were 0
    try {
      (void)parse_size(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const config_error& e) {
      EXPECT_TRUE(has(e.what(), "512MiB")) << e.what();  // says what a size looks like
    }
  }
  // A byte count above 2^53 is exact (a double rounded 9007199254740993 to ...992).
  EXPECT_EQ(parse_size("9007199254740993"), std::size_t{9007199254740993u});
  // Too large, and not whole, say which (both were "is not a size").
  for (const char* large : {"18446744073709551615", "16777215TiB", "99999999999999999999GiB", "1e30"}) {
    const std::string m = test::message_of([&] { (void)parse_size(large); });
    EXPECT_TRUE(has(m, large) && (has(m, "too large") || has(m, "512MiB"))) << large << ": " << m;
  }
  EXPECT_TRUE(has(test::message_of([] { (void)parse_size("16777215TiB"); }), "too large for a size"));
  EXPECT_TRUE(has(test::message_of([] { (void)parse_size("1.1KiB"); }), "not a whole number of bytes"));
  EXPECT_TRUE(has(test::message_of([] { (void)parse_size("0.5B"); }), "not a whole number of bytes"));
}

TEST(ConfigFile, MisspeltKeyGivesLocationAndClosestKey) {
  const auto msg = error_of("[device]\nbackend = \"sim\"\n  budgte = \"1GiB\"\n");
  EXPECT_TRUE(has(msg, "test.toml:3:3")) << msg;
  EXPECT_TRUE(has(msg, "unknown key 'budgte' in [device]")) << msg;
  EXPECT_TRUE(has(msg, "Did you mean 'budget'?")) << msg;
  EXPECT_TRUE(has(msg, "valid keys: backend, budget")) << msg;
}

TEST(ConfigFile, UnknownKeyFarFromAnyGetsNoGuess) {
  const auto msg = error_of("[host]\nfrobnicate = 1\n");
  EXPECT_TRUE(has(msg, "unknown key 'frobnicate' in [host]")) << msg;
  EXPECT_FALSE(has(msg, "Did you mean")) << msg;
}

TEST(ConfigFile, UnknownSectionAndKeysOutsideSections) {
  auto msg = error_of("[devise]\nbudget = 1\n");
  EXPECT_TRUE(has(msg, "test.toml:1:2")) << msg;
  EXPECT_TRUE(has(msg, "unknown section [devise]")) << msg;
  EXPECT_TRUE(has(msg, "Did you mean 'device'?")) << msg;
  msg = error_of("[policy.evictoin]\nname = \"lru\"\n");
  EXPECT_TRUE(has(msg, "Did you mean 'policy.eviction'?")) << msg;
  msg = error_of("budget = \"1GiB\"\n");
  EXPECT_TRUE(has(msg, "outside a section")) << msg;
}

TEST(ConfigFile, BadValuesSayWhatWasExpected) {
  struct Case {
    const char* toml;
    const char* where;
    const char* expect;
  };
  const Case cases[] = {
      {"[device]\nbudget = true\n", "test.toml:2:10", "device.budget = true: expected a size like \"512MiB\""},
      {"[device]\nbudget = \"lots\"\n", "test.toml:2:10", "device.budget = \"lots\": expected a size"},
      {"[device]\nbudget = -5\n", "test.toml:2:10", "device.budget = -5: expected a size"},
      {"[device.sim]\nbandwidth_gbs = -1\n", "test.toml:2:17", "expected a number of GB/s from 0 to 1e9"},
      {"[pager]\nwait_timeout_ms = 0\n", "test.toml:2:19", "expected a whole number of milliseconds >= 1"},
      {"[policy.eviction]\nname = 5\n", "test.toml:2:8", "policy.eviction.name = 5: expected one of"},
      {"[policy.eviction]\nname = \"lur\"\n", "test.toml:2:8", "Did you mean 'lru'?"},
      {"[device]\nbackend = \"cuda9\"\n", "test.toml:2:11", "expected one of: \"sim\""},
      {"[device]\nbudget = [1, 2]\n", "test.toml:2:10", "(a table or array)"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of(c.toml);
    EXPECT_TRUE(has(msg, c.where)) << c.toml << " -> " << msg;
    EXPECT_TRUE(has(msg, c.expect)) << c.toml << " -> " << msg;
  }
}

TEST(ConfigFile, SyntaxErrorsHaveALocation) {
  const auto msg = error_of("[device\nbudget = 1\n");
  EXPECT_TRUE(has(msg, "test.toml:1:")) << msg;
  EXPECT_TRUE(has(msg, "not valid TOML")) << msg;
}

TEST(ConfigFile, EnvironmentOverridesWin) {
  const auto path = std::filesystem::temp_directory_path() / "tvmm_env_test.toml";
  { std::ofstream(path) << "[device]\nbudget = \"64MiB\"\n[policy.eviction]\nname = \"lru\"\n"; }
  ScopedEnv a("TVMM_DEVICE_BUDGET", "128MiB");
  ScopedEnv b("TVMM_POLICY_EVICTION_NAME", "fifo");
  ScopedEnv c("TVMM_DEVICE_SIM_BANDWIDTH_GBS", "8");
  const auto cfg = load_config(path.string());
  EXPECT_EQ(cfg.device_budget, 128 * MiB);
  EXPECT_EQ(cfg.eviction, "fifo");
  EXPECT_DOUBLE_EQ(cfg.sim.bandwidth_bytes_per_s, 8e9);
  Config d;
  EXPECT_EQ(apply_environment(d), (std::vector<std::string>{"TVMM_DEVICE_BUDGET", "TVMM_DEVICE_SIM_BANDWIDTH_GBS",
                                                            "TVMM_POLICY_EVICTION_NAME"}));
  std::filesystem::remove(path);
}

TEST(ConfigFile, BadEnvironmentValueNamesTheVariable) {
  ScopedEnv a("TVMM_HOST_BUDGET", "plenty");
  Config c;
  try {
    (void)apply_environment(c);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_TRUE(has(e.what(), "TVMM_HOST_BUDGET = \"plenty\": expected a size")) << e.what();
    EXPECT_EQ(e.location(), "environment");
  }
  EXPECT_EQ(c.host_budget, Config{}.host_budget);  // left intact
}

TEST(ConfigFile, MissingFile) {
  try {
    (void)load_config("/nonexistent/tvmm.toml");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_TRUE(has(e.what(), "cannot open the config file '/nonexistent/tvmm.toml'")) << e.what();
  }
}

// A directory named as the config file is an error, not an empty file that leaves every default.
TEST(ConfigFile, ADirectoryIsNotAConfigFile) {
  test::TempDir dir;
  try {
    (void)load_config(dir.path());
    FAIL() << "a directory loaded as a config file";
  } catch (const config_error& e) {
    EXPECT_TRUE(has(e.what(), "'" + dir.path() + "' is a directory, not a config file")) << e.what();
  }
}

TEST(ConfigFile, PrintedConfigurationReadsBackTheSame) {
  Config c;
  c.device_budget = 96 * MiB;
  c.page_size = 4 * MiB;
  c.sim.bandwidth_bytes_per_s = 12.5e9;
  c.eviction = "fifo";
  c.wait_timeout = std::chrono::milliseconds(1234);
  c.bus_bytes_per_s = 25.123456789e9;                       // printed with 6 digits, it read back as 25.1235
  c.sim.copy_latency = std::chrono::microseconds(1234567);  // and this as 1.23457e+06
  const auto text = to_toml(c);
  const auto back = parse_config(text);
  EXPECT_EQ(to_toml(back), text);
  EXPECT_EQ(back.device_budget, c.device_budget);
  EXPECT_EQ(back.eviction, "fifo");
  EXPECT_EQ(back.sim.copy_latency, c.sim.copy_latency);
  EXPECT_EQ(back.bus_bytes_per_s, c.bus_bytes_per_s);
}

TEST(ConfigFile, EveryExampleConfigLoadsAndBuildsAPager) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TVMM_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    ++seen;
    SCOPED_TRACE(entry.path().string());
    Config cfg = parse_config(test::read_file(entry.path()), entry.path().string());
    // An NVMe tier runs in temporary directories (one per configured drive) with a small budget.
    std::vector<std::unique_ptr<test::TempDir>> dirs;
    if (cfg.nvme.budget != 0) {
      ASSERT_FALSE(cfg.nvme.paths.empty());
      for (auto& path : cfg.nvme.paths) {
        dirs.push_back(std::make_unique<test::TempDir>());
        path = dirs.back()->path();
      }
      cfg.nvme.budget = std::min<std::size_t>(cfg.nvme.budget, 64 * MiB);
    }
    if (cfg.device_backend == "cuda") {
      // Loaded and validated above; a pager needs a GPU. Without one the error says so (the gpu-labelled
      // tests use the GPU where there is one).
      try {
        Pager pager(cfg);
      } catch (const device_error& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA"), std::string::npos) << e.what();
      }
      continue;
    }
    Pager pager(cfg);
    auto t = pager.allocate(pager.config().page_size);
    auto pin = t.pin(Access::write);
    test::fill(pin.data(), t.size(), 5);
    EXPECT_EQ(test::mismatches(pin.data(), t.size(), 5), 0u);
  }
  EXPECT_GE(seen, 5);
}

TEST(ConfigFile, NvmeKeysParseFromFileAndEnvironment) {
  const Config c = parse_config(R"([nvme]
paths = ["/a", "/b"]
budget = "8GiB"
backend = "posix"
queue_depth = 64
direct = false
)");
  EXPECT_EQ(c.nvme.paths, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c.nvme.budget, 8 * GiB);
  EXPECT_EQ(c.nvme.backend, "posix");
  EXPECT_EQ(c.nvme.queue_depth, 64u);
  EXPECT_FALSE(c.nvme.direct);
  const Config back = parse_config(to_toml(c));
  EXPECT_EQ(back.nvme.paths, c.nvme.paths);
  EXPECT_EQ(back.nvme.direct, c.nvme.direct);
  ::setenv("TVMM_NVME_PATHS", "/x:/y/z", 1);
  ::setenv("TVMM_NVME_DIRECT", "true", 1);
  Config e = c;
  const auto applied = apply_environment(e);
  ::unsetenv("TVMM_NVME_PATHS");
  ::unsetenv("TVMM_NVME_DIRECT");
  EXPECT_EQ(e.nvme.paths, (std::vector<std::string>{"/x", "/y/z"}));
  EXPECT_TRUE(e.nvme.direct);
  EXPECT_EQ(applied.size(), 2u);
  // Found by the fuzzer: a path with quotes, backslashes or control characters prints as valid TOML, and
  // numbers too large for their field are refused rather than converted (undefined behaviour).
  Config odd;
  odd.nvme.paths = {"/a\"b\\c", std::string("/t\tx\x01")};
  EXPECT_EQ(parse_config(to_toml(odd)).nvme.paths, odd.nvme.paths);
  for (const char* big : {"[nvme]\nqueue_depth = 1e13\n", "[pager]\nwait_timeout_ms = 1e47\n",
                          "[policy.prefetch]\ndistance = 1e30\n", "[device.sim]\ncopy_latency_us = 1e300\n"}) {
    EXPECT_THROW((void)parse_config(big), config_error) << big;
  }
  // A single string is read like the environment variable: paths separated by ':'.
  EXPECT_EQ(parse_config("[nvme]\npaths = \"/a:/b\"\n").nvme.paths, (std::vector<std::string>{"/a", "/b"}));
  for (const char* bad : {"[nvme]\npaths = [1, 2]\n", "[nvme]\ndirect = 3\n", "[nvme]\nqueue_depth = 0\n",
                          "[nvme]\nqueue_depth = 2.5\n", "[nvme]\nbackend = \"spdk\"\n"}) {
    EXPECT_THROW((void)parse_config(bad), config_error) << bad;
  }
}

TEST(ConfigFile, DocsListEveryKeyWithItsEnvironmentVariable) {
  const auto doc = test::read_file(TVMM_SOURCE_DIR "/docs/configuration.md");
  for (const auto& k : vmm::config_keys()) {
    const std::string key = std::string(k.section) + "." + std::string(k.key);
    EXPECT_TRUE(has(doc, "`" + key + "`")) << key << " is missing from docs/configuration.md";
    EXPECT_TRUE(has(doc, vmm::environment_variable(k))) << vmm::environment_variable(k) << " is missing";
  }
}

TEST(ConfigFile, SimTimingAndKeepRecentAreReadAndChecked) {
  const auto c =
      parse_config("[device.sim]\ntiming = \"model\"\n[policy.eviction]\nname = \"belady\"\nkeep_recent = 3\n");
  EXPECT_EQ(c.sim.timing, "model");
  EXPECT_EQ(c.keep_recent, 3u);
  try {
    (void)parse_config("[device.sim]\ntiming = \"modle\"\n", "t.toml");
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t.toml:2:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"model\""), std::string::npos) << msg;
  }
  EXPECT_THROW((void)parse_config("[policy.eviction]\nkeep_recent = -1\n"), config_error);
  EXPECT_THROW((void)parse_config("[policy.eviction]\nkeep_recent = 1.5\n"), config_error);
}

TEST(ConfigFile, RankPlaceholdersComeFromTheLauncherVariables) {
  ScopedEnv rank("RANK", "3");
  ScopedEnv local("LOCAL_RANK", "1");
  ScopedEnv world("WORLD_SIZE", "4");
  const auto c = parse_config(R"(
[nvme]
paths = ["/mnt/a/r{rank}", "/mnt/b/l{local_rank}"]
[stats]
file = "/tmp/stats-{rank}-{local_rank}.json"
[pin_log]
file = "/tmp/pins.jsonl"
)");
  ASSERT_EQ(c.nvme.paths.size(), 2u);
  EXPECT_EQ(c.nvme.paths[0], "/mnt/a/r3");
  EXPECT_EQ(c.nvme.paths[1], "/mnt/b/l1");
  EXPECT_EQ(c.stats_file, "/tmp/stats-3-1.json");
  // Four processes, one file named without a placeholder: each rank gets its own.
  EXPECT_EQ(c.pin_log_file, "/tmp/pins.jsonl.rank3");
  // The environment's paths are substituted too; "-" (stderr) is never renamed.
  ScopedEnv stats("TVMM_STATS_FILE", "-");
  Config e;
  apply_environment(e);
  EXPECT_EQ(e.stats_file, "-");
}

TEST(ConfigFile, RankPlaceholdersWithoutALauncherAreZeroAndOneProcessKeepsItsFileName) {
  for (const char* v : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                        "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "LOCAL_WORLD_SIZE", "PMI_SIZE"}) {
    ::unsetenv(v);
  }
  ScopedEnv mpi_rank("OMPI_COMM_WORLD_RANK", "2");
  const auto c = parse_config("[stats]\nfile = \"s{rank}.json\"\n[pin_log]\nfile = \"t.jsonl\"\n");
  EXPECT_EQ(c.stats_file, "s2.json");
  EXPECT_EQ(c.pin_log_file, "t.jsonl");
}

TEST(ConfigFile, UnknownPlaceholderOrBadLauncherVariableIsAnErrorWithItsLocation) {
  const std::string unknown = error_of("[stats]\nfile = \"s{node}.json\"\n");
  EXPECT_TRUE(has(unknown, "test.toml:2:")) << unknown;
  EXPECT_TRUE(has(unknown, "unknown placeholder {node}")) << unknown;
  EXPECT_TRUE(has(unknown, "{rank} and {local_rank}")) << unknown;
  ScopedEnv rank("RANK", "three");
  const std::string bad = error_of("[stats]\nfile = \"s{rank}.json\"\n");
  EXPECT_TRUE(has(bad, "RANK = \"three\"")) << bad;
}

TEST(ConfigFile, DeviceOrdinalIsAutoByDefaultOrANumber) {
  EXPECT_EQ(Config{}.cuda_device, -1);
  EXPECT_EQ(parse_config("[device]\nordinal = 2\n").cuda_device, 2);
  EXPECT_EQ(parse_config("[device]\nordinal = \"auto\"\n").cuda_device, -1);
  const std::string bad = error_of("[device]\nordinal = \"first\"\n");
  EXPECT_TRUE(has(bad, "\"auto\" or a GPU number")) << bad;
}

// A run of digits too long for a double was std::stod's out_of_range, which no caller expects: the C
// API called it an internal error and `tvmm check-config` aborted.
TEST(ConfigFile, ADeviceOrdinalOfManyDigitsIsAConfigError) {
  const std::string digits(400, '9');
  const std::string bad = error_of("[device]\nordinal = \"" + digits + "\"\n");
  EXPECT_TRUE(has(bad, "test.toml:2:11")) << bad;
  EXPECT_TRUE(has(bad, "a GPU number from 0 to 1024")) << bad;
  EXPECT_TRUE(has(error_of("[device]\nordinal = \"1025\"\n"), "from 0 to 1024"));
  EXPECT_EQ(parse_config("[device]\nordinal = \"1024\"\n").cuda_device, 1024);
  ScopedEnv env("TVMM_DEVICE_ORDINAL", digits.c_str());
  Config c;
  try {
    (void)apply_environment(c);
    ADD_FAILURE() << "a 400-digit TVMM_DEVICE_ORDINAL was accepted";
  } catch (const config_error& e) {
    EXPECT_TRUE(has(e.what(), "TVMM_DEVICE_ORDINAL")) << e.what();
  }
}

// The largest finite number a file can hold: a number key refuses it at its line (GB/s keys overflowed
// to an infinite byte rate, which validate() then reported under the C++ member's name, with no line).
TEST(ConfigFile, EveryNumberKeyRefusesTheLargestDoubleAtItsLine) {
  std::size_t checked = 0;
  for (const auto& k : vmm::config_keys()) {
    if (k.type != vmm::KeyType::number) continue;
    const std::string name = std::string(k.section) + "." + std::string(k.key);
    const std::string m = error_of("[" + std::string(k.section) + "]\n" + std::string(k.key) + " = 1e308\n");
    EXPECT_TRUE(has(m, "test.toml:2:")) << name << ": " << m;
    EXPECT_TRUE(has(m, name + " = 1e+308: expected")) << name << ": " << m;
    ++checked;
  }
  EXPECT_GE(checked, 8u);
}

// An error quotes the value as given: a whole number past the limit used to print as "1e+09".
TEST(ConfigFile, AnErrorQuotesTheNumberAsGiven) {
  const std::string m = error_of("[policy.prefetch]\ndistance = 1000000001\n");
  EXPECT_TRUE(has(m, "policy.prefetch.distance = 1000000001: expected a whole number from 0 to 1e9")) << m;
}

// A malformed PCI bus id is refused at its line, not later by validate() under the member's name.
TEST(ConfigFile, AMalformedPciBusIdIsRefusedAtItsLine) {
  const std::string m = error_of("[device.sim]\npci_bus_id = \"garbage\"\n");
  EXPECT_TRUE(has(m, "test.toml:2:14")) << m;
  EXPECT_TRUE(has(m, "device.sim.pci_bus_id = \"garbage\": expected a PCI bus id")) << m;
  EXPECT_EQ(parse_config("[device.sim]\npci_bus_id = \"0000:65:00.0\"\n").sim.pci_bus_id, "0000:65:00.0");
}

// Every number and size key refuses nan and inf (TOML has both), in a file and in the environment.
TEST(ConfigFile, EveryNumberAndSizeKeyRefusesNonFiniteValues) {
  std::size_t checked = 0;
  for (const auto& k : vmm::config_keys()) {
    if (k.type != vmm::KeyType::number && k.type != vmm::KeyType::size) continue;
    const std::string name = std::string(k.section) + "." + std::string(k.key);
    for (const char* bad : {"nan", "+inf", "-inf"}) {
      const std::string toml = "[" + std::string(k.section) + "]\n" + std::string(k.key) + " = " + bad + "\n";
      const std::string m = error_of(toml);
      EXPECT_TRUE(has(m, name)) << name << " = " << bad << " was accepted: " << m;
      EXPECT_TRUE(has(m, "expected")) << m;
      const std::string var = vmm::environment_variable(k);
      ScopedEnv env(var.c_str(), bad[0] == '+' ? bad + 1 : bad);
      Config c;
      EXPECT_THROW(apply_environment(c), config_error) << var << "=" << bad;
    }
    ++checked;
  }
  EXPECT_GE(checked, 10u);  // the table has number and size keys: the loop ran
}

// The C++ API's floating-point field too.
TEST(ConfigFile, ANonFiniteBandwidthSetInCodeIsRefused) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    Config c = test::small_config(2, 4);
    c.sim.bandwidth_bytes_per_s = bad;
    EXPECT_THROW(c.validate(), config_error) << bad;
  }
}

// Every key with a fixed set of values lists all of them when a value is not one, in a file and set in
// code, from the one key table (the eviction policy's error used to leave "belady" out).
TEST(ConfigFile, EveryChoiceErrorListsEveryChoice) {
  std::size_t checked = 0;
  for (const auto& k : vmm::config_keys()) {
    if (k.type != vmm::KeyType::text || k.choices.empty() || k.whole_number_too) continue;
    const std::string toml = "[" + std::string(k.section) + "]\n" + std::string(k.key) + " = \"bogus\"\n";
    const std::string from_file = error_of(toml);
    ASSERT_NE(k.field, nullptr) << k.section << "." << k.key << " has no Config field for validate()";
    Config c;
    vmm::KeyValue v;
    v.text = "bogus";
    k.set(c, v);
    std::string in_code;
    try {
      c.validate();
    } catch (const config_error& e) {
      in_code = e.what();
    }
    EXPECT_TRUE(has(in_code, k.field)) << in_code;
    for (const auto& choice : k.choices) {
      EXPECT_TRUE(has(from_file, "\"" + choice + "\"")) << k.key << ": " << from_file;
      EXPECT_TRUE(has(in_code, "\"" + choice + "\"")) << k.key << ": " << in_code;
    }
    ++checked;
  }
  EXPECT_GE(checked, 6u);
  Config c;
  c.eviction = "random";
  EXPECT_TRUE(has(test::message_of([&] { Pager p(c); }), "\"belady\""));
}

TEST(ConfigFile, OldKeyNamesAreAliasesAndGivingBothNamesIsAnError) {
  // trace.file and trace.events were renamed pin_log.file and timeline.file; old files still load.
  const auto old = parse_config("[trace]\nfile = \"pins.jsonl\"\nevents = \"timeline.json\"\n");
  EXPECT_EQ(old.pin_log_file, "pins.jsonl");
  EXPECT_EQ(old.timeline_file, "timeline.json");
  const auto current = parse_config("[pin_log]\nfile = \"p.jsonl\"\n[timeline]\nfile = \"t.json\"\n");
  EXPECT_EQ(current.pin_log_file, "p.jsonl");
  EXPECT_EQ(current.timeline_file, "t.json");
  // The effective configuration is printed with the current names only.
  const std::string toml = to_toml(old);
  EXPECT_NE(toml.find("[pin_log]\nfile = \"pins.jsonl\""), std::string::npos) << toml;
  EXPECT_NE(toml.find("[timeline]\nfile = \"timeline.json\""), std::string::npos) << toml;
  EXPECT_EQ(toml.find("[trace]"), std::string::npos) << toml;

  const std::string both = error_of("[pin_log]\nfile = \"a\"\n[trace]\nfile = \"b\"\n");
  EXPECT_NE(both.find("trace.file"), std::string::npos) << both;
  EXPECT_NE(both.find("pin_log.file"), std::string::npos) << both;
  EXPECT_NE(both.find("keep only pin_log.file"), std::string::npos) << both;
  EXPECT_NE(both.find("test.toml:"), std::string::npos) << both;  // where one of them is
  // The other order too (toml++ visits a table's keys in name order, not the file's).
  EXPECT_NE(error_of("[trace]\nfile = \"b\"\n[pin_log]\nfile = \"a\"\n").find("keep only pin_log.file"),
            std::string::npos);
  // An old name is a key in its old section, as current names are: a quoted dotted key is no key.
  EXPECT_NE(error_of("\"trace.file\" = \"x\"\n").find("outside a section"), std::string::npos);
  // A typo in an old section is named with the keys that section still holds.
  const std::string typo = error_of("[trace]\nevnets = \"t.json\"\n");
  EXPECT_NE(typo.find("valid keys: file, events"), std::string::npos) << typo;
  EXPECT_NE(typo.find("Did you mean 'events'?"), std::string::npos) << typo;
}
