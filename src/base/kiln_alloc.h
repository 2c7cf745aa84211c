/* Explicit allocators.
 *
 * Every object that owns memory records the allocator it was made with and
 * frees through it. All kiln allocations are 64-byte aligned so that tensors
 * start on a cache line and AVX-512 loads never split one.
 */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stddef.h>

#include "base/kiln_status.h"

#define KILN_ALIGNMENT 64

typedef struct kiln_allocator_s {
  void* self;
  /* Returns NULL on failure; size may be 0 (returns a unique pointer). */
  void* (*alloc)(void* self, size_t size);
  void (*free)(void* self, void* ptr);
} kiln_allocator_t;

/* The process-wide allocator backed by aligned_alloc. */
kiln_allocator_t kiln_allocator_system(void);

/* Allocates `size` bytes aligned to KILN_ALIGNMENT; *out is NULL on failure. */
kiln_status_t kiln_allocator_malloc(kiln_allocator_t a, size_t size, void** out);
/* As kiln_allocator_malloc, zero-filled. */
kiln_status_t kiln_allocator_calloc(kiln_allocator_t a, size_t size, void** out);
void kiln_allocator_free(kiln_allocator_t a, void* ptr);

/* Rounds n up to a multiple of the (power of two) alignment. */
static inline size_t kiln_align_up(size_t n, size_t alignment) {
  return (n + alignment - 1) & ~(alignment - 1);
}

/* a * b into *out; returns 0 on overflow. Used to check every size read
 * from an untrusted source. */
static inline int kiln_size_mul(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline int kiln_size_add(size_t a, size_t b, size_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

#endif /* KILN_ALLOC_H */
