#pragma once
// First-fit allocation of runs from [0, size) with a coalescing free list: the address space's page
// runs and the simulated device's physical granules. Not synchronised: the owner holds its lock.

#include <algorithm>
#include <cstdint>
#include <map>
#include <new>
#include <optional>

namespace tvmm::common {

template <class T>
class RangeAllocator {
 public:
  explicit RangeAllocator(T size) : free_total_(size) {
    if (size != 0) free_.emplace(T{0}, size);
  }

  //! Start of a free run of `len`, or nullopt when none is long enough. Allocates no memory (the
  //! rest of the run keeps its node), so it cannot throw.
  std::optional<T> allocate(T len) noexcept {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < len) continue;
      const T start = it->first;
      const T rest = it->second - len;
      if (rest == 0) {
        spare_ = free_.extract(it);                               // kept for a free() that needs a node of its own
      } else if (auto node = free_.extract(it); !node.empty()) {  // (never empty: `it` is an element)
        node.key() = start + len;
        node.mapped() = rest;
        free_.insert(std::move(node));
      }
      free_total_ -= len;
      return start;
    }
    return std::nullopt;
  }

  //! Returns [start, start + len), merging it with free neighbours. A run with no free neighbour needs
  //! a node of its own: the one the latest exact fit or merge gave up if there is one (so a run just
  //! allocated can always be given back), else a new one; if that allocation fails the run is lost to
  //! later allocations (a leak, not a failure: frees run in destructors).
  void free(T start, T len) noexcept {
    auto next = free_.lower_bound(start);
    const bool join_next = next != free_.end() && start + len == next->first;
    const auto prev = next == free_.begin() ? free_.end() : std::prev(next);
    const bool join_prev = prev != free_.end() && prev->first + prev->second == start;
    if (join_prev) {
      prev->second += len + (join_next ? next->second : T{0});
      if (join_next) spare_ = free_.extract(next);
    } else if (join_next) {
      if (auto node = free_.extract(next); !node.empty()) {  // (never empty: `next` is an element)
        node.key() = start;
        node.mapped() += len;
        free_.insert(std::move(node));
      }
    } else if (!spare_.empty()) {
      spare_.key() = start;
      spare_.mapped() = len;
      free_.insert(std::move(spare_));  // leaves spare_ empty
    } else {
      try {
        free_.emplace(start, len);
      } catch (const std::bad_alloc&) {
        return;
      }
    }
    free_total_ += len;
  }

  [[nodiscard]] T free_total() const noexcept { return free_total_; }
  [[nodiscard]] T largest_free_run() const noexcept {
    T best = 0;
    for (const auto& [start, len] : free_) best = std::max(best, len);
    return best;
  }

 private:
  T free_total_;
  std::map<T, T> free_;                       // start -> length
  typename std::map<T, T>::node_type spare_;  // a node no run uses (empty: none)
};

}  // namespace tvmm::common
