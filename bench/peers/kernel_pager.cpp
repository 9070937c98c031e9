#include "bench/peers/kernel_pager.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace tvmm::bench {
namespace {

constexpr std::size_t small_page = 4096;

struct MemoryCgroup {
  std::string dir;      // the process's own memory cgroup directory
  std::string version;  // "v1" or "v2"
  std::string error;
};

// The memory cgroup this process is in, from /proc/self/mountinfo and /proc/self/cgroup.
MemoryCgroup find_memory_cgroup() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line, v1_mount, v1_root, v2_mount, v2_root;
  while (std::getline(mounts, line)) {
    // id parent major:minor root mountpoint options... - fstype source superoptions
    std::istringstream in(line);
    std::string id, parent, dev, root, point, field;
    in >> id >> parent >> dev >> root >> point;
    while (in >> field && field != "-") {
    }
    std::string fstype, source, super;
    in >> fstype >> source >> super;
    if (fstype == "cgroup" && ("," + super + ",").find(",memory,") != std::string::npos) {
      v1_mount = point;
      v1_root = root;
    } else if (fstype == "cgroup2" && v2_mount.empty()) {
      v2_mount = point;
      v2_root = root;
    }
  }
  std::ifstream groups("/proc/self/cgroup");
  std::string v1_path, v2_path;
  bool have_v2 = false;
  while (std::getline(groups, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const auto controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const auto path = line.substr(b + 1);
    if (controllers.find(",memory,") != std::string::npos) v1_path = path;
    if (controllers == ",,") {
      v2_path = path;
      have_v2 = true;
    }
  }
  auto join = [](const std::string& mount, const std::string& root, const std::string& path) {
    // The path is relative to the cgroup root; the mount shows the hierarchy from `root`.
    std::string rel = path;
    if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
    return mount + (rel == "/" ? "" : rel);
  };
  if (!v1_mount.empty() && !v1_path.empty()) return {join(v1_mount, v1_root, v1_path), "v1", ""};
  if (!v2_mount.empty() && have_v2) {
    const auto dir = join(v2_mount, v2_root, v2_path);
    std::ifstream controllers(dir + "/cgroup.controllers");
    std::string c;
    while (controllers >> c) {
      if (c == "memory") return {dir, "v2", ""};
    }
    return {"", "", "the cgroup v2 group " + dir + " does not offer the memory controller"};
  }
  return {"", "", "no memory cgroup (v1 or v2) is mounted"};
}

bool write_file(const std::string& path, const std::string& value, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

// Bytes this task caused to be read from and written to storage, from /proc/self/io.
bool task_io(double& read_bytes, double& write_bytes) {
  std::ifstream io("/proc/self/io");
  std::string key;
  double value = 0;
  bool r = false, w = false;
  while (io >> key >> value) {
    if (key == "read_bytes:") read_bytes = value, r = true;
    if (key == "write_bytes:") write_bytes = value, w = true;
  }
  return r && w;
}

struct ChildReport {
  int status = 0;  // 0 ok, else errno-like code of the failed step
  char error[200] = {};
  double step_time_s = 0, read_bytes = 0, write_bytes = 0;
};

// In the child, inside the cgroup: the arena, then the iterations.
ChildReport run_child(const Workload& w, const KernelPagerOptions& o) {
  ChildReport rep;
  auto fail = [&](const std::string& what) {
    rep.status = errno == 0 ? 1 : errno;
    std::snprintf(rep.error, sizeof rep.error, "%s: %s", what.c_str(), std::strerror(rep.status));
    return rep;
  };
  std::vector<std::size_t> offset(w.tensor_bytes.size());
  std::size_t total = 0;
  for (std::size_t t = 0; t < w.tensor_bytes.size(); ++t) {
    offset[t] = total;
    total += (w.tensor_bytes[t] + small_page - 1) / small_page * small_page;
  }
  const int fd = ::open(o.disk_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return fail("creating the arena file in " + o.disk_dir);
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return fail("sizing the arena file");
  auto* base = static_cast<volatile unsigned char*>(::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (base == MAP_FAILED) return fail("mapping the arena file");
  // Give every page data, as tvmm's tensors have, and start from the disk.
  for (std::size_t off = 0; off < total; off += small_page) base[off] = 1;
  ::msync(const_cast<unsigned char*>(base), total, MS_SYNC);
  ::posix_fadvise(fd, 0, static_cast<off_t>(total), POSIX_FADV_DONTNEED);

  using clock = std::chrono::steady_clock;
  double r0 = 0, w0 = 0, r1 = 0, w1 = 0;
  clock::time_point t0;
  for (int it = 0; it < o.iterations; ++it) {
    if (it == o.warmup) {
      task_io(r0, w0);
      t0 = clock::now();
    }
    auto deadline = clock::now();
    for (const auto& k : w.step) {
      for (const auto& p : k.pins) {
        auto* t = base + offset[p.tensor];
        const auto bytes = w.tensor_bytes[p.tensor];
        for (std::size_t off = 0; off < bytes; off += small_page) {
          if (p.access != Access::write) (void)t[off];  // a volatile load: kept
          if (p.access != Access::read) t[off] = static_cast<unsigned char>(it);
        }
      }
      // Dead contents (Kernel::discards): the program frees them, so the kernel drops their pages
      // without writing them back. Punching a hole in the file does that to the page cache and disk.
      for (const auto t : k.discards) {
        const auto bytes = (w.tensor_bytes[t] + small_page - 1) / small_page * small_page;
        if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset[t]),
                        static_cast<off_t>(bytes)) != 0)
          return fail("discarding a tensor (punching a hole in the arena file)");
      }
      // The kernel runs after its pages are in; the kernel's writeback runs meanwhile.
      deadline =
          std::max(deadline, clock::now()) + std::chrono::nanoseconds(static_cast<std::int64_t>(k.compute_us * 1e3));
      std::this_thread::sleep_until(deadline);
    }
  }
  rep.step_time_s = std::chrono::duration<double>(clock::now() - t0).count() / (o.iterations - o.warmup);
  if (!task_io(r1, w1)) return fail("reading /proc/self/io");
  rep.read_bytes = (r1 - r0) / (o.iterations - o.warmup);
  rep.write_bytes = (w1 - w0) / (o.iterations - o.warmup);
  ::munmap(const_cast<unsigned char*>(base), total);
  ::close(fd);
  return rep;
}

}  // namespace

KernelPagerResult run_kernel_pager(const Workload& w, const KernelPagerOptions& o) {
  KernelPagerResult res;
  struct statfs fs {};
  if (::statfs(o.disk_dir.c_str(), &fs) != 0) {
    res.skipped = "cannot use " + o.disk_dir + ": " + std::strerror(errno);
    return res;
  }
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    res.skipped = o.disk_dir + " is in memory (tmpfs): the kernel would have no disk to page to; pass --disk-dir";
    return res;
  }
  const auto cg = find_memory_cgroup();
  if (!cg.error.empty()) {
    res.skipped = cg.error;
    return res;
  }
  res.cgroup = cg.version;
  const auto dir = cg.dir + "/tvmm-bench-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0) {
    res.skipped = "cannot create the memory cgroup " + dir + ": " + std::strerror(errno) +
                  " (run as root, or in a delegated cgroup)";
    return res;
  }
  std::string error;
  const auto limit = std::to_string(o.memory_limit);
  bool ok = cg.version == "v1"
                ? write_file(dir + "/memory.limit_in_bytes", limit, error)
                : write_file(dir + "/memory.max", limit, error) && write_file(dir + "/memory.swap.max", "0", error);
  if (!ok) {
    ::rmdir(dir.c_str());
    res.skipped = error;
    return res;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ::rmdir(dir.c_str());
    res.skipped = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ChildReport rep;
    std::string err;
    if (!write_file(dir + "/cgroup.procs", "0", err)) {
      rep.status = 1;
      std::snprintf(rep.error, sizeof rep.error, "%s", err.c_str());
    } else {
      rep = run_child(w, o);
    }
    (void)!::write(fds[1], &rep, sizeof rep);
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildReport rep;
  const auto got = pid > 0 ? ::read(fds[0], &rep, sizeof rep) : -1;
  ::close(fds[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  ::rmdir(dir.c_str());
  if (pid < 0) {
    res.skipped = std::string("fork: ") + std::strerror(errno);
  } else if (got != static_cast<ssize_t>(sizeof rep)) {
    res.skipped = WIFSIGNALED(status) ? "the child was killed by signal " + std::to_string(WTERMSIG(status)) +
                                            " (the cgroup's OOM killer? the limit is " + limit + " bytes)"
                                      : "the child died without a report";
  } else if (rep.status != 0) {
    res.skipped = rep.error;
  } else {
    res.ran = true;
    res.step_time_s = rep.step_time_s;
    res.disk_read_bytes = rep.read_bytes;
    res.disk_write_bytes = rep.write_bytes;
  }
  return res;
}

}  // namespace tvmm::bench
