// The public C++ API: thin handles over PagerImpl.
#include "tvmm/pager.hpp"

#include <array>
#include <utility>

#include "vmm/api/make_pager.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm {

const char* to_string(Tier tier) noexcept {
  switch (tier) {
    case Tier::none: return "none";
    case Tier::device: return "device";
    case Tier::host: return "host";
    case Tier::transit: return "transit";
    case Tier::nvme: return "nvme";
  }
  return "invalid";
}

// --- Stream ---------------------------------------------------------------------------------------------

Stream::Stream(Stream&& other) noexcept
    : pager_(std::exchange(other.pager_, nullptr)), handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) pager_->destroy_stream(handle_);
    pager_ = std::exchange(other.pager_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (handle_ != nullptr) pager_->destroy_stream(handle_);
}

void Stream::launch(std::function<void()> fn) {
  if (handle_ == nullptr) throw invalid_argument("tvmm::Stream::launch: the stream is empty (moved from?)");
  pager_->launch(handle_, std::move(fn));
}

void Stream::busy_for(std::chrono::nanoseconds duration) {
  if (handle_ == nullptr) throw invalid_argument("tvmm::Stream::busy_for: the stream is empty (moved from?)");
  if (duration.count() < 0) {
    throw invalid_argument("tvmm::Stream::busy_for: the duration is negative (" + std::to_string(duration.count()) +
                           " ns); pass zero or more");
  }
  pager_->launch_busy(handle_, duration);
}

void Stream::synchronize() {
  if (handle_ == nullptr) throw invalid_argument("tvmm::Stream::synchronize: the stream is empty (moved from?)");
  pager_->synchronize(handle_);
}

// --- StreamTimer ----------------------------------------------------------------------------------------

StreamTimer::StreamTimer(Stream& stream) : pager_(stream.pager_), stream_(stream.handle_) {
  if (stream_ == nullptr) throw invalid_argument("tvmm::StreamTimer: the stream is empty (moved from?)");
  start_ = pager_->create_event();
  try {
    stop_ = pager_->create_event();
  } catch (...) {
    pager_->destroy_event(start_);
    throw;
  }
}

StreamTimer::~StreamTimer() {
  pager_->destroy_event(start_);
  pager_->destroy_event(stop_);
}

void StreamTimer::start() {
  pager_->record_event(start_, stream_);
  started_ = true;
  stopped_ = false;
}

void StreamTimer::stop() {
  if (!started_) throw invalid_argument("tvmm::StreamTimer::stop: call start() first");
  pager_->record_event(stop_, stream_);
  stopped_ = true;
}

std::chrono::nanoseconds StreamTimer::elapsed() {
  if (!stopped_) throw invalid_argument("tvmm::StreamTimer::elapsed: call start() and then stop() first");
  return pager_->elapsed(start_, stop_);
}

// --- Pin ------------------------------------------------------------------------------------------------

Pin::Pin(Pin&& other) noexcept
    : pager_(std::exchange(other.pager_, nullptr)),
      alloc_(std::exchange(other.alloc_, nullptr)),
      stream_(std::exchange(other.stream_, nullptr)),
      offset_(std::exchange(other.offset_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      first_page_(std::exchange(other.first_page_, 0)),
      pages_(std::exchange(other.pages_, 0)) {}

Pin& Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    release();
    pager_ = std::exchange(other.pager_, nullptr);
    alloc_ = std::exchange(other.alloc_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    offset_ = std::exchange(other.offset_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    first_page_ = std::exchange(other.first_page_, 0);
    pages_ = std::exchange(other.pages_, 0);
  }
  return *this;
}

void* Pin::data() const noexcept { return alloc_ ? reinterpret_cast<void*>(alloc_->base + offset_) : nullptr; }
std::size_t Pin::size() const noexcept { return alloc_ ? bytes_ : 0; }

void Pin::release() noexcept {
  if (alloc_ == nullptr) return;
  pager_->unpin(std::exchange(alloc_, nullptr), {first_page_, pages_}, std::exchange(stream_, nullptr));
}

void release_together(std::span<Pin> pins) noexcept {
  // The pins of one pager and stream go to the pager in groups of up to kGroup (no allocation here).
  constexpr std::size_t kGroup = 16;
  std::array<vmm::PagerImpl::Unpin, kGroup> group{};
  for (std::size_t i = 0; i < pins.size(); ++i) {
    if (!pins[i]) continue;
    if (pins[i].stream_ == nullptr) {
      pins[i].release();
      continue;
    }
    vmm::PagerImpl* const pager = pins[i].pager_;
    void* const stream = pins[i].stream_;
    std::size_t n = 0;
    for (std::size_t j = i; j < pins.size(); ++j) {
      Pin& p = pins[j];
      if (!p || p.pager_ != pager || p.stream_ != stream) continue;
      group[n++] = {std::exchange(p.alloc_, nullptr), {p.first_page_, p.pages_}};
      p.stream_ = nullptr;
      if (n == kGroup) {
        pager->unpin_together({group.data(), n}, stream);
        n = 0;
      }
    }
    if (n != 0) pager->unpin_together({group.data(), n}, stream);
  }
}

// --- Tensor ---------------------------------------------------------------------------------------------

Tensor::Tensor(Tensor&& other) noexcept
    : pager_(std::exchange(other.pager_, nullptr)), alloc_(std::exchange(other.alloc_, nullptr)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    pager_ = std::exchange(other.pager_, nullptr);
    alloc_ = std::exchange(other.alloc_, nullptr);
  }
  return *this;
}

void* Tensor::data() const noexcept { return alloc_ ? reinterpret_cast<void*>(alloc_->base) : nullptr; }
std::size_t Tensor::size() const noexcept { return alloc_ ? alloc_->bytes : 0; }

const std::string& Tensor::name() const noexcept {
  static const std::string empty;
  return alloc_ ? alloc_->name : empty;
}

namespace {
void require(const vmm::Allocation* a, const char* what) {
  if (a == nullptr)
    throw invalid_argument(std::string("tvmm::Tensor::") + what + ": the tensor is empty (moved from or reset)");
}
}  // namespace

void Tensor::require_stream(const Stream& stream, const char* what) const {
  if (!stream) throw invalid_argument(std::string("tvmm::Tensor::") + what + ": the stream is empty (moved from?)");
  // Another pager's stream may live on another device, and its release points would be recorded in
  // the wrong pager's event pool: never accepted.
  if (stream.pager_ != pager_) {
    throw invalid_argument(std::string("tvmm::Tensor::") + what + ": the stream belongs to another tvmm::Pager than " +
                           "this tensor's; create the stream with the tensor's pager (pager.create_stream())");
  }
}

Pin Tensor::pin(Stream& stream, Access access) {
  require(alloc_, "pin");
  return pin_range(stream, 0, alloc_->bytes, access);
}

Pin Tensor::pin(Access access) {
  require(alloc_, "pin");
  return pin_range(0, alloc_->bytes, access);
}

Pin Tensor::pin_range(Stream& stream, std::size_t offset, std::size_t bytes, Access access) {
  require(alloc_, "pin");
  require_stream(stream, "pin");
  const auto r = pager_->range(alloc_, offset, bytes, access);
  pager_->pin(alloc_, r.span, r.access, stream.native_handle());
  return Pin(pager_, alloc_, stream.native_handle(), offset, bytes, r.span.first, r.span.count);
}

Pin Tensor::pin_range(std::size_t offset, std::size_t bytes, Access access) {
  require(alloc_, "pin");
  const auto r = pager_->range(alloc_, offset, bytes, access);
  pager_->pin(alloc_, r.span, r.access, nullptr);
  return Pin(pager_, alloc_, nullptr, offset, bytes, r.span.first, r.span.count);
}

void Tensor::prefetch(Stream& stream) {
  require(alloc_, "prefetch");
  require_stream(stream, "prefetch");
  pager_->prefetch(alloc_, stream.native_handle());
}

void Tensor::discard() {
  require(alloc_, "discard");
  pager_->discard(alloc_);
}

Tier Tensor::tier(std::size_t offset) const {
  require(alloc_, "tier");
  return pager_->tier(alloc_, offset);
}

void Tensor::reset() noexcept {
  if (alloc_ == nullptr) return;
  pager_->drop_owner(std::exchange(alloc_, nullptr));
  pager_ = nullptr;
}

void* Tensor::release() noexcept {
  if (alloc_ == nullptr) return nullptr;
  pager_->mark_raw(alloc_);
  void* p = reinterpret_cast<void*>(alloc_->base);
  alloc_ = nullptr;
  pager_ = nullptr;
  return p;
}

// --- Pager ----------------------------------------------------------------------------------------------

Pager::Pager(const Config& config) : impl_(std::make_unique<vmm::PagerImpl>(config)) {}
Pager::Pager(std::unique_ptr<vmm::PagerImpl> impl) noexcept : impl_(std::move(impl)) {}
Pager::~Pager() = default;
Pager::Pager(Pager&&) noexcept = default;
Pager& Pager::operator=(Pager&&) noexcept = default;

Tensor Pager::allocate(std::size_t bytes, Hints hints) {
  return Tensor(impl_.get(), impl_->allocate(bytes, std::move(hints)));
}

void Pager::free(void* ptr) { impl_->free_raw(ptr); }

Stream Pager::create_stream() { return Stream(impl_.get(), impl_->create_stream()); }

void Pager::mark_iteration() { impl_->mark_iteration(); }

Stats Pager::stats() const { return impl_->stats(); }

Tier Pager::tier_of(const void* addr) const { return impl_->tier_of(reinterpret_cast<device::DevPtr>(addr)); }

void Pager::check_invariants() const { impl_->check_invariants(); }

const Config& Pager::config() const noexcept { return impl_->config(); }

const char* Pager::backend_name() const noexcept { return impl_->device().properties().name.c_str(); }

Placement Pager::placement() const { return impl_->placement(); }

}  // namespace tvmm

namespace tvmm::vmm {

Pager make_pager(const Config& config, std::unique_ptr<device::DeviceBackend> backend,
                 std::unique_ptr<storage::StorageBackend> storage) {
  return PagerAccess::make(config, std::move(backend), std::move(storage));
}

}  // namespace tvmm::vmm
