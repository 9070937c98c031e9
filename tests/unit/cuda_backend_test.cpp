// The CUDA backend without a GPU: loading the real driver fails with the promised error, and a fake
// driver (the same function-pointer table) drives the backend under a real pager to check the calls
// it makes: a reservation of the configured size and one for the frames' own addresses, frames
// created once, host frames registered, cuMemSetAccess once per contiguous run, copies through the
// frames' own addresses, a page-in ordered after the write-back of its frame's previous page and
// queued before the calls that move its address. The fake driver is in fake_cuda_driver.*.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "backends/device/cuda/cuda_device.hpp"
#include "fake_cuda_driver.hpp"
#include "test_support.hpp"
#include "vmm/api/make_pager.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/pager_impl.hpp"
#include "vmm/transparent/managed_heap.hpp"
#include "vmm/transparent/remap_heap.hpp"

using namespace tvmm;
namespace cu = tvmm::device::cuda;

using namespace tvmm::test::fake_cuda;

namespace {

class CudaBackendFake : public ::testing::Test {
 protected:
  void SetUp() override { g_fake = &fake_; }
  void TearDown() override {
    for (int fd : fake_.memfds) {
      if (fd >= 0) ::close(fd);
    }
    g_fake = nullptr;
  }
  static Config config() {
    Config c = test::small_config(4, 16);
    c.device_backend = "cuda";
    c.va_size = 64 * kGranularity;
    return c;
  }
  Fake fake_;
};

}  // namespace

TEST(CudaBackend, WithoutADriverCreatingItFailsWithAClearError) {
  Config c = test::small_config(2, 4);
  c.device_backend = "cuda";
  try {
    Pager p(c);
    GTEST_SKIP() << "a CUDA driver and GPU are present here; the gpu-labelled tests cover them";
  } catch (const device_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no CUDA"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sim"), std::string::npos) << msg;  // says what works instead
  }
  // Everything else still works.
  Pager sim(test::small_config(2, 4));
  auto t = sim.allocate(64 * KiB);
  auto pin = t.pin(Access::write);
  test::fill(pin.data(), t.size(), 3);
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 3), 0u);
}

// A failed driver call carries the driver's name for its code (cuGetErrorName), and the pager's error
// message gives it: a user reads CUDA_ERROR_..., not only a number.
TEST_F(CudaBackendFake, AFailedDriverCallIsNamedInTheError) {
  device::CudaDevice dev(fake_api(), 0);
  device::DevPtr va = 0;
  ASSERT_TRUE(dev.reserve(kGranularity, &va).ok());
  device::ChunkHandle chunk;
  ASSERT_TRUE(dev.create_chunk(kGranularity, &chunk).ok());
  fake_.map_result = CUDA_ERROR_UNKNOWN;
  const device::Status s = dev.map(va, kGranularity, chunk);
  EXPECT_EQ(s.code, device::Errc::driver_error);
  EXPECT_EQ(s.sys_errno, static_cast<int>(CUDA_ERROR_UNKNOWN));
  ASSERT_NE(s.driver_name, nullptr);
  EXPECT_STREQ(s.driver_name, "CUDA_ERROR_FAKE");  // what the fake's cuGetErrorName answers
  const std::string m = test::message_of([&] { TVMM_CHECK(s); });
  EXPECT_NE(m.find("failed with driver_error (CUDA_ERROR_FAKE, driver code 999)"), std::string::npos) << m;
  fake_.map_result = CUDA_SUCCESS;
  EXPECT_TRUE(dev.release_chunk(chunk).ok());
  EXPECT_TRUE(dev.release_reservation(va, kGranularity).ok());
}

TEST_F(CudaBackendFake, DeviceFactsComeFromTheDriver) {
  device::CudaDevice dev(fake_api(), 0);
  EXPECT_EQ(dev.properties().name, "cuda");
  EXPECT_EQ(dev.properties().granularity, kGranularity);
  EXPECT_EQ(dev.properties().capacity, 64 * kGranularity);
  EXPECT_EQ(dev.properties().pci_bus_id, "0000:65:00.0");
  EXPECT_FALSE(dev.properties().host_accessible);
  EXPECT_FALSE(dev.host_numa_chunks());
  std::size_t free = 0, total = 0;  // cuMemGetInfo's figures, as they are
  ASSERT_TRUE(dev.memory_info(&free, &total).ok());
  EXPECT_EQ(free, 40 * kGranularity);
  EXPECT_EQ(total, 64 * kGranularity);
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(dev.create_stream(&s).ok());
#if defined(TVMM_HAVE_GPU_KERNELS)
  // A busy kernel is tvmm_busy on one thread, told the nanoseconds; the kernels load once.
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::milliseconds(1)).ok());
  ASSERT_TRUE(dev.launch_busy(s, std::chrono::microseconds(5)).ok());
  const auto launches = calls("cuLaunchKernel");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].ptr, 4u);    // tvmm_busy
  EXPECT_EQ(launches[0].bytes, 1u);  // one block of one thread
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(launches[0].event), 1'000'000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(launches[1].event), 5'000u);
  EXPECT_EQ(calls("cuModuleLoadData").size(), 1u);
  // fill over 1 MiB: tvmm_fill over enough 256-thread blocks to cover its words (grid-stride, at most 1024).
  ASSERT_TRUE(dev.fill(s, 0x10000, MiB, 7).ok());
  EXPECT_EQ(calls("cuLaunchKernel").back().ptr, 0u);
  EXPECT_EQ(calls("cuLaunchKernel").back().bytes, 512u * 256u);
#else
  EXPECT_EQ(dev.launch_busy(s, std::chrono::milliseconds(1)).code, device::Errc::not_supported);
#endif
  EXPECT_EQ(dev.set_worker_cpus({0}).code, device::Errc::not_supported);
  device::EventHandle a = nullptr, b = nullptr;
  ASSERT_TRUE(dev.create_event(&a, device::EventKind::timing).ok());
  ASSERT_TRUE(dev.create_event(&b, device::EventKind::timing).ok());
  std::chrono::nanoseconds t{0};
  ASSERT_TRUE(dev.event_elapsed(a, b, &t).ok());
  EXPECT_EQ(t, std::chrono::microseconds(1500));  // cuEventElapsedTime's milliseconds, converted
  EXPECT_TRUE(dev.destroy_event(a).ok());
  EXPECT_TRUE(dev.destroy_event(b).ok());
  EXPECT_TRUE(dev.destroy_stream(s).ok());
}

TEST_F(CudaBackendFake, ThePagerReservesTwiceCreatesFramesOnceAndRegistersTheHostTier) {
  {
    auto p = vmm::make_pager(config(), std::make_unique<device::CudaDevice>(fake_api(), 0));
    // The tensors' addresses, then the frames' own (one page per frame of the device budget).
    const auto reserves = calls("cuMemAddressReserve");
    ASSERT_EQ(reserves.size(), 2u);
    EXPECT_EQ(reserves[0].bytes, p.config().va_size);
    EXPECT_EQ(reserves[1].bytes, p.config().device_budget);
    const auto reg = calls("cuMemHostRegister");
    ASSERT_EQ(reg.size(), 1u);
    EXPECT_EQ(reg[0].bytes, p.config().host_budget);
    EXPECT_EQ(p.placement().threads.find("stream threads not bound: not_supported"), 0u) << p.placement().threads;
    auto a = p.allocate(4 * kGranularity);
    auto b = p.allocate(4 * kGranularity);
    auto s = p.create_stream();
    for (int round = 0; round < 3; ++round) {  // each pin evicts the other tensor
      for (auto* t : {&a, &b}) auto pin = t->pin(s, Access::read_write);
    }
    // The device budget's 4 frames, each created once (on first need) and recycled through 6 evictions
    // of 4 pages; never released on the hot path.
    EXPECT_EQ(calls("cuMemCreate").size(), 4u);
    EXPECT_TRUE(calls("cuMemRelease").empty());
  }
  EXPECT_EQ(calls("cuMemRelease").size(), 4u);
  EXPECT_EQ(calls("cuMemAddressFree").size(), 2u);
  EXPECT_EQ(calls("cuMemHostUnregister").size(), 1u);
}

TEST_F(CudaBackendFake, AccessIsGrantedOncePerContiguousRun) {
  auto p = vmm::make_pager(config(), std::make_unique<device::CudaDevice>(fake_api(), 0));
  auto t = p.allocate(4 * kGranularity);
  auto s = p.create_stream();
  const std::size_t before_maps = calls("cuMemMap").size();
  auto pin = t.pin(s, Access::write);
  // Each of the 4 frames, created for this pin, is mapped at its own address and granted access there
  // once; the tensor's 4 pages are mapped one by one and granted access with one call.
  const auto base = reinterpret_cast<std::uintptr_t>(t.data());
  auto in_tensor = [&](const Call& c) { return c.ptr >= base && c.ptr < base + 4 * kGranularity; };
  const auto maps = calls("cuMemMap");
  EXPECT_EQ(maps.size() - before_maps, 8u);
  EXPECT_EQ(std::count_if(maps.begin(), maps.end(), in_tensor), 4);
  const auto access = calls("cuMemSetAccess");
  ASSERT_EQ(access.size(), 5u);
  EXPECT_EQ(std::count_if(access.begin(), access.end(), [](const Call& c) { return c.bytes == kGranularity; }), 4);
  EXPECT_EQ(access.back().ptr, base);
  EXPECT_EQ(access.back().bytes, 4 * kGranularity);
}

TEST_F(CudaBackendFake, VictimsKeepTheirMappingsAndPageInsWaitForTheWriteBack) {
  auto p = vmm::make_pager(config(), std::make_unique<device::CudaDevice>(fake_api(), 0));
  auto a = p.allocate(4 * kGranularity);
  auto b = p.allocate(4 * kGranularity);
  auto s = p.create_stream();
  {
    auto pin = a.pin(s, Access::write);
    s.launch([d = pin.data()] { test::fill(d, 4 * kGranularity, 11); });
  }
  { auto pin = b.pin(s, Access::write); }  // evicts a
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data());
  // The frame a0 is mapped to, and that frame's own address, through which the pager copies it.
  const std::size_t a0_map = find_call(0, [&](const Call& c) { return c.name == "cuMemMap" && c.ptr == a0; });
  ASSERT_NE(a0_map, SIZE_MAX);
  const void* a0_frame = g_fake->log[a0_map].handle;
  const std::size_t own = find_call(0, [&](const Call& c) { return c.name == "cuMemMap" && c.handle == a0_frame; });
  ASSERT_LT(own, a0_map) << "a frame is mapped at its own address when it is created, before any tensor's";
  const std::uintptr_t frame0 = g_fake->log[own].ptr;
  // a's write-back, then an event on the same stream.
  const std::size_t copy =
      find_call(0, [&](const Call& c) { return c.name == "cuMemcpyDtoHAsync" && c.ptr == frame0; });
  ASSERT_NE(copy, SIZE_MAX);
  const void* out_stream = g_fake->log[copy].handle;
  const std::size_t recorded =
      find_call(copy, [&](const Call& c) { return c.name == "cuEventRecord" && c.handle == out_stream; });
  ASSERT_NE(recorded, SIZE_MAX);
  // Bring a back: its page-ins go into frames whose previous pages (b's) are written back first, and
  // the host-to-device stream waits for those write-backs before copying.
  std::size_t mark = 0;
  {
    std::lock_guard lk(g_fake->mu);
    mark = g_fake->log.size();
  }
  {
    auto pin = a.pin(s, Access::read);
    s.launch([&, d = pin.data()] { EXPECT_EQ(test::mismatches(d, 4 * kGranularity, 11), 0u); });
  }
  p.check_invariants();
  // a's addresses stayed mapped to its frames, which b took and gave back: no unmap, no second map.
  EXPECT_EQ(find_call(0, [&](const Call& c) { return c.name == "cuMemUnmap" && c.ptr == a0; }), SIZE_MAX);
  EXPECT_EQ(find_call(mark, [&](const Call& c) { return c.name == "cuMemMap" && c.ptr == a0; }), SIZE_MAX);
  const std::size_t b_back =
      find_call(mark, [&](const Call& c) { return c.name == "cuMemcpyDtoHAsync" && c.handle == out_stream; });
  ASSERT_NE(b_back, SIZE_MAX);
  const std::size_t b_event =
      find_call(b_back, [&](const Call& c) { return c.name == "cuEventRecord" && c.handle == out_stream; });
  ASSERT_NE(b_event, SIZE_MAX);
  const void* b_done = g_fake->log[b_event].event;
  const std::size_t wait =
      find_call(b_event, [&](const Call& c) { return c.name == "cuStreamWaitEvent" && c.event == b_done; });
  const std::size_t page_in =
      find_call(mark, [&](const Call& c) { return c.name == "cuMemcpyHtoDAsync" && c.ptr == frame0; });
  ASSERT_NE(wait, SIZE_MAX) << "no stream waits for the write-back of the frame's previous page";
  ASSERT_NE(page_in, SIZE_MAX);
  EXPECT_LT(wait, page_in) << "the page-in was queued before its stream waited for the frame's write-back";
}

// A page-in into another frame than the one its address is still mapped to is queued before the calls
// that move the address (unmap, map, access grant): the copy goes to the frame's own address, so the bus
// starts on it while the host makes them (PagerImpl::load_chunk).
TEST_F(CudaBackendFake, APageInIsQueuedBeforeTheCallsThatMoveItsAddress) {
  auto p = vmm::make_pager(config(), std::make_unique<device::CudaDevice>(fake_api(), 0));
  auto a = p.allocate(2 * kGranularity);
  auto b = p.allocate(2 * kGranularity);
  auto third = p.allocate(2 * kGranularity);
  auto s = p.create_stream();
  {
    auto pin = a.pin(s, Access::write);
    s.launch([d = pin.data()] { test::fill(d, 2 * kGranularity, 13); });
  }
  { auto pin = b.pin(s, Access::write); }
  { auto pin = third.pin(s, Access::write); }  // the device's 4 frames are full: a, least recently used, leaves
  // Held, so that a cannot go back to its old frames (which `third` holds) even where the pager prefers
  // to evict the page holding an incoming page's old frame (slow mapping calls, as under a sanitizer).
  auto held = third.pin(s, Access::read);
  std::size_t mark = 0;
  {
    std::lock_guard lk(g_fake->mu);
    mark = g_fake->log.size();
  }
  {
    auto pin = a.pin(s, Access::read);  // b leaves, and a's pages go to b's frames
    s.launch([&, d = pin.data()] { EXPECT_EQ(test::mismatches(d, 2 * kGranularity, 13), 0u); });
  }
  p.check_invariants();
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data());
  auto in_a = [&](std::uintptr_t ptr) { return ptr >= a0 && ptr < a0 + 2 * kGranularity; };
  const std::size_t moved =
      find_call(mark, [&](const Call& c) { return (c.name == "cuMemUnmap" || c.name == "cuMemMap") && in_a(c.ptr); });
  ASSERT_NE(moved, SIZE_MAX) << "the test needs a's addresses to move to other frames";
  const std::size_t page_in = find_call(mark, [&](const Call& c) { return c.name == "cuMemcpyHtoDAsync"; });
  ASSERT_NE(page_in, SIZE_MAX);
  EXPECT_LT(page_in, moved) << "the page-in waited for the mapping calls";
  EXPECT_FALSE(in_a(g_fake->log[page_in].ptr)) << "a page-in went to a tensor address, not to its frame's own";
}

TEST_F(CudaBackendFake, AutoOrdinalIsTheCurrentContextsDeviceElseZero) {
  fake_.current_device = 2;
  device::CudaDevice first(fake_api(), -1);  // no context current: device 0, asked without a failing call
  EXPECT_TRUE(calls("cuCtxGetDevice").empty());
  fake_stack().push_back(reinterpret_cast<CUcontext>(0x2));  // the program made a context on device 2 current
  device::CudaDevice current(fake_api(), -1);
  fake_stack().pop_back();
  device::StreamHandle s = nullptr;
  EXPECT_TRUE(current.create_stream(&s).ok());
  EXPECT_TRUE(current.destroy_stream(s).ok());
  EXPECT_EQ(first.device_ordinal(), 0);
  EXPECT_EQ(current.device_ordinal(), 2);
}

TEST_F(CudaBackendFake, TransparentRemapsUseHostNumaChunksAndDeviceToDeviceCopies) {
  fake_.host_numa = true;
  auto dev = std::make_unique<device::CudaDevice>(fake_api(), 0);
  EXPECT_TRUE(dev->properties().host_chunks);
  Config c = config();
  c.device_budget = 2 * kGranularity;
  c.host_budget = 4 * kGranularity;
  int drains = 0;
  vmm::RemapHeap heap(
      c, [&] { ++drains; }, std::move(dev));
  void* a = heap.allocate(2 * kGranularity);
  EXPECT_EQ(calls("cuMemCreate").size(), 2u);
  void* b = heap.allocate(kGranularity);  // demotes a's last page to a chunk on the GPU's host node
  EXPECT_EQ(drains, 1);
  EXPECT_EQ(calls("cuMemCreate(host numa 1)").size(), 1u);
  const auto copies = calls("cuMemcpyDtoDAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].ptr, reinterpret_cast<std::uintptr_t>(a) + kGranularity);  // from the page's own address
  // The page's address is unmapped only after the copy, and mapped again at once: it never stays unmapped.
  const std::size_t copy = find_call(0, [](const Call& x) { return x.name == "cuMemcpyDtoDAsync"; });
  const auto page = reinterpret_cast<std::uintptr_t>(a) + kGranularity;
  const std::size_t unmap = find_call(copy, [&](const Call& x) { return x.name == "cuMemUnmap" && x.ptr == page; });
  const std::size_t remap = find_call(unmap, [&](const Call& x) { return x.name == "cuMemMap" && x.ptr == page; });
  ASSERT_NE(unmap, SIZE_MAX);
  ASSERT_NE(remap, SIZE_MAX);
  EXPECT_EQ(find_call(unmap + 1, [](const Call& x) { return x.name == "cuMemcpyDtoDAsync"; }), SIZE_MAX);
  heap.free(b);
  heap.free(a);
}

TEST_F(CudaBackendFake, WithoutHostNumaChunksTransparentModeFallsBackToManagedMemoryPlacedByThePolicy) {
  fake_.managed = true;  // no host-located VMM memory, but managed memory
  Config c = config();
  c.device_budget = 2 * kGranularity;
  c.host_budget = 4 * kGranularity;
  std::string why;
  auto heap = vmm::make_transparent_heap(
      c, [] {}, &why, std::make_unique<device::CudaDevice>(fake_api(), 0));
  EXPECT_STREQ(heap->mechanism(), "um");
  EXPECT_NE(why.find("falls back to managed memory"), std::string::npos) << why;
  void* a = heap->allocate(2 * kGranularity);
  ASSERT_EQ(calls("cuMemAllocManaged").size(), 1u);
  EXPECT_EQ(calls("cuMemAllocManaged")[0].bytes, 2 * kGranularity);
  EXPECT_EQ(calls("cuMemPrefetchAsync(gpu)").size(), 2u);  // both pages preferred on, and moved to, the GPU
  EXPECT_EQ(calls("cuMemAdvise(gpu)").size(), 2u);
  void* b = heap->allocate(kGranularity);  // the device is full: a's last page goes to the host
  const auto to_cpu = calls("cuMemPrefetchAsync(cpu)");
  ASSERT_EQ(to_cpu.size(), 1u);
  EXPECT_EQ(to_cpu[0].ptr, reinterpret_cast<std::uintptr_t>(a) + kGranularity);
  EXPECT_EQ(calls("cuMemAdvise(cpu)").size(), 1u);
  EXPECT_EQ(heap->usage().on_device, 2 * kGranularity);
  heap->free(b);
  heap->free(a);
  EXPECT_EQ(calls("cuMemFree").size(), 2u);
  // Neither host-located VMM memory nor managed memory: a clear error.
  fake_.managed = false;
  try {
    (void)vmm::make_transparent_heap(
        c, [] {}, nullptr, std::make_unique<device::CudaDevice>(fake_api(), 0));
    FAIL() << "no error";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("neither"), std::string::npos) << e.what();
  }
}
