/* Reductions over any set of axes, argmax, and the small elementwise leftovers
 * (scalar fma, integer unary ops, logical not).
 *
 * A reduction views the input as alternating kept/reduced axis groups; the
 * common cases (reduce the trailing axes, or the leading ones) become a dense
 * (outer, reduce, inner) sweep. Sums accumulate in double for float32 so that
 * long rows keep torch's accuracy (torch uses pairwise/vectorised sums). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "kernels/eltwise/kiln_nd.h"
#include "kernels/eltwise/kiln_reduce_rows_variants.h"

static double kiln_reduce_init(kiln_reduce_t op) {
  switch (op) {
    case KILN_REDUCE_MAX: return -INFINITY;
    case KILN_REDUCE_MIN: return INFINITY;
    default: return 0.0;
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

/* The accumulator of the generic loops: double for float32, int64 for the
 * integer dtypes (through double, int64 values past 2^53 would round, and
 * INT64_MAX, masked reductions' fill, would overflow converting back). */
typedef struct {
  double f;
  int64_t i;
} kiln_reduce_acc_t;

static kiln_reduce_acc_t kiln_reduce_acc_init(kiln_reduce_t op) {
  kiln_reduce_acc_t a = {kiln_reduce_init(op), 0};
  if (op == KILN_REDUCE_MAX) a.i = INT64_MIN;
  if (op == KILN_REDUCE_MIN) a.i = INT64_MAX;
  return a;
}

static int64_t kiln_reduce_load_int(kiln_dtype_t t, const void* x, int64_t i) {
  switch (t) {
    case KILN_I64: return ((const int64_t*)x)[i];
    case KILN_I32: return ((const int32_t*)x)[i];
    case KILN_I8: return ((const int8_t*)x)[i];
    case KILN_U8:
    case KILN_BOOL: return ((const uint8_t*)x)[i];
    default: return 0;
  }
}

static void kiln_reduce_acc_step(kiln_reduce_t op, kiln_dtype_t t, kiln_reduce_acc_t* a,
                                 const void* x, int64_t idx) {
  if (t == KILN_F32) {
    a->f = kiln_reduce_step(op, a->f, ((const float*)x)[idx]);
    return;
  }
  int64_t v = kiln_reduce_load_int(t, x, idx);
  switch (op) {
    case KILN_REDUCE_SUM:
    case KILN_REDUCE_MEAN: a->i = (int64_t)((uint64_t)a->i + (uint64_t)v); break; /* wraps, as torch */
    case KILN_REDUCE_MAX: a->i = v > a->i ? v : a->i; break;
    case KILN_REDUCE_MIN: a->i = v < a->i ? v : a->i; break;
    case KILN_REDUCE_ANY: a->i = a->i != 0 || v != 0; break;
    default: break;
  }
}

static void kiln_reduce_acc_store(kiln_reduce_t op, kiln_dtype_t t, void* y, int64_t i,
                                  kiln_reduce_acc_t a, int64_t n_red) {
  if (t == KILN_F32) {
    ((float*)y)[i] = (float)(op == KILN_REDUCE_MEAN ? a.f / (double)n_red : a.f);
    return;
  }
  int64_t v = op == KILN_REDUCE_MEAN && n_red ? a.i / n_red : a.i;
  switch (t) {
    case KILN_I64: ((int64_t*)y)[i] = v; break;
    case KILN_I32: ((int32_t*)y)[i] = (int32_t)v; break;
    case KILN_I8: ((int8_t*)y)[i] = (int8_t)v; break;
    case KILN_U8: ((uint8_t*)y)[i] = (uint8_t)v; break;
    case KILN_BOOL: ((uint8_t*)y)[i] = v != 0; break;
    default: break;
  }
}

/* The float row loops (kiln_reduce_rows.c): the running ISA level's. */
static const kiln_reduce_rows_kernels_t* kiln_reduce_rows(void) {
  static const kiln_reduce_rows_kernels_t* const v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, &kiln_reduce_rows_kernels);
  return v[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa())];
}

void kiln_reduce_sum_rows_f32(size_t rows, size_t cols, int mean, const float* x, float* out) {
  kiln_reduce_rows()->sum_rows(rows, cols, mean, x, out);
}

void kiln_reduce_sum_rows_f32_reference(size_t rows, size_t cols, int mean, const float* x,
                                        float* out) {
  for (size_t r = 0; r < rows; ++r) {
    double a = 0.0;
    for (size_t i = 0; i < cols; ++i) a += x[r * cols + i];
    out[r] = (float)(mean ? a / (double)cols : a);
  }
}

/* The float fast paths, for a reduction over one run of consecutive axes
 * (x as (outer, n_red, inner)), split over the pool: rows of a trailing
 * reduction (inner 1), else column ranges of each outer block (a leading
 * reduction is one block; a middle one, a mean over a sequence's tokens,
 * several). Each output is reduced by one task in the serial order, so
 * results do not depend on the split. */
typedef struct {
  kiln_reduce_t op;
  int64_t outer, n_red, inner, per, chunks;
  const float* x;
  float* out;
  const kiln_reduce_rows_kernels_t* k;
} kiln_reduce_ctx_t;

static void kiln_reduce_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_reduce_ctx_t* c = p;
  if (c->inner == 1) {
    int64_t o0 = (int64_t)task * c->per, o1 = o0 + c->per < c->outer ? o0 + c->per : c->outer;
    if (c->op == KILN_REDUCE_MAX || c->op == KILN_REDUCE_MIN)
      c->k->minmax_rows(c->op == KILN_REDUCE_MAX, o1 - o0, c->n_red, c->x + o0 * c->n_red,
                        c->out + o0);
    else
      c->k->sum_rows((size_t)(o1 - o0), (size_t)c->n_red, c->op == KILN_REDUCE_MEAN,
                     c->x + o0 * c->n_red, c->out + o0);
    return;
  }
  const int64_t o = (int64_t)task / c->chunks, j0 = ((int64_t)task % c->chunks) * c->per;
  const int64_t j1 = j0 + c->per < c->inner ? j0 + c->per : c->inner;
  c->k->leading(c->op, c->n_red, j1 - j0, c->inner, c->x + o * c->n_red * c->inner + j0,
                c->out + o * c->inner + j0);
}

/* Tasks of at least 64 KiB of input each (smaller reductions run inline),
 * about four a thread; a column range is a multiple of 16 outputs (whole
 * cache lines). */
static void kiln_reduce_split(kiln_reduce_ctx_t* c, kiln_pool_t* pool) {
  int threads = kiln_pool_size(pool);
  int64_t total = c->outer * c->n_red * c->inner, tasks = 1;
  if (threads > 1 && total >= 2 * 16384) {
    tasks = (int64_t)threads * 4;
    int64_t most = total / 16384;
    if (tasks > most) tasks = most;
  }
  size_t n;
  if (c->inner == 1) {
    c->per = (c->outer + tasks - 1) / tasks;
    c->per = (c->per + 15) / 16 * 16;
    n = (size_t)((c->outer + c->per - 1) / c->per);
  } else {
    int64_t chunks = (tasks + c->outer - 1) / c->outer; /* per outer block */
    c->per = (c->inner + chunks - 1) / chunks;
    c->per = (c->per + 15) / 16 * 16;
    c->chunks = (c->inner + c->per - 1) / c->per;
    n = (size_t)(c->outer * c->chunks);
  }
  kiln_pool_parallel_for(pool, n, kiln_reduce_task, c);
}

/* Float reductions over several runs of reduced axes (a sum over axes 0
 * and 2, a conv bias's gradient over N, H and W of NCHW): the last run
 * through the dense paths into a buffer, then the rest of the axes from
 * it, where the odometer walked every element in one thread (2.5 ms for
 * axes 0 and 2 of (8, 128, 768)). A mean sums throughout and divides once.
 * 0 when the buffer could not be had (the caller walks the odometer). */
static int kiln_reduce_by_runs(kiln_reduce_t op, int32_t rank, const int64_t* shape,
                               uint32_t mask, int32_t last_red, const void* x, void* out,
                               kiln_pool_t* pool) {
  int32_t r0 = last_red;
  while (r0 > 0 && ((mask & (1u << (r0 - 1))) || shape[r0 - 1] == 1)) --r0;
  int64_t part[KILN_ND_MAX_RANK], n_part = 1, n_red = 1;
  uint32_t rest = 0;
  for (int32_t d = 0; d < rank; ++d) {
    const int in_run = d >= r0 && d <= last_red;
    part[d] = in_run ? 1 : shape[d];
    if (!in_run) n_part *= shape[d];
    if (mask & (1u << d)) n_red *= shape[d];
    if ((mask & (1u << d)) && !in_run) rest |= 1u << d;
  }
  float* tmp = malloc((size_t)(n_part > 0 ? n_part : 1) * sizeof(float));
  if (!tmp) return 0;
  const kiln_reduce_t sum_op = op == KILN_REDUCE_MEAN ? KILN_REDUCE_SUM : op;
  kiln_reduce(sum_op, KILN_F32, rank, shape, mask & ~rest, x, tmp, pool);
  kiln_reduce(sum_op, KILN_F32, rank, part, rest, tmp, out, pool);
  free(tmp);
  if (op == KILN_REDUCE_MEAN) {
    int64_t n_out = 1;
    for (int32_t d = 0; d < rank; ++d)
      if (!(mask & (1u << d))) n_out *= shape[d];
    for (int64_t i = 0; i < n_out; ++i) ((float*)out)[i] /= (float)n_red;
  }
  return 1;
}

void kiln_reduce(kiln_reduce_t op, kiln_dtype_t dtype, int32_t rank, const int64_t* shape,
                 uint32_t mask, const void* x, void* out, kiln_pool_t* pool) {
  int64_t n_out = 1, n_red = 1;
  for (int32_t d = 0; d < rank; ++d) {
    if (mask & (1u << d)) n_red *= shape[d];
    else n_out *= shape[d];
  }
  if (n_out == 0) return;
  /* Where the reduced axes sit: all trailing (rows), one run, or several. */
  int32_t last_red = -1, first_red = rank, last_kept = -1;
  for (int32_t d = 0; d < rank; ++d) {
    if (mask & (1u << d)) {
      last_red = d;
      if (first_red == rank) first_red = d;
    } else {
      last_kept = d;
    }
  }
  int trailing = last_kept < first_red;
  /* One run of consecutive reduced axes (size-1 axes between them do not
   * break it): x as (outer, n_red, inner). */
  int run = 1;
  for (int32_t d = first_red; d <= last_red; ++d)
    if (!(mask & (1u << d)) && shape[d] != 1) run = 0;
  if (run && dtype == KILN_F32 && op != KILN_REDUCE_ANY && n_red > 0) {
    int64_t outer = 1;
    for (int32_t d = 0; d < first_red; ++d) outer *= shape[d];
    kiln_reduce_ctx_t c = {op, outer, n_red, n_out / outer, 0, 1, x, out, kiln_reduce_rows()};
    kiln_reduce_split(&c, pool);
    return;
  }
  if (run && op == KILN_REDUCE_ANY && (dtype == KILN_BOOL || dtype == KILN_U8)) {
    /* any over bytes (torch.isnan(x).any(), a mask's any): ORs, which
     * vectorise, where the generic step took 1.2 ms for 786 K bools. */
    int64_t outer = 1;
    for (int32_t d = 0; d < first_red; ++d) outer *= shape[d];
    const int64_t inner = n_out / outer;
    const uint8_t* b = x;
    uint8_t* o = out;
    for (int64_t a = 0; a < outer; ++a) {
      const uint8_t* blk = b + a * n_red * inner;
      if (inner == 1) {
        uint8_t acc = 0;
        for (int64_t r = 0; r < n_red; ++r) acc |= blk[r];
        o[a] = acc != 0;
        continue;
      }
      uint8_t* row = o + a * inner;
      memset(row, 0, (size_t)inner);
      for (int64_t r = 0; r < n_red; ++r)
        for (int64_t j = 0; j < inner; ++j) row[j] |= blk[r * inner + j];
      for (int64_t j = 0; j < inner; ++j) row[j] = row[j] != 0;
    }
    return;
  }
  if (!run && dtype == KILN_F32 && op != KILN_REDUCE_ANY && n_red > 0 &&
      kiln_reduce_by_runs(op, rank, shape, mask, last_red, x, out, pool))
    return;
  if (trailing && dtype == KILN_I64 && op == KILN_REDUCE_SUM) {
    /* Counts ((x > 0).sum(-1), a mask's lengths): a typed loop, wrapping
     * as torch; the generic step's per-element switch took 3.6 ms for
     * 1024 rows of 768. */
    const int64_t* xi = x;
    for (int64_t o = 0; o < n_out; ++o) {
      uint64_t acc = 0;
      for (int64_t i = 0; i < n_red; ++i) acc += (uint64_t)xi[o * n_red + i];
      ((int64_t*)out)[o] = (int64_t)acc;
    }
    return;
  }
  if (trailing) {
    for (int64_t o = 0; o < n_out; ++o) {
      kiln_reduce_acc_t a = kiln_reduce_acc_init(op);
      for (int64_t i = 0; i < n_red; ++i) kiln_reduce_acc_step(op, dtype, &a, x, o * n_red + i);
      kiln_reduce_acc_store(op, dtype, out, o, a, n_red);
    }
    return;
  }
  /* Mixed: each output walks its reduced elements with an odometer over the
   * reduced axes (element strides of x), starting from its kept index. */
  int64_t stride[KILN_ND_MAX_RANK], s = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape[d];
  }
  int32_t kept[KILN_ND_MAX_RANK], red[KILN_ND_MAX_RANK], nk = 0, nr = 0;
  for (int32_t d = 0; d < rank; ++d) {
    if (mask & (1u << d)) red[nr++] = d;
    else kept[nk++] = d;
  }
  int64_t kidx[KILN_ND_MAX_RANK] = {0};
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t base = 0;
    for (int32_t i = 0; i < nk; ++i) base += kidx[i] * stride[kept[i]];
    kiln_reduce_acc_t a = kiln_reduce_acc_init(op);
    int64_t ridx[KILN_ND_MAX_RANK] = {0}, off = base;
    for (int64_t r = 0; r < n_red; ++r) {
      kiln_reduce_acc_step(op, dtype, &a, x, off);
      for (int32_t i = nr - 1; i >= 0; --i) {
        off += stride[red[i]];
        if (++ridx[i] < shape[red[i]]) break;
        off -= stride[red[i]] * shape[red[i]];
        ridx[i] = 0;
      }
    }
    kiln_reduce_acc_store(op, dtype, out, o, a, n_red);
    for (int32_t i = nk - 1; i >= 0; --i) {
      if (++kidx[i] < shape[kept[i]]) break;
      kidx[i] = 0;
    }
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
      if (dtype == KILN_F32) { /* the first NaN wins, as torch */
        const float* f = x;
        float bv = len ? f[o * len * inner + j] : 0.0f;
        for (int64_t i = 1; i < len && bv == bv; ++i) {
          float v = f[(o * len + i) * inner + j];
          if (v > bv || v != v) {
            bv = v;
            best = i;
          }
        }
      } else { /* in int64: doubles would tie int64 values past 2^53 */
        int64_t bv = len ? kiln_reduce_load_int(dtype, x, o * len * inner + j) : 0;
        for (int64_t i = 1; i < len; ++i) {
          int64_t v = kiln_reduce_load_int(dtype, x, (o * len + i) * inner + j);
          if (v > bv) {
            bv = v;
            best = i;
          }
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
