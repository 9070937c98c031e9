#include "vmm/core/transfer_engine.hpp"

#include <cstdio>

#include "vmm/core/check.hpp"

namespace tvmm::vmm {

namespace {
void* host_ptr(device::DevPtr p) noexcept { return reinterpret_cast<void*>(p); }
}  // namespace

TransferEngine::TransferEngine(device::DeviceBackend& dev, EventPool& events, std::size_t page_size)
    : dev_(dev), events_(events), page_size_(page_size) {
  TVMM_CHECK(dev_.create_stream(&in_));
  if (auto s = dev_.create_stream(&out_); !s.ok()) {
    (void)dev_.destroy_stream(in_);
    TVMM_CHECK(s);
  }
}

TransferEngine::~TransferEngine() {
  for (auto s : {in_, out_, behind_}) {
    if (s == nullptr) continue;
    (void)dev_.synchronize_stream(s);
    dev_.warn_failed(dev_.destroy_stream(s), "destroying a copy stream");
  }
}

void TransferEngine::map(std::span<const MapRequest> reqs, std::span<std::uint8_t> left_mapped) {
  std::size_t mapped = 0;
  try {
    std::size_t run_start = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      TVMM_CHECK(dev_.map(reqs[i].va, page_size_, reqs[i].chunk));
      mapped = i + 1;
      const bool run_ends = i + 1 == reqs.size() || reqs[i + 1].va != reqs[i].va + page_size_;
      if (run_ends) {
        TVMM_CHECK(dev_.set_access(reqs[run_start].va, (i + 1 - run_start) * page_size_));
        run_start = i + 1;
      }
    }
  } catch (...) {
    // All or nothing: the caller gets its frames back unmapped.
    for (std::size_t i = 0; i < mapped; ++i) {
      if (!dev_.unmap(reqs[i].va, page_size_).ok() && i < left_mapped.size()) left_mapped[i] = 1;
    }
    throw;
  }
}

void TransferEngine::unmap(device::DevPtr va) { TVMM_CHECK(dev_.unmap(va, page_size_)); }

bool TransferEngine::try_unmap(device::DevPtr va, std::size_t pages) noexcept {
  return dev_.unmap(va, pages * page_size_).ok();
}

namespace {

// A traced copy: queued at `queued`; the host callback queued behind it records its span.
struct CopyMark {
  Timeline* trace;
  std::uint32_t lane;
  const char* what;  // "page in", "write-back" or "write-behind"
  Timeline::Clock::time_point queued;
  device::DevPtr va;
};

void copy_done(void* user) {
  std::unique_ptr<CopyMark> m(static_cast<CopyMark*>(user));
  m->trace->span(m->lane, m->what, m->queued, m->trace->now(), "\"frame\": " + std::to_string(m->va));
}

}  // namespace

void TransferEngine::mark(device::StreamHandle stream, std::uint32_t lane, const char* what, device::DevPtr va,
                          Timeline::Clock::time_point queued) noexcept {
  // Tracing never fails a copy (it is queued already): without its callback the span is just missing.
  try {
    auto m = std::make_unique<CopyMark>(CopyMark{trace_, lane, what, queued, va});
    if (dev_.launch_host(stream, copy_done, m.get()).ok()) (void)m.release();  // copy_done owns it now
  } catch (...) {                                                              // std::bad_alloc: no span for this copy
  }
}

void TransferEngine::copy_in(device::DevPtr frame, const void* host, std::size_t bytes) {
  const auto queued = trace_ != nullptr ? trace_->now() : Timeline::Clock::time_point{};
  TVMM_CHECK(dev_.memcpy_async(host_ptr(frame), host, bytes, device::CopyKind::host_to_device, in_));
  pages_in_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(bytes, std::memory_order_relaxed);
  if (trace_ != nullptr) mark(in_, trace_->copy_in, "page in", frame, queued);
}

void TransferEngine::copy_out(void* host, device::DevPtr frame, std::size_t bytes) {
  const auto queued = trace_ != nullptr ? trace_->now() : Timeline::Clock::time_point{};
  {
    std::lock_guard lk(out_mu_);
    TVMM_CHECK(dev_.memcpy_async(host, host_ptr(frame), bytes, device::CopyKind::device_to_host, out_));
    out_latest_.reset();  // set after the call: a record taken meanwhile covers this copy too
  }
  pages_out_.fetch_add(1, std::memory_order_relaxed);
  bytes_out_.fetch_add(bytes, std::memory_order_relaxed);
  if (trace_ != nullptr) mark(out_, trace_->copy_out, "write-back", frame, queued);
}

device::StreamHandle TransferEngine::behind_stream() {
  if (behind_ == nullptr) TVMM_CHECK(dev_.create_stream(&behind_));
  return behind_;
}

void TransferEngine::copy_behind(void* host, device::DevPtr frame, std::size_t bytes) {
  const auto queued = trace_ != nullptr ? trace_->now() : Timeline::Clock::time_point{};
  const auto stream = behind_stream();
  TVMM_CHECK(dev_.memcpy_async(host, host_ptr(frame), bytes, device::CopyKind::device_to_host, stream));
  pages_out_.fetch_add(1, std::memory_order_relaxed);
  bytes_out_.fetch_add(bytes, std::memory_order_relaxed);
  if (trace_ != nullptr) mark(stream, trace_->copy_out, "write-behind", frame, queued);
}

void TransferEngine::order_behind_after(Event* e) {
  const auto s = behind_stream();
  if (!recorded_on(e, s)) TVMM_CHECK(dev_.stream_wait_event(s, e->handle));
}

EventRef TransferEngine::record_behind() { return record_copy(behind_stream()); }

void TransferEngine::order_copy_out_after(Event* e) {
  if (recorded_on(e, out_)) return;
  std::lock_guard lk(out_mu_);
  TVMM_CHECK(dev_.stream_wait_event(out_, e->handle));
  out_latest_.reset();
}

void TransferEngine::order_copy_in_after(Event* e) {
  if (!recorded_on(e, in_)) TVMM_CHECK(dev_.stream_wait_event(in_, e->handle));
}

EventRef TransferEngine::record_on(device::StreamHandle stream) {
  EventRef e = events_.acquire();
  Event* ev = e.get();
  TVMM_CHECK(dev_.record_event(ev->handle, stream));
  ev->stream = stream;
  ev->seq = 0;
  ev->write_back = false;
  return e;
}

EventRef TransferEngine::record_copy(device::StreamHandle stream) {
  EventRef e = events_.acquire();
  Event* ev = e.get();
  {
    // Numbered in the order of the records, which the lock makes the order on each stream too.
    std::lock_guard lk(seq_mu_);
    TVMM_CHECK(dev_.record_event(ev->handle, stream));
    ev->seq = ++seq_;
  }
  ev->stream = stream;
  ev->write_back = stream == out_;
  return e;
}

EventRef TransferEngine::record_in() { return record_copy(in_); }

EventRef TransferEngine::record_out() {
  // An event recorded with nothing queued on the stream since the previous one completes with it (one
  // stream runs in order): that one serves, with no driver call.
  std::lock_guard lk(out_mu_);
  if (!out_latest_) out_latest_ = record_copy(out_);
  return out_latest_;
}

bool TransferEngine::drain() noexcept {
  const bool in_ok = dev_.synchronize_stream(in_).ok();
  const bool out_ok = dev_.synchronize_stream(out_).ok();
  const bool behind_ok = behind_ == nullptr || dev_.synchronize_stream(behind_).ok();
  return in_ok && out_ok && behind_ok;
}

void TransferEngine::stream_wait(device::StreamHandle stream, Event* e) {
  TVMM_CHECK(dev_.stream_wait_event(stream, e->handle));
}

}  // namespace tvmm::vmm
