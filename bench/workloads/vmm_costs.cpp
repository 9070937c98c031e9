#include "bench/workloads/vmm_costs.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "bench/workloads/json_records.hpp"
#include "bench/workloads/page_moves.hpp"
#include "tvmm/tvmm.hpp"

namespace tvmm::bench {

namespace {

using clock = std::chrono::steady_clock;

double ns_since(clock::time_point t0) { return std::chrono::duration<double, std::nano>(clock::now() - t0).count(); }

void check(device::Status s, const char* what) {
  if (!s.ok())
    throw device_error(std::string("tvmm-bench: ") + what + " failed: " + device::errc_name(s.code), "bench");
}

struct Costs {
  double map_ns = 0, access_ns = 0, access_run_ns = 0, unmap_ns = 0, unmap_run_ns = 0;  // per call
  double create_ns = 0, release_ns = 0;                                                 // per chunk of one page
  double plain_h2d_gbs = 0, plain_d2h_gbs = 0, pager_gbs = 0;
  std::string device_name;
  std::size_t page = 0;
};

Config base_config(const VmmOptions& o) {
  Config c;
  c.device_backend = o.device;
  c.device_budget = o.pages * 2 * MiB;  // a frame per page (the CUDA granularity is 2 MiB)
  c.host_budget = 2 * o.pages * 2 * MiB + 4 * MiB;
  c.sim.capacity = 4 * o.pages * 2 * MiB;
  return c;
}

// Map, set access and unmap `pages` pages `rounds` times through the backend directly.
void call_costs(const VmmOptions& o, Costs& r) {
  Config c = base_config(o);
  auto dev = device::make_device_backend(c);
  const std::size_t g = dev->properties().granularity;
  r.page = g;
  r.device_name = dev->properties().name;
  device::DevPtr va = 0;
  check(dev->reserve(o.pages * g, &va), "reserve");
  std::vector<device::ChunkHandle> chunks(o.pages);
  auto t_create = clock::now();
  for (auto& ch : chunks) check(dev->create_chunk(g, &ch), "create_chunk");
  r.create_ns = ns_since(t_create) / static_cast<double>(o.pages);
  double map = 0, access = 0, run = 0, unmap = 0, unmap_run = 0;
  for (int round = 0; round < o.rounds; ++round) {
    auto t0 = clock::now();
    for (std::size_t i = 0; i < o.pages; ++i) check(dev->map(va + i * g, g, chunks[i]), "map");
    map += ns_since(t0);
    // Half the rounds grant access and unmap page by page, half over the whole run in one call each (as
    // the transfer engine grants access, and as the pager unmaps a freed tensor's run of pages).
    if (round % 2 == 0) {
      t0 = clock::now();
      for (std::size_t i = 0; i < o.pages; ++i) check(dev->set_access(va + i * g, g), "set_access");
      access += ns_since(t0);
      t0 = clock::now();
      for (std::size_t i = 0; i < o.pages; ++i) check(dev->unmap(va + i * g, g), "unmap");
      unmap += ns_since(t0);
    } else {
      t0 = clock::now();
      check(dev->set_access(va, o.pages * g), "set_access (run)");
      run += ns_since(t0);
      t0 = clock::now();
      check(dev->unmap(va, o.pages * g), "unmap (run)");
      unmap_run += ns_since(t0);
    }
  }
  const double calls = static_cast<double>(o.pages) * o.rounds;
  const double page_rounds = static_cast<double>(o.pages) * ((o.rounds + 1) / 2);
  r.map_ns = map / calls;
  r.access_ns = access / page_rounds;
  r.access_run_ns = o.rounds > 1 ? run / (o.rounds / 2) : 0;
  r.unmap_ns = unmap / page_rounds;
  r.unmap_run_ns = o.rounds > 1 ? unmap_run / (o.rounds / 2) : 0;
  const auto t_release = clock::now();
  for (auto& ch : chunks) check(dev->release_chunk(ch), "release_chunk");
  r.release_ns = ns_since(t_release) / static_cast<double>(o.pages);
  check(dev->release_reservation(va, o.pages * g), "release_reservation");

  // Plain copies of pinned host memory into and out of mapped pages, page by page on one stream.
  check(dev->reserve(o.pages * g, &va), "reserve");
  for (auto& ch : chunks) check(dev->create_chunk(g, &ch), "create_chunk");
  for (std::size_t i = 0; i < o.pages; ++i) check(dev->map(va + i * g, g, chunks[i]), "map");
  check(dev->set_access(va, o.pages * g), "set_access");
  void* host = nullptr;
  check(dev->alloc_host(o.pages * g, &host), "alloc_host");
  std::memset(host, 1, o.pages * g);
  device::StreamHandle s = nullptr;
  check(dev->create_stream(&s), "create_stream");
  for (auto kind : {device::CopyKind::host_to_device, device::CopyKind::device_to_host}) {
    const auto t0 = clock::now();
    for (int round = 0; round < o.rounds; ++round) {
      for (std::size_t i = 0; i < o.pages; ++i) {
        void* d = reinterpret_cast<void*>(va + i * g);
        void* h = static_cast<char*>(host) + i * g;
        check(kind == device::CopyKind::host_to_device ? dev->memcpy_async(d, h, g, kind, s)
                                                       : dev->memcpy_async(h, d, g, kind, s),
              "memcpy_async");
      }
    }
    check(dev->synchronize_stream(s), "synchronize");
    const double gbs = static_cast<double>(o.pages * g) * o.rounds / (ns_since(t0));
    (kind == device::CopyKind::host_to_device ? r.plain_h2d_gbs : r.plain_d2h_gbs) = gbs;
  }
  check(dev->destroy_stream(s), "destroy_stream");
  check(dev->free_host(host, o.pages * g), "free_host");
  for (std::size_t i = 0; i < o.pages; ++i) check(dev->unmap(va + i * g, g), "unmap");
  for (auto& ch : chunks) check(dev->release_chunk(ch), "release_chunk");
  check(dev->release_reservation(va, o.pages * g), "release_reservation");
}

// Page moves through the pager: two tensors of `pages` pages over a device that holds one; every pin
// brings one in and writes the other out.
void pager_bandwidth(const VmmOptions& o, Costs& r) {
  Config c = base_config(o);
  c.min_bytes = 0;
  Pager pager(c);
  r.pager_gbs = page_move_gbs(pager, 2, o.pages * pager.config().page_size, o.rounds);
}

}  // namespace

int run_vmm(const VmmOptions& o) {
  Costs r;
  try {
    call_costs(o, r);
    pager_bandwidth(o, r);
  } catch (const error& e) {
    std::fprintf(stderr, "tvmm-bench: %s\n", e.what());
    return 1;
  }
  // The plain copies run one direction at a time; the pager moves both at once (two copy streams), half
  // its bytes each way: compare per direction.
  const double plain_each = (r.plain_h2d_gbs + r.plain_d2h_gbs) / 2;
  const double pager_each = r.pager_gbs / 2;
  std::printf("workload vmm on %s: %zu pages of %zu MiB, %d rounds\n", r.device_name.c_str(), o.pages, r.page / MiB,
              o.rounds);
  std::printf(
      "  per call: map %.1f us, set_access %.1f us (one page) / %.1f us (a run of %zu pages), unmap %.1f us "
      "(one page) / %.1f us (a run of %zu pages)\n",
      r.map_ns / 1e3, r.access_ns / 1e3, r.access_run_ns / 1e3, o.pages, r.unmap_ns / 1e3, r.unmap_run_ns / 1e3,
      o.pages);
  std::printf("  per chunk of one page: create %.1f us, release %.1f us\n", r.create_ns / 1e3, r.release_ns / 1e3);
  std::printf("  plain pinned copies: H2D %.2f GB/s, D2H %.2f GB/s\n", r.plain_h2d_gbs, r.plain_d2h_gbs);
  std::printf("  pager page moves: %.2f GB/s in and out at once, %.2f GB/s per direction = %.2fx the plain copies\n",
              r.pager_gbs, pager_each, plain_each > 0 ? pager_each / plain_each : 0.0);
  if (!o.json.empty()) {
    std::ostringstream out;
    out << "{\"workload\": \"vmm\", \"backend\": \"" << r.device_name << "\", \"page_bytes\": " << r.page
        << ", \"map_ns\": " << r.map_ns << ", \"set_access_ns\": " << r.access_ns
        << ", \"set_access_run_ns\": " << r.access_run_ns << ", \"unmap_ns\": " << r.unmap_ns
        << ", \"unmap_run_ns\": " << r.unmap_run_ns << ", \"create_ns\": " << r.create_ns
        << ", \"release_ns\": " << r.release_ns << ", \"plain_h2d_gbs\": " << r.plain_h2d_gbs
        << ", \"plain_d2h_gbs\": " << r.plain_d2h_gbs << ", \"pager_gbs\": " << r.pager_gbs
        << ", \"pager_vs_plain\": " << (plain_each > 0 ? pager_each / plain_each : 0.0) << "}";
    if (!write_json_records(o.json, {out.str()})) return 1;
  }
  return 0;
}

}  // namespace tvmm::bench
