#include "vmm/core/small_arena.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "vmm/core/allocation.hpp"

namespace tvmm::vmm {

std::optional<SmallArena::Placement> SmallArena::place(std::uint32_t units) {
  for (auto& p : pages_) {
    if (auto unit = p->units.allocate(units)) {
      ++p->live;
      return Placement{p.get(), *unit, p->backing->base + std::size_t{*unit} * kUnit};
    }
  }
  return std::nullopt;
}

SmallArena::Placement SmallArena::add_page(Allocation* backing, std::uint32_t units) {
  auto page =
      std::make_unique<ArenaPage>(ArenaPage{backing, common::RangeAllocator<std::uint32_t>(units_per_page_), 1});
  const std::uint32_t unit = *page->units.allocate(units);  // an empty page holds any run of a page or less
  ArenaPage* p = page.get();
  pages_.push_back(std::move(page));
  return Placement{p, unit, backing->base + std::size_t{unit} * kUnit};
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

std::string SmallArena::check(const std::vector<const Allocation*>& live) const {
  std::unordered_map<const ArenaPage*, std::pair<std::uint32_t, std::uint32_t>> placed;  // allocations, units
  for (const Allocation* a : live) {
    auto& [count, units] = placed[a->arena];
    ++count;
    units += a->arena_units;
  }
  for (std::size_t i = 0; i < pages_.size(); ++i) {
    const ArenaPage& p = *pages_[i];
    const std::string where = "small-object arena page " + std::to_string(i) + " (" + std::to_string(p.live) + " live)";
    const auto it = placed.find(&p);
    const std::uint32_t count = it == placed.end() ? 0 : it->second.first;
    const std::uint32_t units = it == placed.end() ? 0 : it->second.second;
    if (p.live == 0) return where + " holds no allocation but stays pinned";
    if (count != p.live) return where + " has " + std::to_string(count) + " allocations placed in it";
    if (units_per_page_ - p.units.free_total() != units)
      return where + " has " + std::to_string(units_per_page_ - p.units.free_total()) + " units in use but its " +
             "allocations hold " + std::to_string(units);
    if (!p.backing->pinned_for_life) return where + " is not pinned for life";
    placed.erase(&p);
  }
  if (!placed.empty())
    return std::to_string(placed.size()) + " arena pages of live small allocations are not in the arena";
  return {};
}

}  // namespace tvmm::vmm
