// The device-backend conformance suite: one suite, instantiated for every backend in the device
// registry (backends/device/registry.cpp), as Registered/DeviceBackendConformance.<test>/<backend>.
// Built into tvmm_tests for the backends that need no GPU (the simulator), and again into
// tvmm_gpu_tests (TVMM_CONFORMANCE_CUDA, ctest label "gpu", and on the CUDA emulator) for those that
// do (CUDA), where every test skips with the reason when there is no driver or GPU.
// Each test checks a contract in backends/device/device_backend.hpp.
// Sections: the conformance suite (every backend); the CUDA backend's kernels (TVMM_CONFORMANCE_CUDA
// only). The simulator's and the FaultyDevice adaptor's own tests are in sim_device_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "backends/device/device_memory.hpp"
#if defined(TVMM_CONFORMANCE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif
#include "backends/device/registry.hpp"
#include "test_support.hpp"

using namespace tvmm;
using namespace tvmm::device;

namespace {

// The registered backends this binary checks (backends/device/registry.cpp): those that need a GPU in
// tvmm_gpu_tests, the others in tvmm_tests. A new backend is picked up by its registry line.
std::vector<const DeviceBackendInfo*> backends_under_test() {
#if defined(TVMM_CONFORMANCE_CUDA)
  constexpr bool gpu = true;
#else
  constexpr bool gpu = false;
#endif
  std::vector<const DeviceBackendInfo*> out;
  for (const auto& b : device_backends()) {
    if (b.needs_gpu == gpu) out.push_back(&b);
  }
  return out;
}

class DeviceBackendConformance : public ::testing::TestWithParam<const DeviceBackendInfo*> {
 protected:
  void SetUp() override {
    Config c;  // a small simulated device (a real GPU has its own capacity and granularity)
    c.sim.granularity = 64 * KiB;
    c.sim.capacity = c.device_budget = 8 * c.sim.granularity;
    c.cuda_device = 0;
    try {
      dev_ = GetParam()->make(c);
    } catch (const device_error& e) {
      if (!GetParam()->needs_gpu) throw;
      TVMM_SKIP_WITHOUT_GPU("no " << GetParam()->name << " device here: " << e.what());
    }
    g_ = dev_->properties().granularity;
  }
  std::unique_ptr<DeviceBackend> dev_;
  std::size_t g_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Registered, DeviceBackendConformance, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& backend) { return std::string(backend.param->name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceBackendConformance);

TEST_P(DeviceBackendConformance, ReservationIsAlignedAndReleasable) {
  auto& dev = *this->dev_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * this->g_, &va).ok());
  EXPECT_EQ(va % this->g_, 0u);
  EXPECT_TRUE(dev.release_reservation(va, 4 * this->g_).ok());
  EXPECT_EQ(dev.reserve(this->g_ + 1, &va).code, Errc::invalid_value);
}

TEST_P(DeviceBackendConformance, MapSetAccessUnmapRoundTrip) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * g, &va).ok());
  ChunkHandle a, b;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  EXPECT_EQ(dev.map(va, g, b).code, Errc::already_mapped);
  // One access grant over a run of two mappings.
  ASSERT_TRUE(dev.set_access(va, 2 * g).ok());
  EXPECT_EQ(dev.set_access(va + 2 * g, g).code, Errc::not_mapped);
  if (dev.properties().host_accessible) {
    test::fill(reinterpret_cast<void*>(va), 2 * g, 11);
    // Data lives in the chunk: unmapping and mapping the chunk elsewhere shows the same bytes.
    ASSERT_TRUE(dev.unmap(va, g).ok());
    ASSERT_TRUE(dev.map(va + 3 * g, g, a).ok());
    ASSERT_TRUE(dev.set_access(va + 3 * g, g).ok());
    EXPECT_EQ(test::mismatches(reinterpret_cast<void*>(va + 3 * g), g, 11), 0u);
    ASSERT_TRUE(dev.unmap(va + 3 * g, g).ok());
  } else {
    ASSERT_TRUE(dev.unmap(va, g).ok());
  }
  EXPECT_EQ(dev.unmap(va, g).code, Errc::not_mapped);
  EXPECT_EQ(dev.release_chunk(b).code, Errc::invalid_value);  // still mapped
  ASSERT_TRUE(dev.unmap(va + g, g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_reservation(va, 4 * g).ok());
}

// The pager frees a tensor's pages with one unmap per run of adjacent mappings (PagerImpl::unmap_range):
// one call over whole mappings made by separate map calls. cuda.h forbids only a sub-range of one
// mapping ("cuMemUnmap cannot unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap").
TEST_P(DeviceBackendConformance, OneUnmapCoversARunOfMappings) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(4 * g, &va).ok());
  ChunkHandle a, b, c;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.create_chunk(2 * g, &c).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  ASSERT_TRUE(dev.map(va + 2 * g, 2 * g, c).ok());
  ASSERT_TRUE(dev.set_access(va, 4 * g).ok());
  EXPECT_TRUE(dev.unmap(va, 4 * g).ok());  // three mappings, one call
  // Every page is free again: each maps anew (and none is still mapped).
  EXPECT_EQ(dev.unmap(va, g).code, Errc::not_mapped);
  ASSERT_TRUE(dev.map(va, g, b).ok());
  ASSERT_TRUE(dev.map(va + g, 2 * g, c).ok());
  EXPECT_TRUE(dev.unmap(va, 3 * g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, 4 * g).ok());
}

// The contract's kernels: a fill and a verify run in stream order, or are not_supported, and then the
// backend says why (the simulator has none: its workloads check bytes on the host). Bad arguments are
// refused before reaching the backend.
TEST_P(DeviceBackendConformance, KernelsRunOrSayWhyNot) {
  auto& dev = *this->dev_;
  DeviceMemory memory(dev);  // one accessible granule
  ASSERT_TRUE(memory.open().ok());
  const DevPtr va = memory.va();
  const auto g = memory.size();
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EXPECT_EQ(dev.fill(nullptr, va, g, 1).code, Errc::invalid_value);
  EXPECT_EQ(dev.verify(s, va, g, 1, 0).code, Errc::invalid_value);
  const Status filled = dev.fill(s, va, g / 2, 1);
  if (filled.code == Errc::not_supported) {
    EXPECT_FALSE(dev.kernels_unavailable().empty());
    EXPECT_EQ(dev.verify(s, va, g / 2, 1, va + g / 2).code, Errc::not_supported);
  } else {
    EXPECT_TRUE(filled.ok()) << dev.describe(filled);
  }
  EXPECT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, MapOutsideReservationIsRejected) {
  auto& dev = *this->dev_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(2 * this->g_, &va).ok());
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(this->g_, &c).ok());
  EXPECT_EQ(dev.map(va + 2 * this->g_, this->g_, c).code, Errc::invalid_value);
  EXPECT_EQ(dev.map(va + 1, this->g_, c).code, Errc::invalid_value);  // misaligned
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, 2 * this->g_).ok());
}

TEST_P(DeviceBackendConformance, CapacityIsAHardLimit) {
  auto& dev = *this->dev_;
  if (dev.properties().name == "cuda") GTEST_SKIP() << "would take every byte of the GPU's memory";
  const auto cap = dev.properties().capacity / this->g_;
  std::vector<ChunkHandle> chunks(cap);
  for (auto& c : chunks) ASSERT_TRUE(dev.create_chunk(this->g_, &c).ok());
  ChunkHandle extra;
  EXPECT_EQ(dev.create_chunk(this->g_, &extra).code, Errc::out_of_memory);
  ASSERT_TRUE(dev.release_chunk(chunks.back()).ok());
  EXPECT_TRUE(dev.create_chunk(this->g_, &chunks.back()).ok());  // freed memory is reusable
  for (auto& c : chunks) EXPECT_TRUE(dev.release_chunk(c).ok());
}

// synchronize_device waits for the work of every stream (transparent mode drains the program's with it).
TEST_P(DeviceBackendConformance, SynchronizeDeviceWaitsForEveryStream) {
  auto& dev = *this->dev_;
  StreamHandle s[2] = {nullptr, nullptr};
  ASSERT_TRUE(dev.create_stream(&s[0]).ok());
  ASSERT_TRUE(dev.create_stream(&s[1]).ok());
  std::atomic<int> done{0};
  for (StreamHandle stream : s) {
    ASSERT_TRUE(dev.launch_host(
                       stream,
                       [](void* u) {
                         std::this_thread::sleep_for(std::chrono::milliseconds(100));
                         static_cast<std::atomic<int>*>(u)->fetch_add(1);
                       },
                       &done)
                    .ok());
  }
  ASSERT_TRUE(dev.synchronize_device().ok());
  EXPECT_EQ(done.load(), 2);
  for (StreamHandle stream : s) EXPECT_TRUE(dev.destroy_stream(stream).ok());
}

// memory_info: the driver's count of the device's memory, which a device chunk takes from; or
// not_supported where nothing else allocates the device (the simulator).
TEST_P(DeviceBackendConformance, MemoryInfoCountsChunksOrIsNotSupported) {
  auto& dev = *this->dev_;
  std::size_t free0 = 0, total = 0;
  const Status s = dev.memory_info(&free0, &total);
  EXPECT_FALSE(dev.memory_info(nullptr, &total).ok());
  if (s.code == Errc::not_supported) return;
  ASSERT_TRUE(s.ok());
  EXPECT_LE(free0, total);
  const std::size_t g = dev.properties().granularity;
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(g, &c).ok());
  std::size_t free1 = 0;
  ASSERT_TRUE(dev.memory_info(&free1, &total).ok());
  EXPECT_LE(free1 + g, free0);  // (on a machine where nothing else frees device memory meanwhile)
  EXPECT_TRUE(dev.release_chunk(c).ok());
}

TEST_P(DeviceBackendConformance, StreamRunsWorkInOrderAndEventsTrackIt) {
  auto& dev = *this->dev_;
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  EventHandle e = nullptr;
  ASSERT_TRUE(dev.create_event(&e).ok());
  EXPECT_TRUE(dev.query_event(e).ok());  // never recorded: complete
  std::atomic<bool> release{false};
  std::vector<int> order;
  struct Ctx {
    std::atomic<bool>* release;
    std::vector<int>* order;
  } ctx{&release, &order};
  ASSERT_TRUE(dev.launch_host(
                     s,
                     [](void* u) {
                       auto* c = static_cast<Ctx*>(u);
                       while (!c->release->load()) std::this_thread::yield();
                       c->order->push_back(1);
                     },
                     &ctx)
                  .ok());
  ASSERT_TRUE(dev.record_event(e, s).ok());
  ASSERT_TRUE(dev.launch_host(
                     s, [](void* u) { static_cast<Ctx*>(u)->order->push_back(2); }, &ctx)
                  .ok());
  EXPECT_EQ(dev.query_event(e).code, Errc::not_ready);
  release = true;
  ASSERT_TRUE(dev.synchronize_event(e).ok());
  EXPECT_TRUE(dev.query_event(e).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, StreamWaitEventOrdersAcrossStreams) {
  auto& dev = *this->dev_;
  StreamHandle a = nullptr, b = nullptr;
  ASSERT_TRUE(dev.create_stream(&a).ok());
  ASSERT_TRUE(dev.create_stream(&b).ok());
  EventHandle e = nullptr;
  ASSERT_TRUE(dev.create_event(&e).ok());
  std::atomic<bool> gate{false};
  std::atomic<int> seen{-1};
  ASSERT_TRUE(dev.launch_host(
                     a,
                     [](void* u) {
                       auto* g = static_cast<std::atomic<bool>*>(u);
                       while (!g->load()) std::this_thread::yield();
                     },
                     &gate)
                  .ok());
  ASSERT_TRUE(dev.record_event(e, a).ok());
  ASSERT_TRUE(dev.stream_wait_event(b, e).ok());
  struct Ctx {
    std::atomic<bool>* gate;
    std::atomic<int>* seen;
  } ctx{&gate, &seen};
  ASSERT_TRUE(dev.launch_host(
                     b,
                     [](void* u) {
                       auto* c = static_cast<Ctx*>(u);
                       c->seen->store(c->gate->load() ? 1 : 0);
                     },
                     &ctx)
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.load(), -1);  // b is held behind a's event
  gate = true;
  ASSERT_TRUE(dev.synchronize_stream(b).ok());
  EXPECT_EQ(seen.load(), 1);
  EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(a).ok());
  EXPECT_TRUE(dev.destroy_stream(b).ok());
}

TEST_P(DeviceBackendConformance, BusyKernelsTakeAtLeastTheirDurationOfDeviceTime) {
  auto& dev = *this->dev_;
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  if (dev.launch_busy(s, std::chrono::nanoseconds(0)).code == Errc::not_supported) {
    EXPECT_TRUE(dev.destroy_stream(s).ok());
    GTEST_SKIP() << dev.properties().name << " has no busy kernel yet";
  }
  EventHandle a = nullptr, b = nullptr, never = nullptr;
  ASSERT_TRUE(dev.create_event(&a, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&b, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&never, EventKind::timing).ok());
  std::chrono::nanoseconds t{0};
  EXPECT_EQ(dev.event_elapsed(a, never, &t).code, Errc::invalid_value);  // never recorded
  EventHandle sync_only = nullptr;  // a sync event cannot be timed, recorded or not
  ASSERT_TRUE(dev.create_event(&sync_only).ok());
  EXPECT_EQ(dev.launch_busy(s, std::chrono::nanoseconds(-1)).code, Errc::invalid_value);
  ASSERT_TRUE(dev.record_event(a, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(5)).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(3)).ok());
  ASSERT_TRUE(dev.record_event(b, s).ok());
  ASSERT_TRUE(dev.synchronize_event(b).ok());
  ASSERT_TRUE(dev.event_elapsed(a, b, &t).ok());
  EXPECT_GE(t, std::chrono::milliseconds(8));
  EXPECT_LT(t, std::chrono::seconds(5));
  ASSERT_TRUE(dev.record_event(sync_only, s).ok());
  ASSERT_TRUE(dev.synchronize_event(sync_only).ok());
  EXPECT_EQ(dev.event_elapsed(a, sync_only, &t).code, Errc::invalid_value);
  for (EventHandle e : {a, b, never, sync_only}) EXPECT_TRUE(dev.destroy_event(e).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_P(DeviceBackendConformance, CopiesMoveBytesBothWays) {
  auto& dev = *this->dev_;
  const auto g = this->g_;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(g, &va).ok());
  ChunkHandle c;
  ASSERT_TRUE(dev.create_chunk(g, &c).ok());
  ASSERT_TRUE(dev.map(va, g, c).ok());
  ASSERT_TRUE(dev.set_access(va, g).ok());
  void* h1 = nullptr;
  void* h2 = nullptr;
  ASSERT_TRUE(dev.alloc_host(g, &h1).ok());
  ASSERT_TRUE(dev.alloc_host(g, &h2).ok());
  test::fill(h1, g, 5);
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(va), h1, g, CopyKind::host_to_device, s).ok());
  ASSERT_TRUE(dev.memcpy_async(h2, reinterpret_cast<void*>(va), g, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(test::mismatches(h2, g, 5), 0u);
  const auto counters = dev.counters();
  EXPECT_EQ(counters.copies, 2u);
  EXPECT_EQ(counters.copy_bytes, 2 * g);
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.free_host(h1, g).ok());
  EXPECT_TRUE(dev.free_host(h2, g).ok());
  EXPECT_TRUE(dev.unmap(va, g).ok());
  EXPECT_TRUE(dev.release_chunk(c).ok());
  EXPECT_TRUE(dev.release_reservation(va, g).ok());
}

}  // namespace

#if defined(TVMM_CONFORMANCE_CUDA)
// The GPU kernels on a real GPU: fill writes the same bytes as the CPU reference, verify counts exactly
// the bytes that differ, and a busy kernel keeps its stream busy for its duration.
TEST(CudaKernels, FillVerifyAndBusyOnTheGpu) {
  std::unique_ptr<DeviceBackend> owner;
  try {
    owner = make_cuda_device(0);
  } catch (const device_error& e) {
    TVMM_SKIP_WITHOUT_GPU("no CUDA device here: " << e.what());
  }
  auto& dev = static_cast<CudaDevice&>(*owner);
  const std::size_t g = dev.properties().granularity;
  DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(2 * g, &va).ok());
  ChunkHandle a, b;
  ASSERT_TRUE(dev.create_chunk(g, &a).ok());
  ASSERT_TRUE(dev.create_chunk(g, &b).ok());
  ASSERT_TRUE(dev.map(va, g, a).ok());
  ASSERT_TRUE(dev.map(va + g, g, b).ok());
  ASSERT_TRUE(dev.set_access(va, 2 * g).ok());
  StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
  void* host = nullptr;
  ASSERT_TRUE(dev.alloc_host(g, &host).ok());
  const DevPtr counter = va + g;
  auto read_counter = [&] {
    std::uint64_t v = 0;
    EXPECT_TRUE(dev.memcpy_async(host, reinterpret_cast<void*>(counter), 8, CopyKind::device_to_host, s).ok());
    EXPECT_TRUE(dev.synchronize_stream(s).ok());
    std::memcpy(&v, host, 8);
    return v;
  };
  std::memset(host, 0, g);
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(counter), host, 8, CopyKind::host_to_device, s).ok());
  const Status filled = dev.fill(s, va, g - 3, 5);  // an odd size: the tail bytes too
#if defined(TVMM_HAVE_GPU_KERNELS)
  if (filled.code == Errc::not_supported) TVMM_SKIP_WITHOUT_GPU(dev.kernels_unavailable());
#else
  if (filled.code == Errc::not_supported) GTEST_SKIP() << dev.kernels_unavailable();  // built without nvcc
#endif
  ASSERT_TRUE(filled.ok());
  ASSERT_TRUE(dev.verify(s, va, g - 3, 5, counter).ok());
  EXPECT_EQ(read_counter(), 0u);
  ASSERT_TRUE(dev.memcpy_async(host, reinterpret_cast<void*>(va), g - 3, CopyKind::device_to_host, s).ok());
  ASSERT_TRUE(dev.synchronize_stream(s).ok());
  EXPECT_EQ(test::mismatches(host, g - 3, 5), 0u);  // the CPU reference agrees byte for byte
  static_cast<unsigned char*>(host)[100] ^= 0xFF;   // one changed byte, written back
  ASSERT_TRUE(dev.memcpy_async(reinterpret_cast<void*>(va), host, g - 3, CopyKind::host_to_device, s).ok());
  ASSERT_TRUE(dev.verify(s, va, g - 3, 5, counter).ok());
  EXPECT_EQ(read_counter(), 1u);
  EventHandle e0 = nullptr, e1 = nullptr;
  ASSERT_TRUE(dev.create_event(&e0, EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&e1, EventKind::timing).ok());
  ASSERT_TRUE(dev.record_event(e0, s).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(2)).ok());
  ASSERT_TRUE(dev.record_event(e1, s).ok());
  ASSERT_TRUE(dev.synchronize_event(e1).ok());
  std::chrono::nanoseconds t{0};
  ASSERT_TRUE(dev.event_elapsed(e0, e1, &t).ok());
  EXPECT_GE(t, std::chrono::microseconds(1900));
  EXPECT_LT(t, std::chrono::milliseconds(50));
  EXPECT_TRUE(dev.destroy_event(e0).ok());
  EXPECT_TRUE(dev.destroy_event(e1).ok());
  EXPECT_TRUE(dev.free_host(host, g).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
  EXPECT_TRUE(dev.unmap(va, g).ok());
  EXPECT_TRUE(dev.unmap(va + g, g).ok());
  EXPECT_TRUE(dev.release_chunk(a).ok());
  EXPECT_TRUE(dev.release_chunk(b).ok());
  EXPECT_TRUE(dev.release_reservation(va, 2 * g).ok());
}
#endif  // TVMM_CONFORMANCE_CUDA
