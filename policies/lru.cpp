#include "policies/lru.hpp"

namespace tvmm::policies {

LruPolicy::~LruPolicy() { list_.clear(); }

void LruPolicy::insert(detail::PageEntry& page) {
  std::lock_guard lk(mu_);
  list_.push_back(page);
}

void LruPolicy::touch(detail::PageEntry* pages, std::size_t n) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = pages[i];
    if (p.policy_hook.is_linked()) list_.splice(list_.end(), list_, list_.iterator_to(p));
  }
}

void LruPolicy::remove(detail::PageEntry& page) {
  std::lock_guard lk(mu_);
  if (page.policy_hook.is_linked()) list_.erase(list_.iterator_to(page));
}

std::size_t LruPolicy::select(std::size_t max, detail::FunctionRef<bool(detail::PageEntry&)> claim) {
  std::lock_guard lk(mu_);
  std::size_t taken = 0;
  for (auto it = list_.begin(); it != list_.end() && taken < max;) {
    if (claim(*it)) {
      it = list_.erase(it);
      ++taken;
    } else {
      ++it;
    }
  }
  return taken;
}

std::size_t LruPolicy::size() const {
  std::lock_guard lk(mu_);
  return list_.size();
}

}  // namespace tvmm::policies
