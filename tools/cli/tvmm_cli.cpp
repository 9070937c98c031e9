// tvmm: the command-line tool. `tvmm check-config FILE` validates a policy file (with the TVMM_*
// environment overrides) against the backend it names and prints the effective configuration;
// `tvmm info [--json] [--config FILE]` reports what this machine offers and where a pager would go;
// `tvmm stats FILE` prints a stats file (stats.file / TVMM_STATS) for a person.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "tools/cli/info.hpp"
#include "tools/cli/stats.hpp"
#include "tvmm/tvmm.hpp"

namespace {

int check_config(const std::string& path, bool use_env) {
  try {
    tvmm::Config cfg = tvmm::parse_config(tvmm::read_config_file(path), path);
    const auto overrides = use_env ? tvmm::apply_environment(cfg) : std::vector<std::string>{};
    cfg.validate();
    std::string from_env;
    for (const auto& name : overrides) from_env += " " + name;
    const char* env_line = use_env ? (from_env.empty() ? " none" : from_env.c_str()) : " ignored (--no-env)";
    // Building a pager resolves what depends on the backend (page size, budgets against capacity). It
    // opens no output file: checking a config must not overwrite a real run's stats or timeline.
    tvmm::Config quiet = cfg;
    tvmm::cli::drop_outputs(quiet);
    std::optional<tvmm::Pager> pager;
    try {
      pager.emplace(quiet);
    } catch (const tvmm::device_error& e) {
      // Only the absence of a driver or GPU is "not checked": a GPU that lacks what the config asks for
      // (an ordinal past the last GPU, VMM, GPUDirect RDMA) is an error here as it would be at start.
      if (cfg.device_backend != "cuda" || !tvmm::cli::no_gpu_here(e.error_name())) throw;
      // A GPU config checked on a machine without the GPU: the keys are valid; say what was not checked.
      std::printf(
          "# %s: every key is valid; not checked against the device (%s)\n# environment overrides:%s\n"
          "# configuration (page size and budgets not resolved):\n%s",
          path.c_str(), e.what(), env_line, tvmm::to_toml(cfg).c_str());
      return 0;
    }
    tvmm::Config effective = pager->config();
    effective.stats_file = cfg.stats_file;
    effective.pin_log_file = cfg.pin_log_file;
    effective.timeline_file = cfg.timeline_file;
    std::printf("# %s is valid for the %s backend\n# environment overrides:%s\n# effective configuration:\n%s",
                path.c_str(), pager->backend_name(), env_line, tvmm::to_toml(effective).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmm check-config: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tvmm: out-of-core tensor virtual memory manager"};
  app.require_subcommand(1);

  std::string path;
  bool no_env = false;
  auto* check = app.add_subcommand("check-config", "Validate a policy file and print the effective configuration");
  check->add_option("FILE", path, "TOML policy file")->required();
  check->add_flag("--no-env", no_env, "Ignore the TVMM_<SECTION>_<KEY> environment overrides");

  tvmm::cli::InfoOptions info_opts;
  auto* info = app.add_subcommand("info",
                                  "Report NUMA nodes, GPUs and their nearest nodes, io_uring, RLIMIT_MEMLOCK, huge "
                                  "pages, and where a pager would place its host tier and threads");
  info->add_option("--config", info_opts.config, "A policy file: report the placement it gives");
  info->add_flag("--json", info_opts.json, "Print JSON instead of text");
  bool info_no_env = false;
  info->add_flag("--no-env", info_no_env, "Ignore the TVMM_<SECTION>_<KEY> environment overrides");

  std::string stats_path;
  auto* stats = app.add_subcommand("stats", "Print a stats file (stats.file / TVMM_STATS) for a person");
  stats->add_option("FILE", stats_path, "JSON written by a pager or by transparent mode")->required();

  CLI11_PARSE(app, argc, argv);
  if (stats->parsed()) return tvmm::cli::run_stats(stats_path);
  if (check->parsed()) return check_config(path, !no_env);
  if (info->parsed()) {
    info_opts.use_env = !info_no_env;
    return tvmm::cli::run_info(info_opts);
  }
  return 2;
}
