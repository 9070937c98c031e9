// Allocates 4x the device budget through the installed library and checks the bytes come back.
#include <tvmm/tvmm.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  tvmm::Config cfg;
  cfg.device_budget = 8 * tvmm::MiB;
  cfg.host_budget = 32 * tvmm::MiB;
  tvmm::Pager pager(cfg);
  std::vector<tvmm::Tensor> ts;
  for (int i = 0; i < 16; ++i) ts.push_back(pager.allocate(2 * tvmm::MiB));
  for (int i = 0; i < 16; ++i) {
    auto pin = ts[static_cast<std::size_t>(i)].pin(tvmm::Access::write);
    std::memset(pin.data(), i, pin.size());
  }
  for (int i = 0; i < 16; ++i) {
    auto pin = ts[static_cast<std::size_t>(i)].pin(tvmm::Access::read);
    const auto* p = static_cast<const unsigned char*>(pin.data());
    for (std::size_t k = 0; k < pin.size(); ++k) {
      if (p[k] != static_cast<unsigned char>(i)) {
        std::printf("consumer: tensor %d byte %zu differs\n", i, k);
        return 1;
      }
    }
  }
  std::printf("consumer: ok, %llu evictions\n", static_cast<unsigned long long>(pager.stats().evictions));
  return 0;
}
