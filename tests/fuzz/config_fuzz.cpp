// libFuzzer target over the policy-file loader. Property: any input either loads or raises
// tvmm::config_error (never a crash, a sanitizer report or another exception), and a configuration
// that loads prints as TOML that reads back to the same configuration.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tvmm::Config config;
  try {
    config = tvmm::parse_config(text, "fuzz-input");
  } catch (const tvmm::config_error&) {
    return 0;  // rejected with a message: fine
  }
  const std::string printed = tvmm::to_toml(config);
  if (tvmm::to_toml(tvmm::parse_config(printed, "printed")) != printed) std::abort();
  return 0;
}
