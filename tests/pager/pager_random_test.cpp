// Random workloads at 4x oversubscription: every byte verified, budgets and invariants checked at
// every step.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "device_bytes.hpp"
#include "policies/registry.hpp"
#include "test_support.hpp"

using namespace tvmm;

namespace {

struct Shadow {
  Tensor t;
  std::uint64_t seed = 0;  // 0: never written
};

void run_random(std::uint32_t rng_seed, std::size_t device_pages, bool use_stream, const char* policy = "lru") {
  const std::size_t page = 64 * KiB;
  auto cfg = test::small_config(device_pages, 4 * device_pages);
  cfg.eviction = policy;
  test::TestPager tp(cfg);  // the simulator, or the CUDA backend (TVMM_TEST_DEVICE=cuda)
  Pager& p = *tp;
  std::mt19937_64 rng(rng_seed);
  std::vector<Shadow> ts;
  std::size_t total_pages = 0;
  // Tensors of 1..3 pages (some not page-multiples) until the data is 4x the device budget.
  while (total_pages < 4 * device_pages) {
    const std::size_t pages = 1 + rng() % 3;
    const std::size_t bytes = pages * page - (rng() % 2 ? 0 : rng() % 1000);
    ts.push_back({p.allocate(bytes), 0});
    total_pages += pages;
  }
  std::vector<void*> addrs;
  for (auto& s : ts) addrs.push_back(s.t.data());
  auto stream = p.create_stream();
  std::uint64_t next_seed = 1;
  const auto budget = p.stats().device_budget;
  const auto host_budget = p.stats().host_budget;
  for (int step = 0; step < 400; ++step) {
    auto& s = ts[rng() % ts.size()];
    const bool write = s.seed == 0 || rng() % 2 == 0;
    const std::uint64_t old_seed = s.seed;
    const std::uint64_t new_seed = write ? next_seed++ : s.seed;
    {
      auto pin = use_stream ? s.t.pin(stream, write ? Access::read_write : Access::read)
                            : s.t.pin(write ? Access::read_write : Access::read);
      Stream* on = use_stream ? &stream : nullptr;
      if (old_seed != 0) tp.check(on, pin.data(), s.t.size(), old_seed);
      if (write) tp.fill(on, pin.data(), s.t.size(), new_seed);
    }
    s.seed = new_seed;
    const auto st = p.stats();
    ASSERT_LE(st.device_used_bytes, budget) << "step " << step;
    ASSERT_LE(st.host_used_bytes, host_budget) << "step " << step;
    if (step % 16 == 0) {
      if (use_stream) stream.synchronize();
      p.check_invariants();
    }
  }
  stream.synchronize();
  EXPECT_EQ(tp.mismatches(), 0u);
  // Every byte of every tensor, read back through host pins.
  for (std::size_t i = 0, before = tp.mismatches(); i < ts.size(); ++i) {
    EXPECT_EQ(ts[i].t.data(), addrs[i]) << "address of tensor " << i << " changed";
    if (ts[i].seed == 0) continue;
    auto pin = ts[i].t.pin(Access::read);
    tp.check(nullptr, pin.data(), ts[i].t.size(), ts[i].seed);
    const std::uint64_t now = tp.mismatches();  // a running tally: this tensor's bytes are the growth
    EXPECT_EQ(now - before, 0u) << "tensor " << i;
    before = now;
  }
  const auto st = p.stats();
  EXPECT_LE(st.device_peak_bytes, budget);
  EXPECT_LE(st.host_peak_bytes, host_budget);
  EXPECT_GT(st.evictions, 0u);
  p.check_invariants();
}

}  // namespace

TEST(PagerRandom, HostPinsAt4xOversubscription) {
  for (std::uint32_t seed : {1u, 2u, 3u}) run_random(seed, 6, false);
}

TEST(PagerRandom, StreamPinsAt4xOversubscription) {
  for (std::uint32_t seed : {4u, 5u, 6u}) run_random(seed, 6, true);
}

TEST(PagerRandom, DeviceOfThreePagesWithThreePageTensors) { run_random(7, 3, true); }

// The same integrity run under every registered eviction policy (policies/registry.cpp).
class PagerRandomPolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(PagerRandomPolicy, StreamPinsAt4xOversubscription) {
  for (std::uint32_t seed : {11u, 12u}) run_random(seed, 6, true, GetParam().c_str());
}

namespace {
std::vector<std::string> registered_policies() {
  std::vector<std::string> names;
  for (const auto& p : tvmm::policies::eviction_policies()) names.emplace_back(p.name);
  return names;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Policies, PagerRandomPolicy, ::testing::ValuesIn(registered_policies()),
                         [](const auto& param_info) { return param_info.param; });
