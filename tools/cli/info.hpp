#pragma once
// `tvmm info`: what this machine offers tvmm (NUMA nodes, GPUs and their nodes, io_uring,
// RLIMIT_MEMLOCK, huge pages) and, with a config, where a pager would place its host tier and threads.

#include <string>

#include "tvmm/config.hpp"

namespace tvmm::cli {

//! The output files of `config` (stats.file, pin_log.file, timeline.file) checked as a pager would
//! check them, but without opening them (a pager opens them with "w" and writes them when it is
//! destroyed), then cleared: a command that only inspects a configuration must not overwrite the
//! files of a real run. Throws tvmm::config_error for a path that could not be written.
void drop_outputs(Config& config);

//! True for a device_error that says there is no GPU or no driver here (rather than that the config
//! asks for something the GPUs present do not have): `error_name` of that error.
bool no_gpu_here(const std::string& error_name);

struct InfoOptions {
  std::string config;  // "" = defaults
  bool json = false;
  bool use_env = true;
};

//! Prints the report on stdout; returns the process exit status (1 for a bad config).
int run_info(const InfoOptions& options);

}  // namespace tvmm::cli
