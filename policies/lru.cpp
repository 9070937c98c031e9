#include "policies/lru.hpp"

#include <mutex>

namespace tvmm::policies {

void LruPolicy::touch(detail::PageEntry* pages, std::size_t n) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = pages[i];
    if (p.policy_hook.is_linked()) list_.splice(list_.end(), list_, list_.iterator_to(p));
  }
}

}  // namespace tvmm::policies
