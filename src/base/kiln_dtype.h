/* Element types of kiln tensors. The numbering is part of the .kiln format
 * (docs/format.md): append new types, never renumber. */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stddef.h>

typedef enum kiln_dtype_e {
  KILN_F32 = 0,
  KILN_F16,
  KILN_BF16,
  KILN_I64,
  KILN_I32,
  KILN_I8,
  KILN_U8,
  KILN_BOOL, /* one byte, 0 or 1 */
  KILN_DTYPE_COUNT
} kiln_dtype_t;

/* Bytes per element; 0 for an out-of-range value. */
size_t kiln_dtype_size(kiln_dtype_t dtype);
/* torch-style name ("float32"); "?" for an out-of-range value. */
const char* kiln_dtype_name(kiln_dtype_t dtype);
int kiln_dtype_is_float(kiln_dtype_t dtype);

#endif /* KILN_DTYPE_H */
