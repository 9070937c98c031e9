#include "tools/cli/info.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_api.hpp"
#endif
#include "backends/device/host_link.hpp"
#include "backends/storage/storage_backend.hpp"
#include "backends/topology/topology.hpp"
#include "tvmm/tvmm.hpp"
#include "vmm/config/config_keys.hpp"

namespace tvmm::cli {

namespace {

// A JSON string: TOML basic strings escape the same way.
std::string json_string(const std::string& s) { return vmm::toml_string(s); }

// "0-3,8,10-11"
std::string cpu_ranges(const std::vector<unsigned>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<std::uint64_t> meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  std::uint64_t v = 0;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (ls >> k >> v && k == key + ":") {
      ls >> unit;
      return unit == "kB" ? v * 1024 : v;
    }
  }
  return std::nullopt;
}

bool has_cap_ipc_lock() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 14) & 1;  // CAP_IPC_LOCK
  }
  return false;
}

struct Gpu {
  int index = 0;
  std::string name, bus_id;
  std::uint64_t memory = 0;
  std::optional<unsigned> node;
  bool vmm = false;               // cuMemCreate/cuMemMap (tvmm needs them)
  bool host_numa_chunks = false;  // cuMemCreate at CU_MEM_LOCATION_TYPE_HOST_NUMA
  std::optional<double> link;     // bytes/s each way of its PCIe link, as sysfs describes it
};

struct Cuda {
  bool driver = false;
  std::string status;  // for people
  std::vector<Gpu> gpus;
};

// The CUDA driver, through the CUDA backend's own loader (libcuda.so.1, cuGetProcAddress_v2).
Cuda probe_cuda(const topology::Topology* topo) {
  Cuda c;
#if defined(TVMM_HAVE_CUDA)
  std::shared_ptr<const device::cuda::Api> api;
  try {
    api = device::cuda::load_driver();
  } catch (const error& e) {
    c.status = e.what();
    return c;
  }
  c.driver = true;
  int n = 0;
  if (const CUresult rc = api->Init(0); rc != CUDA_SUCCESS) {
    c.status = "CUDA driver found, but cuInit failed with " + device::cuda::result_name(*api, rc) +
               " (no GPU visible, or the driver and kernel module disagree)";
    return c;
  }
  if (api->DeviceGetCount(&n) != CUDA_SUCCESS) {
    c.status = "CUDA driver found, but cuDeviceGetCount failed";
    return c;
  }
  c.status = "CUDA driver found: " + std::to_string(n) + " GPU(s)";
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    if (api->DeviceGet(&dev, i) != CUDA_SUCCESS) continue;
    Gpu g;
    g.index = i;
    char buf[256] = {};
    if (api->DeviceGetName(buf, sizeof buf, dev) == CUDA_SUCCESS) g.name = buf;
    char id[64] = {};
    if (api->DeviceGetPCIBusId(id, sizeof id, dev) == CUDA_SUCCESS) g.bus_id = id;
    std::size_t bytes = 0;
    if (api->DeviceTotalMem(&bytes, dev) == CUDA_SUCCESS) g.memory = bytes;
    int v = 0;
    g.vmm = api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS &&
            v != 0;
    v = 0;
    g.host_numa_chunks = api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                                 dev) == CUDA_SUCCESS &&
                         v != 0;
    if (topo != nullptr && !g.bus_id.empty()) g.node = topo->node_near_pci(g.bus_id);
    g.link = device::pcie_copy_bytes_per_s(g.bus_id);
    c.gpus.push_back(std::move(g));
  }
#else
  (void)topo;
  c.status = "this build of tvmm has no CUDA backend (cuda.h was not found when it was built)";
#endif
  return c;
}

std::string limit_text(rlim_t v) {
  return v == RLIM_INFINITY ? "unlimited" : format_bytes(static_cast<std::size_t>(v));
}
std::string limit_json(rlim_t v) { return v == RLIM_INFINITY ? "null" : std::to_string(v); }

}  // namespace

void drop_outputs(Config& config) {
  for (auto [key, path] : {std::pair{"stats.file", &config.stats_file}, std::pair{"pin_log.file", &config.pin_log_file},
                           std::pair{"timeline.file", &config.timeline_file}}) {
    if (path->empty() || *path == "-") {
      path->clear();
      continue;
    }
    // fopen(path, "w") needs write access to the file if it exists, else to its directory.
    struct stat st {};
    const bool exists = ::stat(path->c_str(), &st) == 0;
    const std::size_t slash = path->find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path->substr(0, slash);
    int err = 0;
    if (exists && S_ISDIR(st.st_mode)) {
      err = EISDIR;
    } else if (::access(exists ? path->c_str() : dir.c_str(), exists ? W_OK : W_OK | X_OK) != 0) {
      err = errno;
    }
    if (err != 0) {
      throw config_error(std::string(key) + " = \"" + *path + "\": cannot open it for writing (" +
                         std::generic_category().message(err) +
                         "); give a path in a writable directory, or \"-\" for standard error");
    }
    path->clear();
  }
}

bool no_gpu_here(const std::string& error_name) {
  // "driver": libcuda.so.1 missing or too old (cuda_api.cpp); the driver's own name when cuInit finds no
  // GPU or none it can drive.
  return error_name == "driver" || error_name == "CUDA_ERROR_NO_DEVICE" || error_name == "CUDA_ERROR_NOT_INITIALIZED" ||
         error_name == "CUDA_ERROR_INSUFFICIENT_DRIVER" || error_name == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" ||
         error_name == "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
}

int run_info(const InfoOptions& o) {
  // The configuration first: a bad one is the one error this command reports as such.
  std::optional<Pager> pager;
  std::string backend_note;  // why the placement is not the configured backend's
  try {
    Config cfg;
    if (!o.config.empty()) {
      cfg = o.use_env ? load_config(o.config) : parse_config(read_config_file(o.config), o.config);
    } else if (o.use_env) {
      (void)apply_environment(cfg);  // what a program with no policy file gets (tvmm_pager_create(NULL))
    }
    // The placement does not depend on the NVMe tier, whose drives may not be on this machine.
    cfg.nvme.budget = 0;
    drop_outputs(cfg);
    try {
      pager.emplace(cfg);
    } catch (const device_error& e) {
      // A GPU config (or TVMM_DEVICE_BACKEND=cuda) on a machine with no GPU: the report is still worth
      // having, the placement then for the simulated device, and says so.
      if (cfg.device_backend != "cuda" || !no_gpu_here(e.error_name())) throw;
      backend_note =
          std::string("the cuda backend cannot start here (") + e.what() + "): the placement is the simulated device's";
      cfg.device_backend = "sim";
      pager.emplace(cfg);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmm info: %s\n", e.what());
    return 1;
  }

  std::shared_ptr<const topology::Topology> topo;
  std::string topo_error;
  try {
    topo = topology::Topology::machine();
  } catch (const std::exception& e) {
    topo_error = e.what();
  }
  const Cuda cuda = probe_cuda(topo.get());
  std::vector<topology::PciDevice> pci_gpus;
  if (topo) {
    for (const auto& d : topo->pci_devices()) {
      if (d.is_nvidia_gpu()) pci_gpus.push_back(d);
    }
  }
  const int uring = storage::probe_uring();
  const std::string uring_disabled = first_line("/proc/sys/kernel/io_uring_disabled");
  rlimit memlock{};
  ::getrlimit(RLIMIT_MEMLOCK, &memlock);
  const bool ipc_lock = has_cap_ipc_lock();
  std::string thp = first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  if (auto a = thp.find('['), b = thp.find(']'); a != std::string::npos && b != std::string::npos && b > a) {
    thp = thp.substr(a + 1, b - a - 1);
  }
  const auto huge_total = meminfo("HugePages_Total"), huge_free = meminfo("HugePages_Free"),
             huge_size = meminfo("Hugepagesize");
  const auto placement = pager->placement();
  const std::size_t host_bytes = pager->config().host_budget;
  const bool fixed_fit = ipc_lock || memlock.rlim_cur == RLIM_INFINITY || host_bytes <= memlock.rlim_cur;

  if (o.json) {
    std::string j = "{\n  \"numa_nodes\": [";
    if (topo) {
      for (std::size_t i = 0; i < topo->nodes().size(); ++i) {
        const auto& n = topo->nodes()[i];
        j += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(n.id) +
             ", \"memory_bytes\": " + std::to_string(n.memory_bytes) + ", \"cpus\": [";
        for (std::size_t k = 0; k < n.cpus.size(); ++k) j += (k ? ", " : "") + std::to_string(n.cpus[k]);
        j += "]}";
      }
    }
    j += "],\n  \"topology_error\": " + (topo_error.empty() ? std::string("null") : json_string(topo_error));
    j += ",\n  \"cuda\": {\"driver\": " + std::string(cuda.driver ? "true" : "false") +
         ", \"status\": " + json_string(cuda.status) + ", \"gpus\": [";
    for (std::size_t i = 0; i < cuda.gpus.size(); ++i) {
      const auto& g = cuda.gpus[i];
      j += std::string(i ? ", " : "") + "{\"index\": " + std::to_string(g.index) +
           ", \"name\": " + json_string(g.name) + ", \"pci_bus_id\": " + json_string(g.bus_id) +
           ", \"memory_bytes\": " + std::to_string(g.memory) +
           ", \"numa_node\": " + (g.node ? std::to_string(*g.node) : "null") +
           ", \"vmm\": " + (g.vmm ? "true" : "false") +
           ", \"host_numa_chunks\": " + (g.host_numa_chunks ? "true" : "false") +
           ", \"host_link_bytes_per_s\": " + (g.link ? std::to_string(*g.link) : "null") + "}";
    }
    j += "]},\n  \"pci_nvidia_gpus\": [";
    for (std::size_t i = 0; i < pci_gpus.size(); ++i) {
      j += std::string(i ? ", " : "") + "{\"pci_bus_id\": " + json_string(pci_gpus[i].bus_id) +
           ", \"numa_node\": " + (pci_gpus[i].node ? std::to_string(*pci_gpus[i].node) : "null") + "}";
    }
    j += "],\n  \"io_uring\": {\"works\": " + std::string(uring == 0 ? "true" : "false") +
         ", \"error\": " + (uring == 0 ? "null" : json_string(storage::errno_text(-uring))) +
         ", \"kernel_io_uring_disabled\": " + (uring_disabled.empty() ? "null" : json_string(uring_disabled)) + "}";
    j += ",\n  \"memlock\": {\"soft_bytes\": " + limit_json(memlock.rlim_cur) +
         ", \"hard_bytes\": " + limit_json(memlock.rlim_max) + ", \"cap_ipc_lock\": " + (ipc_lock ? "true" : "false") +
         ", \"host_tier_fits_fixed_buffers\": " + (fixed_fit ? "true" : "false") + "}";
    j += ",\n  \"huge_pages\": {\"transparent\": " + json_string(thp) +
         ", \"total\": " + (huge_total ? std::to_string(*huge_total) : "null") +
         ", \"free\": " + (huge_free ? std::to_string(*huge_free) : "null") +
         ", \"size_bytes\": " + (huge_size ? std::to_string(*huge_size) : "null") + "}";
    j += ",\n  \"placement\": {\"config\": " + (o.config.empty() ? std::string("null") : json_string(o.config)) +
         ", \"host_budget_bytes\": " + std::to_string(host_bytes) +
         ", \"host_policy\": " + json_string(placement.host_policy) +
         ", \"host_reason\": " + json_string(placement.host_reason) +
         ", \"host_outcome\": " + json_string(placement.host_outcome) +
         ", \"threads\": " + json_string(placement.threads) +
         ", \"note\": " + (backend_note.empty() ? std::string("null") : json_string(backend_note)) + "}\n}\n";
    std::fputs(j.c_str(), stdout);
    return 0;
  }

  std::printf("NUMA nodes:\n");
  if (!topo) std::printf("  unknown (%s)\n", topo_error.c_str());
  if (topo) {
    for (const auto& n : topo->nodes()) {
      std::printf("  node %u: %s, CPUs %s\n", n.id, format_bytes(n.memory_bytes).c_str(), cpu_ranges(n.cpus).c_str());
    }
    if (topo->nodes().size() == 1) std::printf("  (one node: placement cannot matter on this machine)\n");
  }
  std::printf("GPUs:\n  %s\n", cuda.status.c_str());
  for (const auto& g : cuda.gpus) {
    std::printf("  GPU %d: %s, %s, PCI %s, nearest NUMA node %s; VMM %s; host-NUMA VMM chunks %s\n", g.index,
                g.name.c_str(), format_bytes(g.memory).c_str(), g.bus_id.c_str(),
                g.node ? std::to_string(*g.node).c_str() : "unknown", g.vmm ? "yes" : "NO (tvmm cannot use it)",
                g.host_numa_chunks ? "supported" : "not supported");
    if (g.link) {
      std::printf("    host link: copies at about %.1f GB/s each way (its PCIe link in sysfs)\n", *g.link / 1e9);
    } else {
      std::printf(
          "    host link: not described in sysfs; write-behind cannot tell when its bus is busy "
          "unless device.bus_gbs is set\n");
    }
  }
  for (const auto& d : pci_gpus) {
    std::printf("  on the PCI bus: NVIDIA GPU at %s, nearest NUMA node %s\n", d.bus_id.c_str(),
                d.node ? std::to_string(*d.node).c_str() : "unknown");
  }
  if (pci_gpus.empty() && topo) std::printf("  no NVIDIA GPU on the PCI bus\n");
  std::printf("io_uring (the NVMe tier):\n");
  if (uring == 0) {
    std::printf("  works\n");
  } else {
    std::printf("  unavailable: %s%s; the NVMe tier would use pread/pwrite threads (nvme.backend = \"posix\")\n",
                storage::errno_text(-uring).c_str(),
                uring_disabled.empty() ? ""
                                       : (" (kernel.io_uring_disabled = " + uring_disabled +
                                          "; seccomp filters in containers also block it)")
                                             .c_str());
  }
  std::printf("RLIMIT_MEMLOCK: soft %s, hard %s%s\n", limit_text(memlock.rlim_cur).c_str(),
              limit_text(memlock.rlim_max).c_str(), ipc_lock ? " (CAP_IPC_LOCK: not enforced)" : "");
  std::printf("  io_uring fixed buffers (the host tier, %s) %s\n", format_bytes(host_bytes).c_str(),
              fixed_fit ? "fit: NVMe transfers use registered buffers"
                        : "do not fit: NVMe transfers fall back to plain reads and writes (raise `ulimit -l`)");
  std::printf("Huge pages: transparent %s", thp.empty() ? "unknown" : thp.c_str());
  if (huge_total && huge_size) {
    std::printf("; %llu reserved pages of %s (%llu free)", static_cast<unsigned long long>(*huge_total),
                format_bytes(*huge_size).c_str(), static_cast<unsigned long long>(huge_free.value_or(0)));
  }
  std::printf("\nPlacement%s:\n", o.config.empty() ? " (default configuration)" : (" for " + o.config).c_str());
  std::printf("  host tier: %s\n    why: %s\n    result: %s\n  worker threads: %s\n", placement.host_policy.c_str(),
              placement.host_reason.c_str(), placement.host_outcome.c_str(), placement.threads.c_str());
  if (!backend_note.empty()) std::printf("  note: %s\n", backend_note.c_str());
  return 0;
}

}  // namespace tvmm::cli
