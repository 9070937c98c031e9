#pragma once
// What the plug-points' registries (policies/registry.cpp, backends/device/registry.cpp,
// backends/storage/registry.cpp) share: each is a span of entries with a `name` and a `summary`.

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tvmm::common {

//! The entry named `name`, or null.
template <class Entry>
const Entry* find_by_name(std::span<const Entry> entries, std::string_view name) noexcept {
  for (const auto& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

//! The entries' names, in order (a text config key's choices).
template <class Entry>
std::vector<std::string> names_of(std::span<const Entry> entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.emplace_back(e.name);
  return names;
}

//! "name (summary), name (summary), ..." for help texts.
template <class Entry>
std::string described(std::span<const Entry> entries) {
  std::string out;
  for (const auto& e : entries) {
    out += (out.empty() ? "" : ", ") + std::string(e.name) + " (" + std::string(e.summary) + ")";
  }
  return out;
}

}  // namespace tvmm::common
