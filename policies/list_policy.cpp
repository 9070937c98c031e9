#include "policies/list_policy.hpp"

#include <mutex>

namespace tvmm::policies {

ListPolicy::ListPolicy(std::uint32_t page_count) : nodes_(std::make_unique<Node[]>(page_count)) {}

ListPolicy::~ListPolicy() { list_.clear(); }

void ListPolicy::insert(PageIndex page) {
  on_insert(page);
  std::lock_guard lk(mu_);
  list_.push_back(node(page));
}

void ListPolicy::restore(PageIndex page) {
  std::lock_guard lk(mu_);
  list_.push_back(node(page));
}

void ListPolicy::remove(PageIndex page) {
  std::lock_guard lk(mu_);
  Node& n = node(page);
  if (n.hook.is_linked()) list_.erase(list_.iterator_to(n));
}

std::size_t ListPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim) {
  std::lock_guard lk(mu_);
  std::size_t taken = 0;
  // Each page is visited at most twice: once to use up a second chance, once more as a candidate.
  std::size_t budget = 2 * list_.size();
  for (auto it = list_.begin(); it != list_.end() && taken < max && budget > 0; --budget) {
    Node& n = *it;
    const PageIndex page = index_of(n);
    if (second_chance(page)) {
      it = list_.erase(it);
      list_.push_back(n);
    } else if (claim(page)) {
      it = list_.erase(it);
      ++taken;
    } else {
      ++it;
    }
  }
  return taken;
}

std::size_t ListPolicy::select(std::size_t max, common::FunctionRef<bool(PageIndex)> claim,
                               std::span<const PageIndex> prefer) {
  std::size_t taken = 0;
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < prefer.size() && taken < max; ++i) {
      Node& n = node(prefer[i]);
      if (!n.hook.is_linked() || !claim(prefer[i])) continue;
      list_.erase(list_.iterator_to(n));
      ++taken;
    }
  }
  return taken + (taken < max ? ListPolicy::select(max - taken, claim) : 0);
}

void ListPolicy::move_to_back(PageIndex first, std::size_t n) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    Node& nd = node(static_cast<PageIndex>(first + i));
    if (nd.hook.is_linked()) list_.splice(list_.end(), list_, list_.iterator_to(nd));
  }
}

std::size_t ListPolicy::size() const {
  std::lock_guard lk(mu_);
  return list_.size();
}

}  // namespace tvmm::policies
