/* The C API (include/tvmm/tvmm.h) and the PyTorch entry points, from C, on the simulated GPU. Run with
 * TVMM_DEVICE_BACKEND=sim and small budgets; prints "ok" or the first failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tvmm/tvmm.h"

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "c_api_client: FAILED: " __VA_ARGS__);     \
      fprintf(stderr, " (last error: %s)\n", tvmm_last_error()); \
      exit(1);                                                   \
    }                                                            \
  } while (0)

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(i * 31u + seed);
}
static size_t wrong(const unsigned char* p, size_t n, unsigned seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += p[i] != (unsigned char)(i * 31u + seed);
  return bad;
}

static void explicit_pager(void) {
  tvmm_pager* pager = NULL;
  tvmm_status s = tvmm_pager_create(NULL, &pager);
  CHECK(s == TVMM_SUCCESS, "tvmm_pager_create: %s", tvmm_status_name(s));
  CHECK(tvmm_version()[0] >= '0' && tvmm_version()[0] <= '9', "tvmm_version: \"%s\"", tvmm_version());
  /* Errors: a status and a reason, nothing created. */
  tvmm_tensor* none = (tvmm_tensor*)0x1;
  CHECK(tvmm_tensor_create(pager, 0, "empty", &none) == TVMM_ERROR_INVALID_ARGUMENT && none == NULL,
        "a 0-byte tensor was not refused");
  CHECK(strlen(tvmm_last_error()) > 0, "no reason for the refusal");
  none = (tvmm_tensor*)0x1;
  CHECK(tvmm_tensor_create(NULL, 64, NULL, &none) == TVMM_ERROR_INVALID_ARGUMENT, "a NULL pager was accepted");
  CHECK(strstr(tvmm_last_error(), "pager is NULL") != NULL, "the reason does not name the argument");
  CHECK(none == NULL, "tvmm_tensor_create with a NULL pager left its output handle set");
  /* Every creating call clears its output first, whichever argument is bad. */
  tvmm_stream* no_stream = (tvmm_stream*)0x1;
  CHECK(tvmm_stream_create(NULL, &no_stream) == TVMM_ERROR_INVALID_ARGUMENT && no_stream == NULL,
        "tvmm_stream_create with a NULL pager left its output handle set");
  tvmm_pin* no_pin = (tvmm_pin*)0x1;
  CHECK(tvmm_pin_create(NULL, NULL, 0, 0, TVMM_ACCESS_READ, &no_pin) == TVMM_ERROR_INVALID_ARGUMENT && no_pin == NULL,
        "tvmm_pin_create with a NULL tensor left its output handle set");
  size_t no_size = 99;
  char no_json[8] = "stale";
  CHECK(tvmm_pager_stats_json(NULL, no_json, sizeof no_json, &no_size) == TVMM_ERROR_INVALID_ARGUMENT &&
            no_size == 0 && no_json[0] == '\0',
        "a failed tvmm_pager_stats_json left its outputs set");
  tvmm_pager* other = (tvmm_pager*)0x1;
  CHECK(tvmm_pager_create("/nonexistent/tvmm.toml", &other) == TVMM_ERROR_CONFIG, "a missing config file was accepted");
  CHECK(other == NULL, "a failed create left a handle");
  CHECK(strstr(tvmm_last_error(), "/nonexistent/tvmm.toml") != NULL, "the reason does not name the file");

  /* Twelve 2 MiB tensors through a 16 MiB device budget: written through pins, evicted, read back. */
  enum { N = 12 };
  const size_t bytes = (size_t)2 << 20;
  tvmm_tensor* t[N];
  for (int i = 0; i < N; ++i) {
    CHECK(tvmm_tensor_create(pager, bytes, "c-tensor", &t[i]) == TVMM_SUCCESS, "tensor %d", i);
    CHECK(tvmm_tensor_size(t[i]) == bytes && tvmm_tensor_address(t[i]) != NULL, "tensor %d facts", i);
    tvmm_pin* pin = NULL;
    CHECK(tvmm_pin_create(t[i], NULL, 0, 0, TVMM_ACCESS_WRITE, &pin) == TVMM_SUCCESS, "pin %d", i);
    fill((unsigned char*)tvmm_pin_address(pin), bytes, (unsigned)i);
    tvmm_pin_destroy(pin);
  }
  tvmm_stream* stream = NULL;
  CHECK(tvmm_stream_create(pager, &stream) == TVMM_SUCCESS, "stream");
  for (int i = 0; i < N; ++i) {
    tvmm_pin* pin = NULL;
    CHECK(tvmm_pin_create(t[i], stream, 4096, 8192, TVMM_ACCESS_READ, &pin) == TVMM_SUCCESS, "stream pin %d", i);
    CHECK(tvmm_stream_synchronize(stream) == TVMM_SUCCESS, "synchronize");
    CHECK(tvmm_pin_address(pin) == (char*)tvmm_tensor_address(t[i]) + 4096, "range pin address");
    tvmm_pin_destroy(pin);
    tvmm_pin* whole = NULL;
    CHECK(tvmm_pin_create(t[i], NULL, 0, 0, TVMM_ACCESS_READ, &whole) == TVMM_SUCCESS, "read pin %d", i);
    CHECK(wrong((const unsigned char*)tvmm_pin_address(whole), bytes, (unsigned)i) == 0, "tensor %d bytes", i);
    tvmm_pin_destroy(whole);
  }
  /* Stream pins of four tensors (a NULL among them) released together: none stays pinned (a discard is
   * refused while a pin is alive), and the others read back whole on the host. */
  tvmm_pins_destroy(NULL, 0);
  tvmm_pin* group[5] = {NULL, NULL, NULL, NULL, NULL};
  for (int i = 0; i < 4; ++i) {
    CHECK(tvmm_pin_create(t[i], stream, 0, 0, TVMM_ACCESS_READ, &group[i == 0 ? 4 : i]) == TVMM_SUCCESS, "group pin %d",
          i);
  }
  tvmm_pins_destroy(group, 5);
  CHECK(tvmm_tensor_discard(t[3]) == TVMM_SUCCESS, "a tensor released by tvmm_pins_destroy is still pinned: %s",
        tvmm_last_error());
  for (int i = 0; i < 3; ++i) {
    tvmm_pin* whole = NULL;
    CHECK(tvmm_pin_create(t[i], NULL, 0, 0, TVMM_ACCESS_READ, &whole) == TVMM_SUCCESS, "pin after group %d", i);
    CHECK(wrong((const unsigned char*)tvmm_pin_address(whole), bytes, (unsigned)i) == 0, "tensor %d bytes", i);
    tvmm_pin_destroy(whole);
  }
  tvmm_pin* bad = NULL;
  CHECK(tvmm_pin_create(t[0], NULL, bytes, 0, TVMM_ACCESS_READ, &bad) == TVMM_ERROR_INVALID_ARGUMENT,
        "a pin past the end was accepted");
  CHECK(tvmm_pin_create(t[0], NULL, 0, 0, (tvmm_access)7, &bad) == TVMM_ERROR_INVALID_ARGUMENT,
        "a bad access was accepted");
  /* Discard: refused while pinned (the data stays), then the tensor's contents are dead. */
  CHECK(tvmm_tensor_discard(NULL) == TVMM_ERROR_INVALID_ARGUMENT, "a NULL tensor was discarded");
  tvmm_pin* held = NULL;
  CHECK(tvmm_pin_create(t[1], NULL, 0, 0, TVMM_ACCESS_READ, &held) == TVMM_SUCCESS, "pin to hold");
  CHECK(tvmm_tensor_discard(t[1]) == TVMM_ERROR_INVALID_ARGUMENT, "a pinned tensor was discarded");
  CHECK(strstr(tvmm_last_error(), "pinned") != NULL, "the reason does not say the tensor is pinned");
  CHECK(wrong((const unsigned char*)tvmm_pin_address(held), bytes, 1u) == 0, "a refused discard changed the bytes");
  tvmm_pin_destroy(held);
  CHECK(tvmm_tensor_discard(t[1]) == TVMM_SUCCESS, "discard");
  CHECK(tvmm_pager_mark_iteration(pager) == TVMM_SUCCESS, "mark_iteration");
  size_t needed = 0;
  CHECK(tvmm_pager_stats_json(pager, NULL, 0, &needed) == TVMM_SUCCESS && needed > 2, "stats size");
  char* json = malloc(needed);
  CHECK(tvmm_pager_stats_json(pager, json, needed, &needed) == TVMM_SUCCESS && json[0] == '{', "stats json");
  CHECK(strstr(json, "\"evictions\"") != NULL || strstr(json, "evict") != NULL, "stats without evictions: %s", json);
  free(json);
  tvmm_stream_destroy(stream);
  for (int i = 0; i < N; ++i) tvmm_tensor_destroy(t[i]);
  tvmm_pager_destroy(pager);
}

/* torch.cuda.memory.CUDAPluggableAllocator calls these. */
static void torch_entry_points(void) {
  enum { N = 24 };
  void* p[N];
  const ssize_t bytes = (ssize_t)3 << 20; /* 72 MiB in all: 4.5x a 16 MiB device budget */
  for (int i = 0; i < N; ++i) {
    p[i] = tvmm_malloc(bytes, 0, NULL);
    CHECK(p[i] != NULL, "tvmm_malloc %d", i);
    fill((unsigned char*)p[i], (size_t)bytes, (unsigned)(100 + i));
  }
  for (int i = 0; i < N; ++i) {
    CHECK(wrong((const unsigned char*)p[i], (size_t)bytes, (unsigned)(100 + i)) == 0, "tvmm_malloc block %d", i);
    tvmm_free(p[i], bytes, 0, NULL);
  }
  CHECK(tvmm_malloc(-1, 0, NULL) == NULL && strstr(tvmm_last_error(), "negative") != NULL, "a negative size");
  CHECK(tvmm_malloc((ssize_t)1 << 40, 0, NULL) == NULL, "1 TiB was granted");
  CHECK(strstr(tvmm_last_error(), "host budget") != NULL, "the out-of-memory reason does not name the budgets");
  int local = 0;
  tvmm_free(&local, 4, 0, NULL);
  CHECK(strstr(tvmm_last_error(), "not allocated by tvmm_malloc") != NULL, "a foreign free was not reported");
  tvmm_free(p[0], bytes, 0, NULL); /* a double free: reported, nothing breaks */
  CHECK(strstr(tvmm_last_error(), "not a live allocation") != NULL, "a double free was not reported");
}

int main(void) {
  explicit_pager();
  torch_entry_points();
  puts("ok");
  return 0;
}
