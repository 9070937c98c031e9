#pragma once
// A storage backend adaptor that injects faults into another backend's I/O, by rule, for tests: EIO,
// ENOSPC, short transfers, added latency and bit flips. A rule fires on every Nth matching request, on
// every request for one slot, or with a probability from a seeded generator (reproducible), and can be
// limited to a number of firings. Rules may be changed while I/O runs. It keeps the backend contract
// under std::bad_alloc too: submit() queues a batch whole or not at all (a rule counts the requests of a
// batch that fails so), and reap() allocates nothing.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "backends/storage/storage_backend.hpp"

namespace tvmm::storage {

struct FaultRule {
  enum class Kind : std::uint8_t {
    eio,       //!< the request fails with -EIO; nothing is transferred
    enospc,    //!< the request fails with -ENOSPC; nothing is transferred
    short_io,  //!< the transfer reports half the slot (a read leaves the rest of the buffer zeroed)
    bit_flip,  //!< one bit flips: in the buffer after a read, or in the data written to the slot
    latency,   //!< the request is delayed by `latency`
    hold,      //!< the request runs, but its completion is handed out only once released (release_held)
  };
  Kind kind = Kind::eio;
  std::optional<IoOp> op;             //!< only reads or only writes; both when empty
  std::optional<std::uint32_t> slot;  //!< only this slot
  std::uint64_t every_nth = 0;        //!< fires on matching requests N, 2N, 3N, ... (0: not by count)
  double probability = 0.0;           //!< fires with this probability (0: not by chance)
  std::uint64_t seed = 1;             //!< seed of the probability's generator
  std::uint64_t max_fires = UINT64_MAX;
  std::chrono::microseconds latency{0};
  // With neither every_nth nor probability set, the rule fires on every matching request.

  //! Builders: FaultRule::of(Kind::eio).on(IoOp::write).every(4).
  static FaultRule of(Kind k) {
    FaultRule r;
    r.kind = k;
    return r;
  }
  FaultRule& on(IoOp o) { return op = o, *this; }
  FaultRule& at_slot(std::uint32_t s) { return slot = s, *this; }
  FaultRule& every(std::uint64_t n) { return every_nth = n, *this; }
  FaultRule& with_probability(double p, std::uint64_t s) { return probability = p, seed = s, *this; }
  FaultRule& at_most(std::uint64_t n) { return max_fires = n, *this; }
  FaultRule& delay(std::chrono::microseconds d) { return latency = d, *this; }
};

class FaultyStorage final : public StorageBackend {
 public:
  explicit FaultyStorage(std::unique_ptr<StorageBackend> inner);
  ~FaultyStorage() override;

  //! Replaces the rules (and their counters).
  void set_rules(std::vector<FaultRule> rules);
  void clear() { set_rules({}); }
  //! Faults injected so far, all rules together.
  [[nodiscard]] std::uint64_t fired() const;
  //! Lets `n` more completions of held requests (Kind::hold) be handed out, in the order they
  //! complete; permits not used yet apply to requests still running.
  void release_held(std::uint64_t n);
  //! Held requests submitted whose completion has not been handed out.
  [[nodiscard]] std::uint64_t held() const;

  [[nodiscard]] const char* name() const noexcept override { return "faulty"; }
  [[nodiscard]] std::uint32_t slots() const noexcept override { return inner_->slots(); }
  [[nodiscard]] std::size_t slot_size() const noexcept override { return inner_->slot_size(); }
  bool register_buffers(void* base, std::size_t bytes) noexcept override {
    return inner_->register_buffers(base, bytes);
  }
  int bind_workers(const std::vector<unsigned>& cpus) noexcept override { return inner_->bind_workers(cpus); }
  [[nodiscard]] int submit(std::span<const IoRequest> reqs) override;
  std::size_t reap(std::span<IoCompletion> out, std::size_t min) override;
  [[nodiscard]] std::size_t outstanding() const noexcept override;

 private:
  struct Armed {
    FaultRule rule;
    std::uint64_t matches = 0;
    std::uint64_t fires = 0;
    std::mt19937_64 rng;
  };
  struct Pending {  // a request passed to the inner backend
    IoRequest req;
    bool short_io = false;
    bool flip = false;
    bool hold = false;
    std::unique_ptr<std::byte, void (*)(void*)> bounce{nullptr, nullptr};  // corrupted copy being written
  };
  // The kinds that fire for `r` (counts matches).
  std::vector<FaultRule::Kind> decide(const IoRequest& r);

  std::unique_ptr<StorageBackend> inner_;
  mutable std::mutex mu_;  // rules and counters
  std::vector<Armed> rules_;
  std::uint64_t fired_ = 0;
  std::uint64_t next_tag_ = 0;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::vector<IoCompletion> ready_;  // failures decided at submit
  // Held completions (guarded by mu_): completed by the inner backend, handed out against permits, in
  // order. Its capacity covers every held request submitted (holding_), so reap() never grows it.
  std::vector<IoCompletion> held_;
  std::vector<IoCompletion> got_;  // reap()'s room for the inner backend's completions: one per pending
  std::uint64_t holding_ = 0;      // held requests not handed out yet (running or in held_)
  std::uint64_t permits_ = 0;
  std::condition_variable held_cv_;
};

}  // namespace tvmm::storage
