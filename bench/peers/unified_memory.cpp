#include "bench/peers/unified_memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif

namespace tvmm::bench {
namespace {

// A tensor's managed allocation: at least a byte, rounded up to the granularity.
std::size_t managed_size(std::size_t bytes, std::size_t granularity) {
  return (std::max<std::size_t>(bytes, 1) + granularity - 1) / granularity * granularity;
}

}  // namespace

UnifiedMemoryPlan plan_unified_memory(const Workload& w, std::size_t device_budget, std::size_t free_bytes,
                                      std::size_t granularity) {
  UnifiedMemoryPlan plan;
  if (granularity == 0) granularity = 1;
  for (auto bytes : w.tensor_bytes) plan.managed_bytes += managed_size(bytes, granularity);
  if (device_budget == 0) {
    plan.skipped = "the device budget is zero";
    return plan;
  }
  if (device_budget + kUnifiedMemoryHeadroom >= free_bytes) {
    plan.skipped = "the device budget (" + format_bytes(device_budget) + ") and " +
                   format_bytes(kUnifiedMemoryHeadroom) + " of headroom are not below the card's free memory (" +
                   format_bytes(free_bytes) + "): nothing to oversubscribe";
    return plan;
  }
  if (plan.managed_bytes + 2 * kUnifiedMemoryHeadroom > free_bytes) {
    plan.skipped = "the workload's " + format_bytes(plan.managed_bytes) + " of managed memory and " +
                   format_bytes(2 * kUnifiedMemoryHeadroom) + " of headroom exceed the card's free memory (" +
                   format_bytes(free_bytes) +
                   "); asking for more managed memory than the card has free can hang the machine";
    return plan;
  }
  plan.balloon_bytes = (free_bytes - device_budget - kUnifiedMemoryHeadroom) / granularity * granularity;
  return plan;
}

#if defined(TVMM_HAVE_CUDA)
namespace {

// Everything the run takes from the GPU, given back in reverse on every path out.
class Session {
 public:
  explicit Session(device::DeviceBackend& dev) : dev_(dev) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (stream_ != nullptr) (void)dev_.synchronize_stream(stream_);
    for (auto* e : events_) (void)dev_.destroy_event(e);
    if (stream_ != nullptr) (void)dev_.destroy_stream(stream_);
    for (const auto& [p, bytes] : managed_) (void)dev_.free_managed(p, bytes);
    for (auto c : balloon_) (void)dev_.release_chunk(c);
  }

  static void check(device::Status st, const std::string& what) {
    if (!st.ok()) {
      throw device_error("tvmm-bench: Unified Memory peer: " + what + " failed: " + device::errc_name(st.code),
                         device::errc_name(st.code));
    }
  }

  void* managed(std::size_t bytes) {
    void* p = nullptr;
    check(dev_.alloc_managed(bytes, &p), "cuMemAllocManaged of " + format_bytes(bytes));
    managed_.emplace_back(p, bytes);
    return p;
  }

  // Takes device memory in chunks of up to 1 GiB (halving a chunk the driver refuses, down to the
  // granularity) until `bytes` are taken or nothing more can be; returns the bytes taken.
  std::size_t inflate(std::size_t bytes, std::size_t granularity) {
    std::size_t taken = 0, chunk = std::size_t{1} << 30;
    chunk = std::max(chunk / granularity * granularity, granularity);
    while (taken + granularity <= bytes) {
      const std::size_t want = std::min(chunk, (bytes - taken) / granularity * granularity);
      device::ChunkHandle c;
      if (dev_.create_chunk(want, &c, device::ChunkLocation::device).ok()) {
        balloon_.push_back(c);
        taken += want;
      } else if (want > granularity) {
        chunk = std::max(want / 2 / granularity * granularity, granularity);
      } else {
        break;
      }
    }
    return taken;
  }

  device::StreamHandle stream() {
    if (stream_ == nullptr) check(dev_.create_stream(&stream_), "creating a stream");
    return stream_;
  }

  device::EventHandle event() {
    device::EventHandle e = nullptr;
    check(dev_.create_event(&e, device::EventKind::timing), "creating an event");
    events_.push_back(e);
    return e;
  }

 private:
  device::DeviceBackend& dev_;
  std::vector<std::pair<void*, std::size_t>> managed_;
  std::vector<device::ChunkHandle> balloon_;
  device::StreamHandle stream_ = nullptr;
  std::vector<device::EventHandle> events_;
};

device::DevPtr va(void* p) { return reinterpret_cast<device::DevPtr>(p); }

}  // namespace

UnifiedMemoryResult run_unified_memory(const Workload& w, const UnifiedMemoryOptions& o) {
  UnifiedMemoryResult r;
  std::unique_ptr<device::DeviceBackend> owner;
  try {
    owner = device::make_cuda_device(o.ordinal);
  } catch (const std::exception& e) {
    r.skipped = std::string("no CUDA device: ") + e.what();
    return r;
  }
  device::DeviceBackend& dev = *owner;
  if (!dev.properties().managed) {
    r.skipped = "the GPU or its driver has no concurrent managed memory (prefetch and advice)";
    return r;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  Session::check(dev.memory_info(&free_bytes, &total_bytes), "cuMemGetInfo");
  const std::size_t granularity = dev.properties().granularity;
  const auto plan = plan_unified_memory(w, o.device_budget, free_bytes, granularity);
  r.managed_bytes = plan.managed_bytes;
  if (!plan.skipped.empty()) {
    r.skipped = plan.skipped;
    return r;
  }

  Session s(dev);
  const auto stream = s.stream();
  // The tensors and the mismatch counter first, while the card still has its free memory.
  std::vector<void*> ts;
  ts.reserve(w.tensor_bytes.size());
  for (auto bytes : w.tensor_bytes) ts.push_back(s.managed(managed_size(bytes, granularity)));
  auto* counter = static_cast<std::uint64_t*>(s.managed(granularity));
  *counter = 0;  // managed memory is host-writable: no kernel has run on it yet
  r.balloon_bytes = s.inflate(plan.balloon_bytes, granularity);
  Session::check(dev.memory_info(&r.device_free_bytes, &total_bytes), "cuMemGetInfo");
  if (r.device_free_bytes > o.device_budget + 2 * kUnifiedMemoryHeadroom) {
    r.skipped = "the balloon could take only " + format_bytes(r.balloon_bytes) + " of the " +
                format_bytes(plan.balloon_bytes) + " planned: " + format_bytes(r.device_free_bytes) +
                " stay free, more than the budget (" + format_bytes(o.device_budget) + ")";
    return r;
  }

  // The same touches as tvmm's GPU runs: every write pin fills a new seed, every read checks the last.
  std::vector<std::uint64_t> seeds(ts.size(), 0);
  std::uint64_t next_seed = 1;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    seeds[i] = next_seed++;
    const auto filled = dev.fill(stream, va(ts[i]), w.tensor_bytes[i], seeds[i]);
    if (filled.code == device::Errc::not_supported) {
      r.skipped = "the GPU kernels that touch the managed memory cannot run: " + dev.kernels_unavailable();
      return r;
    }
    Session::check(filled, "the fill kernel");
  }
  const auto start = s.event(), stop = s.event();
  double device_secs = 0;
  for (int it = 0; it < o.iterations; ++it) {
    Session::check(dev.record_event(start, stream), "recording an event");
    for (const auto& k : w.step) {
      for (const auto& p : k.pins) {
        const auto bytes = w.tensor_bytes[p.tensor];
        if (p.access != Access::write) {
          Session::check(dev.verify(stream, va(ts[p.tensor]), bytes, seeds[p.tensor], va(counter)),
                         "the verify kernel");
          r.verified_bytes += bytes;
        }
        if (p.access != Access::read) {
          seeds[p.tensor] = next_seed++;
          Session::check(dev.fill(stream, va(ts[p.tensor]), bytes, seeds[p.tensor]), "the fill kernel");
        }
      }
      Session::check(dev.launch_busy(stream, std::chrono::nanoseconds(static_cast<std::int64_t>(k.compute_us * 1e3))),
                     "the busy kernel");
    }
    Session::check(dev.record_event(stop, stream), "recording an event");
    Session::check(dev.synchronize_stream(stream), "synchronizing the stream");
    std::chrono::nanoseconds elapsed{};
    Session::check(dev.event_elapsed(start, stop, &elapsed), "timing a step");
    if (it >= o.warmup) device_secs += std::chrono::duration<double>(elapsed).count();
  }
  r.mismatched_bytes = *counter;  // the stream is synchronized: the host may read it
  r.step_time_s = device_secs / std::max(1, o.iterations - o.warmup);
  r.ran = true;
  return r;
}

#else

UnifiedMemoryResult run_unified_memory(const Workload& /*w*/, const UnifiedMemoryOptions& /*o*/) {
  UnifiedMemoryResult r;
  r.skipped = "this build has no CUDA backend (the CUDA toolkit was not found)";
  return r;
}

#endif

}  // namespace tvmm::bench
