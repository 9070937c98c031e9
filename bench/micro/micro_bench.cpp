// Micro benchmarks of the pager's hot paths (targets in docs/benchmarks.md, checked here, never by
// timed unit tests):
//   pin+unpin of a resident one-page tensor (hit path)      <= 200 ns
//   LRU touch                                               <= 30 ns
//   unthrottled simulated page move                         >= 0.8 x memcpy of the same size
//   the interposer's launch gate, per launch (uncontended)  well under 100 ns
//   placement by use: reading a launch's parameters         reported (docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/device/sim/sim_device.hpp"
#include "policies/clock.hpp"
#include "policies/lru.hpp"
#include "preload/launch_gate.hpp"
#include "preload/launch_uses.hpp"
#include "preload/runtime.hpp"
#include "tvmm/tvmm.hpp"

namespace {

constexpr std::size_t kPage = 2 * tvmm::MiB;

tvmm::Config sim_config(std::size_t device_pages, std::size_t host_pages) {
  tvmm::Config c;
  c.device_budget = device_pages * kPage;
  c.host_budget = host_pages * kPage;
  return c;
}

void BM_PinUnpinHit_Host(benchmark::State& state) {
  tvmm::Pager pager(sim_config(4, 4));
  auto t = pager.allocate(kPage);
  { auto warm = t.pin(tvmm::Access::write); }
  for (auto _ : state) {
    auto pin = t.pin(tvmm::Access::read);
    benchmark::DoNotOptimize(pin.data());
  }
  if (pager.stats().misses != 1) state.SkipWithError("hit path missed");
}
BENCHMARK(BM_PinUnpinHit_Host);

// What the interposer adds to every kernel launch and copy: a shared hold of the launch gate, taken and
// released around the driver call (preload/launch_gate.hpp), with no remap under way.
void BM_LaunchGate(benchmark::State& state) {
  for (auto _ : state) {
    const tvmm::preload::GateEntry entry(false, 0);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_LaunchGate)->ThreadRange(1, 2)->UseRealTime();

// What placement by use adds to a launch (preload/launch_uses.hpp): each 8-byte word of its parameters
// checked against transparent mode's heap, and a use noted for each that points into it. Here through
// the `extra` form (one parameter buffer: no driver is needed for the layout; kernelParams adds one
// lookup in a per-thread cache): range(0) words, one in four a pointer into the heap.
void BM_NoteLaunch(benchmark::State& state) {
  ::setenv("TVMM_DEVICE_BACKEND", "sim", 1);
  ::setenv("TVMM_DEVICE_BUDGET", "16MiB", 1);
  ::setenv("TVMM_HOST_BUDGET", "64MiB", 1);
  static void* memory = nullptr;
  if (memory == nullptr && tvmm::preload::allocate("the benchmark", &memory, 8 * tvmm::MiB) != 0) {
    state.SkipWithError("no transparent heap");
    return;
  }
  const auto words = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint64_t> params(words);
  for (std::size_t i = 0; i < words; ++i) {
    params[i] = i % 4 == 0 ? reinterpret_cast<std::uintptr_t>(memory) + i * 4096 : 1000 + i;  // pointers, sizes
  }
  std::size_t size = words * 8;
  void* extra[] = {reinterpret_cast<void*>(1), params.data(), reinterpret_cast<void*>(2), &size, nullptr};
  for (auto _ : state) {
    tvmm::preload::note_launch(nullptr, nullptr, extra);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_NoteLaunch)->Arg(4)->Arg(64);

void BM_PinUnpinHit_Stream(benchmark::State& state) {
  tvmm::Pager pager(sim_config(4, 4));
  auto s = pager.create_stream();
  auto t = pager.allocate(kPage);
  { auto warm = t.pin(tvmm::Access::write); }
  for (auto _ : state) {
    auto pin = t.pin(s, tvmm::Access::read);
    benchmark::DoNotOptimize(pin.data());
  }
  s.synchronize();
}
BENCHMARK(BM_PinUnpinHit_Stream);

void BM_PinUnpinHit_Threads(benchmark::State& state) {
  static tvmm::Pager* pager = nullptr;
  static std::vector<tvmm::Tensor>* tensors = nullptr;
  if (state.thread_index() == 0) {
    pager = new tvmm::Pager(sim_config(16, 4));
    tensors = new std::vector<tvmm::Tensor>();
    for (int i = 0; i < state.threads(); ++i) {
      tensors->push_back(pager->allocate(kPage));
      auto warm = tensors->back().pin(tvmm::Access::write);
    }
  }
  // Google Benchmark starts timing for all threads together after thread 0's setup.
  for (auto _ : state) {
    auto pin = (*tensors)[static_cast<std::size_t>(state.thread_index())].pin(tvmm::Access::read);
    benchmark::DoNotOptimize(pin.data());
  }
  if (state.thread_index() == 0) {
    delete tensors;
    delete pager;
  }
}
BENCHMARK(BM_PinUnpinHit_Threads)->Threads(2)->UseRealTime();

void BM_LruTouch(benchmark::State& state) {
  const auto n = static_cast<tvmm::policies::PageIndex>(state.range(0));
  tvmm::policies::LruPolicy lru(n);
  for (tvmm::policies::PageIndex p = 0; p < n; ++p) lru.insert(p);
  tvmm::policies::PageIndex i = 0;
  for (auto _ : state) {
    lru.touch(i, 1);
    i = (i + 7919) % n;
  }
}
BENCHMARK(BM_LruTouch)->Arg(1024)->Arg(1 << 16);

// A touch of pages already referenced (a hot page between sweeps): one relaxed load per page.
void BM_ClockTouch(benchmark::State& state) {
  const auto n = static_cast<tvmm::policies::PageIndex>(state.range(0));
  tvmm::policies::ClockPolicy clock(n);
  for (tvmm::policies::PageIndex p = 0; p < n; ++p) clock.insert(p);
  tvmm::policies::PageIndex i = 0;
  for (auto _ : state) {
    clock.touch(i, 1);
    i = (i + 7919) % n;
  }
}
BENCHMARK(BM_ClockTouch)->Arg(1024)->Arg(1 << 16);

// A plain memcpy of one page, the reference for the page-move benchmarks below.
void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Memcpy)->Arg(kPage);

// One page through the simulator's copy engine: stream + engine threads, event-tracked completion.
void BM_SimCopyEngine(benchmark::State& state) {
  using namespace tvmm::device;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  tvmm::SimDeviceConfig c;
  SimDevice dev(c, 8 * kPage);
  void* a = nullptr;
  void* b = nullptr;
  (void)dev.alloc_host(bytes, &a);
  (void)dev.alloc_host(bytes, &b);
  std::memset(a, 1, bytes);
  std::memset(b, 2, bytes);
  StreamHandle s = nullptr;
  (void)dev.create_stream(&s);
  EventHandle e = nullptr;
  (void)dev.create_event(&e);
  for (auto _ : state) {
    (void)dev.memcpy_async(b, a, bytes, CopyKind::device_to_host, s);
    (void)dev.record_event(e, s);
    (void)dev.synchronize_event(e);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  (void)dev.destroy_event(e);
  (void)dev.destroy_stream(s);
  (void)dev.free_host(a, bytes);
  (void)dev.free_host(b, bytes);
}
BENCHMARK(BM_SimCopyEngine)->Arg(4096)->Arg(kPage)->UseRealTime();

// Eight pages per completion event, as the pager queues a chunk of page-ins or write-backs.
void BM_SimCopyEngineBatch8(benchmark::State& state) {
  using namespace tvmm::device;
  constexpr std::size_t kBatch = 8;
  tvmm::SimDeviceConfig c;
  SimDevice dev(c, 8 * kPage);
  void* a = nullptr;
  void* b = nullptr;
  (void)dev.alloc_host(kBatch * kPage, &a);
  (void)dev.alloc_host(kBatch * kPage, &b);
  std::memset(a, 1, kBatch * kPage);
  std::memset(b, 2, kBatch * kPage);
  StreamHandle s = nullptr;
  (void)dev.create_stream(&s);
  EventHandle e = nullptr;
  (void)dev.create_event(&e);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBatch; ++i) {
      (void)dev.memcpy_async(static_cast<char*>(b) + i * kPage, static_cast<char*>(a) + i * kPage, kPage,
                             CopyKind::device_to_host, s);
    }
    (void)dev.record_event(e, s);
    (void)dev.synchronize_event(e);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBatch * kPage));
  (void)dev.destroy_event(e);
  (void)dev.destroy_stream(s);
  (void)dev.free_host(a, kBatch * kPage);
  (void)dev.free_host(b, kBatch * kPage);
}
BENCHMARK(BM_SimCopyEngineBatch8)->UseRealTime();

// Reference for the batch: memcpy of the same eight pages.
void BM_MemcpyBatch8(benchmark::State& state) {
  constexpr std::size_t kBytes = 8 * kPage;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_MemcpyBatch8);

// The pager's swap: one device frame, two one-page tensors pinned in turn, so every pin evicts one page
// (device -> host) and loads the other (host -> device). Bytes counted: both moves.
void BM_PagerSwap(benchmark::State& state) {
  tvmm::Pager pager(sim_config(1, 4));
  auto a = pager.allocate(kPage);
  auto b = pager.allocate(kPage);
  {
    auto p = a.pin(tvmm::Access::write);
    std::memset(p.data(), 1, kPage);
  }
  {
    auto p = b.pin(tvmm::Access::write);
    std::memset(p.data(), 2, kPage);
  }
  bool flip = false;
  for (auto _ : state) {
    auto pin = (flip ? b : a).pin(tvmm::Access::read);
    benchmark::DoNotOptimize(pin.data());
    flip = !flip;
  }
  const auto s = pager.stats();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * kPage));
  state.counters["evictions"] = static_cast<double>(s.evictions);
}
BENCHMARK(BM_PagerSwap)->UseRealTime();

// Allocation churn, as a framework's step allocates and frees its activations: a tensor of 8 pages is
// allocated, written (first touch: its pages are mapped) and freed, again and again, on a device with
// the driver costs measured on an H200 (map, access grant, unmap; spent as host time). The freed
// addresses keep their mappings and first fit hands the next tensor the same addresses, so after the
// first iteration it maps nothing. Counters: driver calls per iteration.
void BM_AllocateTouchFree(benchmark::State& state) {
  tvmm::Config c = sim_config(16, 16);
  c.sim.vmm_costs = tvmm::SimDeviceConfig::VmmCosts::measured_h200();
  tvmm::Pager pager(c);
  const auto before = pager.stats().driver;
  for (auto _ : state) {
    auto t = pager.allocate(8 * kPage);
    { auto pin = t.pin(tvmm::Access::write); }
  }
  const auto after = pager.stats().driver;
  const auto per_iteration = [&](std::uint64_t calls) {
    return benchmark::Counter(static_cast<double>(calls), benchmark::Counter::kAvgIterations);
  };
  state.counters["maps"] = per_iteration(after.map.calls - before.map.calls);
  state.counters["grants"] = per_iteration(after.set_access.calls - before.set_access.calls);
  state.counters["unmaps"] = per_iteration(after.unmap.calls - before.unmap.calls);
}
BENCHMARK(BM_AllocateTouchFree)->UseRealTime();

// Three tiers, streaming: 8 tensors of 8 pages over 8 device and 8 host pages, so every pin reads its
// tensor back from NVMe and pushes another one out to NVMe through the host. Copies are throttled to
// the argument (MB/s per direction; this VM's disk does about 1.5 GB/s), so that overlapping the
// device copies with the NVMe I/O shows. NVMe files go to $TVMM_BENCH_DIR (default: the temp directory). Bytes counted:
// NVMe traffic, both directions.
void BM_ThreeTierSweep(benchmark::State& state) {
  const char* env = std::getenv("TVMM_BENCH_DIR");
  std::string dir =
      (env != nullptr ? std::string(env) : std::filesystem::temp_directory_path().string()) + "/tvmm-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("cannot create a directory for the NVMe tier (set TVMM_BENCH_DIR)");
    return;
  }
  {
    tvmm::Config c = sim_config(8, 8);
    c.sim.bandwidth_bytes_per_s = static_cast<double>(state.range(0)) * 1e6;
    c.sim.copy_latency = std::chrono::microseconds(5);
    c.nvme.paths = {dir};
    c.nvme.budget = 96 * kPage;
    tvmm::Pager pager(c);
    std::vector<tvmm::Tensor> ts;
    for (int i = 0; i < 8; ++i) {
      ts.push_back(pager.allocate(8 * kPage));
      auto pin = ts.back().pin(tvmm::Access::write);
      std::memset(pin.data(), i, ts.back().size());
    }
    const auto before = pager.stats();
    for (auto _ : state) {
      for (auto& t : ts) {
        auto pin = t.pin(tvmm::Access::read_write);
        benchmark::DoNotOptimize(pin.data());
      }
    }
    const auto after = pager.stats();
    const auto bytes =
        (after.host_to_nvme.bytes - before.host_to_nvme.bytes) + (after.nvme_to_host.bytes - before.nvme_to_host.bytes);
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    state.counters["nvme_MiB_per_sweep"] =
        static_cast<double>(bytes) / static_cast<double>(tvmm::MiB) / static_cast<double>(state.iterations());
  }
  std::filesystem::remove(dir);
}
BENCHMARK(BM_ThreeTierSweep)->Arg(500)->Arg(1500)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
