#include "vmm/core/device_tier.hpp"

#include <algorithm>
#include <cstdio>

#include "vmm/core/check.hpp"

namespace tvmm::vmm {

DeviceTier::DeviceTier(device::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
                       device::ChunkLocation where)
    : dev_(dev), page_size_(page_size), budget_(budget_frames), where_(where) {
  chunks_.reserve(budget_frames);
  free_.reserve(budget_frames);
  free_at_.assign(budget_frames, kNotFree);
  gone_.reserve(budget_frames);  // release_idle (noexcept) never allocates
}

DeviceTier::~DeviceTier() {
  for (std::uint32_t f = 0; f < chunks_.size(); ++f) {
    if (std::find(gone_.begin(), gone_.end(), f) != gone_.end()) continue;
    dev_.warn_failed(dev_.release_chunk(chunks_[f]), where_ == device::ChunkLocation::host
                                                         ? "releasing a host-located frame"
                                                         : "releasing a device frame");
  }
}

std::uint32_t DeviceTier::release_idle(std::uint32_t frames) noexcept {
  std::uint32_t done = 0;
  while (done < frames && !free_.empty()) {
    const std::uint32_t f = free_.back();
    if (const device::Status st = dev_.release_chunk(chunks_[f]); !st.ok()) {
      dev_.warn_failed(st, "giving a frame's memory back");
      break;  // the frame stays idle, with its memory
    }
    (void)pop_free();
    gone_.push_back(f);
    ++done;
  }
  if (done != 0) {
    short_ = true;
    retry_at_ = Clock::now() + std::chrono::seconds(1);
  }
  return done;
}

std::optional<std::uint32_t> DeviceTier::try_acquire() {
  std::uint32_t f;
  if (!free_.empty()) {
    f = pop_free();
  } else if (may_create()) {
    device::ChunkHandle c;
    const device::Status st = dev_.create_chunk(page_size_, &c, where_);
    if (st.code == device::Errc::out_of_memory) {
      // Something took the memory since the budget was checked against it (another process, or the
      // program's own allocations): no frame now. The caller evicts into the frames that exist, and the
      // tier tries again a second later (at once while it has none), so a shortage costs one failed
      // creation per second, and memory given back is used again.
      if (!short_) {
        std::fprintf(stderr,
                     "tvmm: the device has no memory for another %s frame: working with the %zu frames there are of "
                     "the %u the budget allows (other allocations hold the rest); trying again every second\n",
                     where_ == device::ChunkLocation::host ? "host-located" : "device",
                     static_cast<std::size_t>(created()), budget_);
      }
      short_ = true;
      retry_at_ = Clock::now() + std::chrono::seconds(1);
      return std::nullopt;
    }
    TVMM_CHECK(st);
    short_ = false;
    retry_at_ = {};        // the next frame may be created when needed, too
    if (!gone_.empty()) {  // a frame number whose memory was given back
      f = gone_.back();
      gone_.pop_back();
      chunks_[f] = c;
    } else {
      f = static_cast<std::uint32_t>(chunks_.size());
      chunks_.push_back(c);
    }
  } else {
    return std::nullopt;
  }
  ++in_use_;
  peak_ = std::max(peak_, in_use_);
  return f;
}

std::uint32_t DeviceTier::pop_free() noexcept {
  const std::uint32_t f = free_.back();
  free_.pop_back();
  free_at_[f] = kNotFree;
  return f;
}

void DeviceTier::push_free(std::uint32_t frame) noexcept {
  free_at_[frame] = static_cast<std::uint32_t>(free_.size());
  free_.push_back(frame);  // never reallocates: reserved for the budget
}

bool DeviceTier::take(std::uint32_t frame) noexcept {
  if (frame >= free_at_.size() || free_at_[frame] == kNotFree) return false;
  const std::uint32_t at = free_at_[frame];
  const std::uint32_t last = free_.back();
  free_[at] = last;
  free_at_[last] = at;
  free_.pop_back();
  free_at_[frame] = kNotFree;
  ++in_use_;
  peak_ = std::max(peak_, in_use_);
  return true;
}

void DeviceTier::release(std::uint32_t frame) noexcept {
  push_free(frame);
  --in_use_;
}

}  // namespace tvmm::vmm
