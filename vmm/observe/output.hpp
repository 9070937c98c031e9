#pragma once
// Stats and pin-log output (config sections [stats] and [pin_log]): the pager's Stats as JSON in a file
// when the pager is destroyed, and a log of every pin and iteration mark as JSON lines, for studying
// policies offline. Files are opened when the pager is built, so a bad path fails then, not at exit.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "tvmm/pager.hpp"
#include "tvmm/stats.hpp"

namespace tvmm::vmm {

//! An output file: a path, or "-" for standard error. Throws tvmm::config_error naming `key` and the
//! path when it cannot be opened for writing.
class OutputFile {
 public:
  OutputFile(const std::string& path, const char* key);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  [[nodiscard]] std::FILE* get() const noexcept { return f_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  //! Flushes and closes (stderr is only flushed); reports a failed write on stderr. Idempotent.
  void close() noexcept;

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  bool owned_ = false;
};

//! The pin log (pin_log.file): one JSON object per line.
//!   {"pin": N, "t_us": T, "tensor": ID, "pages": P, "access": "read"|"read_write"|"write", "hit": true|false}
//!   {"iteration": N, "t_us": T}
//! t_us counts from the pager's construction; "hit" says every page was resident (the pin took the
//! hit path). Thread-safe; lines of concurrent pins do not interleave.
class PinLog {
 public:
  explicit PinLog(const std::string& path);
  void pin(std::uint64_t tensor, std::uint32_t pages, Access access, bool hit) noexcept;
  void iteration() noexcept;
  void close() noexcept { out_.close(); }

 private:
  [[nodiscard]] double now_us() const noexcept;
  OutputFile out_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::uint64_t pins_ = 0;
  std::uint64_t iterations_ = 0;
};

}  // namespace tvmm::vmm
