#include "backends/storage/storage_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "backends/storage/registry.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::storage {

std::unique_ptr<StorageBackend> make_storage_backend(const std::string& name, const StorageOptions& options) {
  const auto backends = storage_backends();
  if (name != "auto") {
    const StorageBackendInfo* b = find_storage_backend(name);
    if (b == nullptr) {
      std::string valid;
      const auto choices = storage_backend_choices();
      for (std::size_t i = 0; i < choices.size(); ++i) {
        valid += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + ("\"" + choices[i] + "\"");
      }
      throw config_error("nvme.backend = \"" + name + "\" is not a storage backend; use " + valid);
    }
    int err = 0;
    if (auto made = b->make(options, &err)) return made;
    std::string others;
    for (const auto& o : backends) others += o.name == name ? "" : "\"" + std::string(o.name) + "\" or ";
    throw config_error("nvme.backend = \"" + name + "\": " + std::string(b->summary) + " cannot start here (" +
                       errno_text(-err) + (b->unavailable_hint.empty() ? "" : "; " + std::string(b->unavailable_hint)) +
                       "); use " + others + "\"auto\"");
  }
  // "auto": the first that starts, saying why each one before it did not.
  for (std::size_t i = 0; i < backends.size(); ++i) {
    int err = 0;
    if (auto made = backends[i].make(options, &err)) return made;
    if (i + 1 < backends.size()) {
      std::fprintf(stderr, "tvmm: %.*s is unavailable (%s); the NVMe tier uses the %.*s backend\n",
                   static_cast<int>(backends[i].summary.size()), backends[i].summary.data(), errno_text(-err).c_str(),
                   static_cast<int>(backends[i + 1].name.size()), backends[i + 1].name.data());
    } else {
      throw config_error("nvme.backend = \"auto\": no storage backend can start here (the last, \"" +
                         std::string(backends[i].name) + "\": " + errno_text(-err) + ")");
    }
  }
  throw config_error("nvme.backend = \"auto\": no storage backend is registered");
}

int validate_requests(std::span<const IoRequest> reqs, std::uint32_t slots, std::size_t slot_size) noexcept {
  for (const auto& r : reqs) {
    if (r.slot >= slots || r.buf == nullptr || reinterpret_cast<std::uintptr_t>(r.buf) % kIoAlignment != 0 ||
        r.bytes % kIoAlignment != 0 || r.bytes > slot_size) {
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
