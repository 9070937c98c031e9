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

//! What is wrong with a directory's filesystem for `need` bytes of slots, from its statvfs fields
//! (f_blocks, f_bavail, f_frsize): "" if it has room. A filesystem that reports no size at all (ramfs)
//! cannot be checked or reserved on; one with too little free space names what it has and lacks.
[[nodiscard]] std::string space_problem(const std::string& dir, std::uint64_t blocks, std::uint64_t avail_blocks,
                                        std::uint64_t block_size, std::size_t need);
//! Checks a directory for `need` bytes of slots: throws config_error (missing, not a directory, a
//! filesystem that reports no size) or out_of_memory (too little free space), naming the directory and
//! the fix. SlotFiles runs it on every directory before creating anything; the pager runs it (through
//! check_slot_directories) before it sizes anything by the NVMe budget.
void check_slot_directory(const std::string& dir, std::size_t need);
//! check_slot_directory for each of `paths`, with its share of `slots` slots of `slot_size` bytes
//! (slot s lives in the file of directory s mod paths.size()).
void check_slot_directories(const std::vector<std::string>& paths, std::uint32_t slots, std::size_t slot_size);
//! The number of the `slots` slots striped over `dirs` directories that directory `i` holds.
[[nodiscard]] constexpr std::uint32_t slots_in_directory(std::uint32_t slots, std::uint32_t dirs, std::uint32_t i) {
  return slots / dirs + (i < slots % dirs ? 1 : 0);
}

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
