#include "vmm/core/device_tier.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "vmm/core/check.hpp"

namespace tvmm::vmm {

DeviceTier::DeviceTier(device::DeviceBackend& dev, std::size_t page_size, std::uint32_t budget_frames,
                       device::ChunkLocation where, Window window)
    : dev_(dev), page_size_(page_size), budget_(budget_frames), where_(where) {
  chunks_.reserve(budget_frames);
  free_.reserve(budget_frames);
  free_at_.assign(budget_frames, kNotFree);
  gone_.reserve(budget_frames);  // release_idle (noexcept) never allocates
  if (window == Window::mapped) {
    const std::size_t bytes = std::size_t{budget_frames} * page_size_;
    const device::Status st = dev_.reserve(bytes, &window_);
    if (st.code == device::Errc::out_of_memory) {
      // The window spans the whole budget: a budget beyond the address space the backend can reserve.
      throw out_of_memory("cannot reserve " + format_bytes(bytes) + " of device address space for the " +
                          std::to_string(budget_frames) + " frames of device.budget; lower device.budget");
    }
    TVMM_CHECK(st);
  }
}

DeviceTier::~DeviceTier() {
  bool all = true;
  for (std::uint32_t f = 0; f < chunks_.size(); ++f) {
    if (std::find(gone_.begin(), gone_.end(), f) != gone_.end()) continue;
    all = destroy(f, where_ == device::ChunkLocation::host ? "releasing a host-located frame"
                                                           : "releasing a device frame") &&
          all;
  }
  // A reservation with a mapping left in it cannot go (cuMemAddressFree needs it unmapped).
  if (window_ != 0 && all) {
    dev_.warn_failed(dev_.release_reservation(window_, std::size_t{budget_} * page_size_),
                     "releasing the frames' address reservation");
  }
}

bool DeviceTier::create(std::uint32_t f, device::ChunkHandle* out) {
  const device::Status st = dev_.create_chunk(page_size_, out, where_);
  if (st.code == device::Errc::out_of_memory) return false;
  TVMM_CHECK(st);
  if (window_ == 0) return true;
  // Mapped once for the frame's life; one memory may be mapped at several addresses (CUDA Programming
  // Guide, Virtual Memory Management, "Virtual Aliasing Support"), so the tensor addresses mapped to it
  // later see the same bytes. cuMemMap's mappings start with no access (cuda.h, cuMemSetAccess).
  const device::DevPtr at = frame_addr(f);
  try {
    TVMM_CHECK(dev_.map(at, page_size_, *out));
    try {
      TVMM_CHECK(dev_.set_access(at, page_size_));
    } catch (...) {
      dev_.warn_failed(dev_.unmap(at, page_size_), "unmapping a frame whose access grant failed");
      throw;
    }
  } catch (...) {
    dev_.warn_failed(dev_.release_chunk(*out), "releasing a frame that could not be mapped");
    throw;
  }
  return true;
}

bool DeviceTier::destroy(std::uint32_t f, const char* what) noexcept {
  if (window_ != 0) {
    if (const device::Status st = dev_.unmap(frame_addr(f), page_size_); !st.ok()) {
      dev_.warn_failed(st, "unmapping a frame's own address");
      return false;
    }
  }
  if (const device::Status st = dev_.release_chunk(chunks_[f]); !st.ok()) {
    dev_.warn_failed(st, what);
    return false;
  }
  return true;
}

std::uint32_t DeviceTier::release_idle(std::uint32_t frames) noexcept {
  if (window_ != 0) return 0;  // see the header: only tiers without a frame window give memory back
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

std::optional<std::uint32_t> DeviceTier::try_acquire(Retry retry) {
  std::uint32_t f;
  if (!free_.empty()) {
    f = pop_free();
  } else if (may_create(retry)) {
    device::ChunkHandle c;
    f = gone_.empty() ? static_cast<std::uint32_t>(chunks_.size())
                      : gone_.back();  // a number given back, else the next
    if (!create(f, &c)) {
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
    short_ = false;
    retry_at_ = {};        // the next frame may be created when needed, too
    if (!gone_.empty()) {  // a frame number whose memory was given back
      gone_.pop_back();
      chunks_[f] = c;
    } else {
      chunks_.push_back(c);  // never reallocates: reserved for the budget
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
