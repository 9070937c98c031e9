// The storage-backend conformance suite: one suite run against every registered backend, plain and
// faulty-wrapped (with no rule set, a faulty backend must behave exactly like the one it wraps). Each test
// checks a clause of backends/storage/storage_backend.hpp.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "backends/storage/faulty/faulty_storage.hpp"
#include "backends/storage/posix/posix_storage.hpp"
#include "backends/storage/registry.hpp"
#include "backends/storage/uring/uring_storage.hpp"
#include "test_support.hpp"

using namespace tvmm;
using namespace tvmm::storage;
using tvmm::test::AlignedBuffer;
using tvmm::test::TempDir;

namespace {

constexpr std::size_t kSlot = 64 * KiB;

// Every registered backend (backends/storage/registry.cpp), plain and wrapped in the faulty adaptor:
// a new backend joins the suite by its registry line.
struct Backend {
  std::string name;
  bool faulty = false;
};
void PrintTo(const Backend& b, std::ostream* os) { *os << (b.faulty ? "faulty " : "") << b.name; }

std::vector<Backend> registered() {
  std::vector<Backend> all;
  for (const auto& b : storage_backends()) {
    all.push_back({std::string(b.name), false});
    all.push_back({std::string(b.name), true});
  }
  return all;
}

class StorageConformance : public ::testing::TestWithParam<Backend> {
 protected:
  StorageOptions options(std::uint32_t slots, unsigned depth = 4) {
    StorageOptions o;
    o.paths = {dir_a_.path(), dir_b_.path()};
    o.slot_size = kSlot;
    o.slots = slots;
    o.queue_depth = depth;
    return o;
  }
  std::unique_ptr<StorageBackend> make(const StorageOptions& o) {
    int err = 0;
    auto b = find_storage_backend(GetParam().name)->make(o, &err);
    if (!b) throw std::runtime_error(GetParam().name + " cannot start here: " + errno_text(-err));
    if (GetParam().faulty) return std::make_unique<FaultyStorage>(std::move(b));
    return b;
  }
  TempDir dir_a_, dir_b_;
};

INSTANTIATE_TEST_SUITE_P(Registered, StorageConformance, ::testing::ValuesIn(registered()), [](const auto& param_info) {
  return (param_info.param.faulty ? "faulty_" : "") + param_info.param.name;
});

// More requests than the queue depth, striped over two directories: every slot reads back what was
// written to it, and every completion carries its request's tag once.
TEST_P(StorageConformance, EverySlotReadsBackWhatWasWritten) {
  const std::uint32_t slots = 37;
  auto b = this->make(this->options(slots, 4));
  EXPECT_EQ(b->slots(), slots);
  EXPECT_EQ(b->slot_size(), kSlot);
  AlignedBuffer out(slots * kSlot), in(slots * kSlot);
  std::vector<IoRequest> writes, reads;
  for (std::uint32_t s = 0; s < slots; ++s) {
    test::fill(out.at(s, kSlot), kSlot, 1000 + s);
    writes.push_back({IoOp::write, s, out.at(s, kSlot), 5000 + 3ULL * s});
    reads.push_back({IoOp::read, slots - 1 - s, in.at(slots - 1 - s, kSlot), 9000 + 7ULL * s});
  }
  ASSERT_EQ(b->submit(writes), 0);
  std::vector<IoCompletion> done(slots);
  std::multiset<std::uint64_t> tags;
  while (tags.size() < slots) {
    const auto n = b->reap(done, 1);
    ASSERT_GT(n, 0u);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(done[i].result, static_cast<std::int64_t>(kSlot));
      tags.insert(done[i].tag);
    }
  }
  for (const auto& w : writes) EXPECT_EQ(tags.count(w.tag), 1u);
  EXPECT_EQ(b->outstanding(), 0u);
  std::vector<std::int64_t> results(slots);
  ASSERT_EQ(run_batch(*b, reads, results), 0);
  for (auto r : results) EXPECT_EQ(r, static_cast<std::int64_t>(kSlot));
  for (std::uint32_t s = 0; s < slots; ++s) EXPECT_EQ(test::mismatches(in.at(s, kSlot), kSlot, 1000 + s), 0u) << s;
}

TEST_P(StorageConformance, ReapWaitsForAtLeastMin) {
  auto b = this->make(this->options(8, 8));
  AlignedBuffer buf(8 * kSlot);
  std::vector<IoRequest> reqs;
  for (std::uint32_t s = 0; s < 8; ++s) reqs.push_back({IoOp::write, s, buf.at(s, kSlot), s});
  ASSERT_EQ(b->submit(reqs), 0);
  std::vector<IoCompletion> done(8);
  std::size_t got = b->reap(done, 5);
  EXPECT_GE(got, 5u);
  while (got < 8) got += b->reap(std::span(done).subspan(got), 1);
  EXPECT_EQ(b->outstanding(), 0u);
  EXPECT_EQ(b->reap(done, 1), 0u) << "nothing outstanding: reap returns at once";
}

TEST_P(StorageConformance, BadRequestsAreRefusedWholeAndChangeNothing) {
  auto b = this->make(this->options(4));
  AlignedBuffer buf(2 * kSlot);
  const IoRequest good{IoOp::write, 0, buf.data, 1};
  const IoRequest out_of_range{IoOp::write, 4, buf.data, 2};
  const IoRequest misaligned{IoOp::read, 1, buf.data + 512, 3};
  EXPECT_EQ(b->submit(std::vector{good, out_of_range}), -EINVAL);
  EXPECT_EQ(b->submit(std::vector{misaligned}), -EINVAL);
  EXPECT_EQ(b->submit(std::vector{IoRequest{IoOp::read, 0, nullptr, 4}}), -EINVAL);
  EXPECT_EQ(b->outstanding(), 0u);
}

// IoRequest::bytes: a request moves only its length from the slot's start (a page holding less than a
// slot of data), and completes with that length; a read leaves the rest of its buffer alone. A length
// that is not a multiple of kIoAlignment, or passes the slot, is refused with the batch.
TEST_P(StorageConformance, APartialRequestMovesOnlyItsLength) {
  auto b = this->make(this->options(4));
  constexpr std::uint32_t part = 3 * kIoAlignment;
  AlignedBuffer out(kSlot), in(kSlot);
  test::fill(out.data, kSlot, 41);
  std::vector<std::int64_t> results(1);
  ASSERT_EQ(run_batch(*b, std::vector{IoRequest{IoOp::write, 2, out.data, 0}}, results), 0);  // the whole slot
  EXPECT_EQ(results[0], static_cast<std::int64_t>(kSlot));
  test::fill(out.data, part, 42);  // new data in the first part only
  ASSERT_EQ(run_batch(*b, std::vector{IoRequest{IoOp::write, 2, out.data, 0, part}}, results), 0);
  EXPECT_EQ(results[0], static_cast<std::int64_t>(part));
  std::memset(in.data, 0x5a, kSlot);
  ASSERT_EQ(run_batch(*b, std::vector{IoRequest{IoOp::read, 2, in.data, 0, part}}, results), 0);
  EXPECT_EQ(results[0], static_cast<std::int64_t>(part));
  EXPECT_EQ(test::mismatches(in.data, part, 42), 0u);
  for (std::size_t i = part; i < kSlot; ++i) ASSERT_EQ(in.data[i], std::byte{0x5a}) << "read past its length at " << i;
  // The slot's tail still holds the whole-slot write's data.
  ASSERT_EQ(run_batch(*b, std::vector{IoRequest{IoOp::read, 2, in.data, 0}}, results), 0);
  AlignedBuffer first(kSlot);
  test::fill(first.data, kSlot, 41);
  EXPECT_EQ(std::memcmp(in.data + part, first.data + part, kSlot - part), 0);
  EXPECT_EQ(b->submit(std::vector{IoRequest{IoOp::read, 0, in.data, 1, part + 512}}), -EINVAL);
  EXPECT_EQ(b->submit(std::vector{IoRequest{IoOp::read, 0, in.data, 2, static_cast<std::uint32_t>(kSlot) * 2}}),
            -EINVAL);
  EXPECT_EQ(b->outstanding(), 0u);
}

// The descriptor of this process's open, unlinked slot file in `dir` (/proc/self/fd names it
// "DIR/#inode (deleted)" or, for the fallback, "DIR/name (deleted)"), or -1.
int open_slot_file_in(const std::string& dir) {
  const std::string prefix = std::filesystem::canonical(dir).string() + "/";  // as /proc names it
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.starts_with(prefix) && target.ends_with(" (deleted)")) {
      return std::stoi(entry.path().filename().string());
    }
  }
  return -1;
}

// A read the file cannot satisfy in full (its file was cut short under the backend, as a failing or
// full device might) transfers less than a slot every time: the backend re-issues it a bounded number
// of times (storage_backend.hpp) and then reports it as a failure, with its own tag, while the other
// requests of the batch complete normally; nothing stays queued, and later batches, more requests than
// the queue depth, complete on every queue entry. io_uring's re-issue path (its own entry prepared
// again after the completion was consumed) runs for real here.
TEST_P(StorageConformance, AReadThatStaysShortFailsAloneAndTheQueueRecovers) {
  const std::uint32_t slots = 8;  // slot s in directory s % 2, at (s / 2) x kSlot: 4 slots per file
  auto b = this->make(this->options(slots, 4));
  AlignedBuffer out(slots * kSlot), in(slots * kSlot);
  std::vector<IoRequest> writes, reads;
  for (std::uint32_t s = 0; s < slots; ++s) {
    test::fill(out.at(s, kSlot), kSlot, 300 + s);
    writes.push_back({IoOp::write, s, out.at(s, kSlot), 0});
    reads.push_back({IoOp::read, s, in.at(s, kSlot), 0});
  }
  std::vector<std::int64_t> results(slots);
  ASSERT_EQ(run_batch(*b, writes, results), 0);
  for (auto r : results) ASSERT_EQ(r, static_cast<std::int64_t>(kSlot));
  const int fd = open_slot_file_in(this->dir_a_.path());
  ASSERT_GE(fd, 0) << "no slot file of the backend open in " << this->dir_a_.path();
  // Slot 6 is the last of directory a's file: keep half of it.
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(3 * kSlot + kSlot / 2)), 0) << std::strerror(errno);

  // Reaped here rather than with run_batch (which reports a lost completion as -EIO too): each
  // request's completion comes back once, with its own tag.
  for (std::uint32_t s = 0; s < slots; ++s) reads[s].tag = 700 + s;
  ASSERT_EQ(b->submit(reads), 0);
  std::map<std::uint64_t, int> seen;
  std::vector<IoCompletion> done(slots);
  for (std::size_t got = 0; got < slots;) {
    const auto n = b->reap(done, 1);
    ASSERT_GT(n, 0u) << "reap returned nothing with " << slots - got << " requests unanswered";
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GE(done[i].tag, 700u);
      ASSERT_LT(done[i].tag, 700u + slots);
      results[done[i].tag - 700] = done[i].result;
      ++seen[done[i].tag];
    }
    got += n;
  }
  for (std::uint32_t s = 0; s < slots; ++s) EXPECT_EQ(seen[700 + s], 1) << "slot " << s;
  for (std::uint32_t s = 0; s < slots; ++s) {
    if (s == 6) {
      EXPECT_EQ(results[s], -EIO) << "a read that stays short is a failure";
    } else {
      EXPECT_EQ(results[s], static_cast<std::int64_t>(kSlot)) << "slot " << s;
      EXPECT_EQ(test::mismatches(in.at(s, kSlot), kSlot, 300 + s), 0u) << "slot " << s;
    }
  }
  EXPECT_EQ(b->outstanding(), 0u);

  // The file whole again: every slot reads in full, twice over (more requests than queue entries).
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(4 * kSlot)), 0) << std::strerror(errno);
  std::vector<IoRequest> twice = reads;
  twice.insert(twice.end(), reads.begin(), reads.end());
  std::vector<std::int64_t> again(twice.size());
  ASSERT_EQ(run_batch(*b, twice, again), 0);
  for (std::size_t i = 0; i < twice.size(); ++i) EXPECT_EQ(again[i], static_cast<std::int64_t>(kSlot)) << i;
  EXPECT_EQ(test::mismatches(in.at(7, kSlot), kSlot, 300 + 7), 0u);
  EXPECT_EQ(b->outstanding(), 0u);
}

TEST_P(StorageConformance, NoFileOfOursIsVisibleWhileRunning) {
  auto b = this->make(this->options(6));
  AlignedBuffer buf(kSlot);
  std::vector<std::int64_t> r(1);
  ASSERT_EQ(run_batch(*b, std::vector{IoRequest{IoOp::write, 5, buf.data, 0}}, r), 0);
  EXPECT_TRUE(this->dir_a_.entries().empty());
  EXPECT_TRUE(this->dir_b_.entries().empty());
  // The fallback for filesystems without O_TMPFILE: a private name, unlinked before use.
  auto o = this->options(6);
  o.use_tmpfile = false;
  auto fallback = this->make(o);
  ASSERT_EQ(run_batch(*fallback, std::vector{IoRequest{IoOp::write, 5, buf.data, 0}}, r), 0);
  EXPECT_EQ(r[0], static_cast<std::int64_t>(kSlot));
  EXPECT_TRUE(this->dir_a_.entries().empty());
  EXPECT_TRUE(this->dir_b_.entries().empty());
}

TEST_P(StorageConformance, StartUpErrorsSayWhatAndHowToFix) {
  auto o = this->options(4);
  o.paths = {this->dir_a_.path() + "/missing"};
  try {
    (void)this->make(o);
    FAIL() << "a missing directory must be refused";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nvme.paths"), std::string::npos) << e.what();
  }
  // More than the disk holds: refused at start-up with out_of_memory, before any space is taken.
  o.paths = {this->dir_a_.path()};
  o.slots = UINT32_MAX;
  o.slot_size = 1 * MiB;  // 4 PiB
  try {
    (void)this->make(o);
    FAIL() << "a budget beyond the free space must be refused";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("nvme.budget"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(this->dir_a_.entries().empty());
  o.slots = 4;
  o.slot_size = 1000;  // not a multiple of 4096
  EXPECT_THROW((void)this->make(o), config_error);
}

// --- backend-specific ------------------------------------------------------------------------------------

TEST(UringStorage, RegistersBuffersWithinTheMemlockLimitAndFallsBackBeyondIt) {
  TempDir dir;
  StorageOptions o{{dir.path()}, kSlot, 8, 4, true, true};
  int err = 0;
  auto b = UringStorage::create(o, &err);
  ASSERT_TRUE(b) << errno_text(-err);
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  if (lim.rlim_cur != RLIM_INFINITY) {
    AlignedBuffer huge(static_cast<std::size_t>(lim.rlim_cur) + kSlot);
    EXPECT_FALSE(b->register_buffers(huge.data, huge.bytes)) << "beyond RLIMIT_MEMLOCK: plain I/O";
    EXPECT_FALSE(b->buffers_registered());
  }
  AlignedBuffer frames(4 * kSlot);
  const bool fixed = b->register_buffers(frames.data, frames.bytes);
  EXPECT_EQ(fixed, b->buffers_registered());
  // Fixed or not, transfers from inside and outside the block both work.
  AlignedBuffer outside(kSlot);
  test::fill(frames.at(2, kSlot), kSlot, 77);
  test::fill(outside.data, kSlot, 78);
  std::vector<std::int64_t> r(2);
  ASSERT_EQ(run_batch(*b,
                      std::vector{IoRequest{IoOp::write, 1, frames.at(2, kSlot), 0},
                                  IoRequest{IoOp::write, 2, outside.data, 0}},
                      r),
            0);
  EXPECT_EQ(r[0], static_cast<std::int64_t>(kSlot));
  std::memset(frames.data, 0, frames.bytes);
  std::memset(outside.data, 0, kSlot);
  ASSERT_EQ(
      run_batch(
          *b, std::vector{IoRequest{IoOp::read, 2, frames.at(0, kSlot), 0}, IoRequest{IoOp::read, 1, outside.data, 0}},
          r),
      0);
  EXPECT_EQ(test::mismatches(frames.at(0, kSlot), kSlot, 78), 0u);
  EXPECT_EQ(test::mismatches(outside.data, kSlot, 77), 0u);
}

TEST(StorageFactory, NamesAndErrors) {
  TempDir dir;
  StorageOptions o{{dir.path()}, kSlot, 4, 4, true, true};
  EXPECT_STREQ(make_storage_backend("posix", o)->name(), "posix");
  EXPECT_STREQ(make_storage_backend("uring", o)->name(), "uring");  // io_uring works on the CI machines
  EXPECT_STREQ(make_storage_backend("auto", o)->name(), "uring");
  try {
    (void)make_storage_backend("spdk", o);
    FAIL();
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"posix\""), std::string::npos) << e.what();
  }
}

// --- faulty: each kind of fault, by each kind of rule ----------------------------------------------------

class FaultyStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StorageOptions o{{dir_.path()}, kSlot, 16, 4, true, true};
    auto f = std::make_unique<FaultyStorage>(std::make_unique<PosixStorage>(o));
    faulty_ = f.get();
    backend_ = std::move(f);
    for (std::uint32_t s = 0; s < 16; ++s) test::fill(buf_.at(s, kSlot), kSlot, 300 + s);
  }
  // Runs one op per slot in `slots`; returns the results.
  std::vector<std::int64_t> run(IoOp op, const std::vector<std::uint32_t>& slots) {
    std::vector<IoRequest> reqs;
    for (auto s : slots) reqs.push_back({op, s, buf_.at(s, kSlot), 0});
    std::vector<std::int64_t> r(reqs.size());
    EXPECT_EQ(run_batch(*backend_, reqs, r), 0);
    return r;
  }
  std::vector<std::uint32_t> all() const {
    std::vector<std::uint32_t> v(16);
    for (std::uint32_t i = 0; i < 16; ++i) v[i] = i;
    return v;
  }
  TempDir dir_;
  AlignedBuffer buf_{16 * kSlot};
  FaultyStorage* faulty_ = nullptr;
  std::unique_ptr<StorageBackend> backend_;
};

constexpr auto kOk = static_cast<std::int64_t>(kSlot);

TEST_F(FaultyStorageTest, EveryNthWriteFailsWithEio) {
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::eio).on(IoOp::write).every(4)});
  const auto r = run(IoOp::write, all());
  for (std::size_t i = 0; i < r.size(); ++i) EXPECT_EQ(r[i], (i + 1) % 4 == 0 ? -EIO : kOk) << i;
  EXPECT_EQ(faulty_->fired(), 4u);
  for (auto x : run(IoOp::read, all())) EXPECT_EQ(x, kOk) << "the rule names writes only";
}

TEST_F(FaultyStorageTest, SlotRuleAndMaxFires) {
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::enospc).at_slot(5).at_most(2)});
  for (int round = 0; round < 3; ++round) {
    const auto r = run(IoOp::write, all());
    for (std::size_t i = 0; i < r.size(); ++i) EXPECT_EQ(r[i], i == 5 && round < 2 ? -ENOSPC : kOk);
  }
}

TEST_F(FaultyStorageTest, ProbabilityIsReproducibleWithItsSeed) {
  auto pattern = [&](std::uint64_t seed) {
    faulty_->set_rules({FaultRule::of(FaultRule::Kind::eio).with_probability(0.5, seed)});
    std::vector<bool> failed;
    for (auto x : run(IoOp::write, all())) failed.push_back(x == -EIO);
    return failed;
  };
  const auto a = pattern(42), b = pattern(42), c = pattern(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto n = std::count(a.begin(), a.end(), true);
  EXPECT_GT(n, 0);
  EXPECT_LT(n, 16);
}

TEST_F(FaultyStorageTest, ShortReadReportsHalfAndBitFlipsCorruptBothWays) {
  run(IoOp::write, all());
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::short_io).on(IoOp::read).at_slot(3)});
  auto r = run(IoOp::read, {3, 4});
  EXPECT_EQ(r[0], kOk / 2);
  EXPECT_EQ(r[1], kOk);
  // A flipped bit on the way in: one byte differs; the slot itself is intact.
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::bit_flip).on(IoOp::read).at_slot(4)});
  r = run(IoOp::read, {4});
  EXPECT_EQ(r[0], kOk);
  EXPECT_EQ(test::mismatches(buf_.at(4, kSlot), kSlot, 304), 1u);
  faulty_->clear();
  run(IoOp::read, {4});
  EXPECT_EQ(test::mismatches(buf_.at(4, kSlot), kSlot, 304), 0u);
  // On the way out: the caller's buffer is untouched, the slot holds a corrupted copy.
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::bit_flip).on(IoOp::write).at_slot(6)});
  run(IoOp::write, {6});
  EXPECT_EQ(test::mismatches(buf_.at(6, kSlot), kSlot, 306), 0u);
  faulty_->clear();
  run(IoOp::read, {6});
  EXPECT_EQ(test::mismatches(buf_.at(6, kSlot), kSlot, 306), 1u);
}

TEST_F(FaultyStorageTest, HeldCompletionsAreHandedOutOnlyAsReleased) {
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::hold).on(IoOp::read)});
  std::vector<IoRequest> reqs;
  for (std::uint32_t s = 0; s < 3; ++s) reqs.push_back({IoOp::read, s, buf_.at(s, kSlot), s});
  ASSERT_EQ(backend_->submit(reqs), 0);
  EXPECT_EQ(faulty_->held(), 3u);
  std::vector<IoCompletion> got(4);
  EXPECT_EQ(backend_->reap(got, 0), 0u) << "nothing released yet";
  EXPECT_EQ(backend_->outstanding(), 3u);
  faulty_->release_held(1);
  ASSERT_EQ(backend_->reap(got, 1), 1u);
  EXPECT_EQ(got[0].result, kOk);
  EXPECT_EQ(faulty_->held(), 2u);
  // A blocked reap returns once another thread releases the rest.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    faulty_->release_held(UINT64_MAX);
  });
  std::size_t n = 0;
  while (n < 2) n += backend_->reap(std::span(got).subspan(n), 2 - n);
  releaser.join();
  EXPECT_EQ(faulty_->held(), 0u);
  EXPECT_EQ(backend_->outstanding(), 0u);
  for (auto x : run(IoOp::write, {5})) EXPECT_EQ(x, kOk) << "the rule names reads only";
}

TEST_F(FaultyStorageTest, LatencyDelaysRequests) {
  faulty_->set_rules({FaultRule::of(FaultRule::Kind::latency).delay(std::chrono::microseconds(20'000))});
  const auto t0 = std::chrono::steady_clock::now();
  for (auto x : run(IoOp::write, {0, 1})) EXPECT_EQ(x, kOk);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(40));
}

}  // namespace
