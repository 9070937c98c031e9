#pragma once
// Room in a vector before a step that must not allocate (a failure path, a destructor): capacity for
// `more` elements past its size, grown geometrically, so that calling it before each push keeps a loop
// linear. Throws std::bad_alloc, changing nothing.

#include <algorithm>
#include <cstddef>

namespace tvmm::common {

template <class V>
void reserve_room(V& v, std::size_t more) {
  if (v.capacity() - v.size() < more) v.reserve(std::max(v.size() + more, 2 * v.capacity()));
}

}  // namespace tvmm::common
