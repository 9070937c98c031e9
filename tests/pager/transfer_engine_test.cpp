// The transfer engine's driver calls on its own copy streams: a wait for an event recorded on the
// stream it orders is no call, and a write-back event asked for with nothing queued since the last one
// is that one. Counted on a FaultyDevice over the simulator.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backends/device/faulty/faulty_device.hpp"
#include "test_support.hpp"
#include "vmm/core/event_pool.hpp"
#include "vmm/core/transfer_engine.hpp"

namespace tvmm {
namespace {

using Op = device::FaultyDevice::Op;
constexpr std::size_t kPage = 64 * KiB;

struct Engine {
  std::unique_ptr<device::FaultyDevice> dev =
      std::make_unique<device::FaultyDevice>(device::make_device_backend(test::small_config(2, 2, kPage)));
  vmm::EventPool events{*dev};
  vmm::TransferEngine xfer{*dev, events, kPage};
  device::DevPtr va = 0;
  device::ChunkHandle chunk{};
  std::vector<unsigned char> host = std::vector<unsigned char>(kPage, 0);
  Engine() {
    EXPECT_TRUE(dev->reserve(kPage, &va).ok());
    EXPECT_TRUE(dev->create_chunk(kPage, &chunk).ok());
    EXPECT_TRUE(dev->map(va, kPage, chunk).ok());
    EXPECT_TRUE(dev->set_access(va, kPage).ok());
    std::memset(reinterpret_cast<void*>(va), 0x5a, kPage);  // the simulated device's memory is the host's
  }
  ~Engine() {
    (void)xfer.drain();
    (void)dev->unmap(va, kPage);
    (void)dev->release_chunk(chunk);
    (void)dev->release_reservation(va, kPage);
  }
  std::uint64_t records() const { return dev->calls(Op::record_event); }
  std::uint64_t waits() const { return dev->calls(Op::stream_wait_event); }
};

TEST(TransferEngine, AWriteBackEventWithNothingQueuedSinceIsThePreviousOne) {
  Engine t;
  t.xfer.copy_out(t.host.data(), t.va, kPage);
  const auto records = t.records();
  const vmm::EventRef first = t.xfer.record_out();
  const vmm::EventRef again = t.xfer.record_out();
  EXPECT_EQ(first.get(), again.get());
  EXPECT_EQ(t.records() - records, 1u);
  // Waiting for its own event queues nothing either.
  t.xfer.order_copy_out_after(first.get());
  EXPECT_EQ(t.xfer.record_out().get(), first.get());
  EXPECT_EQ(t.records() - records, 1u);
  // A copy queued since: a new event, which completes only after that copy.
  t.xfer.copy_out(t.host.data(), t.va, kPage);
  const vmm::EventRef after_copy = t.xfer.record_out();
  EXPECT_NE(after_copy.get(), first.get());
  // A wait queued since (for another stream's event): a new event too.
  const vmm::EventRef in = t.xfer.record_in();
  t.xfer.order_copy_out_after(in.get());
  const vmm::EventRef after_wait = t.xfer.record_out();
  EXPECT_NE(after_wait.get(), after_copy.get());
  EXPECT_EQ(t.records() - records, 4u);  // first, after_copy, in, after_wait
  ASSERT_TRUE(t.xfer.drain());
  EXPECT_TRUE(t.events.is_done(after_wait.get()));
  EXPECT_EQ(t.host[kPage - 1], 0x5a);
}

TEST(TransferEngine, ACopyStreamDoesNotWaitForItsOwnEvents) {
  Engine t;
  const vmm::EventRef in = t.xfer.record_in();
  const vmm::EventRef out = t.xfer.record_out();
  const auto waits = t.waits();
  t.xfer.order_copy_in_after(in.get());
  t.xfer.order_copy_out_after(out.get());
  EXPECT_EQ(t.waits() - waits, 0u) << "a copy stream waited for an event recorded on it";
  t.xfer.order_copy_in_after(out.get());
  t.xfer.order_copy_out_after(in.get());
  EXPECT_EQ(t.waits() - waits, 2u) << "a copy stream did not wait for the other's event";
  // An event recorded on a program's stream is waited for, whatever stream it came from.
  device::StreamHandle s = nullptr;
  ASSERT_TRUE(t.dev->create_stream(&s).ok());
  const vmm::EventRef use = t.xfer.record_on(s);
  EXPECT_EQ(use.get()->seq, 0u);
  t.xfer.order_copy_in_after(use.get());
  t.xfer.stream_wait(s, use.get());
  EXPECT_EQ(t.waits() - waits, 4u);
  // Events on one copy stream are numbered in the order recorded.
  const vmm::EventRef later = t.xfer.record_in();
  EXPECT_GT(later.get()->seq, in.get()->seq);
  EXPECT_EQ(later.get()->stream, in.get()->stream);
  ASSERT_TRUE(t.dev->synchronize_stream(s).ok());
  ASSERT_TRUE(t.xfer.drain());
  EXPECT_TRUE(t.dev->destroy_stream(s).ok());
}

}  // namespace
}  // namespace tvmm
