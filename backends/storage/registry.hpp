#pragma once
// The storage plug-point's one registry: every NVMe-tier backend's name, what it is, why it may not
// start, and its factory (backends/storage/registry.cpp), in the order "auto" tries them. Read by
// make_storage_backend, the config key `nvme.backend` (its choices and help) and the storage
// conformance suite: a new backend is its own folder plus one line there.

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/storage/storage_backend.hpp"

namespace tvmm::storage {

//! One registered storage backend.
struct StorageBackendInfo {
  std::string_view name;     //!< the value of `nvme.backend`
  std::string_view summary;  //!< what it is, for help texts and messages ("io_uring")
  //! Why it may fail to start on a machine, for the error when it is asked for by name ("" if it
  //! always starts).
  std::string_view unavailable_hint;
  //! Makes the backend, or returns null with `*err` (a negative errno) where it cannot start on this
  //! machine; throws as make_storage_backend says for everything else.
  std::unique_ptr<StorageBackend> (*make)(const StorageOptions& options, int* err);
};

//! Every registered backend, in the order "auto" tries them.
std::span<const StorageBackendInfo> storage_backends() noexcept;
//! The backend named `name`, or null ("auto" is not one: it picks among them).
const StorageBackendInfo* find_storage_backend(std::string_view name) noexcept;
//! The values `nvme.backend` takes: "auto", then every registered name.
std::vector<std::string> storage_backend_choices();

}  // namespace tvmm::storage
