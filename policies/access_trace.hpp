#pragma once
// The access trace: the sequence of pins of one iteration (between the first two mark_iteration()
// calls), replayed in later iterations to prefetch ahead and to rank victims by next use (Belady).
// A pin that differs from the trace drops it; the next iteration is recorded afresh. Thread-safe.

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "policies/belady.hpp"

namespace tvmm::policies {

//! What a trace-reading policy needs to know of a resident page's tensor: its id in the trace, and the
//! mark of its latest stream release (the pager's Allocation::released_at).
struct PageOwner {
  std::uint64_t tensor = 0;
  std::uint64_t released_at = 0;
  //! What moving the page costs against moving a full page, in (0, 1]: less for a tensor's partial last
  //! page, which moves only the bytes the tensor holds in it (PagerImpl::kMoveOverheadBytes).
  double cost = 1.0;
  //! Evicting the page now makes its frame wait for a copy of it: a write-back (its current contents
  //! are on no other tier and not discarded) or a write-behind copy still running.
  bool copy_out = false;
  std::uint32_t page = 0;  //!< the page's index in its tensor
};

class AccessTrace {
 public:
  enum class State : std::uint8_t { waiting, recording, replaying };
  static constexpr std::size_t kNever = SIZE_MAX;

  //! A pin to prefetch for: the tensor and its pages, and how many pins ahead of now it is.
  struct Ahead {
    std::uint64_t tensor;
    std::uint32_t first;  // the pinned pages of the tensor: [first, first + pages)
    std::uint32_t pages;
    std::size_t distance;
    bool discard;  // that pin overwrites the contents (Access::write): nothing worth loading
  };

  //! Records or replays a pin. A pin matches the trace if it pins the same pages of the same tensor.
  //! When replaying and it matches, returns the not yet issued pins up to
  //! `distance` ahead (wrapping into the next iteration); on a mismatch the trace is dropped.
  std::vector<Ahead> on_pin(const TraceAccess& access, std::size_t distance);
  //! An iteration boundary. Starts recording, starts replaying (returning the first pins to
  //! prefetch), or, if an iteration ended early or late, drops the trace and records again.
  std::vector<Ahead> on_iteration(std::size_t distance);
  //! The next `count` pins from now (at most an iteration's, wrapping into the next iteration), into
  //! `out` (cleared first), each with its distance (0 = the very next pin). Replaying only (else none).
  void upcoming(std::size_t count, std::vector<Ahead>& out) const;
  //! Pins from now until `tensor` is pinned next (0 = the very next pin), or kNever. Replaying only.
  [[nodiscard]] std::size_t next_use(std::uint64_t tensor) const;
  //! How far (in pins from now) the next use of a page must be for a prefetch `distance` pins ahead
  //! to evict it: past the target itself, and no sooner than the next use after the target of every
  //! tensor pinned before it. Otherwise the eviction at the target's own pin would take one of those
  //! instead, and loading early would cost an extra reload. Replaying only (else distance + 1).
  [[nodiscard]] std::size_t prefetch_horizon(std::size_t distance) const;
  //! Pins since `tensor` was last pinned (0 = it was the latest pin), or kNever. Replaying only.
  [[nodiscard]] std::size_t since_last_use(std::uint64_t tensor) const;
  //! The position in the recorded iteration (0 = its first pin) of the next pin from now that covers
  //! page `page` of `tensor`, wrapping into the next iteration, or kNever (not replaying, or no pin
  //! covers it). `offset` receives the page's place in that pin (page - its first page).
  [[nodiscard]] std::size_t next_reference(std::uint64_t tensor, std::uint32_t page, std::uint32_t& offset) const;
  //! Whole iterations replayed since the trace began replaying (0 during the first replayed
  //! iteration), or 0 when not replaying.
  [[nodiscard]] std::size_t replays() const;
  //! Pins left in the current iteration (a next use at least this far away falls in the next one),
  //! or kNever when not replaying.
  [[nodiscard]] std::size_t pins_left_in_iteration() const;

  //! Where the latest pin stands in the recorded iteration. `index` means the same pin of the program
  //! in every iteration as long as `length` and `drops` (the trace dropped and recorded again) stay the
  //! same.
  struct Position {
    std::size_t index = kNever;  // 0 = the iteration's first pin; kNever when not replaying
    std::size_t length = 0;      // pins in the recorded iteration
    std::uint64_t drops = 0;     // divergences()
  };
  [[nodiscard]] Position position() const;

  [[nodiscard]] State state() const;
  [[nodiscard]] std::vector<TraceAccess> recorded() const;
  [[nodiscard]] std::uint64_t divergences() const;

 private:
  std::vector<Ahead> issue_locked(std::size_t distance);
  [[nodiscard]] std::size_t next_use_locked(std::uint64_t tensor) const;
  void drop_locked();

  mutable std::mutex mu_;
  State state_ = State::waiting;
  std::vector<TraceAccess> trace_;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> positions_;  // tensor -> sorted positions
  std::size_t cursor_ = 0;                                                 // position of the next expected pin
  std::size_t issued_ = 0;  // prefetches issued for positions [cursor_, issued_) (may pass the end: wraps)
  std::uint64_t divergences_ = 0;
  std::size_t replays_ = 0;  // replays()
};

}  // namespace tvmm::policies
