#pragma once
// tvmm-bench --workload vmm: what the pager's device calls cost and how fast it moves pages, on the
// simulator or a real GPU (--device cuda): per-call time of map, set_access (one page and a batched
// run) and unmap as the pager uses them, and page-move bandwidth through the pager against plain
// asynchronous copies of pinned host memory of the same size in the same run.

#include <string>

namespace tvmm::bench {

struct VmmOptions {
  std::string device = "sim";  // "sim" or "cuda"
  std::size_t pages = 64;      // pages mapped per round, and per tensor in the bandwidth test
  int rounds = 5;
  std::string json;
};

int run_vmm(const VmmOptions& options);

}  // namespace tvmm::bench
