#pragma once
// How tensors and addresses are named in messages.

#include <cinttypes>
#include <cstdio>
#include <string>

#include "tvmm/config.hpp"
#include "vmm/core/allocation.hpp"

namespace tvmm::vmm {

inline std::string hex(device::DevPtr p) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, p);
  return buf;
}

inline std::string tensor_label(const Allocation* a) {
  std::string s = "tensor";
  if (!a->name.empty()) s += " '" + a->name + "'";
  return s + " at " + hex(a->base) + " (" + format_bytes(a->bytes) + ")";
}

}  // namespace tvmm::vmm
