#pragma once
// The table of configuration keys: section, name, type, what is expected, the default, and how to set
// and print it. The loader, the environment overrides, `tvmm check-config` and the docs test all read
// this one table.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tvmm/config.hpp"

namespace tvmm::vmm {

enum class KeyType { size, number, text, paths, boolean };

//! Whether a key's value is a path with per-process placeholders (see substitute_rank).
enum class RankPaths : std::uint8_t {
  no,
  dirs,   //!< directories: {rank} and {local_rank} are substituted
  files,  //!< output files: substituted, and one process of several never writes another's file
};

//! The launcher's view of this process: RANK / LOCAL_RANK / WORLD_SIZE (torchrun, DeepSpeed), else the
//! Open MPI, PMI/PMIx, Slurm or MVAPICH variables; 0, 0 and 1 when none is set.
struct RankInfo {
  long rank = 0;
  long local_rank = 0;
  long world_size = 1;
  std::string rank_from;  // the variable the rank came from, "" if none
};
//! Reads the launcher variables; throws config_error naming a variable whose value is not a number.
RankInfo rank_info();
//! Replaces {rank} and {local_rank} in `value`; with RankPaths::files and several processes but no
//! placeholder, appends ".rank<N>" so the processes never clobber one file. Throws config_error for any
//! other {placeholder}, naming `name`.
std::string substitute_rank(std::string_view value, RankPaths kind, const std::string& name);

struct KeyValue {
  std::size_t size = 0;
  double number = 0.0;
  std::string text;
  std::vector<std::string> list;  // paths
  bool flag = false;              // boolean
};

struct ConfigKey {
  std::string_view section;  // "device", "device.sim", "host", "nvme", "pager", "policy.eviction"
  std::string_view key;
  KeyType type;
  std::string expected;              // for errors: what a valid value looks like ("one of: ..." for
                                     // text keys with choices, generated from them)
  const char* meaning;               // for docs and check-config
  bool allows_auto = false;          // sizes: "auto" means 0 (resolved by the pager)
  double min = 0.0;                  // numbers: smallest valid value
  std::vector<std::string> choices;  // text: the valid values
  std::function<void(Config&, const KeyValue&)> set;
  std::function<std::string(const Config&)> get;  // the value as TOML
  bool whole_number_too = false;                  // text: a whole number is also accepted (as its digits)
  RankPaths rank_paths = RankPaths::no;           // {rank} / {local_rank} are substituted
  const char* short_env = nullptr;                // a shorter environment variable, used when the long one is unset
  const char* field = nullptr;                    // the Config member (C++ API), where validate() checks it
  //! The key's old name ("section.key"), still accepted in files (documented as an alias; giving both
  //! names is an error), or null.
  const char* old_name = nullptr;
  //! The old short environment variable, still read after the current ones, or null.
  const char* old_short_env = nullptr;
};

//! The environment variables that set `key`, in order: TVMM_<SECTION>_<KEY>, its short name, then
//! those of its old name. The first one set wins.
std::vector<std::string> environment_variables(const ConfigKey& key);

//! Every key, grouped by section in printing order.
const std::vector<ConfigKey>& config_keys();
//! `TVMM_<SECTION>_<KEY>` for a key (dots and lower case become underscores and upper case).
std::string environment_variable(const ConfigKey& key);
//! A number as TOML ("25", "0.5").
std::string toml_number(double d);
//! A string as a TOML basic string, quotes, backslashes and control characters escaped (\uXXXX):
//! also a valid JSON string.
std::string toml_string(std::string_view s);

}  // namespace tvmm::vmm
