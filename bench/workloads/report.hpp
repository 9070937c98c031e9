#pragma once
// tvmm-bench's results: the records of a matrix of runs (one per workload, oversubscription and
// policy, each with the peers measured on the same workload and budget), printed as a table and
// written with --out DIR as summary.json, CSV files and gnuplot PNGs. docs/benchmarks.md documents
// every field.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/peers/kernel_pager.hpp"
#include "bench/peers/unified_memory.hpp"
#include "bench/workloads/runner.hpp"

namespace tvmm::bench {

//! The peers of one workload at one oversubscription, shared by its policies' records.
struct Peers {
  double bound_s = 0;                 //!< max(compute, Belady's busier bus direction / bus bandwidth)
  double window_bound_s = 0;          //!< the bound with the device's capacity (window_bound_s() in runner.hpp)
  double lower_bound_s = 0;           //!< the lower bound with write-backs too (Reference::lower_bound_s)
  LowerBoundTerms lower_bound_terms;  //!< how the lower bound comes about (Reference::lower_bound_terms)
  double belady_bytes = 0;            //!< Belady's bytes moved per iteration
  std::optional<RunResult> naive;
  std::string naive_skipped;
  std::optional<RunResult> all_in_memory;  //!< the same pager with the whole workload on the device
  std::string all_in_memory_skipped;
  KernelPagerResult kernel;
  //! tvmm's best policy again with the simulator on the wall clock (--timing wall), so that host work
  //! and the NVMe tier's disk I/O count: the run the kernel peer's wall-clock time is compared with.
  std::optional<RunResult> tvmm_wall;
  std::string tvmm_wall_skipped;
  UnifiedMemoryResult unified_memory;  //!< CUDA Unified Memory under the same device budget (a GPU only)
  std::size_t kernel_memory_limit = 0;
};

struct Record {
  std::string workload;
  std::string backend;
  std::string op_time;  //!< Workload::op_time
  std::size_t working_set_bytes = 0;
  Budgets budgets;
  std::size_t page_bytes = 0;
  RunResult result;
  std::shared_ptr<const Peers> peers;
};

//! One workload's residency timeline: per sampled kernel, each tensor's fraction on the device.
struct ResidencyTimeline {
  std::string workload;
  std::string policy;
  double ratio = 0;
  Residency residency;
};

//! Prints the records as a table on stdout, the peers under each workload and ratio.
void print_table(const std::vector<Record>& records);

//! The records as the summary.json array (what --json and --out write).
std::string summary_json(const std::vector<Record>& records);

//! The fields every summary.json record has (docs/benchmarks.md lists them; a test checks both).
const std::vector<std::string>& summary_fields();

//! `s` (a workload's name, "replay:gpt2") as part of a file name: name_part (registry.hpp), so ':' and
//! anything else but letters, digits and . _ + - made '_'.
std::string file_name(std::string s);

//! Writes `text` to `path`; false, with the reason on stderr, when it cannot.
bool write_text(const std::string& path, const std::string& text);

//! Writes DIR/summary.json, DIR/runs.csv (every policy and peer as a row), DIR/<workload>.csv,
//! DIR/residency_<workload>.csv and the plots (DIR/plots.gp run by gnuplot when it is installed;
//! otherwise says so on stderr). False, with the reason on stderr, when DIR cannot be written.
bool write_outputs(const std::string& dir, const std::vector<Record>& records,
                   const std::vector<ResidencyTimeline>& timelines);

}  // namespace tvmm::bench
