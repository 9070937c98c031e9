#include "policies/access_trace.hpp"

#include <algorithm>
#include <new>

namespace tvmm::policies {

std::vector<AccessTrace::Ahead> AccessTrace::on_pin(const TraceAccess& access, std::size_t distance) {
  std::lock_guard lk(mu_);
  switch (state_) {
    case State::waiting: return {};
    case State::recording:
      try {
        trace_.push_back(access);
        positions_[access.tensor].push_back(trace_.size() - 1);
      } catch (const std::bad_alloc&) {
        // A trace with a pin missing would replay wrongly: record again from the next iteration.
        drop_locked();
        trace_.clear();
        positions_.clear();
      }
      return {};
    case State::replaying:
      if (cursor_ < trace_.size() && trace_[cursor_].tensor == access.tensor && trace_[cursor_].first == access.first &&
          trace_[cursor_].pages == access.pages) {
        ++cursor_;
        return issue_locked(distance);
      }
      ++divergences_;
      drop_locked();
      return {};
  }
  return {};
}

std::vector<AccessTrace::Ahead> AccessTrace::on_iteration(std::size_t distance) {
  std::lock_guard lk(mu_);
  switch (state_) {
    case State::waiting:
      trace_.clear();
      positions_.clear();
      state_ = State::recording;
      return {};
    case State::recording:
      if (trace_.empty()) return {};  // an empty iteration teaches nothing: keep recording
      state_ = State::replaying;
      cursor_ = 0;
      issued_ = 0;
      replays_ = 0;
      return issue_locked(distance);
    case State::replaying:
      if (cursor_ != trace_.size()) {  // the iteration ended early or late: the program changed
        ++divergences_;
        drop_locked();
        trace_.clear();
        positions_.clear();
        state_ = State::recording;
        return {};
      }
      cursor_ = 0;
      issued_ = issued_ >= trace_.size() ? issued_ - trace_.size() : 0;
      ++replays_;
      return issue_locked(distance);
  }
  return {};
}

std::vector<AccessTrace::Ahead> AccessTrace::issue_locked(std::size_t distance) {
  std::vector<Ahead> out;
  const std::size_t n = trace_.size();
  issued_ = std::max(issued_, cursor_);
  // Never more than one iteration ahead, so a position is not issued twice.
  const std::size_t until = std::min(cursor_ + distance, cursor_ + n);
  for (; issued_ < until; ++issued_) {
    const auto& a = trace_[issued_ % n];
    out.push_back({a.tensor, a.first, a.pages, issued_ - cursor_, a.discard});
  }
  return out;
}

void AccessTrace::drop_locked() {
  state_ = State::waiting;
  cursor_ = 0;
  issued_ = 0;
}

void AccessTrace::upcoming(std::size_t count, std::vector<Ahead>& out) const {
  out.clear();
  std::lock_guard lk(mu_);
  if (state_ != State::replaying || trace_.empty()) return;
  const std::size_t n = trace_.size();
  for (std::size_t k = 0; k < count && k < n; ++k) {
    const auto& a = trace_[(cursor_ + k) % n];
    out.push_back({a.tensor, a.first, a.pages, k, a.discard});
  }
}

std::size_t AccessTrace::next_use_locked(std::uint64_t tensor) const {
  if (state_ != State::replaying) return kNever;
  auto it = positions_.find(tensor);
  if (it == positions_.end()) return kNever;
  const auto& pos = it->second;  // sorted
  auto at = std::lower_bound(pos.begin(), pos.end(), cursor_);
  if (at != pos.end()) return *at - cursor_;
  return trace_.size() - cursor_ + pos.front();  // wraps into the next iteration
}

std::size_t AccessTrace::prefetch_horizon(std::size_t distance) const {
  std::lock_guard lk(mu_);
  const std::size_t window = distance;  // the pins before the target
  std::size_t latest = distance + 1;
  if (state_ != State::replaying || trace_.empty()) return latest;
  const std::size_t n = trace_.size();
  for (std::size_t k = 0; k < window && k < n; ++k) {
    const auto& pos = positions_.at(trace_[(cursor_ + k) % n].tensor);
    const std::size_t end = cursor_ + window;  // first position after the window (may pass n: wraps)
    // The tensor's first position at or after `end`, in the unrolled sequence.
    auto at = std::lower_bound(pos.begin(), pos.end(), end % n);
    std::size_t next = at != pos.end() ? (end - end % n) + *at : (end - end % n) + n + pos.front();
    latest = std::max(latest, next - cursor_);
  }
  return latest;
}

std::size_t AccessTrace::since_last_use(std::uint64_t tensor) const {
  std::lock_guard lk(mu_);
  if (state_ != State::replaying) return kNever;
  auto it = positions_.find(tensor);
  if (it == positions_.end()) return kNever;
  const auto& pos = it->second;                                 // sorted
  auto at = std::lower_bound(pos.begin(), pos.end(), cursor_);  // first position not yet pinned
  if (at != pos.begin()) return cursor_ - 1 - *std::prev(at);
  return cursor_ + trace_.size() - 1 - pos.back();  // last pinned in the previous iteration
}

AccessTrace::Position AccessTrace::position() const {
  std::lock_guard lk(mu_);
  if (state_ != State::replaying || cursor_ == 0) return {kNever, trace_.size(), divergences_};
  return {cursor_ - 1, trace_.size(), divergences_};
}

std::size_t AccessTrace::replays() const {
  std::lock_guard lk(mu_);
  return state_ == State::replaying ? replays_ : 0;
}

std::size_t AccessTrace::pins_left_in_iteration() const {
  std::lock_guard lk(mu_);
  return state_ == State::replaying ? trace_.size() - cursor_ : kNever;
}

std::size_t AccessTrace::next_reference(std::uint64_t tensor, std::uint32_t page, std::uint32_t& offset) const {
  std::lock_guard lk(mu_);
  if (state_ != State::replaying) return kNever;
  const auto it = positions_.find(tensor);
  if (it == positions_.end()) return kNever;
  const auto& pos = it->second;  // sorted
  auto covers = [&](std::size_t at) { return trace_[at].first <= page && page - trace_[at].first < trace_[at].pages; };
  const auto from = std::lower_bound(pos.begin(), pos.end(), cursor_);
  auto found = std::find_if(from, pos.end(), covers);
  if (found == pos.end()) {  // wraps into the next iteration
    found = std::find_if(pos.begin(), from, covers);
    if (found == from) return kNever;
  }
  offset = page - trace_[*found].first;
  return *found;
}

std::size_t AccessTrace::next_use(std::uint64_t tensor) const {
  std::lock_guard lk(mu_);
  return next_use_locked(tensor);
}

AccessTrace::State AccessTrace::state() const {
  std::lock_guard lk(mu_);
  return state_;
}

std::vector<TraceAccess> AccessTrace::recorded() const {
  std::lock_guard lk(mu_);
  return trace_;
}

std::uint64_t AccessTrace::divergences() const {
  std::lock_guard lk(mu_);
  return divergences_;
}

}  // namespace tvmm::policies
