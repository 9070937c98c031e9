#pragma once
// The --json output of every tvmm-bench workload: an array of records, one per line.

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace tvmm::bench {

//! Writes `records` (each a JSON object) to `path` as a JSON array; false, with the reason on stderr,
//! when the file cannot be written.
inline bool write_json_records(const std::string& path, const std::vector<std::string>& records) {
  std::ofstream out(path);
  if (!out) {
    std::fprintf(stderr, "tvmm-bench: cannot write %s\n", path.c_str());
    return false;
  }
  out << "[\n";
  for (std::size_t i = 0; i < records.size(); ++i)
    out << "  " << records[i] << (i + 1 < records.size() ? "," : "") << "\n";
  out << "]\n";
  if (!out.flush()) {
    std::fprintf(stderr, "tvmm-bench: writing %s failed\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace tvmm::bench
