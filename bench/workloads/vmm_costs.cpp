#include "bench/workloads/vmm_costs.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
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

// The three calls of a remap, host time of each (a sum, or a mean once divided by count).
struct Parts {
  double unmap_ns = 0, map_ns = 0, access_ns = 0;
  int count = 0;
};

struct Costs {
  double map_ns = 0, access_ns = 0, access_run_ns = 0, unmap_ns = 0, unmap_run_ns = 0;  // per call
  double create_ns = 0, release_ns = 0;                                                 // per chunk of one page
  double plain_h2d_gbs = 0, plain_d2h_gbs = 0, pager_gbs = 0;
  // A remap (unmap, map, access grant: a page's address moved to another frame), per call, alone and
  // while the device runs a long kernel or copies; launches and copies alone and while another thread
  // remaps (see concurrency()).
  double remap_ns = 0, remap_kernel_ns = 0, remap_launches_ns = 0, kernel_ms = 0;
  double remap_crowded_ns = 0;  // with `crowd` other pages mapped
  // Each call of a remap, alone and while copies run host-to-device, device-to-host and both ways.
  Parts idle, during_h2d, during_d2h, during_both;
  std::size_t crowd = 0;
  double kernel_left_ms = 0, launch_ns = 0, launch_remapping_ns = 0, launch_d2h_ns = 0, launch_d2h_remapping_ns = 0;
  double h2d_gbs = 0, d2h_gbs = 0, h2d_remapping_gbs = 0, d2h_remapping_gbs = 0;
  double run_access_ns = 0, run_access_d2h_ns = 0;  // one set_access over the remapper's pages
  // One set_access right after n copies were queued one way: its time, and how much of the copies was
  // left when it returned.
  struct AfterCopies {
    std::size_t copies = 0;
    bool d2h = false;
    double access_ns = 0, left_ms = 0, copies_ms = 0;
  };
  std::vector<AfterCopies> after;
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

// `n` pages of a reservation, each mapped to a chunk of its own and accessible. With `spare`, each page
// has a second chunk, and the remap calls move it between the two as the pager moves a page's address
// to another frame: unmap, map, access grant.
class MappedPages {
 public:
  // `spare`: a second chunk per page to remap it to; without, the pages only hold mappings.
  MappedPages(device::DeviceBackend& dev, std::size_t n, bool spare = true)
      : dev_(dev), g_(dev.properties().granularity), n_(n), per_page_(spare ? 2 : 1) {
    check(dev_.reserve(n_ * g_, &va_), "reserve");
    chunks_.resize(per_page_ * n_);
    for (auto& ch : chunks_) check(dev_.create_chunk(g_, &ch), "create_chunk");
    for (std::size_t i = 0; i < n_; ++i) check(dev_.map(va_ + i * g_, g_, chunks_[per_page_ * i]), "map");
    check(dev_.set_access(va_, n_ * g_), "set_access");
    at_.assign(n_, 0);
  }
  MappedPages(const MappedPages&) = delete;
  MappedPages& operator=(const MappedPages&) = delete;
  ~MappedPages() {
    for (std::size_t i = 0; i < n_; ++i) dev_.warn_failed(dev_.unmap(va_ + i * g_, g_), "unmapping a page");
    for (auto& ch : chunks_) dev_.warn_failed(dev_.release_chunk(ch), "releasing a chunk");
    dev_.warn_failed(dev_.release_reservation(va_, n_ * g_), "releasing a reservation");
  }
  [[nodiscard]] device::DevPtr base() const noexcept { return va_; }
  // One remap of the next page; returns its host time in ns, and adds each call's to `parts`.
  double one(Parts* parts = nullptr) {
    const std::size_t i = next_++ % n_;
    const device::DevPtr va = va_ + i * g_;
    at_[i] = (at_[i] + 1) % per_page_;
    const auto t0 = clock::now();
    check(dev_.unmap(va, g_), "unmap");
    const auto t1 = clock::now();
    check(dev_.map(va, g_, chunks_[per_page_ * i + at_[i]]), "map");
    const auto t2 = clock::now();
    check(dev_.set_access(va, g_), "set_access");
    const double total = ns_since(t0);
    if (parts != nullptr) {
      parts->unmap_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      parts->map_ns += std::chrono::duration<double, std::nano>(t2 - t1).count();
      parts->access_ns += total - std::chrono::duration<double, std::nano>(t2 - t0).count();
      ++parts->count;
    }
    return total;
  }
  // Moves the next page to its other chunk without granting access; grant() then grants it.
  device::DevPtr prepare() {
    const std::size_t i = next_++ % n_;
    at_[i] = (at_[i] + 1) % per_page_;
    check(dev_.unmap(va_ + i * g_, g_), "unmap");
    check(dev_.map(va_ + i * g_, g_, chunks_[per_page_ * i + at_[i]]), "map");
    return va_ + i * g_;
  }
  double grant(device::DevPtr va) {
    const auto t0 = clock::now();
    check(dev_.set_access(va, g_), "set_access");
    return ns_since(t0);
  }
  // Remaps every page, with one access grant over them all; returns the grant's host time in ns.
  double run_access() {
    for (std::size_t i = 0; i < n_; ++i) {
      at_[i] = (at_[i] + 1) % per_page_;
      check(dev_.unmap(va_ + i * g_, g_), "unmap");
      check(dev_.map(va_ + i * g_, g_, chunks_[per_page_ * i + at_[i]]), "map");
    }
    const auto t0 = clock::now();
    check(dev_.set_access(va_, n_ * g_), "set_access (run)");
    return ns_since(t0);
  }
  // The mean time of each call over `count` remaps.
  Parts parts(int count) {
    Parts p;
    for (int k = 0; k < count; ++k) (void)one(&p);
    p.unmap_ns /= p.count, p.map_ns /= p.count, p.access_ns /= p.count;
    return p;
  }
  double mean(int count) {
    double sum = 0;
    for (int k = 0; k < count; ++k) sum += one();
    return sum / count;
  }

 private:
  device::DeviceBackend& dev_;
  std::size_t g_, n_, per_page_;
  device::DevPtr va_ = 0;
  std::vector<device::ChunkHandle> chunks_;
  std::vector<std::size_t> at_;
  std::size_t next_ = 0;
};

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
  const MappedPages mapped(*dev, o.pages, false);
  va = mapped.base();
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
}

constexpr int kRemapPages = 8;

// Can a mapping worker hide the driver's time? The host time of a remap alone, while a long kernel
// runs (does the driver wait for the device?), while copies run, and while another thread launches;
// and the host time of launches and the rate of copies, alone and while another thread remaps (does the
// driver serialize them?).
void concurrency(const VmmOptions& o, Costs& r) {
  Config c = base_config(o);
  c.sim.capacity = (16 + 9 * o.pages) * 2 * MiB;  // the remapped pages, the copies' and the crowd's
  auto dev = device::make_device_backend(c);
  const std::size_t g = dev->properties().granularity;
  MappedPages remap(*dev, kRemapPages);
  const int remaps = o.rounds * 16;
  (void)remap.mean(4);  // warm-up
  r.remap_ns = remap.mean(remaps);

  device::StreamHandle s = nullptr;
  check(dev->create_stream(&s), "create_stream");
  // A long kernel that touches no memory; the remaps run while it does.
  const auto kernel = std::chrono::milliseconds(o.pages >= 64 ? 50 : 10);
  r.kernel_ms = std::chrono::duration<double, std::milli>(kernel).count();
  check(dev->launch_busy(s, kernel), "launch_busy");
  r.remap_kernel_ns = remap.mean(8);
  const auto t_sync = clock::now();
  check(dev->synchronize_stream(s), "synchronize");
  // Had the remaps waited for the kernel, nothing would be left of it here.
  r.kernel_left_ms = ns_since(t_sync) / 1e6;

  // Copies into mapped pages from pinned memory; remaps while they run.
  const MappedPages copied(*dev, o.pages, false);
  const device::DevPtr va = copied.base();
  void* host = nullptr;
  check(dev->alloc_host(o.pages * g, &host), "alloc_host");
  std::memset(host, 1, o.pages * g);
  device::StreamHandle out = nullptr;  // device-to-host copies go on their own stream, as in the pager
  check(dev->create_stream(&out), "create_stream");
  void* back = nullptr;  // the device-to-host copies' target
  check(dev->alloc_host(o.pages * g, &back), "alloc_host");
  auto queue = [&](bool in, bool away) {  // o.rounds passes over the pages, one way or both
    for (int round = 0; round < o.rounds; ++round) {
      for (std::size_t i = 0; i < o.pages; ++i) {
        void* d = reinterpret_cast<void*>(va + i * g);
        if (in)
          check(dev->memcpy_async(d, static_cast<char*>(host) + i * g, g, device::CopyKind::host_to_device, s),
                "memcpy_async");
        if (away)
          check(dev->memcpy_async(static_cast<char*>(back) + i * g, d, g, device::CopyKind::device_to_host, out),
                "memcpy_async");
      }
    }
  };
  auto sync = [&] {
    check(dev->synchronize_stream(s), "synchronize");
    check(dev->synchronize_stream(out), "synchronize");
  };
  auto copies = [&](bool in) {  // returns GB/s of one direction's copies
    const auto t0 = clock::now();
    queue(in, !in);
    sync();
    return static_cast<double>(o.pages * g) * o.rounds / ns_since(t0);
  };
  auto launches = [&] {  // returns ns per launch call
    constexpr int kLaunches = 256;
    const auto t0 = clock::now();
    for (int k = 0; k < kLaunches; ++k) check(dev->launch_busy(s, std::chrono::microseconds(2)), "launch_busy");
    return ns_since(t0) / kLaunches;
  };

  // Each call of a remap while copies run one way or both (a pager's copy streams are busy whenever it
  // pages): does the driver's time depend on the bus's traffic? And an access grant over a run of
  // remapped pages while copies leave the device: is its cost per call or per mapping?
  const int probes = o.pages >= 64 ? 32 : 8;
  auto during = [&](bool in, bool away) {
    queue(in, away);
    const Parts p = remap.parts(probes);
    sync();
    return p;
  };
  r.idle = remap.parts(probes);
  r.during_h2d = during(true, false);
  r.during_d2h = during(false, true);
  r.during_both = during(true, true);
  queue(false, true);
  r.run_access_d2h_ns = remap.run_access();
  sync();
  r.run_access_ns = remap.run_access();

  // One access grant right after n copies were queued: does it wait for them?
  for (const bool away : {false, true}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{8}, o.pages, o.pages * o.rounds}) {
      Costs::AfterCopies a{n, away};
      const device::DevPtr page = remap.prepare();
      auto t0 = clock::now();
      for (std::size_t k = 0; k < n; ++k) {
        void* d = reinterpret_cast<void*>(va + (k % o.pages) * g);
        if (away)
          check(dev->memcpy_async(static_cast<char*>(back) + (k % o.pages) * g, d, g, device::CopyKind::device_to_host,
                                  out),
                "memcpy_async");
        else
          check(dev->memcpy_async(d, static_cast<char*>(host) + (k % o.pages) * g, g, device::CopyKind::host_to_device,
                                  s),
                "memcpy_async");
      }
      a.access_ns = remap.grant(page);
      const auto t1 = clock::now();
      sync();
      a.left_ms = ns_since(t1) / 1e6;
      a.copies_ms = ns_since(t0) / 1e6;
      r.after.push_back(a);
    }
  }

  // Another thread remaps without pause while this one launches and copies: does the driver serialize
  // them? Launches alone and while device-to-host copies run, then the same with the remapping thread.
  r.h2d_gbs = copies(true);
  r.d2h_gbs = copies(false);
  r.launch_ns = launches();
  sync();
  queue(false, true);
  r.launch_d2h_ns = launches();
  sync();
  std::atomic<bool> stop{false};
  double remap_sum = 0;
  long remap_count = 0;
  std::string failed;
  std::thread worker([&] {
    try {
      while (!stop.load(std::memory_order_relaxed)) {
        remap_sum += remap.one();
        ++remap_count;
      }
    } catch (const std::exception& e) {
      failed = e.what();
    }
  });
  try {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r.launch_remapping_ns = launches();
    sync();
    queue(false, true);
    r.launch_d2h_remapping_ns = launches();
    sync();
    r.h2d_remapping_gbs = copies(true);
    r.d2h_remapping_gbs = copies(false);
  } catch (...) {
    stop = true;
    worker.join();
    throw;
  }
  stop = true;
  worker.join();
  if (!failed.empty()) throw device_error("tvmm-bench: remapping thread: " + failed, "bench");
  r.remap_launches_ns = remap_count > 0 ? remap_sum / static_cast<double>(remap_count) : 0;
  check(dev->destroy_stream(out), "destroy_stream");
  check(dev->free_host(back, o.pages * g), "free_host");

  check(dev->destroy_stream(s), "destroy_stream");
  check(dev->free_host(host, o.pages * g), "free_host");

  // The same remaps with many other pages mapped, as in a pager that holds gigabytes: does a call's
  // time grow with the mappings the address space holds?
  r.crowd = o.pages * 8;
  const MappedPages crowd(*dev, r.crowd, false);
  r.remap_crowded_ns = remap.mean(remaps);
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
    concurrency(o, r);
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
  std::printf(
      "  a remap (unmap, map, set_access of one page): %.1f us alone, %.1f us during a %.0f ms kernel (%.1f ms of "
      "it left after them), %.1f us while another thread launches and copies, %.1f us with %zu more pages mapped\n",
      r.remap_ns / 1e3, r.remap_kernel_ns / 1e3, r.kernel_ms, r.kernel_left_ms, r.remap_launches_ns / 1e3,
      r.remap_crowded_ns / 1e3, r.crowd);
  auto parts = [](const Parts& p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f", p.unmap_ns / 1e3, p.map_ns / 1e3, p.access_ns / 1e3);
    return std::string(buf);
  };
  std::printf(
      "  a remap's unmap / map / set_access, us: %s alone, %s during H2D copies, %s during D2H copies, %s during "
      "both\n",
      parts(r.idle).c_str(), parts(r.during_h2d).c_str(), parts(r.during_d2h).c_str(), parts(r.during_both).c_str());
  std::printf("  one set_access over %d remapped pages: %.1f us alone, %.1f us during D2H copies\n", kRemapPages,
              r.run_access_ns / 1e3, r.run_access_d2h_ns / 1e3);
  for (const auto& a : r.after) {
    std::printf("  set_access after %zu %s copies of a page: %.1f us, %.2f of their %.2f ms left after it\n", a.copies,
                a.d2h ? "D2H" : "H2D", a.access_ns / 1e3, a.left_ms, a.copies_ms);
  }
  std::printf(
      "  a launch call: %.2f us alone, %.2f us while another thread remaps; during D2H copies %.2f us, %.2f us "
      "while another thread remaps\n",
      r.launch_ns / 1e3, r.launch_remapping_ns / 1e3, r.launch_d2h_ns / 1e3, r.launch_d2h_remapping_ns / 1e3);
  std::printf("  copies: H2D %.2f GB/s, D2H %.2f GB/s; while another thread remaps: H2D %.2f GB/s, D2H %.2f GB/s\n",
              r.h2d_gbs, r.d2h_gbs, r.h2d_remapping_gbs, r.d2h_remapping_gbs);
  std::printf("  pager page moves: %.2f GB/s in and out at once, %.2f GB/s per direction = %.2fx the plain copies\n",
              r.pager_gbs, pager_each, plain_each > 0 ? pager_each / plain_each : 0.0);
  if (!o.json.empty()) {
    std::ostringstream out;
    out << "{\"workload\": \"vmm\", \"backend\": \"" << r.device_name << "\", \"page_bytes\": " << r.page
        << ", \"map_ns\": " << r.map_ns << ", \"set_access_ns\": " << r.access_ns
        << ", \"set_access_run_ns\": " << r.access_run_ns << ", \"unmap_ns\": " << r.unmap_ns
        << ", \"unmap_run_ns\": " << r.unmap_run_ns << ", \"create_ns\": " << r.create_ns
        << ", \"release_ns\": " << r.release_ns << ", \"remap_ns\": " << r.remap_ns
        << ", \"remap_during_kernel_ns\": " << r.remap_kernel_ns << ", \"kernel_ms\": " << r.kernel_ms
        << ", \"kernel_left_ms\": " << r.kernel_left_ms << ", \"remap_beside_launches_ns\": " << r.remap_launches_ns
        << ", \"remap_crowded_ns\": " << r.remap_crowded_ns << ", \"crowd_pages\": " << r.crowd;
    for (const auto& [name, p] : {std::pair{"alone", r.idle}, std::pair{"h2d", r.during_h2d},
                                  std::pair{"d2h", r.during_d2h}, std::pair{"both", r.during_both}}) {
      out << ", \"remap_" << name << "\": {\"unmap_ns\": " << p.unmap_ns << ", \"map_ns\": " << p.map_ns
          << ", \"set_access_ns\": " << p.access_ns << "}";
    }
    out << ", \"set_access_after_copies\": [";
    for (std::size_t i = 0; i < r.after.size(); ++i) {
      const auto& a = r.after[i];
      out << (i ? ", " : "") << "{\"copies\": " << a.copies << ", \"direction\": \"" << (a.d2h ? "d2h" : "h2d")
          << "\", \"set_access_ns\": " << a.access_ns << ", \"left_ms\": " << a.left_ms
          << ", \"copies_ms\": " << a.copies_ms << "}";
    }
    out << "]";
    out << ", \"run_access_ns\": " << r.run_access_ns << ", \"run_access_d2h_ns\": " << r.run_access_d2h_ns
        << ", \"launch_ns\": " << r.launch_ns << ", \"launch_beside_remaps_ns\": " << r.launch_remapping_ns
        << ", \"launch_d2h_ns\": " << r.launch_d2h_ns
        << ", \"launch_d2h_beside_remaps_ns\": " << r.launch_d2h_remapping_ns << ", \"h2d_gbs\": " << r.h2d_gbs
        << ", \"d2h_gbs\": " << r.d2h_gbs << ", \"h2d_beside_remaps_gbs\": " << r.h2d_remapping_gbs
        << ", \"d2h_beside_remaps_gbs\": " << r.d2h_remapping_gbs << ", \"plain_h2d_gbs\": " << r.plain_h2d_gbs
        << ", \"plain_d2h_gbs\": " << r.plain_d2h_gbs << ", \"pager_gbs\": " << r.pager_gbs
        << ", \"pager_vs_plain\": " << (plain_each > 0 ? pager_each / plain_each : 0.0) << "}";
    if (!write_json_records(o.json, {out.str()})) return 1;
  }
  return 0;
}

}  // namespace tvmm::bench
