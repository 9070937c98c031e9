#pragma once
// First-fit allocation of runs from [0, size) with a coalescing free list: the address space's page
// runs and the simulated device's physical granules. Not synchronised: the owner holds its lock.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

namespace tvmm::common {

template <class T>
class RangeAllocator {
 public:
  explicit RangeAllocator(T size) : free_total_(size) {
    if (size != 0) free_.emplace(T{0}, size);
  }

  //! Start of a free run of `len`, or nullopt when none is long enough.
  std::optional<T> allocate(T len) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < len) continue;
      const T start = it->first;
      const T rest = it->second - len;
      free_.erase(it);
      if (rest != 0) free_.emplace(start + len, rest);
      free_total_ -= len;
      return start;
    }
    return std::nullopt;
  }

  //! Returns [start, start + len), merging it with free neighbours.
  void free(T start, T len) {
    free_total_ += len;
    auto next = free_.lower_bound(start);
    if (next != free_.end() && start + len == next->first) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        prev->second += len;
        return;
      }
    }
    free_.emplace(start, len);
  }

  [[nodiscard]] T free_total() const noexcept { return free_total_; }
  [[nodiscard]] T largest_free_run() const noexcept {
    T best = 0;
    for (const auto& [start, len] : free_) best = std::max(best, len);
    return best;
  }

 private:
  T free_total_;
  std::map<T, T> free_;  // start -> length
};

}  // namespace tvmm::common
