#pragma once
// This machine's physical memory, for the checks that refuse or warn about budgets it cannot hold.

#include <unistd.h>

#include <cstddef>

namespace tvmm::common {

//! Bytes of physical memory (sysconf: _SC_PHYS_PAGES x _SC_PAGESIZE); 0 where the system does not say.
inline std::size_t physical_memory() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(size) : 0;
}

}  // namespace tvmm::common
