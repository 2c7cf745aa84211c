/* The scratch cache. A block's first 64 bytes hold its usable size, so the
 * memory handed out stays 64-byte aligned. */
#include "base/kiln_scratch.h"

#include <stdlib.h>

void* kiln_scratch_get(kiln_scratch_cache_t* cache, size_t bytes, void** out_block) {
  void* blk = atomic_exchange(&cache->block, NULL);
  if (blk && *(size_t*)blk < bytes) {
    free(blk);
    blk = NULL;
  }
  if (!blk) {
    size_t total = ((bytes + 63) & ~(size_t)63) + 64;
    if (total < bytes) return NULL; /* overflow */
    blk = aligned_alloc(64, total);
    if (!blk) return NULL;
    *(size_t*)blk = total - 64;
  }
  *out_block = blk;
  return (char*)blk + 64;
}

void kiln_scratch_put(kiln_scratch_cache_t* cache, void* blk) {
  if (!blk) return;
  if (*(size_t*)blk > cache->cap) {
    free(blk);
    return;
  }
  free(atomic_exchange(&cache->block, blk));
}
