#include "backends/storage/storage_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "backends/storage/posix/posix_storage.hpp"
#include "backends/storage/uring/uring_storage.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::storage {

std::unique_ptr<StorageBackend> make_storage_backend(const std::string& name, const StorageOptions& options) {
  if (name == "posix") return std::make_unique<PosixStorage>(options);
  if (name != "uring" && name != "auto") {
    throw config_error("nvme.backend = \"" + name +
                       "\" is not a storage backend; use \"auto\", \"uring\" or \"posix\"");
  }
  int err = 0;
  if (auto ring = UringStorage::create(options, &err)) return ring;
  if (name == "uring") {
    throw config_error("nvme.backend = \"uring\": io_uring cannot start here (" + errno_text(-err) +
                       "; seccomp or kernel.io_uring_disabled may block it); use \"posix\" or \"auto\"");
  }
  std::fprintf(stderr, "tvmm: io_uring is unavailable (%s); the NVMe tier uses the posix backend\n",
               errno_text(-err).c_str());
  return std::make_unique<PosixStorage>(options);
}

int validate_requests(std::span<const IoRequest> reqs, std::uint32_t slots) noexcept {
  for (const auto& r : reqs) {
    if (r.slot >= slots || r.buf == nullptr || reinterpret_cast<std::uintptr_t>(r.buf) % kIoAlignment != 0) {
      return -EINVAL;
    }
  }
  return 0;
}

int run_batch(StorageBackend& backend, std::span<const IoRequest> reqs, std::span<std::int64_t> results) {
  // Tags are positions in `reqs`; the caller's tags are not needed here.
  std::vector<IoRequest> tagged(reqs.begin(), reqs.end());
  for (std::size_t i = 0; i < tagged.size(); ++i) tagged[i].tag = i;
  if (const int rc = backend.submit(tagged); rc != 0) return rc;
  std::fill(results.begin(), results.begin() + static_cast<std::ptrdiff_t>(tagged.size()), 0);
  std::vector<IoCompletion> done(std::max<std::size_t>(1, tagged.size()));
  for (std::size_t left = tagged.size(); left > 0;) {
    const std::size_t n = backend.reap(done, 1);
    if (n == 0 && backend.outstanding() == 0) {  // lost by a failed backend: report, never spin
      for (std::size_t i = 0; i < tagged.size(); ++i) results[i] = results[i] == 0 ? -EIO : results[i];
      break;
    }
    for (std::size_t i = 0; i < n; ++i) results[done[i].tag] = done[i].result;
    left -= n;
  }
  return 0;
}

}  // namespace tvmm::storage
