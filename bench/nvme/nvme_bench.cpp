// tvmm-nvme-bench: the NVMe tier's own sequential write and read throughput on a directory, through
// the same path the pager uses (storage backend + per-page XXH3 checksums, verified on read), with
// a fixed number of requests in flight. bench/nvme_vs_fio.sh runs it beside fio.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/storage/storage_backend.hpp"
#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "vmm/core/nvme_tier.hpp"

namespace {

struct Buffer {
  explicit Buffer(std::size_t n) : p(static_cast<std::byte*>(std::aligned_alloc(tvmm::storage::kIoAlignment, n))) {
    if (p == nullptr) throw std::bad_alloc();
    for (std::size_t i = 0; i < n; i += 8) *reinterpret_cast<std::uint64_t*>(p + i) = i * 0x9E3779B97F4A7C15ULL;
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* p;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Sequential write and read throughput of the tvmm NVMe tier on a directory"};
  std::string dir, size_text = "1GiB", bs_text = "2MiB", backend = "auto";
  unsigned qd = 32;
  bool direct = true;
  app.add_option("dir", dir, "directory on the drive to measure")->required();
  app.add_option("--size", size_text, "bytes written, then read (default 1GiB)");
  app.add_option("--bs", bs_text, "page (request) size (default 2MiB)");
  app.add_option("--qd", qd, "requests in flight (default 32)")->check(CLI::Range(1, 4096));
  app.add_option("--backend", backend, "auto, uring or posix (default auto)");
  app.add_flag("!--buffered", direct, "do not use O_DIRECT");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::size_t bs = tvmm::parse_size(bs_text);
    const std::size_t size = tvmm::parse_size(size_text);
    if (bs == 0 || size < bs) throw tvmm::config_error("--size must hold at least one --bs page");
    const auto pages = static_cast<std::uint32_t>(size / bs);
    tvmm::storage::StorageOptions o{{dir}, bs, pages, qd, direct, true};
    auto storage = tvmm::storage::make_storage_backend(backend, o);
    const std::string name = storage->name();
    // Buffers stand in for host frames: twice the queue depth, reused in turn.
    const std::size_t nbuf = 2 * std::size_t{qd};
    Buffer frames(nbuf * bs);
    const bool fixed = storage->register_buffers(frames.p, nbuf * bs);
    tvmm::vmm::NvmeTier tier(std::move(storage), bs, qd);
    std::vector<tvmm::vmm::NvmeTier::Io> ios(pages);
    auto measure = [&](tvmm::storage::IoOp op) {
      for (std::uint32_t i = 0; i < pages; ++i) {
        const std::uint64_t sum = ios[i].checksum;  // reads verify what the writes recorded
        ios[i] = {op, i, frames.p + (i % nbuf) * bs, sum, 0};
      }
      const auto t0 = std::chrono::steady_clock::now();
      tier.run(ios);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (const auto& io : ios) {
        if (io.error != 0) throw tvmm::io_error("I/O failed on slot " + std::to_string(io.slot), -io.error);
      }
      return static_cast<double>(pages) * static_cast<double>(bs) / s / 1e6;  // MB/s
    };
    // The first write of a slot also converts the file's preallocated (unwritten) extent, which costs
    // the filesystem extra work; a pager rewrites its slots all its life, so the steady state is the
    // second pass. Both are printed.
    const double first_write_mbs = measure(tvmm::storage::IoOp::write);
    // Reads check each page against the checksum its write recorded; a page written from buffer k
    // and read into buffer k holds the same bytes, so verification passes only if the data is right.
    const double write_mbs = measure(tvmm::storage::IoOp::write);
    const double read_mbs = measure(tvmm::storage::IoOp::read);
    std::printf("tvmm backend=%s fixed_buffers=%s bs=%s qd=%u size=%s\n", name.c_str(), fixed ? "yes" : "no",
                tvmm::format_bytes(bs).c_str(), qd, tvmm::format_bytes(std::size_t{pages} * bs).c_str());
    std::printf("tvmm_first_write_mbs %.1f\ntvmm_write_mbs %.1f\ntvmm_read_mbs %.1f\n", first_write_mbs, write_mbs,
                read_mbs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmm-nvme-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
