#include "vmm/config/config_keys.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <system_error>
#include <tuple>

#include "backends/device/registry.hpp"
#include "backends/storage/registry.hpp"
#include "backends/topology/topology.hpp"
#include "common/registry.hpp"
#include "policies/registry.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::vmm {

std::string toml_number(double d) {
  // The shortest text that reads back as the same double (std::to_chars without a precision), so a
  // printed configuration loads back unchanged and an error quotes the value given.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc{} ? std::string(buf, end) : std::string("nan");
}

// A TOML basic string: quotes, backslashes and control characters escaped, so it reads back the same.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

// The first of `names` that is set: its value parsed as a whole number, and the name.
std::optional<std::pair<long, std::string>> launcher_number(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < 0) {
      throw config_error(std::string("the launcher variable ") + n + " = \"" + v +
                         "\" is not a whole number >= 0; tvmm reads it for {rank} / {local_rank} in config paths");
    }
    return std::pair{x, std::string(n)};
  }
  return std::nullopt;
}

}  // namespace

RankInfo rank_info() {
  RankInfo r;
  if (auto v = launcher_number(
          {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"})) {
    r.rank = v->first;
    r.rank_from = v->second;
  }
  if (auto v = launcher_number({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                "MV2_COMM_WORLD_LOCAL_RANK"})) {
    r.local_rank = v->first;
  }
  if (auto v = launcher_number({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "MV2_COMM_WORLD_SIZE",
                                "LOCAL_WORLD_SIZE"})) {
    r.world_size = v->first;
  }
  return r;
}

std::string substitute_rank(std::string_view value, RankPaths kind, const std::string& name) {
  if (kind == RankPaths::no) return std::string(value);
  std::string out;
  bool placeholder = false;
  std::optional<RankInfo> info;
  auto get = [&]() -> const RankInfo& {
    if (!info) info = rank_info();
    return *info;
  };
  for (std::size_t i = 0; i < value.size();) {
    if (value[i] != '{') {
      out += value[i++];
      continue;
    }
    const auto close = value.find('}', i);
    const std::string_view token =
        value.substr(i, close == std::string_view::npos ? std::string_view::npos : close - i + 1);
    if (token == "{rank}") {
      out += std::to_string(get().rank);
    } else if (token == "{local_rank}") {
      out += std::to_string(get().local_rank);
    } else {
      throw config_error(name + " = \"" + std::string(value) + "\": unknown placeholder " + std::string(token) +
                         "; the placeholders are {rank} and {local_rank}");
    }
    placeholder = true;
    i += token.size();
  }
  // Several processes (torchrun, mpirun) and one output file: each writes its own.
  if (kind == RankPaths::files && !placeholder && !out.empty() && out != "-" && get().world_size > 1) {
    out += ".rank" + std::to_string(get().rank);
  }
  return out;
}

namespace {

// `d` as a whole number no larger than `max`; throws config_error("") otherwise (the caller adds the key
// and what was expected). Checked before any cast: converting an out-of-range double is undefined.
std::uint64_t whole(double d, double max) {
  if (!(d >= 0.0 && d <= max) || d != std::floor(d)) throw config_error("");
  return static_cast<std::uint64_t>(d);
}

// GB/s as bytes per second; throws config_error("") above 1e9 GB/s, where the product would grow
// out of a finite double for the largest numbers a file can hold.
double gbs(double v) {
  if (!(v <= 1e9)) throw config_error("");
  return v * 1e9;
}

// A size as a TOML string with the largest binary unit that divides it: "256MiB", "4096B".
std::string toml_size(std::size_t bytes, bool allows_auto) {
  if (bytes == 0 && allows_auto) return "\"auto\"";
  static constexpr const char* units[] = {"TiB", "GiB", "MiB", "KiB"};
  static constexpr std::size_t scales[] = {TiB, GiB, MiB, KiB};
  for (std::size_t i = 0; i < 4; ++i) {
    if (bytes != 0 && bytes % scales[i] == 0) return "\"" + std::to_string(bytes / scales[i]) + units[i] + "\"";
  }
  return "\"" + std::to_string(bytes) + "B\"";
}

// A size key; `field` returns the Config member it sets (a captureless lambda).
using SizeField = std::size_t& (*)(Config&);
ConfigKey size_key(std::string_view section, std::string_view key, const char* meaning, bool allows_auto,
                   SizeField field) {
  return ConfigKey{section,
                   key,
                   KeyType::size,
                   allows_auto ? "a size like \"512MiB\" or \"2GiB\" (or a number of bytes), or \"auto\""
                               : "a size like \"512MiB\" or \"2GiB\" (or a number of bytes)",
                   meaning,
                   allows_auto,
                   0.0,
                   {},
                   [field](Config& c, const KeyValue& v) { field(c) = v.size; },
                   [field, allows_auto](const Config& c) {
                     Config copy = c;  // the accessor gives a mutable reference; printing is rare
                     return toml_size(field(copy), allows_auto);
                   }};
}

using BoolField = bool& (*)(Config&);

// An output file's path: per-process placeholders substituted, "-" = standard error, "" = none.
using TextField = std::string& (*)(Config&);
ConfigKey output_file_key(std::string_view section, std::string_view key, const char* meaning, TextField field,
                          const char* short_env = nullptr) {
  return ConfigKey{section,
                   key,
                   KeyType::text,
                   "a file path ({rank} and {local_rank} are substituted), \"-\" (standard error) or \"\" (none)",
                   meaning,
                   false,
                   0.0,
                   {},
                   [field](Config& c, const KeyValue& v) { field(c) = v.text; },
                   [field](const Config& c) {
                     Config copy = c;  // the accessor gives a mutable reference; printing is rare
                     return toml_string(field(copy));
                   },
                   false,
                   RankPaths::files,
                   short_env};
}

ConfigKey bool_key(std::string_view section, std::string_view key, const char* meaning, BoolField field) {
  return ConfigKey{section,
                   key,
                   KeyType::boolean,
                   "true or false",
                   meaning,
                   false,
                   0.0,
                   {},
                   [field](Config& c, const KeyValue& v) { field(c) = v.flag; },
                   [field](const Config& c) {
                     Config copy = c;  // the accessor gives a mutable reference; printing is rare
                     return std::string(field(copy) ? "true" : "false");
                   }};
}

// A duration key in microseconds (a number >= 0, at most 1000 s).
using MicrosField = std::function<std::chrono::nanoseconds&(Config&)>;
ConfigKey micros_key(std::string_view section, std::string_view key, const char* meaning, MicrosField field) {
  return ConfigKey{section,
                   key,
                   KeyType::number,
                   "a number of microseconds from 0 to 1e9 (1000 s)",
                   meaning,
                   false,
                   0.0,
                   {},
                   [field](Config& c, const KeyValue& v) {
                     if (!(v.number <= 1e9)) throw config_error("");  // at most 1000 s
                     field(c) = std::chrono::nanoseconds(static_cast<std::int64_t>(v.number * 1e3));
                   },
                   [field](const Config& c) {
                     Config copy = c;  // the accessor gives a mutable reference; printing is rare
                     return toml_number(static_cast<double>(field(copy).count()) / 1e3);
                   }};
}

// The keys of the plug-points read their registries: their choices, and help texts naming each entry.
const char* eviction_policy_help() {
  static const std::string help = "eviction policy: " + common::described(policies::eviction_policies());
  return help.c_str();
}
const char* device_backend_help() {
  static const std::string help = "device backend: " + common::described(device::device_backends());
  return help.c_str();
}
const char* storage_backend_help() {
  static const std::string help = [] {
    std::string order;
    for (const auto& name : common::names_of(storage::storage_backends())) order += (order.empty() ? "" : ", ") + name;
    return "storage backend: auto (the first that starts here, in the order " + order + "), " +
           common::described(storage::storage_backends());
  }();
  return help.c_str();
}

std::vector<ConfigKey> make_keys() {
  std::vector<ConfigKey> keys;
  keys.push_back({"device", "backend", KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  device_backend_help(), false, 0.0, common::names_of(device::device_backends()),
                  [](Config& c, const KeyValue& v) { c.device_backend = v.text; },
                  [](const Config& c) { return "\"" + c.device_backend + "\""; }});
  keys.push_back(size_key("device", "budget",
                          "device memory the pager may use for pages (rounded down to whole pages; less than one "
                          "page is an error)",
                          false, [](Config& c) -> std::size_t& { return c.device_budget; }));
  keys.push_back(size_key("device", "page_size",
                          "unit of residency; \"auto\" (or 0) = the backend's granularity, else a multiple of it", true,
                          [](Config& c) -> std::size_t& { return c.page_size; }));
  keys.push_back(size_key("device", "va_size",
                          "device address reservation; bounds the total size of live tensors; \"auto\" = 4 x "
                          "(device + host budgets) + the NVMe budget, at least 1 GiB",
                          true, [](Config& c) -> std::size_t& { return c.va_size; }));
  keys.push_back(
      {"device",
       "ordinal",
       KeyType::text,
       "\"auto\" or a GPU number from 0 to 1024",
       "which GPU the cuda backend uses, as the driver numbers them (CUDA_VISIBLE_DEVICES applies); "
       "\"auto\" = the process's current device (what torch.cuda.set_device chose), else 0",
       false,
       0.0,
       {"auto"},
       [](Config& c, const KeyValue& v) {
         if (v.text == "auto") {
           c.cuda_device = -1;
           return;
         }
         // The loader passes digits only. More than four are over the limit, and std::stod of a long run
         // of them would throw out_of_range rather than config_error.
         if (v.text.size() > 4) throw config_error("");
         c.cuda_device = static_cast<int>(whole(std::stod(v.text), 1024));
       },
       [](const Config& c) { return c.cuda_device < 0 ? std::string("\"auto\"") : std::to_string(c.cuda_device); },
       true});
  keys.push_back(bool_key("device", "gpu_direct_rdma",
                          "cuda backend: device memory that GPUDirect RDMA can reach (cuMemCreate's "
                          "gpuDirectRDMACapable); needs a GPU that supports it with VMM",
                          [](Config& c) -> bool& { return c.gpu_direct_rdma; }));
  keys.push_back({"device",
                  "bus_gbs",
                  KeyType::number,
                  "a number of GB/s from 0 to 1e9",
                  "cuda backend: the speed device-to-host copies reach over the link to the host, in GB/s "
                  "(1e9 bytes/s), by which write-behind judges that bus idle; 0 = the PCIe link's, from sysfs",
                  false,
                  0.0,
                  {},
                  [](Config& c, const KeyValue& v) { c.bus_bytes_per_s = gbs(v.number); },
                  [](const Config& c) { return toml_number(c.bus_bytes_per_s / 1e9); }});
  keys.push_back(size_key("device.sim", "capacity",
                          "physical memory of the simulated GPU (a hard limit); \"auto\" = the "
                          "device budget",
                          true, [](Config& c) -> std::size_t& { return c.sim.capacity; }));
  keys.push_back(size_key("device.sim", "granularity", "mapping granularity of the simulated GPU (a power of two)",
                          false, [](Config& c) -> std::size_t& { return c.sim.granularity; }));
  keys.push_back({"device.sim",
                  "bandwidth_gbs",
                  KeyType::number,
                  "a number of GB/s from 0 to 1e9",
                  "modelled bus bandwidth per copy direction in GB/s (1e9 bytes/s); 0 = unthrottled",
                  false,
                  0.0,
                  {},
                  [](Config& c, const KeyValue& v) { c.sim.bandwidth_bytes_per_s = gbs(v.number); },
                  [](const Config& c) { return toml_number(c.sim.bandwidth_bytes_per_s / 1e9); }});
  for (const auto& [key, meaning, field] :
       {std::tuple{"disk_read_gbs",
                   "modelled sequential read speed of the machine's NVMe drive in GB/s (1e9 bytes/s), with timing = "
                   "\"model\": each NVMe read takes its bytes over it, one I/O after another; 0 = free",
                   &SimDeviceConfig::Disk::read_bytes_per_s},
        std::tuple{"disk_write_gbs",
                   "modelled sequential write speed of the machine's NVMe drive in GB/s (1e9 bytes/s), with timing = "
                   "\"model\"; 0 = free",
                   &SimDeviceConfig::Disk::write_bytes_per_s}}) {
    keys.push_back({"device.sim",
                    key,
                    KeyType::number,
                    "a number of GB/s from 0 to 1e9",
                    meaning,
                    false,
                    0.0,
                    {},
                    [f = field](Config& c, const KeyValue& v) { c.sim.disk.*f = gbs(v.number); },
                    [f = field](const Config& c) { return toml_number(c.sim.disk.*f / 1e9); }});
  }
  keys.push_back(micros_key("device.sim", "copy_latency_us", "modelled fixed cost of every copy, in microseconds",
                            [](Config& c) -> std::chrono::nanoseconds& { return c.sim.copy_latency; }));
  // The simulator's modelled driver-call costs (SimDeviceConfig::VmmCosts), one key per field.
  struct CostKey {
    const char* key;
    const char* meaning;
    std::chrono::nanoseconds SimDeviceConfig::VmmCosts::*field;
  };
  using Costs = SimDeviceConfig::VmmCosts;
  static constexpr CostKey kCostKeys[] = {
      {"map_us", "modelled host time of one cuMemMap call, spent by the calling thread (0 = free)", &Costs::map},
      {"set_access_us", "modelled host time of cuMemSetAccess per mapping its range covers (0 = free)",
       &Costs::set_access},
      {"set_access_d2h_wait_us",
       "modelled wait of cuMemSetAccess, per mapping, for device-to-host copies still running, at most this long "
       "(0 = none)",
       &Costs::set_access_d2h_wait},
      {"unmap_us", "modelled host time of cuMemUnmap per mapping its range covers (0 = free)", &Costs::unmap},
      {"create_us", "modelled host time of cuMemCreate per granule of memory created (0 = free)", &Costs::create},
      {"event_record_us", "modelled host time of one cuEventRecord call, spent by the calling thread (0 = free)",
       &Costs::event_record},
      {"event_query_us", "modelled host time of one cuEventQuery call, spent by the calling thread (0 = free)",
       &Costs::event_query},
      {"stream_wait_us", "modelled host time of one cuStreamWaitEvent call, spent by the calling thread (0 = free)",
       &Costs::stream_wait},
      {"copy_call_us",
       "modelled host time of queueing one asynchronous copy, spent by the calling thread (0 = free; the copy's "
       "own time on the bus is separate)",
       &Costs::copy_call},
      {"launch_us",
       "modelled host time of one kernel launch, spent by the calling thread (0 = free; the kernel's own time on "
       "the device is separate)",
       &Costs::launch},
  };
  for (const CostKey& k : kCostKeys) {
    keys.push_back(micros_key("device.sim", k.key, k.meaning,
                              [f = k.field](Config& c) -> std::chrono::nanoseconds& { return c.sim.vmm_costs.*f; }));
  }
  keys.push_back({"device.sim",
                  "pci_bus_id",
                  KeyType::text,
                  "a PCI bus id like \"0000:65:00.0\", or \"\"",
                  "the PCI bus id the simulated GPU claims, so host.numa = auto can find its node (\"\" = none: "
                  "node 0)",
                  false,
                  0.0,
                  {},
                  [](Config& c, const KeyValue& v) {
                    if (unsigned d, b, dev, f;
                        !v.text.empty() && !topology::parse_pci_bus_id(v.text, &d, &b, &dev, &f)) {
                      throw config_error("");
                    }
                    c.sim.pci_bus_id = v.text;
                  },
                  [](const Config& c) { return toml_string(c.sim.pci_bus_id); }});
  keys.push_back({"device.sim",
                  "timing",
                  KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  "device time: \"wall\" = host work between waits takes its wall-clock time; \"model\" = host work "
                  "takes none, so device time is the model's alone (benchmarks)",
                  false,
                  0.0,
                  {"wall", "model"},
                  [](Config& c, const KeyValue& v) { c.sim.timing = v.text; },
                  [](const Config& c) { return "\"" + c.sim.timing + "\""; }});
  keys.push_back(size_key("host", "budget",
                          "host memory the pager may use for evicted pages (rounded down to whole pages; less than "
                          "one page, two with an NVMe tier, is an error)",
                          false, [](Config& c) -> std::size_t& { return c.host_budget; }));
  keys.push_back({"host",
                  "numa",
                  KeyType::text,
                  "\"auto\", \"none\", \"interleave\" or a NUMA node id",
                  "where the host tier's frames go: auto = the GPU's nearest node, a node id, interleave over "
                  "all nodes, or none (the kernel's default)",
                  false,
                  0.0,
                  {"auto", "none", "interleave"},
                  [](Config& c, const KeyValue& v) { c.host_numa = v.text; },
                  [](const Config& c) {
                    const bool id =
                        !c.host_numa.empty() && c.host_numa.find_first_not_of("0123456789") == std::string::npos;
                    return id ? c.host_numa : toml_string(c.host_numa);
                  },
                  true});
  keys.push_back(bool_key("host", "numa_strict",
                          "true = the frames may only come from the chosen nodes (MPOL_BIND); false = preferred, "
                          "other nodes when those are full",
                          [](Config& c) -> bool& { return c.host_numa_strict; }));
  keys.push_back(bool_key("host", "bind_threads",
                          "bind copy-engine and I/O worker threads to the CPUs of the host tier's node",
                          [](Config& c) -> bool& { return c.bind_threads; }));
  keys.push_back({"nvme",
                  "paths",
                  KeyType::paths,
                  "an array of directory paths like [\"/mnt/nvme0/tvmm\", \"/mnt/nvme1/tvmm\"] (or one string, "
                  "as in the environment, with paths separated by ':')",
                  "directories of the NVMe tier's files, one per drive (slots are striped across them); {rank} and "
                  "{local_rank} are substituted",
                  false,
                  0.0,
                  {},
                  [](Config& c, const KeyValue& v) { c.nvme.paths = v.list; },
                  [](const Config& c) {
                    std::string out = "[";
                    for (const auto& p : c.nvme.paths) out += (out.size() > 1 ? ", " : "") + toml_string(p);
                    return out + "]";
                  },
                  false,
                  RankPaths::dirs});
  keys.push_back(size_key("nvme", "budget",
                          "storage the NVMe tier may use for pages, reserved at start; 0 = no NVMe tier", false,
                          [](Config& c) -> std::size_t& { return c.nvme.budget; }));
  keys.push_back({"nvme", "backend", KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  storage_backend_help(), false, 0.0, storage::storage_backend_choices(),
                  [](Config& c, const KeyValue& v) { c.nvme.backend = v.text; },
                  [](const Config& c) { return "\"" + c.nvme.backend + "\""; }});
  keys.push_back(
      {"nvme",
       "queue_depth",
       KeyType::number,
       "a whole number between 1 and 4096",
       "NVMe requests in flight at once, and the most pages moved to or from the tier in one batch",
       false,
       1.0,
       {},
       [](Config& c, const KeyValue& v) { c.nvme.queue_depth = static_cast<unsigned>(whole(v.number, 4096)); },
       [](const Config& c) { return std::to_string(c.nvme.queue_depth); }});
  keys.push_back(bool_key("nvme", "direct",
                          "open the tier's files with O_DIRECT (bypass the page cache); false only for filesystems "
                          "without O_DIRECT",
                          [](Config& c) -> bool& { return c.nvme.direct; }));
  keys.push_back(bool_key("nvme", "read_ahead",
                          "while an access trace replays, read the NVMe pages of the next pins into the host tier "
                          "ahead of them, one read in flight, without waiting for it",
                          [](Config& c) -> bool& { return c.nvme.read_ahead; }));
  keys.push_back({"pager",
                  "wait_timeout_ms",
                  KeyType::number,
                  "a whole number of milliseconds >= 1",
                  "how long a pin waits for other threads to unpin before failing with out_of_memory",
                  false,
                  1.0,
                  {},
                  [](Config& c, const KeyValue& v) {
                    c.wait_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(whole(v.number, 1e12)));
                  },
                  [](const Config& c) { return std::to_string(c.wait_timeout.count()); }});
  keys.push_back({"policy.prefetch",
                  "name",
                  KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  "prefetch policy: none (explicit prefetch only), trace (replay the pins of the recorded "
                  "iteration ahead) or sequential (after a pin, page in the next pages of the same tensor)",
                  false,
                  0.0,
                  {"none", "trace", "sequential"},
                  [](Config& c, const KeyValue& v) { c.prefetch = v.text; },
                  [](const Config& c) { return "\"" + c.prefetch + "\""; }});
  keys.push_back(
      {"policy.prefetch",
       "distance",
       KeyType::number,
       "a whole number from 0 to 1e9",
       "how far ahead prefetch runs: pins (trace) or pages (sequential); 0 = the mode's default (1 pin, 4 pages)",
       false,
       0.0,
       {},
       [](Config& c, const KeyValue& v) { c.prefetch_distance = static_cast<std::size_t>(whole(v.number, 1e9)); },
       [](const Config& c) { return std::to_string(c.prefetch_distance); }});
  keys.push_back(size_key("policy.admission", "min_bytes",
                          "allocations smaller than this are never evicted; those that fit a page share pages "
                          "of a resident small-object arena; 0 = all evictable",
                          false, [](Config& c) -> std::size_t& { return c.min_bytes; }));
  keys.push_back(size_key("policy.admission", "nvme_min_bytes",
                          "allocations smaller than this never go to the NVMe tier (they stay on the device "
                          "or the host); 0 = any may",
                          false, [](Config& c) -> std::size_t& { return c.nvme_min_bytes; }));
  keys.push_back({"policy.eviction", "name", KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  eviction_policy_help(), false, 0.0, common::names_of(policies::eviction_policies()),
                  [](Config& c, const KeyValue& v) { c.eviction = v.text; },
                  [](const Config& c) { return "\"" + c.eviction + "\""; }});
  keys.push_back({"policy.eviction",
                  "keep_recent",
                  KeyType::number,
                  "a whole number of pins from 0 to 1e9",
                  "belady only: pages of tensors pinned in the last N pins are evicted only when no other page can be "
                  "(their write-backs would wait for the kernels that just used them); 0 = pure farthest next use",
                  false,
                  0.0,
                  {},
                  [](Config& c, const KeyValue& v) { c.keep_recent = static_cast<std::size_t>(whole(v.number, 1e9)); },
                  [](const Config& c) { return std::to_string(c.keep_recent); }});
  keys.push_back(bool_key("policy.eviction", "write_behind",
                          "while the access trace replays (belady, or trace prefetch): copy a write to the host tier "
                          "right after its kernel, keeping the page resident, where earlier iterations evicted that "
                          "write's data before its next write, so that the eviction later moves nothing; a copy waits "
                          "while the device-to-host bus is busy, where the device can tell, and none is made while the "
                          "host tier fills up (on by default; off moves no byte before its eviction)",
                          [](Config& c) -> bool& { return c.write_behind; }));
  keys.push_back({"transparent",
                  "memory",
                  KeyType::text,
                  "",  // "one of: ...", generated from the choices below
                  "transparent mode's memory (LD_PRELOAD, tvmm_malloc): vmm = pages mapped on device frames or "
                  "host-located VMM chunks, remapped at quiescent points; um = managed memory placed with advice and "
                  "prefetches; auto = vmm where the device has host-located VMM memory, else um",
                  false,
                  0.0,
                  {"auto", "vmm", "um"},
                  [](Config& c, const KeyValue& v) { c.transparent_memory = v.text; },
                  [](const Config& c) { return toml_string(c.transparent_memory); }});
  keys.push_back({"transparent",
                  "placement",
                  KeyType::text,
                  "",
                  "which pages of transparent mode stay on the device: use = those the program's recent kernel "
                  "launches, copies and memsets named most (learnt from their arguments), rebalanced at synchronising "
                  "calls; allocation = the newest allocations (no launch is read)",
                  false,
                  0.0,
                  {"use", "allocation"},
                  [](Config& c, const KeyValue& v) { c.transparent_placement = v.text; },
                  [](const Config& c) { return toml_string(c.transparent_placement); }});
  keys.push_back(output_file_key(
      "stats", "file",
      "when the pager is destroyed, its final stats are written here as one JSON object (also TVMM_STATS)",
      [](Config& c) -> std::string& { return c.stats_file; }, "TVMM_STATS"));
  keys.push_back(output_file_key(
      "pin_log", "file",
      "every pin and iteration mark as a line of JSON, for studying policies offline (old name: trace.file)",
      [](Config& c) -> std::string& { return c.pin_log_file; }));
  keys.back().old_name = "trace.file";
  keys.push_back(output_file_key(
      "timeline", "file",
      "what the pager did and when, as Chrome trace-event JSON for Perfetto (ui.perfetto.dev): page moves per copy "
      "engine, NVMe I/O, pins per stream, pin stalls per thread, evictions; written when the pager is destroyed "
      "(also TVMM_TIMELINE; old names: trace.events, TVMM_TRACE)",
      [](Config& c) -> std::string& { return c.timeline_file; }, "TVMM_TIMELINE"));
  keys.back().old_name = "trace.events";
  keys.back().old_short_env = "TVMM_TRACE";
  // What a valid value of a text key with choices looks like, from the choices themselves; and the
  // Config member each such key sets, which Config::validate checks for programs that set it in code.
  for (auto& k : keys) {
    if (k.type != KeyType::text || k.choices.empty() || k.whole_number_too) continue;
    k.expected = "one of: ";
    for (std::size_t i = 0; i < k.choices.size(); ++i) k.expected += (i == 0 ? "" : ", ") + toml_string(k.choices[i]);
  }
  const std::pair<std::string_view, const char*> fields[] = {{"device.backend", "device_backend"},
                                                             {"device.sim.timing", "sim.timing"},
                                                             {"nvme.backend", "nvme.backend"},
                                                             {"policy.prefetch.name", "prefetch"},
                                                             {"policy.eviction.name", "eviction"},
                                                             {"transparent.memory", "transparent_memory"},
                                                             {"transparent.placement", "transparent_placement"}};
  for (const auto& [name, field] : fields) {
    for (auto& k : keys) {
      if (std::string(k.section) + "." + std::string(k.key) == name) k.field = field;
    }
  }
  return keys;
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

}  // namespace tvmm::vmm
