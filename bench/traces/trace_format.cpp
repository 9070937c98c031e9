#include "bench/traces/trace_format.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tvmm::bench {
namespace {

[[noreturn]] void fail(const std::string& source, std::size_t line, const std::string& what) {
  throw std::runtime_error(source + (line == 0 ? "" : ":" + std::to_string(line)) + ": " + what);
}

std::vector<std::string> split_ws(const std::string& line, std::size_t max_fields) {
  // Splits on spaces into at most max_fields fields; the last keeps the rest of the line.
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    if (out.size() + 1 == max_fields) {
      out.push_back(line.substr(i));
      break;
    }
    const auto j = line.find(' ', i);
    out.push_back(line.substr(i, j == std::string::npos ? std::string::npos : j - i));
    i = j == std::string::npos ? line.size() : j;
  }
  return out;
}

template <typename T>
bool parse_number(const std::string& s, T& out) {
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

std::vector<std::uint32_t> parse_ids(const std::string& field, std::size_t storages, const std::string& source,
                                     std::size_t line) {
  std::vector<std::uint32_t> ids;
  if (field == "-") return ids;
  std::size_t i = 0;
  while (i <= field.size()) {
    const auto j = std::min(field.find(',', i), field.size());
    std::uint32_t id = 0;
    if (!parse_number(field.substr(i, j - i), id))
      fail(source, line,
           "bad storage id list \"" + field + "\": expected comma-separated ids or -" +
               (field.find('=') != std::string::npos ? " (an op lists its READS and WRITES before flops= and bytes=)"
                                                     : ""));
    if (id >= storages)
      fail(source, line,
           "storage " + std::to_string(id) + " is used before its storage line (there are " + std::to_string(storages) +
               " so far)");
    ids.push_back(id);
    i = j + 1;
  }
  return ids;
}

std::string format_ids(const std::vector<std::uint32_t>& ids) {
  if (ids.empty()) return "-";
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

std::string format_double(double d) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back as d
  return ec == std::errc() ? std::string(buf, p) : std::string("0");
}

bool has_space(const std::string& s) { return s.empty() || s.find_first_of(" \t\n\r") != std::string::npos; }

}  // namespace

Trace parse_trace(const std::string& text, const std::string& source) {
  Trace t;
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  bool header = false;
  int version = 0;
  std::uint64_t total_bytes = 0;  // of the storages so far (at most kMaxTraceBytes)
  while (std::getline(in, line)) {
    ++n;
    // Tabs separate fields as spaces do; trailing blanks (and CR, from CRLF files) and a UTF-8 byte order
    // mark at the start are not part of the text.
    std::replace(line.begin(), line.end(), '\t', ' ');
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      if (line == "tvmm-trace 1") {
        version = 1;
      } else if (line == "tvmm-trace 2") {
        version = 2;
      } else {
        fail(source, n,
             "not a tvmm trace: the first line must be \"tvmm-trace 2\" (or 1, without op costs; see "
             "docs/trace-format.md)");
      }
      header = true;
      continue;
    }
    const auto kind = line.substr(0, line.find(' '));
    if (kind == "meta") {
      auto f = split_ws(line, 3);
      if (f.size() < 2) fail(source, n, "meta needs a key");
      t.meta[f[1]] = f.size() > 2 ? f[2] : "";
    } else if (kind == "storage") {
      auto f = split_ws(line, 5);
      if (f.size() != 5) fail(source, n, "storage needs: storage <id> <bytes> <kind> <name>");
      std::uint64_t id = 0;
      TraceStorage s;
      if (!parse_number(f[1], id) || id != t.storages.size())
        fail(source, n,
             "storage id \"" + f[1] + "\": ids must be 0, 1, 2... in order (expected " +
                 std::to_string(t.storages.size()) + ")");
      if (!parse_number(f[2], s.bytes)) fail(source, n, "storage bytes \"" + f[2] + "\" is not a whole number");
      if (s.bytes > kMaxTraceBytes - total_bytes)
        fail(source, n,
             "storage " + f[1] + " of " + f[2] + " bytes brings the trace's storages past " +
                 std::to_string(kMaxTraceBytes) + " bytes (1 PiB), more than replay can model");
      total_bytes += s.bytes;
      s.kind = f[3];
      s.name = f[4];
      t.storages.push_back(std::move(s));
    } else if (kind == "op") {
      auto f = split_ws(line, 16);
      if (f.size() < 5 || (version == 1 && f.size() != 5)) {
        fail(source, n,
             version == 1 ? "op needs: op <time_us> <name> <read ids|-> <written ids|->"
                          : "op needs: op <time_us> <name> <read ids|-> <written ids|-> [flops=<n>] [bytes=<n>]");
      }
      TraceOp op;
      if (!parse_number(f[1], op.time_us) || !(op.time_us >= 0) || !std::isfinite(op.time_us))
        fail(source, n, "op time \"" + f[1] + "\" is not a finite, non-negative number of microseconds");
      op.name = f[2];
      op.reads = parse_ids(f[3], t.storages.size(), source, n);
      op.writes = parse_ids(f[4], t.storages.size(), source, n);
      for (std::size_t i = 5; i < f.size(); ++i) {  // version 2: the op's costs
        const auto eq = f[i].find('=');
        const std::string key = f[i].substr(0, eq), value = eq == std::string::npos ? "" : f[i].substr(eq + 1);
        double* field = key == "flops" ? &op.flops : key == "bytes" ? &op.bytes : nullptr;
        if (field == nullptr || eq == std::string::npos) {
          fail(source, n, "op field \"" + f[i] + "\": expected flops=<n> or bytes=<n>");
        }
        if (*field >= 0) fail(source, n, "op field " + key + " given twice");
        if (!parse_number(value, *field) || !(*field >= 0) || !std::isfinite(*field))
          fail(source, n, "op " + key + " \"" + value + "\" is not a finite, non-negative number");
      }
      t.ops.push_back(std::move(op));
    } else {
      fail(source, n, "unknown record \"" + kind + "\": expected meta, storage or op");
    }
  }
  if (!header) fail(source, n, "empty trace: no \"tvmm-trace 2\" (or 1) header");
  return t;
}

std::string format_trace(const Trace& t) {
  const bool costs =
      std::any_of(t.ops.begin(), t.ops.end(), [](const TraceOp& op) { return op.flops >= 0 || op.bytes >= 0; });
  std::string out = costs ? "tvmm-trace 2\n" : "tvmm-trace 1\n";
  for (const auto& [k, v] : t.meta) {
    if (has_space(k)) throw std::runtime_error("trace meta key \"" + k + "\" is empty or has spaces");
    out += "meta " + k + " " + v + "\n";
  }
  for (std::size_t i = 0; i < t.storages.size(); ++i) {
    const auto& s = t.storages[i];
    if (has_space(s.kind)) throw std::runtime_error("storage " + std::to_string(i) + ": kind is empty or has spaces");
    out += "storage " + std::to_string(i) + " " + std::to_string(s.bytes) + " " + s.kind + " " +
           (s.name.empty() ? "-" : s.name) + "\n";
  }
  for (const auto& op : t.ops) {
    if (has_space(op.name)) throw std::runtime_error("op name \"" + op.name + "\" is empty or has spaces");
    out += "op " + format_double(op.time_us) + " " + op.name + " " + format_ids(op.reads) + " " + format_ids(op.writes);
    if (op.flops >= 0) out += " flops=" + format_double(op.flops);
    if (op.bytes >= 0) out += " bytes=" + format_double(op.bytes);
    out += "\n";
  }
  return out;
}

Trace read_trace(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (f == nullptr) throw std::runtime_error("cannot open trace " + path + ": " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(got));
  int err = 0;
  const char* msg = gzerror(f, &err);
  const std::string why = got < 0 ? std::string(msg) : "";
  gzclose(f);
  if (got < 0)
    throw std::runtime_error("reading trace " + path + " failed: " + why + " (a corrupt or truncated .gz file?)");
  // At the end of the input gzread returns what it has, and 0 after it; Z_BUF_ERROR then means "the input
  // file ended in the middle of a gzip stream" (zlib.h, gzread). What was read is a prefix of the trace,
  // which may well parse (a cut after a flushed line): refuse it rather than replay part of a model.
  if (err == Z_BUF_ERROR) {
    throw std::runtime_error("reading trace " + path + " failed: the file ends in the middle of its gzip stream (" +
                             std::to_string(text.size()) +
                             " bytes decompressed): it is truncated; copy or record it again");
  }
  return parse_trace(text, path);
}

void write_trace(const std::string& path, const Trace& trace) {
  const auto text = format_trace(trace);
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb9");
    if (f == nullptr) throw std::runtime_error("cannot write trace " + path + ": " + std::strerror(errno));
    const bool ok = gzwrite(f, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size());
    if (gzclose(f) != Z_OK || !ok) throw std::runtime_error("writing trace " + path + " failed");
    return;
  }
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) throw std::runtime_error("writing trace " + path + " failed");
}

}  // namespace tvmm::bench
