#pragma once
// The resident small-object arena: allocations below the admission threshold that fit in a page share
// arena pages instead of each taking a whole page. An arena page is an ordinary one-page allocation
// pinned for life; inside it, runs of 256-byte units (cudaMalloc's alignment) are handed out first-fit.
// Not synchronised: the pager lock guards it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/device/device_backend.hpp"
#include "common/range_allocator.hpp"

namespace tvmm::vmm {

struct Allocation;

struct ArenaPage {
  Allocation* backing;  // the one-page allocation, pinned for life
  common::RangeAllocator<std::uint32_t> units;
  std::uint32_t live = 0;  // allocations placed here
};

class SmallArena {
 public:
  static constexpr std::size_t kUnit = 256;

  explicit SmallArena(std::size_t page_size) : units_per_page_(static_cast<std::uint32_t>(page_size / kUnit)) {}

  struct Placement {
    ArenaPage* page;
    std::uint32_t unit;
    device::DevPtr addr;
  };
  [[nodiscard]] static std::uint32_t units_for(std::size_t bytes) noexcept {
    return static_cast<std::uint32_t>((bytes + kUnit - 1) / kUnit);
  }
  //! A run of `units` in an existing page (the oldest with room), or nullopt.
  std::optional<Placement> place(std::uint32_t units);
  //! Adds a page (its backing allocation is pinned for life by the caller) and places a run of
  //! `units` (at most a page) in it at once: a page is never in the arena without an allocation.
  Placement add_page(Allocation* backing, std::uint32_t units);
  //! Returns a run; when the page becomes empty, removes it and returns its backing (for the caller to
  //! release), else null.
  Allocation* release(ArenaPage* page, std::uint32_t unit, std::uint32_t units);
  //! Removes and returns every page's backing (at shutdown).
  std::vector<Allocation*> take_all();
  //! Checks every page against the allocations placed in it (`live`: each live small allocation's page
  //! and run): no page without an allocation, the counts and units agree. Returns the first problem, or
  //! "" if none.
  [[nodiscard]] std::string check(const std::vector<const Allocation*>& live) const;

 private:
  std::uint32_t units_per_page_;
  std::vector<std::unique_ptr<ArenaPage>> pages_;
};

}  // namespace tvmm::vmm
