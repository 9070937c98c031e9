#pragma once
// Shared helpers for the tests: small simulated configurations and byte patterns.

#include <cstddef>
#include <cstdint>
#include <cstring>

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
  return c;
}

//! The byte at `i` of a pattern identified by `seed` (differs across seeds and positions).
inline std::uint8_t pattern_byte(std::uint64_t seed, std::size_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i / 8) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  return static_cast<std::uint8_t>(x >> (8 * (i % 8)));
}

inline void fill(void* p, std::size_t n, std::uint64_t seed) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = pattern_byte(seed, i);
}

//! Number of bytes that differ from the pattern.
inline std::size_t mismatches(const void* p, std::size_t n, std::uint64_t seed) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += b[i] != pattern_byte(seed, i) ? 1 : 0;
  return bad;
}

}  // namespace tvmm::test
