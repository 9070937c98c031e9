// Replay's model of an operator's time on a named GPU (bench/workloads/gpu_profile.hpp).
#include "bench/workloads/gpu_profile.hpp"

#include <gtest/gtest.h>

#include "bench/workloads/workload.hpp"
#include "tvmm/tvmm.hpp"

namespace tvmm::bench {
namespace {

TEST(GpuProfile, AnOpTakesItsRooflineTimePlusTheLaunch) {
  const auto& h100 = gpu_profile("h100-pcie");
  Trace t;
  t.storages = {{4 * MiB, "param", "w"}, {4 * MiB, "temp", "y"}};
  TraceOp mm{"aten::mm.default", 5000, {0}, {1}, 378e9, 8e6};  // 1 ms of TF32 peak, 4 us of memory
  EXPECT_NEAR(op_time_us(mm, t, h100), 1000 + h100.launch_us, 1e-6);
  TraceOp relu{"aten::relu_.default", 300, {1}, {1}, 1e6, 2e9};  // memory-bound: 1 ms at 2 TB/s
  EXPECT_NEAR(op_time_us(relu, t, h100), 1000 + h100.launch_us, 1e-6);
  relu.flops = 51.2e9;  // the same flops on the FP32 peak: 1 ms too; not the matrix peak (0.14 ms)
  relu.bytes = 0;
  EXPECT_NEAR(op_time_us(relu, t, h100), 1000 + h100.launch_us, 1e-6);
  TraceOp view{"aten::t.default", 2, {0}, {}, 0, 0};  // launches no kernel
  EXPECT_EQ(op_time_us(view, t, h100), 0);
  // A version 1 op: the bytes of its storages, no flops; one that writes nothing is a view.
  TraceOp old{"aten::add.Tensor", 100, {0}, {1}};
  EXPECT_NEAR(op_time_us(old, t, h100), 8.0 * MiB / 2e12 * 1e6 + h100.launch_us, 1e-6);
  old.writes.clear();
  EXPECT_EQ(op_time_us(old, t, h100), 0);
  // The A100 is slower at the same work.
  EXPECT_GT(op_time_us(mm, t, gpu_profile("a100-sxm")), op_time_us(mm, t, h100));
  try {
    (void)gpu_profile("v100");
    ADD_FAILURE() << "an unknown GPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h100-sxm, h100-pcie, a100-sxm, a100-pcie"), std::string::npos) << e.what();
  }
}

TEST(GpuProfile, ReplayOnAGpuSumsItsOpsTimesPerKernel) {
  Trace t;
  t.storages = {{4 * MiB, "param", "w"}, {4 * MiB, "temp", "y"}, {64, "other", "-"}};
  t.ops = {{"aten::mm.default", 5000, {0}, {1}, 378e9, 8e6},
           {"aten::add_.Tensor", 7, {2}, {2}, 1, 16},  // touches no kept storage: its time goes to the next
           {"aten::relu_.default", 300, {1}, {1}, 1e6, 2e9}};
  const auto& h100 = gpu_profile("h100-pcie");
  const auto w = make_replay(t, "replay:hand", OpTime{0.02, &h100}, 1 * MiB);
  ASSERT_EQ(w.step.size(), 2u);
  EXPECT_NEAR(w.step[0].compute_us, 1000 + h100.launch_us, 1e-6);
  EXPECT_NEAR(w.step[1].compute_us, op_time_us(t.ops[1], t, h100) + 1000 + h100.launch_us, 1e-6);
  // On the CPU's times instead.
  const auto cpu = make_replay(t, "replay:hand", OpTime{0.02, nullptr}, 1 * MiB);
  EXPECT_NEAR(cpu.step[0].compute_us, 100, 1e-9);
}

}  // namespace
}  // namespace tvmm::bench
