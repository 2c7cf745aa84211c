/* STRIDED_SCATTER and SCATTER. Both run on the caller's thread: scattered
 * writes may collide (duplicate indices, self-overlapping views), and one
 * thread keeps their order, and so the result, deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eltwise/kiln_movement_ops.h"

#define KILN_SCATTER_MAX_RANK 8

void kiln_strided_scatter(size_t elem_size, int64_t y_numel, const void* base, int32_t rank,
                          const int64_t* shape, const int64_t* strides, int64_t offset,
                          const void* src, void* y) {
  if (y != base) memcpy(y, base, (size_t)y_numel * elem_size);
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) numel *= shape[d];
  int64_t pos[KILN_SCATTER_MAX_RANK] = {0}, off = offset;
  for (int64_t i = 0; i < numel; ++i) {
    memcpy((char*)y + (size_t)off * elem_size, (const char*)src + (size_t)i * elem_size,
           elem_size);
    for (int32_t d = rank - 1; d >= 0; --d) { /* odometer, keeping off in step */
      off += strides[d];
      if (++pos[d] < shape[d]) break;
      off -= pos[d] * strides[d];
      pos[d] = 0;
    }
  }
}

/* One typed reduction step; T the element type. Integer sums and products
 * wrap (through unsigned arithmetic, never signed overflow), as torch's. */
#define KILN_SCATTER_STEP(T, UT, IS_FLOAT)                                              \
  static void kiln_scatter_step_##T(kiln_scatter_reduce_t r, T* dst, T v) {            \
    switch (r) {                                                                        \
      case KILN_SCATTER_ASSIGN: *dst = v; break;                                        \
      case KILN_SCATTER_SUM:                                                            \
      case KILN_SCATTER_MEAN:                                                           \
        *dst = IS_FLOAT ? (T)(*dst + v) : (T)(UT)((UT)*dst + (UT)v);                    \
        break;                                                                          \
      case KILN_SCATTER_PROD:                                                           \
        *dst = IS_FLOAT ? (T)(*dst * v) : (T)(UT)((UT)*dst * (UT)v);                    \
        break;                                                                          \
      case KILN_SCATTER_AMAX:                                                           \
        if (v != v || v > *dst) *dst = v; /* NaN propagates */                         \
        break;                                                                          \
      case KILN_SCATTER_AMIN:                                                           \
        if (v != v || v < *dst) *dst = v;                                              \
        break;                                                                          \
      default: break;                                                                   \
    }                                                                                   \
  }
typedef float kiln_f32_t;
KILN_SCATTER_STEP(kiln_f32_t, kiln_f32_t, 1)
KILN_SCATTER_STEP(int64_t, uint64_t, 0)
KILN_SCATTER_STEP(int32_t, uint32_t, 0)

static void kiln_scatter_identity(kiln_scatter_reduce_t r, kiln_dtype_t dtype, void* dst) {
  switch (dtype) {
    case KILN_F32:
      *(float*)dst = r == KILN_SCATTER_PROD ? 1.0f
                     : r == KILN_SCATTER_AMAX ? -INFINITY
                     : r == KILN_SCATTER_AMIN ? INFINITY : 0.0f;
      break;
    case KILN_I64:
      *(int64_t*)dst = r == KILN_SCATTER_PROD ? 1
                       : r == KILN_SCATTER_AMAX ? INT64_MIN
                       : r == KILN_SCATTER_AMIN ? INT64_MAX : 0;
      break;
    case KILN_BOOL: /* or's identity, and's */
      *(uint8_t*)dst = r == KILN_SCATTER_PROD || r == KILN_SCATTER_AMIN;
      break;
    case KILN_I32:
      *(int32_t*)dst = r == KILN_SCATTER_PROD ? 1
                       : r == KILN_SCATTER_AMAX ? INT32_MIN
                       : r == KILN_SCATTER_AMIN ? INT32_MAX : 0;
      break;
    default: break;
  }
}

static int64_t kiln_floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

kiln_status_t kiln_scatter(kiln_scatter_reduce_t reduce, int include_self, int wrap_negative,
                           kiln_dtype_t dtype,
                           int32_t rank, const int64_t* x_shape, int32_t axis, const void* x,
                           const int64_t* index_shape, kiln_dtype_t index_dtype,
                           const void* index, const int64_t* src_shape, const void* src, void* y,
                           int64_t* out_bad) {
  size_t elem = kiln_dtype_size(dtype);
  int64_t y_numel = 1, n_index = 1, bad = 0;
  int64_t ystride[KILN_SCATTER_MAX_RANK], sstride[KILN_SCATTER_MAX_RANK];
  int64_t ys = 1, ss = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    ystride[d] = ys;
    sstride[d] = ss;
    ys *= x_shape[d];
    ss *= src_shape[d];
  }
  for (int32_t d = 0; d < rank; ++d) {
    y_numel *= x_shape[d];
    n_index *= index_shape[d];
  }
  *out_bad = 0;
  if (y != x) memcpy(y, x, (size_t)y_numel * elem);
  int64_t* count = NULL;
  if (reduce == KILN_SCATTER_MEAN) {
    count = malloc((size_t)(y_numel ? y_numel : 1) * sizeof(int64_t));
    if (!count) return kiln_status_make(KILN_OUT_OF_MEMORY, "scatter mean: %lld counts",
                                        (long long)y_numel);
    for (int64_t i = 0; i < y_numel; ++i) count[i] = include_self ? 1 : 0;
  }
  int64_t size = x_shape[axis];
  /* Pass 0 (reductions without include_self) resets every target to the
   * identity; pass 1 applies the contributions. */
  /* index's last dim is walked in an inner loop with y's and src's offsets
   * stepped (the rest by an odometer per row); float sums, an index_add or
   * an embedding's gradient, take a loop of their own. The order in which
   * contributions land is index's, element by element, as before: one
   * thread, the same result every run. Computing both offsets over every
   * dim for each element had made an index_add of 786 K floats 15x eager. */
  const int32_t last = rank - 1;
  const int64_t row = rank ? index_shape[last] : 1;
  const int64_t y_last = rank ? ystride[last] : 0, s_last = rank ? sstride[last] : 0;
  const int64_t y_axis = rank ? ystride[axis] : 0;
  for (int pass = reduce != KILN_SCATTER_ASSIGN && !include_self ? 0 : 1; pass < 2; ++pass) {
    int64_t pos[KILN_SCATTER_MAX_RANK] = {0};
    for (int64_t i0 = 0; i0 < n_index; i0 += row) {
      /* Offsets of this row's first element, without the axis term. */
      int64_t yb = 0, sb = 0;
      for (int32_t d = 0; d < last; ++d) {
        if (d != axis) yb += pos[d] * ystride[d];
        sb += pos[d] * sstride[d];
      }
      const int64_t y_step = axis == last ? 0 : y_last;
      if (pass == 1 && dtype == KILN_F32 && reduce == KILN_SCATTER_SUM && !count) {
        float* yf = y;
        const float* sf = src;
        for (int64_t p = 0; p < row; ++p) {
          int64_t j = index_dtype == KILN_I64 ? ((const int64_t*)index)[i0 + p]
                                              : ((const int32_t*)index)[i0 + p];
          if (j < 0 && wrap_negative) j += size;
          if (j < 0 || j >= size) {
            ++bad;
            continue;
          }
          yf[yb + p * y_step + j * y_axis] += sf[sb + p * s_last];
        }
      } else {
        for (int64_t p = 0; p < row; ++p) {
          int64_t j = index_dtype == KILN_I64 ? ((const int64_t*)index)[i0 + p]
                                              : ((const int32_t*)index)[i0 + p];
          if (j < 0 && wrap_negative) j += size;
          if (j < 0 || j >= size) {
            if (pass == 1) ++bad;
            continue;
          }
          const int64_t yo = yb + p * y_step + j * y_axis, so = sb + p * s_last;
          char* dst = (char*)y + (size_t)yo * elem;
          const char* v = (const char*)src + (size_t)so * elem;
          if (pass == 0) {
            kiln_scatter_identity(reduce, dtype, dst);
            continue;
          }
          if (count) count[yo]++;
          switch (dtype) {
            case KILN_F32: kiln_scatter_step_kiln_f32_t(reduce, (float*)dst, *(const float*)v); break;
            case KILN_I64: kiln_scatter_step_int64_t(reduce, (int64_t*)dst, *(const int64_t*)v); break;
            case KILN_I32: kiln_scatter_step_int32_t(reduce, (int32_t*)dst, *(const int32_t*)v); break;
            case KILN_BOOL: {
              uint8_t a = *(uint8_t*)dst != 0, b = *(const uint8_t*)v != 0;
              *(uint8_t*)dst = reduce == KILN_SCATTER_SUM || reduce == KILN_SCATTER_AMAX ? (a | b)
                               : reduce == KILN_SCATTER_PROD || reduce == KILN_SCATTER_AMIN ? (a & b)
                               : b;
              break;
            }
            default: memcpy(dst, v, elem); break; /* assignment of any dtype */
          }
        }
      }
      for (int32_t d = last - 1; d >= 0; --d) { /* odometer over index's other dims */
        if (++pos[d] < index_shape[d]) break;
        pos[d] = 0;
      }
    }
  }
  if (count) {
    for (int64_t i = 0; i < y_numel; ++i) {
      if (count[i] <= 1) continue; /* untouched, or a single contribution */
      switch (dtype) {
        case KILN_F32: ((float*)y)[i] /= (float)count[i]; break;
        case KILN_I64: ((int64_t*)y)[i] = kiln_floor_div(((int64_t*)y)[i], count[i]); break;
        case KILN_I32:
          ((int32_t*)y)[i] = (int32_t)kiln_floor_div(((int32_t*)y)[i], count[i]);
          break;
        default: break;
      }
    }
    free(count);
  }
  *out_bad = bad;
  return kiln_ok();
}
