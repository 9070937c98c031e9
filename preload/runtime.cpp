#include "preload/runtime.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/physical_memory.hpp"
#include "preload/launch_gate.hpp"
#include "tvmm/errors.hpp"
#include "vmm/api/last_error.hpp"
#include "vmm/transparent/remap_heap.hpp"

namespace tvmm::preload {

thread_local int Inside::depth_ = 0;

namespace {

// ---- logging ---------------------------------------------------------------------------------------

// Any case. A value that names no level says so once on stderr (directly: log() itself asks for the
// level) and means the default, so that a typo never silences failures nor goes unnoticed.
Level parse_level(const char* v) noexcept {
  if (v == nullptr || *v == '\0') return Level::warn;
  if (strcasecmp(v, "off") == 0 || strcasecmp(v, "none") == 0) return Level::off;
  if (strcasecmp(v, "error") == 0) return Level::error;
  if (strcasecmp(v, "warn") == 0 || strcasecmp(v, "warning") == 0) return Level::warn;
  if (strcasecmp(v, "info") == 0) return Level::info;
  if (strcasecmp(v, "debug") == 0) return Level::debug;
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf,
                              "tvmm: TVMM_LOG=%.64s is not a level; use off, error, warn (the default, used now), "
                              "info or debug\n",
                              v);
  if (n > 0) (void)!::write(2, buf, std::min(static_cast<std::size_t>(n), sizeof buf - 1));
  return Level::warn;
}

// ---- state -----------------------------------------------------------------------------------------

// One heap per device, created when a call first needs memory of that device (with device.ordinal =
// "auto" on the CUDA backend: the caller's current device; else one heap, in slot 0).
pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<vmm::TransparentHeap*> g_heaps[kMaxDevices];
// Whether the heaps place by use (all or none: they share one configuration), so a launch hook's check of
// its argument words costs one load when they do not.
std::atomic<bool> g_by_use{false};
// The heap that remaps under the program's threads (vmm on the simulator): the fault handler's.
std::atomic<vmm::RemapHeap*> g_remap_heap{nullptr};
bool g_failed[kMaxDevices] = {};  // under g_init_mu
std::string g_init_error;         // the last reason a heap could not be made (under g_init_mu)
// The configuration (TVMM_CONFIG, TVMM_*), read once (under g_init_mu).
std::atomic<bool> g_config_read{false};  // set (release) once g_config and g_per_device are
std::atomic<bool> g_per_device{false};   // a heap per device (device.ordinal = "auto" on CUDA)
Config g_config;
// Set in a forked child of a process that used the CUDA backend: CUDA cannot be used there.
std::string g_fork_error;  // under g_init_mu
bool g_exit_registered = false;
bool g_forked_child = false;  // this process is a fork of one that had a heap

// Heaps inherited from a parent across fork: their ranges are fenced off in the child.
constexpr int kMaxParents = 8;
std::atomic<std::uintptr_t> g_parent_lo[kMaxParents];
std::atomic<std::uintptr_t> g_parent_hi[kMaxParents];

struct sigaction g_old_segv;
bool g_handler_installed = false;

static_assert(kMaxGates == kMaxDevices, "a launch gate per heap slot");
// The compact list of the heaps created, with their slots, for gate_of and note_use: a launch hook's
// lookup reads only these.
std::atomic<vmm::TransparentHeap*> g_created[kMaxDevices];
std::atomic<int> g_created_slot[kMaxDevices];
std::atomic<int> g_created_count{0};

// ---- the fault handler (the simulator only) ------------------------------------------------------------
// The program's host threads touch simulated device memory directly, so a page being remapped is
// read-only (or briefly unmapped): an access to it faults, waits here until the remap ends, and retries.

// The fault handler's retry state, per thread. Not thread_local: a signal handler must not touch a
// dynamic TLS variable (its first use in a thread allocates), and initial-exec TLS would make this
// library need static TLS, which a process that has loaded many libraries has run out of: dlopen then
// fails ("cannot allocate memory in static TLS block"), as PyTorch's CUDAPluggableAllocator loads it. So
// a table keyed by thread id, claimed by compare-and-swap (async-signal-safe); a slot whose thread has
// exited is taken over (tgkill with signal 0 finds it gone). A thread that finds every slot held by a
// live thread gets none, and its fault is taken as the program's own (passed on at once).
struct FaultRetry {
  std::atomic<pid_t> tid{0};
  std::atomic<const void*> addr{nullptr};
  std::atomic<std::uint64_t> epoch{0};
};
constexpr std::size_t kFaultRetrySlots = 256;
FaultRetry g_fault_retry[kFaultRetrySlots];

bool thread_gone(pid_t tid) noexcept { return ::syscall(SYS_tgkill, ::getpid(), tid, 0) == -1 && errno == ESRCH; }

FaultRetry* fault_retry_slot() noexcept {
  const auto tid = static_cast<pid_t>(::syscall(SYS_gettid));
  const std::size_t home = static_cast<std::size_t>(tid) % kFaultRetrySlots;
  for (std::size_t i = 0; i < kFaultRetrySlots; ++i) {  // this thread's own slot, or a free one
    FaultRetry& r = g_fault_retry[(home + i) % kFaultRetrySlots];
    pid_t owner = r.tid.load(std::memory_order_acquire);
    if (owner == 0 && r.tid.compare_exchange_strong(owner, tid, std::memory_order_acq_rel)) return &r;
    if (owner == tid) return &r;
  }
  for (std::size_t i = 0; i < kFaultRetrySlots; ++i) {  // one whose thread has exited
    FaultRetry& r = g_fault_retry[(home + i) % kFaultRetrySlots];
    pid_t owner = r.tid.load(std::memory_order_acquire);
    if (owner != 0 && owner != tid && thread_gone(owner) &&
        r.tid.compare_exchange_strong(owner, tid, std::memory_order_acq_rel)) {
      r.addr.store(nullptr, std::memory_order_relaxed);  // the old thread's record is not this one's
      return &r;
    }
  }
  return nullptr;
}

void chain(int sig, siginfo_t* info, void* context) {
  if ((g_old_segv.sa_flags & SA_SIGINFO) != 0 && g_old_segv.sa_sigaction != nullptr) {
    g_old_segv.sa_sigaction(sig, info, context);
    return;
  }
  if (g_old_segv.sa_handler == SIG_DFL || g_old_segv.sa_handler == SIG_IGN) {
    // Default action: restore it and return; the access faults again and the process ends as it would
    // have without tvmm.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    return;
  }
  g_old_segv.sa_handler(sig);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  vmm::RemapHeap* h = g_remap_heap.load(std::memory_order_acquire);
  if (h != nullptr && h->contains(info->si_addr)) {
    if (h->remapping()) {
      while (h->remapping()) ::sched_yield();
      errno = saved_errno;
      return;
    }
    // The remap may have ended between the fault and this check: retry once per remap epoch.
    const std::uint64_t epoch = h->remap_epoch();
    FaultRetry* last = fault_retry_slot();
    if (last != nullptr && (last->addr.load(std::memory_order_relaxed) != info->si_addr ||
                            last->epoch.load(std::memory_order_relaxed) != epoch)) {
      last->addr.store(info->si_addr, std::memory_order_relaxed);
      last->epoch.store(epoch, std::memory_order_relaxed);
      errno = saved_errno;
      return;
    }
  }
  chain(sig, info, context);
  errno = saved_errno;
}

void install_fault_handler() {
  if (g_handler_installed) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, &g_old_segv) == 0) {
    g_handler_installed = true;
  } else {
    log(Level::warn,
        "cannot install the SIGSEGV handler (%s): a thread touching a page while it is remapped "
        "will crash",
        std::strerror(errno));
  }
}

// ---- exit and fork ------------------------------------------------------------------------------------

void write_stats(vmm::TransparentHeap* h, int device, bool several) {
  if (h->config().stats_file.empty()) return;
  try {
    const std::string json = h->stats_json() + "\n";
    std::string path = h->config().stats_file;
    // With heaps on several devices, one file each; a forked child has the parent's configuration: its
    // own file, so neither clobbers the other's.
    if (several && path != "-") path += ".device" + std::to_string(device);
    if (g_forked_child && path != "-") path += ".child" + std::to_string(::getpid());
    const int fd = path == "-" ? 2 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      log(Level::error, "cannot write the stats to %s: %s", path.c_str(), std::strerror(errno));
      return;
    }
    const ssize_t n = ::write(fd, json.data(), json.size());
    if (n != static_cast<ssize_t>(json.size())) log(Level::error, "writing the stats to %s failed", path.c_str());
    if (fd != 2) ::close(fd);
  } catch (...) {
    log(Level::error, "writing the stats failed");
  }
}

void write_stats_at_exit() {
  int created = 0;
  for (auto& slot : g_heaps) created += slot.load(std::memory_order_acquire) != nullptr ? 1 : 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (vmm::TransparentHeap* h = g_heaps[d].load(std::memory_order_acquire)) write_stats(h, d, created > 1);
  }
}

void reset_captures_after_fork() noexcept;

void before_fork() { pthread_mutex_lock(&g_init_mu); }
void after_fork_parent() { pthread_mutex_unlock(&g_init_mu); }
void after_fork_child() {
  // The parent's heap cannot be used here: its worker threads did not survive the fork, and on the
  // simulator its memory is shared with the parent. Fence its range off (an access faults, as it would
  // on a GPU in a forked child) and start afresh on first use.
  // On a GPU the child cannot use CUDA at all (the driver does not survive fork): its CUDA calls get a
  // clear error instead of a heap.
  bool cuda = false;
  for (auto& slot : g_heaps) {
    vmm::TransparentHeap* parent = slot.exchange(nullptr);
    if (parent == nullptr) continue;
    g_forked_child = true;
    cuda = cuda || parent->device().properties().name == "cuda";
    if (auto* remap = dynamic_cast<vmm::RemapHeap*>(parent)) {
      const auto [lo, hi] = remap->range();
      if (parent->device().properties().host_accessible) {
        ::mmap(reinterpret_cast<void*>(lo), hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
               -1, 0);
      }
      for (int i = 0; i < kMaxParents; ++i) {
        if (g_parent_lo[i].load() == 0) {
          g_parent_lo[i].store(lo);
          g_parent_hi[i].store(hi);
          break;
        }
      }
    }
    // The old heap object is left alone (leaked): destroying it would wait for threads that are gone.
  }
  g_remap_heap.store(nullptr);
  reset_captures_after_fork();
  reset_gates_after_fork();
  g_created_count.store(0);
  g_by_use.store(false);
  for (bool& f : g_failed) f = false;
  g_init_error.clear();
  if (cuda) {
    g_fork_error =
        "this process is a fork of one that used the GPU through tvmm, and CUDA cannot be used in a forked "
        "child; start the child with spawn (multiprocessing.set_start_method(\"spawn\")), or fork before the "
        "first CUDA call";
  }
  pthread_mutex_unlock(&g_init_mu);
}

__attribute__((constructor)) void register_fork_handlers() {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

// The configuration, read on first use (under g_init_mu); throws what loading it throws.
const Config& config_locked() {
  if (!g_config_read.load(std::memory_order_acquire)) {
    Config cfg;
    if (const char* path = std::getenv("TVMM_CONFIG"); path != nullptr && *path != '\0') {
      cfg = load_config(path);
    } else {
      apply_environment(cfg);
    }
    g_config = cfg;
    g_per_device.store(cfg.device_backend == "cuda" && cfg.cuda_device < 0, std::memory_order_release);
    g_config_read.store(true, std::memory_order_release);
  }
  return g_config;
}

vmm::TransparentHeap* create_heap(int device) {
  Config cfg = config_locked();
  if (g_per_device.load(std::memory_order_acquire)) cfg.cuda_device = device;
  if (cfg.nvme.budget != 0 && device == 0) {
    log(Level::info,
        "nvme.budget is ignored in transparent mode: its capacity is the device and host budgets "
        "(the NVMe tier needs the explicit API)");
  }
  std::string why;
  // Called by the heap just before it drains the device (synchronize_device: the primary context, where
  // the program's runtime queues its work) to move or free pages: from here to the end of the heap
  // operation no other thread queues device work that may touch this heap's memory (launch_gate.hpp).
  // The drain itself never touches the calling thread's current context, which stays the program's.
  auto before_drain = [device] { launch_gate(device).lock_for_remap(); };  // `device` is the heap's slot
  vmm::TransparentHeap* h = vmm::make_transparent_heap(cfg, before_drain, &why).release();
  h->set_capture_probe(capture_under_way);
  // Falling back to managed memory is a choice the user should see; the rest is at info level.
  log(std::strcmp(h->mechanism(), "um") == 0 && cfg.transparent_memory == "auto" ? Level::warn : Level::info,
      "transparent mode (%s) on the %s device %d: %s; device budget %s, host budget %s, pages of %s", h->mechanism(),
      h->device().properties().name.c_str(), device, why.c_str(), format_bytes(h->config().device_budget).c_str(),
      format_bytes(h->config().host_budget).c_str(), format_bytes(h->config().page_size).c_str());
  // The host budget is taken as given (host-located frames are made as pages need them), so a budget
  // beyond what the machine holds fails only once its memory runs out: said now, where it is set.
  if (const std::size_t ram = common::physical_memory(); device == 0 && ram != 0 && h->config().host_budget > ram) {
    log(Level::warn,
        "the host budget (%s) is more than this machine's memory (%s): allocations fail once the machine "
        "runs out; lower TVMM_HOST_BUDGET (host.budget) to what it can hold",
        format_bytes(h->config().host_budget).c_str(), format_bytes(ram).c_str());
  }
  if (auto* remap = dynamic_cast<vmm::RemapHeap*>(h); remap != nullptr && h->device().properties().host_accessible) {
    g_remap_heap.store(remap, std::memory_order_release);
    install_fault_handler();
  }
  return h;
}

}  // namespace

bool disabled() noexcept {
  static const bool off = [] {
    const char* v = std::getenv("TVMM_DISABLE");
    if (v == nullptr) return false;
    return std::strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 ||
           strcasecmp(v, "on") == 0;
  }();
  return off;
}

Level log_level() noexcept {
  static const Level level = parse_level(std::getenv("TVMM_LOG"));
  return level;
}

void log(Level level, const char* format, ...) noexcept {
  if (level == Level::off || static_cast<int>(level) > static_cast<int>(log_level())) return;
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "tvmm: ");
  va_list args;
  va_start(args, format);
  const int m = std::vsnprintf(buf + n, sizeof buf - static_cast<std::size_t>(n) - 1, format, args);
  va_end(args);
  n = std::min<int>(static_cast<int>(sizeof buf) - 2, n + (m < 0 ? 0 : m));
  buf[n++] = '\n';
  // One write: lines from several threads never interleave, and no stdio lock is taken (fork-safe).
  (void)!::write(2, buf, static_cast<std::size_t>(n));
}

void* real_dlsym(void* handle, const char* name) noexcept {
  using Dlsym = void* (*)(void*, const char*);
  static std::atomic<Dlsym> real{nullptr};
  Dlsym f = real.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<Dlsym>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (f == nullptr) f = reinterpret_cast<Dlsym>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    real.store(f, std::memory_order_release);
  }
  return f == nullptr ? nullptr : f(handle, name);
}

void* next_symbol(const char* name) noexcept { return real_dlsym(RTLD_NEXT, name); }

namespace {
// The load address of this library (its own definitions are never "the program's").
std::uintptr_t own_base() noexcept {
  static const std::uintptr_t base = [] {
    Dl_info info{};
    return ::dladdr(reinterpret_cast<void*>(&own_base), &info) != 0 ? reinterpret_cast<std::uintptr_t>(info.dli_fbase)
                                                                    : std::uintptr_t{0};
  }();
  return base;
}

bool is_ours(void* fn) noexcept {
  Dl_info info{};
  return ::dladdr(fn, &info) != 0 && reinterpret_cast<std::uintptr_t>(info.dli_fbase) == own_base();
}

struct Search {
  const char* symbol;
  void* found = nullptr;
};

// dl_iterate_phdr's callback: asks each loaded object (by a handle that does not load anything) for the
// symbol, until one that is not this library has it.
int search_object(dl_phdr_info* info, std::size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0' || info->dlpi_addr == own_base()) return 0;
  void* h = ::dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  void* f = real_dlsym(h, s->symbol);
  ::dlclose(h);
  if (f == nullptr || is_ours(f)) return 0;
  s->found = f;
  return 1;
}
}  // namespace

void* real_function(const char* name) noexcept {
  if (void* f = next_symbol(name); f != nullptr && !is_ours(f)) return f;
  Search s{name};
  ::dl_iterate_phdr(search_object, &s);
  return s.found;
}

void* loaded_driver_symbol(const char* name) noexcept {
  void* cuda = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (cuda == nullptr) return nullptr;
  void* f = real_dlsym(cuda, name);
  ::dlclose(cuda);
  return f;
}

namespace {
// The device of the caller's current context, else the runtime's current device of this thread, else 0.
int caller_device() noexcept {
  using GetCurrent = int (*)(void**);
  using GetDevice = int (*)(int*);
  static Real<GetDevice> runtime_device("cudaGetDevice");
  // The driver stays loaded once it is: its functions are looked up until found, then kept.
  static std::atomic<void*> current_fn{nullptr}, device_fn{nullptr};
  if (current_fn.load(std::memory_order_acquire) == nullptr) {
    device_fn.store(loaded_driver_symbol("cuCtxGetDevice"), std::memory_order_release);
    current_fn.store(loaded_driver_symbol("cuCtxGetCurrent"), std::memory_order_release);
  }
  auto* get_current = reinterpret_cast<GetCurrent>(current_fn.load(std::memory_order_acquire));
  auto* ctx_device = reinterpret_cast<GetDevice>(device_fn.load(std::memory_order_acquire));
  void* ctx = nullptr;
  int device = 0;
  if (get_current != nullptr && ctx_device != nullptr && get_current(&ctx) == kSuccess && ctx != nullptr &&
      ctx_device(&device) == kSuccess) {
    return device;
  }
  if (const GetDevice f = runtime_device.get(); f != nullptr && f(&device) == kSuccess) return device;
  return 0;
}
}  // namespace

vmm::TransparentHeap* heap_containing(const void* ptr) noexcept {
  for (auto& slot : g_heaps) {
    vmm::TransparentHeap* h = slot.load(std::memory_order_acquire);
    if (h != nullptr && h->contains(ptr)) return h;
  }
  return nullptr;
}

bool pointer_info(const void* ptr, PointerInfo* out) noexcept {
  for (int d = 0; d < kMaxDevices; ++d) {
    vmm::TransparentHeap* h = g_heaps[d].load(std::memory_order_acquire);
    if (h == nullptr || !h->contains(ptr)) continue;
    try {
      const auto [start, bytes] = h->allocation_of(ptr);
      if (bytes == 0) return false;
      out->start = start;
      out->bytes = bytes;
      // The slot is the device with a heap per device; else the configured one (0 on the simulator).
      out->device = g_per_device.load(std::memory_order_acquire) ? d : std::max(0, g_config.cuda_device);
      return true;
    } catch (...) {
      return false;
    }
  }
  return false;
}

namespace {
// Reads the configuration if no call has yet (whether there is a heap per device depends on it).
void read_config() noexcept {
  if (g_config_read.load(std::memory_order_acquire)) return;
  pthread_mutex_lock(&g_init_mu);
  try {
    (void)config_locked();
  } catch (...) {  // reported when a heap is created
  }
  pthread_mutex_unlock(&g_init_mu);
}

// The slot of the heap serving `device` (-1: the caller's current device).
int heap_slot(int device) noexcept {
  read_config();
  if (!g_per_device.load(std::memory_order_acquire)) return 0;
  return device < 0 ? caller_device() : device;
}
}  // namespace

vmm::TransparentHeap* heap(int device) noexcept {
  device = heap_slot(device);
  if (device >= kMaxDevices) {
    log(Level::error, "device %d: tvmm serves devices 0 to %d only", device, kMaxDevices - 1);
    return nullptr;
  }
  if (auto* h = g_heaps[device].load(std::memory_order_acquire)) return h;
  pthread_mutex_lock(&g_init_mu);
  vmm::TransparentHeap* h = g_heaps[device].load(std::memory_order_acquire);
  if (h == nullptr && !g_failed[device]) {
    Inside inside;
    try {
      if (!g_fork_error.empty()) throw device_error(g_fork_error, "not_initialized");
      h = create_heap(device);
      g_heaps[device].store(h, std::memory_order_release);
      const int created = g_created_count.load(std::memory_order_relaxed);
      g_created[created].store(h, std::memory_order_release);
      g_created_slot[created].store(device, std::memory_order_release);
      g_created_count.store(created + 1, std::memory_order_release);
      if (h->places_by_use()) g_by_use.store(true, std::memory_order_release);
      if (!g_exit_registered) g_exit_registered = std::atexit(write_stats_at_exit) == 0;
    } catch (const std::exception& e) {
      g_failed[device] = true;
      try {
        g_init_error = e.what();
      } catch (...) {  // no memory for the reason: the log line below still has it
      }
    } catch (...) {
      g_failed[device] = true;
      g_init_error.clear();
    }
    if (g_failed[device]) log(Level::error, "cannot start transparent mode: %s", g_init_error.c_str());
  }
  pthread_mutex_unlock(&g_init_mu);
  return h;
}

vmm::TransparentHeap* heap_if_created(int device) noexcept {
  device = heap_slot(device);
  return device >= 0 && device < kMaxDevices ? g_heaps[device].load(std::memory_order_acquire) : nullptr;
}

const std::string& init_error() noexcept { return g_init_error; }

bool from_parent_before_fork(const void* ptr) noexcept {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  for (int i = 0; i < kMaxParents; ++i) {
    if (p >= g_parent_lo[i].load() && p < g_parent_hi[i].load()) return true;
  }
  return false;
}

int code_of_current_exception(const char* call) noexcept {
  const tvmm_status s = vmm::status_of_current_exception();
  const char* reason = tvmm_last_error();
  log(Level::warn, "%s: %s", call, reason);
  try {
    throw;
  } catch (const device_error& e) {
    if (e.error_name() == "not_supported") return kNotSupported;
  } catch (...) {
  }
  switch (s) {
    case TVMM_ERROR_INVALID_ARGUMENT: return kInvalidValue;
    case TVMM_ERROR_OUT_OF_MEMORY: return kOutOfMemory;
    case TVMM_ERROR_CONFIG: return kNotInitialized;
    default: return kUnknown;
  }
}

namespace {
int off(const char* call) noexcept {
  try {
    vmm::set_last_error(std::string(call) + ": transparent mode is off: " + init_error());
  } catch (...) {  // out of memory for the message: the log line still says why
  }
  log(Level::warn, "%s: transparent mode is off (%s)", call, init_error().c_str());
  return kNotInitialized;
}
}  // namespace

int allocate(const char* call, void** out, std::size_t bytes, int device) noexcept {
  if (out == nullptr) {
    log(Level::warn, "%s: the result pointer is NULL", call);
    return kInvalidValue;
  }
  *out = nullptr;
  if (bytes == 0) return kSuccess;
  vmm::TransparentHeap* h = heap(device);
  if (h == nullptr) return off(call);
  const RemapScope remap;
  return boundary(call, [&] {
    *out = h->allocate(bytes);
    log(Level::debug, "%s(%zu) = %p", call, bytes, *out);
    return kSuccess;
  });
}

bool free_if_ours(const char* call, void* ptr, FreeKind kind, void* stream, int* code) noexcept {
  if (vmm::TransparentHeap* h = heap_containing(ptr)) {
    const RemapScope remap;
    *code = boundary(call, [&] {
      if (kind == FreeKind::stream_ordered && h->device().properties().name == "cuda") {
        // A cudaStream_t is a CUstream; the null stream is the legacy default stream (CU_STREAM_LEGACY,
        // which names it in any context: the event is recorded with the device's primary context current).
        h->free_after(ptr, static_cast<device::StreamHandle>(stream != nullptr ? stream : kLegacyStream));
      } else if (kind == FreeKind::stream_ordered) {
        h->free_deferred(ptr);  // the simulator cannot wait on the program's streams: the next quiescent point
      } else {
        h->free(ptr);
      }
      return kSuccess;
    });
    return true;
  }
  if (from_parent_before_fork(ptr)) {
    vmm::set_last_error_text("the parent process allocated this before fork");
    log(Level::warn, "%s(%p): the parent process allocated this before fork; a child cannot use or free it", call, ptr);
    *code = kInvalidValue;
    return true;
  }
  return false;
}

int mem_info(const char* call, std::size_t* free, std::size_t* total) noexcept {
  if (free == nullptr || total == nullptr) {
    log(Level::warn, "%s: a result pointer is NULL", call);
    return kInvalidValue;
  }
  vmm::TransparentHeap* h = heap();
  if (h == nullptr) return off(call);
  return boundary(call, [&] {
    const auto u = h->usage();
    *total = u.capacity;
    *free = std::min(u.capacity - u.used, h->device_memory_reachable());
    return kSuccess;
  });
}

bool pitched_size(std::size_t width, std::size_t rows, std::size_t* pitch, std::size_t* bytes) noexcept {
  constexpr std::size_t kPitchAlignment = 512;
  if (width > SIZE_MAX - (kPitchAlignment - 1)) return false;
  *pitch = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (rows != 0 && *pitch > SIZE_MAX / rows) return false;
  *bytes = *pitch * rows;
  return true;
}

bool give_back_device_memory(const char* call, int device, std::size_t bytes) noexcept {
  vmm::TransparentHeap* h = heap_if_created(device);
  // With one heap for a configured device (device.ordinal = N), only that device's memory is its to give.
  if (h == nullptr || (device >= 0 && h->config().cuda_device >= 0 && h->config().cuda_device != device)) return false;
  std::size_t given = 0;
  const RemapScope remap;
  (void)boundary(call, [&] {
    given = h->give_back_device_memory(bytes);
    return kSuccess;
  });
  log(given != 0 ? Level::info : Level::warn,
      "%s found no device memory for %zu bytes: tvmm gave %zu bytes of its device budget back%s", call, bytes, given,
      given != 0 ? " (its coldest pages now live on the host) and tries again" : "");
  return given != 0;
}

namespace {
// The streams capturing now (under g_capture_mu; no allocation, so a begin is never lost), and how many.
constexpr int kMaxCaptures = 256;
pthread_mutex_t g_capture_mu = PTHREAD_MUTEX_INITIALIZER;
const void* g_capturing[kMaxCaptures];
int g_capturing_n = 0;
std::atomic<int> g_captures{0};
}  // namespace

void capture_began(const void* stream) noexcept {
  pthread_mutex_lock(&g_capture_mu);
  if (g_capturing_n < kMaxCaptures) {
    g_capturing[g_capturing_n++] = stream;
    g_captures.fetch_add(1, std::memory_order_release);
  } else {
    log(Level::error, "more than %d graph captures at once: tvmm stops moving pages until the process ends",
        kMaxCaptures);
    g_captures.fetch_add(1, std::memory_order_release);  // never ended: errs on the side of not synchronising
  }
  pthread_mutex_unlock(&g_capture_mu);
}

void capture_ended(const void* stream) noexcept {
  pthread_mutex_lock(&g_capture_mu);
  for (int i = 0; i < g_capturing_n; ++i) {
    if (g_capturing[i] == stream) {
      g_capturing[i] = g_capturing[--g_capturing_n];
      g_captures.fetch_sub(1, std::memory_order_release);
      break;
    }
  }
  pthread_mutex_unlock(&g_capture_mu);
}

bool capture_under_way() noexcept { return g_captures.load(std::memory_order_acquire) > 0; }

namespace {
// A forked child has no captures (its streams are its parent's), and no other thread that could hold the
// capture mutex.
void reset_captures_after_fork() noexcept {
  g_capture_mu = PTHREAD_MUTEX_INITIALIZER;
  g_capturing_n = 0;
  g_captures.store(0);
}
}  // namespace

int gate_of(std::uint64_t address) noexcept {
  const int n = g_created_count.load(std::memory_order_acquire);
  const auto* p = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address));
  for (int i = 0; i < n; ++i) {
    vmm::TransparentHeap* h = g_created[i].load(std::memory_order_acquire);
    if (h != nullptr && h->may_contain(p)) return g_created_slot[i].load(std::memory_order_acquire);
  }
  return -1;
}

namespace {
std::atomic<std::uint64_t> g_context_generation{1};  // advanced by every context destroyed
}  // namespace

void forget_context_devices() noexcept { g_context_generation.fetch_add(1, std::memory_order_acq_rel); }

int gate_of_current_device() noexcept {
  if (g_created_count.load(std::memory_order_acquire) == 0) return -1;
  if (!g_per_device.load(std::memory_order_acquire)) return 0;  // one heap, one gate
  // The device of the thread's current context, cached by context (a launch needs one; without one it
  // fails anyway, and the runtime's device is asked).
  using GetCurrent = int (*)(void**);
  using GetDevice = int (*)(int*);
  static auto* const get_current = reinterpret_cast<GetCurrent>(loaded_driver_symbol("cuCtxGetCurrent"));
  static auto* const get_device = reinterpret_cast<GetDevice>(loaded_driver_symbol("cuCtxGetDevice"));
  thread_local void* cached_ctx = nullptr;
  thread_local int cached_device = -1;
  thread_local std::uint64_t cached_generation = 0;
  void* ctx = nullptr;
  int device = -1;
  if (get_current != nullptr && get_current(&ctx) == kSuccess && ctx != nullptr) {
    const std::uint64_t generation = g_context_generation.load(std::memory_order_acquire);
    if (ctx == cached_ctx && generation == cached_generation) {
      device = cached_device;
    } else if (get_device != nullptr && get_device(&device) == kSuccess) {
      cached_ctx = ctx;
      cached_device = device;
      cached_generation = generation;
    }
  }
  if (device < 0) device = caller_device();
  return device >= 0 && device < kMaxDevices && g_heaps[device].load(std::memory_order_acquire) != nullptr ? device
                                                                                                           : -1;
}

bool any_heap_places_by_use() noexcept { return g_by_use.load(std::memory_order_acquire); }

void note_use(std::uint64_t address) noexcept {
  const int n = g_created_count.load(std::memory_order_acquire);
  const auto* p = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address));
  for (int i = 0; i < n; ++i) {
    vmm::TransparentHeap* h = g_created[i].load(std::memory_order_acquire);
    if (h != nullptr && h->may_contain(p)) {
      h->note_use(p);
      return;
    }
  }
}

void quiescent() noexcept {
  // The synchronising calls wait for the caller's current device (cudaDeviceSynchronize), or a stream of
  // it: that device's heap, never another device's (draining it would wait for work no one asked about).
  if (vmm::TransparentHeap* h = heap_if_created(-1)) {
    const RemapScope remap;
    (void)boundary("a quiescent point", [&] {
      h->maintain(false);
      return kSuccess;
    });
  }
}

}  // namespace tvmm::preload
