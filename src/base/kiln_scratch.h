/* A one-slot cache of scratch memory for kernels that need a temporary
 * buffer per call (GEMM's packed A, conv's im2col columns).
 *
 * Allocating megabytes per call would cost page faults on every call, so the
 * last block is kept and handed to the next caller (lock-free: a thread takes
 * it by exchange; concurrent callers simply allocate their own). Blocks
 * above the cache's cap are freed after use. In steady state no call
 * allocates. Each kernel family owns one cache (a static
 * kiln_scratch_cache_t initialised with KILN_SCRATCH_CACHE_INIT).
 */
#ifndef KILN_SCRATCH_H
#define KILN_SCRATCH_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct kiln_scratch_cache_s {
  _Atomic(void*) block;
  size_t cap; /* blocks larger than this are not kept */
} kiln_scratch_cache_t;

#define KILN_SCRATCH_CACHE_INIT(cap_bytes) {NULL, (cap_bytes)}

/* At least `bytes` of 64-byte-aligned scratch, or NULL when out of memory.
 * *out_block is the handle to give back to kiln_scratch_put. */
void* kiln_scratch_get(kiln_scratch_cache_t* cache, size_t bytes, void** out_block);
void kiln_scratch_put(kiln_scratch_cache_t* cache, void* block);

#endif /* KILN_SCRATCH_H */
