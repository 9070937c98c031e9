// The emulated driver's memory: virtual memory management (reserve, create, map, set access, unmap,
// release), classic device allocations, pinned and registered host memory, managed memory, memory
// information and pointer attributes. Rules are quoted from cuda.h (CUDA 13.0) with its line numbers.
// In this file, in order: the Driver's own address-space and mapping bookkeeping (reserve_address_space,
// reservation_of, unmap), then the entry points, by the sections marked "// ---": virtual memory
// management, classic device memory, stream-ordered allocation, host memory, managed memory, pointers.
// Entry points never throw (entry.hpp, Guarded: std::bad_alloc becomes CUDA_ERROR_OUT_OF_MEMORY); chunk
// creation allocates before it takes anything, the other calls here are not yet checked for that.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "entry.hpp"

namespace cuemu {

namespace {

std::size_t host_page() {
  static const auto p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}
bool is_pow2(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }
void* as_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

// Puts inaccessible address space back over [va, va + size): the state of reserved, unmapped VA.
void protect_none(CUdeviceptr va, std::size_t size) {
  (void)::mmap(as_ptr(va), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

// base -> per 2 MiB page: -1 host, else device. Guarded by Driver::mu. Never destroyed, like the
// Driver: a prefetch still queued on a stream worker at exit migrates pages after static destruction.
std::map<std::uintptr_t, std::vector<int>>& managed_pages() {
  static auto* pages = new std::map<std::uintptr_t, std::vector<int>>;
  return *pages;
}
constexpr std::size_t kManagedPage = std::size_t{2} << 20;

}  // namespace

CUdeviceptr Driver::reserve_address_space(std::size_t size, std::size_t align, CUdeviceptr hint) {
  void* p = ::mmap(as_ptr(hint), size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 0;
  const auto raw = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t base = (raw + align - 1) / align * align;
  if (base > raw) ::munmap(p, base - raw);
  if (base + size < raw + size + align) ::munmap(reinterpret_cast<void*>(base + size), raw + align - base);
  return static_cast<CUdeviceptr>(base);
}

const Reservation* Driver::reservation_of(CUdeviceptr va, std::size_t len, CUdeviceptr* base) const {
  auto it = reservations.upper_bound(va);
  if (it == reservations.begin()) return nullptr;
  --it;
  if (va - it->first >= it->second.size || len > it->second.size - (va - it->first)) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

HostRange* Driver::managed_of(std::uintptr_t p, std::size_t len, std::uintptr_t* base) {
  auto it = host.upper_bound(p);
  if (it == host.begin()) return nullptr;
  --it;
  if (it->second.kind != HostKind::managed || p - it->first >= it->second.size ||
      len > it->second.size - (p - it->first)) {
    return nullptr;
  }
  if (base != nullptr) *base = it->first;
  return &it->second;
}

bool Driver::translate(CUdeviceptr va, std::size_t len, const Device* dev, bool write, std::vector<Span>* out) {
  if (len == 0) return true;
  if (std::uintptr_t base = 0; managed_of(static_cast<std::uintptr_t>(va), len, &base) != nullptr) {
    // Managed memory is one range of host memory that every device with concurrent managed access
    // reaches (the emulator does not migrate bytes, only counts residency): a span per managed page,
    // local where the page is resident on `dev`.
    const std::vector<int>& pages = managed_pages()[base];
    while (len > 0) {
      const std::size_t page = (va - base) / kManagedPage;
      const std::size_t here = std::min<std::size_t>(len, (page + 1) * kManagedPage - (va - base));
      out->push_back({static_cast<std::byte*>(as_ptr(va)), here, pages[page] == dev->ordinal});
      va += here;
      len -= here;
    }
    return true;
  }
  const std::uint64_t bit = std::uint64_t{1} << dev->ordinal;
  while (len > 0) {
    auto it = mappings.upper_bound(va);
    if (it == mappings.begin()) return false;
    --it;
    const Mapping& m = it->second;
    if (va - it->first >= m.size) return false;                                         // a hole: not mapped
    if ((m.device_rw & bit) == 0 && (write || (m.device_ro & bit) == 0)) return false;  // no access granted
    const std::size_t here = std::min<std::size_t>(len, m.size - (va - it->first));
    out->push_back({m.chunk->view + m.offset + (va - it->first), here, m.chunk->charged == dev});
    va += here;
    len -= here;
  }
  return true;
}

void Driver::report_fault(const char* what, CUdeviceptr va, std::size_t len, const Device* dev, bool write) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  // The first bad byte: a hole, or a mapping this device has no (write) access to.
  std::string why = "is not mapped";
  CUdeviceptr at = va;
  const std::uint64_t bit = std::uint64_t{1} << dev->ordinal;
  while (at < va + len) {
    auto it = mappings.upper_bound(at);
    if (it == mappings.begin() || at - std::prev(it)->first >= std::prev(it)->second.size) break;
    const Mapping& m = std::prev(it)->second;
    if ((m.device_rw & bit) == 0 && (write || (m.device_ro & bit) == 0)) {
      why = "is mapped, but device " + std::to_string(dev->ordinal) + " was given no " + (write ? "write " : "") +
            "access (cuMemSetAccess)";
      break;
    }
    at = std::prev(it)->first + m.size;
  }
  std::fprintf(stderr,
               "cuda emulator: illegal address: %s [0x%llx, +%zu) on device %d: 0x%llx %s; from now on every call "
               "returns CUDA_ERROR_ILLEGAL_ADDRESS\n",
               what, static_cast<unsigned long long>(va), len, dev->ordinal, static_cast<unsigned long long>(at),
               why.c_str());
}

void Driver::free_chunk(Chunk* c) {
  if (c->view != nullptr) ::munmap(c->view, c->size);
  if (c->fd >= 0) ::close(c->fd);
  if (c->charged != nullptr) c->charged->used -= c->size;
  for (auto it = chunks.begin(); it != chunks.end(); ++it) {
    if (it->second.get() == c) {
      chunks.erase(it);
      break;
    }
  }
}

bool Driver::unmap(CUdeviceptr va, std::size_t size) {
  // cuda.h 13056 (cuMemUnmap): "The range must be the entire contiguous address range that was mapped
  // to. In other words, cuMemUnmap cannot unmap a sub-range of an address range mapped by cuMemCreate /
  // cuMemMap." A run of whole mappings is accepted, as the driver does for ranges mapped piecewise.
  CUdeviceptr at = va;
  std::vector<CUdeviceptr> whole;
  while (at < va + size) {
    auto it = mappings.find(at);
    if (it == mappings.end() || it->second.size > va + size - at) return false;
    whole.push_back(at);
    at += it->second.size;
  }
  if (whole.empty()) return false;
  for (CUdeviceptr m : whole) {
    Mapping& mp = mappings[m];
    if (mp.host) protect_none(m, mp.size);
    Chunk* c = mp.chunk;
    mappings.erase(m);
    // "Any backing memory allocations will be freed if there are no existing mappings and there are no
    // unreleased memory handles."
    if (--c->mappings == 0 && c->released) free_chunk(c);
  }
  return true;
}

namespace {

// --- virtual memory management --------------------------------------------------------------------------

CUresult MemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr addr,
                           unsigned long long flags) {
  CUEMU_ENTER();
  // cuda.h 12724-12747: "The size and address parameters must be a multiple of the host page size and
  // the alignment must be a power of two or zero for default alignment ... flags - Currently unused,
  // must be zero".
  if (ptr == nullptr || size == 0 || size % host_page() != 0 || addr % host_page() != 0 || flags != 0 ||
      (alignment != 0 && !is_pow2(alignment))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if (!d.settings.vmm) return CUDA_ERROR_NOT_SUPPORTED;
  const std::size_t align = std::max(alignment == 0 ? d.settings.granularity : alignment, host_page());
  const CUdeviceptr base = Driver::reserve_address_space(size, align, addr);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  d.reservations[base] = Reservation{size, false};
  *ptr = base;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemAddressReserve", 10020, MemAddressReserve);

CUresult MemAddressFree(CUdeviceptr ptr, std::size_t size) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h 12751: "The size must match what was given to memAddressReserve and the ptr given must match
  // what was returned from memAddressReserve." The emulator also refuses a reservation that still has
  // mappings (the driver's behaviour there is undocumented; unmapping first is the documented order).
  auto it = d.reservations.find(ptr);
  if (it == d.reservations.end() || it->second.size != size || it->second.internal) return CUDA_ERROR_INVALID_VALUE;
  auto m = d.mappings.lower_bound(ptr);
  if (m != d.mappings.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  ::munmap(as_ptr(ptr), size);
  d.reservations.erase(it);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemAddressFree", 10020, MemAddressFree);

// Checks an allocation's properties; the device (or null for host memory) it is charged to in *dev.
CUresult check_prop(const Driver& d, const CUmemAllocationProp* prop, Device** dev) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  *dev = nullptr;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (prop->location.id < 0 || static_cast<std::size_t>(prop->location.id) >= d.devices.size()) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
      *dev = d.devices[static_cast<std::size_t>(prop->location.id)].get();
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      // cuda.h 12791: "set ... type to CU_MEM_LOCATION_TYPE_HOST_NUMA and ... id must specify the NUMA
      // ID of the CPU"; only where the device supports host-NUMA VMM memory.
      if (!d.settings.host_numa_vmm) return CUDA_ERROR_NOT_SUPPORTED;
      if (prop->location.id != d.settings.host_numa_id) return CUDA_ERROR_INVALID_VALUE;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
      // cuda.h 12786: "HOST allocations are not IPC capable and ... requestedHandleTypes must be 0".
      if (!d.settings.host_numa_vmm) return CUDA_ERROR_NOT_SUPPORTED;
      return prop->requestedHandleTypes == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      // cuda.h 12795: "Specifying CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT as the CUmemLocation::type will
      // result in CUDA_ERROR_INVALID_VALUE."
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                     CUmemAllocationGranularity_flags option) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Device* dev = nullptr;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = check_prop(d, prop, &dev); r != CUDA_SUCCESS) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = d.granularity(*prop, option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemGetAllocationGranularity", 10020, MemGetAllocationGranularity);

CUresult create_chunk(Driver& d, std::size_t size, const CUmemAllocationProp& prop, Device* dev, Chunk** out) {
  if (dev != nullptr && size > dev->capacity - dev->used) return CUDA_ERROR_OUT_OF_MEMORY;
  auto c = std::make_unique<Chunk>();
  // The handle's entry first: allocating it may throw (Guarded: CUDA_ERROR_OUT_OF_MEMORY), and must do
  // so before a file, a mapping or the device's memory is taken.
  const auto slot = d.chunks.try_emplace(d.next_chunk).first;
  auto fail = [&] {
    d.chunks.erase(slot);
    return CUDA_ERROR_OUT_OF_MEMORY;
  };
  c->prop = prop;
  c->size = size;
  c->fd = ::memfd_create("cuda-emulator-chunk", MFD_CLOEXEC);
  if (c->fd < 0 || ::ftruncate(c->fd, static_cast<off_t>(size)) != 0) {
    if (c->fd >= 0) ::close(c->fd);
    return fail();
  }
  void* view = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, c->fd, 0);
  if (view == MAP_FAILED) {
    ::close(c->fd);
    return fail();
  }
  c->view = static_cast<std::byte*>(view);
  c->charged = dev;
  if (dev != nullptr) dev->used += size;
  *out = c.get();
  slot->second = std::move(c);
  ++d.next_chunk;
  return CUDA_SUCCESS;
}

std::uint64_t handle_of(const Driver& d, const Chunk* c) {
  for (const auto& [h, p] : d.chunks) {
    if (p.get() == c) return h;
  }
  return 0;
}

CUresult MemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                   unsigned long long flags) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Device* dev = nullptr;
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "flags ... must be zero now"
  if (const CUresult r = check_prop(d, prop, &dev); r != CUDA_SUCCESS) return r;
  if (!d.settings.vmm) return CUDA_ERROR_NOT_SUPPORTED;
  // CUmemAllocationProp::allocFlags.gpuDirectRDMACapable needs
  // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (cuda.h 839).
  if (prop->allocFlags.gpuDirectRDMACapable != 0 && (!d.settings.rdma || dev == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // cuda.h 12776: "The size of this allocation must be a multiple of the the value given via
  // cuMemGetAllocationGranularity with the CU_MEM_ALLOC_GRANULARITY_MINIMUM flag" (for these properties).
  const std::size_t g = d.granularity(*prop, false);
  if (size == 0 || size % g != 0) return CUDA_ERROR_INVALID_VALUE;
  Chunk* c = nullptr;
  if (const CUresult r = create_chunk(d, size, *prop, dev, &c); r != CUDA_SUCCESS) return r;
  *handle = handle_of(d, c);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemCreate", 10020, MemCreate);

Chunk* chunk_of(Driver& d, CUmemGenericAllocationHandle h) {
  auto it = d.chunks.find(h);
  return it == d.chunks.end() || it->second->released ? nullptr : it->second.get();
}

CUresult MemRelease(CUmemGenericAllocationHandle handle) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h 12840-12848 (cuMemRelease): "The memory allocation will be freed when all outstanding
  // mappings to the memory are unmapped ... The generic memory handle can be freed when there are still
  // outstanding mappings". An unknown handle is undefined behaviour there; here CUDA_ERROR_INVALID_VALUE.
  Chunk* c = chunk_of(d, handle);
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [base, chunk] : d.allocs) {
    if (chunk == c) return CUDA_ERROR_INVALID_VALUE;  // cuMemAlloc's own chunk: cuMemFree frees it
  }
  if (--c->refs > 0) return CUDA_SUCCESS;  // retained handles outstanding
  c->released = true;
  if (c->mappings == 0) d.free_chunk(c);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemRelease", 10020, MemRelease);

CUresult MemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h 13243-13262: "The handle is guaranteed to be the same handle value used to map the memory. If
  // the address requested is not mapped, the function will fail. The returned handle must be released with
  // corresponding number of calls to cuMemRelease ... addr, can be any address in a range previously
  // mapped by cuMemMap".
  const auto va = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(addr));
  auto it = d.mappings.upper_bound(va);
  if (handle == nullptr || it == d.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (va - it->first >= it->second.size) return CUDA_ERROR_INVALID_VALUE;
  Chunk* c = it->second.chunk;
  c->released = false;  // a handle again, whatever was released before
  ++c->refs;
  *handle = handle_of(d, c);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemRetainAllocationHandle", 11000, MemRetainAllocationHandle);

CUresult MemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long flags) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Chunk* c = chunk_of(d, handle);
  // cuda.h 12866-12918 (cuMemMap): "This range must be an address reservation previously reserved with
  // cuMemAddressReserve, and offset + size must be less than the size of the memory allocation. Both ptr,
  // size, and offset must be a multiple of the value given via cuMemGetAllocationGranularity with the
  // CU_MEM_ALLOC_GRANULARITY_MINIMUM flag ... cuMemMap can only create mappings on VA range reservations
  // that are not currently mapped ... offset ... Note: currently must be zero ... flags ... must be zero".
  if (c == nullptr || flags != 0 || offset != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t g = d.granularity(c->prop, false);
  if (ptr % g != 0 || size % g != 0 || offset + size > c->size) return CUDA_ERROR_INVALID_VALUE;
  if (d.reservation_of(ptr, size) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto next = d.mappings.lower_bound(ptr);
  if (next != d.mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // overlaps
  if (next != d.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  // "calling cuMemMap does not make the address accessible": no access until cuMemSetAccess.
  d.mappings[ptr] = Mapping{size, c, offset, 0, 0, false};
  ++c->mappings;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemMap", 10020, MemMap);

CUresult MemUnmap(CUdeviceptr ptr, std::size_t size) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  for (const auto& [base, chunk] : d.allocs) {
    if (ptr >= base && ptr < base + chunk->size) return CUDA_ERROR_INVALID_VALUE;  // cuMemAlloc'd memory
  }
  return d.unmap(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUEMU_EXPORT("cuMemUnmap", 10020, MemUnmap);

bool host_located(const Chunk& c) {
  return c.prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA || c.prop.location.type == CU_MEM_LOCATION_TYPE_HOST;
}

CUresult MemSetAccess(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc, std::size_t count) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h 13088-13116 (cuMemSetAccess): "The range must be a fully mapped address range containing all
  // allocations created by cuMemMap / cuMemCreate. Users cannot specify CU_MEM_LOCATION_TYPE_HOST_NUMA
  // accessibility for allocations created on with other location types." Here: a run of whole mappings.
  std::vector<Mapping*> run;
  for (CUdeviceptr at = ptr; at < ptr + size;) {
    auto it = d.mappings.find(at);
    if (it == d.mappings.end() || it->second.size > ptr + size - at) return CUDA_ERROR_INVALID_VALUE;
    run.push_back(&it->second);
    at += it->second.size;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& a = desc[i];
    if (a.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && a.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        a.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (a.location.id < 0 || static_cast<std::size_t>(a.location.id) >= d.devices.size()) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
    } else if (a.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA || a.location.type == CU_MEM_LOCATION_TYPE_HOST) {
      for (const Mapping* m : run) {
        if (!host_located(*m->chunk)) return CUDA_ERROR_INVALID_VALUE;
      }
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  CUdeviceptr at = ptr;
  for (Mapping* m : run) {
    for (std::size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc& a = desc[i];
      if (a.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        const std::uint64_t bit = std::uint64_t{1} << a.location.id;
        m->device_rw = a.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? m->device_rw | bit : m->device_rw & ~bit;
        m->device_ro = a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? m->device_ro | bit : m->device_ro & ~bit;
        continue;
      }
      // Host access to host-located memory: the bytes appear at the device address for host code.
      if (a.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
        if (m->host) protect_none(at, m->size);
        m->host = false;
      } else {
        const int prot = a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_READ | PROT_WRITE;
        if (::mmap(as_ptr(at), m->size, prot, MAP_SHARED | MAP_FIXED, m->chunk->fd, static_cast<off_t>(m->offset)) ==
            MAP_FAILED) {
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        m->host = true;
      }
    }
    at += m->size;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemSetAccess", 10020, MemSetAccess);

CUresult MemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = d.mappings.upper_bound(ptr);
  if (it == d.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (ptr - it->first >= it->second.size) return CUDA_ERROR_INVALID_VALUE;
  const Mapping& m = it->second;
  if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (location->id < 0 || static_cast<std::size_t>(location->id) >= d.devices.size()) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    const std::uint64_t bit = std::uint64_t{1} << location->id;
    *flags = (m.device_rw & bit) != 0   ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
             : (m.device_ro & bit) != 0 ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                        : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  }
  *flags = m.host ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemGetAccess", 10020, MemGetAccess);

CUresult MemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  Chunk* c = chunk_of(d, handle);
  if (prop == nullptr || c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = c->prop;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemGetAllocationPropertiesFromHandle", 10020, MemGetAllocationPropertiesFromHandle);

// --- classic device memory -----------------------------------------------------------------------------

// A classic allocation of `bytes` on `dev`, mapped at a reservation of its own (the driver mutex held).
CUresult alloc_device(Driver& d, Context* ctx, Device* dev, std::size_t bytes, CUdeviceptr* dptr) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev->ordinal;
  const std::size_t g = d.settings.granularity;
  const std::size_t size = (bytes + g - 1) / g * g;
  Chunk* c = nullptr;
  if (const CUresult r = create_chunk(d, size, prop, dev, &c); r != CUDA_SUCCESS) return r;
  const CUdeviceptr base = Driver::reserve_address_space(size, g, 0);
  if (base == 0) {
    d.free_chunk(c);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d.reservations[base] = Reservation{size, true};
  d.mappings[base] = Mapping{size, c, 0, std::uint64_t{1} << dev->ordinal, 0, false};
  c->mappings = 1;
  c->allocated_in = ctx;
  d.allocs[base] = c;
  *dptr = base;
  return CUDA_SUCCESS;
}

// Frees the classic allocation at `dptr`, unmapping it and its reservation (the driver mutex held); false
// when `dptr` is not the start of one.
bool free_device(Driver& d, CUdeviceptr dptr) {
  auto it = d.allocs.find(dptr);
  if (it == d.allocs.end()) return false;
  Chunk* c = it->second;
  d.allocs.erase(it);
  c->released = true;
  d.unmap(dptr, c->size);  // frees the chunk
  auto r = d.reservations.find(dptr);
  ::munmap(as_ptr(dptr), r->second.size);
  d.reservations.erase(r);
  return true;
}

CUresult MemAlloc(CUdeviceptr* dptr, std::size_t bytes) {
  CUEMU_ENTER_CTX(ctx);
  // cuda.h (cuMemAlloc): "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE."
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  return alloc_device(d, ctx, ctx->device, bytes, dptr);
}
CUEMU_EXPORT("cuMemAlloc", 3020, MemAlloc);

// cuda.h 8611-8671 (cuMemAllocPitch): "ElementSizeBytes may be 4, 8 or 16"; the pitch "is guaranteed to
// match or exceed the alignment requirement for texture binding": rows padded to 512 bytes here (the
// texture pitch alignment of a compute capability 9.0 device). An empty array is an invalid value, as an
// allocation of 0 bytes is for cuMemAlloc.
CUresult MemAllocPitch(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width, std::size_t height, unsigned element) {
  CUEMU_ENTER_CTX(ctx);
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
      (element != 4 && element != 8 && element != 16) || width > SIZE_MAX - 511) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::size_t p = (width + 511) / 512 * 512;
  if (p > SIZE_MAX / height) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  const CUresult r = alloc_device(d, ctx, ctx->device, p * height, dptr);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}
CUEMU_EXPORT("cuMemAllocPitch", 3020, MemAllocPitch);

// --- stream-ordered allocation (memory pools) ------------------------------------------------------------
// Each device's default pool only (cuDeviceGetDefaultMemPool); no pool is created or configured. The memory
// exists from the call on (earlier than stream order requires, which no correct program can tell); a free
// happens when its stream gets there. Inside a capture both are refused (the emulator has no memory
// nodes: stricter than the driver, which records them in the graph).
// cuda.h 13300-13340: cuMemAllocAsync "Inserts an allocation operation into hStream. A pointer to the
// allocated memory is returned immediately ... The allocation comes from the memory pool current to the
// stream's device"; cuMemFreeAsync "Inserts a free operation into hStream. The allocation must not be
// accessed after stream execution reaches the free."

Device* pool_device(Driver& d, CUmemoryPool pool) {
  const auto id = reinterpret_cast<std::uintptr_t>(pool);
  if (id < 0x1000 || id - 0x1000 >= d.devices.size()) return nullptr;
  return d.devices[id - 0x1000].get();
}

CUresult DeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || static_cast<std::size_t>(dev) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x1000} + static_cast<std::uintptr_t>(dev));
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuDeviceGetDefaultMemPool", 11020, DeviceGetDefaultMemPool);

CUresult alloc_from_pool(Context* ctx, CUdeviceptr* dptr, std::size_t bytes, Device* dev, CUstream stream) {
  // cuda.h (cuMemAllocAsync): CUDA_ERROR_INVALID_VALUE for a null pointer; a 0-byte request, as cuMemAlloc.
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard slk(s->mu);
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  }
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  return alloc_device(d, ctx, dev, bytes, dptr);
}

CUresult MemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Device* dev = pool_device(Driver::get(), pool);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from_pool(ctx, dptr, bytes, dev, stream);
}
CUEMU_EXPORT("cuMemAllocFromPoolAsync", 11020, MemAllocFromPoolAsync);

CUresult MemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  return alloc_from_pool(ctx, dptr, bytes, ctx->device, stream);
}
CUEMU_EXPORT("cuMemAllocAsync", 11020, MemAllocAsync);

CUresult MemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Driver& d = Driver::get();
  {
    std::lock_guard lk(d.mu);
    if (d.allocs.count(dptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard slk(s->mu);
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return enqueue(s, [dptr] {
    Driver& dr = Driver::get();
    std::lock_guard lk(dr.mu);
    (void)free_device(dr, dptr);  // false: freed meanwhile by cuMemFree (the program's bug)
    return CUDA_SUCCESS;
  });
}
CUEMU_EXPORT("cuMemFreeAsync", 11020, MemFreeAsync);

CUresult free_managed(Driver& d, std::uintptr_t base);

CUresult MemFree(CUdeviceptr dptr) {
  CUEMU_ENTER_CTX(ctx);
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  if (dptr == 0) return CUDA_SUCCESS;
  if (free_device(d, dptr)) return CUDA_SUCCESS;
  if (auto it = d.host.find(static_cast<std::uintptr_t>(dptr));
      it != d.host.end() && it->second.kind == HostKind::managed) {
    return free_managed(d, it->first);
  }
  return CUDA_ERROR_INVALID_VALUE;  // not the start of a cuMemAlloc or cuMemAllocManaged allocation
}
CUEMU_EXPORT("cuMemFree", 3020, MemFree);

CUresult MemGetInfo(std::size_t* free, std::size_t* total) {
  CUEMU_ENTER_CTX(ctx);
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(Driver::get().mu);
  *total = ctx->device->capacity;
  *free = ctx->device->capacity - ctx->device->used;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemGetInfo", 3020, MemGetInfo);

// --- host memory ---------------------------------------------------------------------------------------

bool overlaps_host(const Driver& d, std::uintptr_t p, std::size_t size) {
  auto it = d.host.lower_bound(p);
  if (it != d.host.end() && it->first < p + size) return true;
  if (it != d.host.begin()) {
    --it;
    if (it->first + it->second.size > p) return true;
  }
  return false;
}

CUresult MemAllocHost(void** pp, std::size_t bytes) {
  CUEMU_ENTER_CTX(ctx);
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lk(Driver::get().mu);
  Driver::get().host[reinterpret_cast<std::uintptr_t>(p)] = HostRange{bytes, HostKind::alloc_host, ctx};
  *pp = p;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemAllocHost", 3020, MemAllocHost);

CUresult MemFreeHost(void* p) {
  CUEMU_ENTER_CTX(ctx);
  (void)ctx;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  auto it = d.host.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == d.host.end() || it->second.kind != HostKind::alloc_host) return CUDA_ERROR_INVALID_VALUE;
  ::munmap(p, it->second.size);
  d.host.erase(it);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemFreeHost", 2000, MemFreeHost);

CUresult MemHostRegister(void* p, std::size_t bytes, unsigned flags) {
  CUEMU_ENTER_CTX(ctx);
  constexpr unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                             CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytes == 0 || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h (cuMemHostRegister): CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED "if the memory range was
  // already registered" (any overlap, cuda.h 2912).
  if (overlaps_host(d, reinterpret_cast<std::uintptr_t>(p), bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  d.host[reinterpret_cast<std::uintptr_t>(p)] = HostRange{bytes, HostKind::registered, ctx};
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemHostRegister", 6050, MemHostRegister);

CUresult MemHostUnregister(void* p) {
  CUEMU_ENTER_CTX(ctx);
  (void)ctx;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  // cuda.h 2918: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED "the pointer ... does not correspond to any
  // currently registered memory region".
  auto it = d.host.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == d.host.end() || it->second.kind != HostKind::registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  d.host.erase(it);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemHostUnregister", 4000, MemHostUnregister);

// --- managed memory ------------------------------------------------------------------------------------

CUresult free_managed(Driver& d, std::uintptr_t base) {
  auto it = d.host.find(base);
  auto& pages = managed_pages()[base];
  for (int where : pages) {
    if (where >= 0) d.devices[static_cast<std::size_t>(where)]->used -= kManagedPage;
  }
  managed_pages().erase(base);
  ::munmap(reinterpret_cast<void*>(base), it->second.size);
  d.host.erase(it);
  return CUDA_SUCCESS;
}

CUresult MemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned flags) {
  CUEMU_ENTER_CTX(ctx);
  Driver& d = Driver::get();
  // cuda.h (cuMemAllocManaged): "flags ... must be one of CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST";
  // "If bytesize is 0, cuMemAllocManaged returns CUDA_ERROR_INVALID_VALUE"; CUDA_ERROR_NOT_SUPPORTED
  // "if the device doesn't support managed memory".
  if (dptr == nullptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const CUresult r = unsafe_during_capture(ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(d.mu);
  if (!d.settings.managed) return CUDA_ERROR_NOT_SUPPORTED;
  const std::size_t size = (bytes + kManagedPage - 1) / kManagedPage * kManagedPage;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  d.host[base] = HostRange{size, HostKind::managed, ctx};
  managed_pages()[base] = std::vector<int>(size / kManagedPage, -1);
  *dptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemAllocManaged", 6000, MemAllocManaged);

// A location as the two ABIs give it: CU_DEVICE_CPU (-1) or a device ordinal.
CUresult location_of(const Driver& d, const CUmemLocation& loc, int* out) {
  switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (loc.id < 0 || static_cast<std::size_t>(loc.id) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
      *out = loc.id;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: *out = -1; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult advise(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, int where) {
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  HostRange* r = d.managed_of(static_cast<std::uintptr_t>(ptr), count);
  // cuda.h (cuMemAdvise): the range must be managed memory; CUDA_ERROR_INVALID_DEVICE for a device that
  // lacks concurrent managed access where the advice needs it.
  if (r == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (where >= 0 && !d.settings.concurrent_managed) return CUDA_ERROR_INVALID_DEVICE;
  switch (advice) {
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: r->preferred = where; return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: r->preferred = -2; return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemAdviseV1(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, CUdevice device) {
  CUEMU_ENTER_CTX(ctx);
  (void)ctx;
  if (device != CU_DEVICE_CPU && (device < 0 || static_cast<std::size_t>(device) >= Driver::get().devices.size())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return advise(ptr, count, advice, device == CU_DEVICE_CPU ? -1 : device);
}
CUEMU_EXPORT("cuMemAdvise", 8000, MemAdviseV1);

CUresult MemAdviseV2(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, CUmemLocation location) {
  CUEMU_ENTER_CTX(ctx);
  (void)ctx;
  int where = 0;
  if (const CUresult r = location_of(Driver::get(), location, &where); r != CUDA_SUCCESS) return r;
  return advise(ptr, count, advice, where);
}
CUEMU_EXPORT("cuMemAdvise", 12020, MemAdviseV2);

// Makes the managed pages of [ptr, ptr + count) resident on `where` (-1: host), evicting other managed
// pages from that device when its memory is full (residency is bounded by the device's capacity).
void migrate(std::uintptr_t ptr, std::size_t count, int where) {
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  std::uintptr_t base = 0;
  if (d.managed_of(ptr, count, &base) == nullptr) return;  // freed meanwhile
  auto& pages = managed_pages()[base];
  const std::size_t first = (ptr - base) / kManagedPage, last = (ptr + count - 1 - base) / kManagedPage;
  for (std::size_t i = first; i <= last; ++i) {
    if (pages[i] == where) continue;
    if (pages[i] >= 0) d.devices[static_cast<std::size_t>(pages[i])]->used -= kManagedPage;
    pages[i] = -1;
    if (where < 0) continue;
    Device* dev = d.devices[static_cast<std::size_t>(where)].get();
    for (auto& [b, other] : managed_pages()) {  // evict other managed pages from the full device
      for (std::size_t k = 0; k < other.size() && dev->capacity - dev->used < kManagedPage; ++k) {
        if (other[k] == where && !(b == base && k >= first && k <= last)) {
          other[k] = -1;
          dev->used -= kManagedPage;
        }
      }
    }
    if (dev->capacity - dev->used < kManagedPage) continue;  // device memory held by others: stays on the host
    pages[i] = where;
    dev->used += kManagedPage;
  }
}

CUresult prefetch(CUdeviceptr ptr, std::size_t count, int where, CUstream stream) {
  CUEMU_ENTER_CTX(ctx);
  Driver& d = Driver::get();
  {
    std::lock_guard lk(d.mu);
    if (d.managed_of(static_cast<std::uintptr_t>(ptr), count) == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h (cuMemPrefetchAsync): "The destination device must have a non-zero value for the device
    // attribute CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS" (else CUDA_ERROR_INVALID_DEVICE).
    if (where >= 0 && !d.settings.concurrent_managed) return CUDA_ERROR_INVALID_DEVICE;
  }
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const auto p = static_cast<std::uintptr_t>(ptr);
  return enqueue(s, [p, count, where] {
    migrate(p, count, where);
    return CUDA_SUCCESS;
  });
}

CUresult MemPrefetchAsyncV1(CUdeviceptr ptr, std::size_t count, CUdevice device, CUstream stream) {
  if (device != CU_DEVICE_CPU && (device < 0 || static_cast<std::size_t>(device) >= Driver::get().devices.size())) {
    return entry() != CUDA_SUCCESS ? entry() : CUDA_ERROR_INVALID_DEVICE;
  }
  return prefetch(ptr, count, device == CU_DEVICE_CPU ? -1 : device, stream);
}
CUEMU_EXPORT("cuMemPrefetchAsync", 8000, MemPrefetchAsyncV1);

CUresult MemPrefetchAsyncV2(CUdeviceptr ptr, std::size_t count, CUmemLocation location, unsigned flags,
                            CUstream stream) {
  CUEMU_ENTER();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "flags ... reserved for future use, must be zero"
  int where = 0;
  if (const CUresult r = location_of(Driver::get(), location, &where); r != CUDA_SUCCESS) return r;
  return prefetch(ptr, count, where, stream);
}
CUEMU_EXPORT("cuMemPrefetchAsync", 12020, MemPrefetchAsyncV2);

// --- pointers ------------------------------------------------------------------------------------------

struct PointerInfo {
  bool known = false;
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  bool managed = false;
  int ordinal = -1;
  Context* ctx = nullptr;
  std::uintptr_t start = 0;
  std::size_t size = 0;
  bool mapped = true;
};

PointerInfo pointer_info(Driver& d, CUdeviceptr ptr) {
  PointerInfo out;
  const auto p = static_cast<std::uintptr_t>(ptr);
  auto h = d.host.upper_bound(p);
  if (h != d.host.begin() && p - std::prev(h)->first < std::prev(h)->second.size) {
    --h;
    out.known = true;
    out.managed = h->second.kind == HostKind::managed;
    out.type = out.managed ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    out.ctx = h->second.ctx;
    out.ordinal = h->second.ctx != nullptr ? h->second.ctx->device->ordinal : -1;
    out.start = h->first;
    out.size = h->second.size;
    return out;
  }
  auto m = d.mappings.upper_bound(ptr);
  if (m != d.mappings.begin() && ptr - std::prev(m)->first < std::prev(m)->second.size) {
    --m;
    out.known = true;
    out.type = host_located(*m->second.chunk) ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    out.ordinal = m->second.chunk->charged != nullptr ? m->second.chunk->charged->ordinal : -1;
    out.start = m->first;
    out.size = m->second.size;
    // cuda.h (CU_POINTER_ATTRIBUTE_CONTEXT): "the CUcontext in which ptr was allocated or registered".
    if (auto a = d.allocs.find(m->first); a != d.allocs.end()) out.ctx = a->second->allocated_in;
    return out;
  }
  if (d.reservation_of(ptr, 1) != nullptr) {  // reserved, not mapped
    out.known = true;
    out.type = CU_MEMORYTYPE_DEVICE;
    out.mapped = false;
  }
  return out;
}

CUresult attribute(const PointerInfo& info, CUpointer_attribute attr, CUdeviceptr ptr, void* data) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(info.ctx); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = info.type; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      *static_cast<void**>(data) = info.type == CU_MEMORYTYPE_HOST || info.managed ? as_ptr(ptr) : nullptr;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = info.managed ? 1 : 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = info.ordinal; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = info.start; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = info.size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = info.mapped ? 1 : 0; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;  // not emulated (docs/cuda-emulator.md)
  }
  return CUDA_SUCCESS;
}

CUresult PointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  CUEMU_ENTER();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  const PointerInfo info = pointer_info(d, ptr);
  // cuda.h (cuPointerGetAttribute): a pointer CUDA does not know is CUDA_ERROR_INVALID_VALUE.
  if (!info.known) return CUDA_ERROR_INVALID_VALUE;
  return attribute(info, attr, ptr, data);
}
CUEMU_EXPORT("cuPointerGetAttribute", 4000, PointerGetAttribute);

CUresult PointerGetAttributes(unsigned count, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  CUEMU_ENTER();
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  const PointerInfo info = pointer_info(d, ptr);
  // cuda.h (cuPointerGetAttributes): "Unlike cuPointerGetAttribute, this function will not return an error
  // when the ptr encountered is not a valid CUDA pointer. Instead, the attributes are assigned default
  // NULL values and CUDA_SUCCESS is returned."
  for (unsigned i = 0; i < count; ++i) {
    if (!info.known) {
      PointerInfo none;
      none.type = static_cast<CUmemorytype>(0);
      none.mapped = false;
      (void)attribute(none, attrs[i], 0, data[i]);
      continue;
    }
    if (const CUresult r = attribute(info, attrs[i], ptr, data[i]); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuPointerGetAttributes", 7000, PointerGetAttributes);

CUresult MemGetAddressRange(CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr) {
  CUEMU_ENTER_CTX(ctx);
  (void)ctx;
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  const PointerInfo info = pointer_info(d, ptr);
  // cuda.h (cuMemGetAddressRange): "Returns the base address in *pbase and size in *psize of the
  // allocation ... that contains the input pointer dptr"; CUDA_ERROR_NOT_FOUND otherwise.
  if (!info.known || info.size == 0 || info.type == CU_MEMORYTYPE_HOST) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = info.start;
  if (size != nullptr) *size = info.size;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuMemGetAddressRange", 3020, MemGetAddressRange);

}  // namespace

}  // namespace cuemu
