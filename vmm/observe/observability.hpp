#pragma once
// What the pager reports about itself, in one owner: the counters behind Stats, the stats file
// (stats.file), the pin log (pin_log.file) and the timeline for Perfetto (timeline.file). The pager
// calls it at the points it observes (a pin, an iteration mark, a stall, an eviction, an NVMe batch)
// and reads the counters for Stats; none of these calls changes what the pager does, and none throws:
// an output that fails loses that record, never the operation.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "backends/device/device_backend.hpp"
#include "common/function_ref.hpp"
#include "tvmm/config.hpp"
#include "tvmm/pager.hpp"
#include "tvmm/stats.hpp"
#include "vmm/observe/output.hpp"
#include "vmm/observe/timeline.hpp"

namespace tvmm::vmm {

class Observability {
 public:
  using Clock = std::chrono::steady_clock;

  Observability() = default;
  ~Observability();
  Observability(const Observability&) = delete;
  Observability& operator=(const Observability&) = delete;

  //! The counters behind Stats (relaxed atomics: the hot paths add to them directly).
  struct Counters {
    std::atomic<std::uint64_t> pins{0}, hits{0}, misses{0}, evictions{0}, prefetched{0}, read_ahead{0}, stall_ns{0},
        allocations{0}, live_bytes{0}, live_tensors{0}, clean_evictions{0}, kept_mappings{0}, remap_ns{0},
        written_behind{0};
  };
  Counters counters;

  //! Opens the outputs `config` names (a bad path throws config_error now, not at exit). Called once,
  //! at the end of the pager's construction: the pin log's and the timeline's clocks start here, and a
  //! pager that fails to build leaves no file behind. `device` dates the timeline's events
  //! (DeviceBackend::timeline_clock) and outlives this.
  void open(const Config& config, const device::DeviceBackend& device);

  //! A moment by both clocks: the wall clock (what Stats::stall_ns counts) and the timeline's (the
  //! default time point when there is no timeline).
  struct Moment {
    Clock::time_point wall, timeline;
  };
  [[nodiscard]] Moment now() const noexcept {
    return {Clock::now(), timeline_ ? timeline_->now() : Clock::time_point{}};
  }

  //! The timeline, or null when none was asked for (the transfer engine records page moves in it).
  [[nodiscard]] Timeline* timeline() const noexcept { return timeline_.get(); }

  //! A pin of `pages` pages of tensor `tensor` (0 pages: in the small-object arena) with `access`;
  //! `hit`: every page was resident. Logged in the pin log and, unless it is an arena pin, as an
  //! instant on the timeline's lane of `stream` (or of the pinning thread for a host pin).
  void pin(std::uint64_t tensor, std::uint32_t pages, Access access, bool hit, device::StreamHandle stream) noexcept {
    if (pin_log_ || timeline_) record_pin(tensor, pages, access, hit, stream);  // the hit path: usually neither
  }
  //! An iteration mark (Pager::mark_iteration).
  void iteration() noexcept;
  //! The calling thread waited for the pager from `since` until now: counted, and a span on its lane.
  void stall(Moment since) noexcept;
  //! Pages evicted from the device just now (page numbers).
  void evicted(std::span<const std::uint32_t> pages) noexcept;
  //! An NVMe batch of `pages` pages ("nvme write" or "nvme read") ran from `start` until now.
  void nvme_batch(const char* what, Moment start, std::size_t pages) noexcept;
  //! A stream was destroyed: a later stream at the same handle gets a lane of its own.
  void stream_destroyed(device::StreamHandle stream) noexcept;

  //! At the pager's destruction, while it can still report: writes the stats `final_stats` returns to
  //! the stats file (called only if there is one) and closes it and the pin log.
  void finish(common::FunctionRef<Stats()> final_stats) noexcept;
  //! After the last copy has completed: writes the timeline.
  void close_timeline() noexcept;

 private:
  void record_pin(std::uint64_t tensor, std::uint32_t pages, Access access, bool hit,
                  device::StreamHandle stream) noexcept;
  // Streams are numbered from 1 in the order they first pin (the timeline's lane names).
  std::uint32_t stream_number(device::StreamHandle stream);

  std::unique_ptr<OutputFile> stats_out_;  // stats_file: written by finish()
  std::unique_ptr<PinLog> pin_log_;        // pin_log_file
  std::unique_ptr<Timeline> timeline_;     // timeline_file
  std::mutex stream_numbers_mu_;
  std::unordered_map<device::StreamHandle, std::uint32_t> stream_numbers_;
  std::uint32_t streams_numbered_ = 0;
};

}  // namespace tvmm::vmm
