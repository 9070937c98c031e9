#pragma once
// Shared helpers for the tests: small simulated configurations and byte patterns.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/pattern.hpp"
#include "tvmm/tvmm.hpp"

namespace tvmm::test {

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

//! Fills `n` bytes at `p` with the pattern `seed` (the CPU pattern kernel).
inline void fill(void* p, std::size_t n, std::uint64_t seed) { kernels::fill_pattern(p, n, seed); }

//! Number of bytes that differ from the pattern `seed`.
inline std::size_t mismatches(const void* p, std::size_t n, std::uint64_t seed) {
  return kernels::count_mismatches(p, n, seed);
}

}  // namespace tvmm::test
