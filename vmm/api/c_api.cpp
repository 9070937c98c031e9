// The C API (include/tvmm/tvmm.h) over the C++ API: handles own C++ objects; every exception stops
// here and becomes a status plus the thread's last-error text.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <string>

#include "tvmm/errors.hpp"
#include "tvmm/pager.hpp"
#include "tvmm/tvmm.h"
#include "vmm/api/last_error.hpp"

struct tvmm_pager {
  tvmm::Pager pager;
};
struct tvmm_tensor {
  tvmm::Tensor tensor;
};
struct tvmm_stream {
  tvmm::Stream stream;
};
struct tvmm_pin {
  tvmm::Pin pin;
};

// The calling thread's last-error text. Both libtvmm.so and libtvmm_preload.so contain the C API, and a
// program may load both (tvmm_c_api_client does): the slot is reached through this exported function,
// called through the dynamic linker (default visibility, no -Bsymbolic), so that every caller in the
// process binds to its first definition and they share one slot. Not in tvmm.h: not for programs.
extern "C" TVMM_API std::string* tvmm_internal_error_slot() noexcept {
  thread_local std::string slot;
  return &slot;
}

namespace {
// The slot of the first definition in the process, looked up through the dynamic linker, so that no
// compiler's inlining can give each library its own; this library's where there is none in the global
// scope (a static program, or a library loaded RTLD_LOCAL).
std::string* error_slot() noexcept {
  using Slot = std::string* (*)() noexcept;
  static const Slot first = reinterpret_cast<Slot>(::dlsym(RTLD_DEFAULT, "tvmm_internal_error_slot"));
  return first != nullptr ? first() : tvmm_internal_error_slot();
}
}  // namespace

namespace tvmm::vmm {

void set_last_error(std::string text) noexcept {
  try {
    *error_slot() = std::move(text);
  } catch (...) {  // keep the previous text rather than fail
  }
}

void set_last_error_text(const char* text) noexcept {
  try {
    *error_slot() = text;
  } catch (...) {  // keep the previous text rather than fail
  }
}

tvmm_status status_of_current_exception() noexcept {
  const auto failed = [](tvmm_status status, const char* why) {
    set_last_error(why);
    return status;
  };
  try {
    throw;
  } catch (const invalid_argument& e) {
    return failed(TVMM_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const out_of_memory& e) {
    return failed(TVMM_ERROR_OUT_OF_MEMORY, e.what());
  } catch (const config_error& e) {
    return failed(TVMM_ERROR_CONFIG, e.what());
  } catch (const device_error& e) {
    return failed(TVMM_ERROR_DEVICE, e.what());
  } catch (const io_error& e) {
    return failed(TVMM_ERROR_IO, e.what());
  } catch (const timeout_error& e) {
    return failed(TVMM_ERROR_TIMEOUT, e.what());
  } catch (const std::bad_alloc&) {
    return failed(TVMM_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return failed(TVMM_ERROR_INTERNAL, e.what());
  } catch (...) {
    return failed(TVMM_ERROR_INTERNAL, "an unknown exception");
  }
}

}  // namespace tvmm::vmm

namespace {

using tvmm::vmm::set_last_error;
using tvmm::vmm::status_of_current_exception;

tvmm_status null_argument(const char* function, const char* argument) {
  set_last_error(std::string(function) + ": " + argument + " is NULL");
  return TVMM_ERROR_INVALID_ARGUMENT;
}

// docs/c-api.md: on failure an output handle is NULL. Cleared first, before any argument is checked.
template <class T>
void clear(T** out) noexcept {
  if (out != nullptr) *out = nullptr;
}

// Runs `f`, turning any exception into a status.
template <class F>
tvmm_status guarded(F&& f) noexcept {
  try {
    f();
    return TVMM_SUCCESS;
  } catch (...) {
    return status_of_current_exception();
  }
}

// A C caller may pass any int as a tvmm_access; read its bits as an int (loading an out-of-range enum
// value is undefined in C++).
tvmm::Access to_access(const tvmm_access& a) {
  int raw = 0;
  static_assert(sizeof raw == sizeof a);
  std::memcpy(&raw, &a, sizeof raw);
  switch (raw) {
    case TVMM_ACCESS_READ: return tvmm::Access::read;
    case TVMM_ACCESS_READ_WRITE: return tvmm::Access::read_write;
    case TVMM_ACCESS_WRITE: return tvmm::Access::write;
    default: break;
  }
  throw tvmm::invalid_argument("tvmm_pin_create: access = " + std::to_string(raw) +
                               " is not a tvmm_access (TVMM_ACCESS_READ, _READ_WRITE or _WRITE)");
}

}  // namespace

extern "C" {

const char* tvmm_last_error(void) { return error_slot()->c_str(); }

const char* tvmm_status_name(tvmm_status status) {
  switch (status) {
    case TVMM_SUCCESS: return "TVMM_SUCCESS";
    case TVMM_ERROR_INVALID_ARGUMENT: return "TVMM_ERROR_INVALID_ARGUMENT";
    case TVMM_ERROR_OUT_OF_MEMORY: return "TVMM_ERROR_OUT_OF_MEMORY";
    case TVMM_ERROR_CONFIG: return "TVMM_ERROR_CONFIG";
    case TVMM_ERROR_DEVICE: return "TVMM_ERROR_DEVICE";
    case TVMM_ERROR_IO: return "TVMM_ERROR_IO";
    case TVMM_ERROR_INTERNAL: return "TVMM_ERROR_INTERNAL";
    case TVMM_ERROR_TIMEOUT: return "TVMM_ERROR_TIMEOUT";
  }
  return "TVMM_ERROR_(unknown status)";
}

tvmm_status tvmm_pager_create(const char* config_path, tvmm_pager** out) {
  clear(out);
  if (out == nullptr) return null_argument("tvmm_pager_create", "out");
  return guarded([&] {
    tvmm::Config c;
    if (config_path != nullptr) {
      c = tvmm::load_config(config_path);
    } else {
      tvmm::apply_environment(c);
    }
    *out = new tvmm_pager{tvmm::Pager(c)};
  });
}

void tvmm_pager_destroy(tvmm_pager* pager) { delete pager; }

tvmm_status tvmm_pager_mark_iteration(tvmm_pager* pager) {
  if (pager == nullptr) return null_argument("tvmm_pager_mark_iteration", "pager");
  return guarded([&] { pager->pager.mark_iteration(); });
}

tvmm_status tvmm_pager_stats_json(tvmm_pager* pager, char* buffer, size_t capacity, size_t* needed) {
  // On failure: `*needed` is 0 and the buffer holds "" (never a stale or partial text).
  if (needed != nullptr) *needed = 0;
  if (buffer != nullptr && capacity != 0) buffer[0] = '\0';
  if (pager == nullptr) return null_argument("tvmm_pager_stats_json", "pager");
  if (buffer == nullptr && capacity != 0) return null_argument("tvmm_pager_stats_json", "buffer");
  return guarded([&] {
    const std::string json = tvmm::to_json(pager->pager.stats());
    if (needed != nullptr) *needed = json.size() + 1;
    if (capacity == 0) return;
    const std::size_t n = std::min(json.size(), capacity - 1);
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  });
}

tvmm_status tvmm_tensor_create(tvmm_pager* pager, size_t bytes, const char* name, tvmm_tensor** out) {
  clear(out);
  if (pager == nullptr) return null_argument("tvmm_tensor_create", "pager");
  if (out == nullptr) return null_argument("tvmm_tensor_create", "out");
  return guarded([&] {
    tvmm::Hints hints;
    if (name != nullptr) hints.name = name;
    *out = new tvmm_tensor{pager->pager.allocate(bytes, hints)};
  });
}

void tvmm_tensor_destroy(tvmm_tensor* tensor) { delete tensor; }

void* tvmm_tensor_address(const tvmm_tensor* tensor) { return tensor == nullptr ? nullptr : tensor->tensor.data(); }

size_t tvmm_tensor_size(const tvmm_tensor* tensor) { return tensor == nullptr ? 0 : tensor->tensor.size(); }

tvmm_status tvmm_tensor_prefetch(tvmm_tensor* tensor, tvmm_stream* stream) {
  if (tensor == nullptr) return null_argument("tvmm_tensor_prefetch", "tensor");
  if (stream == nullptr) return null_argument("tvmm_tensor_prefetch", "stream");
  return guarded([&] { tensor->tensor.prefetch(stream->stream); });
}

tvmm_status tvmm_tensor_discard(tvmm_tensor* tensor) {
  if (tensor == nullptr) return null_argument("tvmm_tensor_discard", "tensor");
  return guarded([&] { tensor->tensor.discard(); });
}

tvmm_status tvmm_stream_create(tvmm_pager* pager, tvmm_stream** out) {
  clear(out);
  if (pager == nullptr) return null_argument("tvmm_stream_create", "pager");
  if (out == nullptr) return null_argument("tvmm_stream_create", "out");
  return guarded([&] { *out = new tvmm_stream{pager->pager.create_stream()}; });
}

void tvmm_stream_destroy(tvmm_stream* stream) { delete stream; }

tvmm_status tvmm_stream_synchronize(tvmm_stream* stream) {
  if (stream == nullptr) return null_argument("tvmm_stream_synchronize", "stream");
  return guarded([&] { stream->stream.synchronize(); });
}

tvmm_status tvmm_pin_create(tvmm_tensor* tensor, tvmm_stream* stream, size_t offset, size_t bytes, tvmm_access access,
                            tvmm_pin** out) {
  clear(out);
  if (tensor == nullptr) return null_argument("tvmm_pin_create", "tensor");
  if (out == nullptr) return null_argument("tvmm_pin_create", "out");
  return guarded([&] {
    const tvmm::Access a = to_access(access);
    const std::size_t size = tensor->tensor.size();
    if (bytes == 0) {
      if (offset >= size) {
        throw tvmm::invalid_argument("tvmm_pin_create: offset " + std::to_string(offset) +
                                     " is past the end of a tensor of " + std::to_string(size) + " bytes");
      }
      bytes = size - offset;
    }
    tvmm::Pin p = stream != nullptr ? tensor->tensor.pin_range(stream->stream, offset, bytes, a)
                                    : tensor->tensor.pin_range(offset, bytes, a);
    *out = new tvmm_pin{std::move(p)};
  });
}

void* tvmm_pin_address(const tvmm_pin* pin) { return pin == nullptr ? nullptr : pin->pin.data(); }

void tvmm_pin_destroy(tvmm_pin* pin) { delete pin; }

void tvmm_pins_destroy(tvmm_pin* const* pins, size_t count) {
  // Released in groups of up to 16 (each group one release point per stream), with no allocation.
  std::array<tvmm::Pin, 16> group;
  for (std::size_t i = 0; i < count;) {
    std::size_t n = 0;
    for (; i < count && n < group.size(); ++i) {
      if (pins[i] == nullptr) continue;
      group[n++] = std::move(pins[i]->pin);
      delete pins[i];
    }
    tvmm::release_together({group.data(), n});
  }
}

}  // extern "C"
