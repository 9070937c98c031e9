#pragma once
// Writes and checks tensors' bytes through pins on whichever device the tests run on: the simulator,
// where device addresses are host memory and the CPU does it, or, with TVMM_TEST_DEVICE=cuda, the CUDA
// backend (in CI: on the driver emulator, tests/cuda_emulator), where host code must not touch device
// memory and tvmm's pattern kernels do it. The pager's integrity suites use it, so the same runs check
// every byte on both (ctest registers them a second time as emulated.*).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backends/device/device_backend.hpp"
#include "backends/device/device_memory.hpp"
#include "test_support.hpp"
#include "vmm/api/make_pager.hpp"
#include "vmm/core/pager_impl.hpp"
#if defined(TVMM_HAVE_CUDA)
#include "backends/device/cuda/cuda_device.hpp"
#endif

namespace tvmm::test {

//! True when the tests run on the CUDA backend (TVMM_TEST_DEVICE=cuda).
inline bool on_cuda() {
  const char* d = std::getenv("TVMM_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda";
}

//! Bytes of device memory that host code must not touch, written and checked by a backend's pattern
//! kernels (DeviceBackend::fill, verify), the mismatches counted in a granule of its own. TestPager
//! uses it on the CUDA backend, and so does the allocation-failure sweep of transparent mode's heap.
class DeviceTally {
 public:
  //! Throws std::runtime_error naming the step that failed.
  explicit DeviceTally(device::DeviceBackend& dev) : dev_(dev), memory_(dev) {
    const char* step = "";
    require(memory_.open(&step), (std::string("the counter's ") + step).c_str());
    require(dev_.create_stream(&own_), "a stream");
    std::uint64_t zero = 0;
    require(dev_.memcpy_async(as_ptr(memory_.va()), &zero, 8, device::CopyKind::host_to_device, own_), "zeroing");
    require(dev_.synchronize_stream(own_), "zeroing");
  }
  ~DeviceTally() {
    (void)dev_.synchronize_stream(own_);
    (void)dev_.destroy_stream(own_);
  }
  DeviceTally(const DeviceTally&) = delete;
  DeviceTally& operator=(const DeviceTally&) = delete;

  //! Writes the pattern `seed` over [p, p + n): queued on `s`, or (null) now, on the tally's own stream.
  void fill(device::StreamHandle s, void* p, std::size_t n, std::uint64_t seed) {
    run(
        s, [&](device::StreamHandle h) { return dev_.fill(h, dev(p), n, seed); }, "the fill kernel");
  }
  //! Counts into the tally the bytes of [p, p + n) that differ from `seed`: queued on `s`, or now.
  void check(device::StreamHandle s, void* p, std::size_t n, std::uint64_t seed) {
    run(
        s, [&](device::StreamHandle h) { return dev_.verify(h, dev(p), n, seed, memory_.va()); }, "the verify kernel");
  }
  //! The tally so far. Synchronise the streams checks were queued on first.
  std::uint64_t mismatches() {
    std::lock_guard lk(mu_);
    std::uint64_t v = 0;
    require(dev_.memcpy_async(&v, as_ptr(memory_.va()), 8, device::CopyKind::device_to_host, own_), "reading");
    require(dev_.synchronize_stream(own_), "reading");
    return v;
  }

 private:
  // A kernel on the caller's stream, or (none) on the tally's own stream, waited for.
  template <class Launch>
  void run(device::StreamHandle s, Launch launch, const char* what) {
    if (s != nullptr) {
      require(launch(s), what);
      return;
    }
    std::lock_guard lk(mu_);
    require(launch(own_), what);
    require(dev_.synchronize_stream(own_), what);
  }
  static void require(device::Status st, const char* what) {
    if (!st.ok())
      throw std::runtime_error(std::string("DeviceTally: ") + what + " failed: " + device::errc_name(st.code));
  }
  static void* as_ptr(device::DevPtr p) { return reinterpret_cast<void*>(p); }
  static device::DevPtr dev(void* p) { return reinterpret_cast<device::DevPtr>(p); }

  device::DeviceBackend& dev_;
  device::DeviceMemory memory_;  // the counter
  std::mutex mu_;                // the own stream
  device::StreamHandle own_ = nullptr;
};

//! A pager for `config` on the test device, and the means to write and check bytes through its pins.
class TestPager {
 public:
  explicit TestPager(Config config) : pager_(make(std::move(config), &cuda_)) {
    if (cuda_ != nullptr) gpu_ = std::make_unique<DeviceTally>(*cuda_);
  }
  TestPager(const TestPager&) = delete;
  TestPager& operator=(const TestPager&) = delete;

  Pager& operator*() noexcept { return pager_; }
  Pager* operator->() noexcept { return &pager_; }

  //! Writes the pattern `seed` over [p, p + n): queued on `s`, or now (a host pin) when `s` is null.
  void fill(Stream* s, void* p, std::size_t n, std::uint64_t seed) {
    if (gpu_) {
      gpu_->fill(s != nullptr ? s->native_handle() : nullptr, p, n, seed);
      return;
    }
    if (s != nullptr) {
      s->launch([p, n, seed] { test::fill(p, n, seed); });
    } else {
      test::fill(p, n, seed);
    }
  }

  //! Counts into the tally the bytes of [p, p + n) that differ from `seed`: queued on `s`, or now.
  void check(Stream* s, void* p, std::size_t n, std::uint64_t seed) {
    if (gpu_) {
      gpu_->check(s != nullptr ? s->native_handle() : nullptr, p, n, seed);
      return;
    }
    if (s != nullptr) {
      s->launch([p, n, seed, bad = bad_] { *bad += test::mismatches(p, n, seed); });
    } else {
      *bad_ += test::mismatches(p, n, seed);
    }
  }

  //! The tally so far. Synchronise the streams checks were queued on first.
  std::uint64_t mismatches() { return gpu_ ? gpu_->mismatches() : bad_->load(); }

 private:
  static Pager make(Config c, device::DeviceBackend** cuda) {
    *cuda = nullptr;
    if (!on_cuda()) return Pager(c);
#if defined(TVMM_HAVE_CUDA)
    c.device_backend = "cuda";
    c.cuda_device = 0;
    static std::once_flag said;
    std::call_once(said, [] { std::fprintf(stderr, "TestPager: on the CUDA backend (TVMM_TEST_DEVICE=cuda)\n"); });
    auto dev = device::make_cuda_device(0);
    *cuda = dev.get();
    return vmm::make_pager(c, std::move(dev));
#else
    throw std::runtime_error("TVMM_TEST_DEVICE=cuda, but this build has no CUDA backend");
#endif
  }

  // The CUDA backend the pager runs on (TVMM_TEST_DEVICE=cuda), or null.
  device::DeviceBackend* cuda_ = nullptr;
  Pager pager_;
  std::shared_ptr<std::atomic<std::uint64_t>> bad_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::unique_ptr<DeviceTally> gpu_;  // on the CUDA backend; goes before pager_, which owns the device
};

}  // namespace tvmm::test
