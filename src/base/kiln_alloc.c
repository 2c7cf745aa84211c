/* The system allocator: aligned_alloc with sizes rounded to the alignment. */
#include "base/kiln_alloc.h"

#include <stdlib.h>
#include <string.h>

static void* kiln_system_alloc(void* self, size_t size) {
  (void)self;
  size_t rounded = kiln_align_up(size ? size : 1, KILN_ALIGNMENT);
  if (rounded < size) return NULL; /* overflow */
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
