#pragma once
// The files behind a storage backend's slots, shared by every backend that does file I/O: one file per
// directory, opened O_TMPFILE (so no name ever appears on disk) or, where the filesystem lacks it,
// created O_CREAT|O_EXCL with mode 0600 and unlinked at once; space for all its slots reserved with
// fallocate, so a full disk is reported here, at start-up, and not in the middle of an eviction.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/storage/storage_backend.hpp"

namespace tvmm::storage {

class SlotFiles {
 public:
  //! Throws tvmm::config_error (bad directory), tvmm::out_of_memory (no space) or tvmm::io_error.
  explicit SlotFiles(const StorageOptions& options);
  ~SlotFiles();
  SlotFiles(const SlotFiles&) = delete;
  SlotFiles& operator=(const SlotFiles&) = delete;

  [[nodiscard]] int fd(std::uint32_t slot) const noexcept { return fds_[slot % fds_.size()]; }
  [[nodiscard]] off_t offset(std::uint32_t slot) const noexcept {
    return static_cast<off_t>((slot / fds_.size()) * slot_size_);
  }
  [[nodiscard]] std::uint32_t slots() const noexcept { return slots_; }
  [[nodiscard]] std::size_t slot_size() const noexcept { return slot_size_; }

 private:
  void open_one(const std::string& dir, std::uint32_t slots_here, const StorageOptions& options);

  std::vector<int> fds_;
  std::size_t slot_size_;
  std::uint32_t slots_;
};

}  // namespace tvmm::storage
