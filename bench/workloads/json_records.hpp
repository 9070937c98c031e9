#pragma once
// The --json output of the host-bandwidth and vmm workloads: an array of records, one per line.

#include <string>
#include <vector>

#include "bench/workloads/report.hpp"

namespace tvmm::bench {

//! Writes `records` (each a JSON object) to `path` as a JSON array; false, with the reason on stderr,
//! when the file cannot be written.
inline bool write_json_records(const std::string& path, const std::vector<std::string>& records) {
  std::string text = "[\n";
  for (std::size_t i = 0; i < records.size(); ++i) text += "  " + records[i] + (i + 1 < records.size() ? ",\n" : "\n");
  return write_text(path, text + "]\n");
}

}  // namespace tvmm::bench
