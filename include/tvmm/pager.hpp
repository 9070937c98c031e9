#pragma once
//! @file pager.hpp
//! The linked C++ API: `Pager`, `Tensor`, `Pin` and `Stream`.
//!
//! A `Pager` owns a device backend, one virtual-address reservation and the tiers. `Pager::allocate`
//! returns a `Tensor` whose device address never changes while it lives; its pages move between the
//! device and host tiers. Code that touches a tensor's memory first pins it: a `Pin` keeps the pages on
//! the device for as long as it lives (host-synchronous pin) or until the given stream passes the point
//! where the pin was released (stream-ordered pin).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "tvmm/export.h"
#include "tvmm/stats.hpp"

namespace tvmm {

namespace vmm {
class PagerImpl;
struct Allocation;
struct PagerAccess;
}  // namespace vmm

//! How the pinned code will use a tensor's pages.
enum class Access : std::uint8_t {
  read,        //!< Reads only. Contents are loaded.
  read_write,  //!< Reads and writes. Contents are loaded.
  write,       //!< Overwrites every byte before reading any: non-resident contents are NOT loaded,
               //!< so the pinned bytes are undefined until written (saves a page-in).
};

//! Where a page lives now (for inspection and tests).
enum class Tier : std::uint8_t {
  none,     //!< Never written: no tier holds data for it yet.
  device,   //!< On the device (resident, mapped at its address).
  host,     //!< On the host tier (its address is unmapped on the device).
  transit,  //!< Being moved by some thread right now.
  nvme,     //!< On the NVMe tier (a slot in the tier's files, checksummed).
};

//! Returns "none", "device", "host", "transit" or "nvme".
[[nodiscard]] TVMM_API const char* to_string(Tier tier) noexcept;

//! Where a pager put its host tier and its worker threads (Pager::placement()).
struct Placement {
  std::string host_policy;   //!< "node 1 (preferred)", "interleave over nodes 0,1" or "none"
  std::string host_reason;   //!< what decided it, e.g. "host.numa = \"auto\": the GPU at ... is on node 1"
  std::string host_outcome;  //!< "bound: node 1 (preferred)", or "unbound: <why>"
  std::string threads;       //!< "bound to CPUs 8-15 (node 1): 2 stream threads, 4 I/O threads", or why not
};

//! Optional facts about a tensor that help the pager place it.
struct Hints {
  std::string name;  //!< Shown in errors and traces.
};

//! An in-order queue of work on the device (a CUDA stream, or a worker thread on the simulator).
//! Created by `Pager::create_stream()`; must be destroyed before its Pager and after every stream
//! `Pin` on it. Destruction waits for queued work.
class TVMM_API Stream {
 public:
  Stream() = default;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  //! Queues a host callable as a "kernel": it runs after the stream's earlier work, on the device
  //! backend's stream thread. On the simulator it may read and write pinned tensors' device addresses.
  //! On a GPU (device.backend = "cuda") it is a cuLaunchHostFunc callback on a driver thread: it may
  //! make no CUDA call (the driver may refuse it with CUDA_ERROR_NOT_PERMITTED, or deadlock) and no
  //! call to this pager, and must not touch device memory (device addresses are not host memory);
  //! use it for host work ordered with the stream. The callable must not throw (an exception
  //! terminates the process, as a kernel fault would).
  void launch(std::function<void()> fn);
  //! Queues a modelled kernel that keeps the stream busy for `duration` of device time and touches no
  //! memory: a stand-in for compute in benchmarks and tests. On the simulator it advances the
  //! stream's device clock (see StreamTimer). Throws `tvmm::invalid_argument` for a negative duration.
  void busy_for(std::chrono::nanoseconds duration);
  //! Blocks until all work queued so far on this stream has completed.
  void synchronize();
  //! The backend's handle (on CUDA, the CUstream); for interoperation.
  [[nodiscard]] void* native_handle() const noexcept { return handle_; }
  //! True if this object holds a stream.
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  friend class Pager;
  friend class StreamTimer;
  friend class Tensor;  // checks that a stream passed to pin or prefetch is its pager's
  Stream(vmm::PagerImpl* pager, void* handle) noexcept : pager_(pager), handle_(handle) {}
  vmm::PagerImpl* pager_ = nullptr;
  void* handle_ = nullptr;
};

//! Device time between two points of a stream's work, like a pair of CUDA timing events: `start()`
//! and `stop()` mark points in the stream without blocking; `elapsed()` waits for the stop point and
//! returns the device time between the two. On the simulator that is its modelled device time (copy
//! slots on the modelled bus, busy kernels, waits), free of the host's scheduling noise; across a
//! period when the stream sat idle it includes the idle wall-clock time. Must not outlive the stream.
class TVMM_API StreamTimer {
 public:
  //! Throws `tvmm::invalid_argument` for an empty stream.
  explicit StreamTimer(Stream& stream);
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  //! Marks the start: the point after the work queued so far on the stream.
  void start();
  //! Marks the end; call after start().
  void stop();
  //! Waits for the stop mark, then returns the device time from the start mark to it. Throws
  //! `tvmm::invalid_argument` unless start() and then stop() were called.
  [[nodiscard]] std::chrono::nanoseconds elapsed();

 private:
  vmm::PagerImpl* pager_;
  void* stream_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
  bool started_ = false;
  bool stopped_ = false;
};

//! Keeps a tensor's pages resident on the device. Move-only; releases on destruction (noexcept).
//!
//! A host-synchronous pin (from `Tensor::pin(Access)`) releases at once. A stream-ordered pin (from
//! `Tensor::pin(Stream&, Access)`) takes a release point on its stream: the pages are evicted only
//! after the stream's work queued before the release has completed (the point's device event is
//! recorded when something must follow it, at once where the pager evicted since the stream's
//! previous point, and at least at every 4th point of the stream).
//!
//! Device work may touch a tensor's addresses only under a pin: an evicted page's address stays mapped
//! to the frame it left, which may hold another page's data by then (no fault).
class TVMM_API Pin {
 public:
  Pin() = default;
  Pin(Pin&& other) noexcept;
  Pin& operator=(Pin&& other) noexcept;
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { release(); }

  //! The device address of the first pinned byte (`Tensor::data()` for a whole-tensor pin).
  [[nodiscard]] void* data() const noexcept;
  //! The number of pinned bytes (`Tensor::size()` for a whole-tensor pin).
  [[nodiscard]] std::size_t size() const noexcept;
  //! Releases the pin now (idempotent).
  void release() noexcept;
  //! True if this object holds a pin.
  explicit operator bool() const noexcept { return alloc_ != nullptr; }

 private:
  friend class Tensor;
  friend TVMM_API void release_together(std::span<Pin> pins) noexcept;
  Pin(vmm::PagerImpl* pager, vmm::Allocation* alloc, void* stream, std::size_t offset, std::size_t bytes,
      std::uint32_t first_page, std::uint32_t pages) noexcept
      : pager_(pager),
        alloc_(alloc),
        stream_(stream),
        offset_(offset),
        bytes_(bytes),
        first_page_(first_page),
        pages_(pages) {}
  vmm::PagerImpl* pager_ = nullptr;
  vmm::Allocation* alloc_ = nullptr;
  void* stream_ = nullptr;
  std::size_t offset_ = 0;
  std::size_t bytes_ = 0;
  std::uint32_t first_page_ = 0;  // the pinned pages of the tensor, as computed at pin time
  std::uint32_t pages_ = 0;
};

//! Releases several pins at one point: as releasing each in turn with nothing queued on their streams
//! in between, but the stream-ordered pins of one pager and stream share one release point (one per 16
//! of them, not one per pin; a point's device event, where one is recorded, is a driver call on a GPU,
//! about 1.8 us on an H100, docs/gpu.md). Host-synchronous pins release as `Pin::release` does. Use it
//! for the pins of one kernel's operands, released after its launch. Empty pins are skipped; every pin
//! is empty afterwards.
TVMM_API void release_together(std::span<Pin> pins) noexcept;

//! A tensor: a range of device virtual addresses whose pages the pager moves between tiers. Move-only;
//! frees on destruction (noexcept). If pins are still alive, the memory is reclaimed when the last one
//! is released. Must be destroyed before its Pager.
class TVMM_API Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  //! The device address; never changes while the tensor lives. Dereference it only through a pin.
  [[nodiscard]] void* data() const noexcept;
  //! Size in bytes as asked at allocation.
  [[nodiscard]] std::size_t size() const noexcept;
  //! The name from the hints (may be empty).
  [[nodiscard]] const std::string& name() const noexcept;

  //! Stream-ordered pin: work queued on `stream` after this call sees the pages resident. The calling
  //! thread waits neither for page-ins nor for the write-backs of pages evicted to make room: the
  //! stream does. Throws `tvmm::out_of_memory` when the pinned working set cannot fit the device budget,
  //! and `tvmm::invalid_argument` for a stream of another Pager.
  [[nodiscard]] Pin pin(Stream& stream, Access access = Access::read_write);
  //! Host-synchronous pin: returns when the pages are resident and the work that earlier stream pins
  //! queued on this tensor has completed (on the simulator, `data()` is then readable and writable
  //! from the host). Streams themselves are not ordered against each other: as in CUDA, order two
  //! streams that share a tensor yourself.
  [[nodiscard]] Pin pin(Access access = Access::read_write);
  //! Stream-ordered pin of bytes [offset, offset + bytes) only: just the pages holding them are made
  //! resident and pinned, so a tensor larger than the device budget can be worked through a range at
  //! a time. `Pin::data()` is the address of byte `offset`. With Access::write, pages the range covers
  //! only in part are loaded (read_write), so the bytes outside the range keep their contents. Throws
  //! `tvmm::invalid_argument` unless 0 < bytes <= size() - offset.
  [[nodiscard]] Pin pin_range(Stream& stream, std::size_t offset, std::size_t bytes,
                              Access access = Access::read_write);
  //! Host-synchronous pin of bytes [offset, offset + bytes) only (see the stream-ordered overload).
  [[nodiscard]] Pin pin_range(std::size_t offset, std::size_t bytes, Access access = Access::read_write);
  //! Starts moving the tensor's pages to the device on the copy engines without pinning them; `stream`
  //! is made to wait for the page-ins. Never evicts pinned pages.
  void prefetch(Stream& stream);
  //! Declares the contents dead, as a framework does when it frees an activation whose memory it keeps
  //! for the next step: the tensor keeps its address, and its pages give up their memory without being
  //! copied anywhere. Pages on the host or NVMe tier let their slots go at once. Resident pages stay
  //! mapped and become the first victims of the next eviction, which drops them without a write-back
  //! and, like any eviction, only after the work queued on earlier stream pins has completed. The next
  //! pin sees undefined contents: pin with Access::write to fill the tensor again (a pin that may write
  //! before the eviction keeps the page, with whatever it holds). Throws `tvmm::invalid_argument`,
  //! changing nothing, while a pin of the tensor is alive. A tensor smaller than
  //! `policy.admission.min_bytes` stays on the device for its whole life: there discard frees nothing
  //! (and, for one that shares a page with other small tensors, does not check for pins).
  void discard();
  //! Where the page holding byte `offset` of this tensor lives now.
  [[nodiscard]] Tier tier(std::size_t offset = 0) const;

  //! Frees now (idempotent). Equivalent to destruction.
  void reset() noexcept;
  //! Gives up ownership and returns the address; free it later with `Pager::free`.
  [[nodiscard]] void* release() noexcept;
  //! True if this object holds a tensor.
  explicit operator bool() const noexcept { return alloc_ != nullptr; }

 private:
  friend class Pager;
  Tensor(vmm::PagerImpl* pager, vmm::Allocation* alloc) noexcept : pager_(pager), alloc_(alloc) {}
  // Throws tvmm::invalid_argument for an empty stream or one of another pager.
  void require_stream(const Stream& stream, const char* what) const;
  vmm::PagerImpl* pager_ = nullptr;
  vmm::Allocation* alloc_ = nullptr;
};

//! The pager: a device backend, a device-address reservation, a device tier (frame pool), a host tier,
//! an eviction policy and a transfer engine. Thread-safe: any thread may allocate, pin and free.
class TVMM_API Pager {
 public:
  //! Builds a pager. Throws `tvmm::config_error` for invalid settings and `tvmm::device_error` when
  //! the backend cannot start.
  explicit Pager(const Config& config);
  ~Pager();
  Pager(Pager&&) noexcept;
  Pager& operator=(Pager&&) noexcept;
  Pager(const Pager&) = delete;
  Pager& operator=(const Pager&) = delete;

  //! Allocates a tensor of `bytes` (rounded up to whole pages internally). No tier holds its data until
  //! it is first pinned. Throws `tvmm::invalid_argument` for 0 bytes and `tvmm::out_of_memory` when the
  //! tiers together cannot hold it (the message gives the size asked and what is free).
  [[nodiscard]] Tensor allocate(std::size_t bytes, Hints hints = {});
  //! Frees memory returned by `Tensor::release()`. Throws `tvmm::invalid_argument`, changing nothing,
  //! for a pointer that is not a live released tvmm allocation (double free, foreign pointer).
  void free(void* ptr);
  //! Creates a stream on this pager's device.
  [[nodiscard]] Stream create_stream();
  //! Marks an iteration boundary (e.g. the start of each training step). With trace prefetch or the
  //! Belady policy, the pins between the first two marks are recorded and replayed afterwards.
  void mark_iteration();

  //! A snapshot of the counters.
  [[nodiscard]] Stats stats() const;
  //! Where the page holding `addr` lives now. Throws `tvmm::invalid_argument` outside live tensors.
  [[nodiscard]] Tier tier_of(const void* addr) const;
  //! Verifies the pager's internal invariants (budgets, frame and slot ownership, page states, pin
  //! counts, the small-object arena); throws `tvmm::device_error` describing the first violation.
  //! Correct while other threads use the pager: it takes the lock, and while it counts pins,
  //! lock-free pins and unpins wait for it (one pass over the page table). For tests and debugging.
  void check_invariants() const;
  //! The effective configuration (page size and budgets resolved).
  [[nodiscard]] const Config& config() const noexcept;
  //! Name of the device backend in use, e.g. "sim".
  [[nodiscard]] const char* backend_name() const noexcept;
  //! Where the host tier and the worker threads were placed, and why: the host tier's NUMA policy
  //! (config `host.numa`), whether binding it worked, and which CPUs the worker threads may use.
  [[nodiscard]] Placement placement() const;

 private:
  friend struct vmm::PagerAccess;
  explicit Pager(std::unique_ptr<vmm::PagerImpl> impl) noexcept;
  std::unique_ptr<vmm::PagerImpl> impl_;
};

}  // namespace tvmm
