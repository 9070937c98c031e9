// The transparent heap on the simulated GPU, with both mechanisms (vmm: remaps of mapped pages; um:
// managed memory with advice and prefetches): every page stays usable and keeps its bytes across
// demotions and promotions, vmm remaps only after a drain, capacity = device + host budgets.
#include "vmm/transparent/transparent_heap.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "backends/device/faulty/faulty_device.hpp"
#include "backends/device/sim/sim_device.hpp"
#include "kernels/pattern.hpp"
#include "tvmm/errors.hpp"
#include "vmm/transparent/managed_heap.hpp"
#include "vmm/transparent/remap_heap.hpp"

namespace tvmm::vmm {
namespace {

constexpr std::size_t page = 2 * MiB;

Config small_config() {
  Config c;
  c.device_budget = 4 * page;
  c.host_budget = 12 * page;
  c.bind_threads = false;
  return c;
}

// One heap of the mechanism the test is instantiated for, counting its drains.
struct Heap {
  int drains = 0;                  // calls of the Drain callback (before a drain, or a release in stream order)
  std::function<void()> on_drain;  // run at each call too (where the interposer closes its launch gate)
  std::unique_ptr<TransparentHeap> owner;
  TransparentHeap& heap;
  explicit Heap(const std::string& memory, Config c = small_config())
      : owner(make_transparent_heap((c.transparent_memory = memory, c),
                                    [this] {
                                      ++drains;
                                      if (on_drain) on_drain();
                                    })),
        heap(*owner) {}
};

class TransparentHeapTest : public ::testing::TestWithParam<std::string> {
 protected:
  [[nodiscard]] bool vmm() const { return GetParam() == "vmm"; }
};
INSTANTIATE_TEST_SUITE_P(Mechanisms, TransparentHeapTest, ::testing::Values("vmm", "um"),
                         [](const auto& param_info) { return param_info.param; });

TEST_P(TransparentHeapTest, KeepsEveryByteAcrossDemotionsTriggeredByLaterAllocations) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  // 4x the device budget, one page at a time, each filled at once.
  for (unsigned i = 0; i < 16; ++i) {
    void* p = h.heap.allocate(page);
    ASSERT_TRUE(h.heap.contains(p));
    kernels::fill_pattern(p, page, i);
    ptrs.push_back(p);
  }
  const auto c = h.heap.counters();
  EXPECT_EQ(c.pages_demoted, 12u);  // each allocation past the 4th pushed the oldest page to the host
  EXPECT_EQ(h.drains > 0, vmm());   // a remap waits for device work; a managed-memory prefetch need not           //
                                    // remaps happened only after draining
  for (unsigned i = 0; i < 16; ++i) {
    EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
  }
  // The newest four are on the device.
  EXPECT_EQ(h.heap.usage().on_device, 4 * page);
  for (void* p : ptrs) h.heap.free(p);
  EXPECT_EQ(h.heap.usage().used, 0u);
}

TEST_P(TransparentHeapTest, PromotesHostPagesIntoFramesThatFreesLeaveIdle) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 8; ++i) {
    ptrs.push_back(h.heap.allocate(page));
    kernels::fill_pattern(ptrs.back(), page, 100 + i);
  }
  ASSERT_EQ(h.heap.usage().on_device, 4 * page);
  h.heap.free(ptrs[7]);
  h.heap.free(ptrs[6]);      // two device frames idle, four pages on the host
  h.heap.note_use(ptrs[1]);  // a launch named allocation 1: it is promoted first
  const auto before = h.heap.counters().pages_promoted;
  h.heap.maintain(true);
  EXPECT_EQ(h.heap.counters().pages_promoted - before, 2u);
  EXPECT_EQ(h.heap.usage().on_device, 4 * page);
  EXPECT_EQ(h.heap.location_of(ptrs[1]), device::ChunkLocation::device);
  for (unsigned i = 0; i < 6; ++i) {
    EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, 100 + i), 0u) << "allocation " << i;
  }
  // Nothing to do: no drain.
  h.heap.maintain(false);
  const auto drains = h.heap.counters().drains;
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().drains, drains);
}

TEST_P(TransparentHeapTest, AllocationLargerThanTheDeviceSpillsItsTailToTheHost) {
  Heap h(GetParam());
  auto* p = static_cast<std::byte*>(h.heap.allocate(6 * page + 5));
  kernels::fill_pattern(p, 6 * page + 5, 7);
  EXPECT_EQ(h.heap.usage().on_device, 4 * page);
  EXPECT_EQ(h.heap.usage().used, 7 * page);
  EXPECT_EQ(h.heap.size_of(p), 6 * page + 5);
  EXPECT_EQ(kernels::count_mismatches(p, 6 * page + 5, 7), 0u);
}

TEST_P(TransparentHeapTest, BeyondDevicePlusHostBudgetsIsOutOfMemoryNamingTheBudgets) {
  Heap h(GetParam());
  void* a = h.heap.allocate(10 * page);
  try {
    (void)h.heap.allocate(7 * page);
    FAIL() << "no out_of_memory";
  } catch (const out_of_memory& e) {
    // PyTorch's words, what each tier holds, and what to raise.
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA out of memory. Tried to allocate 14 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("device budget (8 MiB, 8 MiB in use)"), std::string::npos) << m;
    EXPECT_NE(m.find("host budget (24 MiB, 12 MiB in use)"), std::string::npos) << m;
    EXPECT_NE(m.find("Raise TVMM_HOST_BUDGET"), std::string::npos) << m;
    EXPECT_NE(m.find("NVMe tier needs the explicit API"), std::string::npos) << m;
  }
  EXPECT_EQ(h.heap.counters().ooms, 1u);
  EXPECT_EQ(h.heap.counters().allocated_bytes, 10 * page);
  // Nothing changed: the earlier allocation is intact and the capacity left is usable.
  kernels::fill_pattern(a, 10 * page, 3);
  void* b = h.heap.allocate(6 * page);
  EXPECT_EQ(kernels::count_mismatches(a, 10 * page, 3), 0u);
  h.heap.free(b);
  h.heap.free(a);
}

// A size within a page of SIZE_MAX once wrapped to 0 pages in the rounding, and the heap went on to map
// nothing (a failed access grant under vmm, a failed managed allocation under um): it is out of memory,
// in the same words as any allocation beyond the budgets, and changes nothing.
TEST_P(TransparentHeapTest, ASizeNearTheLargestIsOutOfMemoryAndChangesNothing) {
  Heap h(GetParam());
  void* a = h.heap.allocate(3 * page);
  kernels::fill_pattern(a, 3 * page, 4);
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  for (const std::size_t bytes : {max, max - page + 2, max - page / 2}) {
    try {
      (void)h.heap.allocate(bytes);
      ADD_FAILURE() << "an allocation of " << bytes << " bytes succeeded";
    } catch (const out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA out of memory. Tried to allocate"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(h.heap.counters().ooms, 3u);
  EXPECT_EQ(h.heap.usage().used, 3 * page);
  EXPECT_EQ(kernels::count_mismatches(a, 3 * page, 4), 0u);
  h.heap.free(a);
}

TEST_P(TransparentHeapTest, DoubleFreeAndInteriorPointersAreErrorsAndChangeNothing) {
  Heap h(GetParam());
  auto* a = static_cast<std::byte*>(h.heap.allocate(page));
  try {
    h.heap.free(a + 64);
    ADD_FAILURE() << "a free of an interior pointer succeeded";
  } catch (const invalid_argument& e) {
    // The address as the program prints it (%p: hex), not in decimal.
    char at[24];
    std::snprintf(at, sizeof at, "%p", static_cast<void*>(a + 64));
    EXPECT_NE(std::string(e.what()).find(std::string("free of ") + at + ", which is not a live allocation's start"),
              std::string::npos)
        << e.what();
  }
  h.heap.free(a);
  EXPECT_THROW(h.heap.free(a), invalid_argument);
  EXPECT_EQ(h.heap.usage().used, 0u);
  int outside = 0;
  EXPECT_FALSE(h.heap.contains(&outside));
  if (!vmm()) {
    EXPECT_FALSE(h.heap.contains(a));  // managed memory: gone with its allocation
  }
}

TEST_P(TransparentHeapTest, DeferredFreesAreReleasedAtTheNextQuiescentPoint) {
  Heap h(GetParam());
  void* a = h.heap.allocate(16 * page);  // all of the capacity
  h.heap.free_deferred(a);
  EXPECT_EQ(h.heap.usage().used, 16 * page);  // not yet: device work may still use it
  EXPECT_THROW(h.heap.free_deferred(a), invalid_argument);
  void* b = h.heap.allocate(page);  // under pressure: drains, then releases the deferred free
  EXPECT_EQ(h.heap.usage().used, page);
  h.heap.free(b);
}

// While a graph is captured nothing drains: an allocation under pressure moves no page (vmm places it
// on the host; um refuses, as a managed allocation would end the capture), frees keep their memory for
// the graph for good, and a quiescent point does nothing. Afterwards the heap works as before.
TEST_P(TransparentHeapTest, NothingDrainsWhileAGraphIsCaptured) {
  Heap h(GetParam());
  bool capturing = false;
  h.heap.set_capture_probe([&] { return capturing; });
  const std::vector<void*> before = [&] {
    std::vector<void*> v;
    for (unsigned i = 0; i < 4; ++i) v.push_back(h.heap.allocate(page));  // the whole device
    return v;
  }();
  void* kept = h.heap.allocate(page);  // the program's, freed during the capture
  const auto drains = h.heap.counters().drains;
  capturing = true;
  if (vmm()) {
    void* p = h.heap.allocate(2 * page);
    kernels::fill_pattern(p, 2 * page, 5);
    EXPECT_EQ(h.heap.counters().pages_demoted, 1u);  // only the demotion for `kept`, before the capture
    h.heap.free(p);
  } else {
    EXPECT_THROW((void)h.heap.allocate(page), device_error);
  }
  h.heap.free_deferred(kept);
  EXPECT_THROW(h.heap.free(kept), invalid_argument);  // no longer the program's
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().drains, drains);
  const std::size_t kept_bytes = (vmm() ? 3 : 1) * page;
  EXPECT_EQ(h.heap.usage().used, 4 * page + kept_bytes);
  EXPECT_EQ(h.heap.counters().kept_for_graphs, vmm() ? 2u : 1u);
  capturing = false;
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.usage().used, 4 * page + kept_bytes);  // kept for the graph's replays
  for (void* p : before) h.heap.free(p);
  EXPECT_EQ(h.heap.usage().used, kept_bytes);
}

// A capture that begins after an operation looked but before its drain (its BeginCapture held the launch
// gate, which the drain callback closes): nothing synchronises, moves or is released; a free keeps its
// memory for the graph.
TEST_P(TransparentHeapTest, ACaptureThatBeginsJustBeforeTheDrainIsNotInvalidated) {
  bool capturing = false;
  bool begin_at_drain = false;
  Heap h(GetParam());
  h.on_drain = [&] { capturing = capturing || begin_at_drain; };
  TransparentHeap& heap = h.heap;
  heap.set_capture_probe([&] { return capturing; });
  std::vector<void*> full;
  for (unsigned i = 0; i < 4; ++i) full.push_back(heap.allocate(page));  // the whole device
  void* victim = heap.allocate(page);
  const auto drains = heap.counters().drains;
  const auto demoted = heap.counters().pages_demoted;
  begin_at_drain = true;
  heap.free(victim);  // would drain: the capture begins first
  EXPECT_EQ(heap.counters().kept_for_graphs, 1u);
  if (vmm()) {
    void* p = heap.allocate(page);  // would demote: places on the host instead
    kernels::fill_pattern(p, page, 3);
    EXPECT_EQ(heap.location_of(p), device::ChunkLocation::host);
    EXPECT_EQ(kernels::count_mismatches(p, page, 3), 0u);
  }
  EXPECT_EQ(heap.counters().drains, drains);
  EXPECT_EQ(heap.counters().pages_demoted, demoted);
}

// A stream-ordered free whose stream got there is not released during a capture either: releasing unmaps
// (or frees managed memory), which a capture forbids as it does a device synchronise.
TEST_P(TransparentHeapTest, CompletedStreamOrderedFreesWaitForTheCaptureToEnd) {
  Heap h(GetParam());
  bool capturing = false;
  h.heap.set_capture_probe([&] { return capturing; });
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(h.heap.device().create_stream(&s).ok());
  void* a = h.heap.allocate(2 * page);
  h.heap.free_after(a, s);
  ASSERT_TRUE(h.heap.device().synchronize_stream(s).ok());  // the event has completed
  capturing = true;
  if (vmm()) {
    (void)h.heap.allocate(page);
  } else {
    EXPECT_THROW((void)h.heap.allocate(page), device_error);  // um refuses, having released nothing
  }
  EXPECT_EQ(h.heap.usage().used, (vmm() ? 3 : 2) * page);  // a's pages are still there
  capturing = false;
  (void)h.heap.allocate(page);
  EXPECT_EQ(h.heap.usage().used, (vmm() ? 2 : 1) * page);
  ASSERT_TRUE(h.heap.device().destroy_stream(s).ok());
}

// The same for a capture that begins between the check and the release: the release closes the gate (the
// Drain callback) first and looks again.
TEST_P(TransparentHeapTest, AStreamOrderedReleaseLooksForACaptureAfterClosingTheGate) {
  bool capturing = false;
  bool begin_at_gate = false;
  Heap h(GetParam());
  h.on_drain = [&] { capturing = capturing || begin_at_gate; };
  TransparentHeap& heap = h.heap;
  heap.set_capture_probe([&] { return capturing; });
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(heap.device().create_stream(&s).ok());
  void* a = heap.allocate(2 * page);
  void* b = heap.allocate(page);
  heap.free_after(a, s);
  ASSERT_TRUE(heap.device().synchronize_stream(s).ok());
  begin_at_gate = true;
  heap.maintain(false);  // would release a: the capture begins as the gate closes
  EXPECT_EQ(heap.usage().used, 3 * page);
  capturing = begin_at_gate = false;
  heap.maintain(false);
  EXPECT_EQ(heap.usage().used, page);
  heap.free(b);
  ASSERT_TRUE(heap.device().destroy_stream(s).ok());
}

// Device memory given back to an allocation outside the heap: idle frames first, then the coldest pages
// demoted (bytes kept); for a second no page goes to the device, then pages may again.
TEST_P(TransparentHeapTest, GivingDeviceMemoryBackDemotesTheColdestAndHoldsTheDeviceBack) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 4; ++i) {
    ptrs.push_back(h.heap.allocate(page));
    kernels::fill_pattern(ptrs[i], page, 40 + i);
  }
  h.heap.note_use(ptrs[0]);
  h.heap.note_use(ptrs[1]);
  h.heap.note_use(ptrs[3]);
  EXPECT_EQ(h.heap.give_back_device_memory(page + 1), 2 * page);        // whole pages: two
  EXPECT_EQ(h.heap.location_of(ptrs[2]), device::ChunkLocation::host);  // the unused one went first
  EXPECT_EQ(h.heap.usage().on_device, 2 * page);
  EXPECT_EQ(h.heap.counters().pages_given_back, 2u);
  void* during = h.heap.allocate(page);
  EXPECT_EQ(h.heap.location_of(during), device::ChunkLocation::host);
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.usage().on_device, 2 * page);  // no promotion while held back
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, 40 + i), 0u) << i;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  void* after = h.heap.allocate(page);
  EXPECT_EQ(h.heap.location_of(after), device::ChunkLocation::device);
}

// A small allocation whose size class has no free slot first takes back slots of stream-ordered frees that
// have completed, rather than failing for want of a new slab's page (or making a second slab).
TEST_P(TransparentHeapTest, ASmallAllocationReusesASlotFreedInStreamOrder) {
  Heap h(GetParam());
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(h.heap.device().create_stream(&s).ok());
  std::vector<void*> slots;
  for (unsigned i = 0; i < 8; ++i) slots.push_back(h.heap.allocate(page / 8));  // one full slab
  void* rest = h.heap.allocate(15 * page);                                      // the rest of the capacity
  h.heap.free_after(slots[3], s);
  ASSERT_TRUE(h.heap.device().synchronize_stream(s).ok());
  void* again = nullptr;
  ASSERT_NO_THROW(again = h.heap.allocate(page / 8));
  EXPECT_EQ(again, slots[3]);
  EXPECT_EQ(h.heap.usage().used, 16 * page);
  h.heap.free(rest);
  ASSERT_TRUE(h.heap.device().destroy_stream(s).ok());
}

// free_after releases a block once the work queued on the given stream has completed, without a drain;
// an allocation that needs its pages waits for that stream only.
TEST_P(TransparentHeapTest, AStreamOrderedFreeReleasesWhenTheStreamGetsThere) {
  Heap h(GetParam());
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(h.heap.device().create_stream(&s).ok());
  void* a = h.heap.allocate(16 * page);  // all of the capacity
  ASSERT_TRUE(h.heap.device().launch_busy(s, std::chrono::milliseconds(200)).ok());
  const auto drains = h.heap.counters().drains;
  h.heap.free_after(a, s);
  EXPECT_THROW(h.heap.free_after(a, s), invalid_argument);
  EXPECT_EQ(h.heap.usage().used, 16 * page);  // the stream is still busy
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.usage().used, 16 * page);
  void* b = h.heap.allocate(page);  // needs a's pages: waits for the stream, not the device
  EXPECT_EQ(h.heap.usage().used, page);
  EXPECT_EQ(h.heap.counters().drains, drains);
  EXPECT_EQ(h.heap.counters().stream_ordered_frees, 1u);
  h.heap.free(b);
  ASSERT_TRUE(h.heap.device().destroy_stream(s).ok());
}

// Allocations of at most page / 8 share pages (slabs of one size class), keep their bytes while their
// slabs move like any page, and give their page back when the last one is freed.
TEST_P(TransparentHeapTest, SmallAllocationsSharePages) {
  Heap h(GetParam());
  std::vector<void*> small;
  for (unsigned i = 0; i < 300; ++i) {
    small.push_back(h.heap.allocate(1000));  // slots of 1 KiB: 2048 to a page
    kernels::fill_pattern(small.back(), 1000, i);
  }
  void* mid = h.heap.allocate(100 * 1024);  // another class: slots of 128 KiB
  kernels::fill_pattern(mid, 100 * 1024, 777);
  EXPECT_EQ(h.heap.usage().used, 2 * page);
  EXPECT_EQ(h.heap.counters().allocated_bytes, 300 * 1000 + 100 * 1024);
  EXPECT_EQ(h.heap.size_of(small[5]), 1000u);
  const auto [start, bytes] = h.heap.allocation_of(static_cast<char*>(small[5]) + 999);
  EXPECT_EQ(start, reinterpret_cast<device::DevPtr>(small[5]));
  EXPECT_EQ(bytes, 1000u);
  EXPECT_EQ(h.heap.allocation_of(static_cast<char*>(small[5]) + 1000).second, 0u);  // the slot's padding
  // The whole device and more: the slabs are demoted and promoted like any page.
  void* big = h.heap.allocate(6 * page);
  EXPECT_GT(h.heap.counters().pages_demoted, 0u);
  for (unsigned i = 0; i < 300; ++i) EXPECT_EQ(kernels::count_mismatches(small[i], 1000, i), 0u) << "allocation " << i;
  EXPECT_EQ(kernels::count_mismatches(mid, 100 * 1024, 777), 0u);
  // Bad frees change nothing.
  EXPECT_THROW(h.heap.free(static_cast<char*>(small[0]) + 8), invalid_argument);
  h.heap.free(small[0]);
  EXPECT_THROW(h.heap.free(small[0]), invalid_argument);
  EXPECT_THROW(h.heap.free_deferred(small[0]), invalid_argument);
  EXPECT_EQ(kernels::count_mismatches(small[1], 1000, 1), 0u);
  // Freed in every way; the last one gives the slab back.
  for (unsigned i = 1; i < 300; ++i) {
    if (i % 3 == 0) {
      h.heap.free_deferred(small[i]);
    } else {
      h.heap.free(small[i]);
    }
  }
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.usage().used, 7 * page);  // mid's slab and big
  h.heap.free(mid);
  h.heap.free(big);
  EXPECT_EQ(h.heap.usage().used, 0u);
  EXPECT_EQ(h.heap.counters().allocated_bytes, 0u);
}

// A simulated GPU of the small config's device budget, behind a fault injector.
std::unique_ptr<device::FaultyDevice> faulty_sim() {
  return std::make_unique<device::FaultyDevice>(std::make_unique<device::SimDevice>(small_config().sim, 4 * page));
}

// Four one-page allocations (the whole device budget), allocation i filled with pattern i.
std::vector<void*> fill_the_device(TransparentHeap& heap) {
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 4; ++i) {
    ptrs.push_back(heap.allocate(page));
    kernels::fill_pattern(ptrs.back(), page, i);
  }
  return ptrs;
}

// --- placement by use (note_use: what the launch hooks report) -------------------------------------------

TEST_P(TransparentHeapTest, AQuiescentPointSwapsTheMostUsedHostPagesWithUnusedDevicePages) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 8; ++i) {
    ptrs.push_back(h.heap.allocate(page));
    kernels::fill_pattern(ptrs[i], page, 10 + i);
  }
  // Allocation order: 4-7 on the device, 0-3 on the host. The program uses 0 and 1 most.
  ASSERT_EQ(h.heap.location_of(ptrs[0]), device::ChunkLocation::host);
  for (int k = 0; k < 5; ++k) {
    h.heap.note_use(static_cast<std::byte*>(ptrs[0]) + 100);  // a pointer into the allocation counts
    h.heap.note_use(ptrs[1]);
  }
  h.heap.note_use(ptrs[5]);
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().pages_swapped, 2u);
  EXPECT_EQ(h.heap.counters().uses_noted, 11u);
  EXPECT_EQ(h.heap.location_of(ptrs[0]), device::ChunkLocation::device);
  EXPECT_EQ(h.heap.location_of(ptrs[1]), device::ChunkLocation::device);
  EXPECT_EQ(h.heap.location_of(ptrs[5]), device::ChunkLocation::device);  // used: not the one to go
  EXPECT_EQ(h.heap.usage().on_device, 4 * page);
  for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, 10 + i), 0u) << i;
  // Nothing more to gain: the next quiescent point moves nothing, and drains nothing.
  const auto drains = h.heap.counters().drains;
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().pages_swapped, 2u);
  EXPECT_EQ(h.heap.counters().drains, drains);
}

TEST_P(TransparentHeapTest, EquallyUsedPagesDoNotChurn) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 8; ++i) ptrs.push_back(h.heap.allocate(page));
  for (int iteration = 0; iteration < 5; ++iteration) {  // a cyclic program: every page once per iteration
    for (void* p : ptrs) h.heap.note_use(p);
    h.heap.maintain(false);
  }
  EXPECT_EQ(h.heap.counters().pages_swapped, 0u);
  EXPECT_EQ(h.heap.counters().pages_promoted, 0u);
}

TEST_P(TransparentHeapTest, AnAllocationDemotesTheLeastUsedPagesNotTheOldest) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 4; ++i) ptrs.push_back(h.heap.allocate(page));
  h.heap.note_use(ptrs[0]);  // the oldest is in use; 1 is not
  h.heap.note_use(ptrs[2]);
  h.heap.note_use(ptrs[3]);
  void* extra = h.heap.allocate(page);
  EXPECT_EQ(h.heap.location_of(extra), device::ChunkLocation::device);
  EXPECT_EQ(h.heap.location_of(ptrs[1]), device::ChunkLocation::host);
  EXPECT_EQ(h.heap.location_of(ptrs[0]), device::ChunkLocation::device);
}

TEST_P(TransparentHeapTest, PlacementByAllocationIgnoresUses) {
  Config c = small_config();
  c.transparent_placement = "allocation";
  Heap h(GetParam(), c);
  EXPECT_FALSE(h.heap.places_by_use());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 8; ++i) ptrs.push_back(h.heap.allocate(page));
  for (int k = 0; k < 5; ++k) h.heap.note_use(ptrs[0]);
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.location_of(ptrs[0]), device::ChunkLocation::host);
  EXPECT_EQ(h.heap.counters().uses_noted, 0u);
  EXPECT_EQ(h.heap.counters().pages_swapped, 0u);
}

TEST_P(TransparentHeapTest, UsesOfFreedMemoryDoNotFollowItsNextAllocation) {
  Heap h(GetParam());
  std::vector<void*> ptrs;
  for (unsigned i = 0; i < 8; ++i) ptrs.push_back(h.heap.allocate(page));
  void* old = ptrs[0];
  for (int k = 0; k < 5; ++k) h.heap.note_use(old);  // noted, never collected
  h.heap.free(old);
  ptrs[0] = h.heap.allocate(page);  // may reuse the address
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().uses_noted, 0u);
  EXPECT_EQ(h.heap.counters().pages_swapped, 0u);
}

TEST_P(TransparentHeapTest, UsesOutsideTheHeapAreIgnored) {
  Heap h(GetParam());
  void* p = h.heap.allocate(page);
  int on_the_stack = 0;
  h.heap.note_use(&on_the_stack);
  h.heap.note_use(nullptr);
  EXPECT_FALSE(h.heap.may_contain(&on_the_stack));
  EXPECT_TRUE(h.heap.may_contain(p));
  h.heap.maintain(false);
  EXPECT_EQ(h.heap.counters().uses_noted, 0u);
}

TEST(RemapHeap, AFailedRemapLeavesThePageWhereItWasWithItsBytes) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  RemapHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  dev->fail_once(device::FaultyDevice::Op::copy_out, device::Errc::invalid_value);
  EXPECT_THROW((void)heap.allocate(page), device_error);
  EXPECT_EQ(heap.usage().used, 4 * page);
  for (unsigned i = 0; i < 4; ++i) {
    EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
  }
  // Works again once the fault is gone.
  void* p = heap.allocate(page);
  EXPECT_EQ(heap.counters().pages_demoted, 1u);
  kernels::fill_pattern(p, page, 9);
  EXPECT_EQ(kernels::count_mismatches(ptrs[3], page, 3), 0u);
}

// After a demotion of ptrs[0] (of fill_the_device) failed: makes that page the hottest, allocates two
// pages (each demotes another device page into a host frame, and is filled), and checks every byte.
// Returns the two new allocations.
std::vector<void*> demote_others_and_check(RemapHeap& heap, const std::vector<void*>& ptrs) {
  for (int k = 0; k < 5; ++k) heap.note_use(ptrs[0]);
  std::vector<void*> more;
  for (unsigned i = 0; i < 2; ++i) {
    more.push_back(heap.allocate(page));
    kernels::fill_pattern(more.back(), page, 20 + i);
  }
  EXPECT_EQ(heap.counters().pages_demoted, 2u);
  EXPECT_EQ(heap.location_of(ptrs[0]), device::ChunkLocation::device);  // the others went
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
  for (unsigned i = 0; i < 2; ++i) EXPECT_EQ(kernels::count_mismatches(more[i], page, 20 + i), 0u) << "new " << i;
  return more;
}

// A demotion whose access grant at the page's address fails (after the page was copied and its address
// mapped to the host frame) puts the device frame back. It used to leave the address mapped to the host
// frame without access, and that frame back in its pool: the next demotion copied another page into it,
// over the first page's bytes.
TEST(RemapHeap, AFailedAccessGrantInARemapLeavesThePageWhereItWasWithItsBytes) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  RemapHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  // The demotion grants access twice: at the staging page, then at the page's own address.
  dev->fail_once(device::FaultyDevice::Op::set_access, device::Errc::out_of_memory, 1);
  EXPECT_THROW((void)heap.allocate(page), out_of_memory);
  EXPECT_EQ(heap.counters().pages_demoted, 0u);
  (void)demote_others_and_check(heap, ptrs);
}

// The same, and undoing the mapping fails too: the host frame stays mapped at the page's address, so
// it must never be handed out again (the next demotions take other frames), and the page keeps its
// bytes and its own frame.
TEST(RemapHeap, AFailedAccessGrantWhoseUndoFailsNeverReusesTheFrameLeftMapped) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  RemapHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  dev->fail_once(device::FaultyDevice::Op::set_access, device::Errc::out_of_memory, 1);
  // The demotion unmaps the staging page, then the page's address; the third unmap is the undo.
  dev->fail_once(device::FaultyDevice::Op::unmap, device::Errc::out_of_memory, 2);
  EXPECT_THROW((void)heap.allocate(page), out_of_memory);
  for (void* p : demote_others_and_check(heap, ptrs)) heap.free(p);
  for (void* p : ptrs) heap.free(p);
  EXPECT_EQ(heap.usage().used, 0u);
}

// A free whose unmap fails keeps the allocation's frames and addresses (memory that may still be mapped
// is not reused) and unmaps again before the next allocation. It used to keep them for good.
TEST(RemapHeap, AFreeWhoseUnmapFailedIsRetriedBeforeTheNextAllocation) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  RemapHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  dev->fail_once(device::FaultyDevice::Op::unmap, device::Errc::out_of_memory);
  heap.free(ptrs[0]);
  EXPECT_EQ(heap.usage().used, 3 * page);
  void* p = heap.allocate(page);  // the freed page's device frame, once unmapped
  EXPECT_EQ(heap.location_of(p), device::ChunkLocation::device);
  EXPECT_EQ(heap.counters().pages_demoted, 0u);
  kernels::fill_pattern(p, page, 7);
  for (unsigned i = 1; i < 4; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
  EXPECT_EQ(kernels::count_mismatches(p, page, 7), 0u);
}

// A frame creation that failed makes a pool wait a second before the next (DeviceTier::try_acquire).
// The heap has no page to evict into, so while both pools wait every allocation failed, even once the
// memory was back; now a short pool tries again at once when the allocation would fail otherwise.
TEST(RemapHeap, AnAllocationRightAfterAFailedFrameCreationTriesAgain) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  RemapHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  void* on_host = heap.allocate(page);  // the host pool has a frame: a failure makes it short
  dev->fail_always(device::FaultyDevice::Op::create_chunk, device::Errc::out_of_memory);
  try {
    (void)heap.allocate(page);
    ADD_FAILURE() << "no frame can be created: the allocation should fail";
  } catch (const out_of_memory& e) {
    // Only the host-located pool is short (the device's frames are all made and in use): the advice is
    // about host memory, not the GPU's.
    const std::string m = e.what();
    EXPECT_NE(m.find("no memory for a new page"), std::string::npos) << m;
    EXPECT_NE(m.find("free host memory, or lower TVMM_HOST_BUDGET (24 MiB)"), std::string::npos) << m;
    EXPECT_EQ(m.find("TVMM_DEVICE_BUDGET"), std::string::npos) << m;
  }
  dev->clear();  // the memory is back, within the second
  void* p = nullptr;
  EXPECT_NO_THROW(p = heap.allocate(page));
  EXPECT_EQ(heap.usage().used, 6 * page);
  kernels::fill_pattern(p, page, 9);
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
  heap.free(p);
  heap.free(on_host);
  for (void* q : ptrs) heap.free(q);
}

TEST(ManagedHeap, AFailedPrefetchLeavesThePageWhereItWasWithItsBytes) {
  auto faulty = faulty_sim();
  auto* dev = faulty.get();
  ManagedHeap heap(
      small_config(), [] {}, std::move(faulty));
  const std::vector<void*> ptrs = fill_the_device(heap);
  dev->fail_once(device::FaultyDevice::Op::copy_out, device::Errc::invalid_value);
  EXPECT_THROW((void)heap.allocate(page), device_error);
  EXPECT_EQ(heap.usage().used, 4 * page);
  EXPECT_EQ(heap.usage().on_device, 4 * page);
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(kernels::count_mismatches(ptrs[i], page, i), 0u) << "allocation " << i;
}

TEST(TransparentHeapChoice, AutoPicksVmmWhereHostChunksExistAndRefusesAnUnknownMechanism) {
  std::string why;
  auto vmm = make_transparent_heap(
      small_config(), [] {}, &why);
  EXPECT_STREQ(vmm->mechanism(), "vmm");
  EXPECT_NE(why.find("host-located VMM memory"), std::string::npos) << why;
  Config bad = small_config();
  bad.transparent_memory = "both";
  EXPECT_THROW((void)make_transparent_heap(bad, [] {}), config_error);
}

}  // namespace
}  // namespace tvmm::vmm
