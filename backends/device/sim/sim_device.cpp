#include "backends/device/sim/sim_device.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "backends/device/sim/copy_engine.hpp"
#include "backends/device/sim/sim_stream.hpp"
#include "common/physical_memory.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::device {

namespace {

DeviceProperties sim_properties(const SimDeviceConfig& c, std::size_t device_budget) {
  DeviceProperties p;
  p.name = "sim";
  p.granularity = c.granularity;
  const std::size_t want = c.capacity != 0 ? c.capacity : device_budget;
  p.capacity = c.granularity == 0 ? want : (want + c.granularity - 1) / c.granularity * c.granularity;
  p.host_accessible = true;
  p.host_chunks = true;
  p.managed = true;
  p.pci_bus_id = c.pci_bus_id;
  return p;
}

void* as_ptr(DevPtr p) noexcept { return reinterpret_cast<void*>(p); }
sim::SimStream* as_stream(StreamHandle s) noexcept { return static_cast<sim::SimStream*>(s); }
sim::SimEvent* as_event(EventHandle e) noexcept { return static_cast<sim::SimEvent*>(e); }
Status sys_fail() noexcept { return Status::fail(Errc::system_error, errno); }

constexpr std::uint64_t host_bit = std::uint64_t{1} << 63;
std::size_t chunk_offset(std::uint64_t handle) noexcept { return (handle & ~host_bit) - 1; }

std::size_t physical_ram() noexcept {
  const std::size_t ram = common::physical_memory();
  return ram != 0 ? ram : std::size_t{1} << 34;
}

int open_memory(const char* name, std::size_t bytes) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) throw device_error("sim: memfd_create failed: " + std::generic_category().message(errno), "system_error");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    throw device_error("sim: cannot size the simulated " + std::string(name) + " to " + format_bytes(bytes) + ": " +
                           std::generic_category().message(err),
                       "system_error");
  }
  return fd;
}

// Replaces [va, va+bytes) with inaccessible anonymous memory: the state of reserved, unmapped VA.
bool make_inaccessible(DevPtr va, std::size_t bytes) noexcept {
  return ::mmap(as_ptr(va), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) !=
         MAP_FAILED;
}

}  // namespace

SimDevice::SimDevice(const SimDeviceConfig& config, std::size_t device_budget)
    : DeviceBackend(sim_properties(config, device_budget)),
      device_mem_(properties().capacity),
      host_mem_(physical_ram() / properties().granularity * properties().granularity) {
  const auto& props = properties();
  const auto host_page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (props.granularity == 0 || (props.granularity & (props.granularity - 1)) != 0 ||
      props.granularity % host_page != 0) {
    throw config_error("sim.granularity = " + std::to_string(props.granularity) +
                       " must be a power of two and a multiple of the host page size (" + std::to_string(host_page) +
                       "); the default is 2 MiB");
  }
  if (props.capacity == 0)
    throw config_error("sim.capacity resolves to 0 bytes; set device.budget or device.sim.capacity");
  device_mem_.fd = open_memory("tvmm-sim-device", props.capacity);
  try {
    host_mem_.fd = open_memory("tvmm-sim-host", host_mem_.granules.free_total());
  } catch (...) {
    ::close(device_mem_.fd);
    throw;
  }
  timing_ = config.timing == "model" ? sim::Timing::model : sim::Timing::wall;
  costs_ = config.vmm_costs;
  disk_ = config.disk;
  // Model timing: copies take their bus slots in the order they were queued (CopyEngine), so modelled
  // figures repeat exactly.
  const bool ordered = timing_ == sim::Timing::model;
  h2d_ = std::make_unique<sim::CopyEngine>(config.bandwidth_bytes_per_s, config.copy_latency, ordered);
  d2h_ = std::make_unique<sim::CopyEngine>(config.bandwidth_bytes_per_s, config.copy_latency, ordered);
}

SimDevice::~SimDevice() {
  h2d_.reset();
  d2h_.reset();
  for (auto& [base, bytes] : book_.reservations()) ::munmap(as_ptr(base), bytes);
  ::close(device_mem_.fd);
  ::close(host_mem_.fd);
}

SimDevice::Memory& SimDevice::memory_of(std::uint64_t handle) noexcept {
  return (handle & host_bit) != 0 ? host_mem_ : device_mem_;
}

Status SimDevice::do_reserve(std::size_t bytes, DevPtr* out) {
  const std::size_t g = properties().granularity;
  // Over-reserve by one granule, then trim, to get a granularity-aligned base.
  void* p = ::mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::fail(Errc::out_of_memory, errno);
  const auto raw = reinterpret_cast<DevPtr>(p);
  const DevPtr base = (raw + g - 1) / g * g;
  if (base > raw) ::munmap(p, base - raw);
  if (base + bytes < raw + bytes + g) ::munmap(as_ptr(base + bytes), raw + bytes + g - (base + bytes));
  std::lock_guard lk(mu_);
  try {
    book_.add_reservation(base, bytes);
  } catch (...) {  // std::bad_alloc: like a failed cuMemAddressReserve, nothing stays reserved
    ::munmap(as_ptr(base), bytes);
    throw;
  }
  *out = base;
  return Status::success();
}

Status SimDevice::do_release_reservation(DevPtr base, std::size_t bytes) {
  std::lock_guard lk(mu_);
  if (auto s = book_.check_release_reservation(base, bytes); !s.ok()) return s;
  if (::munmap(as_ptr(base), bytes) != 0) return sys_fail();
  book_.remove_reservation(base);
  return Status::success();
}

void SimDevice::charge(std::unique_lock<std::mutex>& lk, std::chrono::nanoseconds cost) {
  lk.unlock();  // the modelled cost is spent outside the simulator's lock
  spend(cost);
}

void SimDevice::spend(std::chrono::nanoseconds cost) const { sim::spend_host_time(timing_, cost); }

Status SimDevice::do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) {
  std::unique_lock lk(mu_);
  Memory& mem = where == ChunkLocation::host ? host_mem_ : device_mem_;
  const auto off = mem.granules.allocate(bytes);
  if (!off) return Status::fail(Errc::out_of_memory);
  const std::uint64_t handle = (*off + 1) | (where == ChunkLocation::host ? host_bit : 0);  // never 0
  try {
    book_.add_chunk(handle, bytes);
  } catch (...) {  // std::bad_alloc: like a failed cuMemCreate, nothing was created
    mem.granules.free(*off, bytes);
    throw;
  }
  out->value = handle;
  charge(lk, costs_.create * static_cast<std::int64_t>(bytes / properties().granularity));
  return Status::success();
}

Status SimDevice::do_release_chunk(ChunkHandle chunk) {
  std::lock_guard lk(mu_);
  std::size_t len = 0;
  if (auto s = book_.check_release_chunk(chunk.value, &len); !s.ok()) return s;
  const std::size_t off = chunk_offset(chunk.value);
  Memory& mem = memory_of(chunk.value);
  book_.remove_chunk(chunk.value);
  // Give the memory back to the host, as releasing device memory would.
  ::fallocate(mem.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off), static_cast<off_t>(len));
  mem.granules.free(off, len);
  return Status::success();
}

Status SimDevice::do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) {
  std::unique_lock lk(mu_);
  if (auto s = book_.check_map(va, bytes, chunk.value); !s.ok()) return s;
  book_.add_mapping(va, bytes, chunk.value);  // first: std::bad_alloc here maps nothing
  // MAP_POPULATE builds the page-table entries now, as a real map does, instead of taking one minor
  // fault per 4 KiB on the first copy into the page. Then no access until set_access, as in CUDA
  // (mprotect keeps the populated entries).
  if (::mmap(as_ptr(va), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
             memory_of(chunk.value).fd, static_cast<off_t>(chunk_offset(chunk.value))) == MAP_FAILED ||
      ::mprotect(as_ptr(va), bytes, PROT_NONE) != 0) {
    const Status failed = sys_fail();
    make_inaccessible(va, bytes);
    book_.remove_mappings(va, bytes);
    return failed;
  }
  charge(lk, costs_.map);
  return Status::success();
}

void SimDevice::note_d2h(std::size_t bytes) {
  if (d2h_->bandwidth() <= 0) return;
  std::lock_guard lk(mu_);
  d2h_queued_.queued(sim::host_time(timing_), d2h_->slot(bytes));
}

std::optional<std::chrono::nanoseconds> SimDevice::d2h_backlog() const noexcept {
  if (d2h_->bandwidth() <= 0) return std::nullopt;
  const auto now = sim::host_time(timing_);
  std::lock_guard lk(mu_);
  return d2h_queued_.left(now);
}

std::chrono::steady_clock::time_point SimDevice::storage_io_served(
    bool write, std::size_t bytes, std::chrono::steady_clock::time_point submitted) noexcept {
  const double speed = write ? disk_.write_bytes_per_s : disk_.read_bytes_per_s;
  if (timing_ != sim::Timing::model || speed <= 0) return submitted;
  const auto busy = std::chrono::duration_cast<sim::DeviceClock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / speed));
  std::lock_guard lk(disk_mu_);
  return disk_free_ = std::max(submitted, disk_free_) + busy;
}

void SimDevice::storage_io_waited(std::chrono::steady_clock::time_point end) noexcept {
  sim::host_waited_until(timing_, end);
}

Status SimDevice::do_set_access(DevPtr va, std::size_t bytes) {
  std::unique_lock lk(mu_);
  std::size_t mappings = 0;
  if (auto s = book_.check_whole_mappings(va, bytes, &mappings); !s.ok()) return s;
  if (::mprotect(as_ptr(va), bytes, PROT_READ | PROT_WRITE) != 0) return sys_fail();
  // Each mapping also waits for the device-to-host copies still running, up to set_access_d2h_wait, as
  // an H200's did (docs/gpu.md); cuda.h marks cuMemSetAccess \note_sync ("may be synchronous").
  std::chrono::nanoseconds cost{0};
  const auto now = sim::host_time(timing_);
  for (std::size_t m = 0; m < mappings; ++m) {
    cost += costs_.set_access;
    if (const auto left = d2h_queued_.left(now + cost); left.count() > 0)
      cost += std::min<std::chrono::nanoseconds>(left, costs_.set_access_d2h_wait);
  }
  charge(lk, cost);
  return Status::success();
}

Status SimDevice::do_unmap(DevPtr va, std::size_t bytes) {
  std::unique_lock lk(mu_);
  std::size_t mappings = 0;
  if (auto s = book_.check_whole_mappings(va, bytes, &mappings); !s.ok()) return s;
  if (!make_inaccessible(va, bytes)) return sys_fail();
  book_.remove_mappings(va, bytes);
  charge(lk, costs_.unmap * static_cast<std::int64_t>(mappings));
  return Status::success();
}

Status SimDevice::do_alloc_host(std::size_t bytes, void** out) {
  // Reserved lazily, like the rest of the simulator: a large host budget costs nothing until used.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::fail(Errc::out_of_memory, errno);
  *out = p;
  return Status::success();
}

Status SimDevice::do_free_host(void* ptr, std::size_t bytes) {
  return ::munmap(ptr, bytes) == 0 ? Status::success() : sys_fail();
}

Status SimDevice::do_register_host(void* ptr, std::size_t bytes) {
  std::lock_guard lk(mu_);
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  auto next = registered_.lower_bound(p);
  const bool overlaps = (next != registered_.end() && next->first < p + bytes) ||
                        (next != registered_.begin() && std::prev(next)->first + std::prev(next)->second > p);
  if (overlaps) return Status::fail(Errc::invalid_value);  // as CUDA: a range is registered once
  registered_.emplace(p, bytes);
  return Status::success();
}

Status SimDevice::do_unregister_host(void* ptr, std::size_t bytes) {
  std::lock_guard lk(mu_);
  auto it = registered_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == registered_.end() || it->second != bytes) return Status::fail(Errc::invalid_value);
  registered_.erase(it);
  return Status::success();
}

Status SimDevice::do_set_worker_cpus(const std::vector<unsigned>& cpus) {
  std::lock_guard lk(streams_mu_);
  for (auto* s : streams_) {
    if (!s->bind(cpus)) return Status::fail(Errc::system_error, EINVAL);
  }
  worker_cpus_ = cpus;
  return Status::success();
}

// Managed memory on the simulator is host memory: it is always where both sides can use it, so advice
// changes nothing and a prefetch only takes its modelled time on the copy engine.
Status SimDevice::do_alloc_managed(std::size_t bytes, void** out) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::fail(Errc::out_of_memory, errno);
  std::lock_guard lk(mu_);
  try {
    managed_.emplace(reinterpret_cast<std::uintptr_t>(p), bytes);
  } catch (...) {  // std::bad_alloc: memory no record knows could never be freed
    ::munmap(p, bytes);
    throw;
  }
  *out = p;
  return Status::success();
}

std::size_t SimDevice::managed_bytes() const {
  std::lock_guard lk(mu_);
  std::size_t bytes = 0;
  for (const auto& [base, n] : managed_) bytes += n;
  return bytes;
}

Status SimDevice::do_free_managed(void* ptr, std::size_t bytes) {
  std::lock_guard lk(mu_);
  auto it = managed_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == managed_.end() || it->second != bytes) return Status::fail(Errc::invalid_value);
  managed_.erase(it);
  return ::munmap(ptr, bytes) == 0 ? Status::success() : sys_fail();
}

Status SimDevice::do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation) {
  std::lock_guard lk(mu_);
  return managed_range(ptr, bytes) ? Status::success() : Status::fail(Errc::invalid_value);
}

Status SimDevice::do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) {
  {
    std::lock_guard lk(mu_);
    if (!managed_range(ptr, bytes)) return Status::fail(Errc::invalid_value);
  }
  sim::SimOp op;  // no addresses: the copy engine models the transfer's time and moves nothing
  op.kind = sim::SimOp::Kind::copy;
  op.copy_kind = where == ChunkLocation::device ? CopyKind::host_to_device : CopyKind::device_to_host;
  op.bytes = bytes;
  if (op.copy_kind == CopyKind::device_to_host) note_d2h(bytes);
  as_stream(stream)->enqueue(op);
  return Status::success();
}

bool SimDevice::managed_range(const void* ptr, std::size_t bytes) const {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = managed_.upper_bound(p);
  if (it == managed_.begin()) return false;
  --it;
  return p + bytes <= it->first + it->second;
}

Status SimDevice::do_create_stream(StreamHandle* out) {
  auto* s = new sim::SimStream(h2d_.get(), d2h_.get(), timing_, origin_);
  std::lock_guard lk(streams_mu_);
  if (!worker_cpus_.empty()) (void)s->bind(worker_cpus_);  // checked when the set was accepted
  streams_.insert(s);
  *out = s;
  return Status::success();
}

Status SimDevice::do_destroy_stream(StreamHandle stream) {
  {
    std::lock_guard lk(streams_mu_);
    streams_.erase(as_stream(stream));
  }
  delete as_stream(stream);
  return Status::success();
}

Status SimDevice::do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::copy;
  op.copy_kind = kind;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  if (kind == CopyKind::device_to_host) note_d2h(bytes);
  as_stream(stream)->enqueue(op);
  spend(costs_.copy_call);
  return Status::success();
}

// The copy engine moves the physical memory behind both addresses itself (copy_file_range between the
// memfds), as a GPU's does: no host thread touches the bytes.
Status SimDevice::do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::copy;
  op.copy_kind = bus;
  op.dst = as_ptr(dst);
  op.src = as_ptr(src);
  op.bytes = bytes;
  {
    std::lock_guard lk(mu_);
    std::uint64_t from = 0, to = 0;
    std::size_t from_off = 0, to_off = 0;
    if (!book_.backing(src, bytes, &from, &from_off) || !book_.backing(dst, bytes, &to, &to_off)) {
      return Status::fail(Errc::invalid_value);
    }
    op.file_src = {memory_of(from).fd, static_cast<std::int64_t>(chunk_offset(from) + from_off)};
    op.file_dst = {memory_of(to).fd, static_cast<std::int64_t>(chunk_offset(to) + to_off)};
  }
  if (bus == CopyKind::device_to_host) note_d2h(bytes);
  as_stream(stream)->enqueue(op);
  spend(costs_.copy_call);
  return Status::success();
}

Status SimDevice::do_launch_host(StreamHandle stream, HostFn fn, void* user) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::host;
  op.fn = fn;
  op.user = user;
  as_stream(stream)->enqueue(op);
  spend(costs_.launch);
  return Status::success();
}

Status SimDevice::do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::busy;
  op.duration = duration;
  as_stream(stream)->enqueue(op);
  spend(costs_.launch);
  return Status::success();
}

Status SimDevice::do_synchronize_stream(StreamHandle stream) {
  as_stream(stream)->synchronize();
  return Status::success();
}

// Nothing but this backend allocates the simulated device's memory: there is no one else's to report.
Status SimDevice::do_memory_info(std::size_t*, std::size_t*) { return Status::fail(Errc::not_supported); }

Status SimDevice::do_synchronize_device() {
  std::lock_guard lk(streams_mu_);  // no stream goes away while it is waited for
  for (sim::SimStream* s : streams_) s->synchronize();
  return Status::success();
}

Status SimDevice::do_create_event(EventKind kind, EventHandle* out) {
  *out = new sim::SimEvent(timing_, kind == EventKind::timing);
  return Status::success();
}

Status SimDevice::do_destroy_event(EventHandle event) {
  // Like CUDA, destroying an event with records still queued is allowed: wait until they have run.
  as_event(event)->wait_latest();
  delete as_event(event);
  return Status::success();
}

Status SimDevice::do_record_event(EventHandle event, StreamHandle stream) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::record;
  op.event = as_event(event);
  op.record = std::make_shared<sim::SimEvent::Record>();
  // The event takes the record only once it is queued: a record that cannot be queued (std::bad_alloc)
  // changes nothing, as a failed cuEventRecord. (Lock order: stream, then event; the worker takes the
  // event's lock only with the stream's let go.)
  sim::SimStream* s = as_stream(stream);
  s->enqueue(
      op,
      [](const sim::SimOp& queued, void* on) noexcept {
        queued.event->begin_record(queued.record, static_cast<sim::SimStream*>(on)->progress());
      },
      s);
  spend(costs_.event_record);
  return Status::success();
}

Status SimDevice::do_stream_wait_event(StreamHandle stream, EventHandle event) {
  sim::SimOp op;
  op.kind = sim::SimOp::Kind::wait;
  op.event = as_event(event);
  op.until = op.event->latest_record();
  as_stream(stream)->enqueue(op);
  spend(costs_.stream_wait);
  return Status::success();
}

Status SimDevice::do_query_event(EventHandle event) {
  // The answer is decided at the thread's host time when the call begins; the call's cost follows.
  const bool complete = as_event(event)->is_complete();
  spend(costs_.event_query);
  return complete ? Status::success() : Status::fail(Errc::not_ready);
}

Status SimDevice::do_synchronize_event(EventHandle event) {
  as_event(event)->wait_latest();
  return Status::success();
}

Status SimDevice::do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) {
  sim::DeviceClock::time_point a, b;
  if (!as_event(start)->timed() || !as_event(end)->timed()) return Status::fail(Errc::invalid_value);  // sync events
  if (as_event(start)->latest() == 0 || as_event(end)->latest() == 0) return Status::fail(Errc::invalid_value);
  if (!as_event(start)->completed_at(&a) || !as_event(end)->completed_at(&b)) return Status::fail(Errc::not_ready);
  *out = std::chrono::duration_cast<std::chrono::nanoseconds>(b - a);
  return Status::success();
}

}  // namespace tvmm::device
