#include "policies/list_policy.hpp"

#include <mutex>

namespace tvmm::policies {

ListPolicy::~ListPolicy() { list_.clear(); }

void ListPolicy::insert(detail::PageEntry& page) {
  on_insert(page);
  std::lock_guard lk(mu_);
  list_.push_back(page);
}

void ListPolicy::remove(detail::PageEntry& page) {
  std::lock_guard lk(mu_);
  if (page.policy_hook.is_linked()) list_.erase(list_.iterator_to(page));
}

std::size_t ListPolicy::select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) {
  std::lock_guard lk(mu_);
  std::size_t taken = 0;
  // Each page is visited at most twice: once to use up a second chance, once more as a candidate.
  std::size_t budget = 2 * list_.size();
  for (auto it = list_.begin(); it != list_.end() && taken < max && budget > 0; --budget) {
    detail::PageEntry& p = *it;
    if (second_chance(p)) {
      it = list_.erase(it);
      list_.push_back(p);
    } else if (claim(p)) {
      it = list_.erase(it);
      ++taken;
    } else {
      ++it;
    }
  }
  return taken;
}

void ListPolicy::move_to_back(detail::PageEntry* pages, std::size_t n) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = pages[i];
    if (p.policy_hook.is_linked()) list_.splice(list_.end(), list_, list_.iterator_to(p));
  }
}

std::size_t ListPolicy::size() const {
  std::lock_guard lk(mu_);
  return list_.size();
}

}  // namespace tvmm::policies
