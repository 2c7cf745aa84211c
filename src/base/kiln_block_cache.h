/* A cache of large memory blocks that stay mapped between uses.
 *
 * Why: a tensor kiln returns to PyTorch (an output, an activation saved for
 * backward, a gradient) is typically freed a step later, and glibc returns
 * large freed blocks to the kernel (munmap, or a trim of the heap top). The
 * next step's block then page-faults once per 4 KiB page as the kernel
 * writes it: in a training step of the MLP benchmark that was 4 of its
 * 11 ms of backward. Blocks given back here are kept, keyed by size, and
 * handed out again without a fault.
 *
 * Thread-safe: blocks may be given back from any thread (PyTorch frees a
 * tensor where its last reference dies, autograd's threads included). Idle
 * blocks are capped in total bytes; a block that would exceed the cap is
 * freed instead. Sizes are rounded up to a 4 KiB page, so a block is reused
 * for any request in the same page count.
 */
#ifndef KILN_BLOCK_CACHE_H
#define KILN_BLOCK_CACHE_H

#include <stddef.h>

#include "base/kiln_status.h"

typedef struct kiln_block_cache_s kiln_block_cache_t;

/* The process-wide cache for tensors handed to the host framework. Its idle
 * cap starts at 1 GiB. */
kiln_block_cache_t* kiln_block_cache_default(void);

/* A new empty cache holding at most `idle_cap` idle bytes; NULL on no memory. */
kiln_block_cache_t* kiln_block_cache_create(size_t idle_cap);
/* Frees the cache and its idle blocks. Blocks still out must not come back. */
void kiln_block_cache_destroy(kiln_block_cache_t* cache);

/* A 64-byte-aligned block of at least `bytes`: an idle one of the same
 * rounded size, else a new one (after freeing the idle blocks, if the first
 * allocation fails). KILN_OUT_OF_MEMORY when there is no memory. */
kiln_status_t kiln_block_cache_get(kiln_block_cache_t* cache, size_t bytes, void** out);
/* Gives back a block from kiln_block_cache_get with the same `bytes`. */
void kiln_block_cache_put(kiln_block_cache_t* cache, void* block, size_t bytes);

/* Frees every idle block. */
void kiln_block_cache_trim(kiln_block_cache_t* cache);
/* Sets the idle cap (0: keep nothing), trimming down to it. */
void kiln_block_cache_set_cap(kiln_block_cache_t* cache, size_t idle_cap);

typedef struct {
  size_t idle_bytes, idle_blocks, hits, misses;
} kiln_block_cache_stats_t;
kiln_block_cache_stats_t kiln_block_cache_stats(kiln_block_cache_t* cache);

#endif /* KILN_BLOCK_CACHE_H */
