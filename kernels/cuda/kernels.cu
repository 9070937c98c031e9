// The GPU kernels (built into a fatbin for sm_90 and compute_90 PTX when nvcc is present, and loaded
// by the CUDA backend with cuModuleLoadData). Each has a CPU equivalent in kernels/pattern.hpp that
// produces the same bytes or the same result; the simulator runs those.
#include <cstddef>
#include <cstdint>

namespace {

// kernels/pattern.hpp: pattern_word, the same splitmix64 step.
__device__ __forceinline__ std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + index + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ unsigned differing_bytes(std::uint64_t diff, unsigned n) {
  unsigned c = 0;
  for (unsigned b = 0; b < n; ++b) c += ((diff >> (8 * b)) & 0xFF) != 0 ? 1u : 0u;
  return c;
}

__device__ __forceinline__ std::uint64_t globaltimer() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace

// Writes the pattern `seed` over `bytes` bytes at `dst` (as kernels::fill_pattern).
extern "C" __global__ void tvmm_fill(unsigned char* dst, std::size_t bytes, std::uint64_t seed) {
  const std::size_t words = bytes / 8;
  auto* w = reinterpret_cast<std::uint64_t*>(dst);
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    w[i] = pattern_word(seed, i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const std::uint64_t last = pattern_word(seed, words);
    for (std::size_t b = 0; b < bytes % 8; ++b) dst[words * 8 + b] = static_cast<unsigned char>(last >> (8 * b));
  }
}

// Adds to *bad the number of bytes that differ from the pattern `seed` (as kernels::count_mismatches).
extern "C" __global__ void tvmm_verify(const unsigned char* src, std::size_t bytes, std::uint64_t seed,
                                       unsigned long long* bad) {
  const std::size_t words = bytes / 8;
  const auto* w = reinterpret_cast<const std::uint64_t*>(src);
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    if (const std::uint64_t diff = w[i] ^ pattern_word(seed, i); diff != 0) mine += differing_bytes(diff, 8);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && bytes % 8 != 0) {
    std::uint64_t last = 0;
    for (std::size_t b = 0; b < bytes % 8; ++b) last |= std::uint64_t{src[words * 8 + b]} << (8 * b);
    mine += differing_bytes(last ^ pattern_word(seed, words), static_cast<unsigned>(bytes % 8));
  }
  if (mine != 0) atomicAdd(bad, mine);
}

// Adds to *sum the checksum of `words` 64-bit words (as kernels::checksum: a sum of mixed words, so
// the order in which threads add does not matter).
extern "C" __global__ void tvmm_checksum(const std::uint64_t* src, std::size_t words, unsigned long long* sum) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t{gridDim.x} * blockDim.x) {
    mine += pattern_word(src[i], i);
  }
  atomicAdd(sum, mine);
}

// Arithmetic of tunable intensity for overlap benchmarks: `iterations` dependent multiply-adds per
// element, 2 * iterations flops per 4 bytes read and written (as kernels::compute).
extern "C" __global__ void tvmm_compute(float* data, std::size_t n, int iterations) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    float x = data[i];
    for (int k = 0; k < iterations; ++k) x = x * 0.999999f + 0.000001f;
    data[i] = x;
  }
}

// Keeps the stream busy for `ns` nanoseconds of GPU time (one thread spinning on the global timer):
// the backend's launch_busy, a modelled kernel on a real GPU.
extern "C" __global__ void tvmm_busy(std::uint64_t ns) {
  const std::uint64_t start = globaltimer();
  while (globaltimer() - start < ns) {
  }
}
