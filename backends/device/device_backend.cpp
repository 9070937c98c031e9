#include "backends/device/device_backend.hpp"

#include "backends/device/registry.hpp"
#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

#include <cstdio>

namespace tvmm::device {

const char* errc_name(Errc e) noexcept {
  switch (e) {
    case Errc::ok: return "ok";
    case Errc::not_ready: return "not_ready";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::invalid_value: return "invalid_value";
    case Errc::not_mapped: return "not_mapped";
    case Errc::already_mapped: return "already_mapped";
    case Errc::not_supported: return "not_supported";
    case Errc::system_error: return "system_error";
    case Errc::driver_error: return "driver_error";
    case Errc::device_lost: return "device_lost";
  }
  return "unknown";
}

DeviceBackend::~DeviceBackend() = default;

Status DeviceBackend::noted(Status s) noexcept {
  if (s.code == Errc::device_lost && !lost_.exchange(true)) {
    std::string what;
    try {
      what = describe(s);
    } catch (...) {
      what = errc_name(s.code);
    }
    std::fprintf(stderr,
                 "tvmm: the %s device failed for good (%s): from now on every call to it fails, and only restarting "
                 "the process makes it usable again. tvmm frees what it can without it; data on the device is lost\n",
                 props_.name.c_str(), what.c_str());
  }
  return s;
}

std::string DeviceBackend::describe(const Status& s) const { return errc_name(s.code); }

void DeviceBackend::warn_failed(const Status& s, const char* what) const noexcept {
  if (s.ok() || lost()) return;
  std::string why;
  try {
    why = describe(s);
  } catch (...) {
    why = errc_name(s.code);
  }
  std::fprintf(stderr, "tvmm: %s failed: %s\n", what, why.c_str());
}

BackendCounters DeviceBackend::counters() const noexcept {
  BackendCounters c;
  // The mapping calls are counted once, with their time (Timed).
  c.maps = times_[static_cast<std::size_t>(TimedCall::map)].calls.load(std::memory_order_relaxed);
  c.unmaps = times_[static_cast<std::size_t>(TimedCall::unmap)].calls.load(std::memory_order_relaxed);
  c.set_access = times_[static_cast<std::size_t>(TimedCall::set_access)].calls.load(std::memory_order_relaxed);
  c.copies = copies_.load(std::memory_order_relaxed);
  c.copy_bytes = copy_bytes_.load(std::memory_order_relaxed);
  c.chunks_created = chunks_.load(std::memory_order_relaxed);
  return c;
}

namespace {
constexpr auto relaxed = std::memory_order_relaxed;
Status invalid() noexcept { return Status::fail(Errc::invalid_value); }
}  // namespace

class DeviceBackend::Timed {
 public:
  Timed(DeviceBackend& b, TimedCall c) noexcept : t_(b.times_[static_cast<std::size_t>(c)]) {}
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;
  ~Timed() {
    const auto took = std::chrono::steady_clock::now() - start_;
    t_.calls.fetch_add(1, relaxed);
    t_.ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
                    relaxed);
  }

 private:
  AtomicCallTime& t_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::array<CallTime, kTimedCalls> DeviceBackend::call_times() const noexcept {
  std::array<CallTime, kTimedCalls> out{};
  for (std::size_t i = 0; i < kTimedCalls; ++i) out[i] = {times_[i].calls.load(relaxed), times_[i].ns.load(relaxed)};
  return out;
}

Status DeviceBackend::reserve(std::size_t bytes, DevPtr* out) {
  if (bytes == 0 || !aligned(bytes) || out == nullptr) return invalid();
  return noted(do_reserve(bytes, out));
}

Status DeviceBackend::release_reservation(DevPtr base, std::size_t bytes) {
  if (base == 0 || bytes == 0 || !aligned(base) || !aligned(bytes)) return invalid();
  return noted(do_release_reservation(base, bytes));
}

Status DeviceBackend::create_chunk(std::size_t bytes, ChunkHandle* out, ChunkLocation where) {
  if (bytes == 0 || !aligned(bytes) || out == nullptr) return invalid();
  if (where == ChunkLocation::host && !props_.host_chunks) return Status::fail(Errc::not_supported);
  if (where == ChunkLocation::host && props_.host_granularity != 0 && bytes % props_.host_granularity != 0) {
    return invalid();
  }
  auto s = noted(do_create_chunk(bytes, where, out));
  if (s.ok()) chunks_.fetch_add(1, relaxed);
  return s;
}

Status DeviceBackend::release_chunk(ChunkHandle chunk) { return noted(do_release_chunk(chunk)); }

Status DeviceBackend::map(DevPtr va, std::size_t bytes, ChunkHandle chunk) {
  if (va == 0 || bytes == 0 || !aligned(va) || !aligned(bytes)) return invalid();
  const Timed timed(*this, TimedCall::map);
  return noted(do_map(va, bytes, chunk));
}

Status DeviceBackend::set_access(DevPtr va, std::size_t bytes) {
  if (va == 0 || bytes == 0 || !aligned(va) || !aligned(bytes)) return invalid();
  const Timed timed(*this, TimedCall::set_access);
  return noted(do_set_access(va, bytes));
}

Status DeviceBackend::unmap(DevPtr va, std::size_t bytes) {
  if (va == 0 || bytes == 0 || !aligned(va) || !aligned(bytes)) return invalid();
  const Timed timed(*this, TimedCall::unmap);
  return noted(do_unmap(va, bytes));
}

Status DeviceBackend::alloc_host(std::size_t bytes, void** out) {
  if (bytes == 0 || out == nullptr) return invalid();
  return noted(do_alloc_host(bytes, out));
}

Status DeviceBackend::free_host(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return invalid();
  return noted(do_free_host(ptr, bytes));
}

Status DeviceBackend::register_host(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return invalid();
  return noted(do_register_host(ptr, bytes));
}

Status DeviceBackend::unregister_host(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return invalid();
  return noted(do_unregister_host(ptr, bytes));
}

Status DeviceBackend::set_worker_cpus(const std::vector<unsigned>& cpus) {
  if (cpus.empty()) return invalid();
  return noted(do_set_worker_cpus(cpus));
}

Status DeviceBackend::alloc_managed(std::size_t bytes, void** out) {
  if (bytes == 0 || out == nullptr) return invalid();
  if (!props_.managed) return Status::fail(Errc::not_supported);
  return noted(do_alloc_managed(bytes, out));
}

Status DeviceBackend::free_managed(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return invalid();
  return noted(do_free_managed(ptr, bytes));
}

Status DeviceBackend::advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) {
  if (ptr == nullptr || bytes == 0) return invalid();
  return noted(do_advise_managed(ptr, bytes, where));
}

Status DeviceBackend::prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) {
  if (ptr == nullptr || bytes == 0 || stream == nullptr) return invalid();
  copies_.fetch_add(1, relaxed);
  copy_bytes_.fetch_add(bytes, relaxed);
  return noted(do_prefetch_managed(ptr, bytes, where, stream));
}

Status DeviceBackend::create_stream(StreamHandle* out) {
  if (out == nullptr) return invalid();
  return noted(do_create_stream(out));
}

Status DeviceBackend::destroy_stream(StreamHandle stream) {
  if (stream == nullptr) return invalid();
  return noted(do_destroy_stream(stream));
}

Status DeviceBackend::memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) {
  if (dst == nullptr || src == nullptr || stream == nullptr) return invalid();
  copies_.fetch_add(1, relaxed);
  copy_bytes_.fetch_add(bytes, relaxed);
  const Timed timed(*this, TimedCall::copy);
  return noted(do_memcpy_async(dst, src, bytes, kind, stream));
}

Status DeviceBackend::copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) {
  if (dst == 0 || src == 0 || bytes == 0 || stream == nullptr) return invalid();
  copies_.fetch_add(1, relaxed);
  copy_bytes_.fetch_add(bytes, relaxed);
  const Timed timed(*this, TimedCall::copy);
  return noted(do_copy_device(dst, src, bytes, bus, stream));
}

Status DeviceBackend::launch_host(StreamHandle stream, HostFn fn, void* user) {
  if (stream == nullptr || fn == nullptr) return invalid();
  const Timed timed(*this, TimedCall::launch);
  return noted(do_launch_host(stream, fn, user));
}

Status DeviceBackend::launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) {
  if (stream == nullptr || duration.count() < 0) return invalid();
  const Timed timed(*this, TimedCall::launch);
  return noted(do_launch_busy(stream, duration));
}

Status DeviceBackend::fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed) {
  if (stream == nullptr || va == 0) return invalid();
  const Timed timed(*this, TimedCall::launch);
  return noted(do_fill(stream, va, bytes, seed));
}

Status DeviceBackend::verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad) {
  if (stream == nullptr || va == 0 || bad == 0) return invalid();
  const Timed timed(*this, TimedCall::launch);
  return noted(do_verify(stream, va, bytes, seed, bad));
}

Status DeviceBackend::synchronize_stream(StreamHandle stream) {
  if (stream == nullptr) return invalid();
  const Timed timed(*this, TimedCall::synchronize);
  return noted(do_synchronize_stream(stream));
}

Status DeviceBackend::synchronize_device() {
  const Timed timed(*this, TimedCall::synchronize);
  return noted(do_synchronize_device());
}

Status DeviceBackend::memory_info(std::size_t* free, std::size_t* total) {
  if (free == nullptr || total == nullptr) return invalid();
  return noted(do_memory_info(free, total));
}

Status DeviceBackend::create_event(EventHandle* out, EventKind kind) {
  if (out == nullptr) return invalid();
  return noted(do_create_event(kind, out));
}

Status DeviceBackend::destroy_event(EventHandle event) {
  if (event == nullptr) return invalid();
  return noted(do_destroy_event(event));
}

Status DeviceBackend::record_event(EventHandle event, StreamHandle stream) {
  if (event == nullptr || stream == nullptr) return invalid();
  const Timed timed(*this, TimedCall::record);
  return noted(do_record_event(event, stream));
}

Status DeviceBackend::stream_wait_event(StreamHandle stream, EventHandle event) {
  if (event == nullptr || stream == nullptr) return invalid();
  const Timed timed(*this, TimedCall::stream_wait);
  return noted(do_stream_wait_event(stream, event));
}

Status DeviceBackend::query_event(EventHandle event) {
  if (event == nullptr) return invalid();
  const Timed timed(*this, TimedCall::query);
  return noted(do_query_event(event));
}

Status DeviceBackend::synchronize_event(EventHandle event) {
  if (event == nullptr) return invalid();
  const Timed timed(*this, TimedCall::synchronize);
  return noted(do_synchronize_event(event));
}

Status DeviceBackend::event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) {
  if (start == nullptr || end == nullptr || out == nullptr) return invalid();
  return noted(do_event_elapsed(start, end, out));
}

std::unique_ptr<DeviceBackend> make_device_backend(const Config& config) {
  if (const DeviceBackendInfo* b = find_device_backend(config.device_backend)) return b->make(config);
  std::string valid;
  for (const auto& b : device_backends()) {
    valid += (valid.empty() ? "\"" : ", \"") + std::string(b.name) + "\" (" + std::string(b.summary) + ")";
  }
  throw config_error("device_backend = \"" + config.device_backend + "\" is not a known device backend; use " + valid);
}

}  // namespace tvmm::device
