#pragma once
// `tvmm info`: what this machine offers tvmm (NUMA nodes, GPUs and their nodes, io_uring,
// RLIMIT_MEMLOCK, huge pages) and, with a config, where a pager would place its host tier and threads.

#include <string>

namespace tvmm::cli {

struct InfoOptions {
  std::string config;  // "" = defaults
  bool json = false;
  bool use_env = true;
};

//! Prints the report on stdout; returns the process exit status (1 for a bad config).
int run_info(const InfoOptions& options);

}  // namespace tvmm::cli
