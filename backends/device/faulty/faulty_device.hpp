#pragma once
// A device backend adaptor that injects failures into another backend's primitives, by rule: fail the
// Nth next call of an operation once, or every call until cleared. Used by the tests to drive the
// pager's failure paths (a failed map, copy, unmap or event record must leave every page readable
// where it was, and the error must reach the caller).

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backends/device/device_backend.hpp"

namespace tvmm::device {

class FaultyDevice final : public DeviceBackend {
 public:
  //! Operations that can be made to fail.
  enum class Op : std::uint8_t {
    reserve,
    create_chunk,
    map,
    set_access,
    unmap,
    copy_in,   //!< memcpy_async host-to-device
    copy_out,  //!< memcpy_async device-to-host
    record_event,
    stream_wait_event,
    synchronize_event,
    //! cuEventQuery: made to answer `not_ready` (Errc::not_ready), it models a query made a moment
    //! before the event completed, which any query may be.
    query_event,
    //! cuStreamSynchronize (the pager's drain of its copy streams on a failure path).
    synchronize_stream,
    count_
  };

  explicit FaultyDevice(std::unique_ptr<DeviceBackend> inner);
  ~FaultyDevice() override;

  //! The call of `op` after `skip` more successful ones fails with `err`, once.
  void fail_once(Op op, Errc err, unsigned skip = 0);
  //! Every call of `op` fails with `err` until clear().
  void fail_always(Op op, Errc err);
  //! Removes every rule.
  void clear();
  //! Calls of `op` seen so far (failed or not).
  [[nodiscard]] std::uint64_t calls(Op op) const;
  //! Failures injected so far.
  [[nodiscard]] std::uint64_t injected() const;
  //! Calls per operation (indexed by Op), shared so that they stay readable once the device is gone:
  //! a test reads what a pager's destructor called. Read them only while no call runs.
  using Counts = std::array<std::uint64_t, static_cast<std::size_t>(Op::count_)>;
  [[nodiscard]] std::shared_ptr<const Counts> counts() const { return calls_; }

  //! Holds the copies of `op` (copy_in or copy_out) queued from now on: each runs only once released,
  //! in queue order, behind a host step on its own stream (later work on that stream waits too). Lets
  //! tests fix the order in which transfers complete. Release every held copy before the streams are
  //! synchronized or destroyed (the pager's destructor does both).
  void hold(Op op);
  //! Lets `n` more held copies of `op` run; release_all() lets every one run and stops holding.
  void release(Op op, std::uint64_t n);
  void release_all();
  //! Copies of `op` queued while held and not yet released.
  [[nodiscard]] std::uint64_t held(Op op) const;

 private:
  struct Rule {
    enum class Mode : std::uint8_t { none, once, always } mode = Mode::none;
    unsigned skip = 0;
    Errc err = Errc::ok;
  };
  // Counts the call; true (with the error) when a rule makes it fail.
  bool should_fail(Op op, Errc* err);

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
  // A copy's fault rule and gate (both copy primitives go through it): fails, or queues the wait for
  // the gate's ticket on `stream`.
  Status before_copy(CopyKind kind, StreamHandle stream);
  Status do_launch_host(StreamHandle stream, HostFn fn, void* user) override;
  Status do_launch_busy(StreamHandle stream, std::chrono::nanoseconds duration) override;
  Status do_fill(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed) override;
  Status do_verify(StreamHandle stream, DevPtr va, std::size_t bytes, std::uint64_t seed, DevPtr bad) override;
  [[nodiscard]] std::string kernels_unavailable() override { return inner_->kernels_unavailable(); }
  [[nodiscard]] std::chrono::steady_clock::time_point host_clock() const noexcept override {
    return inner_->host_clock();
  }
  [[nodiscard]] std::chrono::steady_clock::time_point timeline_clock() const noexcept override {
    return inner_->timeline_clock();
  }
  [[nodiscard]] std::optional<std::chrono::nanoseconds> d2h_backlog() const noexcept override {
    return inner_->d2h_backlog();
  }
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

  struct Gate {  // copies of one direction, held until released
    bool holding = false;
    std::uint64_t queued = 0;   // tickets handed out
    std::uint64_t allowed = 0;  // tickets below this may run
  };
  struct Ticket {
    FaultyDevice* self;
    std::size_t gate;
    std::uint64_t number;
  };
  static void wait_ticket(void* ticket);

  std::unique_ptr<DeviceBackend> inner_;
  mutable std::mutex mu_;
  std::condition_variable gate_cv_;
  std::array<Gate, 2> gates_{};  // copy_in, copy_out
  std::array<Rule, static_cast<std::size_t>(Op::count_)> rules_{};
  std::shared_ptr<Counts> calls_ = std::make_shared<Counts>();
  std::uint64_t injected_ = 0;
};

}  // namespace tvmm::device
