#include "policies/clock.hpp"

namespace tvmm::policies {

ClockPolicy::ClockPolicy(std::uint32_t page_count)
    : ListPolicy(page_count, true), referenced_(std::make_unique<std::atomic<std::uint8_t>[]>(page_count)) {}

void ClockPolicy::touch(PageIndex first, std::size_t n) {
  note_use(first, n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& r = referenced_[first + i];
    if (r.load(std::memory_order_relaxed) == 0) r.store(1, std::memory_order_relaxed);
  }
}

bool ClockPolicy::second_chance(PageIndex page) {
  return referenced_[page].exchange(0, std::memory_order_relaxed) != 0;
}

void ClockPolicy::on_insert(PageIndex page) { referenced_[page].store(0, std::memory_order_relaxed); }

}  // namespace tvmm::policies
