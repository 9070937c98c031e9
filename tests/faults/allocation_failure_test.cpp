// std::bad_alloc at every allocation of a pin's slow path: the pin fails with bad_alloc (or succeeds),
// and the pager stays whole: its invariants hold, every tensor reads back what was written, and the
// next pins work; likewise for the C API, pager creation included, and for transparent mode's heap
// (the last two tests). This binary replaces the global operator new with one that a test arms to
// fail the n-th allocation of the arming thread; the sweep arms n = 0, 1, 2, ... until a pin makes
// fewer than n allocations. (A separate binary: the replacement must not count the other tests'
// allocations.) The pager's and the heap's sweeps also run on the CUDA backend over the driver emulator
// (ctest's emulated.faults.pager and .heap, TVMM_TEST_DEVICE=cuda): there the failing allocation may be
// the backend's or the emulator's, which then returns CUDA_ERROR_OUT_OF_MEMORY, as a driver does.
// In this file, in order:
// - the replacement operator new (allocate, fail_allocation, disarm);
// - the pager sweeps (Fixture, sweep): pins that evict, spill to NVMe, replay a trace, write behind,
//   allocate, free and discard;
// - pieces the pager relies on not to allocate where it cannot fail: address runs, the faulty storage
//   adaptor the NVMe tests build on;
// - range pins released together, a stream pin of a tensor being written back, frees with a stream use
//   on record;
// - the driver emulator's cuCtxCreate (emulated.faults.pager only);
// - transparent mode's heap, vmm and um (HeapFixture, sweep_heap; the um sweep also counts the
//   simulator's managed memory; its TEST is the file's last, after the C API's);
// - the C API (CStep, c_step).
// ALLOC_SWEEP_LOG=1 prints each n to stderr; `break tvmm_allocation_fails` in a debugger stops at the
// failing allocation (`ignore` it n times).

#include <gtest/gtest.h>

#if defined(TVMM_HAVE_CUDA)
#include <cuda.h>
#include <dlfcn.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/device/sim/sim_device.hpp"
#include "backends/storage/faulty/faulty_storage.hpp"
#include "backends/storage/posix/posix_storage.hpp"
#include "common/range_allocator.hpp"
#include "device_bytes.hpp"
#include "kernels/pattern.hpp"
#include "test_support.hpp"
#include "tvmm/tvmm.h"
#include "vmm/transparent/transparent_heap.hpp"

namespace {

// Allocations left before the next one fails on this thread; negative: disarmed.
thread_local long allocations_left = -1;
thread_local bool failed = false;

// Called just before the armed allocation throws: a place for a debugger's breakpoint.
extern "C" [[gnu::noinline]] void tvmm_allocation_fails() { asm volatile(""); }

void* allocate(std::size_t n, std::size_t align) {
  if (allocations_left == 0) {
    allocations_left = -1;  // one failure per arming: what handles it may allocate again
    failed = true;
    tvmm_allocation_fails();
    throw std::bad_alloc();
  }
  if (allocations_left > 0) --allocations_left;
  if (n == 0) n = 1;
  void* p =
      align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_nothrow(std::size_t n, std::size_t align) noexcept {
  try {
    return allocate(n, align);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

// Arms the calling thread: its allocation number `n` (0 = the next) throws std::bad_alloc.
void fail_allocation(long n) {
  failed = false;
  allocations_left = n;
}
// Disarms; true if the armed allocation failed.
bool disarm() {
  allocations_left = -1;
  return failed;
}
// While alive, this thread's allocations do not count and none fails: for the test's own byte writes
// and checks, which on the CUDA backend launch kernels (on the simulator they allocate nothing).
class NotSwept {
 public:
  NotSwept() noexcept : saved_(std::exchange(allocations_left, -1)) {}
  ~NotSwept() { allocations_left = saved_; }
  NotSwept(const NotSwept&) = delete;
  NotSwept& operator=(const NotSwept&) = delete;

 private:
  long saved_;
};

}  // namespace

void* operator new(std::size_t n) { return allocate(n, 0); }
void* operator new[](std::size_t n) { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, static_cast<std::size_t>(a)); }
// The nothrow forms too (std::stable_sort's buffer uses them): every form must pair with the deletes
// below, or a sanitizer sees operator new freed by free().
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

using namespace tvmm;

namespace {

constexpr std::size_t kPage = 64 * KiB;

// A device of 4 frames full of dirty pages (the host tier holds the rest), so that pinning another
// tensor evicts: claims victims, queues write-backs, maps frames and queues page-ins.
// Bytes are written and checked through TestPager (tests/device_bytes.hpp): on the simulator by the
// CPU, and with TVMM_TEST_DEVICE=cuda (ctest's emulated.faults.pager) on the CUDA backend by its
// kernels, where host code must not touch device memory.
struct Fixture {
  explicit Fixture(Config c) : tp(std::move(c)), pager(*tp) {
    for (std::size_t i = 0; i < 6; ++i) {
      tensors.push_back(pager.allocate(2 * kPage, {"t" + std::to_string(i)}));
      seeds.push_back(100 + i);
      write(tensors.back(), seeds.back());
    }
    // With trace prefetch, record the loop and start replaying it (Belady eviction, prefetches).
    if (pager.config().prefetch == "trace") {
      for (int it = 0; it < 3; ++it) iteration();
    }
  }
  // One iteration of a loop over every tensor on a stream, each pinned to be read and written.
  void iteration() {
    auto s = pager.create_stream();
    pager.mark_iteration();
    for (Tensor& t : tensors) {
      auto pin = t.pin(s, Access::read_write);
      (void)pin;
    }
    s.synchronize();
  }
  // No page stays in transit once the step is over (a claimed page that no transfer will ever
  // publish: the pin that claimed it failed without giving it back).
  [[nodiscard]] bool stranded() const {
    for (const Tensor& t : tensors) {
      for (std::size_t off = 0; off < t.size(); off += kPage) {
        if (!test::eventually([&] { return t.tier(off) != Tier::transit; }, std::chrono::milliseconds(5'000)))
          return true;
      }
    }
    return false;
  }
  // Every tensor holds what was last written, and the pager's invariants hold.
  void expect_intact(const std::string& where) {
    pager.check_invariants();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (seeds[i] == kUndefined) continue;
      EXPECT_EQ(mismatches(tensors[i], seeds[i]), 0u) << "tensor t" << i << " " << where;
    }
    pager.check_invariants();
  }
  //! Writes pattern `seed` into all of `t` through a host pin.
  void write(Tensor& t, std::uint64_t seed) {
    auto pin = t.pin(Access::write);
    const NotSwept own_kernel;
    tp.fill(nullptr, pin.data(), t.size(), seed);
  }
  //! The bytes of [p, p + n) (pinned) that differ from pattern `seed`.
  std::uint64_t mismatches(void* p, std::size_t n, std::uint64_t seed) {
    const NotSwept own_kernel;
    const std::uint64_t before = tp.mismatches();
    tp.check(nullptr, p, n, seed);
    return tp.mismatches() - before;
  }
  //! The bytes of `t` that differ from pattern `seed`, read through a host pin.
  std::uint64_t mismatches(Tensor& t, std::uint64_t seed) {
    auto pin = t.pin(Access::read);
    return mismatches(pin.data(), t.size(), seed);
  }
  //! A seed for a tensor whose contents are undefined (discarded, not yet written again).
  static constexpr std::uint64_t kUndefined = ~std::uint64_t{0};
  test::TestPager tp;
  Pager& pager;
  std::vector<Tensor> tensors;
  std::vector<std::uint64_t> seeds;
};

// Runs `step` (a pin that evicts) with allocation n failing, for n = 0, 1, ... until the step makes
// fewer allocations than n; after each failure the pager must be intact and the step must then work.
template <class Step>
void sweep(Config c, Step step) {
  long n = 0;
  for (; n < 10'000; ++n) {
    auto owned = std::make_unique<Fixture>(c);
    Fixture& f = *owned;
    if (std::getenv("ALLOC_SWEEP_LOG")) std::fprintf(stderr, "n=%ld\n", n);
    bool threw = false;
    std::string what;
    fail_allocation(n);
    try {
      step(f);
    } catch (const std::exception& e) {
      // Mostly std::bad_alloc; an NVMe request that could not be queued fails as tvmm::io_error.
      threw = true;
      what = e.what();
    }
    const bool hit = disarm();
    // A failure the pager handles itself (a release point's event that cannot be allocated: it
    // synchronizes the stream instead) lets the step succeed; nothing may throw without one.
    ASSERT_TRUE(hit || !threw) << "the step threw with no allocation failed (n = " << n << "): " << what;
    if (f.stranded()) {
      (void)owned.release();  // freeing its tensors would wait for the stranded page for good
      FAIL() << "a page stayed in transit after allocation " << n << " failed";
    }
    f.expect_intact("after allocation " + std::to_string(n) + " failed");
    if (!hit) break;  // the step made fewer than n + 1 allocations: every one of them has failed once
    step(f);          // and it works now
    f.expect_intact("after the step ran again, allocation " + std::to_string(n));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(n, 0) << "the step allocated nothing: the sweep tested nothing";
}

}  // namespace

// A host pin that evicts dirty victims to the host tier and pages a tensor in.
TEST(AllocationFailure, HostPinThatEvicts) {
  sweep(test::small_config(4, 16), [](Fixture& f) {
    auto pin = f.tensors[0].pin(Access::read);
    EXPECT_EQ(f.mismatches(pin.data(), f.tensors[0].size(), f.seeds[0]), 0u);
  });
}

// The same through a stream pin, written: the victims' write-backs and the page-in are queued.
TEST(AllocationFailure, StreamPinThatEvicts) {
  sweep(test::small_config(4, 16), [](Fixture& f) {
    auto s = f.pager.create_stream();
    {
      auto pin = f.tensors[1].pin(s, Access::read_write);
      (void)pin;
    }
    s.synchronize();
  });
}

// With a full host tier and an NVMe tier behind it: evicting spills host pages to NVMe first.
TEST(AllocationFailure, PinThatSpillsToNvme) {
  test::TempDir dir;
  Config c = test::small_config(4, 3);
  c.nvme.paths = {dir.path()};
  c.nvme.budget = 16 * kPage;
  sweep(c, [](Fixture& f) {
    auto pin = f.tensors[0].pin(Access::read);
    EXPECT_EQ(f.mismatches(pin.data(), f.tensors[0].size(), f.seeds[0]), 0u);
  });
}

// A replayed loop: Belady eviction and trace prefetch choose the victims and queue page-ins ahead.
TEST(AllocationFailure, ReplayedLoopWithTracePrefetch) {
  Config c = test::small_config(4, 16);
  c.prefetch = "trace";
  c.eviction = "belady";
  sweep(c, [](Fixture& f) { f.iteration(); });
}

// The same loop with write-behind: written pages are copied to the host tier while they stay resident.
TEST(AllocationFailure, ReplayedLoopWithWriteBehind) {
  Config c = test::small_config(4, 16);
  c.prefetch = "trace";
  c.eviction = "belady";
  c.write_behind = true;
  sweep(c, [](Fixture& f) { f.iteration(); });
}

// A tensor allocated, written through a host pin (evicting) and freed; then one discarded and
// written again. Under LRU, LFU and CLOCK: the discarded pages are claimed before the policy picks its
// own victims, which LFU ranks in memory it allocates.
void allocate_write_free_and_discard(const char* eviction) {
  Config c = test::small_config(4, 16);
  c.eviction = eviction;
  sweep(c, [](Fixture& f) {
    // The last tensor written is resident: discarded, its 2 pages are the first victims, and the
    // 3-page tensor's third frame comes from the policy.
    f.tensors[5].discard();
    f.seeds[5] = Fixture::kUndefined;  // its contents are gone until it is written again below
    {
      auto t = f.pager.allocate(3 * kPage, {"new"});
      f.write(t, 7);
      EXPECT_EQ(f.mismatches(t, 7), 0u);
    }
    f.write(f.tensors[5], 305);
    f.seeds[5] = 305;
  });
}

TEST(AllocationFailure, AllocateWriteFreeAndDiscard) {
  for (const char* eviction : {"lru", "lfu", "clock"}) {
    SCOPED_TRACE(eviction);
    allocate_write_free_and_discard(eviction);
    if (HasFailure()) return;
  }
}

// The address space's runs: allocated after prepare(), they can be freed in any order, the ones with no
// free neighbour included, with every allocation failing; none is lost (all of it is one run again).
TEST(AllocationFailure, AddressRunsAreFreedWithoutAllocating) {
  common::RangeAllocator<std::uint32_t> runs(64);
  std::vector<std::uint32_t> starts;
  for (int i = 0; i < 16; ++i) {
    runs.prepare();
    starts.push_back(*runs.allocate(4));
  }
  // Every other run first (each with no free neighbour), then the rest, each failing allocation armed.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = static_cast<std::size_t>(pass); i < starts.size(); i += 2) {
      fail_allocation(0);
      runs.free(starts[i], 4);
      EXPECT_FALSE(disarm()) << "freeing run " << i << " allocated";
    }
  }
  EXPECT_EQ(runs.free_total(), 64u);
  EXPECT_EQ(runs.largest_free_run(), 64u);
}

// The faulty storage adaptor, which the NVMe tests build on, keeps the storage backends' contract under
// std::bad_alloc: submit() queues a batch whole or not at all, and reap() hands out every completion,
// a synthetic failure and a held one included, without allocating. (Until it made its batch aside, a
// failure after the first request left that one's synthetic failure queued, and reap allocated.)
TEST(AllocationFailure, FaultyStorageSubmitIsAllOrNoneAndReapAllocatesNothing) {
  using namespace tvmm::storage;
  constexpr std::size_t kSlot = kIoAlignment;
  test::TempDir dir;
  FaultyStorage f(std::make_unique<PosixStorage>(StorageOptions{{dir.path()}, kSlot, 8, 4, false, true}));
  f.set_rules({FaultRule::of(FaultRule::Kind::eio).at_slot(0), FaultRule::of(FaultRule::Kind::hold).at_slot(2),
               FaultRule::of(FaultRule::Kind::bit_flip).on(IoOp::write).at_slot(3)});
  test::AlignedBuffer buf(4 * kSlot);
  std::vector<IoRequest> reqs;
  for (std::uint32_t s = 0; s < 4; ++s) reqs.push_back({IoOp::write, s, buf.at(s, kSlot), 100 + s});
  for (long n = 0;; ++n) {
    fail_allocation(n);
    int rc = -1;
    bool threw = false;
    try {
      rc = f.submit(reqs);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool hit = disarm();
    SCOPED_TRACE("allocation " + std::to_string(n));
    if (threw) {
      EXPECT_EQ(f.outstanding(), 0u) << "a batch that failed left requests queued";
      EXPECT_EQ(f.held(), 0u);
      continue;
    }
    ASSERT_EQ(rc, 0);
    ASSERT_EQ(f.outstanding(), 4u);
    f.release_held(1);
    std::array<IoCompletion, 8> out{};
    std::array<std::int64_t, 4> results{};  // by tag - 100; nothing below allocates while armed
    std::array<int, 4> seen{};
    std::size_t reaped = 0;
    fail_allocation(0);
    while (reaped < 4) {
      const std::size_t k = f.reap(out, 1);
      ASSERT_GT(k, 0u);
      for (std::size_t i = 0; i < k; ++i, ++reaped) {
        ASSERT_LT(out[i].tag - 100, 4u);
        results[out[i].tag - 100] = out[i].result;
        ++seen[out[i].tag - 100];
      }
    }
    EXPECT_FALSE(disarm()) << "reap allocated";
    EXPECT_EQ(seen, (std::array<int, 4>{1, 1, 1, 1}));
    EXPECT_EQ(results[0], -EIO);
    for (std::size_t t : {1, 2, 3}) EXPECT_EQ(results[t], static_cast<std::int64_t>(kSlot)) << t;
    EXPECT_EQ(f.outstanding(), 0u);
    if (!hit) break;  // submit made fewer than n + 1 allocations: every one of them has failed once
  }
}

// Range pins of three tensors released together, a prefetch, and a tensor given up as an address and
// freed through the pager (a small one: it lives in the always-resident arena), on one stream.
TEST(AllocationFailure, RangePinsReleasedTogetherPrefetchAndFree) {
  sweep(test::small_config(4, 16), [](Fixture& f) {
    auto s = f.pager.create_stream();
    {
      std::vector<Pin> pins;
      pins.reserve(3);
      pins.push_back(f.tensors[0].pin_range(s, 0, kPage, Access::read_write));
      pins.push_back(f.tensors[1].pin_range(s, kPage, kPage, Access::read));
      pins.push_back(f.tensors[2].pin(s, Access::read));
      release_together(pins);
    }
    f.tensors[3].prefetch(s);
    auto small = f.pager.allocate(100, {"small"});
    f.write(small, 9);
    EXPECT_EQ(f.mismatches(small, 9), 0u);
    f.pager.free(small.release());
    s.synchronize();
  });
}

// A stream pin of a tensor whose write-back is still queued (behind another tensor's, which waits for
// that tensor's last kernel) while its own uses are over: the pin takes its pages back from the
// copies' host slots (PagerImpl::in_flight_write_backs, load_pages). A failure gives them back to their
// eviction, or to the host tier once that is retired: none stays in transit, and the bytes hold.
TEST(AllocationFailure, StreamPinOfATensorBeingWrittenBack) {
  sweep(test::small_config(4, 16), [](Fixture& f) {  // lru; 4 frames, tensors of 2 pages
    auto s = f.pager.create_stream();
    auto other = f.pager.create_stream();
    { auto pin = f.tensors[1].pin(other, Access::read_write); }
    other.busy_for(std::chrono::milliseconds(20));  // t1's last use runs on...
    { auto pin = f.tensors[0].pin(s, Access::read_write); }
    s.synchronize();                                         // (t0's is over)
    { auto pin = f.tensors[2].pin(s, Access::read_write); }  // ...while t2 takes t1's frames
    { auto pin = f.tensors[3].pin(s, Access::read_write); }  // and t3 t0's: its write-backs queue behind t1's
    auto pin = f.tensors[0].pin(s, Access::read);
    s.synchronize();
    other.synchronize();
  });
}

// A tensor and a small one (in the always-resident arena) freed while their last stream uses are still
// on record: freeing waits for those uses in place, allocating nothing, since it runs where nothing may
// throw (a tensor's destructor). Until it did, the uses' events were collected into a list first, and a
// failure there ended the process.
TEST(AllocationFailure, FreedWithAStreamUseOnRecord) {
  sweep(test::small_config(4, 16), [](Fixture& f) {
    auto s = f.pager.create_stream();
    {
      auto t = f.pager.allocate(2 * kPage, {"new"});
      auto small = f.pager.allocate(100, {"small"});
      {
        auto pin = t.pin(s, Access::write);
        auto pin_small = small.pin(s, Access::write);
        s.busy_for(std::chrono::microseconds(200));
      }
    }  // both freed here, each with a use on s
    s.synchronize();
  });
}

#if defined(TVMM_HAVE_CUDA)
namespace {
// The process's thread count (/proc/self/status), read while no allocation is armed.
long threads_now() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long n = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "Threads: %ld", &n) == 1) break;
  }
  std::fclose(f);
  return n;
}
}  // namespace

// The driver emulator's cuCtxCreate with each of its allocations failing in turn (emulated.faults.pager:
// the emulator is libcuda.so.1 there, and its allocations are this binary's): it answers
// CUDA_ERROR_OUT_OF_MEMORY and leaves nothing behind, no context made current and no context's stream
// worker running (a context it registered would hold one); LeakSanitizer checks that none is lost
// either (`make asan`). Until the emulator built its context all or nothing, a failure after
// its NULL stream's worker started left a context registered, running and never returned.
TEST(AllocationFailure, EmulatedContextCreationIsAllOrNothing) {
  if (!test::on_cuda()) GTEST_SKIP() << "on the CUDA backend only (ctest's emulated.faults.pager)";
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto* init = reinterpret_cast<decltype(&::cuInit)>(::dlsym(lib, "cuInit"));
  auto* create = reinterpret_cast<CUresult (*)(CUcontext*, unsigned, CUdevice)>(::dlsym(lib, "cuCtxCreate_v2"));
  auto* current = reinterpret_cast<decltype(&::cuCtxGetCurrent)>(::dlsym(lib, "cuCtxGetCurrent"));
  auto* destroy = reinterpret_cast<decltype(&::cuCtxDestroy_v2)>(::dlsym(lib, "cuCtxDestroy_v2"));
  ASSERT_TRUE(init != nullptr && create != nullptr && current != nullptr && destroy != nullptr);
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  // Earlier tests' retired stream workers may still be exiting: start from a settled count.
  for (int i = 0, same = 0; i < 100 && same < 3; ++i) {
    const long a = threads_now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    same = threads_now() == a ? same + 1 : 0;
  }
  long swept = 0;
  for (long n = 0; n < 10'000; ++n) {
    CUcontext before = nullptr;
    ASSERT_EQ(current(&before), CUDA_SUCCESS);
    const long threads = threads_now();
    CUcontext made = nullptr;
    fail_allocation(n);
    const CUresult r = create(&made, 0, 0);
    if (!disarm()) {
      ASSERT_EQ(r, CUDA_SUCCESS);
      EXPECT_GE(threads_now(), threads + 1) << "a context runs its NULL stream's worker";
      ASSERT_EQ(destroy(made), CUDA_SUCCESS);
      break;
    }
    ++swept;
    if (r == CUDA_SUCCESS) {  // the failure was handled inside
      ASSERT_EQ(destroy(made), CUDA_SUCCESS);
      continue;
    }
    EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY) << "allocation " << n;
    CUcontext after = nullptr;
    ASSERT_EQ(current(&after), CUDA_SUCCESS);
    EXPECT_EQ(after, before) << "allocation " << n;
    EXPECT_LE(threads_now(), threads) << "allocation " << n << " failed and a context's stream worker runs";
  }
  EXPECT_GT(swept, 2) << "cuCtxCreate allocated too little for the sweep to test anything";
}
#endif

// Transparent mode's heap, both mechanisms (vmm remaps, um managed memory): an allocation that demotes
// the coldest device page to the host, a small allocation in a slab, frees (at once, deferred to the next
// quiescent point, and after a stream's work), and a quiescent point that
// promotes the page a launch named. After a failure every live allocation keeps its size and bytes, the
// heap's usage counts the live allocations' pages, and the same step then works.
namespace {

struct HeapFixture {
  static constexpr std::size_t kHeapPage = 2 * MiB;
  // Allocations up to an eighth of a page take a slot of a slab page of their slot size (a power of 2):
  // the fixture's small allocation has a slab of 1 KiB slots, each step's one of 4 KiB slots, so the first
  // step makes a slab page and releases one.
  static constexpr std::size_t kSmall = 1000, kStepSmall = 3000;
  static constexpr std::size_t kCapacity = 12 * kHeapPage;  // device and host budgets together
  struct Live {
    void* ptr;
    std::size_t bytes;
    std::uint64_t seed;
  };
  explicit HeapFixture(const std::string& memory_kind) : memory(memory_kind) {
    Config c;
    if (test::on_cuda()) {  // emulated.faults.heap: the CUDA backend (managed memory: the host reads it)
      c.device_backend = "cuda";
      c.cuda_device = 0;
      c.host_numa = "none";
      static std::once_flag said;
      std::call_once(said, [] { std::fprintf(stderr, "HeapFixture: on the CUDA backend (TVMM_TEST_DEVICE=cuda)\n"); });
    }
    c.device_budget = 4 * kHeapPage;
    c.host_budget = kCapacity - c.device_budget;
    c.bind_threads = false;
    c.transparent_placement = "use";  // note_use ranks the pages maintain() promotes
    c.transparent_memory = memory;
    // vmm: an address range of exactly the capacity, so a page of it lost to a failure shows when
    // expect_intact fills the heap.
    c.va_size = kCapacity;
    heap = vmm::make_transparent_heap(c, [] {});
    live.reserve(32);  // a push_back after a successful allocate must not fail
    if (!heap->device().create_stream(&stream).ok()) throw std::runtime_error("no stream");
    if (on_device()) tally = std::make_unique<test::DeviceTally>(heap->device());
    for (std::uint64_t i = 0; i < 5; ++i) add(kHeapPage, 200 + i);
    add(kSmall, 210);
  }
  ~HeapFixture() {
    try {
      heap->maintain(true);  // releases what the frees deferred before the stream goes
    } catch (const std::exception& e) {
      ADD_FAILURE() << "maintain at the end: " << e.what();
    }
    (void)heap->device().destroy_stream(stream);
  }
  HeapFixture(const HeapFixture&) = delete;
  HeapFixture& operator=(const HeapFixture&) = delete;
  void add(std::size_t bytes, std::uint64_t seed) {
    void* p = heap->allocate(bytes);
    live.push_back({p, bytes, seed});
    fill(p, bytes, seed);
  }
  // The heap's bytes are device memory the host cannot touch: vmm on the CUDA backend. There the
  // backend's pattern kernels write and check them (test::DeviceTally).
  [[nodiscard]] bool on_device() const { return test::on_cuda() && memory == "vmm"; }
  void fill(void* p, std::size_t bytes, std::uint64_t seed) {
    if (!on_device()) {
      kernels::fill_pattern(p, bytes, seed);
      return;
    }
    const NotSwept own_kernel;
    tally->fill(nullptr, p, bytes, seed);
  }
  std::size_t mismatches(void* p, std::size_t bytes, std::uint64_t seed) {
    if (!on_device()) return kernels::count_mismatches(p, bytes, seed);
    const NotSwept own_kernel;
    const std::uint64_t before = tally->mismatches();
    tally->check(nullptr, p, bytes, seed);
    return static_cast<std::size_t>(tally->mismatches() - before);
  }
  enum class Free { now, deferred, after_stream };
  // Frees live[i] (at once, at the next quiescent point, or once the work queued on `stream` so far has
  // run); a free that throws may have freed or not: the heap says which (size_of).
  void free_at(std::size_t i, Free how = Free::now) {
    void* p = live[i].ptr;
    try {
      if (how == Free::now) {
        heap->free(p);
      } else if (how == Free::deferred) {
        heap->free_deferred(p);
      } else {
        heap->free_after(p, stream);
      }
    } catch (...) {
      if (heap->size_of(p) == 0) live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      throw;
    }
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
  }
  // One step: a new page (past the device budget: demotes) and a small allocation, the oldest of each
  // freed, and a quiescent point after a launch named the
  // oldest page.
  void step() {
    add(kHeapPage, next_seed++);
    add(kStepSmall, next_seed++);
    free_at(0);
    const auto small = std::find_if(live.begin(), live.end(), [](const Live& l) { return l.bytes < kHeapPage; });
    free_at(static_cast<std::size_t>(small - live.begin()), Free::deferred);
    add(kHeapPage, next_seed++);
    free_at(live.size() - 1, Free::after_stream);
    heap->note_use(live.front().ptr);
    heap->maintain(true);
  }
  // After a quiescent point (which releases the frees deferred so far), with no allocation failing.
  void expect_intact(const std::string& where) {
    (void)heap->device().synchronize_stream(stream);
    heap->maintain(true);
    std::size_t pages = 0;
    std::set<std::size_t> slabs;  // the slot sizes of the live small allocations: a slab page each
    for (const Live& l : live) {
      EXPECT_EQ(heap->size_of(l.ptr), l.bytes) << where;
      EXPECT_EQ(mismatches(l.ptr, l.bytes, l.seed), 0u) << "seed " << l.seed << " " << where;
      if (l.bytes == kHeapPage) {
        ++pages;
      } else {
        slabs.insert(std::bit_ceil(l.bytes));
      }
    }
    const auto u = heap->usage();
    EXPECT_EQ(u.used, (pages + slabs.size()) * kHeapPage)
        << "the heap's usage counts other pages than the live allocations' " << where;
    // Every page of the capacity can still be allocated: no frame, address range or slab was lost.
    std::vector<void*> fill;
    try {
      for (std::size_t used = u.used; used < kCapacity; used += kHeapPage) fill.push_back(heap->allocate(kHeapPage));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "only " << fill.size() << " of the " << (kCapacity - u.used) / kHeapPage
                    << " free pages could be allocated (" << e.what() << ") " << where;
    }
    for (void* p : fill) heap->free(p);
    EXPECT_LE(u.on_device, 4 * kHeapPage) << where;
    // um: the driver holds managed memory for the live pages only (the simulator does not limit managed
    // memory, so the fill above cannot see a range lost to a failure). Checked on the simulator, the
    // fixture's backend; another has no count to compare.
    const auto* sim = dynamic_cast<const device::SimDevice*>(&heap->device());
    if (memory == "um" && sim != nullptr) {
      EXPECT_EQ(sim->managed_bytes(), u.used) << "managed memory no page holds " << where;
    }
  }
  std::string memory;  // "vmm" or "um"
  std::unique_ptr<vmm::TransparentHeap> heap;
  std::unique_ptr<test::DeviceTally> tally;  // on_device(): writes and checks the bytes (goes before heap)
  device::StreamHandle stream = nullptr;
  std::vector<Live> live;
  std::uint64_t next_seed = 300;
};

void sweep_heap(const std::string& memory) {
  long n = 0;
  for (; n < 10'000; ++n) {
    HeapFixture f(memory);
    if (std::getenv("ALLOC_SWEEP_LOG")) std::fprintf(stderr, "n=%ld\n", n);
    bool threw = false;
    std::string what;
    fail_allocation(n);
    try {
      f.step();
    } catch (const std::exception& e) {
      threw = true;
      what = e.what();
    }
    const bool hit = disarm();
    ASSERT_TRUE(hit || !threw) << "the step threw with no allocation failed (n = " << n << "): " << what;
    f.expect_intact("after allocation " + std::to_string(n) + " failed");
    if (!hit) break;
    f.step();
    f.expect_intact("after the step ran again, allocation " + std::to_string(n));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(n, 0) << "the step allocated nothing: the sweep tested nothing";
}

}  // namespace

// The C API (include/tvmm/tvmm.h): a C program's step, each of its allocations failing in turn. Every
// call returns TVMM_SUCCESS or TVMM_ERROR_OUT_OF_MEMORY with a reason, a failed create leaves its
// output NULL, no C++ exception crosses the API, the tensors written before keep their bytes, and the
// step then works. Pager creation is swept the same way.
namespace {

constexpr const char* kCConfig = R"([device]
backend = "sim"
budget = "256KiB"
page_size = "64KiB"
va_size = "64MiB"

[device.sim]
granularity = "64KiB"

[host]
budget = "1MiB"

[pager]
wait_timeout_ms = 2000

[policy.admission]
min_bytes = 0

[policy.prefetch]
name = "trace"

[policy.eviction]
name = "belady"
)";

struct CStep {
  int calls = 0;     // calls made
  int failures = 0;  // calls that failed (with TVMM_ERROR_OUT_OF_MEMORY)
  // Checks one call's status; false if it failed (and then its output, if any, must be NULL).
  bool ok(tvmm_status st, const void* out, const char* what) {
    ++calls;
    if (st == TVMM_SUCCESS) return true;
    ++failures;
    EXPECT_EQ(st, TVMM_ERROR_OUT_OF_MEMORY) << what << ": " << tvmm_status_name(st) << ": " << tvmm_last_error();
    EXPECT_STRNE(tvmm_last_error(), "") << what << " failed without a reason";
    EXPECT_EQ(out, nullptr) << what << " failed but left a handle";
    return false;
  }
};

// Pins `t` on the host for reading and counts the bytes that differ from `seed`'s pattern (or returns
// SIZE_MAX if it cannot be pinned).
std::size_t c_mismatches(tvmm_tensor* t, std::uint64_t seed) {
  tvmm_pin* pin = nullptr;
  if (tvmm_pin_create(t, nullptr, 0, 0, TVMM_ACCESS_READ, &pin) != TVMM_SUCCESS) return SIZE_MAX;
  const std::size_t bad = test::mismatches(tvmm_pin_address(pin), tvmm_tensor_size(t), seed);
  tvmm_pin_destroy(pin);
  return bad;
}

// One iteration of a C program: a new tensor written on the host, the old ones pinned on a stream
// (read and written, two at a time, released together), the counters read, a prefetch, a discard, and the new
// tensor and the stream destroyed. Returns the calls' tally.
CStep c_step(tvmm_pager* pager, std::vector<tvmm_tensor*>& old) {
  CStep r;
  r.ok(tvmm_pager_mark_iteration(pager), nullptr, "tvmm_pager_mark_iteration");
  tvmm_stream* s = nullptr;
  const bool have_stream = r.ok(tvmm_stream_create(pager, &s), s, "tvmm_stream_create");
  tvmm_tensor* t = nullptr;
  if (r.ok(tvmm_tensor_create(pager, 3 * kPage, "new", &t), t, "tvmm_tensor_create")) {
    tvmm_pin* w = nullptr;
    if (r.ok(tvmm_pin_create(t, nullptr, 0, 0, TVMM_ACCESS_WRITE, &w), w, "tvmm_pin_create (host, write)")) {
      test::fill(tvmm_pin_address(w), tvmm_tensor_size(t), 7);
      tvmm_pin_destroy(w);
    }
  }
  if (have_stream) {
    for (std::size_t k = 0; k < old.size(); k += 2) {  // two tensors per kernel: 4 of the 4 frames
      std::array<tvmm_pin*, 2> pins{};                 // no allocation of the test's own while armed
      for (std::size_t i = k; i < std::min(k + 2, old.size()); ++i) {
        tvmm_pin* p = nullptr;
        if (r.ok(tvmm_pin_create(old[i], s, 0, 0, TVMM_ACCESS_READ_WRITE, &p), p, "tvmm_pin_create (stream)"))
          pins[i - k] = p;
      }
      tvmm_pins_destroy(pins.data(), pins.size());  // NULL entries are ignored
    }
    r.ok(tvmm_tensor_prefetch(old.front(), s), nullptr, "tvmm_tensor_prefetch");
    r.ok(tvmm_stream_synchronize(s), nullptr, "tvmm_stream_synchronize");
  }
  std::size_t needed = 0;
  static std::array<char, 1 << 16> json;
  if (r.ok(tvmm_pager_stats_json(pager, json.data(), json.size(), &needed), nullptr, "tvmm_pager_stats_json")) {
    EXPECT_LE(needed, json.size());
    EXPECT_EQ(json.front(), '{');
  }
  if (t != nullptr) r.ok(tvmm_tensor_discard(t), nullptr, "tvmm_tensor_discard");
  tvmm_tensor_destroy(t);
  tvmm_stream_destroy(s);
  return r;
}

}  // namespace

TEST(AllocationFailure, CApiCallsFailWithAStatusAndLoseNothing) {
  test::TempDir dir;
  const std::string path = dir.path() + "/c.toml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(kCConfig, f);
    std::fclose(f);
  }
  // Pager creation: parsing, validation, the device and the tiers.
  long n = 0;
  for (; n < 100'000; ++n) {
    tvmm_pager* pager = reinterpret_cast<tvmm_pager*>(&n);  // not NULL: a failed create must clear it
    if (std::getenv("ALLOC_SWEEP_LOG")) std::fprintf(stderr, "create n=%ld\n", n);
    fail_allocation(n);
    const tvmm_status st = tvmm_pager_create(path.c_str(), &pager);
    const bool hit = disarm();
    if (!hit) {
      ASSERT_EQ(st, TVMM_SUCCESS) << tvmm_last_error();
      tvmm_pager_destroy(pager);
      break;
    }
    if (st == TVMM_SUCCESS) {  // the failure was handled inside (a hint, a retry)
      tvmm_pager_destroy(pager);
      continue;
    }
    ASSERT_EQ(st, TVMM_ERROR_OUT_OF_MEMORY)
        << "allocation " << n << ": " << tvmm_status_name(st) << ": " << tvmm_last_error();
    ASSERT_EQ(pager, nullptr) << "allocation " << n;
  }
  EXPECT_GT(n, 0) << "creating a pager allocated nothing: the sweep tested nothing";
  // The step, on a device of 4 frames that 5 tensors of 2 pages overfill.
  long swept = 0;
  for (n = 0; n < 100'000; ++n) {
    tvmm_pager* pager = nullptr;
    ASSERT_EQ(tvmm_pager_create(path.c_str(), &pager), TVMM_SUCCESS) << tvmm_last_error();
    std::vector<tvmm_tensor*> old(5, nullptr);
    for (std::size_t i = 0; i < old.size(); ++i) {
      ASSERT_EQ(tvmm_tensor_create(pager, 2 * kPage, "old", &old[i]), TVMM_SUCCESS) << tvmm_last_error();
      tvmm_pin* w = nullptr;
      ASSERT_EQ(tvmm_pin_create(old[i], nullptr, 0, 0, TVMM_ACCESS_WRITE, &w), TVMM_SUCCESS) << tvmm_last_error();
      test::fill(tvmm_pin_address(w), 2 * kPage, 200 + i);
      tvmm_pin_destroy(w);
    }
    for (int it = 0; it < 3; ++it) {  // recorded, then replayed: Belady eviction and trace prefetch
      const CStep warm = c_step(pager, old);
      ASSERT_EQ(warm.failures, 0);
    }
    if (std::getenv("ALLOC_SWEEP_LOG")) std::fprintf(stderr, "step n=%ld\n", n);
    fail_allocation(n);
    const CStep armed = c_step(pager, old);
    const bool hit = disarm();
    if (!hit) {
      EXPECT_EQ(armed.failures, 0);
    } else {
      ++swept;
    }
    // The stream pins read and wrote the tensors without changing them: every byte is as written.
    for (std::size_t i = 0; i < old.size(); ++i) {
      EXPECT_EQ(c_mismatches(old[i], 200 + i), 0u) << "tensor " << i << " after allocation " << n << " failed";
    }
    const CStep again = c_step(pager, old);
    EXPECT_EQ(again.failures, 0) << "after allocation " << n << " failed";
    for (tvmm_tensor* t : old) tvmm_tensor_destroy(t);
    tvmm_pager_destroy(pager);
    if (::testing::Test::HasFailure() || !hit) break;
  }
  EXPECT_GT(swept, 10) << "the step made too few allocations for the sweep to test anything";
}

TEST(AllocationFailure, TransparentHeapAllocateFreeAndPromote) {
  for (const char* memory : {"vmm", "um"}) {
    SCOPED_TRACE(memory);
    sweep_heap(memory);
    if (HasFailure()) return;
  }
}
