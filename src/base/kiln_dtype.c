/* Element type sizes and names. */
#include "base/kiln_dtype.h"

static const struct {
  const char* name;
  size_t size;
} kiln_dtype_table_[] = {
    {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},
    {"int32", 4},   {"int8", 1},    {"uint8", 1},    {"bool", 1},
};
_Static_assert(sizeof(kiln_dtype_table_) / sizeof(kiln_dtype_table_[0]) == KILN_DTYPE_COUNT,
               "one entry per dtype");

size_t kiln_dtype_size(kiln_dtype_t dtype) {
  return (unsigned)dtype < KILN_DTYPE_COUNT ? kiln_dtype_table_[dtype].size : 0;
}

const char* kiln_dtype_name(kiln_dtype_t dtype) {
  return (unsigned)dtype < KILN_DTYPE_COUNT ? kiln_dtype_table_[dtype].name : "?";
}

int kiln_dtype_is_float(kiln_dtype_t dtype) {
  return dtype == KILN_F32 || dtype == KILN_F16 || dtype == KILN_BF16;
}
