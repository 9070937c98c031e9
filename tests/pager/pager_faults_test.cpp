// Failure paths: each device primitive the pager uses is made to fail inside a pin, an eviction or an
// unpin. The error must reach the caller, every page must stay readable where it was, and the pager
// must keep working once the device behaves again.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/device/faulty/faulty_device.hpp"
#include "faulty_pager.hpp"
#include "test_support.hpp"
#include "vmm/core/pager_impl.hpp"

using namespace tvmm;
using device::Errc;
using Op = device::FaultyDevice::Op;
using test::make_faulty_pager;

namespace {

// One device frame; `a` on the host and `b` on the device, each holding its own pattern.
class PagerFaults : public ::testing::Test {
 protected:
  void SetUp() override { start(test::small_config(1, 8)); }

  void start(const Config& c) {
    pager_ = std::make_unique<Pager>(make_faulty_pager(c, dev_));
    a_ = pager_->allocate(64 * KiB, {"a"});
    b_ = pager_->allocate(64 * KiB, {"b"});
    {
      auto pin = a_.pin(Access::write);
      test::fill(pin.data(), a_.size(), 1);
    }
    {
      auto pin = b_.pin(Access::write);  // evicts a: a on the host, b on the device
      test::fill(pin.data(), b_.size(), 2);
    }
    ASSERT_EQ(a_.tier(), Tier::host);
    ASSERT_EQ(b_.tier(), Tier::device);
  }

  // After the fault: invariants hold and both tensors read back whole with the device healthy.
  void expect_intact() {
    pager_->check_invariants();
    dev_->clear();
    for (int round = 0; round < 2; ++round) {
      {
        auto pin = a_.pin(Access::read);
        EXPECT_EQ(test::mismatches(pin.data(), a_.size(), 1), 0u);
      }
      {
        auto pin = b_.pin(Access::read);
        EXPECT_EQ(test::mismatches(pin.data(), b_.size(), 2), 0u);
      }
    }
    pager_->check_invariants();
  }

  template <class E>
  void expect_pin_a_fails(const char* error_name) {
    try {
      auto pin = a_.pin(Access::read);
      FAIL() << "expected an exception";
    } catch (const E& e) {
      EXPECT_NE(std::string(e.what()).find(error_name), std::string::npos) << e.what();
    }
    EXPECT_GT(dev_->injected(), 0u);
  }

  device::FaultyDevice* dev_ = nullptr;
  std::unique_ptr<Pager> pager_;
  Tensor a_, b_;
};

}  // namespace

// Two device frames and a third tensor `c`, set up so that pinning `a` must map its address at another
// frame: `a` was evicted from the frame that `c` now holds (its address stays mapped there), and `c` is
// pinned, so `a` takes `b`'s frame, and its old mapping is unmapped first.
class PagerRemapFaults : public PagerFaults {
 protected:
  void SetUp() override {
    pager_ = std::make_unique<Pager>(make_faulty_pager(test::small_config(2, 8), dev_));
    a_ = pager_->allocate(64 * KiB, {"a"});
    b_ = pager_->allocate(64 * KiB, {"b"});
    c_ = pager_->allocate(64 * KiB, {"c"});
    int pattern = 1;
    for (Tensor* t : {&a_, &b_, &c_}) {
      auto pin = t->pin(Access::write);  // c's pin evicts a, the least recently used
      test::fill(pin.data(), t->size(), pattern++);
    }
    ASSERT_EQ(a_.tier(), Tier::host);
    ASSERT_EQ(b_.tier(), Tier::device);
    hold_c_ = c_.pin(Access::read);
  }
  void TearDown() override { hold_c_ = Pin(); }
  Tensor c_;
  Pin hold_c_;
};

TEST_F(PagerRemapFaults, MapFailsDuringPageIn) {
  const auto unmaps = dev_->calls(Op::unmap);
  dev_->fail_once(Op::map, Errc::invalid_value);
  expect_pin_a_fails<device_error>("invalid_value");
  EXPECT_EQ(dev_->calls(Op::unmap) - unmaps, 1u);  // a's old mapping went first
  EXPECT_EQ(a_.tier(), Tier::host);                // not loaded; its host copy is untouched
  expect_intact();
}

TEST_F(PagerRemapFaults, SetAccessFailsDuringPageIn) {
  dev_->fail_once(Op::set_access, Errc::invalid_value);
  expect_pin_a_fails<device_error>("set_access");
  EXPECT_EQ(a_.tier(), Tier::host);
  expect_intact();
}

// The old mapping cannot be unmapped: the map at the new frame then fails (the address is still
// mapped), the pin says so, and the next pin unmaps the old mapping before mapping again.
TEST_F(PagerRemapFaults, UnmappingTheOldMappingFails) {
  dev_->fail_once(Op::unmap, Errc::invalid_value);
  expect_pin_a_fails<device_error>("dev_.map(");
  EXPECT_EQ(dev_->injected(), 1u);
  EXPECT_EQ(a_.tier(), Tier::host);
  const auto unmaps = dev_->calls(Op::unmap);
  expect_intact();
  EXPECT_GT(dev_->calls(Op::unmap), unmaps);
}

// The access grant fails, and so does the rollback's unmap of the new mapping: the address stays mapped
// (perhaps without access), so a's next page-in unmaps it before mapping again instead of keeping it.
TEST_F(PagerRemapFaults, AFailedRollbackIsUnmappedBeforeTheNextMap) {
  dev_->fail_once(Op::set_access, Errc::invalid_value);
  dev_->fail_once(Op::unmap, Errc::invalid_value, 1);  // a's old mapping goes; the rollback's unmap fails
  expect_pin_a_fails<device_error>("set_access");
  EXPECT_EQ(dev_->injected(), 2u);
  EXPECT_EQ(a_.tier(), Tier::host);
  const auto unmaps = dev_->calls(Op::unmap);
  expect_intact();
  EXPECT_GT(dev_->calls(Op::unmap), unmaps);
}

TEST_F(PagerFaults, CopyInFailsDuringPageIn) {
  dev_->fail_once(Op::copy_in, Errc::invalid_value);
  expect_pin_a_fails<device_error>("memcpy_async");
  EXPECT_EQ(a_.tier(), Tier::host);
  expect_intact();
}

TEST_F(PagerFaults, WriteBackFailsDuringEviction) {
  dev_->fail_once(Op::copy_out, Errc::invalid_value);
  expect_pin_a_fails<device_error>("memcpy_async");
  EXPECT_EQ(b_.tier(), Tier::device);  // the victim stays resident with its data
  EXPECT_EQ(a_.tier(), Tier::host);
  expect_intact();
}

// An eviction whose second write-back fails after the first was queued: the first may still be running
// when the pin reports the failure. Its slot must not go back to the tier before it has landed, or the
// next page read into that slot is overwritten with the victim's bytes. Here `q` (2 pages) is on NVMe;
// `v` (2 pages, the device's 2 frames) is evicted for `t` with device-to-host copies held and the second
// one failing; then `v` is freed and `q` read back from NVMe into the slots that frees, and only then
// does the held copy run (a helper thread lets it go once q's page-in is queued, or, should the pager
// wait for it, after a second). Evicted again, q is dropped (its host copies are current) and read back.
TEST(PagerFaultsEviction, AFailedEvictionsQueuedWriteBackLandsBeforeItsSlotIsReused) {
  constexpr std::size_t kPage = 64 * KiB;
  test::TempDir dir;
  Config c = test::small_config(2, 8);
  c.nvme.paths = {dir.path()};
  c.nvme.budget = 32 * kPage;
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(c, dev);
  // Each tensor written takes both frames and evicts the one before. Three go to the host tier, then q,
  // which fills it, and q, the newest there, is the first to spill to NVMe when the next one is evicted.
  std::vector<Tensor> fill;
  Tensor q = p.allocate(2 * kPage, {"q"});
  for (int i = 0; i < 6; ++i) {
    Tensor& next = i == 3 ? q : fill.emplace_back(p.allocate(2 * kPage, {"fill"}));
    test::write(next, i == 3 ? 1 : 2);
  }
  ASSERT_EQ(q.tier(), Tier::nvme);
  ASSERT_EQ(q.tier(kPage), Tier::nvme);
  fill.clear();  // the host tier is empty again, and so are the frames
  Tensor v = p.allocate(2 * kPage, {"v"});
  test::write(v, 3);
  ASSERT_EQ(v.tier(), Tier::device);

  dev->hold(Op::copy_out);
  dev->fail_once(Op::copy_out, Errc::driver_error, 1);
  const auto copies_in = dev->calls(Op::copy_in);
  std::thread release([&] {
    (void)test::eventually([&] { return dev->calls(Op::copy_in) > copies_in; }, std::chrono::milliseconds(1'000));
    dev->release_all();
  });
  Tensor t = p.allocate(2 * kPage, {"t"});
  const std::string error = test::message_of([&] { auto pin = t.pin(Access::write); });
  EXPECT_NE(error.find("memcpy_async"), std::string::npos) << error;
  EXPECT_EQ(dev->injected(), 1u);
  EXPECT_EQ(v.tier(), Tier::device) << "the victims stay resident with their data";
  v.reset();
  {
    auto pin = q.pin(Access::read);  // read from NVMe into host slots, then paged in
    EXPECT_EQ(test::mismatches(pin.data(), q.size(), 1), 0u);
  }
  release.join();
  p.check_invariants();
  const auto clean = p.stats().clean_evictions;
  test::write(t, 4);  // evicts q: dropped, its host copies current
  ASSERT_EQ(q.tier(), Tier::host);
  ASSERT_EQ(p.stats().clean_evictions - clean, 2u) << "the test needs q's host copies kept";
  EXPECT_EQ(test::mismatches(q, 1), 0u) << "a write-back queued before the failure landed in q's slot";
  EXPECT_EQ(test::mismatches(t, 4), 0u);
  p.check_invariants();
}

// The same failed eviction where the copy streams cannot be drained (a device that cannot say when its
// copies end): each victim keeps the host slot its write-back may still be landing in, so no other page
// takes it, and the victim's next eviction writes into it again, after that copy. Nothing is lost.
TEST(PagerFaultsEviction, WhereTheCopiesCannotBeDrainedTheVictimsKeepTheirSlots) {
  constexpr std::size_t kPage = 64 * KiB;
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(2, 8), dev);
  Tensor v = p.allocate(2 * kPage, {"v"});
  test::write(v, 3);
  dev->fail_once(Op::copy_out, Errc::driver_error, 1);
  dev->fail_once(Op::synchronize_stream, Errc::driver_error);
  Tensor t = p.allocate(2 * kPage, {"t"});
  const std::string error = test::message_of([&] { auto pin = t.pin(Access::write); });
  EXPECT_NE(error.find("memcpy_async"), std::string::npos) << error;
  EXPECT_EQ(dev->injected(), 2u) << "the drain was not tried";
  EXPECT_EQ(v.tier(), Tier::device);
  EXPECT_EQ(p.stats().host_used_bytes, 2 * kPage) << "a victim let its slot go";
  p.check_invariants();
  dev->clear();
  test::write(t, 4);  // evicts v, into the slots it kept
  EXPECT_EQ(v.tier(), Tier::host);
  EXPECT_EQ(p.stats().host_used_bytes, 2 * kPage);
  EXPECT_EQ(test::mismatches(v, 3), 0u);
  EXPECT_EQ(test::mismatches(t, 4), 0u);
  p.check_invariants();
}

class PagerFaultsSlowBus : public PagerFaults {
 protected:
  // Copies take 20 ms, so a pin always finds its page-in still running and has to wait for it.
  void SetUp() override {
    Config c = test::small_config(1, 8);
    c.sim.copy_latency = std::chrono::milliseconds(20);
    start(c);
  }
};

TEST_F(PagerFaultsSlowBus, WaitingForPageInFails) {
  // The host pin's wait covers the page-in, which is ordered after the victim's write-back.
  dev_->fail_once(Op::synchronize_event, Errc::invalid_value);
  expect_pin_a_fails<device_error>("synchronize_event");
  EXPECT_NE(b_.tier(), Tier::device);  // the eviction itself goes on (it may still be in transit)
  expect_intact();
}

TEST_F(PagerFaultsSlowBus, StreamWaitFailsAfterPageIn) {
  auto s = pager_->create_stream();
  dev_->fail_once(Op::stream_wait_event, Errc::invalid_value);
  try {
    auto pin = a_.pin(s, Access::read);
    FAIL() << "expected device_error";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("stream_wait_event"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dev_->injected(), 1u);
  s.synchronize();
  expect_intact();  // includes: no pin was left behind (check_invariants counts pins)
}

// Four adjacent pages `b` (pattern 5), evicted together by a pin of four pages of `c` (the four pages
// after b's): their addresses stay mapped, also once `b` is freed, until the pager goes, which unmaps
// them.
class PagerUnmapRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    pager_ = std::make_unique<Pager>(make_faulty_pager(test::small_config(4, 16), dev_));
    calls_ = dev_->counts();
    b_ = pager_->allocate(4 * 64 * KiB, {"b"});
    c_ = pager_->allocate(4 * 64 * KiB, {"c"});
    auto pin = b_.pin(Access::write);
    test::fill(pin.data(), b_.size(), 5);
  }
  // Evicts all of b for c: no unmap (b's addresses keep their mappings).
  void evict_b() {
    const auto before = dev_->calls(Op::unmap);
    { auto pin = c_.pin(Access::write); }
    ASSERT_EQ(b_.tier(), Tier::host);  // tier() retires finished transfers
    ASSERT_EQ(dev_->calls(Op::unmap), before);
  }
  // Frees b and returns the unmap calls that took.
  std::uint64_t free_b() {
    const auto before = dev_->calls(Op::unmap);
    b_addr_ = b_.data();
    b_.reset();
    return dev_->calls(Op::unmap) - before;
  }
  // Frees c and destroys the pager; returns the unmap calls its destructor made for tensor addresses
  // (each of the 4 frames is also unmapped once from its own address: DeviceTier::frame_addr).
  std::uint64_t destroy_pager() {
    c_.reset();
    pager_->check_invariants();
    const auto before = unmaps();
    pager_.reset();
    return unmaps() - before - kFrames;
  }
  static constexpr std::uint64_t kFrames = 4;  // small_config(4, 16)
  [[nodiscard]] std::uint64_t unmaps() const { return (*calls_)[static_cast<std::size_t>(Op::unmap)]; }
  [[nodiscard]] std::uint64_t maps() const { return (*calls_)[static_cast<std::size_t>(Op::map)]; }
  device::FaultyDevice* dev_ = nullptr;
  std::unique_ptr<Pager> pager_;
  std::shared_ptr<const device::FaultyDevice::Counts> calls_;
  Tensor b_, c_;
  void* b_addr_ = nullptr;
};

// Freeing a tensor makes no driver call: its addresses keep their mappings. A new tensor given the
// same addresses (first fit) goes into the frames they are mapped to without a map, an access grant or
// an unmap, here by evicting c, which holds them, and holds what it is given.
TEST_F(PagerUnmapRuns, FreedAddressesKeepTheirMappingsForTheNextTensor) {
  evict_b();
  EXPECT_EQ(free_b(), 0u);
  Tensor d = pager_->allocate(4 * 64 * KiB, {"d"});
  ASSERT_EQ(d.data(), b_addr_) << "the test needs d at b's freed addresses";
  const auto maps_before = maps(), unmaps_before = unmaps();
  const auto kept = pager_->stats().kept_mappings;
  {
    auto pin = d.pin(Access::write);
    test::fill(pin.data(), d.size(), 7);
  }
  EXPECT_EQ(maps(), maps_before);
  EXPECT_EQ(unmaps(), unmaps_before);
  EXPECT_EQ(pager_->stats().kept_mappings - kept, 4u);
  EXPECT_EQ(c_.tier(), Tier::host);
  { auto pin = c_.pin(Access::write); }  // d is evicted, then read back
  auto pin = d.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), d.size(), 7), 0u);
  pager_->check_invariants();
}

// The pager's destructor unmaps adjacent mapped addresses with one cuMemUnmap call: b's kept mappings
// (b freed) and c's, eight adjacent pages.
TEST_F(PagerUnmapRuns, ThePagerUnmapsAdjacentPagesInOneCall) {
  evict_b();
  EXPECT_EQ(free_b(), 0u);
  EXPECT_EQ(destroy_pager(), 1u);
}

// A run whose unmap fails is unmapped page by page, so only pages that fail again stay mapped.
TEST_F(PagerUnmapRuns, AFailedRunIsUnmappedPageByPage) {
  evict_b();
  EXPECT_EQ(free_b(), 0u);
  dev_->fail_once(Op::unmap, Errc::invalid_value);
  EXPECT_EQ(destroy_pager(), 1u + 8u);
}

TEST_F(PagerFaults, FramesAreRecycledNotCreatedOnTheHotPath) {
  dev_->fail_always(Op::create_chunk, Errc::out_of_memory);
  auto fresh = pager_->allocate(64 * KiB);
  { auto pin = fresh.pin(Access::write); }       // evicts b and reuses its frame
  EXPECT_EQ(dev_->calls(Op::create_chunk), 1u);  // the one frame, created before the fault was armed
  fresh.reset();
  expect_intact();
}

TEST(PagerFaultsStart, FrameCreationFailureIsOutOfMemory) {
  device::FaultyDevice* dev = nullptr;
  Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
  auto t = pager.allocate(64 * KiB);
  dev->fail_once(Op::create_chunk, Errc::out_of_memory);
  EXPECT_THROW((void)t.pin(Access::write), out_of_memory);
  pager.check_invariants();
  auto pin = t.pin(Access::write);  // the device recovered
  test::fill(pin.data(), t.size(), 3);
  EXPECT_EQ(test::mismatches(pin.data(), t.size(), 3), 0u);
}

// Each frame is mapped at its own address when it is created (DeviceTier::frame_addr: the pager's copies
// go there). When that map or its access grant fails, the frame's memory goes back at once and the pin
// fails naming the call: the device's whole capacity (two frames here) is there for the next pin.
TEST(PagerFaultsStart, AFrameWhoseOwnAddressCannotBeMappedGivesItsMemoryBack) {
  for (const Op op : {Op::map, Op::set_access}) {
    device::FaultyDevice* dev = nullptr;
    Pager pager = make_faulty_pager(test::small_config(2, 8), dev);
    auto t = pager.allocate(2 * 64 * KiB);
    dev->fail_once(op, Errc::invalid_value);
    try {
      (void)t.pin(Access::write);
      ADD_FAILURE() << "expected device_error";
    } catch (const device_error& e) {
      EXPECT_NE(std::string(e.what()).find(op == Op::map ? "map" : "set_access"), std::string::npos) << e.what();
    }
    pager.check_invariants();
    auto pin = t.pin(Access::write);  // both frames: the memory of the one that failed came back
    test::fill(pin.data(), t.size(), 4);
    EXPECT_EQ(test::mismatches(pin.data(), t.size(), 4), 0u);
    EXPECT_EQ(dev->calls(Op::create_chunk), 3u);
  }
}

// A release point's event is recorded when an eviction must follow it, or at release for every
// ReleasePoints::kRecordEvery-th point of a stream and while the pager evicts
// (vmm/core/release_points.hpp). Where that record fails, the stream is synchronized instead: the
// write-back still follows the kernel.
TEST_F(PagerFaults, ReleaseEventFailureSynchronizesTheStream) {
  for (const bool at_release : {false, true}) {
    SCOPED_TRACE(at_release ? "the record at release fails" : "the record at eviction fails");
    auto s = pager_->create_stream();
    const auto injected = dev_->injected();
    {
      auto pin = a_.pin(Access::write);
      test::fill(pin.data(), a_.size(), 9);  // stale bytes: an early write-back would keep these
    }
    // A first point: recorded at once, since the pin above evicted b (ReleasePoints::take). Then, with
    // no eviction, the kRecordEvery-th point after it records at release, the ones before it do not.
    (void)a_.pin(s, Access::read);
    if (at_release) {
      for (std::uint64_t i = 1; i < vmm::ReleasePoints::kRecordEvery; ++i) (void)a_.pin(s, Access::read);
    }
    {
      auto pin = a_.pin(s, Access::write);
      s.launch([d = pin.data(), n = a_.size()] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        test::fill(d, n, 1);  // the bytes expect_intact() checks, written late
      });
      dev_->fail_once(Op::record_event, Errc::invalid_value);
    }
    EXPECT_EQ(dev_->injected() - injected, at_release ? 1u : 0u);
    // Evicting a now must not copy out before the kernel has written.
    {
      auto pin = b_.pin(Access::read);
      EXPECT_EQ(test::mismatches(pin.data(), b_.size(), 2), 0u);
    }
    EXPECT_EQ(dev_->injected() - injected, 1u);
    expect_intact();
  }
}

// An address whose unmap failed at free is unmapped again before a later tensor maps it at another
// frame: `d` gets `b`'s freed address, still mapped to the frame that pinned `e` now holds.
TEST(PagerUnmapRetry, AnAddressWhoseUnmapFailedIsUnmappedBeforeItIsMappedAgain) {
  device::FaultyDevice* dev = nullptr;
  Pager p = make_faulty_pager(test::small_config(2, 16), dev);
  Tensor b = p.allocate(64 * KiB, {"b"});
  Tensor c = p.allocate(64 * KiB, {"c"});
  for (Tensor* t : {&b, &c}) {
    auto pin = t->pin(Access::write);
    test::fill(pin.data(), t->size(), 3);
  }
  void* const b_addr = b.data();
  dev->fail_always(Op::unmap, Errc::invalid_value);
  b.reset();  // b's address stays mapped to its frame, which is idle now
  dev->clear();
  Tensor d = p.allocate(64 * KiB, {"d"});
  ASSERT_EQ(d.data(), b_addr) << "the test needs d at b's freed address";
  Tensor e = p.allocate(64 * KiB, {"e"});
  Pin hold_e = e.pin(Access::write);  // takes b's old frame, the only idle one
  const auto unmaps = dev->calls(Op::unmap), maps = dev->calls(Op::map);
  {
    auto pin = d.pin(Access::write);  // evicts c and maps d at c's frame, after unmapping the old mapping
    test::fill(pin.data(), d.size(), 9);
  }
  EXPECT_EQ(dev->calls(Op::unmap) - unmaps, 1u);
  EXPECT_EQ(dev->calls(Op::map) - maps, 1u);
  hold_e = Pin();
  auto pin = d.pin(Access::read);
  EXPECT_EQ(test::mismatches(pin.data(), d.size(), 9), 0u);
  p.check_invariants();
}
