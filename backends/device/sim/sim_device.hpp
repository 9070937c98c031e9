#pragma once
// The simulated GPU, faithful to the CUDA VMM model: a device VA reservation is an mmap(PROT_NONE)
// region; physical memory is a memfd of the device's capacity; a chunk is a run of its granules; map is
// mmap(MAP_FIXED|MAP_SHARED) of the chunk's file range (still PROT_NONE), set_access makes it
// read-write, unmap puts PROT_NONE anonymous memory back. Device addresses are host addresses, so host
// callables launched on a stream act as kernels.

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "backends/device/bus_backlog.hpp"
#include "backends/device/device_backend.hpp"
#include "backends/device/sim/sim_stream.hpp"
#include "backends/device/vmm_bookkeeping.hpp"
#include "common/range_allocator.hpp"
#include "tvmm/config.hpp"

namespace tvmm::device::sim {
class CopyEngine;
}

namespace tvmm::device {

class SimDevice final : public DeviceBackend {
 public:
  // capacity 0 in `config` means `device_budget` rounded up to the granularity.
  SimDevice(const SimDeviceConfig& config, std::size_t device_budget);
  ~SimDevice() override;
  //! Only the host time the simulator charges this thread for VMM calls (SimDeviceConfig::vmm_costs):
  //! its own bookkeeping is not a GPU's cost, so with the costs off the clock stands still.
  [[nodiscard]] std::chrono::steady_clock::time_point host_clock() const noexcept override {
    return std::chrono::steady_clock::time_point(sim::charged_host_time());
  }
  //! sim::host_time in the configured timing (with "model", the modelled time, not the wall clock),
  //! from this device's start on: with "model", a thread that has not yet waited for the device has
  //! only the costs of its calls for a time, and is dated at that start (streams' clocks begin after it).
  [[nodiscard]] std::chrono::steady_clock::time_point timeline_clock() const noexcept override {
    return std::max(sim::host_time(timing_), origin_);
  }
  //! From the device-to-host copies queued so far on a throttled bus (SimDeviceConfig::
  //! bandwidth_bytes_per_s), against the calling thread's host time in the configured timing.
  [[nodiscard]] std::optional<std::chrono::nanoseconds> d2h_backlog() const noexcept override;
  //! With timing "model" and SimDeviceConfig::disk set.
  [[nodiscard]] bool models_storage() const noexcept override {
    return timing_ == sim::Timing::model && (disk_.read_bytes_per_s > 0 || disk_.write_bytes_per_s > 0);
  }
  //! The modelled drive serves the I/O from the later of `submitted` and the end of the I/O it served
  //! before, for `bytes` over the direction's speed (nothing for a free direction).
  std::chrono::steady_clock::time_point storage_io_served(
      bool write, std::size_t bytes, std::chrono::steady_clock::time_point submitted) noexcept override;
  //! With timing "model", the calling thread's host time moves on to `end`.
  void storage_io_waited(std::chrono::steady_clock::time_point end) noexcept override;
  //! Bytes of managed memory allocated (alloc_managed) and not yet freed: what a leak check compares
  //! with what the caller holds.
  [[nodiscard]] std::size_t managed_bytes() const;

 private:
  Status do_reserve(std::size_t bytes, DevPtr* out) override;
  Status do_release_reservation(DevPtr base, std::size_t bytes) override;
  Status do_create_chunk(std::size_t bytes, ChunkLocation where, ChunkHandle* out) override;
  Status do_release_chunk(ChunkHandle chunk) override;
  Status do_map(DevPtr va, std::size_t bytes, ChunkHandle chunk) override;
  Status do_set_access(DevPtr va, std::size_t bytes) override;
  Status do_unmap(DevPtr va, std::size_t bytes) override;
  Status do_alloc_host(std::size_t bytes, void** out) override;
  Status do_free_host(void* ptr, std::size_t bytes) override;
  Status do_register_host(void* ptr, std::size_t bytes) override;
  Status do_unregister_host(void* ptr, std::size_t bytes) override;
  Status do_set_worker_cpus(const std::vector<unsigned>& cpus) override;
  Status do_alloc_managed(std::size_t bytes, void** out) override;
  Status do_free_managed(void* ptr, std::size_t bytes) override;
  Status do_advise_managed(void* ptr, std::size_t bytes, ChunkLocation where) override;
  Status do_prefetch_managed(void* ptr, std::size_t bytes, ChunkLocation where, StreamHandle stream) override;
  Status do_create_stream(StreamHandle* out) override;
  Status do_destroy_stream(StreamHandle stream) override;
  Status do_memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, StreamHandle stream) override;
  Status do_copy_device(DevPtr dst, DevPtr src, std::size_t bytes, CopyKind bus, StreamHandle stream) override;
  Status do_launch_host(StreamHandle stream, HostFn fn, void* user) override;
  Status do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) override;
  Status do_synchronize_stream(StreamHandle stream) override;
  Status do_synchronize_device() override;
  Status do_memory_info(std::size_t* free, std::size_t* total) override;
  Status do_create_event(EventKind kind, EventHandle* out) override;
  Status do_destroy_event(EventHandle event) override;
  Status do_record_event(EventHandle event, StreamHandle stream) override;
  Status do_stream_wait_event(StreamHandle stream, EventHandle event) override;
  Status do_query_event(EventHandle event) override;
  Status do_synchronize_event(EventHandle event) override;
  Status do_event_elapsed(EventHandle start, EventHandle end, std::chrono::nanoseconds* out) override;

  // Physical memory: one memfd per location. Host chunks (handle bit 63 set) model cuMemCreate at a
  // host NUMA node; their capacity is the machine's RAM.
  struct Memory {
    int fd = -1;
    common::RangeAllocator<std::size_t> granules;  // free byte ranges of fd
    explicit Memory(std::size_t bytes) : granules(bytes) {}
  };
  [[nodiscard]] Memory& memory_of(std::uint64_t handle) noexcept;

  mutable std::mutex mu_;  // mutable: d2h_backlog() reads d2h_queued_ under it
  Memory device_mem_;
  Memory host_mem_;
  VmmBookkeeping book_;  // reservations, chunks (handle = offset + 1, | host bit), mappings
  std::unique_ptr<sim::CopyEngine> h2d_;
  std::unique_ptr<sim::CopyEngine> d2h_;
  sim::Timing timing_ = sim::Timing::wall;
  const sim::DeviceClock::time_point origin_ = sim::DeviceClock::now();  // streams' clocks start after it
  SimDeviceConfig::VmmCosts costs_;  // host time each VMM call spends (charged after it succeeds)
  SimDeviceConfig::Disk disk_;       // the modelled NVMe drive (models_storage())
  std::mutex disk_mu_;
  sim::DeviceClock::time_point disk_free_ = origin_;  // when the modelled drive ends its latest I/O (disk_mu_)
  std::map<std::uintptr_t, std::size_t> registered_;  // register_host ranges (under mu_)
  std::map<std::uintptr_t, std::size_t> managed_;     // alloc_managed ranges (under mu_)
  [[nodiscard]] bool managed_range(const void* ptr, std::size_t bytes) const;  // under mu_
  // The device-to-host copies queued so far, each from its queueing host time (under mu_): what a
  // set_access waits for (VmmCosts::set_access_d2h_wait) and what d2h_backlog() reports. Kept only on
  // a throttled bus.
  BusBacklog d2h_queued_;
  void note_d2h(std::size_t bytes);
  // A VMM call succeeded: releases mu_ (held by `lk`), then spends the call's modelled host time.
  void charge(std::unique_lock<std::mutex>& lk, std::chrono::nanoseconds cost);
  // The calling thread spends a call's modelled host time (VmmCosts; nothing for a cost of 0).
  void spend(std::chrono::nanoseconds cost) const;
  std::mutex streams_mu_;  // guards streams_ and worker_cpus_
  std::set<sim::SimStream*> streams_;
  std::vector<unsigned> worker_cpus_;  // empty: unbound
};

}  // namespace tvmm::device
