#pragma once
//! @file config.hpp
//! `tvmm::Config`: backend choice, page size and per-tier byte budgets for a `tvmm::Pager`.

#include <chrono>
#include <cstddef>
#include <string>

namespace tvmm {

//! One mebibyte, for readable budgets: `64 * tvmm::MiB`.
inline constexpr std::size_t KiB = std::size_t{1} << 10;
//! One mebibyte.
inline constexpr std::size_t MiB = std::size_t{1} << 20;
//! One gibibyte.
inline constexpr std::size_t GiB = std::size_t{1} << 30;

//! Settings of the simulated GPU (`device_backend = "sim"`).
struct SimDeviceConfig {
  //! Physical memory of the simulated GPU in bytes: a hard limit, like a real card's.
  //! 0 = exactly the device budget (rounded up to the granularity).
  std::size_t capacity = 0;
  //! Mapping granularity in bytes (a real GPU reports 2 MiB). Must be a power of two and a multiple
  //! of the host page size.
  std::size_t granularity = 2 * MiB;
  //! Copy-engine bandwidth in bytes per second per direction; 0 = unthrottled (host memcpy speed).
  double bandwidth_bytes_per_s = 0.0;
  //! Fixed cost added to every copy, modelling a bus transaction's latency.
  std::chrono::nanoseconds copy_latency{0};
};

//! Configuration of a `tvmm::Pager`. Defaults suit a small simulated run; `validate()` is called by
//! the Pager constructor and throws `tvmm::config_error` naming the bad field and a fix.
struct Config {
  //! Device backend: "sim" (simulated GPU; works everywhere). "cuda" joins in a later release.
  std::string device_backend = "sim";
  //! Page size in bytes, the unit of residency. 0 = the backend's granularity. Otherwise a multiple
  //! of the granularity (larger pages amortise the fixed per-page driver cost).
  std::size_t page_size = 0;
  //! Bytes of device memory the pager may use for pages (rounded down to whole pages, at least one).
  std::size_t device_budget = 256 * MiB;
  //! Bytes of host memory the pager may use for evicted pages (rounded down, at least one page).
  std::size_t host_budget = 1 * GiB;
  //! Size of the device virtual-address reservation. 0 = 4 x (device_budget + host_budget), at least
  //! 1 GiB. Allocations are carved out of it, so it bounds the total size of live tensors.
  std::size_t va_size = 0;
  //! Eviction policy: "lru" (least recently used), "fifo" (first in, first out) or "clock" (second
  //! chance; lock-free touch). Checked when the Pager is built.
  std::string eviction = "lru";
  //! How long a pin may wait for other threads to unpin pages before failing with
  //! `tvmm::out_of_memory`: a pinned working set that never fits is an error, never a hang.
  std::chrono::milliseconds wait_timeout{30'000};
  //! Settings of the simulated GPU.
  SimDeviceConfig sim;

  //! Checks the fields that do not depend on the backend; throws `tvmm::config_error`.
  void validate() const;
};

//! Formats a byte count for people: "512 MiB", "1.5 GiB", "300 B".
[[nodiscard]] std::string format_bytes(std::size_t bytes);

}  // namespace tvmm
