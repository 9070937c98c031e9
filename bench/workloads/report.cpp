#include "bench/workloads/report.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "bench/workloads/registry.hpp"

namespace tvmm::bench {
namespace {

using nlohmann::json;

json number(double d) { return std::isfinite(d) ? json(d) : json(nullptr); }

// {"map": {"calls": N, "s": T}, ...}: per measured iteration.
json driver_json(const std::vector<RunResult::DriverRow>& rows) {
  json out = json::object();
  for (const auto& d : rows) out[d.call] = {{"calls", number(d.calls)}, {"s", number(d.seconds)}};
  return out;
}

json run_json(const RunResult& r) {
  return {{"step_time_s", number(r.step_time_s)},
          {"wall_step_time_s", number(r.wall_step_time_s)},
          {"bytes_moved", number(r.bytes_moved)},
          {"disk_read_bytes", number(r.disk_read_bytes)},
          {"disk_write_bytes", number(r.disk_write_bytes)}};
}

// The lower bound's three figures, the window program's split by binding term, and the split's runs
// that the bus binds (docs/benchmarks.md, "The lower bound").
json lower_terms_json(const LowerBoundTerms& t) {
  json runs = json::array();
  for (const auto& r : t.runs) {
    runs.push_back({{"first_kernel", r.first},
                    {"kernels", r.kernels},
                    {"compute_s", number(r.compute_s)},
                    {"in_s", number(r.in_s)},
                    {"out_s", number(r.out_s)},
                    {"launch_wait_s", number(r.launch_wait_s)}});
  }
  return {{"compute_s", number(t.compute_s)},
          {"loads_s", number(t.loads_s)},
          {"window_s", number(t.window_s)},
          {"window_in_s", number(t.window_in_s)},
          {"window_out_s", number(t.window_out_s)},
          {"window_compute_s", number(t.window_compute_s)},
          {"window_launch_wait_s", number(t.window_launch_wait_s)},
          {"launches_s", number(t.launches_s)},
          {"disk_s", number(t.disk_s)},
          {"runs", std::move(runs)}};
}

json peers_json(const Peers& p) {
  json j;
  j["bound"] = {{"step_time_s", number(p.bound_s)},
                {"window_step_time_s", number(p.window_bound_s)},
                {"lower_step_time_s", number(p.lower_bound_s)},
                {"lower_terms", lower_terms_json(p.lower_bound_terms)},
                {"bytes_moved", number(p.belady_bytes)}};
  j["belady"] = {{"bytes_moved", number(p.belady_bytes)}};
  j["naive"] = p.naive ? run_json(*p.naive) : json{{"skipped", p.naive_skipped}};
  j["all_in_memory"] = p.all_in_memory ? run_json(*p.all_in_memory) : json{{"skipped", p.all_in_memory_skipped}};
  if (p.kernel.ran) {
    j["kernel"] = {
        {"step_time_s", number(p.kernel.step_time_s)},         {"wall_step_time_s", number(p.kernel.step_time_s)},
        {"disk_read_bytes", number(p.kernel.disk_read_bytes)}, {"disk_write_bytes", number(p.kernel.disk_write_bytes)},
        {"memory_limit_bytes", p.kernel_memory_limit},         {"cgroup", p.kernel.cgroup}};
  } else {
    j["kernel"] = {{"skipped", p.kernel.skipped}, {"memory_limit_bytes", p.kernel_memory_limit}};
  }
  if (p.tvmm_wall) {
    j["tvmm_wall"] = run_json(*p.tvmm_wall);
    j["tvmm_wall"]["policy"] = p.tvmm_wall->policy;
  } else {
    j["tvmm_wall"] = {{"skipped", p.tvmm_wall_skipped}};
  }
  const auto& um = p.unified_memory;
  if (um.ran) {
    j["unified_memory"] = {{"step_time_s", number(um.step_time_s)}, {"managed_bytes", um.managed_bytes},
                           {"balloon_bytes", um.balloon_bytes},     {"device_free_bytes", um.device_free_bytes},
                           {"verified_bytes", um.verified_bytes},   {"mismatched_bytes", um.mismatched_bytes}};
  } else {
    j["unified_memory"] = {{"skipped", um.skipped}};
  }
  return j;
}

json record_json(const Record& rec) {
  const auto& r = rec.result;
  const auto page = static_cast<double>(rec.page_bytes);
  return {{"workload", rec.workload},
          {"op_time", rec.op_time},
          {"vmm_costs", r.vmm_costs},
          {"disk_costs", r.disk_costs},
          {"host", r.host},
          {"write_behind", r.write_behind},
          {"nvme_read_ahead", r.nvme_read_ahead},
          {"warmup_iterations", r.warmup},
          {"measured_iterations", r.measured},
          {"backend", rec.backend},
          {"policy", r.policy},
          {"oversubscription", number(r.ratio)},
          {"working_set_bytes", rec.working_set_bytes},
          {"page_bytes", rec.page_bytes},
          {"device_budget_bytes", static_cast<double>(rec.budgets.frames) * page},
          {"host_budget_bytes", static_cast<double>(rec.budgets.host_pages) * page},
          {"nvme_budget_bytes", static_cast<double>(rec.budgets.nvme_pages) * page},
          {"step_time_s", number(r.step_time_s)},
          {"wall_step_time_s", number(r.wall_step_time_s)},
          {"bytes_moved", number(r.bytes_moved)},
          {"bytes_in", number(r.bytes_in)},
          {"bytes_out", number(r.bytes_out)},
          {"bus_bytes_per_s", number(r.bus_bytes_per_s)},
          {"disk_read_bytes", number(r.disk_read_bytes)},
          {"disk_write_bytes", number(r.disk_write_bytes)},
          {"disk_busy_s", number(r.disk_busy_s)},
          {"belady_bytes", number(r.belady_bytes)},
          {"bytes_vs_belady", number(r.bytes_vs_belady)},
          {"compute_s", number(r.compute_s)},
          {"bound_s", number(r.bound_s)},
          {"time_vs_bound", number(r.time_vs_bound)},
          {"window_bound_s", number(r.window_bound_s)},
          {"time_vs_window_bound", number(r.time_vs_window_bound)},
          {"lower_bound_s", number(r.lower_bound_s)},
          {"time_vs_lower_bound", number(r.time_vs_lower_bound)},
          {"misses", r.misses},
          {"evictions", r.evictions},
          {"prefetched", r.prefetched},
          {"written_behind", r.written_behind},
          {"kept_mappings", r.kept_mappings},
          {"remap_s", number(r.remap_s)},
          {"driver", driver_json(r.driver)},
          {"verified_bytes", r.verified_bytes},
          {"mismatched_bytes", r.mismatched_bytes},
          {"peers", rec.peers ? peers_json(*rec.peers) : json::object()}};
}

//! The distinct `key(item)` values of `items`, in order of first appearance.
template <typename Items, typename Key>
std::vector<std::string> distinct(const Items& items, Key key) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    const std::string& k = key(item);
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

// A CSV row per policy and per peer (the three bounds included: `bound`, `window_bound`, `lower_bound`):
// policy,oversubscription,step_time_s,wall_step_time_s,bytes_moved,disk_read_bytes,bytes_vs_belady,
// time_vs_bound,time_vs_window_bound,time_vs_lower_bound.
struct Row {
  std::string workload, policy;
  double ratio, step, wall, bytes, disk, vs_belady, vs_bound, vs_window, vs_lower;
};

std::vector<Row> rows_of(const std::vector<Record>& records) {
  std::vector<Row> rows;
  std::set<const Peers*> seen;
  const double nan = NAN;
  for (const auto& rec : records) {
    const auto& r = rec.result;
    rows.push_back({rec.workload, r.policy, r.ratio, r.step_time_s, r.wall_step_time_s, r.bytes_moved,
                    r.disk_read_bytes, r.bytes_vs_belady, r.time_vs_bound, r.time_vs_window_bound,
                    r.time_vs_lower_bound});
    if (!rec.peers || !seen.insert(rec.peers.get()).second) continue;
    const auto& p = *rec.peers;
    const auto vs = [](double step, double bound) { return bound > 0 ? step / bound : NAN; };
    rows.push_back({rec.workload, "bound", r.ratio, p.bound_s, nan, p.belady_bytes, nan, 1.0, 1.0,
                    vs(p.bound_s, p.window_bound_s), vs(p.bound_s, p.lower_bound_s)});
    rows.push_back({rec.workload, "window_bound", r.ratio, p.window_bound_s, nan, nan, nan, nan,
                    vs(p.window_bound_s, p.bound_s), 1.0, vs(p.window_bound_s, p.lower_bound_s)});
    rows.push_back({rec.workload, "lower_bound", r.ratio, p.lower_bound_s, nan, nan, nan, nan,
                    vs(p.lower_bound_s, p.bound_s), vs(p.lower_bound_s, p.window_bound_s), 1.0});
    auto peer_row = [&](const std::string& name, double step, double wall, double bytes, double disk) {
      rows.push_back({rec.workload, name, r.ratio, step, wall, bytes, disk,
                      p.belady_bytes > 0 && std::isfinite(bytes) ? bytes / p.belady_bytes : nan, vs(step, p.bound_s),
                      vs(step, p.window_bound_s), vs(step, p.lower_bound_s)});
    };
    for (const auto& [name, q] : {std::pair{"naive", &p.naive}, std::pair{"all_in_memory", &p.all_in_memory}}) {
      if (*q) peer_row(name, (*q)->step_time_s, (*q)->wall_step_time_s, (*q)->bytes_moved, (*q)->disk_read_bytes);
    }
    if (p.tvmm_wall) {
      const auto& q = *p.tvmm_wall;
      peer_row("tvmm_wall", q.step_time_s, q.step_time_s, q.bytes_moved, q.disk_read_bytes);
      rows.back().vs_belady = nan;
    }
    if (p.unified_memory.ran) peer_row("unified_memory", p.unified_memory.step_time_s, nan, nan, nan);
    if (p.kernel.ran) peer_row("kernel", p.kernel.step_time_s, p.kernel.step_time_s, nan, p.kernel.disk_read_bytes);
  }
  return rows;
}

std::string csv_number(double d) {
  if (!std::isfinite(d)) return "";
  std::ostringstream os;
  os.precision(8);
  os << d;
  return os.str();
}

std::string csv_of(const std::vector<Row>& rows, const std::string& workload) {
  std::string out =
      "workload,policy,oversubscription,step_time_s,wall_step_time_s,bytes_moved,disk_read_bytes,bytes_vs_belady,"
      "time_vs_bound,time_vs_window_bound,time_vs_lower_bound\n";
  for (const auto& r : rows) {
    if (!workload.empty() && r.workload != workload) continue;
    out += r.workload + "," + r.policy + "," + csv_number(r.ratio) + "," + csv_number(r.step) + "," +
           csv_number(r.wall) + "," + csv_number(r.bytes) + "," + csv_number(r.disk) + "," + csv_number(r.vs_belady) +
           "," + csv_number(r.vs_bound) + "," + csv_number(r.vs_window) + "," + csv_number(r.vs_lower) + "\n";
  }
  return out;
}

// The gnuplot script: per workload, step time (modelled) and wall time against oversubscription per
// policy and peer, bytes moved over Belady's per policy, and the residency timelines.
std::string gnuplot_script(const std::vector<std::string>& workloads, const std::vector<Row>& rows,
                           const std::vector<ResidencyTimeline>& timelines) {
  std::ostringstream gp;
  gp << "# Written by tvmm-bench --out; run `gnuplot plots.gp` in this directory to redraw.\n"
        "set terminal pngcairo size 960,560 noenhanced font \",11\"\n"
        "set datafile separator \",\"\n"
        "set key outside right top\nset grid\nset logscale y\n"
        "set xlabel \"oversubscription (working set / device budget)\"\n";
  for (const auto& w : workloads) {
    std::vector<Row> of_w;
    std::copy_if(rows.begin(), rows.end(), std::back_inserter(of_w), [&](const Row& r) { return r.workload == w; });
    const auto policies = distinct(of_w, [](const Row& r) -> const std::string& { return r.policy; });
    const auto csv = file_name(w) + ".csv";
    double lo = 1e9, hi = 0;
    for (const auto& r : rows) {
      if (r.workload == w) lo = std::min(lo, r.ratio), hi = std::max(hi, r.ratio);
    }
    gp << "\nset xrange [" << lo - 0.1 * (hi - lo) - 0.1 << ":" << hi + 0.1 * (hi - lo) + 0.1 << "]\n";
    auto series = [&](const std::string& column, bool skip_wall, bool only_measured,
                      const std::vector<std::string>& only = {}) {
      std::string s;
      for (const auto& p : policies) {
        const bool wall = p == "kernel" || p == "tvmm_wall";
        const bool bound = p == "bound" || p == "window_bound" || p == "lower_bound";
        if ((skip_wall && wall) || (only_measured && (bound || wall))) continue;
        if (!only.empty() && std::find(only.begin(), only.end(), p) == only.end()) continue;
        if (!s.empty()) s += ", \\\n     ";
        s += "\"" + csv + "\" using 3:(strcol(2) eq \"" + p + "\" ? " + column + " : NaN) with linespoints " +
             (bound ? "dt 2 lw 2 " : "") + "title \"" + p + "\"";
      }
      return s;
    };
    // One PNG per plot that has something to draw (a wall-clock plot needs the kernel peer's runs).
    auto plot = [&](const std::string& png, const std::string& title, const std::string& ylabel, bool log_y,
                    const std::string& lines) {
      if (lines.empty()) return;
      gp << "\nset output \"" << png << "_" << file_name(w) << ".png\"\nset title \"" << w << ": " << title
         << "\"\nset ylabel \"" << ylabel << "\"\n"
         << (log_y ? "set logscale y\n" : "unset logscale y\n") << "plot " << lines << "\n";
    };
    // A logarithmic axis only where every step is above 0: gnuplot refuses a log plot of zeros ("all
    // points y value undefined"), which ended the script and drew none of the plots after it.
    const bool log_steps = std::none_of(of_w.begin(), of_w.end(), [](const Row& r) { return r.step <= 0; });
    plot("step_time", "step time (modelled device time) per policy", "step time (ms)", log_steps,
         series("column(4)*1000", true, false));
    plot("wall_time", "step time on the wall clock (disk I/O included): tvmm and the kernel as pager", "step time (ms)",
         log_steps, series("column(4)*1000", false, false, {"tvmm_wall", "kernel", "all_in_memory"}));
    plot("bytes_vs_belady", "bytes moved over Belady's per policy", "bytes moved / Belady's", false,
         series("column(8)", true, true));
  }
  for (const auto& t : timelines) {
    const auto name = file_name(t.workload);
    gp << "\nset output \"residency_" << name
       << ".png\"\nset autoscale x\nunset logscale y\nunset grid\nset datafile separator whitespace\n"
       << "set title \"" << t.workload << ": device residency per tensor, " << t.policy << " at " << t.ratio
       << "x (one iteration)\"\n"
       << "set xlabel \"kernel (in order)\"\nset ylabel \"tensor (index)\"\n"
       << "set palette defined (0 \"white\", 1 \"#1f4e9c\")\nset cbrange [0:1]\n"
       << "set cblabel \"fraction of pages on the device\"\n"
       << "plot \"residency_" << name << ".dat\" matrix with image notitle\n"
       << "set datafile separator \",\"\nset grid\nset logscale y\n"
       << "set xlabel \"oversubscription (working set / device budget)\"\nunset cblabel\n";
  }
  return gp.str();
}

}  // namespace

std::string file_name(std::string s) { return name_part(std::move(s)); }

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) {
    std::fprintf(stderr, "tvmm-bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

const std::vector<std::string>& summary_fields() {
  static const std::vector<std::string> fields = {"workload",
                                                  "op_time",
                                                  "vmm_costs",
                                                  "disk_costs",
                                                  "host",
                                                  "write_behind",
                                                  "nvme_read_ahead",
                                                  "warmup_iterations",
                                                  "measured_iterations",
                                                  "backend",
                                                  "policy",
                                                  "oversubscription",
                                                  "working_set_bytes",
                                                  "page_bytes",
                                                  "device_budget_bytes",
                                                  "host_budget_bytes",
                                                  "nvme_budget_bytes",
                                                  "step_time_s",
                                                  "wall_step_time_s",
                                                  "bytes_moved",
                                                  "bytes_in",
                                                  "bytes_out",
                                                  "bus_bytes_per_s",
                                                  "disk_read_bytes",
                                                  "disk_write_bytes",
                                                  "disk_busy_s",
                                                  "belady_bytes",
                                                  "bytes_vs_belady",
                                                  "compute_s",
                                                  "bound_s",
                                                  "time_vs_bound",
                                                  "window_bound_s",
                                                  "time_vs_window_bound",
                                                  "lower_bound_s",
                                                  "time_vs_lower_bound",
                                                  "misses",
                                                  "evictions",
                                                  "prefetched",
                                                  "written_behind",
                                                  "kept_mappings",
                                                  "remap_s",
                                                  "driver",
                                                  "verified_bytes",
                                                  "mismatched_bytes",
                                                  "peers"};
  return fields;
}

std::string summary_json(const std::vector<Record>& records) {
  json all = json::array();
  for (const auto& r : records) all.push_back(record_json(r));
  return all.dump(2) + "\n";
}

void print_table(const std::vector<Record>& records) {
  const Peers* last = nullptr;
  std::string last_workload;
  for (const auto& rec : records) {
    const auto& r = rec.result;
    if (rec.workload != last_workload) {
      std::printf("\nworkload %s: %.1f MiB in %s pages, compute %.2f ms per iteration\n", rec.workload.c_str(),
                  static_cast<double>(rec.working_set_bytes) / MiB, format_bytes(rec.page_bytes).c_str(),
                  r.compute_s * 1e3);
      std::printf("%-14s %6s %9s %10s %10s %9s %9s %9s %9s %9s %7s %9s %7s %7s %8s\n", "policy", "ratio", "step ms",
                  "MiB moved", "disk MiB", "vs Belady", "vs bound", "vs window", "vs lower", "prefetch", "kept %",
                  "remap ms", "in ms", "out ms", "drive ms");
      last_workload = rec.workload;
    }
    if (rec.peers.get() != last && rec.peers) {
      last = rec.peers.get();
      const auto& p = *rec.peers;
      std::printf("  at %.2fx: bound %.2f ms, window bound %.2f ms, lower bound %.2f ms, Belady %.1f MiB", r.ratio,
                  p.bound_s * 1e3, p.window_bound_s * 1e3, p.lower_bound_s * 1e3, p.belady_bytes / MiB);
      if (p.all_in_memory) std::printf("; all in memory %.2f ms", p.all_in_memory->step_time_s * 1e3);
      if (p.naive) std::printf("; naive %.2f ms", p.naive->step_time_s * 1e3);
      if (p.unified_memory.ran) std::printf("; Unified Memory %.2f ms", p.unified_memory.step_time_s * 1e3);
      std::printf("\n");
      const auto& t = p.lower_bound_terms;
      std::printf(
          "  lower bound = the largest of compute %.2f ms, the fewest loads %.2f ms, the window program %.2f ms "
          "(its runs bound by page-ins %.2f, by write-backs %.2f, by compute %.2f, waiting for launches %.2f) and "
          "the launches %.2f ms",
          t.compute_s * 1e3, t.loads_s * 1e3, t.window_s * 1e3, t.window_in_s * 1e3, t.window_out_s * 1e3,
          t.window_compute_s * 1e3, t.window_launch_wait_s * 1e3, t.launches_s * 1e3);
      if (t.disk_s > 0) std::printf(", and the drive's least busy time %.2f ms", t.disk_s * 1e3);
      std::printf("\n");
      if (p.tvmm_wall) {
        std::printf("  on the wall clock: tvmm %s %.2f ms, disk read %.1f MiB\n", p.tvmm_wall->policy.c_str(),
                    p.tvmm_wall->step_time_s * 1e3, p.tvmm_wall->disk_read_bytes / MiB);
      }
      if (p.kernel.ran) {
        std::printf("  on the wall clock: kernel as pager (cgroup %s, limit %.0f MiB) %.2f ms, disk read %.1f MiB\n",
                    p.kernel.cgroup.c_str(), static_cast<double>(p.kernel_memory_limit) / MiB,
                    p.kernel.step_time_s * 1e3, p.kernel.disk_read_bytes / MiB);
      } else if (p.kernel.skipped.rfind("not asked", 0) != 0) {
        std::printf("  kernel as pager skipped: %s\n", p.kernel.skipped.c_str());
      }
      const auto& um = p.unified_memory.skipped;
      if (!p.unified_memory.ran && rec.backend == "cuda" && um.rfind("not asked", 0) != 0) {
        std::printf("  Unified Memory skipped: %s\n", um.c_str());
      }
    }
    // kept %: of the pages made resident, those that went back into the frame still mapped at their
    // address (no VMM call).
    const auto resident = static_cast<double>(r.misses + r.prefetched);
    const double kept = resident == 0 ? 0.0 : 100.0 * static_cast<double>(r.kept_mappings) / resident;
    // in ms, out ms: the least time each direction of the bus was busy per iteration (bytes / bus); drive
    // ms: the modelled drive's busy time (disk_busy_s, 0 without one).
    const auto bus_ms = [&](double bytes) { return r.bus_bytes_per_s > 0 ? bytes / r.bus_bytes_per_s * 1e3 : 0.0; };
    std::printf("%-14s %5.2fx %9.2f %10.1f %10.1f %9.2f %9.2f %9.2f %9.2f %9llu %7.0f %9.2f %7.2f %7.2f %8.2f\n",
                r.policy.c_str(), r.ratio, r.step_time_s * 1e3, r.bytes_moved / MiB, r.disk_read_bytes / MiB,
                r.bytes_vs_belady, r.time_vs_bound, r.time_vs_window_bound, r.time_vs_lower_bound,
                static_cast<unsigned long long>(r.prefetched), kept, r.remap_s * 1e3, bus_ms(r.bytes_in),
                bus_ms(r.bytes_out), r.disk_busy_s * 1e3);
    if (rec.backend == "cuda") {  // where the host time goes on a GPU: the driver's calls per iteration
      std::string line = "    driver per iteration:";
      for (const auto& d : r.driver) {
        if (d.calls == 0) continue;
        char buf[96];
        std::snprintf(buf, sizeof buf, " %s %.0f (%.2f ms)", d.call, d.calls, d.seconds * 1e3);
        line += buf;
      }
      std::printf("%s\n", line.c_str());
    }
  }
}

bool write_outputs(const std::string& dir, const std::vector<Record>& records,
                   const std::vector<ResidencyTimeline>& timelines) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "tvmm-bench: cannot create the output directory %s: %s\n", dir.c_str(), std::strerror(errno));
    return false;
  }
  const auto rows = rows_of(records);
  const auto workloads = distinct(records, [](const Record& r) -> const std::string& { return r.workload; });
  if (!write_text(dir + "/summary.json", summary_json(records)) || !write_text(dir + "/runs.csv", csv_of(rows, "")))
    return false;
  // Per workload, each policy's and peer's rows together (in order of oversubscription), so that the
  // plots draw each as one line.
  auto by_series = rows;
  const auto series = distinct(rows, [](const Row& r) -> const std::string& { return r.policy; });
  auto rank = [&](const Row& r) { return std::find(series.begin(), series.end(), r.policy) - series.begin(); };
  std::stable_sort(by_series.begin(), by_series.end(), [&](const Row& a, const Row& b) { return rank(a) < rank(b); });
  for (const auto& w : workloads) {
    if (!write_text(dir + "/" + file_name(w) + ".csv", csv_of(by_series, w))) return false;
  }
  for (const auto& t : timelines) {
    // Rows: tensors; columns: kernels (at most 400, evenly sampled). Also as CSV, a row per kernel.
    const auto kernels = t.residency.size();
    const std::size_t stride = std::max<std::size_t>(1, (kernels + 399) / 400);
    const auto tensors = kernels == 0 ? 0 : t.residency.front().size();
    std::string dat, csv = "kernel";
    for (std::size_t x = 0; x < tensors; ++x) csv += ",tensor" + std::to_string(x);
    csv += "\n";
    for (std::size_t k = 0; k < kernels; ++k) {
      csv += std::to_string(k);
      for (float f : t.residency[k]) csv += "," + csv_number(f);
      csv += "\n";
    }
    for (std::size_t x = 0; x < tensors; ++x) {
      for (std::size_t k = 0; k < kernels; k += stride) dat += csv_number(t.residency[k][x]) + " ";
      dat += "\n";
    }
    const auto name = file_name(t.workload);
    if (!write_text(dir + "/residency_" + name + ".csv", csv) || !write_text(dir + "/residency_" + name + ".dat", dat))
      return false;
  }
  if (!write_text(dir + "/plots.gp", gnuplot_script(workloads, rows, timelines))) return false;
  // gnuplot runs in DIR (no shell: any directory name works); 127 = it could not be started.
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) == 0) ::execlp("gnuplot", "gnuplot", "plots.gp", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
    std::fprintf(stderr, "tvmm-bench: cannot start gnuplot: %s\n", std::strerror(errno));
    return false;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    std::fprintf(stderr,
                 "tvmm-bench: gnuplot is not installed: no PNG plots (%s/plots.gp draws them; apt-get install "
                 "gnuplot-nox)\n",
                 dir.c_str());
    return true;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The results are written: a plot that could not be drawn is said, and does not fail the run.
    std::fprintf(stderr, "tvmm-bench: gnuplot failed on %s/plots.gp (status %d): some PNG plots are missing\n",
                 dir.c_str(), status);
  }
  return true;
}

}  // namespace tvmm::bench
