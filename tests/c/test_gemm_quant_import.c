/* A checkpoint's quantized weights into kiln's blobs
 * (kiln_gemm_quant_ints_form, kiln_gemm_quant_pack_b_ints,
 * kiln_gemm_quant_ints_dequantize; src/kernels/gemm/kiln_gemm_quant_import.c):
 *
 * - the form chosen for each kind of checkpoint: int8 per channel (with
 *   -128, uint8 with zero point 128, zero points shifting within int8),
 *   int4-range integers per channel (int4, the row one group), int4-range
 *   groups of 32 and 128 (symmetric: q - z in [-8, 7];
 *   asymmetric: each group spanning 16 values), and the refusals with
 *   their reasons (q - z out of int8's range, groups of 16, int8-range
 *   integers with group scales, fractional zero points);
 * - exactness: every weight of the packed blob (kiln_gemm_quant_weight, the
 *   scalar rule the kernels follow) equals torch's ((float)q - z) * s bit
 *   for bit, as does the dense dequantization;
 * - the GEMM on the blob at every ISA level and 1 and 2 threads, M 1, 3, 8
 *   (GEMV) and 9, 20 (blocked), N tails, against the fp32 GEMM reference on
 *   the dequantized weights (kiln_gemm_f32_reference, double sums): only
 *   fp32 summation order differs (int4's GEMV also applies the zero point
 *   once per group), so atol 2e-5 sqrt(K) + 1e-5, rtol 1e-4, as
 *   test_gemm_quant.c; one integer off by one moves an output by a scale
 *   (>= 4e-3) times an input (~1), far beyond that;
 * - through the IR and compiler: kiln_graph_add_constant_quant's checks,
 *   x @ W^T of such a constant compiled to one LINEAR on the int8 blob
 *   (the pack pass's note saying so), and a graph whose kernel would read
 *   the constant itself refused when a model is made (as a file holding one
 *   would be). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kiln_test.h"
#include "kiln_test_qgemm.h"
#include "runtime/kiln_model.h"

typedef struct {
  const char* name;
  int64_t group;   /* the checkpoint's (0: per channel) */
  int q_unsigned;  /* uint8 */
  int qlo, qhi;    /* the integers' range */
  int zeros;       /* 0 none; 1 zero points in [zlo, zhi]; */
  int zlo, zhi;
  int want_bits, want_asym; /* 0 bits: refused */
} ckpt_kind_t;

static const ckpt_kind_t ckpt_kinds[] = {
    {"int8 sym (-128)", 0, 0, -128, 127, 0, 0, 0, 8, 0},
    {"int8 zp 0", 0, 0, -128, 127, 1, 0, 0, 8, 0},
    {"uint8 zp 128", 0, 1, 0, 255, 1, 128, 128, 8, 0},
    {"int8 zp shifting in range", 0, 0, -100, 100, 1, -20, 20, 8, 0},
    {"int4-range per channel", 0, 0, -8, 7, 0, 0, 0, 4, 0},
    {"uint4 per channel zp", 0, 1, 0, 15, 1, 2, 13, 4, 1},
    {"int4 g32 sym", 32, 0, -8, 7, 0, 0, 0, 4, 0},
    {"int4 g128 sym zp 0", 128, 0, -8, 7, 1, 0, 0, 4, 0},
    {"uint4 g32 asym", 32, 1, 0, 15, 1, 3, 12, 4, 1},
    {"uint4 g128 zp 8 (sym)", 128, 1, 0, 15, 1, 8, 8, 4, 0},
    {"int4 g64 asym shifted", 64, 0, -3, 12, 1, -2, 2, 4, 1},
    {"int8 zp out of range", 0, 0, -128, 127, 1, 10, 10, 0, 0},
    {"int4 g16", 16, 0, -8, 7, 0, 0, 0, 0, 0},
    {"int8 range g32", 32, 0, -128, 127, 0, 0, 0, 0, 0},
};
#define N_CKPT ((int)(sizeof(ckpt_kinds) / sizeof(ckpt_kinds[0])))

typedef struct {
  int64_t n, k;
  uint8_t* q;
  float *s, *z;
  kiln_gemm_quant_ints_t src;
} ckpt_t;

static unsigned ckpt_rand(unsigned* st) {
  *st = *st * 1664525u + 1013904223u;
  return *st >> 8;
}

static void ckpt_make(ckpt_t* c, const ckpt_kind_t* kind, int64_t n, int64_t k, unsigned seed) {
  int64_t ng = kind->group ? k / kind->group : 1;
  c->n = n, c->k = k;
  c->q = malloc((size_t)(n * k));
  c->s = malloc(sizeof(float) * (size_t)(n * ng));
  c->z = kind->zeros ? malloc(sizeof(float) * (size_t)(n * ng)) : NULL;
  unsigned st = seed;
  for (int64_t i = 0; i < n * k; ++i) {
    int v = kind->qlo + (int)(ckpt_rand(&st) % (unsigned)(kind->qhi - kind->qlo + 1));
    if (i % 97 == 0) v = kind->qlo; /* the range's ends occur */
    if (i % 89 == 0) v = kind->qhi;
    c->q[i] = kind->q_unsigned ? (uint8_t)v : (uint8_t)(int8_t)v;
  }
  for (int64_t i = 0; i < n * ng; ++i) {
    c->s[i] = 0.004f + (float)(ckpt_rand(&st) % 1000) * 1e-5f;
    if (c->z) c->z[i] = (float)(kind->zlo + (int)(ckpt_rand(&st) % (unsigned)(kind->zhi - kind->zlo + 1)));
  }
  kiln_gemm_quant_ints_t src = {c->q, kind->q_unsigned, c->s, c->z, kind->group};
  c->src = src;
}

static void ckpt_free(ckpt_t* c) { free(c->q), free(c->s), free(c->z); }

/* torch's value of row j, element p. */
static float ckpt_value(const ckpt_t* c, int64_t j, int64_t p) {
  int64_t G = c->src.group ? c->src.group : c->k, ng = c->k / G, g = p / G;
  int q = c->src.q_unsigned ? c->q[j * c->k + p] : (int8_t)c->q[j * c->k + p];
  return ((float)q - (c->z ? c->z[j * ng + g] : 0.0f)) * c->s[j * ng + g];
}

static void ckpt_forms(void) {
  for (int i = 0; i < N_CKPT; ++i) {
    const ckpt_kind_t* kind = &ckpt_kinds[i];
    const int64_t n = 37, k = 256;
    ckpt_t c;
    ckpt_make(&c, kind, n, k, 11u + (unsigned)i);
    int bits, group, asym;
    const char* why;
    int ok = kiln_gemm_quant_ints_form(k, n, &c.src, &bits, &group, &asym, &why);
    KILN_EXPECT(ok == (kind->want_bits != 0) && (!ok || (bits == kind->want_bits && asym == kind->want_asym)),
                "%s: form %d bits %d asym %d (%s)", kind->name, ok, bits, asym, why ? why : "");
    KILN_EXPECT(ok || (why && *why), "%s: a refusal says why", kind->name);
    /* The dense dequantization is torch's rule, exactly. */
    float* dense = malloc(sizeof(float) * (size_t)(n * k));
    kiln_gemm_quant_ints_dequantize(k, n, &c.src, dense);
    int64_t bad = 0;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) bad += dense[j * k + p] != ckpt_value(&c, j, p);
    KILN_EXPECT(bad == 0, "%s: %lld dequantized weights differ", kind->name, (long long)bad);
    if (ok) { /* the blob holds torch's weights bit for bit */
      size_t bytes = kiln_gemm_quant_ints_packed_size(k, n, bits, group, asym);
      void* blob = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
      kiln_gemm_quant_pack_b_ints(k, n, &c.src, bits, group, asym, blob);
      KILN_EXPECT(kiln_gemm_quant_check(blob, bytes, k, n) == 0, "%s: blob checks", kind->name);
      bad = 0;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p) bad += kiln_gemm_quant_weight(blob, p, j) != ckpt_value(&c, j, p);
      KILN_EXPECT(bad == 0, "%s: %lld packed weights differ from the checkpoint's", kind->name,
                  (long long)bad);
      free(blob);
    }
    free(dense);
    ckpt_free(&c);
  }
  /* Fractional zero points: refused (q - z would not be a whole number). */
  ckpt_t c;
  ckpt_make(&c, &ckpt_kinds[1], 5, 64, 3);
  c.z[2] = 0.5f;
  int bits, group, asym;
  const char* why;
  KILN_EXPECT(!kiln_gemm_quant_ints_form(64, 5, &c.src, &bits, &group, &asym, &why) && why &&
                  strstr(why, "whole"),
              "fractional zero points refused: %s", why ? why : "");
  ckpt_free(&c);
}

static void ckpt_gemm_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ms[] = {1, 3, 8, 9, 20};
  static const int64_t ns[] = {1, 17, 40};
  for (int i = 0; i < N_CKPT; ++i) {
    const ckpt_kind_t* kind = &ckpt_kinds[i];
    if (!kind->want_bits) continue;
    for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); ++im)
      for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in) {
        const int64_t M = ms[im], N = ns[in], K = 256;
        ckpt_t c;
        ckpt_make(&c, kind, N, K, 101u * (unsigned)i + (unsigned)(M + N));
        int bits, group, asym;
        const char* why;
        kiln_gemm_quant_ints_form(K, N, &c.src, &bits, &group, &asym, &why);
        kiln_test_qgemm_t t;
        kiln_test_qgemm_init(&t, 1, M, N, K, (int)(im % 2), 0, 0, 0, 7u + (unsigned)i,
                             kiln_gemm_quant_ints_packed_size(K, N, bits, group, asym));
        kiln_gemm_quant_pack_b_ints(K, N, &c.src, bits, group, asym, t.blob);
        kiln_gemm_quant_ints_dequantize(K, N, &c.src, t.w); /* W (N, K): B = W^T */
        kiln_gemm_f32_args_t g, ref;
        kiln_test_qgemm_args(&t, (int)(in % 2), 0, 0, in == 1 ? KILN_ACT_RELU : KILN_ACT_NONE, &g, &ref);
        ref.b_packed_q = NULL; /* the fp32 reference on torch's dequantized weights */
        ref.b = t.w, ref.b_row_stride = 1, ref.b_col_stride = K;
        kiln_gemm_f32_reference(&ref);
        kiln_gemm_f32(&g, pool);
        char what[160];
        snprintf(what, sizeof what, "[%s] %s m=%lld n=%lld", where, kind->name, (long long)M,
                 (long long)N);
        kiln_test_compare_f32(what, t.c_got, t.c_want, t.nc, 2e-5f * sqrtf((float)K) + 1e-5f, 1e-4f);
        if (bits == 4) {
          /* int8 activations on the checkpoint's fp32-scale blob: the level's
           * q4a8 kernel against the rule's scalar reference. */
          kiln_gemm_quant_set_a8(t.blob);
          kiln_gemm_f32_args_t ra = g;
          ra.c = t.c_want;
          kiln_gemm_q4a8_reference(&ra);
          kiln_gemm_f32(&g, pool);
          snprintf(what, sizeof what, "[%s] %s a8 m=%lld n=%lld", where, kind->name, (long long)M,
                   (long long)N);
          kiln_test_compare_f32(what, t.c_got, t.c_want, t.nc, 2e-5f * sqrtf((float)K) + 1e-5f, 1e-4f);
        }
        kiln_test_qgemm_free(&t);
        ckpt_free(&c);
      }
  }
}

/* x (M, K) @ W^T, W = dequantize(q (N, K) int8, per-row scales). */
static kiln_graph_t* ckpt_graph(const int8_t* q, const float* s, int64_t M, int64_t N, int64_t K,
                                int transpose) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t sx[2] = {M, K}, sq[2] = {N, K}, ss[1] = {N};
  int32_t vx, vq, vs, vw, vt, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "q", KILN_I8, 2, sq, KILN_LAYOUT_DENSE, q, (size_t)(N * K), &vq));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "s", KILN_F32, 1, ss, KILN_LAYOUT_DENSE, s, sizeof(float) * (size_t)N, &vs));
  /* Refusals: integers that are not a constant, scales of the wrong count. */
  KILN_EXPECT_ERROR(kiln_graph_add_constant_quant(g, "w", vx, vs, -1, 0, &vw), KILN_UNSUPPORTED);
  KILN_EXPECT_ERROR(kiln_graph_add_constant_quant(g, "w", vq, vs, -1, K / 2 + 1, &vw), KILN_UNSUPPORTED);
  KILN_EXPECT_ERROR(kiln_graph_add_constant_quant(g, "w", vq, vq, -1, 0, &vw), KILN_UNSUPPORTED);
  KILN_EXPECT_OK(kiln_graph_add_constant_quant(g, "w", vq, vs, -1, 0, &vw));
  int64_t p[KILN_MAX_PARAMS] = {0};
  p[KILN_P(VIEW, RANK)] = 2;
  p[KILN_P(VIEW, DIMS)] = transpose ? K : N, p[KILN_P(VIEW, DIMS) + 1] = transpose ? N : K;
  p[KILN_P(VIEW, STRIDES)] = transpose ? 1 : K, p[KILN_P(VIEW, STRIDES) + 1] = transpose ? K : 1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &vw, 1, p, KILN_MAX_PARAMS, NULL, 0, NULL, &vt));
  int32_t in[2] = {vx, vt};
  if (transpose) KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, NULL, &y));
  else y = vt;
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  return g;
}

static void ckpt_compile(void) {
  enum { M = 2, N = 19, K = 64 };
  static int8_t q[N * K];
  static float s[N], x[M * K], got[M * N], want[M * N];
  for (int i = 0; i < N * K; ++i) q[i] = (int8_t)((i * 37 + 11) % 256 - 128);
  for (int j = 0; j < N; ++j) s[j] = 0.01f + 0.001f * (float)j;
  kiln_test_fill_f32(x, M * K, 5, -1.0f, 1.0f);
  kiln_graph_t* g = ckpt_graph(q, s, M, N, K, 1);
  if (!g) return;
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  const kiln_value_t* wv = &compiled->values[compiled->nodes[0].inputs[1]];
  KILN_EXPECT(compiled->n_nodes == 1 && compiled->nodes[0].op == KILN_OP_LINEAR &&
                  wv->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 && wv->note && strstr(wv->note, "checkpoint"),
              "one LINEAR on the checkpoint's int8 (layout %d, note %s)", (int)wv->layout,
              wv->note ? wv->note : "none");
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * (double)((float)q[j * K + p] * s[j]);
      want[i * N + j] = (float)acc;
    }
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  int64_t shx[2] = {M, K}, shy[2] = {M, N};
  kiln_tensor_t in = {x, KILN_F32, 2, shx}, out = {got, KILN_F32, 2, shy};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
  kiln_test_compare_f32("x @ dequantize(q)^T", got, want, M * N, 2e-5f * 8 + 1e-5f, 1e-4f);
  kiln_model_release(m);
  /* Uncompiled, the STRIDED_COPY would read the quantized bytes: refused. */
  g = ckpt_graph(q, s, M, N, K, 0);
  if (!g) return;
  m = NULL;
  KILN_EXPECT_ERROR(kiln_model_create(g, NULL, NULL, &m), KILN_UNSUPPORTED);
  KILN_EXPECT(m == NULL, "no model whose kernel reads a checkpoint-quantized constant");
}

void kiln_test_suite_gemm_quant_import(void) {
  ckpt_compile();
  ckpt_forms();
  kiln_test_each_isa_and_pool(ckpt_gemm_level);
}
