#include "policies/eviction_policy.hpp"

#include <string>

#include "policies/clock.hpp"
#include "policies/fifo.hpp"
#include "policies/lru.hpp"
#include "tvmm/errors.hpp"

namespace tvmm::policies {

std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name) {
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "fifo") return std::make_unique<FifoPolicy>();
  if (name == "clock") return std::make_unique<ClockPolicy>();
  // Config::validate refuses unknown names first, listing every policy from the key table; Belady is
  // built by the pager (it needs the access trace).
  throw config_error("make_eviction_policy: \"" + std::string(name) +
                     "\" is not one of the list policies \"lru\", \"fifo\", \"clock\"");
}

}  // namespace tvmm::policies
