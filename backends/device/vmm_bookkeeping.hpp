#pragma once
// The VMM bookkeeping every device backend needs to honour the contract in device_backend.hpp with
// the same error codes whatever its driver returns: reservations, chunks and mappings, and the checks
// on them (map inside a reservation and not over a mapping, set_access/unmap over whole mappings,
// release only what is unmapped). Not thread-safe: the backend holds its lock around each call.
//
// Each add_* either records everything or changes nothing (std::bad_alloc), and the remove_* calls never
// allocate, so a backend can record a mapping before its driver call and forget it if the call fails,
// and undo a driver call (reserve, create) whose record could not be allocated: a driver object with no
// record, or a record with no object, would turn every later call on it into a wrong error.

#include <cstdint>
#include <iterator>
#include <map>

#include "backends/device/device_backend.hpp"

namespace tvmm::device {

class VmmBookkeeping {
 public:
  void add_reservation(DevPtr base, std::size_t bytes) { reservations_.emplace(base, bytes); }
  //! ok if [base, base+bytes) is exactly one reservation with nothing mapped in it.
  [[nodiscard]] Status check_release_reservation(DevPtr base, std::size_t bytes) const {
    auto it = reservations_.find(base);
    if (it == reservations_.end() || it->second != bytes) return Status::fail(Errc::invalid_value);
    auto m = mappings_.lower_bound(base);
    if (m != mappings_.end() && m->first < base + bytes) return Status::fail(Errc::invalid_value);  // still mapped
    return Status::success();
  }
  void remove_reservation(DevPtr base) noexcept { reservations_.erase(base); }
  //! The chunk behind [va, va+bytes) and va's offset in it, if one mapping holds the whole range.
  [[nodiscard]] bool backing(DevPtr va, std::size_t bytes, std::uint64_t* handle, std::size_t* offset) const {
    auto it = mappings_.upper_bound(va);
    if (it == mappings_.begin()) return false;
    --it;
    if (va + bytes > it->first + it->second.bytes) return false;
    *handle = it->second.handle;
    *offset = va - it->first;
    return true;
  }
  [[nodiscard]] const std::map<DevPtr, std::size_t>& reservations() const noexcept { return reservations_; }

  void add_chunk(std::uint64_t handle, std::size_t bytes) {
    const auto [it, inserted] = chunks_.emplace(handle, bytes);
    try {
      chunk_maps_.emplace(handle, 0);  // add_mapping then counts without allocating
    } catch (...) {
      if (inserted) chunks_.erase(it);  // never a record this call did not make
      throw;
    }
  }
  //! The chunk's size if it exists and is not mapped anywhere.
  [[nodiscard]] Status check_release_chunk(std::uint64_t handle, std::size_t* bytes) const {
    auto it = chunks_.find(handle);
    if (it == chunks_.end()) return Status::fail(Errc::invalid_value);
    if (auto m = chunk_maps_.find(handle); m != chunk_maps_.end() && m->second > 0) {
      return Status::fail(Errc::invalid_value);  // still mapped: unmap first
    }
    *bytes = it->second;
    return Status::success();
  }
  void remove_chunk(std::uint64_t handle) noexcept {
    chunks_.erase(handle);
    chunk_maps_.erase(handle);
  }

  //! ok if the chunk exists, fits, and [va, va+bytes) lies inside one reservation over no mapping.
  [[nodiscard]] Status check_map(DevPtr va, std::size_t bytes, std::uint64_t handle) const {
    auto c = chunks_.find(handle);
    if (c == chunks_.end() || bytes > c->second) return Status::fail(Errc::invalid_value);
    auto r = reservations_.upper_bound(va);
    if (r == reservations_.begin()) return Status::fail(Errc::invalid_value);
    --r;
    if (va < r->first || va + bytes > r->first + r->second) return Status::fail(Errc::invalid_value);
    auto after = mappings_.lower_bound(va);
    if (after != mappings_.end() && after->first < va + bytes) return Status::fail(Errc::already_mapped);
    if (after != mappings_.begin()) {
      auto before = std::prev(after);
      if (before->first + before->second.bytes > va) return Status::fail(Errc::already_mapped);
    }
    return Status::success();
  }
  //! Records a mapping of a chunk add_chunk recorded (check_map first).
  //! Allocates only when no unmap left a spare record: an unmap followed by a map (a remap) never does.
  void add_mapping(DevPtr va, std::size_t bytes, std::uint64_t handle) {
    if (spare_.empty()) {
      mappings_.emplace(va, Mapping{bytes, handle});  // the only allocation
    } else {
      spare_.key() = va;
      spare_.mapped() = Mapping{bytes, handle};
      mappings_.insert(std::move(spare_));  // check_map said nothing is mapped at va: it goes in
    }
    if (auto c = chunk_maps_.find(handle); c != chunk_maps_.end()) ++c->second;
  }
  //! ok if [va, va+bytes) is tiled by whole mappings (not_mapped or invalid_value otherwise); with
  //! `count`, sets it to the number of those mappings.
  [[nodiscard]] Status check_whole_mappings(DevPtr va, std::size_t bytes, std::size_t* count = nullptr) const {
    DevPtr at = va;
    std::size_t n = 0;
    for (auto m = mappings_.find(va); at < va + bytes; ++m, ++n) {
      if (m == mappings_.end() || m->first != at) return Status::fail(Errc::not_mapped);
      at += m->second.bytes;
    }
    if (count != nullptr) *count = n;
    return at == va + bytes ? Status::success() : Status::fail(Errc::invalid_value);
  }
  //! Forgets the mappings tiling [va, va+bytes) (checked with check_whole_mappings first).
  void remove_mappings(DevPtr va, std::size_t bytes) noexcept {
    for (auto m = mappings_.find(va); m != mappings_.end() && m->first < va + bytes;) {
      if (auto c = chunk_maps_.find(m->second.handle); c != chunk_maps_.end()) --c->second;
      const auto next = std::next(m);
      if (spare_.empty()) {
        spare_ = mappings_.extract(m);  // kept for the next add_mapping
      } else {
        mappings_.erase(m);
      }
      m = next;
    }
  }

 private:
  struct Mapping {
    std::size_t bytes;
    std::uint64_t handle;
  };
  std::map<DevPtr, std::size_t> reservations_;   // base -> bytes
  std::map<std::uint64_t, std::size_t> chunks_;  // handle -> bytes
  std::map<std::uint64_t, int> chunk_maps_;      // handle -> live mappings
  std::map<DevPtr, Mapping> mappings_;           // va -> mapping
  // The record of the latest unmap, for the next map: one per backend, so "an unmap then a map never
  // allocates" holds for a caller that makes both while no other thread maps on the same backend in
  // between (RemapHeap::do_move, under the heap's lock, on a backend of its own).
  std::map<DevPtr, Mapping>::node_type spare_;
};

}  // namespace tvmm::device
