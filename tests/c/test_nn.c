/* Tests of the nn kernels (src/kernels/nn) against their scalar references,
 * with every ISA level this CPU supports forced in turn (kiln_cpu_isa_set)
 * and with 1- and 2-thread pools.
 *
 * Tolerances, per kernel, as atol + rtol * |want| (kiln_test_compare_f32):
 * - unary math: rtol 5e-7 (about 4 ulp: an ulp is 2^-24..2^-23 of a value)
 *   against libm (float) or a double evaluation (sigmoid, silu, gelu,
 *   gelu_tanh), atol 1e-44 where results can be denormal (a few units of the
 *   smallest denormal); silu, gelu and gelu_tanh multiply a denormal by x,
 *   so they get atol 1e-36 ("tiny near zero"). The simple ops are exact.
 * - softmax: rtol 1e-6, atol 1e-9: x - max is rounded in float (the
 *   reference subtracts in double) and e^ turns that into a relative error
 *   of |x - max| ulp, which only matters for probabilities far below 1e-9.
 *   log-softmax: atol 2e-6 + rtol 1e-6 for the same rounding of x - max.
 * - layer/rms norm: atol 1e-5, rtol 1e-5: fp32 statistics vs double; rows
 *   with |mean| = 30 std keep ~5 digits after centring.
 * - attention: atol 2e-5, rtol 1e-4: fp32 dot products over D <= 300 terms
 *   and running sums over Skv keys, against double.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/nn/kiln_nn.h"
#include "kiln_test.h"

static const size_t kiln_test_nn_sizes[] = {0, 1, 7, 8, 9, 31, 33, 1031};

/* Special values every unary op sees, then a sweep over the float bit
 * patterns (every exponent, both signs, NaN, inf and denormals). */
static size_t kiln_test_nn_special(float* x, size_t cap) {
  static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 1e-45f,
                             -1e-45f, 1e-40f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 88.72f,
                             88.73f, 89.0f, -87.3f, -100.0f, -103.9f, -104.0f, -110.0f, 0.625f,
                             -0.625f, 0.875f, -0.875f, 10.0f, -10.0f, 14.2f, -14.2f, 0.5f, 2.0f,
                             1e-3f, -1e-3f, 1.0000001f, 0.99999994f, 3.0f, -3.0f, 6.0f, -6.0f};
  size_t n = 0;
  for (size_t i = 0; i < sizeof sp / sizeof sp[0] && n < cap; ++i) x[n++] = sp[i];
  for (uint64_t u = 0x00000123u; u <= 0xFFFFFFFFu && n < cap; u += 0x00010003u) {
    uint32_t b = (uint32_t)u;
    memcpy(&x[n++], &b, sizeof b);
  }
  return n;
}

static void kiln_test_nn_unary_tol(kiln_unary_t op, float* atol, float* rtol) {
  *atol = 0.0f;
  *rtol = 0.0f;
  switch (op) {
    case KILN_UNARY_EXP: case KILN_UNARY_TANH: case KILN_UNARY_SIGMOID: case KILN_UNARY_ERF:
      *atol = 1e-44f;
      *rtol = 5e-7f;
      break;
    case KILN_UNARY_LOG: *rtol = 5e-7f; break;
    case KILN_UNARY_GELU: case KILN_UNARY_GELU_TANH: case KILN_UNARY_SILU:
      *atol = 1e-36f;
      *rtol = 5e-7f;
      break;
    default: break; /* exact: same libm call, or IEEE ops */
  }
}

static const char* const kiln_test_nn_unary_names[] = {
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "relu",
    "gelu", "gelu_tanh", "silu", "erf", "sin", "cos"};
_Static_assert(sizeof(kiln_test_nn_unary_names) / sizeof(kiln_test_nn_unary_names[0]) ==
                   KILN_UNARY_COUNT, "one name per unary op");

static void kiln_test_nn_unary(kiln_pool_t* pool, const char* isa) {
  enum { CAP = 70000 };
  float* x = malloc(CAP * sizeof(float));
  float* y = malloc(CAP * sizeof(float));
  float* w = malloc(CAP * sizeof(float));
  if (!x || !y || !w) goto done;
  size_t ns = kiln_test_nn_special(x, CAP);
  char what[96];
  for (int op = 0; op < KILN_UNARY_COUNT; ++op) {
    float atol, rtol;
    kiln_test_nn_unary_tol((kiln_unary_t)op, &atol, &rtol);
    /* The sweep, then in place (y aliases x). */
    kiln_unary_f32((kiln_unary_t)op, ns, x, y, pool);
    kiln_unary_f32_reference((kiln_unary_t)op, ns, x, w);
    snprintf(what, sizeof what, "%s %s sweep", isa, kiln_test_nn_unary_names[op]);
    kiln_test_compare_f32(what, y, w, ns, atol, rtol);
    memcpy(y, x, ns * sizeof(float));
    kiln_unary_f32((kiln_unary_t)op, ns, y, y, pool);
    snprintf(what, sizeof what, "%s %s in place", isa, kiln_test_nn_unary_names[op]);
    kiln_test_compare_f32(what, y, w, ns, atol, rtol);
    /* x and y overlapping, y 3 floats after x and before it (no caller
     * does this; the loop moves x into place first). One call of the
     * loop: a pool's tasks would race over such arrays. */
    for (int shift = -3; shift <= 3; shift += 6) {
      float* xs = y + 3;
      memcpy(xs, x, ns * sizeof(float));
      kiln_unary_f32((kiln_unary_t)op, ns, xs, xs + shift, NULL);
      snprintf(what, sizeof what, "%s %s overlapping by %d", isa, kiln_test_nn_unary_names[op],
               shift);
      kiln_test_compare_f32(what, xs + shift, w, ns, atol, rtol);
    }
    /* Every tail length, dense values where the functions change form. */
    for (size_t s = 0; s < sizeof kiln_test_nn_sizes / sizeof kiln_test_nn_sizes[0]; ++s) {
      size_t n = kiln_test_nn_sizes[s];
      kiln_test_fill_f32(x + ns, n, (unsigned)(op * 31 + s), -12.0f, 12.0f);
      kiln_unary_f32((kiln_unary_t)op, n, x + ns, y, pool);
      kiln_unary_f32_reference((kiln_unary_t)op, n, x + ns, w);
      snprintf(what, sizeof what, "%s %s n=%zu", isa, kiln_test_nn_unary_names[op], n);
      kiln_test_compare_f32(what, y, w, n, atol, rtol);
    }
  }
  /* The sign of a zero result, as the reference gives it (gelu(-0) = -0, x
   * Phi(x)): an op that reads it (1/x, pow(x, -1)) makes -inf or +inf of
   * it (fuzz seed 20094 graph 6639). Zeros of both signs over a length
   * the vector loops run whole. */
  for (int op = 0; op < KILN_UNARY_COUNT; ++op) {
    enum { Z = 64 };
    for (int i = 0; i < Z; ++i) x[i] = i % 2 ? 0.0f : -0.0f;
    kiln_unary_f32((kiln_unary_t)op, Z, x, y, pool);
    kiln_unary_f32_reference((kiln_unary_t)op, Z, x, w);
    int bad = 0;
    for (int i = 0; i < Z; ++i) bad += y[i] == 0.0f && w[i] == 0.0f && signbit(y[i]) != signbit(w[i]);
    KILN_EXPECT(bad == 0, "%s %s(-0) = %g, (+0) = %g; the reference's %g, %g", isa, kiln_test_nn_unary_names[op],
                (double)y[0], (double)y[1], (double)w[0], (double)w[1]);
  }
  /* Activations map onto the unary ops. */
  static const kiln_unary_t act_op[KILN_ACT_COUNT] = {
      KILN_UNARY_COUNT, KILN_UNARY_RELU, KILN_UNARY_GELU, KILN_UNARY_GELU_TANH,
      KILN_UNARY_SILU, KILN_UNARY_SIGMOID, KILN_UNARY_TANH, KILN_UNARY_COUNT, KILN_UNARY_COUNT};
  for (int act = 0; act < KILN_ACT_COUNT; ++act) {
    size_t n = 1031;
    kiln_test_fill_f32(x, n, 77u + (unsigned)act, -8.0f, 8.0f);
    memcpy(y, x, n * sizeof(float));
    kiln_activation_f32((kiln_activation_t)act, n, y);
    if (act_op[act] == KILN_UNARY_COUNT) /* none, relu6, hardswish: exact */
      for (size_t i = 0; i < n; ++i) w[i] = kiln_activation_scalar(x[i], (kiln_activation_t)act);
    else kiln_unary_f32_reference(act_op[act], n, x, w);
    float atol = 0.0f, rtol = 0.0f;
    if (act_op[act] != KILN_UNARY_COUNT) kiln_test_nn_unary_tol(act_op[act], &atol, &rtol);
    snprintf(what, sizeof what, "%s activation %d", isa, act);
    kiln_test_compare_f32(what, y, w, n, atol, rtol);
  }
done:
  free(x);
  free(y);
  free(w);
}

static void kiln_test_nn_softmax(kiln_pool_t* pool, const char* isa) {
  static const size_t shapes[][2] = {{0, 5}, {1, 1}, {2, 7}, {3, 8}, {5, 9},
                                     {4, 31}, {2, 33}, {3, 1031}, {64, 1000}};
  char what[96];
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
    float* x = malloc((n + 1) * sizeof(float));
    float* y = malloc((n + 1) * sizeof(float));
    float* w = malloc((n + 1) * sizeof(float));
    if (!x || !y || !w) goto next;
    kiln_test_fill_f32(x, n, (unsigned)s, -20.0f, 20.0f);
    if (rows >= 3 && cols >= 2) {
      x[0] = -INFINITY;                                           /* row 0: one -inf */
      for (size_t i = 0; i < cols; ++i) x[cols + i] = -INFINITY; /* row 1: all -inf: NaN */
      x[2 * cols + cols / 2] = NAN;                               /* row 2: NaN */
    }
    for (int log = 0; log < 2; ++log) {
      kiln_softmax_f32(rows, cols, x, y, log, pool);
      kiln_softmax_f32_reference(rows, cols, x, w, log);
      snprintf(what, sizeof what, "%s %ssoftmax %zux%zu", isa, log ? "log_" : "", rows, cols);
      kiln_test_compare_f32(what, y, w, n, log ? 2e-6f : 1e-9f, 1e-6f);
      if (rows >= 3 && cols >= 2) KILN_EXPECT(isnan(y[cols]) && isnan(y[2 * cols]), "%s", what);
    }
    memcpy(y, x, n * sizeof(float));
    kiln_softmax_f32(rows, cols, y, y, 0, pool); /* in place */
    kiln_softmax_f32_reference(rows, cols, x, w, 0);
    snprintf(what, sizeof what, "%s softmax in place %zux%zu", isa, rows, cols);
    kiln_test_compare_f32(what, y, w, n, 1e-9f, 1e-6f);
  next:
    free(x);
    free(y);
    free(w);
  }
}

/* Softmax along a middle axis, (outer, len, inner), the columns gathered
 * into rows for the row kernel: against the reference that walks them in
 * place, with -inf, an all -inf column (NaN) and a NaN column; blocks of
 * columns that do not divide inner, a column longer than the task buffer
 * (the reference itself). Tolerances as the rows'. */
static void kiln_test_nn_softmax_strided(kiln_pool_t* pool, const char* isa) {
  static const int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 5}, {3, 7, 33}, {2, 128, 77},
                                      {1, 1000, 20}, {2, 9000, 2}};
  char what[96];
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const int64_t outer = shapes[s][0], len = shapes[s][1], inner = shapes[s][2];
    const size_t n = (size_t)(outer * len * inner);
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    float* w = malloc(n * sizeof(float));
    if (!x || !y || !w) goto next;
    kiln_test_fill_f32(x, n, (unsigned)(s + 11), -20.0f, 20.0f);
    if (len >= 2 && inner >= 3) {
      x[0] = -INFINITY;                                              /* column 0: one -inf */
      for (int64_t i = 0; i < len; ++i) x[i * inner + 1] = -INFINITY; /* column 1: NaN */
      x[(len / 2) * inner + 2] = NAN;                                /* column 2: NaN */
    }
    for (int log = 0; log < 2; ++log) {
      kiln_softmax_strided_f32(outer, len, inner, x, y, log, pool);
      kiln_softmax_strided_f32_reference(outer, len, inner, x, w, log);
      snprintf(what, sizeof what, "%s strided %ssoftmax %lldx%lldx%lld", isa, log ? "log_" : "",
               (long long)outer, (long long)len, (long long)inner);
      kiln_test_compare_f32(what, y, w, n, log ? 2e-6f : 1e-9f, 1e-6f);
    }
  next:
    free(x);
    free(y);
    free(w);
  }
}

static void kiln_test_nn_norms(kiln_pool_t* pool, const char* isa) {
  static const size_t shapes[][2] = {{0, 5}, {1, 1}, {2, 7}, {3, 8}, {5, 9},
                                     {4, 31}, {2, 33}, {3, 1031}, {48, 1024}};
  char what[96];
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
    float* x = malloc((n + 1) * sizeof(float));
    float* y = malloc((n + 1) * sizeof(float));
    float* w = malloc((n + 1) * sizeof(float));
    float* g = malloc((cols + 1) * sizeof(float));
    float* b = malloc((cols + 1) * sizeof(float));
    if (!x || !y || !w || !g || !b) goto next;
    kiln_test_fill_f32(x, n, 100u + (unsigned)s, -1.0f, 1.0f);
    /* Odd rows sit far from zero: the case a one-pass E[x^2] - E[x]^2
     * variance gets wrong. */
    for (size_t r = 1; r < rows; r += 2)
      for (size_t i = 0; i < cols; ++i) x[r * cols + i] += 30.0f;
    kiln_test_fill_f32(g, cols, 200u + (unsigned)s, 0.5f, 1.5f);
    kiln_test_fill_f32(b, cols, 300u + (unsigned)s, -1.0f, 1.0f);
    for (int v = 0; v < 4; ++v) {
      const float* gv = v & 1 ? g : NULL;
      const float* bv = v & 2 ? b : NULL;
      kiln_layer_norm_f32(rows, cols, x, gv, bv, 1e-5f, y, pool);
      kiln_layer_norm_f32_reference(rows, cols, x, gv, bv, 1e-5f, w);
      snprintf(what, sizeof what, "%s layer_norm %zux%zu g%d b%d", isa, rows, cols, !!gv, !!bv);
      kiln_test_compare_f32(what, y, w, n, 1e-5f, 1e-5f);
    }
    for (int v = 0; v < 2; ++v) {
      const float* gv = v ? g : NULL;
      kiln_rms_norm_f32(rows, cols, x, gv, 1e-6f, y, pool);
      kiln_rms_norm_f32_reference(rows, cols, x, gv, 1e-6f, w);
      snprintf(what, sizeof what, "%s rms_norm %zux%zu g%d", isa, rows, cols, v);
      kiln_test_compare_f32(what, y, w, n, 1e-5f, 1e-5f);
    }
  next:
    free(x);
    free(y);
    free(w);
    free(g);
    free(b);
  }
}

/* One attention case: q, k, v and mask are filled through their strides
 * (the buffers are sized by the largest offset), then fast vs reference. */
typedef struct kiln_test_attn_case_s {
  const char* name;
  int64_t b, h, hkv, sq, skv, d, dv;
  int layout;      /* 0: (B,H,S,D); 1: q, k as (B,S,H,D), v as (B,H,D,S) */
  int mask;        /* 0 none; 1 (Sq,Skv) broadcast; 2 (B,1,1,Skv) key padding;
                    * 3 (B,1,1,Skv) a valid prefix per batch (a static KV cache);
                    * 4 (B,1,Sq,Skv) a window of keys per row, some rows empty */
  int causal;
  int64_t offset;
  int nan_q;       /* poison one q element */
  int out_bshd;    /* out written as (B, Sq, H, Dv) through out_strides */
  int64_t poison;  /* > 0: NaN in k and v at keys >= poison, which the mask hides
                    * from every row: they must not be read (the reference
                    * sees only the keys before) */
  int64_t cap;     /* > skv (layout 0): k and v are views of the first skv rows
                    * of a (B, Hkv, cap, D) cache, NaN past skv */
} kiln_test_attn_case_t;

static void kiln_test_attn_strides(int64_t b, int64_t h, int64_t s, int64_t d, int perm,
                                   int64_t* st) {
  (void)b;
  if (perm == 0) {          /* (B, H, S, D) */
    st[3] = 1, st[2] = d, st[1] = s * d, st[0] = h * s * d;
  } else if (perm == 1) {   /* stored (B, S, H, D) */
    st[3] = 1, st[1] = d, st[2] = h * d, st[0] = s * h * d;
  } else {                  /* stored (B, H, D, S) */
    st[2] = 1, st[3] = s, st[1] = d * s, st[0] = h * d * s;
  }
}

/* NaN in k and v at keys [j0, j1) of every (batch, kv head), through a's strides. */
static void kiln_test_attn_nan_keys(const kiln_test_attn_case_t* c, const kiln_attention_args_t* a,
                                    float* k, float* v, int64_t j0, int64_t j1) {
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t h = 0; h < c->hkv; ++h)
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t e = 0; e < c->d; ++e)
          k[b * a->k_strides[0] + h * a->k_strides[1] + j * a->k_strides[2] + e * a->k_strides[3]] = NAN;
        for (int64_t e = 0; e < c->dv; ++e)
          v[b * a->v_strides[0] + h * a->v_strides[1] + j * a->v_strides[2] + e * a->v_strides[3]] = NAN;
      }
}

/* fast against reference: fp32's tolerance, or bf16's (test_attention_bf16.c). */
static void kiln_test_attn_compare(int bf16, const char* what, const float* got,
                                   const float* want, size_t n, size_t row, int vs_fast) {
  if (bf16) kiln_test_attn_bf16_compare(what, got, want, n, row);
  else if (vs_fast) kiln_test_compare_f32(what, got, want, n, 1e-6f, 1e-5f);
  else kiln_test_compare_f32(what, got, want, n, 2e-5f, 1e-4f);
}

static void kiln_test_nn_attention_case(const kiln_test_attn_case_t* c, kiln_pool_t* pool,
                                        const char* isa, int bf16) {
  kiln_attention_args_t a;
  memset(&a, 0, sizeof a);
  a.bf16 = bf16;
  a.batch = c->b, a.heads = c->h, a.kv_heads = c->hkv, a.q_len = c->sq, a.kv_len = c->skv;
  a.head_dim = c->d, a.v_head_dim = c->dv;
  kiln_test_attn_strides(c->b, c->h, c->sq, c->d, c->layout ? 1 : 0, a.q_strides);
  const int64_t rows_kv = c->cap > c->skv ? c->cap : c->skv; /* K/V rows allocated per head */
  kiln_test_attn_strides(c->b, c->hkv, rows_kv, c->d, c->layout ? 1 : 0, a.k_strides);
  kiln_test_attn_strides(c->b, c->hkv, rows_kv, c->dv, c->layout ? 2 : 0, a.v_strides);
  size_t nq = (size_t)(c->b * c->h * c->sq * c->d), nk = (size_t)(c->b * c->hkv * rows_kv * c->d);
  size_t nv = (size_t)(c->b * c->hkv * rows_kv * c->dv), no = (size_t)(c->b * c->h * c->sq * c->dv);
  size_t nm = c->mask == 1   ? (size_t)(c->sq * c->skv)
              : c->mask == 4 ? (size_t)(c->b * c->sq * c->skv)
                             : (size_t)(c->b * c->skv);
  float* q = malloc((nq + 1) * sizeof(float));
  float* k = malloc((nk + 1) * sizeof(float));
  float* v = malloc((nv + 1) * sizeof(float));
  float* m = malloc((nm + 1) * sizeof(float));
  float* y = malloc((no + 1) * sizeof(float));
  float* w = malloc((no + 1) * sizeof(float));
  if (!q || !k || !v || !m || !y || !w) goto done;
  kiln_test_fill_f32(q, nq, 1, -2.0f, 2.0f);
  kiln_test_fill_f32(k, nk, 2, -2.0f, 2.0f);
  kiln_test_fill_f32(v, nv, 3, -1.0f, 1.0f);
  kiln_test_fill_f32(m, nm, 4, -3.0f, 1.0f);
  if (c->nan_q && nq) q[nq / 2] = NAN;
  if (c->mask == 1) {
    /* (1, 1, Sq, Skv) broadcast over batch and heads; some -inf, and query
     * row 1 fully masked. */
    a.mask = m, a.mask_strides[2] = c->skv, a.mask_strides[3] = 1;
    for (size_t i = 0; i < nm; i += 5) m[i] = -INFINITY;
    if (c->sq > 1)
      for (int64_t j = 0; j < c->skv; ++j) m[c->skv + j] = -INFINITY;
  } else if (c->mask == 2) {
    /* (B, 1, 1, Skv) key padding: the last 3 keys of batch 0 dropped. */
    a.mask = m, a.mask_strides[0] = c->skv, a.mask_strides[3] = 1;
    for (int64_t j = c->skv - 3; j < c->skv; ++j)
      if (j >= 0) m[j] = -INFINITY;
  } else if (c->mask == 3) {
    /* (B, 1, 1, Skv): batch b sees its first 100 - 63 b keys, as decode
     * over a static cache sees the valid prefix. */
    a.mask = m, a.mask_strides[0] = c->skv, a.mask_strides[3] = 1;
    for (int64_t b = 0; b < c->b; ++b)
      for (int64_t j = 0; j < c->skv; ++j)
        if (j >= 100 - 63 * b) m[b * c->skv + j] = -INFINITY;
  } else if (c->mask == 4) {
    /* (B, 1, Sq, Skv): row i of batch b sees one window of keys (lo, hi);
     * every seventh row sees none. */
    a.mask = m, a.mask_strides[0] = c->sq * c->skv, a.mask_strides[2] = c->skv,
    a.mask_strides[3] = 1;
    for (int64_t b = 0; b < c->b; ++b)
      for (int64_t i = 0; i < c->sq; ++i) {
        int64_t lo = (b * 67 + i * 29) % (c->skv / 2 + 1), hi = lo + 1 + (i * 53) % 90;
        for (int64_t j = 0; j < c->skv; ++j)
          if (j < lo || j >= hi || i % 7 == 3) m[(b * c->sq + i) * c->skv + j] = -INFINITY;
      }
  }
  if (c->poison > 0) kiln_test_attn_nan_keys(c, &a, k, v, c->poison, c->skv);
  /* The cache's rows past the view: never read. */
  if (c->cap > c->skv) kiln_test_attn_nan_keys(c, &a, k, v, c->skv, c->cap);
  a.q = q, a.k = k, a.v = v, a.out = y;
  a.scale = c->d ? 1.0f / sqrtf((float)c->d) : 1.0f;
  a.causal = c->causal, a.causal_offset = c->offset;
  if (c->out_bshd) {
    a.out_strides[0] = c->sq * c->h * c->dv;
    a.out_strides[1] = c->dv;
    a.out_strides[2] = c->h * c->dv;
  }
  for (size_t i = 0; i < no; ++i) y[i] = 12345.0f; /* every element must be written */
  kiln_attention_f32(&a, pool);
  kiln_attention_args_t r = a;
  r.out = w;
  if (c->poison > 0) r.kv_len = c->poison;
  kiln_attention_f32_reference(&r);
  char what[160];
  snprintf(what, sizeof what, "%s attention%s %s", isa, bf16 ? " bf16" : "", c->name);
  kiln_test_attn_compare(bf16, what, y, w, no, (size_t)c->dv, 0);
  /* The work cut as for other thread counts: 1, 3 and 16 threads split a
   * decode step's keys into up to 32 parts (flash-decoding's merge), or
   * not at all where the blocks are enough. Each against the reference,
   * and the others against the 1-thread cut within the fp32 rounding of
   * the merge (a few ulp of outputs bounded by max |v| = 1): the thread
   * count changes no result beyond that. */
  static const int plan_threads[] = {1, 3, 16};
  float* u = malloc((no + 1) * sizeof(float));
  for (size_t t = 0; u && t < sizeof plan_threads / sizeof plan_threads[0]; ++t) {
    for (size_t i = 0; i < no; ++i) y[i] = 12345.0f;
    kiln_attention_f32_as_threads(&a, pool, plan_threads[t]);
    snprintf(what, sizeof what, "%s attention%s %s (cut for %d threads)", isa,
             bf16 ? " bf16" : "", c->name, plan_threads[t]);
    kiln_test_attn_compare(bf16, what, y, w, no, (size_t)c->dv, 0);
    if (t == 0) {
      memcpy(u, y, no * sizeof(float));
    } else {
      snprintf(what, sizeof what, "%s attention%s %s (cut for %d threads vs 1)", isa,
               bf16 ? " bf16" : "", c->name, plan_threads[t]);
      kiln_test_attn_compare(bf16, what, y, u, no, (size_t)c->dv, 1);
    }
  }
  free(u);
done:
  free(q);
  free(k);
  free(v);
  free(m);
  free(y);
  free(w);
}

void kiln_test_nn_attention_cases(kiln_pool_t* pool, const char* isa, int bf16) {
  static const kiln_test_attn_case_t cases[] = {
      {"gqa 2x4/2 37x45 d64", 2, 4, 2, 37, 45, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
      {"causal top-left", 1, 4, 2, 37, 45, 64, 64, 0, 0, 1, 0, 0, 0, 0, 0},
      {"causal offset kv-q", 1, 2, 1, 37, 45, 64, 64, 0, 0, 1, 8, 0, 0, 0, 0},
      {"causal offset -3 (empty rows)", 1, 2, 2, 20, 20, 32, 32, 0, 0, 1, -3, 0, 0, 0, 0},
      {"causal sq>skv", 1, 2, 2, 50, 20, 16, 16, 0, 0, 1, 0, 0, 0, 0, 0},
      {"mask broadcast (Sq,Skv)", 2, 3, 3, 17, 70, 64, 64, 0, 1, 0, 0, 0, 0, 0, 0},
      {"mask key padding + causal", 2, 4, 1, 9, 33, 32, 48, 0, 2, 1, 24, 0, 0, 0, 0},
      {"permuted strides", 2, 4, 2, 23, 71, 64, 64, 1, 0, 0, 0, 0, 0, 0, 0},
      {"permuted + mask + causal", 1, 6, 3, 40, 40, 40, 24, 1, 1, 1, 0, 0, 0, 0, 0},
      {"decode sq=1", 2, 8, 2, 1, 100, 64, 64, 0, 0, 1, 99, 0, 0, 0, 0},
      {"decode mqa sq=1", 1, 16, 1, 1, 257, 128, 128, 1, 0, 0, 0, 0, 0, 0, 0},
      {"odd dims d7 dv5", 2, 3, 1, 11, 13, 7, 5, 0, 0, 0, 0, 0, 0, 0, 0},
      {"d1", 1, 1, 1, 5, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
      {"d256 dv256", 1, 2, 1, 21, 50, 256, 256, 1, 0, 1, 29, 0, 0, 0, 0},
      {"d128 long", 1, 2, 2, 70, 300, 128, 128, 0, 0, 1, 230, 0, 0, 0, 0},
      {"d300 untiled", 1, 2, 1, 9, 20, 300, 260, 1, 1, 1, 11, 0, 0, 0, 0},
      {"skv 0", 1, 2, 1, 3, 0, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0},
      {"nan q", 1, 2, 2, 8, 8, 16, 16, 0, 0, 0, 0, 1, 0, 0, 0},
      {"out (B,Sq,H,Dv) + gqa causal", 2, 4, 2, 13, 29, 32, 40, 1, 1, 1, 16, 0, 1, 0, 0},
      /* Hidden key tiles are skipped: NaN past the valid prefix never read. */
      {"static cache decode gqa", 2, 8, 2, 1, 700, 64, 64, 0, 3, 0, 0, 0, 0, 512, 0},
      {"static cache decode permuted", 2, 4, 4, 1, 300, 32, 32, 1, 3, 0, 0, 0, 1, 256, 0},
      {"static cache chunk causal", 2, 4, 2, 5, 400, 64, 64, 0, 3, 1, 95, 0, 0, 320, 0},
      {"static cache untiled d300", 2, 2, 1, 1, 300, 300, 260, 0, 3, 0, 0, 0, 0, 160, 0},
      {"windows per row", 2, 4, 2, 23, 333, 64, 64, 0, 4, 0, 0, 0, 0, 0, 0},
      {"windows per row + causal", 1, 6, 3, 30, 200, 32, 48, 1, 4, 1, 170, 0, 0, 0, 0},
      /* Decode steps (4 or 8 rows per kv head: the 4-row kernel, scores
       * from K's rows at AVX2, keys split over threads), K and V views of
       * a longer cache, key counts off the 64-key tile. */
      {"decode gqa 16/4 cache view", 1, 16, 4, 1, 192, 64, 64, 0, 0, 0, 0, 0, 0, 0, 256},
      {"decode gqa 16/4 batch 2 tile tail", 2, 16, 4, 1, 77, 64, 64, 0, 0, 0, 0, 0, 0, 0, 100},
      {"decode gqa 32/4 long", 1, 32, 4, 1, 1000, 64, 64, 0, 0, 0, 0, 0, 0, 0, 1024},
      {"decode mqa 8/1 split", 1, 8, 1, 1, 333, 64, 64, 0, 0, 0, 0, 0, 0, 0, 400},
      {"decode gqa 2/1 d128", 1, 2, 1, 1, 517, 128, 128, 0, 0, 0, 0, 0, 0, 0, 600},
      {"decode gqa key padding", 2, 16, 4, 1, 130, 64, 64, 0, 2, 0, 0, 0, 0, 0, 160},
      {"decode gqa static cache, a batch all -inf", 3, 16, 4, 1, 150, 64, 64, 0, 3, 0, 0, 0, 0, 0,
       200},
      {"decode gqa windows", 2, 8, 2, 1, 300, 64, 64, 0, 4, 0, 0, 0, 0, 0, 0},
      {"decode gqa causal offset", 1, 16, 4, 1, 200, 64, 64, 0, 0, 1, 199, 0, 0, 0, 256},
      {"decode gqa causal offset past half", 1, 16, 4, 1, 200, 64, 64, 0, 0, 1, 120, 0, 0, 0, 0},
      {"chunk gqa causal offset", 1, 8, 2, 3, 200, 64, 64, 0, 0, 1, 197, 0, 0, 0, 256},
      {"decode gqa d36 (packed K)", 1, 8, 2, 1, 130, 36, 36, 0, 0, 0, 0, 0, 0, 0, 0},
      {"decode gqa nan q", 1, 16, 4, 1, 190, 64, 64, 0, 0, 0, 0, 1, 0, 0, 0},
      {"decode gqa permuted, out bshd", 1, 16, 4, 1, 190, 64, 64, 1, 0, 0, 0, 0, 1, 0, 0},
      {"decode gqa static cache poison split", 1, 16, 4, 1, 700, 64, 64, 0, 3, 0, 0, 0, 0, 512,
       768},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    kiln_test_nn_attention_case(&cases[i], pool, isa, bf16);
}

static void kiln_test_nn_attention(kiln_pool_t* pool, const char* isa) {
  kiln_test_nn_attention_cases(pool, isa, 0);
}

/* every_key (torch's math path: KILN_SDPA_EVERY_KEY): a causally hidden key
 * whose score is NaN or +Inf, or whose value is Inf, makes the row NaN, as
 * eager's math path; without the flag such keys are skipped (torch's fused
 * kernel). Finite inputs take the tiled kernels either way: the same bits. */
static void kiln_test_nn_attention_every_key(kiln_pool_t* pool, const char* isa) {
  enum { H = 2, SQ = 37, SKV = 45, D = 24, DV = 40 };
  static float q[H * SQ * D], k[H * SKV * D], v[H * SKV * DV];
  static float y[H * SQ * DV], y0[H * SQ * DV], w[H * SQ * DV];
  kiln_attention_args_t a;
  memset(&a, 0, sizeof a);
  a.batch = 1, a.heads = H, a.kv_heads = H, a.q_len = SQ, a.kv_len = SKV;
  a.head_dim = D, a.v_head_dim = DV;
  kiln_test_attn_strides(1, H, SQ, D, 0, a.q_strides);
  kiln_test_attn_strides(1, H, SKV, D, 0, a.k_strides);
  kiln_test_attn_strides(1, H, SKV, DV, 0, a.v_strides);
  a.q = q, a.k = k, a.v = v, a.scale = 0.2f, a.causal = 1;
  char what[160];
  for (int poison = 0; poison < 4; ++poison) {
    kiln_test_fill_f32(q, sizeof q / sizeof q[0], 71, -2.0f, 2.0f);
    kiln_test_fill_f32(k, sizeof k / sizeof k[0], 72, -2.0f, 2.0f);
    kiln_test_fill_f32(v, sizeof v / sizeof v[0], 73, -1.0f, 1.0f);
    /* Rows 0..4 of head 0 see keys 0..4; key 20 is hidden from them. */
    int64_t nan_rows = 0;
    if (poison == 1) { /* q row 0 -inf: key 0's score -inf (its only visible key,
                        * positive), key 20's NaN (signs mixed): seed 20119 g20986 */
      for (int e = 0; e < D; ++e)
        q[e] = -INFINITY, k[e] = 0.5f, k[20 * D + e] = e % 2 ? 1.0f : -1.0f;
      nan_rows = 1;
    } else if (poison == 2) { /* Inf in v at key 20: 0 * Inf for every row before it */
      v[20 * DV + 3] = INFINITY;
      nan_rows = 20;
    } else if (poison == 3) { /* finite, but key 20's score overflows to +Inf */
      for (int e = 0; e < D; ++e) q[e] = 1e20f, k[20 * D + e] = 1e20f;
      nan_rows = 1;
    }
    a.every_key = 0, a.out = y0;
    kiln_attention_f32(&a, pool);
    a.every_key = 1, a.out = y;
    kiln_attention_f32(&a, pool);
    kiln_attention_args_t r = a;
    r.out = w;
    kiln_attention_f32_reference(&r);
    snprintf(what, sizeof what, "%s attention every_key, poison %d", isa, poison);
    kiln_test_compare_f32(what, y, w, sizeof y / sizeof y[0], 2e-5f, 1e-4f);
    int nan_ok = 1, skipped_ok = 1;
    for (int64_t i = 0; i < SQ; ++i)
      for (int64_t e = 0; e < DV; ++e) {
        int nan = y[i * DV + e] != y[i * DV + e];
        /* Inf in v taints only its own column (rows past key 20 weigh it: Inf) */
        if (nan != (i < nan_rows && (poison != 2 || e == 3))) nan_ok = 0;
      }
    /* Without the flag row 0 sees only key 0, score -inf: zeros, as torch's
     * fused kernel (the row's hidden key is skipped). */
    for (int64_t e = 0; poison == 1 && e < DV; ++e) skipped_ok &= y0[e] == 0.0f;
    KILN_EXPECT(nan_ok, "%s: NaN exactly in the first %lld rows of head 0", what, (long long)nan_rows);
    KILN_EXPECT(skipped_ok, "%s: without the flag the hidden key is not read", what);
    if (poison == 0) /* finite: the tiled kernels, as without the flag */
      KILN_EXPECT(memcmp(y, y0, sizeof y) == 0, "%s: finite inputs give the unflagged bits", what);
  }
}

/* Strided copies that transpose (the tiled paths) and that don't, for every
 * element size, against index arithmetic. */
static void kiln_test_strided_copy(kiln_pool_t* pool, const char* where) {
  static const struct {
    int64_t a, b, c;
    int perm[3];
  } cases[] = {{2, 37, 45, {0, 2, 1}}, {1, 64, 8, {0, 2, 1}}, {3, 9, 70, {2, 0, 1}},
               {4, 33, 7, {1, 0, 2}}, {2, 5, 40, {2, 1, 0}}, {1, 100, 100, {0, 2, 1}},
               /* the input's unit stride on the first output dim: attention's
                * (b h, d, s) -> (s, b h, d), tiled once that dim moves */
               {32, 64, 128, {2, 0, 1}}, {5, 11, 33, {2, 0, 1}}, {9, 40, 8, {2, 0, 1}},
               /* NHWC -> NCHW of a (1, 16, 16, 96) activation: whole 8x8 blocks */
               {1, 256, 96, {0, 2, 1}}};
  static const kiln_dtype_t dtypes[] = {KILN_F32, KILN_I64, KILN_BOOL, KILN_F16};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
    for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; ++di) {
      int64_t in_shape[3] = {cases[ci].a, cases[ci].b, cases[ci].c};
      int64_t in_strides[3] = {cases[ci].b * cases[ci].c, cases[ci].c, 1};
      size_t n = (size_t)(cases[ci].a * cases[ci].b * cases[ci].c), size = kiln_dtype_size(dtypes[di]);
      unsigned char* x = malloc(n * size);
      unsigned char* y = malloc(n * size);
      for (size_t i = 0; i < n * size; ++i) x[i] = (unsigned char)(i * 7 + i / 251);
      kiln_nd_t nd;
      memset(&nd, 0, sizeof(nd));
      nd.rank = 3;
      for (int d = 0; d < 3; ++d) nd.shape[d] = in_shape[cases[ci].perm[d]];
      kiln_nd_set_dense_output(&nd);
      for (int d = 0; d < 3; ++d) nd.strides[1][d] = in_strides[cases[ci].perm[d]];
      kiln_strided_copy(dtypes[di], &nd, y, x, pool);
      int bad = 0;
      for (int64_t i = 0; i < nd.shape[0]; ++i)
        for (int64_t j = 0; j < nd.shape[1]; ++j)
          for (int64_t k = 0; k < nd.shape[2]; ++k) {
            int64_t o = (i * nd.shape[1] + j) * nd.shape[2] + k;
            int64_t s = i * nd.strides[1][0] + j * nd.strides[1][1] + k * nd.strides[1][2];
            bad += memcmp(y + o * (int64_t)size, x + s * (int64_t)size, size) != 0;
          }
      KILN_EXPECT(bad == 0, "%s: strided copy case %zu dtype %zu: %d wrong", where, ci, di, bad);
      free(x);
      free(y);
    }
  }
  /* Each element of a run repeated f times (a stride-0 last dim after a
   * unit-stride one: nearest upsampling, repeat_interleave), f = 1..17 (the
   * repeating rows take f <= 16), float32 and int64. */
  for (int64_t f = 1; f <= 17; f += 2) {
    for (size_t di = 0; di < 2; ++di) {
      const kiln_dtype_t dt = di ? KILN_I64 : KILN_F32;
      const int64_t R = 5, W = 19;
      size_t size = kiln_dtype_size(dt), n = (size_t)(R * W * f);
      unsigned char* x = malloc((size_t)(R * W) * size);
      unsigned char* y = malloc(n * size);
      for (size_t i = 0; i < (size_t)(R * W) * size; ++i) x[i] = (unsigned char)(i * 13 + 5);
      kiln_nd_t nd;
      memset(&nd, 0, sizeof(nd));
      nd.rank = 3;
      nd.shape[0] = R, nd.shape[1] = W, nd.shape[2] = f;
      kiln_nd_set_dense_output(&nd);
      nd.strides[1][0] = W, nd.strides[1][1] = 1, nd.strides[1][2] = 0;
      kiln_strided_copy(dt, &nd, y, x, pool);
      int bad = 0;
      for (int64_t i = 0; i < R * W * f; ++i)
        bad += memcmp(y + i * (int64_t)size, x + (i / f) * (int64_t)size, size) != 0;
      KILN_EXPECT(bad == 0, "%s: repeating strided copy f %lld dtype %zu: %d wrong", where,
                  (long long)f, di, bad);
      free(x);
      free(y);
    }
  }
}

/* gelu's gradient against the double reference. The result is a sum of two
 * terms (the CDF and x times the density; the tanh form's (1 + T)/2 and its
 * right term), so the error allowed is a few ulp of the terms' magnitudes
 * times |dy|: relative where they do not cancel (the tails), absolute near
 * the gradient's zero at x = -0.75. NaN where the reference is NaN. */
static void kiln_test_nn_gelu_backward(kiln_pool_t* pool, const char* isa) {
  enum { CAP = 70000 };
  float* x = malloc(CAP * sizeof(float));
  float* dy = malloc(CAP * sizeof(float));
  float* y = malloc(CAP * sizeof(float));
  float* w = malloc(CAP * sizeof(float));
  if (!x || !dy || !y || !w) goto done;
  size_t ns = kiln_test_nn_special(x, CAP);
  kiln_test_fill_f32(dy, ns, 5u, -2.0f, 2.0f);
  dy[0] = 1.0f;
  for (int tanh_form = 0; tanh_form < 2; ++tanh_form) {
    for (int pass = 0; pass < 3; ++pass) {
      /* pass 0: the sweep; 1: dx over dy (in place); 2: a tail of every length */
      size_t n = ns, off = 0;
      if (pass == 2) {
        off = ns;
        n = 1 + (size_t)(tanh_form * 7 + 93);
        kiln_test_fill_f32(x + off, n, 41u + (unsigned)tanh_form, -9.0f, 9.0f);
        kiln_test_fill_f32(dy + off, n, 43u, -2.0f, 2.0f);
      }
      kiln_gelu_backward_f32_reference(tanh_form, n, dy + off, x + off, w);
      float* out = y;
      if (pass == 1) {
        memcpy(y, dy, n * sizeof(float));
        kiln_gelu_backward_f32(tanh_form, n, y, x, y, pool);
      } else {
        kiln_gelu_backward_f32(tanh_form, n, dy + off, x + off, out, pool);
      }
      int bad = 0;
      size_t first = 0;
      for (size_t i = 0; i < n; ++i) {
        double v = x[off + i], g = dy[off + i], scale;
        if (tanh_form) {
          double t = tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
          scale = 0.5 * (1.0 + fabs(t)) +
                  fabs(0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * v * v));
        } else {
          scale = 0.5 * erfc(-fabs(v) / sqrt(2.0)) + fabs(v) * exp(-0.5 * v * v) * 0.3989422804014327;
          if (v >= 0) scale = 1.0 + fabs(v) * exp(-0.5 * v * v) * 0.3989422804014327;
        }
        double tol = 6e-7 * fabs(g) * scale + 1e-40;
        int ok = isnan(w[i]) ? isnan(out[i]) : fabs((double)out[i] - w[i]) <= tol;
        if (!ok && !bad++) first = i;
      }
      KILN_EXPECT(bad == 0, "%s gelu_backward%s pass %d: %d of %zu wrong, first x=%g dy=%g got %g want %g",
                  isa, tanh_form ? " (tanh)" : "", pass, bad, n, (double)x[off + first],
                  (double)dy[off + first], (double)out[first], (double)w[first]);
    }
  }
done:
  free(x);
  free(dy);
  free(y);
  free(w);
}

/* layer_norm's input gradient against the double reference, with and
 * without gamma, in place over dy, at row lengths with and without a lane
 * tail, and a NaN that must stay in its row. The row sums run in float, so
 * the tolerance is relative to the row's scale: atol 2e-5 for |dy| <= 1,
 * rstd ~ 1 / 3. */
static void kiln_test_nn_layer_norm_backward(kiln_pool_t* pool, const char* isa) {
  static const size_t cols_list[] = {1, 7, 16, 17, 33, 256};
  enum { ROWS = 9, MAXC = 256 };
  float* x = malloc(ROWS * MAXC * sizeof(float));
  float* dy = malloc(ROWS * MAXC * sizeof(float));
  float* y = malloc(ROWS * MAXC * sizeof(float));
  float* w = malloc(ROWS * MAXC * sizeof(float));
  float gamma[MAXC], mean[ROWS], rstd[ROWS];
  if (!x || !dy || !y || !w) goto done;
  for (size_t c = 0; c < sizeof cols_list / sizeof cols_list[0]; ++c) {
    size_t cols = cols_list[c];
    kiln_test_fill_f32(x, ROWS * cols, (unsigned)cols, -4.0f, 6.0f);
    kiln_test_fill_f32(dy, ROWS * cols, (unsigned)cols + 1u, -1.0f, 1.0f);
    kiln_test_fill_f32(gamma, cols, (unsigned)cols + 2u, 0.5f, 1.5f);
    for (size_t r = 0; r < ROWS; ++r) {
      double m = 0.0, v = 0.0;
      for (size_t i = 0; i < cols; ++i) m += x[r * cols + i];
      m /= (double)cols;
      for (size_t i = 0; i < cols; ++i) v += (x[r * cols + i] - m) * (x[r * cols + i] - m);
      mean[r] = (float)m;
      rstd[r] = (float)(1.0 / sqrt(v / (double)cols + 1e-5));
    }
    dy[3 * cols] = NAN; /* row 3 only */
    for (int with_gamma = 0; with_gamma < 2; ++with_gamma) {
      const float* gm = with_gamma ? gamma : NULL;
      kiln_layer_norm_backward_f32_reference(ROWS, cols, dy, x, mean, rstd, gm, w);
      kiln_layer_norm_backward_f32(ROWS, cols, dy, x, mean, rstd, gm, y, pool);
      char what[96];
      snprintf(what, sizeof what, "%s layer_norm_backward cols %zu gamma %d", isa, cols, with_gamma);
      kiln_test_compare_f32(what, y, w, ROWS * cols, 2e-5f, 1e-4f);
      memcpy(y, dy, ROWS * cols * sizeof(float));
      kiln_layer_norm_backward_f32(ROWS, cols, y, x, mean, rstd, gm, y, pool);
      snprintf(what, sizeof what, "%s layer_norm_backward in place cols %zu gamma %d", isa, cols,
               with_gamma);
      kiln_test_compare_f32(what, y, w, ROWS * cols, 2e-5f, 1e-4f);
      int nan_rows = 0;
      for (size_t r = 0; r < ROWS; ++r) nan_rows += isnan(y[r * cols + cols - 1]) != 0;
      KILN_EXPECT(nan_rows == 1 && isnan(y[3 * cols + cols - 1]),
                  "%s layer_norm_backward cols %zu: NaN reached %d rows", isa, cols, nan_rows);
    }
  }
done:
  free(x);
  free(dy);
  free(y);
  free(w);
}

/* FINDINGS 10 (tests/fuzz): a row whose mean dwarfs its spread (x = 100 +-
 * 0.01, so |mean| / std ~ 2e4) with the float mean the forward saves. The
 * exact dx of a row sums to zero (layer_norm is shift-invariant); centred
 * on the rounded mean, every dx of the row was shifted by rstd^2 c
 * mean(g xh), c = mean(x) - mu: 6e-4 of dx, and the sum of a row's dx was
 * that much of sum |dx|. Now both are rounding of the spread: the sum
 * within 1e-5 of sum |dx|, each dx within 2e-5 of the reference (which
 * centres on the double mean). */
static void kiln_test_nn_layer_norm_backward_offset(kiln_pool_t* pool, const char* isa) {
  static const size_t cols_list[] = {2, 7, 16, 37, 256};
  enum { ROWS = 9, MAXC = 256 };
  static float x[ROWS * MAXC], dy[ROWS * MAXC], y[ROWS * MAXC], w[ROWS * MAXC], gamma[MAXC];
  float mean[ROWS], rstd[ROWS];
  for (size_t c = 0; c < sizeof cols_list / sizeof cols_list[0]; ++c) {
    size_t cols = cols_list[c];
    kiln_test_fill_f32(x, ROWS * cols, 71u + (unsigned)cols, 99.99f, 100.01f);
    kiln_test_fill_f32(dy, ROWS * cols, 73u + (unsigned)cols, -1.0f, 1.0f);
    kiln_test_fill_f32(gamma, cols, 79u + (unsigned)cols, 0.5f, 1.5f);
    for (size_t r = 0; r < ROWS; ++r) {
      double m = 0.0, v = 0.0;
      for (size_t i = 0; i < cols; ++i) m += x[r * cols + i];
      m /= (double)cols;
      for (size_t i = 0; i < cols; ++i) v += (x[r * cols + i] - m) * (x[r * cols + i] - m);
      mean[r] = (float)m;
      rstd[r] = (float)(1.0 / sqrt(v / (double)cols + 1e-5));
    }
    for (int with_gamma = 0; with_gamma < 2; ++with_gamma) {
      const float* gm = with_gamma ? gamma : NULL;
      kiln_layer_norm_backward_f32_reference(ROWS, cols, dy, x, mean, rstd, gm, w);
      kiln_layer_norm_backward_f32(ROWS, cols, dy, x, mean, rstd, gm, y, pool);
      double worst_sum = 0.0, worst_err = 0.0;
      for (size_t r = 0; r < ROWS; ++r) {
        double sum = 0.0, mag = 0.0, err = 0.0;
        for (size_t i = 0; i < cols; ++i) {
          sum += y[r * cols + i];
          mag += fabs((double)w[r * cols + i]);
          err = fmax(err, fabs((double)y[r * cols + i] - w[r * cols + i]));
        }
        worst_sum = fmax(worst_sum, fabs(sum) / mag);
        worst_err = fmax(worst_err, err / (mag / (double)cols));
      }
      KILN_EXPECT(worst_sum <= 1e-5 && worst_err <= 2e-5,
                  "%s layer_norm_backward cols %zu gamma %d, mean 100 std 0.006: a row's dx sums to "
                  "%.3g of its sum |dx|, error %.3g of its mean |dx|",
                  isa, cols, with_gamma, worst_sum, worst_err);
    }
  }
}

static void kiln_test_nn_level(kiln_pool_t* pool, const char* where) {
  kiln_test_strided_copy(pool, where);
  kiln_test_nn_unary(pool, where);
  kiln_test_nn_gelu_backward(pool, where);
  kiln_test_nn_layer_norm_backward(pool, where);
  kiln_test_nn_layer_norm_backward_offset(pool, where);
  kiln_test_nn_softmax(pool, where);
  kiln_test_nn_softmax_strided(pool, where);
  kiln_test_nn_norms(pool, where);
  kiln_test_nn_attention(pool, where);
  kiln_test_nn_attention_every_key(pool, where);
}

void kiln_test_suite_nn(void) { kiln_test_each_isa_and_pool(kiln_test_nn_level); }
