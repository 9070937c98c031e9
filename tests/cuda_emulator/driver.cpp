// The emulated driver: initialisation, settings, devices, contexts, error names and entry-point lookup.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "entry.hpp"

namespace cuemu {

Driver& Driver::get() {
  static Driver* d = new Driver;  // never destroyed: stream workers may outlive static destruction
  return *d;
}

std::vector<Export>& exports() {
  static std::vector<Export> table;
  return table;
}

std::vector<Context*>& context_stack() {
  thread_local std::vector<Context*> stack;
  return stack;
}

bool& in_host_callback() {
  thread_local bool flag = false;
  return flag;
}

Context* current() {
  auto& s = context_stack();
  return s.empty() ? nullptr : s.back();
}

namespace {
std::atomic<bool> g_initialized{false};
}

CUresult entry() noexcept {
  if (in_host_callback()) return CUDA_ERROR_NOT_PERMITTED;
  if (!g_initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  // cuda.h 2833 (CUDA_ERROR_ILLEGAL_ADDRESS): "This leaves the process in an inconsistent state and any
  // further CUDA work will return the same error. To continue using CUDA, the process must be
  // terminated and relaunched."
  return Driver::get().sticky_error();
}

bool Driver::begin_work() {
  std::lock_guard lk(work_mu);
  if (sticky.load() != CUDA_SUCCESS) return false;
  ++working;
  return true;
}

void Driver::fail(CUresult r) {
  std::lock_guard lk(work_mu);
  if (sticky.load() == CUDA_SUCCESS) sticky.store(r);
}

void Driver::end_work() {
  {
    std::lock_guard lk(work_mu);
    --working;
  }
  work_cv.notify_all();
}

void Driver::reenter_work() {
  std::lock_guard lk(work_mu);
  ++working;
}

CUresult Driver::sticky_error() {
  const CUresult r = sticky.load(std::memory_order_acquire);
  if (r == CUDA_SUCCESS) return r;
  std::unique_lock lk(work_mu);
  work_cv.wait(lk, [&] { return working == 0; });
  return r;
}

CUresult entry_ctx(Context** out) noexcept {
  if (const CUresult r = entry(); r != CUDA_SUCCESS) return r;
  Context* ctx = current();
  // cuda.h 2627: CUDA_ERROR_INVALID_CONTEXT "most frequently indicates that there is no context bound
  // to the current thread"; 2891: CUDA_ERROR_CONTEXT_IS_DESTROYED "the context current to the calling
  // thread has been destroyed using cuCtxDestroy, or is a primary context which has not yet been
  // initialized".
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = ctx;
  return CUDA_SUCCESS;
}

// --- settings ------------------------------------------------------------------------------------------

namespace {

bool parse_size(const char* text, std::size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "b") {
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return false;
  }
  *out = static_cast<std::size_t>(v * scale);
  return true;
}

// Reads one variable; a bad value is reported once on stderr and the default kept.
template <class T>
void read_env(const char* name, T* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return;
  bool ok = false;
  if constexpr (std::is_same_v<T, std::size_t>) {
    ok = parse_size(v, out);
  } else {
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    ok = end != v && *end == '\0';
    if (ok) *out = static_cast<T>(x);
  }
  if (!ok) std::fprintf(stderr, "cuda emulator: ignoring %s=%s (not a number)\n", name, v);
}

Settings read_settings() {
  Settings s;
  read_env("TVMM_CUEMU_DEVICES", &s.devices);
  read_env("TVMM_CUEMU_MEMORY", &s.memory);
  read_env("TVMM_CUEMU_DRIVER_VERSION", &s.driver_version);
  read_env("TVMM_CUEMU_SM", &s.sm);
  read_env("TVMM_CUEMU_GRANULARITY", &s.granularity);
  s.granularity_recommended = s.granularity;
  read_env("TVMM_CUEMU_GRANULARITY_RECOMMENDED", &s.granularity_recommended);
  s.host_granularity = s.granularity;
  read_env("TVMM_CUEMU_HOST_GRANULARITY", &s.host_granularity);
  read_env("TVMM_CUEMU_HOST_NUMA_ID", &s.host_numa_id);
  if (const char* off = std::getenv("TVMM_CUEMU_DISABLE")) {
    const std::string list = std::string(",") + off + ",";
    auto has = [&](const char* f) { return list.find(std::string(",") + f + ",") != std::string::npos; };
    s.vmm = !has("vmm");
    s.host_numa_vmm = !has("host_numa");
    s.managed = !has("managed");
    s.concurrent_managed = s.managed && !has("concurrent_managed");
  }
  if (const char* rdma = std::getenv("TVMM_CUEMU_RDMA")) s.rdma = std::strcmp(rdma, "1") == 0;
  s.devices = std::clamp(s.devices, 0, 16);
  return s;
}

}  // namespace

CUresult Driver::init(unsigned flags) {
  // cuda.h 5190: "Currently, the Flags parameter must be 0. If cuInit() has not been called, any function
  // from the driver API will return CUDA_ERROR_NOT_INITIALIZED."
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu);
  if (!initialized) {
    settings = read_settings();
    for (int i = 0; i < settings.devices; ++i) {
      auto d = std::make_unique<Device>();
      d->ordinal = i;
      d->capacity = settings.memory;
      const std::string per = "TVMM_CUEMU_MEMORY_" + std::to_string(i);
      read_env(per.c_str(), &d->capacity);
      devices.push_back(std::move(d));
    }
    initialized = true;
    g_initialized.store(true, std::memory_order_release);
  }
  return CUDA_SUCCESS;
}

std::size_t Driver::granularity(const CUmemAllocationProp& prop, bool recommended) const {
  if (prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA || prop.location.type == CU_MEM_LOCATION_TYPE_HOST) {
    return settings.host_granularity;
  }
  return recommended ? settings.granularity_recommended : settings.granularity;
}

// --- initialisation and devices ------------------------------------------------------------------------

namespace {

CUresult Init(unsigned flags) {
  if (in_host_callback()) return CUDA_ERROR_NOT_PERMITTED;
  return Driver::get().init(flags);
}
CUEMU_EXPORT("cuInit", 2000, Init);

CUresult DriverGetVersion(int* version) {
  // cuda.h: cuDriverGetVersion may be called before cuInit; it "returns CUDA_ERROR_INVALID_VALUE if
  // driverVersion is NULL". The version is read from the settings even before cuInit.
  if (in_host_callback()) return CUDA_ERROR_NOT_PERMITTED;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  *version = d.initialized ? d.settings.driver_version : read_settings().driver_version;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDriverGetVersion", 2020, DriverGetVersion);

Device* device_of(CUdevice dev) {
  Driver& d = Driver::get();
  if (dev < 0 || static_cast<std::size_t>(dev) >= d.devices.size()) return nullptr;
  return d.devices[static_cast<std::size_t>(dev)].get();
}

CUresult DeviceGetCount(int* count) {
  CUEMU_ENTER();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(Driver::get().devices.size());
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGetCount", 2000, DeviceGetCount);

CUresult DeviceGet(CUdevice* dev, int ordinal) {
  CUEMU_ENTER();
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_of(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGet", 2000, DeviceGet);

CUresult DeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  CUEMU_ENTER();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_of(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const Settings& s = Driver::get().settings;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = s.sm / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = s.sm % 10; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = s.vmm ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = s.vmm && s.host_numa_vmm ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *value = s.host_numa_id; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = s.managed ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = s.concurrent_managed ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *value = s.rdma ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x65 + 0x10 * d->ordinal; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    default:
      // cuda.h: an attribute outside the enum is CUDA_ERROR_INVALID_VALUE. The emulator answers 0 for the
      // valid ones it does not model (docs/cuda-emulator.md).
      if (attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *value = 0;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGetAttribute", 2000, DeviceGetAttribute);

CUresult DeviceGetName(char* name, int len, CUdevice dev) {
  CUEMU_ENTER();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device_of(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "tvmm CUDA emulator (sm_%d)", Driver::get().settings.sm);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGetName", 2000, DeviceGetName);

CUresult DeviceGetPCIBusId(char* id, int len, CUdevice dev) {
  CUEMU_ENTER();
  // cuda.h: "pciBusId ... in the following format [domain]:[bus]:[device].[function] where domain, bus,
  // device, and function are all hexadecimal values"; len is the buffer's length (13 is enough).
  if (id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_of(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(id, static_cast<std::size_t>(len), "0000:%02x:00.0", 0x65 + 0x10 * d->ordinal);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGetPCIBusId", 4010, DeviceGetPCIBusId);

CUresult DeviceTotalMem(std::size_t* bytes, CUdevice dev) {
  CUEMU_ENTER();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_of(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = d->capacity;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceTotalMem", 3020, DeviceTotalMem);

// --- contexts ------------------------------------------------------------------------------------------

// All or nothing (std::bad_alloc, or std::system_error from the stream's thread): registered last, once its
// NULL stream's worker runs, and unregistered and freed if that worker cannot start.
Context* make_context(Device* dev, bool primary) {
  auto c = std::make_unique<Context>();
  c->device = dev;
  c->primary = primary;
  c->legacy = std::make_unique<Stream>();
  c->legacy->ctx = c.get();
  c->legacy->legacy = true;
  auto& contexts = Driver::get().contexts;
  const auto at = contexts.insert(c.get()).first;  // may throw: nothing started yet
  try {
    start(c->legacy.get());
  } catch (...) {
    contexts.erase(at);
    throw;
  }
  return c.release();
}

CUresult DevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUEMU_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Device* device = device_of(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (device->primary == nullptr) device->primary = make_context(device, true);
  // cuda.h (cuDevicePrimaryCtxRetain): "Retains the primary context on the device ... the primary
  // context ... will be created if it does not exist". A retain after the last release starts it again.
  if (device->primary_refs++ == 0) device->primary->destroyed = false;
  *pctx = reinterpret_cast<CUcontext>(device->primary);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDevicePrimaryCtxRetain", 7000, DevicePrimaryCtxRetain);

CUresult DevicePrimaryCtxRelease(CUdevice dev) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Device* device = device_of(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  // cuda.h (cuDevicePrimaryCtxRelease): "Releases the primary context interop on the device ... The
  // context is automatically reset once the last reference to it is released"; releasing one not
  // retained is CUDA_ERROR_INVALID_CONTEXT.
  if (device->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--device->primary_refs == 0) device->primary->destroyed = true;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDevicePrimaryCtxRelease", 7000, DevicePrimaryCtxRelease);
CUEMU_EXPORT("cuDevicePrimaryCtxRelease", 11000, DevicePrimaryCtxRelease);

CUresult DevicePrimaryCtxGetState(CUdevice dev, unsigned* flags, int* active) {
  CUEMU_ENTER();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Device* device = device_of(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *flags = device->primary_flags;
  *active = device->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDevicePrimaryCtxGetState", 7000, DevicePrimaryCtxGetState);

CUresult CtxCreate(CUcontext* pctx, unsigned flags, CUdevice dev) {
  CUEMU_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  Context* c = nullptr;
  // Room on the thread's context stack first: once made, the context must be pushed without failing.
  context_stack().reserve(context_stack().size() + 1);
  {
    std::lock_guard lk(d.mu);
    Device* device = device_of(dev);
    if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    (void)flags;
    c = make_context(device, false);
  }
  // cuda.h (cuCtxCreate): "The context is created with a usage count of 1 and the caller of cuCtxCreate()
  // must call cuCtxDestroy() ... This function ... makes it current to the calling thread" (pushed).
  context_stack().push_back(c);
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxCreate", 3020, CtxCreate);

CUresult CtxCreateV4(CUcontext* pctx, CUctxCreateParams* params, unsigned flags, CUdevice dev) {
  if (params != nullptr && (params->execAffinityParams != nullptr || params->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // execution affinity and CIG are not emulated
  }
  return CtxCreate(pctx, flags, dev);
}
CUEMU_EXPORT("cuCtxCreate", 12050, CtxCreateV4);

bool live(Context* c) { return Driver::get().contexts.count(c) != 0; }

CUresult CtxDestroy(CUcontext ctx) {
  CUEMU_ENTER();
  auto* c = reinterpret_cast<Context*>(ctx);
  Driver& d = Driver::get();
  {
    std::lock_guard lk(d.mu);
    if (c == nullptr || !live(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    c->destroyed = true;
  }
  // cuda.h (cuCtxDestroy): "If ctx is current to the calling thread then ctx will also be popped from
  // the current thread's context stack (as though cuCtxPopCurrent() were called)".
  auto& stack = context_stack();
  if (!stack.empty() && stack.back() == c) stack.pop_back();
  wait_idle(c->legacy.get());
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxDestroy", 4000, CtxDestroy);

CUresult CtxPushCurrent(CUcontext ctx) {
  CUEMU_ENTER();
  auto* c = reinterpret_cast<Context*>(ctx);
  std::lock_guard lk(Driver::get().mu);
  if (c == nullptr || !live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  context_stack().push_back(c);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxPushCurrent", 4000, CtxPushCurrent);

CUresult CtxPopCurrent(CUcontext* pctx) {
  CUEMU_ENTER();
  auto& stack = context_stack();
  // cuda.h (cuCtxPopCurrent): pops the current context; with none, CUDA_ERROR_INVALID_CONTEXT.
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxPopCurrent", 4000, CtxPopCurrent);

CUresult CtxSetCurrent(CUcontext ctx) {
  CUEMU_ENTER();
  auto* c = reinterpret_cast<Context*>(ctx);
  auto& stack = context_stack();
  // cuda.h (cuCtxSetCurrent): "Binds the specified CUDA context to the calling CPU thread. If ctx is
  // NULL then the CUDA context previously bound to the calling CPU thread is unbound ... If there exists
  // a CUDA context stack on the calling CPU thread, this will replace the top of that stack with ctx."
  if (c == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard lk(Driver::get().mu);
    if (!live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (stack.empty()) {
    stack.push_back(c);
  } else {
    stack.back() = c;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxSetCurrent", 4000, CtxSetCurrent);

CUresult CtxGetCurrent(CUcontext* pctx) {
  CUEMU_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(current());  // NULL when none is bound: not an error
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxGetCurrent", 4000, CtxGetCurrent);

CUresult CtxGetDevice(CUdevice* dev) {
  CUEMU_ENTER();
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *dev = c->device->ordinal;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxGetDevice", 2000, CtxGetDevice);

// CUDA 13's form (cudaTypedefs.h PFN_cuCtxGetDevice_v13000): the context is an argument; NULL = current.
CUresult CtxGetDeviceV13(CUdevice* dev, CUcontext ctx) {
  if (ctx == nullptr) return CtxGetDevice(dev);
  CUEMU_ENTER();
  auto* c = reinterpret_cast<Context*>(ctx);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(Driver::get().mu);
  if (!live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = c->device->ordinal;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuCtxGetDevice", 13000, CtxGetDeviceV13);

CUresult CtxSynchronize() {
  CUEMU_ENTER_CTX(ctx);
  // cuda.h \note_capture: a context-wide synchronisation is not allowed while any stream captures.
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  std::vector<Stream*> all;
  {
    std::lock_guard lk(Driver::get().mu);
    all = ctx->streams;
  }
  wait_idle(ctx->legacy.get());
  for (Stream* s : all) wait_idle(s);
  return Driver::get().sticky_error();
}
CUEMU_EXPORT("cuCtxSynchronize", 2000, CtxSynchronize);

CUresult CtxSynchronizeV13(CUcontext ctx) {
  if (ctx == nullptr) return CtxSynchronize();
  CUEMU_ENTER();
  auto& stack = context_stack();
  stack.push_back(reinterpret_cast<Context*>(ctx));
  const CUresult r = CtxSynchronize();
  stack.pop_back();
  return r;
}
CUEMU_EXPORT("cuCtxSynchronize", 13000, CtxSynchronizeV13);

// --- errors --------------------------------------------------------------------------------------------

struct ErrorName {
  CUresult code;
  const char* name;
};
constexpr ErrorName kErrors[] = {
#define CUEMU_ERROR(name) {name, #name},
#include "cuda_errors.inc"
#undef CUEMU_ERROR
};

const char* error_name(CUresult r) {
  for (const auto& e : kErrors) {
    if (e.code == r) return e.name;
  }
  return nullptr;
}

CUresult GetErrorName(CUresult error, const char** name) {
  // cuda.h (cuGetErrorName): "If the error code is not recognized, CUDA_ERROR_INVALID_VALUE will be
  // returned and *pStr will be set to the NULL value." Usable before cuInit.
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = error_name(error);
  return *name != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUEMU_EXPORT("cuGetErrorName", 6000, GetErrorName);

CUresult GetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = error_name(error);  // the emulator's description is the name itself
  return *text != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUEMU_EXPORT("cuGetErrorString", 6000, GetErrorString);

// --- entry points --------------------------------------------------------------------------------------

CUresult GetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  // cuda.h 24286-24347 (cuGetProcAddress): the variant for the newest ABI introduced at or before
  // `cudaVersion`; "If the specified CUDA version is greater than the driver version, the API will
  // return CUDA_ERROR_INVALID_VALUE"; "CUDA_SUCCESS and ... pfn ... NULL if the requested driver function
  // is not supported on the platform, no ABI compatible driver function exists for the specified
  // cudaVersion or if the driver symbol is invalid", with symbolStatus SYMBOL_NOT_FOUND or
  // VERSION_NOT_SUFFICIENT. PER_THREAD_DEFAULT_STREAM prefers _ptsz/_ptds variants, "If a per-thread
  // version is not found, the API will return the legacy version". Callable before cuInit.
  if (in_host_callback()) return CUDA_ERROR_NOT_PERMITTED;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int driver = 0;
  (void)DriverGetVersion(&driver);
  *pfn = nullptr;
  if (version > driver) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const Export* best = nullptr;
  bool found = false;
  for (const auto& e : exports()) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    found = true;
    if (e.version > version || (e.per_thread && !per_thread)) continue;
    const bool better = best == nullptr || e.version > best->version ||
                        (e.version == best->version && e.per_thread && !best->per_thread);
    if (better) best = &e;
  }
  if (best != nullptr) *pfn = best->fn;
  if (status != nullptr) {
    *status = best != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
              : found         ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuGetProcAddress", 12000, GetProcAddress);

CUresult GetProcAddressV1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return GetProcAddress(symbol, pfn, version, flags, nullptr);
}
CUEMU_EXPORT("cuGetProcAddress", 11030, GetProcAddressV1);

}  // namespace

}  // namespace cuemu
