/* A stand-in for the CUDA driver (libcuda.so.1) with no GPU, for the interposer's driver-level tests:
 * cuGetProcAddress hands out its internal functions, as the real driver does, and memory is host
 * memory. Built as tests/stub-driver/libcuda.so.1 and opened by path, never put on the library path. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
static int allocs, frees;

static int impl_alloc(CUdeviceptr* p, size_t n) {
  void* m = malloc(n ? n : 1);
  if (m == NULL) return 2;
  *p = (CUdeviceptr)(uintptr_t)m;
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return 0;
}
static int impl_free(CUdeviceptr p) {
  free((void*)(uintptr_t)p);
  __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  return 0;
}
static int impl_info(size_t* f, size_t* t) {
  *f = *t = (size_t)80 << 30;
  return 0;
}
static int impl_sync(void) { return 0; }
/* The 2D and 3D peer copies: counted, nothing copied (the driver test checks that tvmm's hooks pass
   them on). */
static int copies;
static int impl_copy(const void* desc) {
  (void)desc;
  __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED);
  return 0;
}
static int impl_copy_async(const void* desc, void* stream) {
  (void)stream;
  return impl_copy(desc);
}
static int impl_proc_v2(const char* s, void** pfn, int version, uint64_t flags, int* status);

static int impl_proc(const char* s, void** pfn, int version, uint64_t flags) {
  return impl_proc_v2(s, pfn, version, flags, NULL);
}
static int impl_proc_v2(const char* s, void** pfn, int version, uint64_t flags, int* status) {
  (void)version;
  (void)flags;
  void* f = NULL;
  if (strcmp(s, "cuMemAlloc") == 0) f = (void*)impl_alloc;
  if (strcmp(s, "cuMemFree") == 0) f = (void*)impl_free;
  if (strcmp(s, "cuMemGetInfo") == 0) f = (void*)impl_info;
  if (strcmp(s, "cuCtxSynchronize") == 0) f = (void*)impl_sync;
  if (strcmp(s, "cuGetProcAddress") == 0) f = (void*)impl_proc_v2;
  if (strcmp(s, "cuMemcpy2DUnaligned") == 0 || strcmp(s, "cuMemcpy3DPeer") == 0) f = (void*)impl_copy;
  if (strcmp(s, "cuMemcpy3DPeerAsync") == 0) f = (void*)impl_copy_async;
  if (status != NULL) *status = f != NULL ? 0 : 1;
  *pfn = f;
  return f != NULL ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}

int cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return impl_alloc(p, n); }
int cuMemFree_v2(CUdeviceptr p) { return impl_free(p); }
int cuMemGetInfo_v2(size_t* f, size_t* t) { return impl_info(f, t); }
int cuCtxSynchronize(void) { return impl_sync(); }
int cuGetProcAddress(const char* s, void** pfn, int version, uint64_t flags) {
  return impl_proc(s, pfn, version, flags);
}
int cuGetProcAddress_v2(const char* s, void** pfn, int version, uint64_t flags, int* status) {
  return impl_proc_v2(s, pfn, version, flags, status);
}

int cuMemcpy2DUnaligned_v2(const void* desc) { return impl_copy(desc); }
int cuMemcpy3DPeer(const void* desc) { return impl_copy(desc); }
int cuMemcpy3DPeerAsync(const void* desc, void* stream) { return impl_copy_async(desc, stream); }

/* For the tests. */
int stub_cuda_malloc(CUdeviceptr* p, size_t n) { return impl_alloc(p, n); }
int stub_cuda_allocs(void) { return __atomic_load_n(&allocs, __ATOMIC_RELAXED); }
int stub_cuda_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }
int stub_cuda_copies(void) { return __atomic_load_n(&copies, __ATOMIC_RELAXED); }
