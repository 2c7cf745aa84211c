/* bf16 attention (kiln_attention_args_t.bf16, the SDPA flag KILN_SDPA_BF16)
 * against its scalar reference: test_nn.c's attention cases (GQA, causal
 * with offsets, masks of every kind, permuted views, decode steps split
 * over threads, head dims 1..300, odd lengths, NaN) run with the rule, at
 * every ISA level this CPU has, with 1 and 2 threads, and at avx512 both on
 * VDPBF16PS (when the CPU has AVX512_BF16) and on the fp32 kernels; then
 * Inf, head dims 32/64/80/128 at BERT's shapes, and a check that the rule
 * is not fp32's; and a graph whose SDPA has KILN_SDPA_BF16 through a model,
 * format 2.18 and back (a 2.17 file with the flag refused).
 *
 * Tolerance (kiln_test_attn_bf16_compare): the kernels and the reference
 * round the same q, k, v, so their scores differ by fp32 summation order
 * only (the reference sums in double). Each weight p_j is rounded to bf16
 * in both, against reference points that differ by a power of two at most
 * (kiln_attention_bf16.h), so the rounded weights agree except where an
 * fp32-level difference in s_j moves p_j across a rounding boundary: about
 * 1e-7 / 2^-9 ~ 1 weight in 10^4. Such a weight differs by one bf16 ulp,
 * 2^-8 of itself, which moves an output by at most 2^-8 p_j / l |v_j| <=
 * 2^-8 (|v| <= 1 here). So every element must be within 2^-7 + 2e-5 (two
 * flips in one row, plus fp32's tolerance), and only rows with a flipped
 * weight above 2e-5 * 2^8 = 0.005 of the row's sum may leave fp32's own
 * tolerance, 2e-5 + 1e-4 |want|: at most 2 + 5 % of the rows (measured:
 * 0-2 rows per case; a row of a few keys has few weights to flip but each
 * large, a long row many, each too small to matter).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "kernels/nn/kiln_nn.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

int kiln_test_attn_bf16_compare(const char* what, const float* got, const float* want,
                                size_t n, size_t row) {
  size_t bad = 0, loose_rows = 0, rows = row ? (n + row - 1) / row : 0;
  double worst = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    int loose = 0;
    for (size_t i = r * row; i < n && i < (r + 1) * row; ++i) {
      float g = got[i], w = want[i];
      if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
        if (!(isnan(w) ? isnan(g) : g == w)) {
          if (!bad)
            fprintf(stderr, "  %s: element %zu: got %.9g want %.9g\n", what, i, (double)g,
                    (double)w);
          ++bad;
        }
        continue;
      }
      double err = fabs((double)g - w);
      worst = err > worst ? err : worst;
      if (err > 0x1p-7 + 2e-5) {
        if (!bad)
          fprintf(stderr, "  %s: element %zu: got %.9g want %.9g\n", what, i, (double)g,
                  (double)w);
        ++bad;
      }
      loose |= err > 2e-5 + 1e-4 * fabs((double)w);
    }
    loose_rows += (size_t)loose;
  }
  if (getenv("KILN_TEST_VERBOSE"))
    fprintf(stderr, "  %s: worst %.3g, %zu of %zu rows past fp32's tolerance\n", what, worst,
            loose_rows, rows);
  KILN_EXPECT(bad == 0, "%s: %zu of %zu elements differ by more than 2^-7 (worst %.3g)", what,
              bad, n, worst);
  KILN_EXPECT(loose_rows <= 2 + rows / 20,
              "%s: %zu of %zu rows past fp32's tolerance (2 + 5 %% allowed)", what, loose_rows,
              rows);
  return (int)(bad + (loose_rows > 2 + rows / 20));
}

/* One (B, H, S, D) case with q, k, v filled from seeds; returns fast and
 * reference outputs through out/ref (b * h * s * d floats each). */
static void kiln_test_attn_bf16_run(kiln_pool_t* pool, int64_t b, int64_t h, int64_t s,
                                    int64_t d, int causal, float* q, float* k, float* v,
                                    float* out, float* ref) {
  kiln_attention_args_t a;
  memset(&a, 0, sizeof a);
  a.batch = b, a.heads = h, a.kv_heads = h, a.q_len = s, a.kv_len = s;
  a.head_dim = a.v_head_dim = d;
  int64_t st[4] = {h * s * d, s * d, d, 1};
  memcpy(a.q_strides, st, sizeof st);
  memcpy(a.k_strides, st, sizeof st);
  memcpy(a.v_strides, st, sizeof st);
  a.q = q, a.k = k, a.v = v;
  a.scale = 1.0f / sqrtf((float)d);
  a.causal = causal;
  a.bf16 = 1;
  a.out = out;
  kiln_attention_f32(&a, pool);
  a.out = ref;
  kiln_attention_f32_reference(&a);
}

/* The largest |a - b|. Not vectorized: aarch64 GCC 12 at -O3 stops with an
 * internal compiler error (vect_transform_reduction) on this max reduction
 * of doubles over floats (make test-arm64). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static double abf_max_diff(const float* a, const float* b, int n) {
  double diff = 0.0;
  for (int i = 0; i < n; ++i) diff = fmax(diff, fabs((double)a[i] - b[i]));
  return diff;
}

/* BERT's and MiniLM's shapes (S = 128, several key tiles, the max in a
 * later tile for many rows: the reference point moves) and head dims 32,
 * 64, 80, 128; Inf in q and k; and fp32's answer is not bf16's. */
static void kiln_test_attn_bf16_shapes(kiln_pool_t* pool, const char* where) {
  static const struct { int64_t b, h, s, d; int causal; } cases[] = {
      {2, 3, 128, 32, 0}, {1, 4, 128, 64, 0}, {1, 2, 97, 80, 1}, {1, 2, 130, 128, 0},
      {2, 2, 128, 64, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int64_t b = cases[c].b, h = cases[c].h, s = cases[c].s, d = cases[c].d;
    size_t n = (size_t)(b * h * s * d);
    float *q = malloc(n * sizeof(float)), *k = malloc(n * sizeof(float));
    float *v = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float* w = malloc(n * sizeof(float));
    if (q && k && v && y && w) {
      /* Scores of a few units, with a growing trend along the keys so later
       * tiles often hold the row max. */
      kiln_test_fill_f32(q, n, 11 + (unsigned)c, -1.5f, 1.5f);
      kiln_test_fill_f32(k, n, 12 + (unsigned)c, -1.5f, 1.5f);
      kiln_test_fill_f32(v, n, 13 + (unsigned)c, -1.0f, 1.0f);
      for (size_t i = 0; i < n; ++i) k[i] += (float)((i / (size_t)d) % (size_t)s) / (float)s;
      char what[160];
      kiln_test_attn_bf16_run(pool, b, h, s, d, cases[c].causal, q, k, v, y, w);
      snprintf(what, sizeof what, "%s attention bf16 %lldx%lld s%lld d%lld%s", where,
               (long long)b, (long long)h, (long long)s, (long long)d,
               cases[c].causal ? " causal" : "");
      kiln_test_attn_bf16_compare(what, y, w, n, (size_t)d);
      if (c == 0) {
        /* The rule rounds: fp32's reference differs beyond fp32's tolerance. */
        kiln_attention_args_t a;
        memset(&a, 0, sizeof a);
        a.batch = b, a.heads = a.kv_heads = h, a.q_len = a.kv_len = s;
        a.head_dim = a.v_head_dim = d;
        int64_t st[4] = {h * s * d, s * d, d, 1};
        memcpy(a.q_strides, st, sizeof st);
        memcpy(a.k_strides, st, sizeof st);
        memcpy(a.v_strides, st, sizeof st);
        a.q = q, a.k = k, a.v = v, a.out = w;
        a.scale = 1.0f / sqrtf((float)d);
        kiln_attention_f32_reference(&a);
        double diff = abf_max_diff(y, w, (int)n);
        KILN_EXPECT(diff > 2e-4 && diff < 0.05,
                    "%s: bf16 differs from fp32 by a bf16-sized amount (largest %.3g)", what, diff);
      }
      /* Inf: +inf in a q element makes its row's scores +-inf or NaN; -inf
       * in a k element likewise for every row that sees the key. */
      q[d + 1] = INFINITY;
      k[(size_t)(3 * d)] = -INFINITY;
      kiln_test_attn_bf16_run(pool, b, h, s, d, cases[c].causal, q, k, v, y, w);
      snprintf(what, sizeof what, "%s attention bf16 %lldx%lld s%lld d%lld inf", where,
               (long long)b, (long long)h, (long long)s, (long long)d);
      kiln_test_attn_bf16_compare(what, y, w, n, (size_t)d);
    }
    free(q);
    free(k);
    free(v);
    free(y);
    free(w);
  }
}

/* The engines at the suite's start (read before the levels change:
 * kiln_cpu_bf16() is 0 below avx512, and setting that would stick). */
static unsigned kiln_test_attn_bf16_mask_;

static void kiln_test_attn_bf16_level(kiln_pool_t* pool, const char* where) {
  const unsigned start = kiln_test_attn_bf16_mask_;
  int has = kiln_cpu_isa() == KILN_ISA_AVX512 && (start & KILN_CPU_BF16_AVX512);
  /* On each engine (AMX's tiles, VDPBF16PS alone), then on the fp32
   * kernels at the same level. */
  const unsigned masks[3] = {has && (start & KILN_CPU_BF16_AMX) ? start : 0u,
                             has ? start & KILN_CPU_BF16_AVX512 : 0u, 0u};
  for (int e = 0; e < 3; ++e) {
    if (e < 2 && !masks[e]) continue;
    kiln_cpu_bf16_set(masks[e]);
    char w2[96];
    snprintf(w2, sizeof w2, "%s%s", where, e == 0 ? "[amx]" : e == 1 ? "[vdpbf16ps]" : "");
    kiln_test_nn_attention_cases(pool, w2, 1);
    kiln_test_attn_bf16_shapes(pool, w2);
  }
  kiln_cpu_bf16_set(start);
}

/* A graph of one SDPA with KILN_SDPA_BF16 (q, k, v inputs (1, 2, 24, 32))
 * runs the rule, writes format 2.18, reads back computing the same, and a
 * file stamped 2.17 with the flag is refused (no 2.17 writer set it). */
enum { ABF_H = 2, ABF_S = 24, ABF_D = 32, ABF_N = ABF_H * ABF_S * ABF_D };

static kiln_graph_t* abf_graph(int64_t flags) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t sh[4] = {1, ABF_H, ABF_S, ABF_D};
  int32_t in[3], y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "q", KILN_F32, 4, sh, &in[0]));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "k", KILN_F32, 4, sh, &in[1]));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "v", KILN_F32, 4, sh, &in[2]));
  int64_t p[KILN_P(SDPA, FLAGS) + 1] = {0};
  p[KILN_P(SDPA, CAUSAL)] = 1;
  p[KILN_P(SDPA, FLAGS)] = flags;
  float scale = 1.0f / sqrtf((float)ABF_D);
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SDPA, in, 3, p, KILN_P(SDPA, FLAGS) + 1, &scale, 1,
                                     "attention", &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  return g;
}

static int abf_run(kiln_graph_t* g, float* const* qkv, float* y) {
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m));
  if (!m) return 0;
  int64_t sh[4] = {1, ABF_H, ABF_S, ABF_D};
  kiln_tensor_t in[3] = {{qkv[0], KILN_F32, 4, sh}, {qkv[1], KILN_F32, 4, sh}, {qkv[2], KILN_F32, 4, sh}};
  kiln_tensor_t out = {y, KILN_F32, 4, sh};
  KILN_EXPECT_OK(kiln_model_run(m, in, 3, &out, 1));
  kiln_model_release(m);
  return 1;
}

static void kiln_test_attn_bf16_graph_and_file(void) {
  static float q[ABF_N], k[ABF_N], v[ABF_N], want[ABF_N], got[ABF_N], got2[ABF_N], fp32[ABF_N];
  float* qkv[3] = {q, k, v};
  kiln_test_fill_f32(q, ABF_N, 61, -2, 2);
  kiln_test_fill_f32(k, ABF_N, 62, -2, 2);
  kiln_test_fill_f32(v, ABF_N, 63, -1, 1);
  kiln_attention_args_t a;
  memset(&a, 0, sizeof a);
  a.batch = 1, a.heads = a.kv_heads = ABF_H, a.q_len = a.kv_len = ABF_S;
  a.head_dim = a.v_head_dim = ABF_D;
  int64_t st[4] = {ABF_N, ABF_S * ABF_D, ABF_D, 1};
  memcpy(a.q_strides, st, sizeof st);
  memcpy(a.k_strides, st, sizeof st);
  memcpy(a.v_strides, st, sizeof st);
  a.q = q, a.k = k, a.v = v, a.out = want, a.causal = 1, a.bf16 = 1;
  a.scale = 1.0f / sqrtf((float)ABF_D);
  kiln_attention_f32_reference(&a);
  kiln_graph_t* g = abf_graph(KILN_SDPA_BF16);
  if (!g) return;
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  /* The model takes the graph (kiln_model_create). */
  if (abf_run(g, qkv, got)) kiln_test_attn_bf16_compare("graph with a bf16 SDPA", got, want, ABF_N, ABF_D);
  kiln_graph_t* g32 = abf_graph(0);
  if (g32) {
    void* b32 = NULL;
    size_t n32 = 0;
    KILN_EXPECT_OK(kiln_artifact_write(g32, NULL, 0, &b32, &n32));
    if (b32)
      KILN_EXPECT(kiln_format_get_u16((uint8_t*)b32 + KILN_FORMAT_HDR_MINOR) < KILN_FORMAT_MINOR_SDPA_BF16,
                  "a file without the flag is stamped as before");
    free(b32);
  }
  if (g32 && abf_run(g32, qkv, fp32)) { /* the model takes the graph */
    double diff = abf_max_diff(fp32, got, ABF_N);
    KILN_EXPECT(diff > 2e-4, "the flag changes what the node computes (largest difference %.3g)", diff);
  }
  if (bytes) {
    KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) == KILN_FORMAT_MINOR_SDPA_BF16,
                "a file with a bf16 SDPA says 2.18");
    kiln_graph_t* back = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &back));
    if (back) {
      KILN_EXPECT(back->nodes[0].params[KILN_P(SDPA, FLAGS)] == KILN_SDPA_BF16, "the flag round-trips");
      if (abf_run(back, qkv, got2)) /* takes back */
        kiln_test_compare_f32("the same graph read back", got2, got, ABF_N, 0.0f, 0.0f);
    }
    /* Stamped 2.17: no writer of 2.17 set the flag. */
    kiln_format_put_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR, KILN_FORMAT_MINOR_SDPA_BF16 - 1);
    back = NULL;
    kiln_status_t st2 = kiln_artifact_read(bytes, size, kiln_allocator_system(), &back);
    KILN_EXPECT(st2 && kiln_status_code(st2) == KILN_CORRUPT_ARTIFACT &&
                    strstr(kiln_status_message(st2), "bf16 attention"),
                "a 2.17 file with a bf16 SDPA is refused: %s", st2 ? kiln_status_message(st2) : "read");
    kiln_status_free(st2);
    if (back) kiln_graph_release(back);
    free(bytes);
  }
}

/* KILN_SDPA_EVERY_KEY through a graph and a file: the model reads it (NaN
 * from a hidden key's NaN score), the file says 2.22, a 2.21 one is refused. */
static void kiln_test_attn_every_key_file(void) {
  static float q[ABF_N], k[ABF_N], v[ABF_N], got[ABF_N], plain[ABF_N];
  float* qkv[3] = {q, k, v};
  kiln_test_fill_f32(q, ABF_N, 64, -2, 2);
  kiln_test_fill_f32(k, ABF_N, 65, -2, 2);
  kiln_test_fill_f32(v, ABF_N, 66, -1, 1);
  for (int e = 0; e < ABF_D; ++e) /* head 0: query 0 -inf, key 0 positive, key 1 mixed */
    q[e] = -INFINITY, k[e] = 1.0f, k[ABF_D + e] = e % 2 ? 1.0f : -1.0f;
  kiln_graph_t* g = abf_graph(KILN_SDPA_EVERY_KEY);
  kiln_graph_t* g0 = abf_graph(0);
  if (!g || !g0) {
    if (g) kiln_graph_release(g);
    if (g0) kiln_graph_release(g0);
    return;
  }
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  /* The models take the graphs (kiln_model_create). */
  if (abf_run(g, qkv, got) && abf_run(g0, qkv, plain))
    KILN_EXPECT(isnan(got[0]) && plain[0] == 0.0f,
                "every_key: query 0's hidden NaN score reaches it (%g), not without the flag (%g)",
                (double)got[0], (double)plain[0]);
  if (bytes) {
    KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) ==
                    KILN_FORMAT_MINOR_SDPA_EVERY_KEY,
                "a file with an every-key SDPA says 2.22");
    kiln_graph_t* back = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &back));
    if (back) {
      KILN_EXPECT(back->nodes[0].params[KILN_P(SDPA, FLAGS)] == KILN_SDPA_EVERY_KEY,
                  "the flag round-trips");
      kiln_graph_release(back);
    }
    kiln_format_put_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR, KILN_FORMAT_MINOR_SDPA_EVERY_KEY - 1);
    back = NULL;
    kiln_status_t st = kiln_artifact_read(bytes, size, kiln_allocator_system(), &back);
    KILN_EXPECT(st && kiln_status_code(st) == KILN_CORRUPT_ARTIFACT &&
                    strstr(kiln_status_message(st), "every key"),
                "a 2.21 file with an every-key SDPA is refused: %s", st ? kiln_status_message(st) : "read");
    kiln_status_free(st);
    if (back) kiln_graph_release(back);
    free(bytes);
  }
}

void kiln_test_suite_attention_bf16(void) {
  kiln_test_attn_bf16_graph_and_file();
  kiln_test_attn_every_key_file();
  kiln_test_attn_bf16_mask_ = kiln_cpu_bf16();
  kiln_test_each_isa_and_pool(kiln_test_attn_bf16_level);
  kiln_cpu_bf16_set(kiln_test_attn_bf16_mask_);
}
