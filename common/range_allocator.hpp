#pragma once
// First-fit allocation of runs from [0, size) with a coalescing free list: the address space's page
// runs and the simulated device's physical granules. Not synchronised: the owner holds its lock.

#include <algorithm>
#include <cstddef>
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

  //! Makes sure that the next allocate(), and the free() of every run allocated after a prepare(), can
  //! record their runs without allocating: keeps a map node for every allocated run beyond the free
  //! list's own (a free run's node is re-keyed when a run is carved from it; a run freed with no free
  //! neighbour takes a spare node). Throws std::bad_alloc, changing nothing. Owners whose frees must not
  //! lose a run (the address space) call it before each allocate().
  void prepare() {
    // (A key already taken, after the counter wrapped around, adds nothing: the loop tries the next.)
    while (free_.size() + spares_.size() < runs_ + 2) (void)spares_.emplace(spare_key_++, T{});
  }

  //! Start of a free run of `len`, or nullopt when none is long enough. Allocates no memory (the
  //! rest of the run keeps its node; a run taken whole gives its node to the spares), so it cannot throw.
  std::optional<T> allocate(T len) noexcept {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < len) continue;
      const T start = it->first;
      const T rest = it->second - len;
      if (rest == 0) {
        keep_spare(free_.extract(it));
      } else if (auto node = free_.extract(it); !node.empty()) {  // (never empty: `it` is an element)
        node.key() = start + len;
        node.mapped() = rest;
        free_.insert(std::move(node));
      }
      free_total_ -= len;
      ++runs_;
      return start;
    }
    return std::nullopt;
  }

  //! Returns [start, start + len), merging it with free neighbours. A run with no free neighbour needs
  //! a node of its own: a spare one (always there for a run allocated after prepare()), else a new one;
  //! if that allocation fails the run is lost to later allocations (a leak, not a failure: frees run in
  //! destructors).
  void free(T start, T len) noexcept {
    if (runs_ != 0) --runs_;
    auto next = free_.lower_bound(start);
    const bool join_next = next != free_.end() && start + len == next->first;
    const auto prev = next == free_.begin() ? free_.end() : std::prev(next);
    const bool join_prev = prev != free_.end() && prev->first + prev->second == start;
    if (join_prev) {
      prev->second += len + (join_next ? next->second : T{0});
      if (join_next) keep_spare(free_.extract(next));
    } else if (join_next) {
      if (auto node = free_.extract(next); !node.empty()) {  // (never empty: `next` is an element)
        node.key() = start;
        node.mapped() += len;
        free_.insert(std::move(node));
      }
    } else if (auto node = spares_.empty() ? Node() : spares_.extract(spares_.begin()); !node.empty()) {
      node.key() = start;
      node.mapped() = len;
      free_.insert(std::move(node));  // `start` is not a free run's: it goes in
    } else {
      try {
        free_.emplace(start, len);
      } catch (const std::bad_alloc&) {
        return;
      }
    }
    free_total_ += len;
    // No more spares than prepare() keeps: a long run of frees does not hold memory for nothing.
    while (!spares_.empty() && free_.size() + spares_.size() > runs_ + 2) spares_.erase(spares_.begin());
  }

  [[nodiscard]] T free_total() const noexcept { return free_total_; }
  [[nodiscard]] T largest_free_run() const noexcept {
    T best = 0;
    for (const auto& [start, len] : free_) best = std::max(best, len);
    return best;
  }

 private:
  using Node = typename std::map<T, T>::node_type;
  void keep_spare(Node node) noexcept {
    if (node.empty()) return;  // (never: callers extract an element)
    node.key() = spare_key_++;
    (void)spares_.insert(std::move(node));  // a key taken (wrapped around): the node is freed instead
  }

  T free_total_;
  std::map<T, T> free_;    // start -> length
  std::map<T, T> spares_;  // nodes no run uses (keys are only distinct)
  T spare_key_{};
  std::size_t runs_ = 0;  // runs allocated and not freed
};

}  // namespace tvmm::common
