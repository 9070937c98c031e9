#include "tools/cli/stats.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::cli {

namespace {

using json = nlohmann::json;

std::uint64_t num(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    throw invalid_argument(std::string("it has no whole number \"") + key + "\"");
  }
  return it->get<std::uint64_t>();
}

std::string bytes(std::uint64_t b) { return format_bytes(static_cast<std::size_t>(b)); }

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

void line(std::ostringstream& o, const char* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  o << buf << "\n";
}

std::string pager_report(const json& j, const std::string& source) {
  std::ostringstream o;
  o << source << ": a pager's stats, pages of " << bytes(num(j, "page_size")) << "\n\n";
  line(o, "%-8s %12s %12s %12s", "tier", "in use", "peak", "budget");
  line(o, "%-8s %12s %12s %12s", "device", bytes(num(j, "device_used_bytes")).c_str(),
       bytes(num(j, "device_peak_bytes")).c_str(), bytes(num(j, "device_budget")).c_str());
  line(o, "%-8s %12s %12s %12s", "host", bytes(num(j, "host_used_bytes")).c_str(),
       bytes(num(j, "host_peak_bytes")).c_str(), bytes(num(j, "host_budget")).c_str());
  if (num(j, "nvme_budget") != 0) {
    line(o, "%-8s %12s %12s %12s", "nvme", bytes(num(j, "nvme_used_bytes")).c_str(),
         bytes(num(j, "nvme_peak_bytes")).c_str(), bytes(num(j, "nvme_budget")).c_str());
  }
  o << "\n";
  line(o, "%-16s %12s %10s", "traffic", "bytes", "pages");
  for (const char* dir : {"host_to_device", "device_to_host", "host_to_nvme", "nvme_to_host"}) {
    const auto it = j.find(dir);
    if (it == j.end() || !it->is_object()) throw invalid_argument(std::string("it has no \"") + dir + "\" object");
    std::string name = dir;
    for (auto& c : name) c = c == '_' ? ' ' : c;
    line(o, "%-16s %12s %10llu", name.c_str(), bytes(num(*it, "bytes")).c_str(),
         static_cast<unsigned long long>(num(*it, "pages")));
  }
  o << "\n";
  const auto hits = num(j, "hits"), misses = num(j, "misses");
  line(o, "pins %llu: %s of pages resident when pinned (%llu hits, %llu misses); %.1f ms stalled",
       static_cast<unsigned long long>(num(j, "pins")), percent(hits, hits + misses).c_str(),
       static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
       static_cast<double>(num(j, "stall_ns")) / 1e6);
  line(o, "evictions %llu (%llu clean: no write-back); prefetched %llu pages; trace divergences %llu",
       static_cast<unsigned long long>(num(j, "evictions")), static_cast<unsigned long long>(num(j, "clean_evictions")),
       static_cast<unsigned long long>(num(j, "prefetched")),
       static_cast<unsigned long long>(num(j, "trace_divergences")));
  if (j.contains("nvme_read_ahead") && num(j, "nvme_read_ahead") != 0) {  // older stats files lack it
    line(o, "read ahead from NVMe into the host tier, before their pins: %llu pages",
         static_cast<unsigned long long>(num(j, "nvme_read_ahead")));
  }
  if (j.contains("written_behind")) {  // stats files from before write-behind lack it
    line(o, "written behind (copied to the host while resident, so that their eviction moves nothing): %llu pages",
         static_cast<unsigned long long>(num(j, "written_behind")));
  }
  if (j.contains("kept_mappings")) {  // stats files from before 0.2 lack it
    line(o, "page-ins into the frame still mapped at their address (no driver call): %llu",
         static_cast<unsigned long long>(num(j, "kept_mappings")));
  }
  if (j.contains("remap_ns")) {  // written since the second H200 run
    line(o, "host time in the driver calls of the other page-ins (unmap, map, access grant): %.1f ms",
         static_cast<double>(num(j, "remap_ns")) / 1e6);
  }
  if (const auto driver = j.find("driver"); driver != j.end() && driver->is_object()) {
    line(o, "%-12s %12s %12s %10s", "driver call", "calls", "host ms", "us each");
    for (const auto& [name, t] : driver->items()) {
      const auto calls = num(t, "calls"), ns = num(t, "ns");
      if (calls == 0) continue;
      line(o, "%-12s %12llu %12.1f %10.1f", name.c_str(), static_cast<unsigned long long>(calls),
           static_cast<double>(ns) / 1e6, static_cast<double>(ns) / 1e3 / static_cast<double>(calls));
    }
  }
  line(o, "tensors allocated %llu; live now %s", static_cast<unsigned long long>(num(j, "allocations")),
       bytes(num(j, "live_bytes")).c_str());
  const auto we = num(j, "nvme_write_errors"), re = num(j, "nvme_read_errors"), ce = num(j, "nvme_corrupt_reads");
  if (we + re + ce != 0) {
    line(o, "NVMe ERRORS: %llu failed writes, %llu failed reads, %llu corrupt reads (never handed out)",
         static_cast<unsigned long long>(we), static_cast<unsigned long long>(re), static_cast<unsigned long long>(ce));
  }
  return o.str();
}

std::string transparent_report(const json& j, const std::string& source) {
  std::ostringstream o;
  const auto mech = j.find("mechanism");
  const auto backend = j.find("backend");
  o << source << ": transparent mode (" << (mech != j.end() && mech->is_string() ? mech->get<std::string>() : "?")
    << " on the " << (backend != j.end() && backend->is_string() ? backend->get<std::string>() : "?")
    << " device), pages of " << bytes(num(j, "page_size")) << "\n\n";
  line(o, "budgets: device %s, host %s", bytes(num(j, "device_budget")).c_str(), bytes(num(j, "host_budget")).c_str());
  line(o, "in use at exit: %s (%s on the device); peak %s", bytes(num(j, "bytes_in_use")).c_str(),
       bytes(num(j, "bytes_on_device")).c_str(), bytes(num(j, "peak_bytes")).c_str());
  // Frees that waited: in stream order on the freeing stream (stream_ordered_frees: cudaFreeAsync and
  // PyTorch's frees on a GPU), or for the next quiescent point (deferred_frees: the same calls on the
  // simulated GPU, which cannot wait on the program's streams). Files from before the first lack it.
  const auto ordered = j.find("stream_ordered_frees");
  line(o, "allocations %llu, frees %llu (%llu in stream order, %llu at a quiescent point)",
       static_cast<unsigned long long>(num(j, "allocations")), static_cast<unsigned long long>(num(j, "frees")),
       static_cast<unsigned long long>(ordered != j.end() ? num(j, "stream_ordered_frees") : 0),
       static_cast<unsigned long long>(num(j, "deferred_frees")));
  line(o, "pages demoted to the host %llu (%s), promoted to the device %llu (%s)",
       static_cast<unsigned long long>(num(j, "pages_demoted")), bytes(num(j, "bytes_demoted")).c_str(),
       static_cast<unsigned long long>(num(j, "pages_promoted")), bytes(num(j, "bytes_promoted")).c_str());
  line(o, "device drains %llu; quiescent points %llu", static_cast<unsigned long long>(num(j, "drains")),
       static_cast<unsigned long long>(num(j, "quiescent_points")));
  // Written since placement by use (files from before it lack these keys).
  if (const auto placement = j.find("placement"); placement != j.end() && placement->is_string()) {
    const std::uint64_t used = num(j, "used_bytes");
    const std::string share =
        used == 0
            ? std::string("no use noted")
            : std::to_string(static_cast<int>(
                  100.0 * static_cast<double>(num(j, "used_bytes_on_device")) / static_cast<double>(used) + 0.5)) +
                  "% of the bytes they named on the device";
    line(o, "placement by %s: %llu uses noted in launches, copies and memsets (%s); %llu pages swapped",
         placement->get<std::string>().c_str(), static_cast<unsigned long long>(num(j, "uses_noted")), share.c_str(),
         static_cast<unsigned long long>(num(j, "pages_swapped")));
    line(o, "device memory given back to allocations outside tvmm: %s", bytes(num(j, "bytes_given_back")).c_str());
  }
  return o.str();
}

}  // namespace

std::string describe_stats(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw invalid_argument(source + " is not JSON (" + e.what() +
                           "); expected a stats file written by stats.file or TVMM_STATS");
  }
  try {
    if (!j.is_object()) throw invalid_argument("it is not a JSON object");
    const auto mode = j.find("mode");
    if (mode != j.end() && *mode == "transparent") return transparent_report(j, source);
    return pager_report(j, source);
  } catch (const invalid_argument& e) {
    throw invalid_argument(source + " is not a tvmm stats file: " + e.what() +
                           "; expected one written by stats.file or TVMM_STATS");
  }
}

int run_stats(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "tvmm stats: %s is a directory; give the file that stats.file or TVMM_STATS named\n",
                 path.c_str());
    return 1;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "tvmm stats: cannot read %s (%s)\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    std::fputs(describe_stats(text.str(), path).c_str(), stdout);
    return 0;
  } catch (const tvmm::error& e) {
    std::fprintf(stderr, "tvmm stats: %s\n", e.what());
    return 1;
  }
}

}  // namespace tvmm::cli
