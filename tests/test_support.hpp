#pragma once
// Shared helpers for the tests: small simulated configurations and byte patterns.

#include <stdlib.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/pattern.hpp"
#include "tvmm/tvmm.hpp"

//! Skips a test that needs a (real or emulated) GPU it does not have, with the reason; fails instead
//! where one is promised (see gpu_required), so a run that lost its driver cannot pass by skipping.
#define TVMM_SKIP_WITHOUT_GPU(why)                                                                \
  do {                                                                                            \
    if (::tvmm::test::gpu_required()) {                                                           \
      GTEST_FAIL() << "a GPU is promised here (TVMM_TEST_REQUIRE_GPU=1, or the CUDA emulator on " \
                      "LD_LIBRARY_PATH), but "                                                    \
                   << why;                                                                        \
    }                                                                                             \
    GTEST_SKIP() << why;                                                                          \
  } while (0)

namespace tvmm::test {

//! A GPU is promised: TVMM_TEST_REQUIRE_GPU=1 (on a GPU machine), or the run is on the CUDA emulator
//! (ctest puts its directory, TVMM_CUDA_EMULATOR_DIR, on LD_LIBRARY_PATH for the emulated.* tests).
inline bool gpu_required() {
  const char* v = std::getenv("TVMM_TEST_REQUIRE_GPU");
  if (v != nullptr && std::strcmp(v, "1") == 0) return true;
#if defined(TVMM_CUDA_EMULATOR_DIR)
  const char* path = std::getenv("LD_LIBRARY_PATH");
  return path != nullptr && std::strstr(path, TVMM_CUDA_EMULATOR_DIR) != nullptr;
#else
  return false;
#endif
}

//! A small simulated device: 64 KiB pages so tests move many pages quickly.
inline Config small_config(std::size_t device_pages, std::size_t host_pages, std::size_t page = 64 * KiB) {
  Config c;
  c.device_backend = "sim";
  c.sim.granularity = page;
  c.page_size = page;
  c.device_budget = device_pages * page;
  c.host_budget = host_pages * page;
  c.va_size = 64 * MiB;
  c.wait_timeout = std::chrono::milliseconds(10'000);
  c.min_bytes = 0;  // the pager tests move small tensors; admission has its own tests
  return c;
}

//! Polls `pred` until it holds or `timeout` passes; returns its last value. For waiting on another
//! thread's progress, never for timing.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

//! Fills `n` bytes at `p` with the pattern `seed` (the CPU pattern kernel).
inline void fill(void* p, std::size_t n, std::uint64_t seed) { kernels::fill_pattern(p, n, seed); }

//! Number of bytes that differ from the pattern `seed`.
inline std::size_t mismatches(const void* p, std::size_t n, std::uint64_t seed) {
  return kernels::count_mismatches(p, n, seed);
}

//! What `f` throws, as its what() ("" if it throws nothing).
//! Writes pattern `seed` into all of `t` through a host pin.
inline void write(Tensor& t, std::uint64_t seed) {
  auto pin = t.pin(Access::write);
  fill(pin.data(), t.size(), seed);
}

//! The bytes of `t` that differ from pattern `seed`, read through a host pin.
inline std::size_t mismatches(Tensor& t, std::uint64_t seed) {
  auto pin = t.pin(Access::read);
  return mismatches(pin.data(), t.size(), seed);
}

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

//! The whole contents of a file ("" if it cannot be read).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Sets an environment variable for one test; restores it on exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

//! A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != 0 ? base : "/tmp") + "/tvmm-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() { remove(); }
  //! Removes the folder and everything in it now (for a process about to _Exit).
  void remove() const noexcept {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  //! Names of the entries in the directory now.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::string path_;
};

//! `n` bytes aligned for O_DIRECT, freed at scope exit.
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n)
      : bytes(n), data(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* at(std::size_t i, std::size_t stride) const { return data + i * stride; }
  std::size_t bytes;
  std::byte* data;
};

}  // namespace tvmm::test
