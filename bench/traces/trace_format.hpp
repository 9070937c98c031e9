#pragma once
// Model traces for `tvmm-bench --workload replay`: the operators of one training (or inference) step,
// each with the tensor storages it read and wrote and its measured time. docs/trace-format.md has the
// format; bench/traces/capture.py writes it from a PyTorch model.
//
// Text, one record per line, optionally gzip-compressed (read_trace tells by the magic bytes):
//   tvmm-trace 2                (or 1: traces without op costs, still read)
//   meta <key> <value...>
//   storage <id> <bytes> <kind> <name>
//   op <time_us> <name> <read ids|-> <written ids|-> [flops=<n>] [bytes=<n>]
// Ids are 0, 1, 2... in order of their storage lines; id lists are comma-separated. flops= and bytes=
// (version 2) are what the operator computed and the bytes of its tensors it read and wrote, for
// modelling its time on a GPU (gpu_profile.hpp).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tvmm::bench {

//! The most bytes a trace's storages may add up to (1 PiB): far beyond any GPU's memory, and low
//! enough that replay's sums of bytes and counts of pages cannot overflow. read_trace rejects more.
inline constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{1} << 50;

//! One tensor storage of the traced program.
struct TraceStorage {
  std::uint64_t bytes = 0;
  std::string kind;  //!< "param", "grad", "state", "input" (existed before the step) or "temp" (made by an op)
  std::string name;  //!< a parameter's name, or the op that made it
  bool operator==(const TraceStorage&) const = default;
};

//! One operator: the storages it read and wrote (by index into Trace::storages) and its measured time.
struct TraceOp {
  std::string name;
  double time_us = 0;
  std::vector<std::uint32_t> reads;
  std::vector<std::uint32_t> writes;
  double flops = -1;  //!< floating-point operations it computed; < 0: not recorded (a version 1 trace)
  double bytes = -1;  //!< bytes of its tensors it read and wrote (views: 0); < 0: not recorded
  bool operator==(const TraceOp&) const = default;
};

struct Trace {
  std::map<std::string, std::string> meta;  //!< model, batch size, torch version, ...
  std::vector<TraceStorage> storages;
  std::vector<TraceOp> ops;
  bool operator==(const Trace&) const = default;
};

//! Reads a trace file, plain or gzip-compressed. Throws std::runtime_error naming the file, the line
//! and what is wrong (bad header, unknown record, an id used before its storage line, ...).
[[nodiscard]] Trace read_trace(const std::string& path);

//! Parses trace text; `source` names it in error messages.
[[nodiscard]] Trace parse_trace(const std::string& text, const std::string& source);

//! The trace as text (what read_trace reads back to an equal Trace; times keep 0.001 us): version 2 when
//! an op has its costs recorded, else version 1.
[[nodiscard]] std::string format_trace(const Trace& trace);

//! Writes the trace to `path`, gzip-compressed when `path` ends in ".gz". Throws std::runtime_error.
void write_trace(const std::string& path, const Trace& trace);

}  // namespace tvmm::bench
