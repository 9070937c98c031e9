#include "vmm/core/release_points.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "vmm/core/transfer_engine.hpp"

namespace tvmm::vmm {

namespace {
// Events kept per stream: a point older than the oldest is covered by the oldest (later than needed).
constexpr std::size_t kKeep = 16;
}  // namespace

void ReleasePoints::add_stream(device::StreamHandle s) {
  auto line = std::make_shared<ReleaseLine>();
  line->stream = s;
  std::lock_guard lk(mu_);
  lines_[s] = std::move(line);
}

void ReleasePoints::remove_stream(device::StreamHandle s, bool drained) noexcept {
  std::shared_ptr<ReleaseLine> line;
  {
    std::lock_guard lk(mu_);
    auto it = lines_.find(s);
    if (it == lines_.end()) return;
    line = std::move(it->second);
    lines_.erase(it);
  }
  std::lock_guard ll(line->mu);
  line->gone = true;
  if (drained) {
    line->complete = line->taken;
    line->recorded.clear();
    return;
  }
  try {
    if (line->recorded.empty() || line->recorded.back().first < line->taken) record_locked(*line);
  } catch (...) {
    line->complete = line->taken;  // no event: as complete as it can be known
  }
}

std::shared_ptr<ReleaseLine> ReleasePoints::line_of(device::StreamHandle s) {
  std::lock_guard lk(mu_);
  auto it = lines_.find(s);
  return it == lines_.end() ? nullptr : it->second;
}

std::uint64_t ReleasePoints::taken(device::StreamHandle s) {
  const auto line = line_of(s);
  if (!line) return 0;
  std::lock_guard ll(line->mu);
  return line->taken;
}

void ReleasePoints::synchronized(device::StreamHandle s, std::uint64_t upto) noexcept {
  std::shared_ptr<ReleaseLine> line;
  try {
    line = line_of(s);
  } catch (...) {
    return;  // knowing less only costs a record later
  }
  if (!line) return;
  std::lock_guard ll(line->mu);
  line->complete = std::max(line->complete, std::min(upto, line->taken));
}

void ReleasePoints::order_after(device::StreamHandle s, std::span<const EventRef> events) {
  if (events.empty()) return;
  const auto line = line_of(s);
  for (const EventRef& r : events) {
    Event* e = r.get();
    if (!line || e->seq == 0) {
      xfer_.stream_wait(s, e);
      continue;
    }
    {
      std::lock_guard ll(line->mu);
      const auto it =
          std::find_if(line->waited.begin(), line->waited.end(), [&](const auto& w) { return w.first == e->stream; });
      if (it != line->waited.end() && it->second >= e->seq) continue;
    }
    xfer_.stream_wait(s, e);
    // Noted once the wait is queued: a thread that reads it and skips its own wait queues its work on
    // `s` after this one's wait.
    std::lock_guard ll(line->mu);
    auto it =
        std::find_if(line->waited.begin(), line->waited.end(), [&](const auto& w) { return w.first == e->stream; });
    if (it == line->waited.end()) {
      it = std::find_if(line->waited.begin(), line->waited.end(), [](const auto& w) { return w.first == nullptr; });
    }
    if (it != line->waited.end()) *it = {e->stream, std::max(it->second, e->seq)};
  }
}

void ReleasePoints::record_locked(ReleaseLine& line) {
  EventRef e = xfer_.record_on(line.stream);
  line.recorded.emplace_back(line.taken, std::move(e));
  if (line.recorded.size() > kKeep) line.recorded.pop_front();
}

ReleaseTicket ReleasePoints::take(device::StreamHandle s, std::uint64_t evictions) {
  ReleaseTicket t;
  auto line = line_of(s);
  if (!line) {  // a stream the pager did not create: it may be gone by the time anything waits
    t.done = xfer_.record_on(s);
    return t;
  }
  std::lock_guard ll(line->mu);
  t.point = ++line->taken;
  // The latest point an event covers or that is known complete (both below this one).
  const std::uint64_t covered = std::max(line->complete, line->recorded.empty() ? 0 : line->recorded.back().first);
  const bool evicting = std::exchange(line->evictions, evictions) != evictions;
  if (evicting || t.point - covered >= kRecordEvery) {
    record_locked(*line);
    t.done = line->recorded.back().second;
  }
  t.line = std::move(line);
  return t;
}

void ReleasePoints::resolve(ReleaseTicket& t, bool record) noexcept {
  if (!t.line || t.done) return;
  // Held until the lock below is let go: t.line.reset() may drop the line's last reference (its stream
  // removed, every other ticket of it resolved), which would free the mutex while it is held.
  const std::shared_ptr<ReleaseLine> keep = t.line;
  ReleaseLine& line = *keep;
  std::lock_guard ll(line.mu);
  // The newest event found complete (by anyone's query or wait: no driver call here) completes its
  // points and every event recorded before it (one stream runs in order).
  for (auto it = line.recorded.rbegin(); it != line.recorded.rend(); ++it) {
    if (!it->second.get()->done.load(std::memory_order_acquire)) continue;
    line.complete = std::max(line.complete, it->first);
    line.recorded.erase(line.recorded.begin(), it.base());
    break;
  }
  if (t.point <= line.complete) {
    t.line.reset();
    return;
  }
  for (const auto& [upto, e] : line.recorded) {
    if (upto >= t.point) {
      t.done = e;
      return;
    }
  }
  if (line.gone) {  // remove_stream covered every point it could
    t.line.reset();
    return;
  }
  if (!record) return;
  try {
    record_locked(line);
    t.done = line.recorded.back().second;
  } catch (const std::exception& ex) {
    // Without an event the only safe release point is now: wait for the stream (as a failed record at
    // release does; a lost device completes nothing, and its data is gone with it).
    if (!dev_.lost()) {
      std::fprintf(stderr, "tvmm: recording a stream pin's release point failed (%s); synchronizing its stream\n",
                   ex.what());
    }
    // The pager's lock may be held here (an eviction, a free): a failure path only, and no work on a
    // stream may wait for a host thread (cuLaunchHostFunc). The point counts as complete even if the
    // synchronize fails too (as a failed record at release always did): a consumer with neither an
    // event nor a drained stream has nothing better to wait for.
    (void)dev_.synchronize_stream(line.stream);
    line.complete = line.taken;
    t.line.reset();
  }
}

}  // namespace tvmm::vmm
