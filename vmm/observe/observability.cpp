#include "vmm/observe/observability.hpp"

#include <cstdio>
#include <string>

namespace tvmm::vmm {

void Observability::open(const Config& config, const device::DeviceBackend& device) {
  if (!config.stats_file.empty()) stats_out_ = std::make_unique<OutputFile>(config.stats_file, "stats.file");
  if (!config.pin_log_file.empty()) pin_log_ = std::make_unique<PinLog>(config.pin_log_file);
  if (!config.timeline_file.empty())
    timeline_ = std::make_unique<Timeline>(config.timeline_file, [&device] { return device.timeline_clock(); });
}

Observability::~Observability() = default;

void Observability::record_pin(std::uint64_t tensor, std::uint32_t pages, Access access, bool hit,
                               device::StreamHandle stream) noexcept {
  if (pin_log_) pin_log_->pin(tensor, pages, access, hit);
  if (!timeline_ || pages == 0) return;
  try {
    const std::uint32_t lane = stream != nullptr ? timeline_->lane("stream " + std::to_string(stream_number(stream)))
                                                 : timeline_->thread_lane();
    timeline_->instant(lane, hit ? "pin (hit)" : "pin (miss)", timeline_->now(),
                       "\"tensor\": " + std::to_string(tensor) + ", \"pages\": " + std::to_string(pages));
  } catch (...) {  // the timeline misses this pin
  }
}

void Observability::iteration() noexcept {
  if (pin_log_) pin_log_->iteration();
}

void Observability::stall(Moment since) noexcept {
  const auto now = Clock::now();
  counters.stall_ns.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - since.wall).count()),
      std::memory_order_relaxed);
  if (!timeline_) return;
  try {
    timeline_->span(timeline_->thread_lane(), "pin stall", since.timeline, timeline_->now());
  } catch (...) {  // a lane name could not be allocated: the timeline misses this stall
  }
}

void Observability::evicted(std::span<const std::uint32_t> pages) noexcept {
  if (!timeline_) return;
  const auto now = timeline_->now();
  try {
    for (const std::uint32_t page : pages) {
      timeline_->instant(timeline_->evictions, "evict", now, "\"page\": " + std::to_string(page));
    }
  } catch (...) {  // out of memory for the arguments: the timeline misses these evictions
  }
}

void Observability::nvme_batch(const char* what, Moment start, std::size_t pages) noexcept {
  if (!timeline_) return;
  try {
    timeline_->span(timeline_->nvme, what, start.timeline, timeline_->now(), "\"pages\": " + std::to_string(pages));
  } catch (...) {  // the timeline misses this batch
  }
}

std::uint32_t Observability::stream_number(device::StreamHandle s) {
  std::lock_guard lk(stream_numbers_mu_);
  if (const auto it = stream_numbers_.find(s); it != stream_numbers_.end()) return it->second;
  return stream_numbers_.emplace(s, ++streams_numbered_).first->second;
}

void Observability::stream_destroyed(device::StreamHandle s) noexcept {
  if (!timeline_) return;
  std::lock_guard lk(stream_numbers_mu_);
  stream_numbers_.erase(s);
}

void Observability::finish(common::FunctionRef<Stats()> final_stats) noexcept {
  if (stats_out_) {
    try {
      std::fprintf(stats_out_->get(), "%s\n", to_json(final_stats()).c_str());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tvmm: writing the stats file %s failed: %s\n", stats_out_->path().c_str(), ex.what());
    }
    stats_out_->close();
  }
  if (pin_log_) pin_log_->close();
}

void Observability::close_timeline() noexcept {
  if (timeline_) timeline_->close();
}

}  // namespace tvmm::vmm
