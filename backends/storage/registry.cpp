#include "backends/storage/registry.hpp"

#include <array>
#include <utility>

#include "backends/storage/posix/posix_storage.hpp"
#include "backends/storage/uring/uring_storage.hpp"
#include "common/registry.hpp"

namespace tvmm::storage {

namespace {

std::unique_ptr<StorageBackend> make_uring(const StorageOptions& options, int* err) {
  return UringStorage::create(options, err);
}

std::unique_ptr<StorageBackend> make_posix(const StorageOptions& options, int* /*err*/) {
  return std::make_unique<PosixStorage>(options);
}

// One line per backend, in the order "auto" tries them: name, summary, why it may not start, factory.
constexpr std::array kBackends{
    StorageBackendInfo{"uring", "io_uring", "seccomp or kernel.io_uring_disabled may block it", &make_uring},
    StorageBackendInfo{"posix", "pread/pwrite threads", "", &make_posix},
};

}  // namespace

std::span<const StorageBackendInfo> storage_backends() noexcept { return kBackends; }

const StorageBackendInfo* find_storage_backend(std::string_view name) noexcept {
  return common::find_by_name(storage_backends(), name);
}

std::vector<std::string> storage_backend_choices() {
  std::vector<std::string> names{"auto"};
  for (auto& n : common::names_of(storage_backends())) names.push_back(std::move(n));
  return names;
}

}  // namespace tvmm::storage
