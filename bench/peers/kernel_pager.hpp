#pragma once
// The Linux kernel as the pager, a peer for tvmm-bench: the workload's tensors laid out in an mmap'ed
// file (MAP_SHARED) on the disk tvmm's NVMe tier would use, run in a child process inside a new memory
// cgroup (v1 or v2) whose limit is tvmm's device + host budget. A pin touches every 4 KiB page of its
// tensor (a load, a store for writes), so the kernel's page cache faults pages in from the file,
// reads ahead, and writes dirty pages back under the limit; compute is modelled by sleeping until the
// kernel's deadline. There is no bus: the arena is host memory, so this peer pays only the disk.

#include <string>

#include "bench/workloads/workload.hpp"

namespace tvmm::bench {

struct KernelPagerOptions {
  std::size_t memory_limit = 0;  //!< the cgroup's limit: tvmm's device + host budget
  std::string disk_dir = "/var/tmp";
  int iterations = 6;
  int warmup = 2;
};

struct KernelPagerResult {
  bool ran = false;
  std::string skipped;  //!< why it did not run (no writable memory cgroup, tmpfs, ...)
  std::string cgroup;   //!< "v1" or "v2"
  double step_time_s = 0;
  double disk_read_bytes = 0;  //!< per iteration, from /proc/self/io (bytes the task caused to be read)
  double disk_write_bytes = 0;
};

//! Runs the workload under the kernel's paging. Never throws for a machine that cannot run it: the
//! result says why it was skipped.
KernelPagerResult run_kernel_pager(const Workload& w, const KernelPagerOptions& o);

}  // namespace tvmm::bench
