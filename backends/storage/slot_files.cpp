#include "backends/storage/slot_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::storage {

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

SlotFiles::SlotFiles(const StorageOptions& options) : slot_size_(options.slot_size), slots_(options.slots) {
  if (options.paths.empty()) {
    throw config_error("the NVMe tier has no directory: set nvme.paths to one directory per drive");
  }
  if (slot_size_ == 0 || slot_size_ % kIoAlignment != 0) {
    throw config_error("NVMe slot size " + std::to_string(slot_size_) + " is not a positive multiple of " +
                       std::to_string(kIoAlignment) + " bytes (O_DIRECT); use a page size that is");
  }
  if (slots_ == 0) throw config_error("the NVMe tier has no slots: its budget is smaller than one page");
  try {
    const auto n = static_cast<std::uint32_t>(options.paths.size());
    for (std::uint32_t i = 0; i < n; ++i) open_one(options.paths[i], slots_in_directory(slots_, n, i), options);
  } catch (...) {
    for (int fd : fds_) ::close(fd);
    throw;
  }
}

SlotFiles::~SlotFiles() {
  for (int fd : fds_) ::close(fd);
}

std::string space_problem(const std::string& dir, std::uint64_t blocks, std::uint64_t avail_blocks,
                          std::uint64_t block_size, std::size_t need) {
  if (blocks == 0) {
    return "NVMe tier path '" + dir +
           "': its filesystem reports no size (ramfs does this), so its free space can be neither checked nor "
           "reserved, and filling it would take the host's memory; put the tier on a disk, or on tmpfs with a size";
  }
  const std::uint64_t free_bytes = avail_blocks * block_size;
  if (free_bytes >= need) return {};
  return "NVMe tier: '" + dir + "' has " + format_bytes(free_bytes) + " free but its share of the budget needs " +
         format_bytes(need) + " (" + format_bytes(need - free_bytes) +
         " more); free space there, add directories to nvme.paths or lower nvme.budget";
}

void check_slot_directory(const std::string& dir, std::size_t need) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw config_error("NVMe tier path '" + dir + "': " + errno_text(errno) +
                       "; create the directory or fix nvme.paths");
  }
  if (!S_ISDIR(st.st_mode)) {
    throw config_error("NVMe tier path '" + dir + "' is not a directory; give a directory in nvme.paths");
  }
  // Check the free space before anything is reserved: fallocate on most filesystems allocates until the
  // disk is full before it fails, which would briefly starve every other program of space.
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;  // unknown: fallocate reports a lack of space itself
  const std::string problem = space_problem(dir, vfs.f_blocks, vfs.f_bavail, vfs.f_frsize, need);
  if (problem.empty()) return;
  if (vfs.f_blocks == 0) throw config_error(problem);
  throw out_of_memory(problem);
}

void check_slot_directories(const std::vector<std::string>& paths, std::uint32_t slots, std::size_t slot_size) {
  const auto n = static_cast<std::uint32_t>(paths.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    check_slot_directory(paths[i], std::size_t{slots_in_directory(slots, n, i)} * slot_size);
  }
}

void SlotFiles::open_one(const std::string& dir, std::uint32_t slots_here, const StorageOptions& options) {
  const std::size_t need = std::size_t{slots_here} * slot_size_;
  check_slot_directory(dir, need);
  const int flags = O_RDWR | O_CLOEXEC | (options.direct ? O_DIRECT : 0);
  int fd = options.use_tmpfile ? ::open(dir.c_str(), flags | O_TMPFILE, 0600) : -1;
  if (fd < 0) {
    // No O_TMPFILE here (or the test forced the fallback): a private name, removed before any use.
    static std::atomic<unsigned> counter{0};
    const std::string name = dir + "/.tvmm-nvme-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd = ::open(name.c_str(), flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL && options.direct) {
      throw config_error("NVMe tier path '" + dir + "': the filesystem refuses O_DIRECT (" + errno_text(err) +
                         "); put the tier on a local filesystem such as ext4 or xfs, or set nvme.direct = false");
    }
    throw io_error("NVMe tier path '" + dir + "': cannot create the slot file: " + errno_text(err) +
                       "; check that the directory is writable",
                   err);
  }
  fds_.push_back(fd);
  const auto bytes = static_cast<off_t>(need);
  int rc = ::fallocate(fd, 0, 0, bytes);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EOPNOTSUPP) err = ::posix_fallocate(fd, 0, bytes);  // emulated where unsupported
  if (err == ENOSPC || err == EDQUOT) {
    throw out_of_memory("NVMe tier: cannot reserve " + format_bytes(static_cast<std::size_t>(bytes)) + " in '" + dir +
                        "' (" + errno_text(err) + "); free space there or lower nvme.budget");
  }
  if (err != 0) {
    throw io_error("NVMe tier: reserving " + format_bytes(static_cast<std::size_t>(bytes)) + " in '" + dir +
                       "' failed: " + errno_text(err),
                   err);
  }
}

}  // namespace tvmm::storage
