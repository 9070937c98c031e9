#pragma once
// `tvmm stats FILE`: a stats file (stats.file / TVMM_STATS: a pager's tvmm::to_json, or transparent
// mode's counters) printed for a person.

#include <string>

namespace tvmm::cli {

//! The report for the stats JSON `text` read from `source`; throws tvmm::invalid_argument saying what
//! is wrong when it is not JSON, or not a tvmm stats object.
std::string describe_stats(const std::string& text, const std::string& source);

//! Prints the report for the file at `path`; returns the exit status (1 with the reason on stderr).
int run_stats(const std::string& path);

}  // namespace tvmm::cli
