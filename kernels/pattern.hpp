#pragma once
//! @file pattern.hpp
//! CPU reference of the kernels: fill memory with a seeded pattern, count the bytes that differ from
//! it, checksum words, and arithmetic of tunable intensity. The simulator runs these as "kernels";
//! the GPU versions (kernels/cuda/kernels.cu) produce the same bytes and results.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tvmm::kernels {

//! The 64-bit word at `index` of the pattern `seed` (a splitmix64 step: cheap and well mixed).
constexpr std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) noexcept {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + index + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

//! Writes the pattern `seed` over `bytes` bytes at `dst` (any size; the tail is a prefix of a word).
inline void fill_pattern(void* dst, std::size_t bytes, std::uint64_t seed) noexcept {
  auto* out = static_cast<std::byte*>(dst);
  const std::size_t words = bytes / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = pattern_word(seed, i);
    std::memcpy(out + i * 8, &w, 8);
  }
  if (const std::size_t tail = bytes % 8; tail != 0) {
    const std::uint64_t w = pattern_word(seed, words);
    std::memcpy(out + words * 8, &w, tail);
  }
}

//! Number of bytes in `src[0, bytes)` that differ from the pattern `seed`.
inline std::size_t count_mismatches(const void* src, std::size_t bytes, std::uint64_t seed) noexcept {
  const auto* in = static_cast<const std::byte*>(src);
  std::size_t bad = 0;
  auto count_bytes = [](std::uint64_t diff, std::size_t n) {
    std::size_t c = 0;
    for (std::size_t b = 0; b < n; ++b) c += ((diff >> (8 * b)) & 0xFF) != 0 ? 1 : 0;
    return c;
  };
  const std::size_t words = bytes / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, in + i * 8, 8);
    if (const std::uint64_t diff = w ^ pattern_word(seed, i); diff != 0) bad += count_bytes(diff, 8);
  }
  if (const std::size_t tail = bytes % 8; tail != 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, in + words * 8, tail);
    bad += count_bytes(w ^ pattern_word(seed, words), tail);
  }
  return bad;
}

//! Checksum of `words` 64-bit words: the sum (mod 2^64) of pattern_word(word i, i), so it depends on
//! every bit and on position, and threads may add their parts in any order.
inline std::uint64_t checksum(const void* src, std::size_t words) noexcept {
  const auto* in = static_cast<const std::byte*>(src);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, in + i * 8, 8);
    sum += pattern_word(w, i);
  }
  return sum;
}

//! `iterations` dependent multiply-adds on each of `n` floats: 2 * iterations flops per element.
inline void compute(float* data, std::size_t n, int iterations) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    float x = data[i];
    for (int k = 0; k < iterations; ++k) x = x * 0.999999f + 0.000001f;
    data[i] = x;
  }
}

}  // namespace tvmm::kernels
