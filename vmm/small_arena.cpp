#include "vmm/small_arena.hpp"

#include <algorithm>

#include "vmm/allocation.hpp"

namespace tvmm::detail {

std::optional<SmallArena::Placement> SmallArena::place(std::uint32_t units) {
  for (auto& p : pages_) {
    if (auto unit = p->units.allocate(units)) {
      ++p->live;
      return Placement{p.get(), *unit, p->backing->base + std::size_t{*unit} * kUnit};
    }
  }
  return std::nullopt;
}

void SmallArena::add_page(Allocation* backing) {
  pages_.push_back(std::make_unique<ArenaPage>(ArenaPage{backing, RangeAllocator<std::uint32_t>(units_per_page_), 0}));
}

Allocation* SmallArena::release(ArenaPage* page, std::uint32_t unit, std::uint32_t units) {
  page->units.free(unit, units);
  if (--page->live != 0) return nullptr;
  Allocation* backing = page->backing;
  std::erase_if(pages_, [&](const auto& p) { return p.get() == page; });
  return backing;
}

std::vector<Allocation*> SmallArena::take_all() {
  std::vector<Allocation*> out;
  for (auto& p : pages_) out.push_back(p->backing);
  pages_.clear();
  return out;
}

}  // namespace tvmm::detail
