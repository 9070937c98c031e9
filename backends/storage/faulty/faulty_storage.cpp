#include "backends/storage/faulty/faulty_storage.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tvmm::storage {

FaultyStorage::FaultyStorage(std::unique_ptr<StorageBackend> inner) : inner_(std::move(inner)) {}

FaultyStorage::~FaultyStorage() {
  // Bounce buffers must outlive the writes that read them.
  std::array<IoCompletion, 64> sink;
  while (inner_->outstanding() > 0) (void)inner_->reap(sink, 1);
}

void FaultyStorage::set_rules(std::vector<FaultRule> rules) {
  std::lock_guard lk(mu_);
  rules_.clear();
  for (auto& r : rules) rules_.push_back(Armed{r, 0, 0, std::mt19937_64(r.seed)});
}

std::uint64_t FaultyStorage::fired() const {
  std::lock_guard lk(mu_);
  return fired_;
}

void FaultyStorage::release_held(std::uint64_t n) {
  {
    std::lock_guard lk(mu_);
    permits_ = n > UINT64_MAX - permits_ ? UINT64_MAX : permits_ + n;
  }
  held_cv_.notify_all();
}

std::uint64_t FaultyStorage::held() const {
  std::lock_guard lk(mu_);
  return holding_;
}

std::size_t FaultyStorage::outstanding() const noexcept {
  std::lock_guard lk(mu_);
  return inner_->outstanding() + ready_.size() + held_.size();
}

std::vector<FaultRule::Kind> FaultyStorage::decide(const IoRequest& r) {
  std::vector<FaultRule::Kind> kinds;
  std::lock_guard lk(mu_);
  for (auto& a : rules_) {
    const FaultRule& rule = a.rule;
    if ((rule.op && *rule.op != r.op) || (rule.slot && *rule.slot != r.slot)) continue;
    ++a.matches;
    bool fire = true;
    if (rule.every_nth != 0) fire = a.matches % rule.every_nth == 0;
    if (rule.probability > 0.0) {
      fire = fire && std::uniform_real_distribution<double>(0.0, 1.0)(a.rng) < rule.probability;
    }
    if (!fire || a.fires >= rule.max_fires) continue;
    ++a.fires;
    ++fired_;
    kinds.push_back(rule.kind);
    if (rule.kind == FaultRule::Kind::latency) std::this_thread::sleep_for(rule.latency);
  }
  return kinds;
}

int FaultyStorage::submit(std::span<const IoRequest> reqs) {
  // Validate first so that a refused batch changes nothing (no rule counts, no synthetic failures).
  if (const int rc = validate_requests(reqs, inner_->slots(), slot_size()); rc != 0) return rc;
  // The batch is made aside, room for it is made in every member, and it joins them only once the
  // inner backend has queued its part, with nothing left that allocates: a std::bad_alloc or a
  // failure on the way leaves everything as it was (but the rules' counts of its requests).
  std::vector<IoRequest> forward;
  std::vector<IoCompletion> failed;  // failures decided here
  std::unordered_map<std::uint64_t, Pending> pending;
  forward.reserve(reqs.size());
  failed.reserve(reqs.size());
  pending.reserve(reqs.size());
  std::uint64_t holds = 0;
  std::uint64_t tag = next_tag_;
  for (const auto& r : reqs) {
    const auto kinds = decide(r);
    auto has = [&](FaultRule::Kind k) { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
    if (has(FaultRule::Kind::eio) || has(FaultRule::Kind::enospc)) {
      failed.push_back({r.tag, has(FaultRule::Kind::eio) ? -EIO : -ENOSPC});
      continue;
    }
    Pending p{r, has(FaultRule::Kind::short_io), has(FaultRule::Kind::bit_flip), has(FaultRule::Kind::hold)};
    IoRequest inner_req = r;
    if (p.flip && r.op == IoOp::write) {
      // Write a corrupted copy; the caller's buffer stays as it was.
      const std::size_t len = request_bytes(r, slot_size());
      void* mem = std::aligned_alloc(kIoAlignment, len);
      if (mem == nullptr) return -ENOMEM;
      std::memcpy(mem, r.buf, len);
      static_cast<std::byte*>(mem)[len / 3] ^= std::byte{0x10};
      p.bounce = {static_cast<std::byte*>(mem), std::free};
      inner_req.buf = mem;
    }
    holds += p.hold ? 1 : 0;
    inner_req.tag = tag++;
    pending.emplace(inner_req.tag, std::move(p));
    forward.push_back(inner_req);
  }
  ready_.reserve(ready_.size() + failed.size());
  pending_.reserve(pending_.size() + pending.size());  // merge() below then splices without rehashing
  got_.resize(std::max(got_.size(), pending_.size() + pending.size()));
  {
    std::lock_guard lk(mu_);
    held_.reserve(holding_ + holds);
  }
  if (!forward.empty()) {
    if (const int rc = inner_->submit(forward); rc != 0) return rc;
  }
  next_tag_ = tag;
  ready_.insert(ready_.end(), failed.begin(), failed.end());
  pending_.merge(pending);
  std::lock_guard lk(mu_);
  holding_ += holds;
  return 0;
}

std::size_t FaultyStorage::reap(std::span<IoCompletion> out, std::size_t min) {
  std::size_t n = 0;
  for (;;) {
    while (n < out.size() && !ready_.empty()) {
      out[n++] = ready_.back();
      ready_.pop_back();
    }
    {
      std::lock_guard lk(mu_);
      for (; n < out.size() && permits_ > 0 && !held_.empty(); --permits_, --holding_) {
        out[n++] = held_.front();
        held_.erase(held_.begin());
      }
    }
    const bool need = n < min;
    if (n == out.size()) return n;
    if (inner_->outstanding() > 0) {
      const std::span<IoCompletion> got(got_.data(), std::min(got_.size(), out.size() - n));
      const std::size_t k = inner_->reap(got, need ? 1 : 0);
      for (std::size_t i = 0; i < k; ++i) {
        auto it = pending_.find(got[i].tag);
        Pending& p = it->second;
        std::int64_t result = got[i].result;
        const std::size_t len = request_bytes(p.req, slot_size());
        if (result == static_cast<std::int64_t>(len)) {
          if (p.flip && p.req.op == IoOp::read) static_cast<std::byte*>(p.req.buf)[len / 3] ^= std::byte{0x10};
          if (p.short_io) {
            result = static_cast<std::int64_t>(len / 2);
            if (p.req.op == IoOp::read) std::memset(static_cast<std::byte*>(p.req.buf) + len / 2, 0, len / 2);
          }
        }
        if (p.hold) {
          std::lock_guard lk(mu_);
          held_.push_back({p.req.tag, result});
        } else {
          out[n++] = {p.req.tag, result};
        }
        pending_.erase(it);
      }
      if (!need) return n;
      continue;  // held completions may have arrived: hand out what the permits allow, or wait
    }
    if (!need) return n;
    std::unique_lock lk(mu_);
    if (held_.empty()) return n;  // nothing left anywhere
    held_cv_.wait(lk, [&] { return permits_ > 0; });
  }
}

}  // namespace tvmm::storage
