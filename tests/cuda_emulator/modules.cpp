// The emulated driver's modules and kernel launches. cuModuleLoadData reads a fatbin, a cubin or PTX
// text, decides as the driver would whether the device can run it (a cubin for its architecture that
// the driver's ABI accepts, or PTX of an ISA the driver can compile, for an architecture no newer than
// the device's), and learns the kernels and their parameter sizes from the PTX. Launches run CPU
// implementations of the kernels it knows by name (tvmm's, from kernels/pattern.hpp) over device memory
// translated through the emulator's page table.
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <sstream>
#include <string_view>

#include "entry.hpp"
#include "kernels/pattern.hpp"

namespace cuemu {

namespace {

// --- images --------------------------------------------------------------------------------------------

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;   // the fatbin container (nvcc -fatbin)
constexpr std::uint32_t kWrapperMagic = 0x466243B1;  // __fatBinC_Wrapper_t, as host code embeds a fatbin

// The newest PTX ISA each driver release accepts (the PTX ISA manual's release-history table: ISA 8.0
// came with CUDA 12.0, ... 8.8 with 12.9, 9.0 with 13.0).
int max_ptx_isa(int driver) {
  struct Row {
    int driver, isa;  // isa as major * 10 + minor
  };
  static constexpr Row rows[] = {{13000, 90}, {12090, 88}, {12080, 87}, {12060, 85}, {12050, 85}, {12040, 84},
                                 {12030, 83}, {12020, 82}, {12010, 81}, {12000, 80}, {11080, 78}};
  for (const auto& r : rows) {
    if (driver >= r.driver) return r.isa;
  }
  return 0;
}

// CUDA 13 writes cubins with ELF ABI version 8 (byte EI_ABIVERSION of the header), which drivers before
// 13.0 cannot load (the CUDA 13.0 release notes: cubins built by CUDA 13 need an R580 driver).
int min_driver_for_cubin(int abi_version) { return abi_version >= 8 ? 13000 : 0; }

struct PtxInfo {
  int isa = 0;     // .version as major * 10 + minor
  int target = 0;  // .target sm_XY as XY
  std::map<std::string, Kernel> kernels;
};

std::size_t param_size(const std::string& decl) {
  // ".param .u64 name", ".param .u64 .ptr .align 1 name", ".param .align 8 .b8 name[16]"
  std::smatch m;
  static const std::regex array(R"(\.b8\s+\w+\[(\d+)\])");
  if (std::regex_search(decl, m, array)) return std::stoul(m[1]);
  static const std::regex scalar(R"(\.[busf](8|16|32|64)\b)");
  if (std::regex_search(decl, m, scalar)) return std::stoul(m[1]) / 8;
  return 0;
}

bool parse_ptx(std::string_view text, PtxInfo* out) {
  const std::string s(text);
  std::smatch m;
  static const std::regex version(R"(\.version\s+(\d+)\.(\d+))");
  static const std::regex target(R"(\.target\s+sm_(\d+))");
  if (!std::regex_search(s, m, version)) return false;
  out->isa = std::stoi(m[1]) * 10 + std::stoi(m[2]);
  if (std::regex_search(s, m, target)) out->target = std::stoi(m[1]);
  static const std::regex entry(R"(\.entry\s+(\w+)\s*\(([^)]*)\))");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), entry); it != std::sregex_iterator(); ++it) {
    Kernel k;
    k.name = (*it)[1];
    std::stringstream params((*it)[2]);
    std::string decl;
    while (std::getline(params, decl, ',')) {
      if (decl.find(".param") == std::string::npos) continue;
      k.params.push_back(param_size(decl));
    }
    out->kernels[k.name] = k;
  }
  return true;
}

struct Candidate {
  bool ptx = false;
  int arch = 0;
  int abi = 0;   // cubins: the ELF ABI version
  PtxInfo info;  // PTX (and the kernels of a fatbin's PTX)
  bool readable = false;
};

std::uint16_t u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
std::uint32_t u32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint64_t u64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The entries of a fatbin container. Layout (as cuobjdump reads it; no official specification): a
// 16-byte header {u32 magic, u16 version, u16 header size, u64 size}, then entries, each a header
// {u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size, u32 compressed size,
// u32 -, u32 PTX ISA (major << 16 | minor), u32 sm, u32 -, u32 -, u64 flags (0x2000 LZ4, 0x8000 zstd),
// u64 -, u64 uncompressed size} and its payload.
CUresult read_fatbin(const std::byte* image, std::vector<Candidate>* out) {
  const std::uint16_t header = u16(image + 6);
  const std::uint64_t size = u64(image + 8);
  if (header < 16 || size > (std::uint64_t{1} << 32)) return CUDA_ERROR_INVALID_IMAGE;
  const std::byte* p = image + header;
  const std::byte* end = p + size;
  while (p + 48 <= end) {
    const std::uint16_t kind = u16(p);
    const std::uint32_t entry_header = u32(p + 4);
    const std::uint64_t payload = u64(p + 8);
    if (entry_header < 48 || p + entry_header + payload > end) return CUDA_ERROR_INVALID_IMAGE;
    const std::byte* data = p + entry_header;
    const std::uint32_t compressed = u32(p + 16);
    const std::uint64_t flags = u64(p + 40);
    Candidate c;
    c.arch = static_cast<int>(u32(p + 28));
    if (kind == 1) {
      c.ptx = true;
      const std::uint32_t isa = u32(p + 24);
      c.info.isa = static_cast<int>((isa >> 16) * 10 + (isa & 0xffff));
      std::string text;
      if ((flags & 0x8000) != 0 && compressed != 0 && entry_header >= 64) {
        text.resize(u64(p + 56));
        const std::size_t n = ZSTD_decompress(text.data(), text.size(), data, compressed);
        c.readable = !ZSTD_isError(n);
        text.resize(c.readable ? n : 0);
      } else if ((flags & 0x2000) == 0) {
        text.assign(reinterpret_cast<const char*>(data), strnlen(reinterpret_cast<const char*>(data), payload));
        c.readable = true;
      }
      if (c.readable) {
        const int header_isa = c.info.isa;
        c.readable = parse_ptx(text, &c.info);
        if (header_isa != 0 && c.info.isa != header_isa) return CUDA_ERROR_INVALID_IMAGE;
      }
    } else if (kind == 2) {
      if (payload < 16 || u32(data) != 0x464c457f) return CUDA_ERROR_INVALID_IMAGE;  // "\x7fELF"
      c.abi = static_cast<int>(data[8]);
    } else {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    out->push_back(std::move(c));
    p += entry_header + payload;
  }
  return out->empty() ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
}

// The kernel names of a cubin (its STT_FUNC symbols), when no PTX gives their parameters.
void read_cubin_symbols(const std::byte* elf, std::map<std::string, Kernel>* kernels) {
  const std::uint64_t shoff = u64(elf + 0x28);
  const std::uint16_t shentsize = u16(elf + 0x3a), shnum = u16(elf + 0x3c);
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const std::byte* sh = elf + shoff + std::size_t{i} * shentsize;
    if (u32(sh + 4) != 2) continue;  // SHT_SYMTAB
    const std::byte* strtab = elf + u64(elf + shoff + std::size_t{u32(sh + 40)} * shentsize + 24);
    const std::uint64_t off = u64(sh + 24), size = u64(sh + 32), ent = u64(sh + 56);
    for (std::uint64_t k = 0; ent != 0 && k < size / ent; ++k) {
      const std::byte* sym = elf + off + k * ent;
      if ((static_cast<unsigned>(sym[4]) & 0xf) != 2) continue;  // STT_FUNC
      Kernel kn;
      kn.name = reinterpret_cast<const char*>(strtab + u32(sym));
      (*kernels)[kn.name] = kn;
    }
  }
}

// --- kernels ------------------------------------------------------------------------------------------

using Params = std::vector<std::uint64_t>;
using Impl = CUresult (*)(const Params&, const Device*);

// Counts a kernel's access to `spans` on `dev`'s counters (the driver mutex is held).
void count_access(const std::vector<Span>& spans, const Device* dev) {
  Device& counted = *Driver::get().devices[static_cast<std::size_t>(dev->ordinal)];
  for (const Span& s : spans) (s.local ? counted.kernel_bytes_local : counted.kernel_bytes_remote) += s.len;
}

// Gathers [va, va + n) for `dev` into a host buffer (false: an address the device may not use).
bool gather(CUdeviceptr va, std::size_t n, const Device* dev, std::vector<std::byte>* out) {
  std::vector<Span> spans;
  if (!Driver::get().translate(va, n, dev, false, &spans)) {
    Driver::get().report_fault("a kernel reading", va, n, dev, false);
    return false;
  }
  count_access(spans, dev);
  out->resize(n);
  std::size_t at = 0;
  for (const Span& s : spans) {
    std::memcpy(out->data() + at, s.ptr, s.len);
    at += s.len;
  }
  return true;
}
bool scatter(CUdeviceptr va, const std::vector<std::byte>& in, const Device* dev) {
  std::vector<Span> spans;
  if (!Driver::get().translate(va, in.size(), dev, true, &spans)) {
    Driver::get().report_fault("a kernel writing", va, in.size(), dev, true);
    return false;
  }
  count_access(spans, dev);
  std::size_t at = 0;
  for (const Span& s : spans) {
    std::memcpy(s.ptr, in.data() + at, s.len);
    at += s.len;
  }
  return true;
}
bool add_to(CUdeviceptr counter, std::uint64_t v, const Device* dev) {  // atomicAdd on a 64-bit word
  std::vector<std::byte> w;
  if (!gather(counter, 8, dev, &w)) return false;
  std::uint64_t x;
  std::memcpy(&x, w.data(), 8);
  x += v;
  std::memcpy(w.data(), &x, 8);
  return scatter(counter, w, dev);
}

CUresult k_fill(const Params& p, const Device* dev) {
  std::vector<std::byte> buf(p[1]);
  tvmm::kernels::fill_pattern(buf.data(), buf.size(), p[2]);
  return scatter(p[0], buf, dev) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}
CUresult k_verify(const Params& p, const Device* dev) {
  std::vector<std::byte> buf;
  if (!gather(p[0], p[1], dev, &buf)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  const auto bad = tvmm::kernels::count_mismatches(buf.data(), buf.size(), p[2]);
  return add_to(p[3], bad, dev) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}
CUresult k_checksum(const Params& p, const Device* dev) {
  std::vector<std::byte> buf;
  if (!gather(p[0], p[1] * 8, dev, &buf)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  return add_to(p[2], tvmm::kernels::checksum(buf.data(), p[1]), dev) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}
CUresult k_compute(const Params& p, const Device* dev) {
  std::vector<std::byte> buf;
  if (!gather(p[0], p[1] * 4, dev, &buf)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  tvmm::kernels::compute(reinterpret_cast<float*>(buf.data()), p[1], static_cast<int>(p[2]));
  return scatter(p[0], buf, dev) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}

struct CpuKernel {
  const char* name;
  std::vector<std::size_t> params;
  Impl impl;
  bool busy = false;  // holds the stream for p[0] nanoseconds (outside the driver lock)
};
const std::vector<CpuKernel>& cpu_kernels() {
  static const std::vector<CpuKernel> table = {
      {"tvmm_fill", {8, 8, 8}, k_fill},         {"tvmm_verify", {8, 8, 8, 8}, k_verify},
      {"tvmm_checksum", {8, 8, 8}, k_checksum}, {"tvmm_compute", {8, 8, 4}, k_compute},
      {"tvmm_busy", {8}, nullptr, true},
  };
  return table;
}
const CpuKernel* cpu_kernel(const std::string& name) {
  for (const auto& k : cpu_kernels()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// A kernel's parameter sizes: from the image's PTX, else the built-in table (a cubin without PTX).
const std::vector<std::size_t>* param_sizes(const Function& f) {
  if (!f.kernel.params.empty()) return &f.kernel.params;
  const CpuKernel* k = cpu_kernel(f.kernel.name);
  return k != nullptr ? &k->params : nullptr;
}

// The offset of each parameter in the device-side parameter layout: each at its natural alignment (the
// alignment of a parameter of 1, 2, 4 or 8 bytes is its size; a larger one, a .b8 array, 8 here).
std::vector<std::size_t> param_offsets(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> offsets;
  std::size_t at = 0;
  for (std::size_t size : sizes) {
    const std::size_t align = std::min<std::size_t>(std::max<std::size_t>(size, 1), 8);
    at = (at + align - 1) / align * align;
    offsets.push_back(at);
    at += size;
  }
  return offsets;
}

// --- module entry points -------------------------------------------------------------------------------

CUresult load(Context* ctx, const void* image, Module** out) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::get();
  const auto* bytes = static_cast<const std::byte*>(image);
  std::vector<Candidate> candidates;
  std::uint32_t magic = u32(bytes);
  if (magic == kWrapperMagic) {  // {int magic; int version; const void* data; void* filename}
    const void* inner = nullptr;
    std::memcpy(&inner, bytes + 8, sizeof inner);
    bytes = static_cast<const std::byte*>(inner);
    magic = u32(bytes);
  }
  const std::byte* cubin = nullptr;
  if (magic == kFatbinMagic) {
    if (const CUresult r = read_fatbin(bytes, &candidates); r != CUDA_SUCCESS) return r;
  } else if (magic == 0x464c457f) {
    Candidate c;
    c.abi = static_cast<int>(bytes[8]);
    const std::uint32_t eflags = u32(bytes + 0x30);
    c.arch = static_cast<int>((eflags >> 8) & 0xff);  // EF_CUDA_SM (as CUDA 12/13 cubins set it)
    candidates.push_back(c);
    cubin = bytes;
  } else {
    Candidate c;
    c.ptx = true;
    c.readable = parse_ptx(reinterpret_cast<const char*>(bytes), &c.info);
    if (!c.readable) return CUDA_ERROR_INVALID_IMAGE;
    c.arch = c.info.target;
    candidates.push_back(c);
  }
  const int sm = d.settings.sm, driver = d.settings.driver_version;
  // cuda.h 2665: CUDA_ERROR_NO_BINARY_FOR_GPU "there is no kernel image available that is suitable for the
  // device"; 2739: CUDA_ERROR_UNSUPPORTED_PTX_VERSION "the PTX was compiled with an unsupported toolchain".
  // A cubin runs on its own architecture (same major, minor no higher); PTX is compiled for any device no
  // older than its target, by a driver that knows its ISA.
  bool usable = false, ptx_too_new = false;
  std::map<std::string, Kernel> kernels;
  for (const auto& c : candidates) {
    if (c.ptx && c.readable) kernels.insert(c.info.kernels.begin(), c.info.kernels.end());
    if (c.ptx) {
      if (c.arch > sm) continue;
      if (c.info.isa > max_ptx_isa(driver)) {
        ptx_too_new = true;
        continue;
      }
      usable = true;
    } else {
      if (c.arch / 10 != sm / 10 || c.arch % 10 > sm % 10 || (sm == 90 && c.arch != 90)) continue;
      if (driver < min_driver_for_cubin(c.abi)) continue;  // with no PTX to fall back on: no binary
      usable = true;
    }
  }
  if (!usable) {
    if (ptx_too_new) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    // Including a cubin for a newer driver with no PTX to fall back on: no binary for this GPU.
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  if (kernels.empty() && cubin != nullptr) read_cubin_symbols(cubin, &kernels);
  auto* m = new Module;
  m->ctx = ctx;
  m->kernels = std::move(kernels);
  std::lock_guard lk(d.mu);
  d.modules.insert(m);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult ModuleLoadData(CUmodule* module, const void* image) {
  CUEMU_ENTER_CTX(ctx);
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module* m = nullptr;
  if (const CUresult r = load(ctx, image, &m); r != CUDA_SUCCESS) return r;
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuModuleLoadData", 2000, ModuleLoadData);

CUresult ModuleLoadFatBinary(CUmodule* module, const void* image) { return ModuleLoadData(module, image); }
CUEMU_EXPORT("cuModuleLoadFatBinary", 2000, ModuleLoadFatBinary);

// Never destroyed, as the driver's tables are not: a program's exit handlers may still launch or unload.
std::set<Function*>& functions() {
  static auto* f = new std::set<Function*>;
  return *f;
}

CUresult ModuleUnload(CUmodule module) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  auto* m = reinterpret_cast<Module*>(module);
  if (d.modules.erase(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  std::erase_if(functions(), [&](Function* f) {
    if (f->module != m) return false;
    delete f;
    return true;
  });
  delete m;
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuModuleUnload", 2000, ModuleUnload);

CUresult ModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  CUEMU_ENTER();
  Driver& d = Driver::get();
  std::lock_guard lk(d.mu);
  auto* m = reinterpret_cast<Module*>(module);
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (d.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->kernels.find(name);
  if (it == m->kernels.end()) return CUDA_ERROR_NOT_FOUND;  // cuda.h 2820
  auto* f = new Function{m, it->second};
  functions().insert(f);
  *fn = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuModuleGetFunction", 2000, ModuleGetFunction);

CUresult launch(Context* ctx, CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  Function f;
  {
    std::lock_guard lk(Driver::get().mu);
    auto* p = reinterpret_cast<Function*>(fn);
    if (functions().count(p) == 0) return CUDA_ERROR_INVALID_HANDLE;
    f = *p;
  }
  Stream* s = resolve_stream(stream, ctx);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // Launch bounds of a compute capability 9.0 device (CU_DEVICE_ATTRIBUTE_MAX_*): invalid dimensions are
  // CUDA_ERROR_INVALID_VALUE; more than 48 KiB of dynamic shared memory needs an opt-in not emulated.
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535 ||
      bx > 1024 || by > 1024 || bz > 64 || std::uint64_t{bx} * by * bz > 1024 || shared > 48 * 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // cuda.h 17473: "CUDA_ERROR_INVALID_VALUE will be returned if kernel parameters are specified with both
  // kernelParams and extra".
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CpuKernel* k = cpu_kernel(f.kernel.name);
  if (k == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // no CPU implementation of this kernel
  const std::vector<std::size_t>* known = param_sizes(f);
  if (known == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const std::vector<std::size_t>& sizes = *known;
  if (sizes != k->params) return CUDA_ERROR_INVALID_IMAGE;  // the image's kernel is not the one emulated
  Params values(sizes.size(), 0);
  if (params != nullptr) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(&values[i], params[i], sizes[i]);
    }
  } else if (extra != nullptr) {
    // cuda.h 17436-17471: CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END;
    // each parameter at its natural alignment in the buffer.
    const std::byte* buffer = nullptr;
    const std::size_t* size = nullptr;
    for (void** e = extra; *e != nullptr && *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = static_cast<const std::byte*>(e[1]);
      } else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = static_cast<const std::size_t*>(e[1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    const std::vector<std::size_t> offsets = param_offsets(sizes);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (buffer == nullptr || size == nullptr || offsets[i] + sizes[i] > *size) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(&values[i], buffer + offsets[i], sizes[i]);
    }
  } else if (!sizes.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Device* dev = ctx->device;
  if (k->busy) {
    const auto ns = values[0];
    return enqueue(s, [ns] {
      std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
      return CUDA_SUCCESS;
    });
  }
  const Impl impl = k->impl;
  return enqueue(s, [impl, values, dev] {
    std::lock_guard lk(Driver::get().mu);  // mappings cannot change under the kernel
    return impl(values, dev);
  });
}

CUresult LaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shared, CUstream stream, void** params, void** extra) {
  CUEMU_ENTER_CTX(ctx);
  return launch(ctx, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
CUEMU_EXPORT("cuLaunchKernel", 4000, LaunchKernel);

// cuda.h (cuLaunchKernelEx): the launch described by a CUlaunchConfig (grid, block, shared memory, stream
// and launch attributes); "attrs" may be NULL only when numAttrs is 0. The emulator accepts the
// attributes cuda.h names and otherwise ignores them (clusters, priorities and the like change nothing
// it models).
CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction fn, void** params, void** extra) {
  CUEMU_ENTER_CTX(ctx);
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    // The ids cuda.h 2076-2224 names (IGNORE "for convenient composition" among them).
    const int id = static_cast<int>(config->attrs[i].id);
    if (id < CU_LAUNCH_ATTRIBUTE_IGNORE || id > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return launch(ctx, fn, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra);
}
CUEMU_EXPORT("cuLaunchKernelEx", 11060, LaunchKernelEx);

// cuda.h (cuLaunchCooperativeKernel): "The total number of blocks launched cannot exceed the maximum number
// of blocks per multiprocessor as returned by cuOccupancyMaxActiveBlocksPerMultiprocessor ... times the
// number of multiprocessors"; parameters through kernelParams only. The emulator allows 132 multiprocessors
// (an H100 SXM) of 32 blocks each, the most any kernel reaches on compute capability 9.0.
CUresult LaunchCooperativeKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared, CUstream stream, void** params) {
  CUEMU_ENTER_CTX(ctx);
  if (std::uint64_t{gx} * gy * gz > 132 * 32) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return launch(ctx, fn, gx, gy, gz, bx, by, bz, shared, stream, params, nullptr);
}
CUEMU_EXPORT("cuLaunchCooperativeKernel", 9000, LaunchCooperativeKernel);

// cuda.h 17352-17374 (cuFuncGetParamInfo, CUDA 12.4): "Returns in paramOffset and paramSize the offset
// and size, respectively, where the parameter will reside in the device-side parameter layout ...
// paramIndex must be less than the number of parameters that func takes. paramSize can be set to NULL if
// only the parameter offset is desired." Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (an index past
// the last parameter, a null paramOffset); an unknown function is an invalid handle, as for launches.
CUresult FuncGetParamInfo(CUfunction fn, std::size_t index, std::size_t* offset, std::size_t* size) {
  CUEMU_ENTER();
  std::lock_guard lk(Driver::get().mu);
  auto* f = reinterpret_cast<Function*>(fn);
  if (functions().count(f) == 0) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<std::size_t>* sizes = param_sizes(*f);
  if (offset == nullptr || sizes == nullptr || index >= sizes->size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = param_offsets(*sizes)[index];
  if (size != nullptr) *size = (*sizes)[index];
  return CUDA_SUCCESS;
}
CUEMU_EXPORT("cuFuncGetParamInfo", 12040, FuncGetParamInfo);

}  // namespace

}  // namespace cuemu

// Not a CUDA call: the emulator's memory counters, for tests that measure where kernels found their
// bytes (docs/cuda-emulator.md). For device `ordinal`: the bytes its kernels read and wrote in its own
// memory (*local) and over the bus (*remote), since cuInit.
extern "C" __attribute__((visibility("default"))) CUresult cuemuKernelBytes(int ordinal, unsigned long long* local,
                                                                            unsigned long long* remote) {
  cuemu::Driver& d = cuemu::Driver::get();
  std::lock_guard lk(d.mu);
  if (!d.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
  if (local == nullptr || remote == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *local = d.devices[static_cast<std::size_t>(ordinal)]->kernel_bytes_local;
  *remote = d.devices[static_cast<std::size_t>(ordinal)]->kernel_bytes_remote;
  return CUDA_SUCCESS;
}
