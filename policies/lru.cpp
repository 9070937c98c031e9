#include "policies/lru.hpp"

namespace tvmm::policies {

void LruPolicy::touch(detail::PageEntry* pages, std::size_t n) { move_to_back(pages, n); }

}  // namespace tvmm::policies
