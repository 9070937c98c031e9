// The interposer's launch gates (preload/launch_gate.hpp): a remap's exclusive hold waits for the calls
// queueing work and keeps new ones out; a call that needs two gates never holds one while it waits at the
// other (a remap of that one could be waiting, through its drain, for work that needs the other).
#include "preload/launch_gate.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

using tvmm::preload::GateEntry;
using tvmm::preload::launch_gate;
using tvmm::preload::unlock_gates_held;
using namespace std::chrono_literals;

// Waits up to `limit` for `flag`.
bool eventually(const std::atomic<bool>& flag, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!flag.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
  return flag.load();
}

TEST(LaunchGate, ARemapWaitsForCallsUnderWayAndKeepsNewOnesOut) {
  std::atomic<bool> inside{false}, leave{false}, remapping{false}, later_entered{false};
  std::thread call([&] {
    const GateEntry entry(false, 3);
    inside = true;
    while (!leave.load()) std::this_thread::sleep_for(1ms);
  });
  ASSERT_TRUE(eventually(inside));
  std::thread remap([&] {
    launch_gate(3).lock_for_remap();
    remapping = true;
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(later_entered.load());  // kept out while the remap holds the gate
    unlock_gates_held();
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(remapping.load());  // the call is still queueing its work
  leave = true;
  ASSERT_TRUE(eventually(remapping));
  std::thread later([&] {
    const GateEntry entry(false, 3);
    later_entered = true;
  });
  call.join();
  remap.join();
  later.join();
  EXPECT_TRUE(later_entered.load());
  // Another device's gate is never closed by this one's remap.
  launch_gate(3).lock_for_remap();
  std::atomic<bool> other{false};
  std::thread elsewhere([&] {
    const GateEntry entry(false, 4);
    other = true;
  });
  EXPECT_TRUE(eventually(other));
  elsewhere.join();
  unlock_gates_held();
}

TEST(LaunchGate, ACallThatNeedsTwoGatesHoldsNeitherWhileOneIsClosed) {
  launch_gate(6).lock_for_remap();  // a remap on device 6 (this thread)
  std::atomic<bool> copied{false};
  std::thread copy([&] {  // a copy between devices 5 and 6 waits for that remap
    const GateEntry entry(false, 6, 5);
    copied = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(copied.load());
  // A remap on device 5 meanwhile: the waiting copy must not hold gate 5 (the remap on 6 may wait, through
  // its drain, for a launch on 5 that this remap's gate would hold up: a deadlock).
  std::atomic<bool> remapped5{false};
  std::thread remap5([&] {
    launch_gate(5).lock_for_remap();
    remapped5 = true;
    unlock_gates_held();
  });
  EXPECT_TRUE(eventually(remapped5, 2000ms));
  unlock_gates_held();  // the remap on 6 ends: the copy goes through
  EXPECT_TRUE(eventually(copied));
  remap5.join();
  copy.join();
}

TEST(LaunchGate, HoldsAreReentrantAndTheRemappersOwnCallsPass) {
  {
    const GateEntry outer(false, 7);
    const GateEntry inner(false, 7, 8);
  }
  launch_gate(7).lock_for_remap();
  {
    const GateEntry own(false, 7);  // the exclusive holder's own call
  }
  std::atomic<bool> entered{false};
  std::thread other([&] {
    const GateEntry entry(false, 7);
    entered = true;
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(entered.load());
  unlock_gates_held();
  EXPECT_TRUE(eventually(entered));
  other.join();
}

}  // namespace
