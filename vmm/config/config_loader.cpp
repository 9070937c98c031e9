// Policy config files: TOML in, tvmm::Config out. One table of keys (kKeys) drives parsing, the
// TVMM_<SECTION>_<KEY> environment overrides, printing the effective configuration and the docs test,
// so a key exists everywhere or nowhere.
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "vmm/config/config_keys.hpp"

namespace tvmm {

namespace {

using vmm::ConfigKey;
using vmm::KeyType;
using vmm::toml_number;

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " Did you mean 'x'?" for the closest candidate within a plausible distance, else "".
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const auto d = edit_distance(lower(std::string(word)), lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best.empty() || best_d > std::max<std::size_t>(2, word.size() / 3)) return "";
  return " Did you mean '" + best + "'?";
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const auto& k : vmm::config_keys()) {
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.emplace_back(k.section);
  }
  return out;
}

std::vector<std::string> keys_of(std::string_view section) {
  std::vector<std::string> out;
  for (const auto& k : vmm::config_keys())
    if (k.section == section) out.emplace_back(k.key);
  for (const auto& k : vmm::config_keys()) {  // old names still accepted in an old section
    if (k.old_name == nullptr) continue;
    const std::string_view old(k.old_name);
    const auto dot = old.rfind('.');
    if (old.substr(0, dot) == section) out.emplace_back(old.substr(dot + 1));
  }
  return out;
}

const ConfigKey* find_key(std::string_view section, std::string_view key) {
  for (const auto& k : vmm::config_keys())
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

// The key whose old name is `full` ("trace.file"), or null.
const ConfigKey* find_old_name(std::string_view full) {
  for (const auto& k : vmm::config_keys())
    if (k.old_name != nullptr && full == k.old_name) return &k;
  return nullptr;
}

std::string name_of(const ConfigKey& k) { return std::string(k.section) + "." + std::string(k.key); }

bool is_section_prefix(std::string_view name) {
  for (const auto& s : sections()) {
    if (s == name || (s.size() > name.size() && s.compare(0, name.size(), name) == 0 && s[name.size()] == '.')) {
      return true;
    }
  }
  // The section of an old key name ("trace" of "trace.file").
  for (const auto& k : vmm::config_keys()) {
    if (k.old_name == nullptr) continue;
    const std::string_view old(k.old_name);
    if (old.size() > name.size() && old.compare(0, name.size(), name) == 0 && old[name.size()] == '.') return true;
  }
  return false;
}

// `source` names the text: parse_config does not hand it to toml++ (see there), so `r` has no path.
std::string where(const toml::source_region& r, std::string_view source) {
  std::string file = source.empty() ? std::string("<string>") : std::string(source);
  return file + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// A value from the file or the environment, converted to the key's type; `what` names it in errors.
struct Raw {
  std::optional<std::string> text;  // a TOML string, or any environment value
  std::optional<double> number;     // a TOML integer or float
  std::optional<bool> boolean;
  std::optional<std::vector<std::string>> list;  // a TOML array of strings
};

std::size_t to_size(const ConfigKey& k, const Raw& v) {
  if (v.number) {
    // Checked before the cast: converting nan, inf or a double past the range is undefined.
    if (!(*v.number >= 0 && *v.number < 0x1p64) || *v.number != std::floor(*v.number)) throw config_error("");
    return static_cast<std::size_t>(*v.number);
  }
  if (!v.text) throw config_error("");
  if (k.allows_auto && lower(trim(*v.text)) == "auto") return 0;
  return parse_size(*v.text);
}

double to_number(const Raw& v) {
  if (v.number) {
    if (!std::isfinite(*v.number)) throw config_error("");  // TOML has nan and inf; no key takes them
    return *v.number;
  }
  if (!v.text) throw config_error("");
  const std::string t = trim(*v.text);
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(d)) throw config_error("");
  return d;
}

// Applies `v` to `cfg` through `k`; throws config_error("<location>: <key> ... expected ...").
void apply(Config& cfg, const ConfigKey& k, const Raw& v, const std::string& name, const std::string& location) {
  auto bad = [&](const std::string& got) {
    return config_error(name + " = " + got + ": expected " + k.expected, location);
  };
  const std::string got = v.text      ? "\"" + *v.text + "\""
                          : v.boolean ? (*v.boolean ? "true" : "false")
                          : v.number  ? toml_number(*v.number)
                          : v.list    ? "(an array of " + std::to_string(v.list->size()) + " strings)"
                                      : "(a table or array)";
  // {rank} / {local_rank}; its errors say what is wrong themselves, at this value's location.
  auto per_rank = [&](const std::string& path) {
    try {
      return vmm::substitute_rank(path, k.rank_paths, name);
    } catch (const config_error& e) {
      throw config_error(e.what(), location);
    }
  };
  try {
    switch (k.type) {
      case KeyType::size: k.set(cfg, vmm::KeyValue{to_size(k, v), 0.0, {}, {}, false}); break;
      case KeyType::number: {
        const double d = to_number(v);
        if (d < k.min) throw config_error("");
        k.set(cfg, vmm::KeyValue{0, d, {}, {}, false});
        break;
      }
      case KeyType::paths: {
        std::vector<std::string> paths;
        if (v.list) {
          paths = *v.list;
        } else if (v.text) {  // the environment: separated by ':'
          std::string_view t = *v.text;
          while (!t.empty()) {
            const auto colon = t.find(':');
            const std::string part = trim(t.substr(0, colon));
            if (!part.empty()) paths.push_back(part);
            t = colon == std::string_view::npos ? std::string_view() : t.substr(colon + 1);
          }
        } else {
          throw config_error("");
        }
        for (const auto& p : paths)
          if (trim(p).empty()) throw config_error("");
        for (auto& p : paths) p = per_rank(p);
        vmm::KeyValue kv;
        kv.list = std::move(paths);
        k.set(cfg, kv);
        break;
      }
      case KeyType::boolean: {
        bool b = false;
        if (v.boolean) {
          b = *v.boolean;
        } else if (v.text) {
          const std::string t = lower(trim(*v.text));
          if (t == "true" || t == "1" || t == "yes" || t == "on") {
            b = true;
          } else if (t != "false" && t != "0" && t != "no" && t != "off") {
            throw config_error("");
          }
        } else {
          throw config_error("");
        }
        vmm::KeyValue kv;
        kv.flag = b;
        k.set(cfg, kv);
        break;
      }
      case KeyType::text: {
        std::string t;
        if (v.text) {
          t = trim(*v.text);
        } else if (k.whole_number_too && v.number && *v.number >= 0 && *v.number <= 1e6 &&
                   *v.number == static_cast<double>(static_cast<long>(*v.number))) {
          t = std::to_string(static_cast<long>(*v.number));
        } else {
          throw config_error("");
        }
        const bool digits = k.whole_number_too && !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
        if (!digits && !k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), t) == k.choices.end()) {
          throw config_error(name + " = \"" + t + "\": expected " + k.expected + "." + suggestion(t, k.choices),
                             location);
        }
        t = per_rank(t);
        k.set(cfg, vmm::KeyValue{0, 0.0, t, {}, false});
        break;
      }
    }
  } catch (const config_error& e) {
    if (!e.location().empty()) throw;
    throw bad(got);
  }
}

// The keys a file has set, and the name it used for each (to refuse a key set under both its names).
using KeysSet = std::vector<std::pair<const ConfigKey*, std::string>>;

void walk(Config& cfg, const toml::table& table, const std::string& prefix, KeysSet& set, std::string_view source) {
  for (auto&& [key, node] : table) {
    const std::string k(key.str());
    const std::string full = prefix.empty() ? k : prefix + "." + k;
    const std::string loc = where(key.source(), source);
    if (const auto* sub = node.as_table()) {
      if (!is_section_prefix(full)) {
        throw config_error(
            "unknown section [" + full + "]; valid sections: " + join(sections()) + "." + suggestion(full, sections()),
            loc);
      }
      walk(cfg, *sub, full, set, source);
      continue;
    }
    const ConfigKey* spec = find_key(prefix, k);
    if (spec == nullptr && !prefix.empty()) spec = find_old_name(full);  // in its old section, as a new key is
    if (spec == nullptr) {
      if (prefix.empty()) {
        throw config_error("key '" + k + "' outside a section; keys go in sections: " + join(sections()), loc);
      }
      const auto valid = keys_of(prefix);
      throw config_error("unknown key '" + k + "' in [" + prefix + "]; valid keys: " +
                             (valid.empty() ? std::string("none (it only holds sections)") : join(valid)) + "." +
                             suggestion(k, valid),
                         loc);
    }
    for (const auto& [key_set, name] : set) {
      if (key_set == spec) {  // TOML refuses a key given twice under one name: this is the other name
        const std::string current = name_of(*spec);
        throw config_error(current + " is set twice, as " + current + " and as " +
                               (spec->old_name != nullptr ? spec->old_name : name) + " (its old name); keep only " +
                               current,
                           loc);
      }
    }
    set.emplace_back(spec, full);
    Raw raw;
    if (auto s = node.value<std::string>(); s && node.is_string()) raw.text = *s;
    if (node.is_integer()) raw.number = static_cast<double>(*node.value<std::int64_t>());
    if (node.is_floating_point()) raw.number = *node.value<double>();
    if (node.is_boolean()) raw.boolean = *node.value<bool>();
    if (const auto* arr = node.as_array(); arr != nullptr && (arr->empty() || arr->is_homogeneous<std::string>())) {
      raw.list.emplace();
      for (auto&& item : *arr) raw.list->push_back(*item.value<std::string>());
    }
    apply(cfg, *spec, raw, full, where(node.source(), source));
  }
}

// TVMM_ and a dotted key name ("device.sim.timing"), dots as underscores, in upper case.
std::string env_name(std::string_view dotted) {
  std::string n = "TVMM_" + std::string(dotted);
  for (auto& c : n) c = c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return n;
}

std::string env_name(const ConfigKey& k) { return env_name(name_of(k)); }

}  // namespace

std::size_t parse_size(std::string_view text) {
  const std::string t = trim(text);
  const auto fail = [&] {
    return config_error("\"" + std::string(text) +
                        "\" is not a size; write a number of bytes or a number with a unit, e.g. \"512MiB\", "
                        "\"2GiB\", \"64KiB\"");
  };
  std::size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string number = t.substr(0, i);
  // At least one digit ("." and ".KiB" read as 0 before), and one point at most.
  if (std::none_of(number.begin(), number.end(), [](char c) { return c != '.'; }) ||
      std::count(number.begin(), number.end(), '.') > 1) {
    throw fail();
  }
  const std::string unit = lower(trim(std::string_view(t).substr(i)));
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kib")
    scale = KiB;
  else if (unit == "mib")
    scale = MiB;
  else if (unit == "gib")
    scale = GiB;
  else if (unit == "tib")
    scale = TiB;
  else if (unit == "kb")
    scale = 1'000;
  else if (unit == "mb")
    scale = 1'000'000;
  else if (unit == "gb")
    scale = 1'000'000'000;
  else if (unit == "tb")
    scale = 1'000'000'000'000;
  else
    throw fail();
  constexpr std::uint64_t kMax = std::numeric_limits<std::size_t>::max() / 2;
  const auto too_large = [&] {
    return config_error("\"" + std::string(text) + "\" is too large for a size: at most " + format_bytes(kMax));
  };
  std::uint64_t bytes = 0;
  if (number.find('.') == std::string::npos) {
    // A whole number: exact (a double would round a byte count above 2^53).
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc{} || __builtin_mul_overflow(n, scale, &bytes) || bytes > kMax) throw too_large();
  } else {
    const double value = std::strtod(number.c_str(), nullptr) * static_cast<double>(scale);
    if (value > static_cast<double>(kMax)) throw too_large();
    if (value != std::floor(value)) {
      throw config_error("\"" + std::string(text) + "\" is not a whole number of bytes; write it in a smaller unit");
    }
    bytes = static_cast<std::uint64_t>(value);
  }
  return static_cast<std::size_t>(bytes);
}

Config parse_config(std::string_view text, std::string_view source) {
  Config cfg;
  toml::table table;
  try {
    // Without the source's name: toml++ 3.3 copies it in a noexcept constructor (utf8_reader), so
    // running out of memory there would terminate the process instead of throwing std::bad_alloc.
    // Errors name the source through where() instead.
    table = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw config_error(std::string(e.description()) + " (not valid TOML)", where(e.source(), source));
  }
  KeysSet set;
  walk(cfg, table, "", set, source);
  return cfg;
}

std::string read_config_file(const std::string& path) {
  // std::ifstream opens a directory, and reading it then gives no bytes: an empty file, every default.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw config_error("'" + path + "' is a directory, not a config file; name a .toml file in it");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw config_error("cannot open the config file '" + path + "'; check the path");
  }
  // Read in chunks into a string, not with `stream << in.rdbuf()`: that insertion catches what the
  // copy throws and stops, so running out of memory while reading would parse a truncated file (a
  // "not valid TOML" error, or worse a valid file missing its last sections) instead of failing with
  // std::bad_alloc.
  std::string text;
  std::array<char, 4096> chunk{};
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0)
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw config_error("cannot read the config file '" + path + "'; check that it is a readable file");
  return text;
}

Config load_config(const std::string& path) {
  Config cfg = parse_config(read_config_file(path), path);
  (void)apply_environment(cfg);
  return cfg;
}

std::vector<std::string> apply_environment(Config& config) {
  std::vector<std::string> applied;
  for (const auto& k : vmm::config_keys()) {
    std::string name;
    const char* value = nullptr;
    for (const auto& n : vmm::environment_variables(k)) {  // the first one set wins
      if ((value = std::getenv(n.c_str())) != nullptr) {   // NOLINT(concurrency-mt-unsafe): read at start-up
        name = n;
        break;
      }
    }
    if (value == nullptr) continue;
    Raw raw;
    raw.text = value;
    apply(config, k, raw, name, "environment");
    applied.push_back(name);
  }
  return applied;
}

std::string to_toml(const Config& config) {
  std::string out;
  std::string section;
  for (const auto& k : vmm::config_keys()) {
    if (k.section != section) {
      section = k.section;
      out += (out.empty() ? "" : "\n") + std::string("[") + section + "]\n";
    }
    out += std::string(k.key) + " = " + k.get(config) + "\n";
  }
  return out;
}

namespace vmm {

std::string environment_variable(const ConfigKey& key) { return env_name(key); }

std::vector<std::string> environment_variables(const ConfigKey& key) {
  std::vector<std::string> out{env_name(key)};
  if (key.short_env != nullptr) out.emplace_back(key.short_env);
  if (key.old_name != nullptr) out.push_back(env_name(key.old_name));
  if (key.old_short_env != nullptr) out.emplace_back(key.old_short_env);
  return out;
}

}  // namespace vmm

}  // namespace tvmm
