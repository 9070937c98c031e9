/* tvmm C API: the explicit pager (libtvmm) and the PyTorch allocator entry points (libtvmm_preload).
 *
 * Every function that can fail returns a tvmm_status; on failure, tvmm_last_error() gives this thread's
 * one-line reason (what failed, and how to fix it). Functions never throw or abort: C++ exceptions stop
 * at this boundary. A call that creates a handle sets its output (`out`) to NULL first, so on any
 * failure, a bad argument included, the output is NULL and nothing was created. Handles are owned by
 * the caller and freed with the matching *_destroy call; tensors, streams and pins must be destroyed
 * before their pager. See docs/c-api.md.
 */
#ifndef TVMM_TVMM_H
#define TVMM_TVMM_H

#include <stddef.h>
#include <sys/types.h> /* ssize_t */

#include "tvmm/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Result of a call. */
typedef enum tvmm_status {
  TVMM_SUCCESS = 0,
  TVMM_ERROR_INVALID_ARGUMENT = 1, /**< a null handle, 0 bytes, a pointer tvmm did not allocate, ... */
  TVMM_ERROR_OUT_OF_MEMORY = 2,    /**< the tiers cannot hold it, or a pinned working set does not fit */
  TVMM_ERROR_CONFIG = 3,           /**< a bad configuration file or TVMM_* variable */
  TVMM_ERROR_DEVICE = 4,           /**< the device backend failed (no GPU, driver error) */
  TVMM_ERROR_IO = 5,               /**< the NVMe tier's storage failed */
  TVMM_ERROR_INTERNAL = 6,         /**< anything else (a bug: please report it) */
  TVMM_ERROR_TIMEOUT = 7           /**< pages stayed in transit (another thread's transfer of them)
                                        longer than pager.wait_timeout_ms; the data is unchanged */
} tvmm_status;

/** How pinned code uses a tensor's pages (tvmm::Access). */
typedef enum tvmm_access {
  TVMM_ACCESS_READ = 0,       /**< reads only */
  TVMM_ACCESS_READ_WRITE = 1, /**< reads and writes */
  TVMM_ACCESS_WRITE = 2       /**< overwrites every byte before reading: contents are not loaded */
} tvmm_access;

typedef struct tvmm_pager tvmm_pager;   /**< a tvmm::Pager */
typedef struct tvmm_tensor tvmm_tensor; /**< a tvmm::Tensor */
typedef struct tvmm_stream tvmm_stream; /**< a tvmm::Stream */
typedef struct tvmm_pin tvmm_pin;       /**< a tvmm::Pin */

/** This thread's reason for its last failed call ("" if none failed yet). Valid until the thread's next
 *  failing call. */
TVMM_API const char* tvmm_last_error(void);
/** The status's name, e.g. "TVMM_ERROR_OUT_OF_MEMORY". */
TVMM_API const char* tvmm_status_name(tvmm_status status);
/** The version of the libtvmm.so in use, e.g. "0.2.0" (the project's version when it was built). Defined
 *  by libtvmm.so only, not by libtvmm_preload.so. */
TVMM_API const char* tvmm_version(void);

/** Builds a pager from a TOML policy file (NULL: the defaults), then the TVMM_* environment overrides. */
TVMM_API tvmm_status tvmm_pager_create(const char* config_path, tvmm_pager** out);
/** Destroys a pager (NULL is ignored). */
TVMM_API void tvmm_pager_destroy(tvmm_pager* pager);
/** Marks an iteration boundary (trace prefetch and Belady record the first iteration). */
TVMM_API tvmm_status tvmm_pager_mark_iteration(tvmm_pager* pager);
/** The pager's counters as one JSON object: copies up to `capacity` bytes (NUL-terminated) to `buffer`
 *  and sets `*needed` to the full length plus one. Call with capacity 0 to learn the size. On failure
 *  `*needed` is 0 and `buffer` (when capacity > 0) holds the empty string. */
TVMM_API tvmm_status tvmm_pager_stats_json(tvmm_pager* pager, char* buffer, size_t capacity, size_t* needed);

/** Allocates a tensor of `bytes` (> 0); `name` (may be NULL) appears in traces. */
TVMM_API tvmm_status tvmm_tensor_create(tvmm_pager* pager, size_t bytes, const char* name, tvmm_tensor** out);
/** Frees a tensor (NULL is ignored); pins still alive keep its pages until they are destroyed. */
TVMM_API void tvmm_tensor_destroy(tvmm_tensor* tensor);
/** The tensor's device address (stable for its life); NULL for a NULL tensor. */
TVMM_API void* tvmm_tensor_address(const tvmm_tensor* tensor);
/** The tensor's size in bytes; 0 for a NULL tensor. */
TVMM_API size_t tvmm_tensor_size(const tvmm_tensor* tensor);
/** Starts moving the tensor's pages to the device; `stream` waits for them. */
TVMM_API tvmm_status tvmm_tensor_prefetch(tvmm_tensor* tensor, tvmm_stream* stream);
/** Declares the tensor's contents dead (as tvmm::Tensor::discard): its pages give up their memory
 *  without being copied. TVMM_ERROR_INVALID_ARGUMENT, with the data unchanged, while a pin is alive. */
TVMM_API tvmm_status tvmm_tensor_discard(tvmm_tensor* tensor);

/** Creates a stream on the pager's device. */
TVMM_API tvmm_status tvmm_stream_create(tvmm_pager* pager, tvmm_stream** out);
/** Destroys a stream (NULL is ignored). */
TVMM_API void tvmm_stream_destroy(tvmm_stream* stream);
/** Waits for the stream's queued work. */
TVMM_API tvmm_status tvmm_stream_synchronize(tvmm_stream* stream);

/** Pins bytes [offset, offset + bytes) of a tensor (bytes 0 = to its end). With a stream, the pin is
 *  stream-ordered (the caller does not wait); with stream NULL the call returns when the pages are
 *  resident. */
TVMM_API tvmm_status tvmm_pin_create(tvmm_tensor* tensor, tvmm_stream* stream, size_t offset, size_t bytes,
                                     tvmm_access access, tvmm_pin** out);
/** The device address of the first pinned byte. */
TVMM_API void* tvmm_pin_address(const tvmm_pin* pin);
/** Releases a pin (NULL is ignored). */
TVMM_API void tvmm_pin_destroy(tvmm_pin* pin);
/** Releases `count` pins at one point and frees them (NULL entries are ignored; each pin may appear
 *  once; `pins` may be NULL when count is 0): the stream pins of one stream share one release point,
 *  one per 16 of them, where tvmm_pin_destroy takes one per pin (tvmm::release_together).
 *  For the pins of one kernel's operands, after its launch. */
TVMM_API void tvmm_pins_destroy(tvmm_pin* const* pins, size_t count);

/* PyTorch's CUDAPluggableAllocator entry points, exported by libtvmm_preload.so (transparent mode):
 *   torch.cuda.memory.CUDAPluggableAllocator("libtvmm_preload.so", "tvmm_malloc", "tvmm_free")
 * `stream` is a cudaStream_t. tvmm_malloc returns NULL on failure, with the reason on stderr and in
 * tvmm_last_error(); tvmm_free of a pointer it did not return reports the error and changes nothing. */
TVMM_API void* tvmm_malloc(ssize_t size, int device, void* stream);
TVMM_API void tvmm_free(void* ptr, ssize_t size, int device, void* stream);
/* Transparent mode's statistics for `device` (-1: the caller's current one) as one JSON object, in the
 * keys of torch.cuda.memory_stats() ("allocated_bytes.all.current", "allocated_bytes.all.peak",
 * "reserved_bytes.all.current", "num_alloc_retries", "num_ooms", ...) beside tvmm's own ("pages_demoted",
 * "tvmm.device_bytes.current", ...); "{}" when that device has no heap yet. Writes at most `size` bytes
 * (NUL included) to `buf` and returns the length of the whole JSON text, as snprintf does, or -1 with
 * tvmm_last_error() set. Exported by libtvmm_preload.so. */
TVMM_API int tvmm_memory_stats(int device, char* buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TVMM_TVMM_H */
