// The emulated driver's streams, events, copies, host functions, stream capture and graphs. Every
// stream has a worker thread that runs its operations in order, later than the calls that queue them,
// so queries really return CUDA_ERROR_NOT_READY. Rules are quoted from cuda.h (CUDA 13.0).
// In this file, in order: the stream workers (run, wait_for, retire, resolve_stream, enqueue), then the
// entry points, by the sections marked "// ---": streams, events, copies, 2D and 3D copies, host
// functions, stream capture and graphs. Entry points never throw (entry.hpp, Guarded: std::bad_alloc
// becomes CUDA_ERROR_OUT_OF_MEMORY); cuStreamCreate, cuEventCreate and cuEventDestroy allocate before
// they change anything (a stream's worker starts last), the other calls are not yet checked for that.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "entry.hpp"

namespace cuemu {

double now_ms() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

namespace {

std::vector<Stream*>& retired_streams() {  // kept: operations of other streams may still name them
  static auto* v = new std::vector<Stream*>;
  return *v;
}

// Waits until `s` has completed `seq` operations.
void wait_for(Stream* s, std::uint64_t seq) {
  std::unique_lock lk(s->mu);
  s->cv.wait(lk, [&] { return s->completed >= seq; });
}

void run(Stream* s) {
  for (;;) {
    Op op;
    {
      std::unique_lock lk(s->mu);
      s->cv.wait(lk, [&] { return !s->queue.empty() || s->stopping; });
      if (s->queue.empty()) return;  // stopping, and nothing left
      op = std::move(s->queue.front());
      s->queue.pop_front();
    }
    for (const auto& [other, seq] : op.after) wait_for(other, seq);
    if (op.waits_for != nullptr) {
      Event* e = op.waits_for;
      std::unique_lock lk(e->mu);
      e->cv.wait(lk, [&] { return e->completed >= op.event_seq; });
    }
    // After an illegal address no work runs any more (cuda.h 2833), host functions included (cuda.h
    // 18101: "the function will not be called in the event of an error in the CUDA context"); the ops
    // still complete, and event records and a graph's event waits (bookkeeping) still run, so that
    // waiters wake up and learn of the error. Device work is counted, so that a call answering with
    // the sticky error waits until none runs (Driver::sticky_error).
    Driver& d = Driver::get();
    if (op.run && op.bookkeeping) (void)op.run();  // always, uncounted: waiters on events wake up
    const bool began = op.run && !op.bookkeeping && d.begin_work();
    if (began) {
      if (const CUresult r = op.run(); r != CUDA_SUCCESS) d.fail(r);
    }
    {
      std::lock_guard lk(s->mu);
      ++s->completed;
    }
    s->cv.notify_all();
    if (began) d.end_work();
  }
}

}  // namespace

void start(Stream* s) { s->worker = std::thread(run, s); }

void retire(Stream* s) {
  {
    std::lock_guard lk(s->mu);
    s->stopping = true;
  }
  s->cv.notify_all();
  s->worker.detach();
  std::lock_guard lk(Driver::get().mu);
  retired_streams().push_back(s);
}

void wait_idle(Stream* s) {
  std::uint64_t seq = 0;
  {
    std::lock_guard lk(s->mu);
    seq = s->enqueued;
  }
  wait_for(s, seq);
}

Stream* resolve_stream(CUstream handle, Context* ctx) {
  // cuda.h \note_null_stream: the NULL stream (and CU_STREAM_LEGACY) is the legacy default stream;
  // CU_STREAM_PER_THREAD is the calling thread's default stream, which "is not synchronized with
  // other streams ... except the legacy default stream" (it behaves as a blocking stream).
  if (handle == nullptr || handle == CU_STREAM_LEGACY) return ctx->legacy.get();
  Driver& d = Driver::get();
  if (handle == CU_STREAM_PER_THREAD) {
    thread_local std::map<Context*, Stream*> mine;
    Stream*& s = mine[ctx];
    if (s == nullptr) {
      s = new Stream;
      s->ctx = ctx;
      start(s);
      std::lock_guard lk(d.mu);
      ctx->streams.push_back(s);
      d.streams.insert(s);
    }
    return s;
  }
  auto* s = reinterpret_cast<Stream*>(handle);
  std::lock_guard lk(d.mu);
  if (d.streams.count(s) == 0 || s->ctx != ctx) return nullptr;
  return s;
}

namespace {

bool blocking(const Stream* s) { return !s->legacy && (s->flags & CU_STREAM_NON_BLOCKING) == 0; }

std::uint64_t tail(Stream* s) {
  std::lock_guard lk(s->mu);
  return s->enqueued;
}

void invalidate(Stream* s) {
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

}  // namespace

CUresult enqueue(Stream* s, std::function<CUresult()> fn) {
  Op op;
  op.run = std::move(fn);
  return enqueue(s, std::move(op));
}

CUresult enqueue(Stream* s, Op op) {
  Context* ctx = s->ctx;
  {
    std::lock_guard lk(Driver::get().mu);
    if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {  // captured into the graph, not run
      if (Event* e = op.waits_for; e != nullptr) {        // a wait node: the graph waits when it runs
        Op node;
        node.run = [e, seq = op.event_seq] {
          std::unique_lock el(e->mu);
          e->cv.wait(el, [&] { return e->completed >= seq; });
          return CUDA_SUCCESS;
        };
        node.bookkeeping = true;
        s->graph->ops.push_back(std::move(node));
      } else {
        s->graph->ops.push_back(std::move(op));
      }
      return CUDA_SUCCESS;
    }
    // The legacy default stream: "work launched into the legacy stream ... waits for all blocking
    // streams of the context to complete their work, and work in a blocking stream waits for the
    // legacy stream" (cuda.h \note_null_stream, "stream-sync-behavior"). A legacy launch while a
    // blocking stream captures would join the capture implicitly: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    // (cuda.h 3110), and the capture is invalidated.
    if (s->legacy) {
      bool implicit = false;
      for (Stream* b : ctx->streams) {
        if (!blocking(b)) continue;
        if (b->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
          invalidate(b);
          implicit = true;
          continue;
        }
        op.after.emplace_back(b, tail(b));
      }
      if (implicit) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (blocking(s)) {
      op.after.emplace_back(ctx->legacy.get(), tail(ctx->legacy.get()));
    }
  }
  {
    std::lock_guard lk(s->mu);
    s->queue.push_back(std::move(op));
    ++s->enqueued;
  }
  s->cv.notify_all();
  return CUDA_SUCCESS;
}

CUresult unsafe_during_capture(Context* ctx) noexcept {
  (void)ctx;
  // cuda.h (CUstreamCaptureMode): under CU_STREAM_CAPTURE_MODE_GLOBAL (the default), "if the local thread
  // has an ongoing capture sequence that was not initiated with CU_STREAM_CAPTURE_MODE_RELAXED ... or if
  // any other thread has a concurrent capture sequence initiated with CU_STREAM_CAPTURE_MODE_GLOBAL,
  // this thread is prohibited from potentially unsafe API calls" (cuda.h 3074:
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); the captures concerned are invalidated.
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  bool refused = false;
  const auto me = std::this_thread::get_id();
  for (Stream* s : d.streams) {
    if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
    const bool mine = s->capture_thread == me && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool global = s->capture_thread != me && s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (mine || global) {
      invalidate(s);
      refused = true;
    }
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

namespace {

// A call that waits for `s` (or queries it) while it captures: not allowed, and the capture is lost.
CUresult capturing_refusal(Stream* s) {
  std::lock_guard lk(Driver::get().mu);
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  invalidate(s);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// --- streams -------------------------------------------------------------------------------------------

CUresult StreamCreate(CUstream* out, unsigned flags) {
  CUEMU_ENTER_CTX(ctx);
  if (out == nullptr || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING))
    return CUDA_ERROR_INVALID_VALUE;
  auto s = std::make_unique<Stream>();
  s->ctx = ctx;
  s->flags = flags;
  Driver& d = Driver::get();
  // Everything that may throw (Guarded: CUDA_ERROR_OUT_OF_MEMORY) before the worker starts, so that a
  // failure leaves no stream behind: the lists first, the thread last, undone if it cannot start.
  {
    std::lock_guard lk(d.mu);
    ctx->streams.reserve(ctx->streams.size() + 1);
    d.streams.insert(s.get());
    ctx->streams.push_back(s.get());
  }
  try {
    start(s.get());
  } catch (...) {
    std::lock_guard lk(d.mu);
    d.streams.erase(s.get());
    std::erase(ctx->streams, s.get());
    throw;
  }
  *out = reinterpret_cast<CUstream>(s.release());
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamCreate", 2000, StreamCreate);

CUresult StreamDestroy(CUstream stream) {
  CUEMU_ENTER();
  auto* s = reinterpret_cast<Stream*>(stream);
  Driver& d = Driver::get();
  {
    std::lock_guard lk(d.mu);
    // cuda.h 15800: "In case the device is still doing work in the stream hStream when cuStreamDestroy()
    // is called, the function will return immediately and the resources ... will be released
    // automatically once the device has completed all work". The NULL stream cannot be destroyed.
    if (stream == nullptr || d.streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
    d.streams.erase(s);
    std::erase(s->ctx->streams, s);
  }
  retire(s);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamDestroy", 4000, StreamDestroy);

CUresult StreamSynchronize(CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (const CUresult r = capturing_refusal(s); r != CUDA_SUCCESS) return r;
  if (s->legacy) {
    if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  }
  wait_idle(s);
  return Driver::get().sticky_error();  // \notefnerr: errors of earlier asynchronous work
}
CUEMU_EXPORT("cuStreamSynchronize", 2000, StreamSynchronize);

CUresult StreamQuery(CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (const CUresult r = capturing_refusal(s); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard lk(s->mu);
    if (s->completed != s->enqueued) return CUDA_ERROR_NOT_READY;
  }
  return Driver::get().sticky_error();  // not under the lock: it may wait for device work to end
}
CUEMU_EXPORT("cuStreamQuery", 2000, StreamQuery);

Event* event_of(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  std::lock_guard lk(Driver::get().mu);
  return Driver::get().events.count(ev) != 0 ? ev : nullptr;
}

CUresult StreamWaitEvent(CUstream stream, CUevent event, unsigned flags) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  Event* e = event_of(event);
  // cuda.h 15233-15268: "hEvent may be from a different context or device than hStream";
  // CU_EVENT_WAIT_EXTERNAL "is invalid outside of stream capture".
  if (s == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t seq = 0;
  {
    std::lock_guard lk(e->mu);
    seq = e->recorded;  // "all work captured in hEvent" at the time of this call
  }
  Op op;
  op.waits_for = e;
  op.event_seq = seq;
  return enqueue(s, std::move(op));
}
CUEMU_EXPORT("cuStreamWaitEvent", 3020, StreamWaitEvent);

// --- events --------------------------------------------------------------------------------------------

CUresult EventCreate(CUevent* out, unsigned flags) {
  CUEMU_ENTER_CTX(ctx);
  // cuda.h 15910-15946: valid flags are DEFAULT, BLOCKING_SYNC, DISABLE_TIMING and INTERPROCESS, which
  // "must be specified along with CU_EVENT_DISABLE_TIMING".
  constexpr unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (out == nullptr || (flags & ~known) != 0 ||
      ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto e = std::make_unique<Event>();
  e->flags = flags;
  e->ctx = ctx;
  std::lock_guard lk(Driver::get().mu);
  Driver::get().events.insert(e.get());  // may throw (Guarded: CUDA_ERROR_OUT_OF_MEMORY), leaving nothing
  *out = reinterpret_cast<CUevent>(e.release());
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuEventCreate", 2000, EventCreate);

CUresult EventDestroy(CUevent event) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h 16106-16131: "An event may be destroyed before it is complete ... any associated resources
  // will automatically be released asynchronously at completion." (The object is kept for the ops
  // that still name it.)
  d.destroyed_events.reserve(d.destroyed_events.size() + 1);  // the push_back below cannot fail
  if (d.events.erase(reinterpret_cast<Event*>(event)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  d.destroyed_events.push_back(reinterpret_cast<Event*>(event));
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuEventDestroy", 4000, EventDestroy);

CUresult EventRecord(CUevent event, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Event* e = event_of(event);
  Stream* s = resolve_stream(stream, ctx);
  // cuda.h 15953: "hEvent and hStream must be from the same context otherwise CUDA_ERROR_INVALID_HANDLE".
  if (e == nullptr || s == nullptr || e->ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
  bool capturing = false;
  {
    std::lock_guard lk(Driver::get().mu);
    capturing = s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  if (capturing) {  // a record node: the event records when the graph runs
    {
      std::lock_guard lk(e->mu);
      e->captured = true;
    }
    Op node;
    node.run = [e] {
      {
        std::lock_guard lk(e->mu);
        e->time_ms = now_ms();
        e->ever_recorded = true;
      }
      e->cv.notify_all();
      return CUDA_SUCCESS;
    };
    node.bookkeeping = true;
    return enqueue(s, std::move(node));
  }
  std::uint64_t seq = 0;
  bool was_recorded = false, was_captured = false;
  {
    std::lock_guard lk(e->mu);
    seq = ++e->recorded;
    was_recorded = std::exchange(e->ever_recorded, true);
    was_captured = std::exchange(e->captured, false);
  }
  Op record;
  record.run = [e, seq] {
    {
      std::lock_guard lk(e->mu);
      e->completed = std::max(e->completed, seq);
      e->time_ms = now_ms();
    }
    e->cv.notify_all();
    return CUDA_SUCCESS;
  };
  record.bookkeeping = true;
  const CUresult r = enqueue(s, std::move(record));
  if (r != CUDA_SUCCESS) {
    // Refused: the event is as it was (a record no op will complete would leave its waiters hanging).
    // A record made meanwhile by another thread supersedes this one, and completes its waiters.
    std::lock_guard lk(e->mu);
    if (e->recorded == seq) {
      --e->recorded;
      e->ever_recorded = was_recorded;
      e->captured = was_captured;
    }
  }
  return r;
}
CUEMU_EXPORT("cuEventRecord", 2000, EventRecord);

CUresult EventQuery(CUevent event) {
  CUEMU_ENTER();
  Event* e = event_of(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // cuda.h 16040-16071: "CUDA_SUCCESS if all captured work has been completed, or CUDA_ERROR_NOT_READY
  // if any captured work is incomplete"; a never-recorded event "represents an empty set of work".
  {
    std::lock_guard lk(e->mu);
    // cuda.h 3112 (CUDA_ERROR_CAPTURED_EVENT): "the operation is not permitted on an event which was
    // last recorded in a capturing stream".
    if (e->captured) return CUDA_ERROR_CAPTURED_EVENT;
    if (e->completed < e->recorded) return CUDA_ERROR_NOT_READY;
  }
  return Driver::get().sticky_error();  // not under the lock: it may wait for device work to end
}
CUEMU_EXPORT("cuEventQuery", 2000, EventQuery);

CUresult EventSynchronize(CUevent event) {
  CUEMU_ENTER();
  Event* e = event_of(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::uint64_t seq = 0;
  {
    std::lock_guard lk(e->mu);
    if (e->captured) return CUDA_ERROR_CAPTURED_EVENT;
    seq = e->recorded;
  }
  // cuda.h 16080-16102: with CU_EVENT_BLOCKING_SYNC the thread "will block until the event has actually
  // been completed by the device. If the CU_EVENT_BLOCKING_SYNC flag has not been set, then the CPU
  // thread will busy-wait". The emulator does both: it blocks, or spins a core (yielding).
  if ((e->flags & CU_EVENT_BLOCKING_SYNC) != 0) {
    std::unique_lock lk(e->mu);
    e->cv.wait(lk, [&] { return e->completed >= seq; });
  } else {
    for (;;) {
      {
        std::lock_guard lk(e->mu);
        if (e->completed >= seq) break;
      }
      std::this_thread::yield();
    }
  }
  return Driver::get().sticky_error();
}
CUEMU_EXPORT("cuEventSynchronize", 2000, EventSynchronize);

CUresult EventElapsedTime(float* ms, CUevent start, CUevent end) {
  CUEMU_ENTER();
  Event* a = event_of(start);
  Event* b = event_of(end);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // cuda.h 16143-16179: "If cuEventRecord() has not been called on either event then
  // CUDA_ERROR_INVALID_HANDLE is returned. If cuEventRecord() has been called on both events but one or
  // both of them has not yet been completed ... CUDA_ERROR_NOT_READY is returned. If either event was
  // created with the CU_EVENT_DISABLE_TIMING flag, then this function will return
  // CUDA_ERROR_INVALID_HANDLE."
  if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  std::unique_lock la(a->mu, std::defer_lock);
  std::unique_lock lb(b->mu, std::defer_lock);
  if (a == b) {
    la.lock();
  } else {
    std::lock(la, lb);  // (a, b) and (b, a) at once must not deadlock
  }
  if (!a->ever_recorded || !b->ever_recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (a->completed < a->recorded || b->completed < b->recorded) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuEventElapsedTime", 2000, EventElapsedTime);
CUEMU_EXPORT("cuEventElapsedTime", 12080, EventElapsedTime);

// --- copies --------------------------------------------------------------------------------------------

// At the call: the device range must be device memory the driver knows (a reservation or managed
// memory), else CUDA_ERROR_INVALID_VALUE. When the copy runs: every byte must be mapped with access for
// the stream's device, else the copy faults: CUDA_ERROR_ILLEGAL_ADDRESS, sticky for the process.
bool known_device_range(CUdeviceptr p, std::size_t n) {
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  return d.reservation_of(p, n) != nullptr || d.managed_of(static_cast<std::uintptr_t>(p), n) != nullptr;
}

enum class Dir : std::uint8_t { h2d, d2h, d2d };

// One side of a copy as spans (under Driver::mu): host memory as it is, device memory translated for
// `dev`. False, with the fault reported as `what`, where the device cannot reach it.
bool side_spans(Driver& d, bool device, CUdeviceptr at, std::size_t len, const Device* dev, bool write,
                const char* what, std::vector<Span>* out) {
  if (!device) {
    out->push_back({reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(at)), len});
    return true;
  }
  if (d.translate(at, len, dev, write, out)) return true;
  d.report_fault(what, at, len, dev, write);
  return false;
}

// Both sides of a copy as runs of spans (of the same total length): copies the overlap of the current
// span of each.
void copy_spans(const std::vector<Span>& to, const std::vector<Span>& from) {
  std::size_t i = 0, j = 0, oi = 0, oj = 0;
  while (i < to.size() && j < from.size()) {
    const std::size_t n = std::min(to[i].len - oi, from[j].len - oj);
    std::memmove(to[i].ptr + oi, from[j].ptr + oj, n);
    oi += n;
    oj += n;
    if (oi == to[i].len) ++i, oi = 0;
    if (oj == from[j].len) ++j, oj = 0;
  }
}

// A copy queued on `stream` (of the current context), each device side translated for the device given
// (a peer copy's sides are its two contexts' devices; null: the current context's).
CUresult copy_async(Dir dir, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream,
                    const Device* dst_dev = nullptr, const Device* src_dev = nullptr) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (dir != Dir::d2h && !known_device_range(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (dir != Dir::h2d && !known_device_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  const Device* to_dev = dst_dev != nullptr ? dst_dev : ctx->device;
  const Device* from_dev = src_dev != nullptr ? src_dev : ctx->device;
  return enqueue(s, [dir, dst, src, bytes, to_dev, from_dev] {
    Driver& d = Driver::get();
    std::lock_guard lk(d.mu);  // mappings cannot change under the copy
    std::vector<Span> to, from;
    if (!side_spans(d, dir != Dir::d2h, dst, bytes, to_dev, true, "a copy to", &to) ||
        !side_spans(d, dir != Dir::h2d, src, bytes, from_dev, false, "a copy from", &from))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    copy_spans(to, from);
    return CUDA_SUCCESS;
  });
}

CUresult MemcpyHtoDAsync(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
  return copy_async(Dir::h2d, dst, reinterpret_cast<CUdeviceptr>(src), bytes, stream);
}
CUEMU_EXPORT("cuMemcpyHtoDAsync", 3020, MemcpyHtoDAsync);

CUresult MemcpyDtoHAsync(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  return copy_async(Dir::d2h, reinterpret_cast<CUdeviceptr>(dst), src, bytes, stream);
}
CUEMU_EXPORT("cuMemcpyDtoHAsync", 3020, MemcpyDtoHAsync);

CUresult MemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  return copy_async(Dir::d2d, dst, src, bytes, stream);
}
CUEMU_EXPORT("cuMemcpyDtoDAsync", 3020, MemcpyDtoDAsync);

// --- 2D and 3D copies ---------------------------------------------------------------------------------------
// cuda.h (cuMemcpy2D, cuMemcpy2DUnaligned, cuMemcpy2DAsync, cuMemcpy3D, cuMemcpy3DAsync): each side is host
// memory (CU_MEMORYTYPE_HOST: srcHost), device memory (CU_MEMORYTYPE_DEVICE: srcDevice) or a unified
// address (CU_MEMORYTYPE_UNIFIED: srcDevice, the kind inferred as for cuMemcpy); "CUdeviceptr Start =
// srcDevice+(srcZ*srcHeight+srcY)*srcPitch+srcXInBytes" (2D: no Z term); "srcPitch must be greater than or
// equal to WidthInBytes + srcXInBytes", "srcHeight must be greater than or equal to Height + srcY" (3D),
// likewise for dst; "The srcLOD and dstLOD members of the CUDA_MEMCPY3D structure must be set to 0".
// CUDA arrays (CU_MEMORYTYPE_ARRAY) are not emulated: CUDA_ERROR_NOT_SUPPORTED. The emulator reports no
// CU_DEVICE_ATTRIBUTE_MAX_PITCH, so no pitch is too large, and the restriction cuMemcpy2D "may" put on
// intra-device pitches not computed by cuMemAllocPitch is not imposed.
struct Box {
  std::size_t width = 0, height = 0, depth = 0;
};
struct Side {
  bool device = false;
  std::uintptr_t start = 0;  // the first byte copied
  std::size_t pitch = 0, slice = 0;
};

// One side from its descriptor fields; CUDA_SUCCESS or the error.
CUresult make_side(CUmemorytype type, const void* host, CUdeviceptr device, std::size_t x, std::size_t y, std::size_t z,
                   std::size_t pitch, std::size_t height, const Box& box, Side* out) {
  if (type == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
  if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
    return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t base =
      type == CU_MEMORYTYPE_HOST ? reinterpret_cast<std::uintptr_t>(host) : static_cast<std::uintptr_t>(device);
  if (base == 0 || pitch < box.width || x > pitch - box.width) return CUDA_ERROR_INVALID_VALUE;
  if (box.depth > 1 && (height < box.height || y > height - box.height)) return CUDA_ERROR_INVALID_VALUE;
  // start = base + (z * height + y) * pitch + x, and the extent from the first byte copied to the last,
  // none of which may wrap around the address space.
  std::size_t slice = 0, row = 0, offset = 0, extent = 0, last_slice = 0, last_row = 0;
  std::uintptr_t start = 0;
  if (__builtin_mul_overflow(pitch, height, &slice) || __builtin_mul_overflow(z, slice, &offset) ||
      __builtin_mul_overflow(y, pitch, &row) || __builtin_add_overflow(offset, row, &offset) ||
      __builtin_add_overflow(offset, x, &offset) || __builtin_add_overflow(base, offset, &start) ||
      __builtin_mul_overflow(box.depth - 1, slice, &last_slice) ||
      __builtin_mul_overflow(box.height - 1, pitch, &last_row) ||
      __builtin_add_overflow(last_slice, last_row, &extent) || __builtin_add_overflow(extent, box.width, &extent) ||
      start + extent < start) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->pitch = pitch;
  out->slice = slice;
  out->start = start;
  // Every byte from the first to the last copied must be what the side's type says (a unified address
  // range that is partly device memory is neither).
  const bool known = known_device_range(start, extent);
  if (type == CU_MEMORYTYPE_DEVICE && !known) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_MEMORYTYPE_UNIFIED && !known && known_device_range(start, 1)) return CUDA_ERROR_INVALID_VALUE;
  out->device = type == CU_MEMORYTYPE_DEVICE || (type == CU_MEMORYTYPE_UNIFIED && known);
  return CUDA_SUCCESS;
}

CUresult copy_box_async(const Side& dst, const Side& src, const Box& box, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const Device* dev = ctx->device;
  return enqueue(s, [dst, src, box, dev] {
    Driver& d = Driver::get();
    std::lock_guard lk(d.mu);  // mappings cannot change under the copy
    std::vector<Span> to, from;
    for (std::size_t z = 0; z < box.depth; ++z) {
      for (std::size_t y = 0; y < box.height; ++y) {
        const std::uintptr_t t = dst.start + z * dst.slice + y * dst.pitch;
        const std::uintptr_t f = src.start + z * src.slice + y * src.pitch;
        to.clear();
        from.clear();
        if (!side_spans(d, dst.device, t, box.width, dev, true, "a 2D/3D copy to", &to) ||
            !side_spans(d, src.device, f, box.width, dev, false, "a 2D/3D copy from", &from))
          return CUDA_ERROR_ILLEGAL_ADDRESS;
        copy_spans(to, from);
      }
    }
    return CUDA_SUCCESS;
  });
}

CUresult copy_3d(const CUDA_MEMCPY3D* c, CUstream stream, bool sync) {
  CUEMU_ENTER_CTX(ctx);
  if (c == nullptr || c->srcLOD != 0 || c->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  if (sync) {
    if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  }
  const Box box{c->WidthInBytes, c->Height, c->Depth};
  if (box.width == 0 || box.height == 0 || box.depth == 0) return CUDA_SUCCESS;
  Side dst, src;
  if (const CUresult r = make_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ,
                                   c->dstPitch, c->dstHeight, box, &dst);
      r != CUDA_SUCCESS)
    return r;
  if (const CUresult r = make_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ,
                                   c->srcPitch, c->srcHeight, box, &src);
      r != CUDA_SUCCESS)
    return r;
  if (const CUresult r = copy_box_async(dst, src, box, sync ? nullptr : stream); r != CUDA_SUCCESS) return r;
  if (!sync) return CUDA_SUCCESS;
  wait_idle(ctx->legacy.get());
  return Driver::get().sticky_error();
}
// A 2D copy is a 3D copy of one slice (its height the copy's: no Z term, no slice stride used).
CUresult copy_2d(const CUDA_MEMCPY2D* c, CUstream stream, bool sync) {
  if (c == nullptr) return copy_3d(nullptr, stream, sync);
  CUDA_MEMCPY3D t{};
  t.srcXInBytes = c->srcXInBytes;
  t.srcY = c->srcY;
  t.srcMemoryType = c->srcMemoryType;
  t.srcHost = c->srcHost;
  t.srcDevice = c->srcDevice;
  t.srcArray = c->srcArray;
  t.srcPitch = c->srcPitch;
  t.srcHeight = c->Height;
  t.dstXInBytes = c->dstXInBytes;
  t.dstY = c->dstY;
  t.dstMemoryType = c->dstMemoryType;
  t.dstHost = c->dstHost;
  t.dstDevice = c->dstDevice;
  t.dstArray = c->dstArray;
  t.dstPitch = c->dstPitch;
  t.dstHeight = c->Height;
  t.WidthInBytes = c->WidthInBytes;
  t.Height = c->Height;
  t.Depth = 1;
  return copy_3d(&t, stream, sync);
}
CUresult Memcpy2D(const CUDA_MEMCPY2D* c) { return copy_2d(c, nullptr, true); }
CUEMU_EXPORT("cuMemcpy2D", 3020, Memcpy2D);
CUEMU_EXPORT("cuMemcpy2DUnaligned", 3020, Memcpy2D);
CUresult Memcpy2DAsync(const CUDA_MEMCPY2D* c, CUstream stream) { return copy_2d(c, stream, false); }
CUEMU_EXPORT("cuMemcpy2DAsync", 3020, Memcpy2DAsync);
CUresult Memcpy3D(const CUDA_MEMCPY3D* c) { return copy_3d(c, nullptr, true); }
CUEMU_EXPORT("cuMemcpy3D", 3020, Memcpy3D);
CUresult Memcpy3DAsync(const CUDA_MEMCPY3D* c, CUstream stream) { return copy_3d(c, stream, false); }
CUEMU_EXPORT("cuMemcpy3DAsync", 3020, Memcpy3DAsync);

// cuda.h (cuMemsetD8Async, D16, D32): "Sets the memory range of N 8-bit (16-bit, 32-bit) values to the
// specified value", in stream order; "The dstDevice pointer must be two byte aligned" (four byte for
// D32); the device must have access, as for a copy.
template <class T>
CUresult memset_async(CUdeviceptr dst, T value, std::size_t n, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (n > SIZE_MAX / sizeof(T) || dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t bytes = n * sizeof(T);
  if (dst == 0 || !known_device_range(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  const Device* dev = ctx->device;
  return enqueue(s, [dst, value, bytes, dev] {
    Driver& d = Driver::get();
    std::lock_guard lk(d.mu);
    std::vector<Span> to;
    if (!d.translate(dst, bytes, dev, true, &to)) {
      d.report_fault("a memset of", dst, bytes, dev, true);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::size_t at = 0;  // the value's bytes continue across spans (each a whole number of elements)
    for (const Span& span : to) {
      for (std::size_t i = 0; i < span.len; ++i, ++at) {
        span.ptr[i] = static_cast<std::byte>(value >> (8 * (at % sizeof(T))));
      }
    }
    return CUDA_SUCCESS;
  });
}
CUresult MemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t n, CUstream stream) {
  return memset_async(dst, value, n, stream);
}
CUEMU_EXPORT("cuMemsetD8Async", 3020, MemsetD8Async);
CUresult MemsetD16Async(CUdeviceptr dst, unsigned short value, std::size_t n, CUstream stream) {
  return memset_async(dst, value, n, stream);
}
CUEMU_EXPORT("cuMemsetD16Async", 3020, MemsetD16Async);
CUresult MemsetD32Async(CUdeviceptr dst, unsigned value, std::size_t n, CUstream stream) {
  return memset_async(dst, value, n, stream);
}
CUEMU_EXPORT("cuMemsetD32Async", 3020, MemsetD32Async);

// The "synchronous" memsets run on the legacy stream and, for device memory, are asynchronous with
// respect to the host (the runtime API's "API synchronization behavior": memset).
CUresult MemsetD8(CUdeviceptr dst, unsigned char value, std::size_t n) { return MemsetD8Async(dst, value, n, nullptr); }
CUEMU_EXPORT("cuMemsetD8", 3020, MemsetD8);
CUresult MemsetD16(CUdeviceptr dst, unsigned short value, std::size_t n) {
  return MemsetD16Async(dst, value, n, nullptr);
}
CUEMU_EXPORT("cuMemsetD16", 3020, MemsetD16);
CUresult MemsetD32(CUdeviceptr dst, unsigned value, std::size_t n) { return MemsetD32Async(dst, value, n, nullptr); }
CUEMU_EXPORT("cuMemsetD32", 3020, MemsetD32);

// The synchronous copies run on the legacy stream and wait; not allowed during capture.
CUresult copy_sync(Dir dir, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  CUEMU_ENTER_CTX(ctx);
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult r = copy_async(dir, dst, src, bytes, nullptr); r != CUDA_SUCCESS) return r;
  wait_idle(ctx->legacy.get());
  return Driver::get().sticky_error();
}
CUresult MemcpyHtoD(CUdeviceptr dst, const void* src, std::size_t bytes) {
  return copy_sync(Dir::h2d, dst, reinterpret_cast<CUdeviceptr>(src), bytes);
}
CUEMU_EXPORT("cuMemcpyHtoD", 3020, MemcpyHtoD);
CUresult MemcpyDtoH(void* dst, CUdeviceptr src, std::size_t bytes) {
  return copy_sync(Dir::d2h, reinterpret_cast<CUdeviceptr>(dst), src, bytes);
}
CUEMU_EXPORT("cuMemcpyDtoH", 3020, MemcpyDtoH);
CUresult MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  return copy_sync(Dir::d2d, dst, src, bytes);
}
CUEMU_EXPORT("cuMemcpyDtoD", 3020, MemcpyDtoD);

// cuda.h (cuMemcpy, cuMemcpyAsync): "uses the unified virtual addressing to infer the type of the
// transfer": device memory is what the driver allocated (reservations, managed memory); anything else is
// host memory.
Dir unified_direction(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, bool* host_to_host) {
  const bool d = known_device_range(dst, bytes), s = known_device_range(src, bytes);
  *host_to_host = !d && !s;
  return d && s ? Dir::d2d : d ? Dir::h2d : Dir::d2h;
}
CUresult MemcpyAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  bool host_only = false;
  const Dir dir = unified_direction(dst, src, bytes, &host_only);
  if (host_only) return CUDA_ERROR_INVALID_VALUE;  // the emulator queues no host-to-host copies
  return copy_async(dir, dst, src, bytes, stream);
}
CUEMU_EXPORT("cuMemcpyAsync", 4000, MemcpyAsync);
CUresult Memcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  bool host_only = false;
  const Dir dir = unified_direction(dst, src, bytes, &host_only);
  if (host_only) return CUDA_ERROR_INVALID_VALUE;
  return copy_sync(dir, dst, src, bytes);
}
CUEMU_EXPORT("cuMemcpy", 4000, Memcpy);

// cuda.h (cuMemcpyPeer, cuMemcpyPeerAsync): device memory of one context to device memory of another,
// each side read or written with its own context's device's rights; queued on `stream` of the current
// context.
CUresult peer_copy(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t bytes,
                   CUstream stream, bool sync) {
  CUEMU_ENTER_CTX(ctx);
  const Device* dst_dev = nullptr;
  const Device* src_dev = nullptr;
  {
    Driver& d = Driver::get();
    std::lock_guard lk(d.mu);
    auto* a = reinterpret_cast<Context*>(dst_ctx);
    auto* b = reinterpret_cast<Context*>(src_ctx);
    if (d.contexts.count(a) == 0 || d.contexts.count(b) == 0 || a->destroyed || b->destroyed) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    dst_dev = a->device;
    src_dev = b->device;
  }
  if (sync) {
    if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  }
  if (const CUresult r = copy_async(Dir::d2d, dst, src, bytes, sync ? nullptr : stream, dst_dev, src_dev);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (!sync) return CUDA_SUCCESS;
  wait_idle(ctx->legacy.get());
  return Driver::get().sticky_error();
}
CUresult MemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t bytes) {
  return peer_copy(dst, dst_ctx, src, src_ctx, bytes, nullptr, true);
}
CUEMU_EXPORT("cuMemcpyPeer", 4000, MemcpyPeer);
CUresult MemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t bytes,
                         CUstream stream) {
  return peer_copy(dst, dst_ctx, src, src_ctx, bytes, stream, false);
}
CUEMU_EXPORT("cuMemcpyPeerAsync", 4000, MemcpyPeerAsync);

// --- host functions ------------------------------------------------------------------------------------

CUresult LaunchHostFunc(CUstream stream, CUhostFn fn, void* user) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h 18060-18095 (cuLaunchHostFunc): runs after the stream's earlier work and blocks its later
  // work; it runs on a driver thread (here the stream's worker), where every driver call is refused.
  return enqueue(s, [fn, user] {
    Driver::get().leave_work();
    in_host_callback() = true;
    fn(user);
    in_host_callback() = false;
    Driver::get().reenter_work();
    return CUDA_SUCCESS;
  });
}
CUEMU_EXPORT("cuLaunchHostFunc", 10000, LaunchHostFunc);

// --- stream capture and graphs -------------------------------------------------------------------------

CUresult StreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // cuda.h 15347-15381 (cuStreamBeginCapture): "Capture may not be initiated if stream is
  // CU_STREAM_LEGACY ... it may only be initiated if the stream is not already in capture mode"; the
  // documented error for both is CUDA_ERROR_INVALID_VALUE.
  if (s->legacy) return CUDA_ERROR_INVALID_VALUE;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_INVALID_VALUE;
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->capture_mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->capture_id = d.next_capture++;
  s->graph = new Graph;
  d.graphs.insert(s->graph);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamBeginCapture", 10010, StreamBeginCapture);

CUresult StreamEndCapture(CUstream stream, CUgraph* graph) {
  CUEMU_ENTER();
  Context* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr || graph == nullptr) return s == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h (cuStreamEndCapture): "If capture was invalidated, due to a violation of the rules of stream
  // capture, then a NULL graph will be returned"; CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD "if the capture
  // was not initiated in this thread" (unless relaxed); a stream that does not capture is
  // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (cuda.h 3088: "the capture was not initiated in this stream").
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && s->capture_thread != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  const bool invalid = s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  for (Event* e : d.events) {
    std::lock_guard el(e->mu);
    e->captured = false;
  }
  Graph* g = s->graph;
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  s->graph = nullptr;
  if (invalid) {
    d.graphs.erase(g);
    delete g;
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamEndCapture", 10000, StreamEndCapture);

CUresult StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(Driver::get().mu);
  if (s->legacy) {  // the legacy stream "captures" when a blocking stream of its context does
    bool any = false;
    for (Stream* b : ctx->streams) any = any || (blocking(b) && b->capture != CU_STREAM_CAPTURE_STATUS_NONE);
    if (any) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  *status = s->capture;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamIsCapturing", 10000, StreamIsCapturing);

CUresult StreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                              const CUgraphNode** deps, const CUgraphEdgeData** edges, std::size_t* ndeps) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(Driver::get().mu);
  *status = s->capture;
  if (id != nullptr) *id = s->capture_id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(s->graph);
  if (deps != nullptr) *deps = nullptr;  // the emulator's graphs are sequences: no dependency nodes
  if (edges != nullptr) *edges = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuStreamGetCaptureInfo", 12030, StreamGetCaptureInfo);

CUresult instantiate(CUgraphExec* exec, CUgraph graph) {
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (exec == nullptr || d.graphs.count(g) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* x = new GraphExec{g->ops};
  d.execs.insert(x);
  *exec = reinterpret_cast<CUgraphExec>(x);
  return CUDA_SUCCESS;
}

CUresult GraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, std::size_t log_size) {
  CUEMU_ENTER();
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return instantiate(exec, graph);
}
CUEMU_EXPORT("cuGraphInstantiate", 11000, GraphInstantiate);

CUresult GraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  CUEMU_ENTER();
  if (flags != 0) return CUDA_ERROR_NOT_SUPPORTED;  // auto-free, upload, device launch: not emulated
  return instantiate(exec, graph);
}
CUEMU_EXPORT("cuGraphInstantiateWithFlags", 11040, GraphInstantiateWithFlags);

CUresult GraphLaunch(CUgraphExec exec, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<Op> ops;
  {
    std::lock_guard lk(Driver::get().mu);
    auto* x = reinterpret_cast<GraphExec*>(exec);
    if (Driver::get().execs.count(x) == 0) return CUDA_ERROR_INVALID_VALUE;
    ops = x->ops;
  }
  for (auto& op : ops) {
    if (const CUresult r = enqueue(s, op); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuGraphLaunch", 10000, GraphLaunch);

// Deletes `p` if it is one of `live` (graphs and executable graphs: work already queued holds its own
// copies of their operations).
template <class T>
CUresult destroy_one(std::set<T*> Driver::*live, T* p) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if ((d.*live).erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete p;
  return CUDA_SUCCESS;
}

CUresult GraphDestroy(CUgraph graph) { return destroy_one(&Driver::graphs, reinterpret_cast<Graph*>(graph)); }
CUEMU_EXPORT("cuGraphDestroy", 10000, GraphDestroy);

CUresult GraphExecDestroy(CUgraphExec exec) { return destroy_one(&Driver::execs, reinterpret_cast<GraphExec*>(exec)); }
CUEMU_EXPORT("cuGraphExecDestroy", 10000, GraphExecDestroy);

}  // namespace

}  // namespace cuemu
