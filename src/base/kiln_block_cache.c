/* The block cache: idle blocks in an array, searched newest first (the
 * most recently freed block is the likeliest to be warm in the caches).
 * A training step frees and requests a few dozen sizes, so a linear scan
 * under one mutex costs nothing beside the megabytes each block holds. */
#include "base/kiln_block_cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define KILN_BLOCK_PAGE ((size_t)4096)

typedef struct {
  void* ptr;
  size_t bytes; /* rounded */
} kiln_block_t;

struct kiln_block_cache_s {
  pthread_mutex_t mutex;
  kiln_block_t* idle;
  size_t n_idle, cap_idle; /* entries used, allocated */
  size_t idle_bytes, idle_cap;
  size_t hits, misses;
};

static size_t kiln_block_round(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - KILN_BLOCK_PAGE) return 0;
  return (bytes + KILN_BLOCK_PAGE - 1) & ~(KILN_BLOCK_PAGE - 1);
}

kiln_block_cache_t* kiln_block_cache_create(size_t idle_cap) {
  kiln_block_cache_t* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  pthread_mutex_init(&c->mutex, NULL);
  c->idle_cap = idle_cap;
  return c;
}

kiln_block_cache_t* kiln_block_cache_default(void) {
  static kiln_block_cache_t cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, (size_t)1 << 30,
                                     0, 0};
  return &cache;
}

/* Frees idle blocks, oldest first, until at most `keep` bytes stay. Caller
 * holds the mutex. */
static void kiln_block_cache_shrink_locked(kiln_block_cache_t* c, size_t keep) {
  size_t i = 0;
  while (i < c->n_idle && c->idle_bytes > keep) {
    c->idle_bytes -= c->idle[i].bytes;
    free(c->idle[i].ptr);
    ++i;
  }
  for (size_t j = i; j < c->n_idle; ++j) c->idle[j - i] = c->idle[j];
  c->n_idle -= i;
}

void kiln_block_cache_destroy(kiln_block_cache_t* c) {
  if (!c) return;
  kiln_block_cache_trim(c);
  free(c->idle);
  pthread_mutex_destroy(&c->mutex);
  free(c);
}

kiln_status_t kiln_block_cache_get(kiln_block_cache_t* c, size_t bytes, void** out) {
  *out = NULL;
  size_t want = kiln_block_round(bytes);
  if (!want) return kiln_status_make(KILN_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  pthread_mutex_lock(&c->mutex);
  for (size_t i = c->n_idle; i-- > 0;) {
    if (c->idle[i].bytes != want) continue;
    *out = c->idle[i].ptr;
    c->idle_bytes -= want;
    for (size_t j = i + 1; j < c->n_idle; ++j) c->idle[j - 1] = c->idle[j];
    --c->n_idle;
    ++c->hits;
    pthread_mutex_unlock(&c->mutex);
    return kiln_ok();
  }
  ++c->misses;
  pthread_mutex_unlock(&c->mutex);
  void* p = aligned_alloc(KILN_BLOCK_PAGE, want);
  if (!p) { /* idle blocks of other sizes may be what stands in the way */
    kiln_block_cache_trim(c);
    p = aligned_alloc(KILN_BLOCK_PAGE, want);
  }
  if (!p) return kiln_status_make(KILN_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  *out = p;
  return kiln_ok();
}

void kiln_block_cache_put(kiln_block_cache_t* c, void* block, size_t bytes) {
  if (!block) return;
  size_t b = kiln_block_round(bytes);
  pthread_mutex_lock(&c->mutex);
  if (b > c->idle_cap) {
    pthread_mutex_unlock(&c->mutex);
    free(block);
    return;
  }
  /* Room for the newest block: older idle blocks go first. */
  kiln_block_cache_shrink_locked(c, c->idle_cap - b);
  if (c->n_idle == c->cap_idle) {
    size_t n = c->cap_idle ? 2 * c->cap_idle : 16;
    kiln_block_t* grown = realloc(c->idle, n * sizeof(*grown));
    if (!grown) {
      pthread_mutex_unlock(&c->mutex);
      free(block);
      return;
    }
    c->idle = grown;
    c->cap_idle = n;
  }
  c->idle[c->n_idle++] = (kiln_block_t){block, b};
  c->idle_bytes += b;
  pthread_mutex_unlock(&c->mutex);
}

void kiln_block_cache_trim(kiln_block_cache_t* c) {
  pthread_mutex_lock(&c->mutex);
  kiln_block_cache_shrink_locked(c, 0);
  pthread_mutex_unlock(&c->mutex);
}

void kiln_block_cache_set_cap(kiln_block_cache_t* c, size_t idle_cap) {
  pthread_mutex_lock(&c->mutex);
  c->idle_cap = idle_cap;
  kiln_block_cache_shrink_locked(c, idle_cap);
  pthread_mutex_unlock(&c->mutex);
}

kiln_block_cache_stats_t kiln_block_cache_stats(kiln_block_cache_t* c) {
  pthread_mutex_lock(&c->mutex);
  kiln_block_cache_stats_t s = {c->idle_bytes, c->n_idle, c->hits, c->misses};
  pthread_mutex_unlock(&c->mutex);
  return s;
}
