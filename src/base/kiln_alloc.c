/* The system allocator: aligned_alloc with sizes rounded to the alignment.
 *
 * Large blocks (packed weights, arenas, constants: KILN_HUGE_MIN and up)
 * are aligned to 2 MiB and advised as transparent huge pages where the
 * kernel offers them (THP "madvise" mode, the common default): one fault
 * maps 2 MiB instead of 4 KiB, and a GEMV streaming hundreds of MiB of
 * weights walks 512x fewer pages. KILN_HUGEPAGES=0 turns the advice off. */
#define _DEFAULT_SOURCE /* madvise */
#include "base/kiln_alloc.h"

#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

enum { KILN_HUGE_PAGE = 2 << 20, KILN_HUGE_MIN = 4 << 20 };

static int kiln_huge_pages_wanted(void) {
  const char* e = getenv("KILN_HUGEPAGES");
  return !(e && e[0] == '0');
}

static void* kiln_system_alloc(void* self, size_t size) {
  (void)self;
  size_t rounded = kiln_align_up(size ? size : 1, KILN_ALIGNMENT);
  if (rounded < size) return NULL; /* overflow */
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (rounded >= KILN_HUGE_MIN && kiln_huge_pages_wanted()) {
    size_t huge = kiln_align_up(rounded, KILN_HUGE_PAGE);
    void* p = huge >= rounded ? aligned_alloc(KILN_HUGE_PAGE, huge) : NULL;
    if (p) {
      (void)madvise(p, huge, MADV_HUGEPAGE); /* advice only: refused is fine */
      return p;
    }
  }
#endif
  return aligned_alloc(KILN_ALIGNMENT, rounded);
}

static void kiln_system_free(void* self, void* ptr) {
  (void)self;
  free(ptr);
}

kiln_allocator_t kiln_allocator_system(void) {
  kiln_allocator_t a = {NULL, kiln_system_alloc, kiln_system_free};
  return a;
}

kiln_status_t kiln_allocator_malloc(kiln_allocator_t a, size_t size, void** out) {
  *out = a.alloc(a.self, size);
  if (!*out)
    return kiln_status_make(KILN_OUT_OF_MEMORY, "could not allocate %zu bytes", size);
  return kiln_ok();
}

kiln_status_t kiln_allocator_calloc(kiln_allocator_t a, size_t size, void** out) {
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, size, out));
  memset(*out, 0, size);
  return kiln_ok();
}

void kiln_allocator_free(kiln_allocator_t a, void* ptr) {
  if (ptr) a.free(a.self, ptr);
}
