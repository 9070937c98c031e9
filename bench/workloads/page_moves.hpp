#pragma once
// Page-move bandwidth through a pager, shared by the host-bandwidth and vmm workloads.

#include <chrono>
#include <vector>

#include "tvmm/tvmm.hpp"

namespace tvmm::bench {

//! `tensors` tensors of `bytes` each, written once, then pinned read-write in turn `sweeps` times over a
//! device budget that holds fewer of them: every pin moves pages in and others out. Returns the bytes
//! moved (both directions) per second, in GB/s.
inline double page_move_gbs(Pager& pager, int tensors, std::size_t bytes, int sweeps) {
  auto stream = pager.create_stream();
  std::vector<Tensor> ts;
  for (int i = 0; i < tensors; ++i) ts.push_back(pager.allocate(bytes));
  for (auto& t : ts) auto pin = t.pin(stream, Access::write);
  stream.synchronize();
  const auto before = pager.stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < sweeps; ++s) {
    for (auto& t : ts) auto pin = t.pin(stream, Access::read_write);
  }
  stream.synchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto after = pager.stats();
  const double moved = static_cast<double>((after.host_to_device.bytes - before.host_to_device.bytes) +
                                           (after.device_to_host.bytes - before.device_to_host.bytes));
  return moved / secs / 1e9;
}

}  // namespace tvmm::bench
