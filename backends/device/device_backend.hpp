#pragma once
// Contract of the device-backend plug-point (simulator now, CUDA driver later).
//
// The interface follows the CUDA VMM model: a device virtual-address range is reserved once; physical
// chunks are created, mapped into it, given access, unmapped and released; copies, host callables and
// event records run in order on streams. Public methods are non-virtual: they validate arguments and
// count calls, then call the private do_* primitive. Primitives return a Status; they never throw.
//
// Pre- and post-conditions of each primitive (every backend must honour them; the conformance suite
// in tests/conformance checks them):
//   reserve(bytes)      bytes > 0 and a multiple of granularity. Post: a granularity-aligned range that
//                       is not accessible (any access faults) and belongs to no other reservation.
//   release_reservation all mappings inside were unmapped.
//   create_chunk(bytes, where)
//                       bytes a multiple of granularity (of host_granularity for `host`). `device`: GPU memory; fails
//                       with out_of_memory past the device's physical capacity (a hard limit). `host`: host memory that
//                       maps into the reservation like device memory (cuMemCreate at a host NUMA node), so device work
//                       reaches it over the bus; not_supported unless properties().host_chunks. Contents are undefined.
//   map(va, bytes, c)   va..va+bytes inside a reservation, aligned, not mapped. Post: mapped, but not
//                       accessible until set_access.
//   set_access(va, n)   the range is mapped. Post: readable and writable by device work.
//   unmap(va, n)        the range is mapped exactly as one or more whole map() calls. Not stream-ordered:
//                       the caller must have waited for all work that uses the range.
//   memcpy_async        runs in stream order on the direction's copy engine; one end is host memory.
//   copy_device(d,s,n,k) both ends are device addresses, each inside one accessible mapping (a remap
//                       between a device frame and a host-located chunk): runs in stream order on the
//                       copy engine of direction k (the way the bytes cross the bus). invalid_value if
//                       an end is not mapped.
//   alloc_managed(b,o)  managed memory (cuMemAllocManaged): one address for device and host; the driver
//                       migrates its pages on access. not_supported unless properties().managed.
//   free_managed(p,b)   p came from alloc_managed(b); no work may still use it.
//   advise_managed      where the driver should keep [p, p+b) (cuMemAdvise SET_PREFERRED_LOCATION).
//   prefetch_managed    moves [p, p+b) to `where` in stream order (cuMemPrefetchAsync); the memory stays
//                       usable by both sides throughout.
//   launch_host(s,f,u)  f(u) runs in stream order (cuLaunchHostFunc), on a backend thread; f must
//                       make no call to any backend (on CUDA every driver call from a host function
//                       may fail with CUDA_ERROR_NOT_PERMITTED, cuda.h 18070) and touch device memory
//                       only where properties().host_accessible.
//   launch_busy(s, d)   a kernel that keeps s busy for d of device time and touches no memory (a
//                       modelled kernel for benchmarks and tests).
//   fill(s,va,n,seed)   a kernel that writes the pattern `seed` (kernels::fill_pattern) over [va, va+n),
//                       in stream order.
//   verify(s,va,n,seed,bad)
//                       a kernel that adds to the 64-bit counter at device address `bad` the bytes of
//                       [va, va+n) that differ from the pattern (kernels::count_mismatches). Both are
//                       not_supported on a backend without device kernels (the simulator, whose
//                       workloads check bytes on the host) or where its kernels cannot load;
//                       kernels_unavailable() says why.
//   create_event(e, k)  `sync` events order work and are waited for (on CUDA: DISABLE_TIMING and
//                       BLOCKING_SYNC, so a host wait sleeps instead of spinning a core); `timing`
//                       events can also be timed with event_elapsed (and are waited for the same way).
//   record_event(e, s)  e completes when the work queued on s so far has completed. An event never
//                       recorded counts as completed.
//   stream_wait_event   work queued on s after this call waits for e's latest record.
//   query_event         ok when completed, not_ready otherwise.
//   event_elapsed(a,b)  device time from a's completion to b's (cuEventElapsedTime); not_ready until
//                       both have completed, invalid_value if either was never recorded or is a `sync`
//                       event.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tvmm {
struct Config;
}

namespace tvmm::device {

//! A device virtual address.
using DevPtr = std::uintptr_t;

//! Result codes shared by every backend.
enum class Errc : std::uint8_t {
  ok = 0,
  not_ready,       //!< query: the work has not completed yet
  out_of_memory,   //!< the device's physical capacity is exhausted
  invalid_value,   //!< an argument is out of range, misaligned or of the wrong state
  not_mapped,      //!< unmap/set_access of a range that is not mapped
  already_mapped,  //!< map over a range that is mapped
  not_supported,   //!< the backend cannot do this
  system_error,    //!< an operating-system call failed (errno in Status::sys_errno)
  driver_error,    //!< the GPU driver failed otherwise (its code, e.g. a CUresult, in Status::sys_errno)
  //! The device failed for good (a sticky CUDA error such as an illegal address): every later call
  //! fails the same way until the process restarts (the driver's code in Status::sys_errno).
  device_lost,
};

//! Returns the error's name, e.g. "out_of_memory".
const char* errc_name(Errc e) noexcept;

//! The result of a primitive: a code and, where one is known, the code behind it: an errno (an
//! operating-system call failed), or the driver's own code (`driver_code`, e.g. a CUresult).
struct [[nodiscard]] Status {
  Errc code = Errc::ok;
  int sys_errno = 0;
  bool driver_code = false;           //!< sys_errno is the driver's code, not an errno
  const char* driver_name = nullptr;  //!< the driver's name for that code (its static storage), if known
  [[nodiscard]] bool ok() const noexcept { return code == Errc::ok; }
  static Status success() noexcept { return {}; }
  static Status fail(Errc e, int err = 0) noexcept { return {e, err}; }
  //! A failure the driver reported with its own code (e.g. a CUresult), and its name where the driver
  //! gives one (cuGetErrorName: "CUDA_ERROR_OUT_OF_MEMORY").
  static Status driver_fail(Errc e, int driver, const char* name = nullptr) noexcept { return {e, driver, true, name}; }
};

//! Where a physical chunk lives.
enum class ChunkLocation : std::uint8_t {
  device,  //!< GPU memory
  host,    //!< host memory on the GPU's NUMA node, mappable into the device reservation
};

//! A physical chunk of device memory (cuMemGenericAllocationHandle).
struct ChunkHandle {
  std::uint64_t value = 0;
};
//! An opaque stream handle.
using StreamHandle = void*;
//! An opaque event handle.
using EventHandle = void*;
//! Direction of a copy; each direction has its own copy engine.
enum class CopyKind : std::uint8_t { host_to_device, device_to_host };
//! A host callable run in stream order.
using HostFn = void (*)(void* user);
//! What an event is for: ordering and waiting only, or timing too (event_elapsed).
enum class EventKind : std::uint8_t { sync, timing };

//! Facts about a device.
struct DeviceProperties {
  std::string name;             //!< backend name, e.g. "sim"
  std::size_t granularity = 0;  //!< mapping granularity in bytes (device chunks)
  //! Granularity of host-located chunks (where host_chunks): the driver's may differ from the device
  //! chunks' (cuMemGetAllocationGranularity is per allocation property). 0 = `granularity`.
  std::size_t host_granularity = 0;
  std::size_t capacity = 0;  //!< physical memory in bytes
  //! Memory free when the backend was opened (cuMemGetInfo: other allocations, this process's or
  //! others', hold the rest); 0 = not known, as capacity.
  std::size_t free_memory = 0;
  bool host_accessible = false;  //!< device addresses can be dereferenced by the host (simulator)
  bool host_chunks = false;      //!< create_chunk(..., ChunkLocation::host) works
  bool managed = false;          //!< alloc_managed, advise_managed and prefetch_managed work
  std::string pci_bus_id;        //!< the device's PCI bus id ("0000:65:00.0"), "" if unknown
};

//! Calls made through a backend, counted by the non-virtual front end.
struct BackendCounters {
  std::uint64_t maps = 0, unmaps = 0, set_access = 0, copies = 0, copy_bytes = 0, chunks_created = 0;
};

//! The calls whose host time the backend keeps (call_times()).
enum class TimedCall : std::uint8_t { map, set_access, unmap, copy, record, stream_wait, query, synchronize, launch };
inline constexpr std::size_t kTimedCalls = 9;
struct CallTime {
  std::uint64_t calls = 0, ns = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend();
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  [[nodiscard]] const DeviceProperties& properties() const noexcept { return props_; }
  //! True once a call returned device_lost (said once on stderr): release paths then stay quiet about
  //! the calls that fail, since they all do.
  [[nodiscard]] bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  //! A failure in words for people: the driver's error name where there is one.
  [[nodiscard]] virtual std::string describe(const Status& s) const;
  //! For release paths, which never throw: says on stderr "tvmm: <what> failed: <describe(s)>", unless
  //! `s` succeeded or the device is lost (every call fails then, and that was said once).
  void warn_failed(const Status& s, const char* what) const noexcept;
  [[nodiscard]] BackendCounters counters() const noexcept;
  //! Calls made so far and the wall-clock time inside them, by TimedCall: on a GPU, the driver's host time.
  [[nodiscard]] std::array<CallTime, kTimedCalls> call_times() const noexcept;
  //! The calling thread's host clock, as the backend accounts for host time: the wall clock on a GPU;
  //! on the simulator, the host time it has charged the thread for VMM calls (SimDeviceConfig::
  //! vmm_costs). The pager times its own mapping calls with it.
  [[nodiscard]] virtual std::chrono::steady_clock::time_point host_clock() const noexcept {
    return std::chrono::steady_clock::now();
  }
  //! The calling thread's present time on the one timeline every thread shares, as the pager's
  //! timeline (timeline.file) dates its events: the wall clock on a GPU; on the simulator the thread's
  //! host time in the configured timing (with "model", modelled: the calls it was charged for and the
  //! device work it waited for; a host function launched on a stream runs at its start on the device).
  [[nodiscard]] virtual std::chrono::steady_clock::time_point timeline_clock() const noexcept {
    return std::chrono::steady_clock::now();
  }
  //! How much longer the device-to-host copies queued so far keep that direction's bus busy, seen
  //! from the calling thread's present host time: each copy counted from when it was queued, or right
  //! after the one queued before it, for its bytes over the bus's speed (BusBacklog). An estimate from
  //! below (a copy that waits for a kernel starts later). std::nullopt where the backend does not know
  //! its bus's speed: the simulator with an unthrottled bus, the CUDA backend where neither
  //! Config::bus_bytes_per_s nor sysfs gives one. Write-behind queues its copies only while this is zero.
  [[nodiscard]] virtual std::optional<std::chrono::nanoseconds> d2h_backlog() const noexcept { return std::nullopt; }
  //! Whether the backend models the machine's NVMe drive on its clock (storage_io_ended does something):
  //! the simulator with SimDeviceConfig::disk set and timing "model". Elsewhere the drive takes its real
  //! time and the backend need not hear of it.
  [[nodiscard]] virtual bool models_storage() const noexcept { return false; }
  //! When a storage I/O of `bytes` (a write if `write`) that the calling thread submits at `submitted`
  //! (its timeline_clock() then) ends. Where models_storage(), the modelled drive serves it after every
  //! I/O reported before it, one at a time, for `bytes` over the direction's speed, and this returns
  //! that end (the drive is taken until then); elsewhere it returns `submitted`. Reporting at
  //! submission lets a caller keep requests in flight across calls (NVMe read-ahead): the drive's
  //! order is the order reported.
  virtual std::chrono::steady_clock::time_point storage_io_served(
      bool /*write*/, std::size_t /*bytes*/, std::chrono::steady_clock::time_point submitted) noexcept {
    return submitted;
  }
  //! The calling thread has waited for a storage I/O that ends at `end` (storage_io_served): where
  //! models_storage(), its time moves on to `end` if that is later, so what it queues next starts no
  //! earlier. Elsewhere nothing happens (the real wait took its real time).
  virtual void storage_io_waited(std::chrono::steady_clock::time_point /*end*/) noexcept {}
  //! Whether an I/O that ends at `end` has ended by the calling thread's present time: a thread that
  //! finds it has not (where models_storage()) treats the request as still running.
  [[nodiscard]] bool storage_io_done_by_now(std::chrono::steady_clock::time_point end) const noexcept {
    return !models_storage() || end <= timeline_clock();
  }
  //! A storage I/O submitted at `submitted` has ended and the thread waited for it:
  //! storage_io_waited(storage_io_served(...)).
  void storage_io_ended(bool write, std::size_t bytes, std::chrono::steady_clock::time_point submitted) noexcept {
    storage_io_waited(storage_io_served(write, bytes, submitted));
  }

  Status reserve(std::size_t bytes, DevPtr* out);
  Status release_reservation(DevPtr base, std::size_t bytes);
  Status create_chunk(std::size_t bytes, ChunkHandle* out, ChunkLocation where = ChunkLocation::device);
  Status release_chunk(ChunkHandle chunk);
  Status map(DevPtr va, std::size_t bytes, ChunkHandle chunk);
  Status set_access(DevPtr va, std::size_t bytes);
  Status unmap(DevPtr va, std::size_t bytes);

  //! Host memory (pinned on a real GPU, plain memory on the simulator).
  Status alloc_host(std::size_t bytes, void** out);
  Status free_host(void* ptr, std::size_t bytes);
  //! Pins memory allocated elsewhere for fast copies (cuMemHostRegister): the host tier allocates and
  //! binds its frames to a NUMA node first, since pinned pages cannot migrate.
  Status register_host(void* ptr, std::size_t bytes);
  Status unregister_host(void* ptr, std::size_t bytes);
  //! Restricts the backend's own worker threads (the simulator's stream threads, which run its copies
  //! and kernels), existing and future, to `cpus`; not_supported where it has none it can bind.
  Status set_worker_cpus(const std::vector<unsigned>& cpus);

  //! Managed (unified) memory: see the contract above.
  Status alloc_managed(std::size_t bytes, void** out);
  Status free_managed(void* ptr, std::size_t bytes);
  Status advise_managed(void* ptr, std::size_t bytes, ChunkLocation where);
  Status prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream);

  Status create_stream(StreamHandle* out);
  Status destroy_stream(StreamHandle stream);
  Status memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream);
  Status copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream);
  Status launch_host(StreamHandle stream, HostFn fn, void* user);
  Status launch_busy(StreamHandle stream, std::chrono::nanoseconds duration);
  Status fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed);
  Status verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad);
  //! Why fill and verify are not_supported here; valid after one of them returned it.
  [[nodiscard]] virtual std::string kernels_unavailable() { return "this device backend has no device kernels"; }
  Status synchronize_stream(StreamHandle stream);
  //! Waits for all work queued on the device's context, by anyone in the process: on a GPU the primary
  //! context's, which the program's CUDA runtime uses too (cuCtxSynchronize there); on the simulator,
  //! every stream of this backend. Transparent mode drains the program's work with it.
  Status synchronize_device();
  //! The device's memory free and in all, as the driver counts it for every allocation in the system
  //! (cuMemGetInfo in the device's primary context): what an allocation made outside this backend (by the
  //! program, a library, another process) could still get. not_supported where nothing but this backend
  //! allocates the device's memory (the simulator).
  Status memory_info(std::size_t* free, std::size_t* total);

  Status create_event(EventHandle* out, EventKind kind = EventKind::sync);
  Status destroy_event(EventHandle event);
  Status record_event(EventHandle event, StreamHandle stream);
  Status stream_wait_event(StreamHandle stream, EventHandle event);
  Status query_event(EventHandle event);
  Status synchronize_event(EventHandle event);
  Status event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out);

 protected:
  explicit DeviceBackend(DeviceProperties props) : props_(std::move(props)) {}
  //! Every primitive's result passes here (a backend's own calls beyond the primitives too): the first
  //! device_lost is reported and remembered.
  Status noted(Status s) noexcept;

 private:
  virtual Status do_reserve(std::size_t bytes, DevPtr* out) = 0;
  virtual Status do_release_reservation(DevPtr base, std::size_t bytes) = 0;
  virtual Status do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) = 0;
  virtual Status do_release_chunk(ChunkHandle chunk) = 0;
  virtual Status do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) = 0;
  virtual Status do_set_access(DevPtr va, std::size_t bytes) = 0;
  virtual Status do_unmap(DevPtr va, std::size_t bytes) = 0;
  virtual Status do_alloc_host(std::size_t bytes, void** out) = 0;
  virtual Status do_free_host(void* ptr, std::size_t bytes) = 0;
  virtual Status do_register_host(void* ptr, std::size_t bytes) = 0;
  virtual Status do_unregister_host(void* ptr, std::size_t bytes) = 0;
  virtual Status do_set_worker_cpus(const std::vector<unsigned>& cpus) = 0;
  virtual Status do_alloc_managed(std::size_t bytes, void** out) = 0;
  virtual Status do_free_managed(void* ptr, std::size_t bytes) = 0;
  virtual Status do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) = 0;
  virtual Status do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) = 0;
  virtual Status do_create_stream(StreamHandle* out) = 0;
  virtual Status do_destroy_stream(StreamHandle stream) = 0;
  virtual Status do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) = 0;
  virtual Status do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) = 0;
  virtual Status do_launch_host(StreamHandle stream, HostFn fn, void* user) = 0;
  virtual Status do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) = 0;
  //! Backends with device kernels override these; the others have none.
  virtual Status do_fill(StreamHandle /*stream*/, DevPtr /*va*/, std::size_t /*bytes*/, std::uint64_t /*seed*/) {
    return Status::fail(Errc::not_supported);
  }
  virtual Status do_verify(StreamHandle /*stream*/, DevPtr /*va*/, std::size_t /*bytes*/, std::uint64_t /*seed*/,
                           DevPtr /*bad*/) {
    return Status::fail(Errc::not_supported);
  }
  virtual Status do_synchronize_stream(StreamHandle stream) = 0;
  virtual Status do_synchronize_device() = 0;
  virtual Status do_memory_info(std::size_t* free, std::size_t* total) = 0;
  virtual Status do_create_event(EventKind kind, EventHandle* out) = 0;
  virtual Status do_destroy_event(EventHandle event) = 0;
  virtual Status do_record_event(EventHandle event, StreamHandle stream) = 0;
  virtual Status do_stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  virtual Status do_query_event(EventHandle event) = 0;
  virtual Status do_synchronize_event(EventHandle event) = 0;
  virtual Status do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) = 0;

  [[nodiscard]] bool aligned(std::size_t v) const noexcept { return v % props_.granularity == 0; }

  DeviceProperties props_;
  std::atomic<std::uint64_t> copies_{0}, copy_bytes_{0}, chunks_{0};  // maps, unmaps, grants: in times_
  std::atomic<bool> lost_{false};
  struct AtomicCallTime {
    std::atomic<std::uint64_t> calls{0}, ns{0};
  };
  std::array<AtomicCallTime, kTimedCalls> times_;
  class Timed;  // adds a call's wall-clock time to times_
};

//! Creates the backend registered (backends/device/registry.cpp) as `config.device_backend`; throws
//! tvmm::config_error for an unknown name and tvmm::device_error when it cannot start.
std::unique_ptr<DeviceBackend> make_device_backend(const Config& config);

}  // namespace tvmm::device
