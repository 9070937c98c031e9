#include "policies/lru.hpp"

namespace tvmm::policies {

void LruPolicy::touch(PageIndex first, std::size_t n) {
  note_use(first, n);
  move_to_back(first, n);
}

}  // namespace tvmm::policies
