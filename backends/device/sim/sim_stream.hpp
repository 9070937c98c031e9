#pragma once
// Streams and events of the simulated GPU: a stream is an in-order queue executed by its own worker
// thread; an event completes when the work recorded before it has run.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "backends/device/device_backend.hpp"

namespace tvmm::backend::sim {

class CopyEngine;

class SimEvent {
 public:
  // Starts a new record; returns its generation (the stream completes it later).
  std::uint64_t begin_record();
  void complete(std::uint64_t generation);
  [[nodiscard]] std::uint64_t latest() const;
  [[nodiscard]] bool is_complete() const;
  void wait(std::uint64_t generation) const;
  void wait_latest() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
};

struct SimOp {
  enum class Kind : std::uint8_t { copy, host, record, wait };
  Kind kind{};
  CopyKind copy_kind{};
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  HostFn fn = nullptr;
  void* user = nullptr;
  SimEvent* event = nullptr;
  std::uint64_t generation = 0;
};

class SimStream {
 public:
  // engines[0] copies host-to-device, engines[1] device-to-host.
  explicit SimStream(CopyEngine* h2d, CopyEngine* d2h);
  ~SimStream();  // drains queued work, then joins the worker
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  void enqueue(const SimOp& op);
  void synchronize();

 private:
  void run();
  void execute(const SimOp& op);

  CopyEngine* const h2d_;
  CopyEngine* const d2h_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<SimOp> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  bool worker_waiting_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tvmm::backend::sim
