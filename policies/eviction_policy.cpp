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
  throw config_error("eviction = \"" + std::string(name) +
                     "\" is not a known eviction policy; use \"lru\", \"fifo\" or \"clock\"");
}

}  // namespace tvmm::policies
