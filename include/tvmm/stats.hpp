#pragma once
//! @file stats.hpp
//! `tvmm::Stats`: a snapshot of a pager's counters.

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "tvmm/export.h"

namespace tvmm {

//! Traffic in one direction between two tiers.
struct Traffic {
  //! Bytes moved. A host<->device copy of a tensor's partial last page moves the bytes the tensor holds in
  //! it; NVMe I/O moves those bytes rounded up to 4 KiB (O_DIRECT's alignment).
  std::uint64_t bytes = 0;
  std::uint64_t pages = 0;  //!< Pages moved.
};

//! Calls of one kind to the device backend (the GPU driver), and the host time they took.
struct DriverTime {
  std::uint64_t calls = 0;  //!< Calls made.
  std::uint64_t ns = 0;     //!< Host time inside them: the wall clock around each call.
};

//! Host time in the device backend's calls, by kind: where a pager's host time goes on a GPU, where
//! every such call is a driver call. On the simulator the same calls take its own time (mmap for a map,
//! memcpy-free queueing for a copy); its modelled call costs (SimDeviceConfig::VmmCosts) count only with
//! timing "wall".
struct DriverTimes {
  DriverTime map;          //!< cuMemMap
  DriverTime set_access;   //!< cuMemSetAccess
  DriverTime unmap;        //!< cuMemUnmap
  DriverTime copy;         //!< cuMemcpyAsync and device-to-device copies queued
  DriverTime record;       //!< cuEventRecord
  DriverTime stream_wait;  //!< cuStreamWaitEvent
  DriverTime query;        //!< cuEventQuery
  DriverTime synchronize;  //!< cuEventSynchronize, cuStreamSynchronize, cuCtxSynchronize
  DriverTime launch;       //!< kernels and host functions launched (the pager's own and its users')
};

//! Each kind of DriverTimes with its name ("map", "set_access", "unmap", "copy", "record",
//! "stream_wait", "query", "synchronize", "launch"), in that order.
[[nodiscard]] TVMM_API std::array<std::pair<const char*, DriverTime>, 9> driver_times(const DriverTimes& d);

//! A consistent-enough snapshot of a pager's counters (each counter is read atomically; the set is
//! not one atomic snapshot while other threads run).
struct Stats {
  Traffic host_to_device;                //!< Page-ins from the host tier.
  Traffic device_to_host;                //!< Write-backs of evicted pages to the host tier, and
                                         //!< write-behind copies of resident ones (`written_behind`).
  Traffic host_to_nvme;                  //!< Pages written to the NVMe tier.
  Traffic nvme_to_host;                  //!< Pages read back from the NVMe tier (checksums verified).
  std::uint64_t pins = 0;                //!< Pin calls.
  std::uint64_t hits = 0;                //!< Pages found resident at pin time.
  std::uint64_t misses = 0;              //!< Pages that had to be made resident at pin or prefetch time.
  std::uint64_t evictions = 0;           //!< Pages evicted from the device tier.
  std::uint64_t clean_evictions = 0;     //!< Of those, dropped with no copy: a current host or NVMe copy, or
                                         //!< discarded (a page with only a current NVMe copy, copied to spare
                                         //!< host room instead, is not counted).
  std::uint64_t prefetched = 0;          //!< Pages made resident by prefetch() or trace prefetch.
  std::uint64_t nvme_read_ahead = 0;     //!< Pages read from NVMe into the host tier ahead of their pins
                                         //!< (trace replay), counted in nvme_to_host too.
  std::uint64_t written_behind = 0;      //!< Pages copied to the host tier while they stayed resident
                                         //!< (Config::write_behind), counted in device_to_host too.
  std::uint64_t kept_mappings = 0;       //!< Page-ins into the frame the page's address was still mapped to
                                         //!< (no map, access grant or unmap call; see PageEntry::mapped).
  std::uint64_t remap_ns = 0;            //!< Host time in the driver calls of the other page-ins: unmapping
                                         //!< the address's old mapping, mapping it, granting access. Read
                                         //!< on the device's host clock: the wall clock on a GPU, the
                                         //!< modelled call costs on the simulator (device.sim.*_us).
  std::uint64_t trace_divergences = 0;   //!< Times the program left the recorded trace (it was dropped).
  std::uint64_t stall_ns = 0;            //!< Time calling threads spent blocked inside pin().
  std::uint64_t allocations = 0;         //!< Tensors allocated so far.
  std::uint64_t live_bytes = 0;          //!< Bytes of live tensors (rounded up to pages).
  std::uint64_t device_used_bytes = 0;   //!< Device frames in use now.
  std::uint64_t device_peak_bytes = 0;   //!< Most device frames ever in use at once.
  std::uint64_t host_used_bytes = 0;     //!< Host frames in use now (copies kept by resident pages included).
  std::uint64_t host_peak_bytes = 0;     //!< Most host frames ever in use at once.
  std::uint64_t device_budget = 0;       //!< Device budget in bytes (whole pages).
  std::uint64_t host_budget = 0;         //!< Host budget in bytes (whole pages).
  std::uint64_t nvme_used_bytes = 0;     //!< NVMe slots in use now (pages there, and copies kept).
  std::uint64_t nvme_peak_bytes = 0;     //!< Most NVMe slots ever in use at once.
  std::uint64_t nvme_budget = 0;         //!< NVMe budget in bytes (whole pages); 0 = no NVMe tier.
  std::uint64_t nvme_write_errors = 0;   //!< Failed writes to the NVMe tier (each page stayed on the host).
  std::uint64_t nvme_read_errors = 0;    //!< Failed reads from the NVMe tier (each page stayed there).
  std::uint64_t nvme_corrupt_reads = 0;  //!< Reads whose data failed the page checksum (never handed out).
  std::uint64_t page_size = 0;           //!< Page size in bytes.
  DriverTimes driver;                    //!< The device backend's calls, by kind, and their host time.

  //! Pages found resident over pages asked for by pins, in [0, 1]; 1 when nothing was pinned.
  [[nodiscard]] double hit_rate() const noexcept {
    const auto total = hits + misses;
    return total == 0 ? 1.0 : static_cast<double>(hits) / static_cast<double>(total);
  }
};

//! The snapshot as one JSON object, every field by its name (Traffic as {"bytes": B, "pages": P}):
//! what `stats.file` receives when a pager is destroyed.
[[nodiscard]] TVMM_API std::string to_json(const Stats& stats);

}  // namespace tvmm
