/* Reductions over any set of axes, argmax, and the small elementwise leftovers
 * (scalar fma, integer unary ops, logical not).
 *
 * A reduction views the input as alternating kept/reduced axis groups; the
 * common cases (reduce the trailing axes, or the leading ones) become a dense
 * (outer, reduce, inner) sweep. Sums accumulate in double for float32 so that
 * long rows keep torch's accuracy (torch uses pairwise/vectorised sums). */
#include <math.h>
#include <string.h>

#include "kernels/eltwise/kiln_nd.h"

static double kiln_reduce_init(kiln_reduce_t op) {
  switch (op) {
    case KILN_REDUCE_MAX: return -INFINITY;
    case KILN_REDUCE_MIN: return INFINITY;
    default: return 0.0;
  }
}

static double kiln_reduce_load(kiln_dtype_t t, const void* x, int64_t i) {
  switch (t) {
    case KILN_F32: return ((const float*)x)[i];
    case KILN_I64: return (double)((const int64_t*)x)[i];
    case KILN_I32: return ((const int32_t*)x)[i];
    case KILN_I8: return ((const int8_t*)x)[i];
    case KILN_U8:
    case KILN_BOOL: return ((const uint8_t*)x)[i];
    default: return 0;
  }
}

static void kiln_reduce_store(kiln_dtype_t t, void* y, int64_t i, double v) {
  switch (t) {
    case KILN_F32: ((float*)y)[i] = (float)v; break;
    case KILN_I64: ((int64_t*)y)[i] = (int64_t)v; break;
    case KILN_I32: ((int32_t*)y)[i] = (int32_t)v; break;
    case KILN_I8: ((int8_t*)y)[i] = (int8_t)v; break;
    case KILN_U8: ((uint8_t*)y)[i] = (uint8_t)v; break;
    case KILN_BOOL: ((uint8_t*)y)[i] = v != 0; break;
    default: break;
  }
}

static double kiln_reduce_step(kiln_reduce_t op, double acc, double v) {
  switch (op) {
    case KILN_REDUCE_SUM:
    case KILN_REDUCE_MEAN: return acc + v;
    case KILN_REDUCE_MAX: return v != v || acc != acc ? NAN : v > acc ? v : acc;
    case KILN_REDUCE_MIN: return v != v || acc != acc ? NAN : v < acc ? v : acc;
    case KILN_REDUCE_ANY: return acc != 0 || v != 0;
    default: return acc;
  }
}

void kiln_reduce(kiln_reduce_t op, kiln_dtype_t dtype, int32_t rank, const int64_t* shape,
                 uint32_t mask, const void* x, void* out) {
  /* Output element count and reduced count. */
  int64_t n_out = 1, n_red = 1, numel = 1;
  for (int32_t d = 0; d < rank; ++d) {
    numel *= shape[d];
    if (mask & (1u << d)) n_red *= shape[d];
    else n_out *= shape[d];
  }
  if (n_out == 0) return;
  /* Dense strides of the output over the kept axes (0 on reduced axes). */
  int64_t ostride[KILN_ND_MAX_RANK], s = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (mask & (1u << d)) {
      ostride[d] = 0;
    } else {
      ostride[d] = s;
      s *= shape[d];
    }
  }
  double acc_stack[1024];
  double* acc = n_out <= 1024 ? acc_stack : NULL;
  /* Fast path: trailing axes reduced, i.e. (n_out, n_red) rows. */
  int trailing = 1;
  for (int32_t d = 0; d < rank; ++d)
    if ((mask & (1u << d)) && d < rank - 1 && !(mask & (1u << (d + 1)))) trailing = 0;
  if (trailing || !acc) {
    if (!trailing) {
      /* Slow but allocation-free general path: one output at a time. */
      for (int64_t o = 0; o < n_out; ++o) {
        double a = kiln_reduce_init(op);
        for (int64_t i = 0; i < numel; ++i) {
          int64_t rem = i, oi = 0;
          for (int32_t d = rank - 1; d >= 0; --d) {
            oi += (rem % shape[d]) * ostride[d];
            rem /= shape[d];
          }
          if (oi == o) a = kiln_reduce_step(op, a, kiln_reduce_load(dtype, x, i));
        }
        if (op == KILN_REDUCE_MEAN) a /= (double)n_red;
        kiln_reduce_store(dtype, out, o, a);
      }
      return;
    }
    for (int64_t o = 0; o < n_out; ++o) {
      double a = kiln_reduce_init(op);
      if (dtype == KILN_F32 && op <= KILN_REDUCE_MEAN) {
        const float* row = (const float*)x + o * n_red;
        for (int64_t i = 0; i < n_red; ++i) a += row[i];
      } else {
        for (int64_t i = 0; i < n_red; ++i)
          a = kiln_reduce_step(op, a, kiln_reduce_load(dtype, x, o * n_red + i));
      }
      if (op == KILN_REDUCE_MEAN) a /= (double)n_red;
      kiln_reduce_store(dtype, out, o, a);
    }
    return;
  }
  /* General path with a small accumulator array: one sweep over x. */
  for (int64_t o = 0; o < n_out; ++o) acc[o] = kiln_reduce_init(op);
  int64_t idx[KILN_ND_MAX_RANK] = {0};
  int64_t oi = 0;
  for (int64_t i = 0; i < numel; ++i) {
    acc[oi] = kiln_reduce_step(op, acc[oi], kiln_reduce_load(dtype, x, i));
    for (int32_t d = rank - 1; d >= 0; --d) { /* odometer increment */
      oi += ostride[d];
      if (++idx[d] < shape[d]) break;
      oi -= ostride[d] * shape[d];
      idx[d] = 0;
    }
  }
  for (int64_t o = 0; o < n_out; ++o) {
    double a = acc[o];
    if (op == KILN_REDUCE_MEAN) a /= (double)n_red;
    kiln_reduce_store(dtype, out, o, a);
  }
}

void kiln_argmax(kiln_dtype_t dtype, int32_t rank, const int64_t* shape, int32_t axis,
                 const void* x, int64_t* out) {
  int64_t outer = 1, inner = 1, len = rank ? shape[axis] : 1;
  for (int32_t d = 0; d < axis; ++d) outer *= shape[d];
  for (int32_t d = axis + 1; d < rank; ++d) inner *= shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double bv = len ? kiln_reduce_load(dtype, x, o * len * inner + j) : 0;
      for (int64_t i = 1; i < len && bv == bv; ++i) {
        double v = kiln_reduce_load(dtype, x, (o * len + i) * inner + j);
        if (v > bv || v != v) {
          bv = v;
          best = i;
        }
      }
      out[o * inner + j] = best;
    }
}

typedef struct {
  const float* x;
  float* y;
  float scale, shift;
  size_t n, per;
} kiln_fma_ctx_t;

static void kiln_fma_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_fma_ctx_t* c = p;
  size_t i0 = task * c->per, i1 = i0 + c->per < c->n ? i0 + c->per : c->n;
  for (size_t i = i0; i < i1; ++i) c->y[i] = c->x[i] * c->scale + c->shift;
}

void kiln_fma_scalar_f32(size_t n, const float* x, float scale, float shift, float* y,
                         kiln_pool_t* pool) {
  kiln_fma_ctx_t c = {x, y, scale, shift, n, 65536};
  kiln_pool_parallel_for(pool, (n + c.per - 1) / c.per, kiln_fma_task, &c);
}

void kiln_unary_int(int op, kiln_dtype_t dtype, size_t n, const void* x, void* y) {
  for (size_t i = 0; i < n; ++i) {
    int64_t v = dtype == KILN_I64 ? ((const int64_t*)x)[i] : ((const int32_t*)x)[i];
    /* Negation in unsigned arithmetic: INT_MIN wraps as in torch, no C UB. */
    int64_t r = op == 0 ? (int64_t)(0 - (uint64_t)v)
                        : op == 1 ? (v < 0 ? (int64_t)(0 - (uint64_t)v) : v)
                                  : (v > 0 ? v : 0);
    if (dtype == KILN_I64) ((int64_t*)y)[i] = r;
    else ((int32_t*)y)[i] = (int32_t)r;
  }
}

void kiln_logical_not(size_t n, const uint8_t* x, uint8_t* y) {
  for (size_t i = 0; i < n; ++i) y[i] = !x[i];
}

void kiln_softmax_strided_f32(int64_t outer, int64_t len, int64_t inner, const float* x,
                              float* y, int log) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const float* xr = x + o * len * inner + j;
      float* yr = y + o * len * inner + j;
      float mx = -INFINITY;
      for (int64_t i = 0; i < len; ++i) mx = xr[i * inner] > mx ? xr[i * inner] : mx;
      double sum = 0;
      for (int64_t i = 0; i < len; ++i) sum += expf(xr[i * inner] - mx);
      for (int64_t i = 0; i < len; ++i)
        yr[i * inner] = log ? xr[i * inner] - mx - (float)logf((float)sum)
                            : expf(xr[i * inner] - mx) / (float)sum;
    }
}
