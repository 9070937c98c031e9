#include "backends/device/faulty/faulty_device.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace tvmm::device {

namespace {
DeviceProperties faulty_properties(const DeviceBackend& inner) {
  DeviceProperties p = inner.properties();
  p.name = "faulty:" + p.name;
  return p;
}
std::size_t idx(FaultyDevice::Op op) noexcept { return static_cast<std::size_t>(op); }
}  // namespace

FaultyDevice::FaultyDevice(std::unique_ptr<DeviceBackend> inner)
    : DeviceBackend(faulty_properties(*inner)), inner_(std::move(inner)) {}

FaultyDevice::~FaultyDevice() { release_all(); }

void FaultyDevice::fail_once(Op op, Errc err, unsigned skip) {
  std::lock_guard lk(mu_);
  rules_[idx(op)] = Rule{Rule::Mode::once, skip, err};
}

void FaultyDevice::fail_always(Op op, Errc err) {
  std::lock_guard lk(mu_);
  rules_[idx(op)] = Rule{Rule::Mode::always, 0, err};
}

void FaultyDevice::clear() {
  std::lock_guard lk(mu_);
  rules_.fill(Rule{});
}

std::uint64_t FaultyDevice::calls(Op op) const {
  std::lock_guard lk(mu_);
  return (*calls_)[idx(op)];
}

namespace {
std::size_t gate_of(FaultyDevice::Op op) {
  if (op != FaultyDevice::Op::copy_in && op != FaultyDevice::Op::copy_out) {
    throw std::invalid_argument("FaultyDevice: only copy_in and copy_out can be held");
  }
  return op == FaultyDevice::Op::copy_in ? 0 : 1;
}
}  // namespace

void FaultyDevice::hold(Op op) {
  const std::size_t g = gate_of(op);
  std::lock_guard lk(mu_);
  gates_[g].holding = true;
}

void FaultyDevice::release(Op op, std::uint64_t n) {
  const std::size_t g = gate_of(op);
  {
    std::lock_guard lk(mu_);
    gates_[g].allowed = std::min(gates_[g].queued, gates_[g].allowed + n);
  }
  gate_cv_.notify_all();
}

void FaultyDevice::release_all() {
  {
    std::lock_guard lk(mu_);
    for (auto& g : gates_) {
      g.holding = false;
      g.allowed = g.queued;
    }
  }
  gate_cv_.notify_all();
}

std::uint64_t FaultyDevice::held(Op op) const {
  const std::size_t g = gate_of(op);
  std::lock_guard lk(mu_);
  return gates_[g].queued - gates_[g].allowed;
}

void FaultyDevice::wait_ticket(void* ticket) {
  const std::unique_ptr<Ticket> t(static_cast<Ticket*>(ticket));
  std::unique_lock lk(t->self->mu_);
  t->self->gate_cv_.wait(lk, [&] { return t->self->gates_[t->gate].allowed > t->number; });
}

std::uint64_t FaultyDevice::injected() const {
  std::lock_guard lk(mu_);
  return injected_;
}

bool FaultyDevice::should_fail(Op op, Errc* err) {
  std::lock_guard lk(mu_);
  ++(*calls_)[idx(op)];
  Rule& r = rules_[idx(op)];
  switch (r.mode) {
    case Rule::Mode::none: return false;
    case Rule::Mode::once:
      if (r.skip > 0) {
        --r.skip;
        return false;
      }
      r.mode = Rule::Mode::none;
      break;
    case Rule::Mode::always: break;
  }
  *err = r.err;
  ++injected_;
  return true;
}

#define TVMM_FAULT(op)                                                     \
  do {                                                                     \
    Errc injected_err;                                                     \
    if (should_fail(op, &injected_err)) return Status::fail(injected_err); \
  } while (0)

Status FaultyDevice::do_reserve(std::size_t bytes, DevPtr* out) {
  TVMM_FAULT(Op::reserve);
  return inner_->reserve(bytes, out);
}
Status FaultyDevice::do_release_reservation(DevPtr base, std::size_t bytes) {
  return inner_->release_reservation(base, bytes);
}
Status FaultyDevice::do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) {
  TVMM_FAULT(Op::create_chunk);
  return inner_->create_chunk(bytes, out, where);
}
Status FaultyDevice::do_release_chunk(ChunkHandle chunk) { return inner_->release_chunk(chunk); }
Status FaultyDevice::do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) {
  TVMM_FAULT(Op::map);
  return inner_->map(va, bytes, chunk);
}
Status FaultyDevice::do_set_access(DevPtr va, std::size_t bytes) {
  TVMM_FAULT(Op::set_access);
  return inner_->set_access(va, bytes);
}
Status FaultyDevice::do_unmap(DevPtr va, std::size_t bytes) {
  TVMM_FAULT(Op::unmap);
  return inner_->unmap(va, bytes);
}
Status FaultyDevice::do_alloc_host(std::size_t bytes, void** out) { return inner_->alloc_host(bytes, out); }
Status FaultyDevice::do_free_host(void* ptr, std::size_t bytes) { return inner_->free_host(ptr, bytes); }
Status FaultyDevice::do_register_host(void* ptr, std::size_t bytes) { return inner_->register_host(ptr, bytes); }
Status FaultyDevice::do_unregister_host(void* ptr, std::size_t bytes) { return inner_->unregister_host(ptr, bytes); }
Status FaultyDevice::do_set_worker_cpus(const std::vector<unsigned>& cpus) { return inner_->set_worker_cpus(cpus); }
Status FaultyDevice::do_alloc_managed(std::size_t bytes, void** out) { return inner_->alloc_managed(bytes, out); }
Status FaultyDevice::do_free_managed(void* ptr, std::size_t bytes) { return inner_->free_managed(ptr, bytes); }
Status FaultyDevice::do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) {
  return inner_->advise_managed(ptr, bytes, where);
}
Status FaultyDevice::do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) {
  TVMM_FAULT(where == ChunkLocation::device ? Op::copy_in : Op::copy_out);
  return inner_->prefetch_managed(ptr, bytes, where, stream);
}

Status FaultyDevice::do_create_stream(StreamHandle* out) { return inner_->create_stream(out); }
Status FaultyDevice::do_destroy_stream(StreamHandle stream) { return inner_->destroy_stream(stream); }
Status FaultyDevice::do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                                     StreamHandle stream) {
  if (auto s = before_copy(kind, stream); !s.ok()) return s;
  return inner_->memcpy_async(dst, src, bytes, kind, stream);
}
Status FaultyDevice::do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) {
  if (auto s = before_copy(bus, stream); !s.ok()) return s;
  return inner_->copy_device(dst, src, bytes, bus, stream);
}
Status FaultyDevice::before_copy(CopyKind kind, StreamHandle stream) {
  const Op op = kind == CopyKind::host_to_device ? Op::copy_in : Op::copy_out;
  TVMM_FAULT(op);
  const std::size_t g = gate_of(op);
  std::unique_ptr<Ticket> ticket;
  {
    std::lock_guard lk(mu_);
    if (gates_[g].holding) ticket.reset(new Ticket{this, g, gates_[g].queued++});
  }
  if (ticket) {
    // The copy waits behind a host step on its stream until its ticket is released. (If that cannot
    // be queued, the copy fails and its ticket number is skipped by the next release.)
    if (auto st = inner_->launch_host(stream, &FaultyDevice::wait_ticket, ticket.get()); !st.ok()) return st;
    (void)ticket.release();  // wait_ticket owns it now
  }
  return Status::success();
}
Status FaultyDevice::do_launch_host(StreamHandle stream, HostFn fn, void* user) {
  return inner_->launch_host(stream, fn, user);
}
Status FaultyDevice::do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) {
  return inner_->launch_busy(stream, duration);
}
Status FaultyDevice::do_fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed) {
  return inner_->fill(stream, va, bytes, seed);
}
Status FaultyDevice::do_verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad) {
  return inner_->verify(stream, va, bytes, seed, bad);
}
Status FaultyDevice::do_synchronize_stream(StreamHandle stream) {
  TVMM_FAULT(Op::synchronize_stream);
  return inner_->synchronize_stream(stream);
}
Status FaultyDevice::do_synchronize_device() { return inner_->synchronize_device(); }
Status FaultyDevice::do_memory_info(std::size_t* free, std::size_t* total) { return inner_->memory_info(free, total); }
Status FaultyDevice::do_create_event(EventKind kind, EventHandle* out) { return inner_->create_event(out, kind); }
Status FaultyDevice::do_destroy_event(EventHandle event) { return inner_->destroy_event(event); }
Status FaultyDevice::do_record_event(EventHandle event, StreamHandle stream) {
  TVMM_FAULT(Op::record_event);
  return inner_->record_event(event, stream);
}
Status FaultyDevice::do_stream_wait_event(StreamHandle stream, EventHandle event) {
  TVMM_FAULT(Op::stream_wait_event);
  return inner_->stream_wait_event(stream, event);
}
Status FaultyDevice::do_query_event(EventHandle event) {
  TVMM_FAULT(Op::query_event);
  return inner_->query_event(event);
}
Status FaultyDevice::do_synchronize_event(EventHandle event) {
  TVMM_FAULT(Op::synchronize_event);
  return inner_->synchronize_event(event);
}
Status FaultyDevice::do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) {
  return inner_->event_elapsed(start, end, out);
}

#undef TVMM_FAULT

}  // namespace tvmm::device
