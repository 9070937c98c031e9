#include "vmm/observe/output.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>

#include "tvmm/errors.hpp"

namespace tvmm {

std::array<std::pair<const char*, DriverTime>, 9> driver_times(const DriverTimes& d) {
  return {{{"map", d.map},
           {"set_access", d.set_access},
           {"unmap", d.unmap},
           {"copy", d.copy},
           {"record", d.record},
           {"stream_wait", d.stream_wait},
           {"query", d.query},
           {"synchronize", d.synchronize},
           {"launch", d.launch}}};
}

std::string to_json(const Stats& s) {
  std::string out = "{";
  auto field = [&](const char* name, std::uint64_t v) {
    if (out.size() > 1) out += ", ";
    out += "\"";
    out += name;
    out += "\": ";
    out += std::to_string(v);
  };
  auto traffic = [&](const char* name, const Traffic& t) {
    if (out.size() > 1) out += ", ";
    out += "\"";
    out += name;
    out += "\": {\"bytes\": " + std::to_string(t.bytes) + ", \"pages\": " + std::to_string(t.pages) + "}";
  };
  traffic("host_to_device", s.host_to_device);
  traffic("device_to_host", s.device_to_host);
  traffic("host_to_nvme", s.host_to_nvme);
  traffic("nvme_to_host", s.nvme_to_host);
  field("pins", s.pins);
  field("hits", s.hits);
  field("misses", s.misses);
  field("evictions", s.evictions);
  field("clean_evictions", s.clean_evictions);
  field("kept_mappings", s.kept_mappings);
  field("remap_ns", s.remap_ns);
  field("prefetched", s.prefetched);
  field("nvme_read_ahead", s.nvme_read_ahead);
  field("written_behind", s.written_behind);
  field("trace_divergences", s.trace_divergences);
  field("stall_ns", s.stall_ns);
  field("allocations", s.allocations);
  field("live_bytes", s.live_bytes);
  field("device_used_bytes", s.device_used_bytes);
  field("device_peak_bytes", s.device_peak_bytes);
  field("host_used_bytes", s.host_used_bytes);
  field("host_peak_bytes", s.host_peak_bytes);
  field("device_budget", s.device_budget);
  field("host_budget", s.host_budget);
  field("nvme_used_bytes", s.nvme_used_bytes);
  field("nvme_peak_bytes", s.nvme_peak_bytes);
  field("nvme_budget", s.nvme_budget);
  field("nvme_write_errors", s.nvme_write_errors);
  field("nvme_read_errors", s.nvme_read_errors);
  field("nvme_corrupt_reads", s.nvme_corrupt_reads);
  field("page_size", s.page_size);
  out += ", \"driver\": {";
  bool first = true;
  for (const auto& [name, t] : driver_times(s.driver)) {
    out += (first ? "\"" : ", \"") + std::string(name) + "\": {\"calls\": " + std::to_string(t.calls) +
           ", \"ns\": " + std::to_string(t.ns) + "}";
    first = false;
  }
  out += "}";
  return out + "}";
}

namespace vmm {

OutputFile::OutputFile(const std::string& path, const char* key) : path_(path) {
  if (path == "-") {
    f_ = stderr;
    return;
  }
  f_ = std::fopen(path.c_str(), "w");
  if (f_ == nullptr) {
    throw config_error(std::string(key) + " = \"" + path + "\": cannot open it for writing (" +
                       std::generic_category().message(errno) +
                       "); give a path in a writable directory, or \"-\" for standard error");
  }
  owned_ = true;
}

OutputFile::~OutputFile() { close(); }

void OutputFile::close() noexcept {
  if (f_ == nullptr) return;
  const bool failed = std::ferror(f_) != 0 || (owned_ ? std::fclose(f_) != 0 : std::fflush(f_) != 0);
  if (failed) std::fprintf(stderr, "tvmm: writing %s failed: some of it may be missing\n", path_.c_str());
  f_ = nullptr;
}

PinLog::PinLog(const std::string& path) : out_(path, "pin_log.file") {}

double PinLog::now_us() const noexcept {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

void PinLog::pin(std::uint64_t tensor, std::uint32_t pages, Access access, bool hit) noexcept {
  const char* acc = access == Access::read ? "read" : access == Access::write ? "write" : "read_write";
  const double t = now_us();
  std::lock_guard lk(mu_);
  if (out_.get() == nullptr) return;
  std::fprintf(out_.get(),
               "{\"pin\": %llu, \"t_us\": %.3f, \"tensor\": %llu, \"pages\": %u, \"access\": \"%s\", \"hit\": %s}\n",
               static_cast<unsigned long long>(pins_++), t, static_cast<unsigned long long>(tensor), pages, acc,
               hit ? "true" : "false");
}

void PinLog::iteration() noexcept {
  const double t = now_us();
  std::lock_guard lk(mu_);
  if (out_.get() == nullptr) return;
  std::fprintf(out_.get(), "{\"iteration\": %llu, \"t_us\": %.3f}\n", static_cast<unsigned long long>(iterations_++),
               t);
}

}  // namespace vmm
}  // namespace tvmm
