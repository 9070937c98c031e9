/* A stand-in for the CUDA runtime (libcudart) with no GPU: host memory behind the runtime's memory
 * calls, so tests can check which calls tvmm's interposer passes through. Its entry points call
 * internal functions, never each other by name (which would reach tvmm's hooks). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIVE 4096
static void* live[MAX_LIVE];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int syncs;

static int stub_alloc(void** p, size_t n) {
  if (p == NULL) return 1;
  void* m = malloc(n ? n : 1);
  if (m == NULL) return 2;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_LIVE; ++i) {
    if (live[i] == NULL) {
      live[i] = m;
      pthread_mutex_unlock(&mu);
      *p = m;
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  free(m);
  return 2;
}

static int stub_free(void* p) {
  if (p == NULL) return 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_LIVE; ++i) {
    if (live[i] == p) {
      live[i] = NULL;
      pthread_mutex_unlock(&mu);
      free(p);
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  return 1; /* cudaErrorInvalidValue: not this runtime's pointer */
}

int cudaMalloc(void** p, size_t n) { return stub_alloc(p, n); }
int cudaMallocAsync(void** p, size_t n, void* stream) {
  (void)stream;
  return stub_alloc(p, n);
}
int cudaFree(void* p) { return stub_free(p); }
int cudaFreeAsync(void* p, void* stream) {
  (void)stream;
  return stub_free(p);
}
int cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = (size_t)80 << 30; /* an 80 GiB card */
  return 0;
}
int cudaDeviceSynchronize(void) {
  __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaStreamSynchronize(void* stream) {
  (void)stream;
  __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaIpcGetMemHandle(void* handle, void* p) {
  (void)p;
  memset(handle, 0, 64);
  return 0;
}

/* For the tests: allocate behind tvmm's back, and count what the stub holds. */
int stub_cudart_malloc(void** p, size_t n) { return stub_alloc(p, n); }
int stub_cudart_live(void) {
  int n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_LIVE; ++i) n += live[i] != NULL;
  pthread_mutex_unlock(&mu);
  return n;
}
int stub_cudart_syncs(void) { return __atomic_load_n(&syncs, __ATOMIC_RELAXED); }
