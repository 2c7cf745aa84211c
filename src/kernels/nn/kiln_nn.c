/* The public entry points of the nn family: pick the ISA variant's kernel
 * table from kiln_cpu_isa() (checked on every call, so kiln_cpu_isa_set in
 * tests takes effect at once; it is a load and a compare) and share the
 * work out over the pool. Small inputs run on the caller: waking the pool
 * costs more than a few tens of KiB of work.
 */
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/nn/kiln_attention_bf16.h"
#include "kernels/nn/kiln_nn_internal.h"

/* Below this many elements a call is not worth splitting. */
enum { KILN_NN_MIN_PARALLEL = 32768, KILN_NN_TASKS_PER_THREAD = 4 };

static const kiln_nn_kernels_t* const kiln_nn_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_NN_ISAS, &kiln_nn_kernels);

static const kiln_nn_kernels_t* kiln_nn_kernels(void) {
  return kiln_nn_variants[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_NN_ISAS),
                                                 kiln_cpu_isa())];
}

/* Splits [0, count) into tasks of `per_task` items. */
typedef struct kiln_nn_split_s {
  const kiln_nn_kernels_t* k;
  size_t count, per_task;
} kiln_nn_split_t;

static size_t kiln_nn_split_init(kiln_nn_split_t* sp, size_t count, size_t item_size,
                                 size_t align, kiln_pool_t* pool) {
  sp->k = kiln_nn_kernels();
  sp->count = count;
  int threads = kiln_pool_size(pool);
  size_t total = count * item_size;
  if (threads <= 1 || total < KILN_NN_MIN_PARALLEL || count < 2) {
    sp->per_task = count ? count : 1;
    return count ? 1 : 0;
  }
  size_t tasks = (size_t)threads * KILN_NN_TASKS_PER_THREAD;
  size_t max_tasks = total / (KILN_NN_MIN_PARALLEL / 4);
  if (tasks > max_tasks) tasks = max_tasks;
  if (tasks > count) tasks = count;
  if (tasks < 1) tasks = 1;
  size_t per = (count + tasks - 1) / tasks;
  per = (per + align - 1) / align * align;
  sp->per_task = per;
  return (count + per - 1) / per;
}

static void kiln_nn_range(const kiln_nn_split_t* sp, size_t task, size_t* lo, size_t* hi) {
  *lo = task * sp->per_task;
  *hi = *lo + sp->per_task < sp->count ? *lo + sp->per_task : sp->count;
}

typedef struct kiln_nn_unary_ctx_s {
  kiln_nn_split_t sp;
  kiln_unary_t op;
  const float* x;
  float* y;
} kiln_nn_unary_ctx_t;

static void kiln_nn_unary_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_unary_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->unary(c->op, hi - lo, c->x + lo, c->y + lo);
}

void kiln_unary_f32(kiln_unary_t op, size_t n, const float* x, float* y, kiln_pool_t* pool) {
  if ((unsigned)op >= KILN_UNARY_COUNT) return;
  kiln_nn_unary_ctx_t c = {.op = op, .x = x, .y = y};
  size_t tasks = kiln_nn_split_init(&c.sp, n, sizeof(float), 64, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_unary_task, &c);
}

typedef struct kiln_nn_gelu_backward_ctx_s {
  kiln_nn_split_t sp;
  int tanh_form;
  const float* dy;
  const float* x;
  float* dx;
} kiln_nn_gelu_backward_ctx_t;

static void kiln_nn_gelu_backward_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_gelu_backward_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->gelu_backward(c->tanh_form, hi - lo, c->dy + lo, c->x + lo, c->dx + lo);
}

void kiln_gelu_backward_f32(int tanh_form, size_t n, const float* dy, const float* x, float* dx,
                            kiln_pool_t* pool) {
  kiln_nn_gelu_backward_ctx_t c = {.tanh_form = tanh_form, .dy = dy, .x = x, .dx = dx};
  size_t tasks = kiln_nn_split_init(&c.sp, n, sizeof(float), 64, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_gelu_backward_task, &c);
}

void kiln_activation_f32(kiln_activation_t act, size_t n, float* x) {
  if ((unsigned)act >= KILN_ACT_COUNT) return;
  kiln_nn_kernels()->activation(act, n, x);
}

typedef struct kiln_nn_rows_ctx_s {
  kiln_nn_split_t sp;
  size_t cols;
  const float* x;
  const float* gamma;
  const float* beta;
  float eps;
  int log;
  float* y;
} kiln_nn_rows_ctx_t;

static void kiln_nn_softmax_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_rows_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->softmax_rows(lo, hi, c->cols, c->x, c->y, c->log);
}

void kiln_softmax_f32(size_t rows, size_t cols, const float* x, float* y, int log,
                      kiln_pool_t* pool) {
  if (cols == 0) return;
  kiln_nn_rows_ctx_t c = {.cols = cols, .x = x, .y = y, .log = log};
  size_t tasks = kiln_nn_split_init(&c.sp, rows, cols * sizeof(float), 1, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_softmax_task, &c);
}

/* The strided softmax: a task is one outer block's run of cw columns,
 * gathered as cw rows of len into a buffer (the same elements, contiguous),
 * the row kernel in place, then scattered back. The column-by-column loop
 * with scalar exponentials (now the reference) took 4.5 ms for a softmax
 * over axis 1 of (8, 128, 768) (Zen 5, 2 threads); rows are also what the
 * last axis gets, so both axes give the same numbers. */
enum { KILN_NN_STRIDED_FLOATS = 8192 };

typedef struct {
  const kiln_nn_kernels_t* k;
  int64_t len, inner, cw, chunks;
  const float* x;
  float* y;
  int log;
} kiln_nn_strided_ctx_t;

static void kiln_nn_softmax_strided_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_nn_strided_ctx_t* c = ctx;
  const int64_t o = (int64_t)task / c->chunks, j0 = ((int64_t)task % c->chunks) * c->cw;
  const int64_t cw = c->inner - j0 < c->cw ? c->inner - j0 : c->cw, len = c->len;
  float buf[KILN_NN_STRIDED_FLOATS];
  if (cw <= 0 || len <= 0) return;
  const float* xb = c->x + o * len * c->inner + j0;
  float* yb = c->y + o * len * c->inner + j0;
  for (int64_t i = 0; i < len; ++i)
    for (int64_t j = 0; j < cw; ++j) buf[j * len + i] = xb[i * c->inner + j];
  c->k->softmax_rows(0, (size_t)cw, (size_t)len, buf, buf, c->log);
  for (int64_t i = 0; i < len; ++i)
    for (int64_t j = 0; j < cw; ++j) yb[i * c->inner + j] = buf[j * len + i];
}

void kiln_softmax_strided_f32(int64_t outer, int64_t len, int64_t inner, const float* x,
                              float* y, int log, kiln_pool_t* pool) {
  if (outer <= 0 || len <= 0 || inner <= 0) return;
  if (len > KILN_NN_STRIDED_FLOATS) { /* a column longer than the buffer: rare */
    kiln_softmax_strided_f32_reference(outer, len, inner, x, y, log);
    return;
  }
  kiln_nn_strided_ctx_t c = {kiln_nn_kernels(), len, inner, 1, 1, x, y, log};
  c.cw = KILN_NN_STRIDED_FLOATS / len;
  if (c.cw > inner) c.cw = inner;
  c.chunks = (inner + c.cw - 1) / c.cw;
  kiln_pool_parallel_for(pool, (size_t)(outer * c.chunks), kiln_nn_softmax_strided_task, &c);
}

static void kiln_nn_layer_norm_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_rows_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->layer_norm_rows(lo, hi, c->cols, c->x, c->gamma, c->beta, c->eps, c->y);
}

void kiln_layer_norm_f32(size_t rows, size_t cols, const float* x, const float* gamma,
                         const float* beta, float eps, float* y, kiln_pool_t* pool) {
  if (cols == 0) return;
  kiln_nn_rows_ctx_t c = {.cols = cols, .x = x, .gamma = gamma, .beta = beta, .eps = eps, .y = y};
  size_t tasks = kiln_nn_split_init(&c.sp, rows, cols * sizeof(float), 1, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_layer_norm_task, &c);
}

typedef struct kiln_nn_ln_backward_ctx_s {
  kiln_nn_split_t sp;
  size_t cols;
  const float *dy, *x, *mean, *rstd, *gamma;
  float* dx;
} kiln_nn_ln_backward_ctx_t;

static void kiln_nn_layer_norm_backward_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_ln_backward_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->layer_norm_backward_rows(lo, hi, c->cols, c->dy, c->x, c->mean, c->rstd, c->gamma,
                                    c->dx);
}

void kiln_layer_norm_backward_f32(size_t rows, size_t cols, const float* dy, const float* x,
                                  const float* mean, const float* rstd, const float* gamma,
                                  float* dx, kiln_pool_t* pool) {
  if (cols == 0) return;
  kiln_nn_ln_backward_ctx_t c = {.cols = cols, .dy = dy, .x = x, .mean = mean, .rstd = rstd,
                                 .gamma = gamma, .dx = dx};
  size_t tasks = kiln_nn_split_init(&c.sp, rows, 2 * cols * sizeof(float), 1, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_layer_norm_backward_task, &c);
}

static void kiln_nn_rms_norm_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_rows_ctx_t* c = ctx;
  size_t lo, hi;
  kiln_nn_range(&c->sp, task, &lo, &hi);
  c->sp.k->rms_norm_rows(lo, hi, c->cols, c->x, c->gamma, c->eps, c->y);
}

void kiln_rms_norm_f32(size_t rows, size_t cols, const float* x, const float* gamma,
                       float eps, float* y, kiln_pool_t* pool) {
  if (cols == 0) return;
  kiln_nn_rows_ctx_t c = {.cols = cols, .x = x, .gamma = gamma, .eps = eps, .y = y};
  size_t tasks = kiln_nn_split_init(&c.sp, rows, cols * sizeof(float), 1, pool);
  kiln_pool_parallel_for(pool, tasks, kiln_nn_rms_norm_task, &c);
}

typedef struct kiln_nn_attention_ctx_s {
  const kiln_nn_kernels_t* k;
  kiln_nn_attention_plan_t plan;
} kiln_nn_attention_ctx_t;

static void kiln_nn_attention_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_nn_attention_ctx_t* c = ctx;
  c->k->attention_task(&c->plan, task);
}

/* The key-split parts' partial outputs (kiln_nn_internal.h): small (decode
 * rows x parts), kept call to call so a decode step does not allocate. */
static kiln_scratch_cache_t kiln_nn_attention_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)4 << 20);

const char* kiln_attention_bf16_describe(int decode) {
  if (decode)
    return "bf16 attention, decode steps: the fp32 kernels on bf16-rounded q, k, v and weights "
           "(bound by reading K and V)";
  if (kiln_cpu_isa() == KILN_ISA_AVX512 && (kiln_cpu_bf16() & KILN_CPU_BF16_AMX))
    return "bf16 attention: AMX tiles (TDPBF16PS) for Q·K^T and P·V, fp32 softmax";
  if (kiln_cpu_isa() == KILN_ISA_AVX512 && (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512))
    return "bf16 attention: AVX512_BF16 dot products (VDPBF16PS) for Q·K^T and P·V, fp32 softmax";
  return "bf16 attention: the fp32 kernels on bf16-rounded q, k, v and weights (no bf16 engine)";
}

/* The scan of kiln_attention_hidden_keys_inert: q, k and v cut into their
 * (batch, head) slices, one task per slice; each task folds its largest
 * |x| into bits[tensor] as an integer max (|x|'s bits order as |x| does;
 * Inf and NaN are >= 0x7f800000). */
typedef struct kiln_attention_scan_s {
  const float* x[3];
  const int64_t* st[3];
  int64_t heads[3], rows[3], cols[3];
  int64_t slices[3]; /* batch x heads of each */
  atomic_uint bits[3];
} kiln_attention_scan_t;

static void kiln_attention_scan_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_attention_scan_t* c = ctx;
  int t = 0;
  int64_t s = (int64_t)task;
  while (t < 2 && s >= c->slices[t]) s -= c->slices[t++];
  const int64_t* st = c->st[t];
  const float* base = c->x[t] + s / c->heads[t] * st[0] + s % c->heads[t] * st[1];
  int32_t m = 0; /* |x| <= 0x7fffffff: a signed max, which SSE2 has */
  for (int64_t i = 0; i < c->rows[t]; ++i) {
    const float* row = base + i * st[2];
    if (st[3] == 1) {
      for (int64_t j = 0; j < c->cols[t]; ++j) {
        int32_t u;
        memcpy(&u, row + j, sizeof u);
        u &= 0x7fffffff;
        m = u > m ? u : m;
      }
    } else {
      for (int64_t j = 0; j < c->cols[t]; ++j) {
        int32_t u;
        memcpy(&u, row + j * st[3], sizeof u);
        u &= 0x7fffffff;
        m = u > m ? u : m;
      }
    }
  }
  unsigned seen = atomic_load_explicit(&c->bits[t], memory_order_relaxed);
  while ((unsigned)m > seen &&
         !atomic_compare_exchange_weak_explicit(&c->bits[t], &seen, (unsigned)m,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* 1 when skipping hidden keys gives what reading them gives (every_key):
 * q, k and v finite and |q| |k| D |scale| far from float's range, so every
 * score is finite (a hidden one, plus the causal -inf, is -inf: weight 0)
 * and every value finite (0 v = 0). Each |x| also stays below bf16's
 * largest finite value, so the bf16 rule's rounding makes no Inf. An O(n)
 * pass over q, k and v (on the pool) before O(n^2) attention. */
static int kiln_attention_hidden_keys_inert(const kiln_attention_args_t* a, kiln_pool_t* pool) {
  kiln_attention_scan_t c = {
      .x = {a->q, a->k, a->v},
      .st = {a->q_strides, a->k_strides, a->v_strides},
      .heads = {a->heads, a->kv_heads, a->kv_heads},
      .rows = {a->q_len, a->kv_len, a->kv_len},
      .cols = {a->head_dim, a->head_dim, a->v_head_dim},
      .slices = {a->batch * a->heads, a->batch * a->kv_heads, a->batch * a->kv_heads}};
  for (int t = 0; t < 3; ++t) atomic_init(&c.bits[t], 0u);
  kiln_pool_parallel_for(pool, (size_t)(c.slices[0] + c.slices[1] + c.slices[2]),
                         kiln_attention_scan_task, &c);
  float m[3];
  for (int t = 0; t < 3; ++t) {
    uint32_t bits = atomic_load(&c.bits[t]);
    if (bits >= 0x7f800000u) return 0; /* Inf or NaN */
    memcpy(&m[t], &bits, sizeof m[t]);
    if (m[t] >= 3e38f) return 0; /* bf16 rounding could make it Inf */
  }
  const double limit = 1e30; /* float's range is 3.4e38 */
  double scale = a->scale < 0.0f ? -(double)a->scale : (double)a->scale;
  return (double)m[0] * (scale > 1.0 ? scale : 1.0) * (double)m[1] * (double)a->head_dim < limit;
}

void kiln_attention_f32(const kiln_attention_args_t* args, kiln_pool_t* pool) {
  kiln_attention_f32_as_threads(args, pool, kiln_pool_size(pool));
}

void kiln_attention_f32_as_threads(const kiln_attention_args_t* args, kiln_pool_t* pool,
                                   int plan_threads) {
  const kiln_attention_args_t* a = args;
  if (a->batch <= 0 || a->heads <= 0 || a->kv_heads <= 0 || a->q_len <= 0 ||
      a->v_head_dim < 0 || a->head_dim < 0 || a->kv_len < 0 || a->heads % a->kv_heads)
    return;
  /* Only a causal limit or a mask hides keys from the tiled kernels. */
  if (a->every_key && (a->causal || a->mask) && !kiln_attention_hidden_keys_inert(a, pool)) {
    kiln_attention_f32_reference(a); /* non-finite inputs: exact, single-threaded */
    return;
  }
  kiln_nn_attention_ctx_t c = {.k = kiln_nn_kernels()};
  c.k->attention_plan(a, plan_threads > 0 ? plan_threads : 1, &c.plan);
  size_t blocks = (size_t)(a->batch * a->kv_heads * c.plan.q_blocks);
  void* blk = NULL;
  if (c.plan.kv_parts > 1) {
    size_t floats = blocks * (size_t)c.plan.kv_parts *
                    (size_t)kiln_nn_attention_partial_floats(&c.plan);
    char* mem = kiln_scratch_get(&kiln_nn_attention_scratch_,
                                 floats * sizeof(float) + blocks * sizeof(atomic_int), &blk);
    if (mem) {
      c.plan.partial = (float*)mem;
      c.plan.pending = (atomic_int*)(mem + floats * sizeof(float));
      for (size_t i = 0; i < blocks; ++i) atomic_init(&c.plan.pending[i], (int)c.plan.kv_parts);
    } else {
      c.plan.kv_parts = 1; /* out of memory: the same result unsplit, on fewer threads */
    }
  }
  kiln_pool_parallel_for(pool, blocks * (size_t)c.plan.kv_parts, kiln_nn_attention_task, &c);
  if (blk) kiln_scratch_put(&kiln_nn_attention_scratch_, blk);
}
