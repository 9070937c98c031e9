// tvmm: the command-line tool. `tvmm check-config FILE` validates a policy file (with the TVMM_*
// environment overrides) against the backend it names and prints the effective configuration.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tvmm/tvmm.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tvmm::config_error("cannot open the config file '" + path + "'; check the path");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int check_config(const std::string& path, bool use_env) {
  try {
    tvmm::Config cfg = tvmm::parse_config(read_file(path), path);
    const auto overrides = use_env ? tvmm::apply_environment(cfg) : std::vector<std::string>{};
    // Building a pager resolves what depends on the backend (page size, budgets against capacity).
    tvmm::Pager pager(cfg);
    std::string from_env;
    for (const auto& name : overrides) from_env += " " + name;
    std::printf("# %s is valid for the %s backend\n# environment overrides:%s\n# effective configuration:\n%s",
                path.c_str(), pager.backend_name(),
                use_env ? (from_env.empty() ? " none" : from_env.c_str()) : " ignored (--no-env)",
                tvmm::to_toml(pager.config()).c_str());
    return 0;
  } catch (const tvmm::error& e) {
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

  CLI11_PARSE(app, argc, argv);
  if (check->parsed()) return check_config(path, !no_env);
  return 2;
}
