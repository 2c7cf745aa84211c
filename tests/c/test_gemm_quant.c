/* Quantized weights (kiln_gemm_quant_pack_b): every ISA level this machine
 * has (kiln_test_each_isa_and_pool forces each, with 1 and 2 threads, and
 * restores the level) against the scalar reference (kiln_gemm_f32_reference:
 * each weight dequantized by the scalar rule, double sums), for int8 and
 * int4 (groups 32 and 128, symmetric and asymmetric), on edge shapes: M 1,
 * 2, 3, 5, 7, 8 (the GEMV kernels' row tiles) and 9, 16, 33 (the blocked
 * path), N tails 1, 15, 17, 33 around the 16-column panels, K 1, 31, 33,
 * 100, 130 (K not a multiple of the group: the last group is padded with
 * zero weights), with bias, activation and residual (also in place) on and
 * off, strided and bf16 A, a batch.
 *
 * Also: the quantization rules themselves (each dequantized weight within
 * half a step of the original, the extreme of a group exact), the packer's
 * fast path byte for byte against the scalar rule, a LINEAR
 * through the compiler and runtime with weights_quant, and the CPU target
 * refusing a blob whose header or size does not match.
 *
 * Tolerance: the kernels read exactly the reference's dequantized values,
 * so only fp32 summation differs; int4's GEMV sums A times the raw nibbles
 * (up to 15) and subtracts the zero point times A's group sum, which can
 * cost a few more ulps of those larger sums: atol 2e-5 sqrt(K) + 1e-5 and
 * rtol 1e-4 stay far below one quantization step of one weight (~1e-2 on
 * these sums), which any wrong nibble, scale or zero point moves by. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

typedef struct {
  int bits, group, asym;
} quant_kind_t;

static const quant_kind_t quant_kinds[] = {{8, 0, 0}, {4, 32, 0}, {4, 32, 1}, {4, 128, 0}, {4, 128, 1}};
#define N_KINDS ((int)(sizeof(quant_kinds) / sizeof(quant_kinds[0])))

typedef struct {
  int64_t batch, m, n, k;
  int bias, residual, res_alias, a16, a_strided;
  kiln_activation_t act;
} quant_case_t;

static void* quant_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }

static void quant_run(const quant_case_t* tc, const quant_kind_t* qk, kiln_pool_t* pool,
                      const char* where) {
  const int64_t B = tc->batch, M = tc->m, N = tc->n, K = tc->k;
  const int64_t acs = tc->a_strided ? 2 : 1;
  const int64_t lda = K * acs + 3, ldc = N + 2, ldr = N + 5;
  size_t na = (size_t)(B * M * lda) + 1, nb = (size_t)(K * N) + 1;
  size_t nc = (size_t)(B * M * ldc) + 1, nr = (size_t)(B * M * ldr) + 1;
  float* a = quant_alloc(na * 4);
  float* w = quant_alloc(nb * 4); /* nn.Linear's W (N, K): B = W^T */
  float* bias = quant_alloc((size_t)N * 4 + 4);
  float* res = quant_alloc(nr * 4);
  float* c_got = quant_alloc(nc * 4);
  float* c_ref = quant_alloc(nc * 4);
  size_t qbytes = kiln_gemm_quant_packed_size(K, N, qk->bits, qk->group, qk->asym);
  void* bq = quant_alloc(qbytes);
  uint16_t* a16 = tc->a16 ? quant_alloc(na * 2) : NULL;
  unsigned seed = (unsigned)(M * 7919 + N * 104729 + K * 31 + B + qk->bits * 3 + qk->group + qk->asym);
  kiln_test_fill_f32(a, na, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(w, nb, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)N + 1, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(res, nr, seed + 3, -1.0f, 1.0f);
  kiln_test_fill_f32(c_got, nc, seed + 4, -1.0f, 1.0f);
  memcpy(c_ref, c_got, nc * 4);
  if (a16)
    for (size_t i = 0; i < na; ++i) a16[i] = kiln_gemm_bf16_from_f32(a[i]);
  kiln_gemm_quant_pack_b(K, N, w, 1, K, qk->bits, qk->group, qk->asym, bq);
  KILN_EXPECT(kiln_gemm_quant_check(bq, qbytes, K, N) == 0, "packed blob checks");

  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = B, g.m = M, g.n = N, g.k = K;
  g.a = a16 ? NULL : a;
  g.a_bf16 = a16;
  g.a_batch_stride = M * lda, g.a_row_stride = lda, g.a_col_stride = acs;
  g.b_packed_q = bq;
  g.c = c_got, g.c_batch_stride = M * ldc, g.c_row_stride = ldc;
  g.bias = tc->bias ? bias : NULL;
  g.act = tc->act;
  if (tc->res_alias) {
    g.residual = c_got, g.r_batch_stride = M * ldc, g.r_row_stride = ldc;
  } else if (tc->residual) {
    g.residual = res, g.r_batch_stride = M * ldr, g.r_row_stride = ldr;
  }
  kiln_gemm_f32_args_t ref = g;
  ref.c = c_ref;
  if (tc->res_alias) ref.residual = c_ref;
  kiln_gemm_f32_reference(&ref);
  kiln_gemm_f32(&g, pool);

  char what[256];
  snprintf(what, sizeof(what),
           "[%s] int%d g%d%s b=%lld m=%lld n=%lld k=%lld bias=%d res=%d alias=%d act=%d a16=%d "
           "astride=%lld",
           where, qk->bits, qk->group, qk->asym ? " asym" : "", (long long)B, (long long)M,
           (long long)N, (long long)K, tc->bias, tc->residual, tc->res_alias, (int)tc->act,
           tc->a16, (long long)acs);
  float atol = 2e-5f * sqrtf((float)K) + 1e-5f;
  kiln_test_compare_f32(what, c_got, c_ref, nc, atol, 1e-4f);
  /* The path that ran is the forced level's. */
  const char* ran = kiln_gemm_quant_last_path();
  const char* isa = kiln_cpu_isa_name(kiln_cpu_isa());
  const char* dash = strchr(ran, '-');
  int want_gemv = M <= 8;
  KILN_EXPECT(dash && !strcmp(dash + 1, isa) && !strncmp(ran, want_gemv ? "gemv" : "blocked",
                                                          (size_t)(dash - ran)),
              "%s: ran %s", what, ran);
  free(a), free(w), free(bias), free(res), free(c_got), free(c_ref), free(bq), free(a16);
}

static void quant_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ms[] = {1, 2, 3, 5, 7, 8, 9, 16, 33};
  static const int64_t ns[] = {1, 15, 17, 33};
  static const int64_t ks[] = {1, 31, 33, 100, 130};
  quant_case_t tc;
  int n = 0;
  for (int q = 0; q < N_KINDS; ++q)
    for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); ++im)
      for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in)
        for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik, ++n) {
          /* Every M with every N and K for int8 and int4 g32; a sample of
           * the rest (each still sees every M, N and K). */
          if (q >= 3 && (n % 3) != 0) continue;
          memset(&tc, 0, sizeof(tc));
          tc.batch = 1, tc.m = ms[im], tc.n = ns[in], tc.k = ks[ik];
          tc.bias = n % 2;
          tc.act = n % 3 == 0 ? KILN_ACT_NONE : n % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_GELU;
          tc.residual = n % 5 == 1;
          tc.res_alias = n % 5 == 3;
          tc.a16 = n % 7 == 2;
          tc.a_strided = n % 11 == 4;
          quant_run(&tc, &quant_kinds[q], pool, where);
        }
  /* Larger: several strips of the blocked path, a batch, long K. */
  static const int64_t big[][4] = {{1, 1, 300, 1000}, {2, 4, 70, 257}, {1, 40, 257, 300},
                                   {2, 20, 33, 130}, {1, 8, 200, 4100}};
  for (int q = 0; q < N_KINDS; ++q)
    for (size_t z = 0; z < sizeof(big) / sizeof(big[0]); ++z) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = big[z][0], tc.m = big[z][1], tc.n = big[z][2], tc.k = big[z][3];
      tc.bias = 1;
      tc.act = z % 2 ? KILN_ACT_SILU : KILN_ACT_NONE;
      tc.residual = z == 1;
      tc.res_alias = z == 2 || z == 3;
      quant_run(&tc, &quant_kinds[q], pool, where);
    }
}

/* The blocked path (M > 8) is the fp32 driver with B dequantized a K block
 * by kiln_gemm_f32_fly's blocks at a time: K blocks (kc = K over
 * ceil(K / 256) blocks) that start inside int4 groups and on odd rows (K
 * 257: kc 129; 513: 171; 1000: 250 across groups of 128), several
 * 256-column blocks per task (N 300), M blocks past mc_max (M 150, 300),
 * M split across tasks because N has one or two strips (N 17 at M 300),
 * batches sharing the weights, and the epilogues. */
static void quant_fly_level(kiln_pool_t* pool, const char* where) {
  static const int64_t cases[][4] = {{1, 9, 33, 257},  {2, 20, 17, 513},  {1, 150, 300, 257},
                                     {3, 12, 45, 1000}, {1, 300, 17, 130}, {1, 64, 257, 513},
                                     {2, 37, 300, 130}};
  quant_case_t tc;
  for (int q = 0; q < N_KINDS; ++q)
    for (size_t z = 0; z < sizeof(cases) / sizeof(cases[0]); ++z) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = cases[z][0], tc.m = cases[z][1], tc.n = cases[z][2], tc.k = cases[z][3];
      tc.bias = (int)((z + (size_t)q) % 2);
      tc.act = z % 3 == 0 ? KILN_ACT_NONE : z % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_GELU;
      tc.residual = z % 4 == 1;
      tc.res_alias = z % 4 == 3;
      tc.a16 = z == 5;
      tc.a_strided = z == 2;
      quant_run(&tc, &quant_kinds[q], pool, where);
    }
}

/* The dequantizers of the running level write exactly the scalar rule's
 * values for any row range [p0, p0 + kc): ranges starting and ending
 * inside groups, on odd rows, a single row, the last row, all of K. */
static void quant_dequant_level(kiln_pool_t* pool, const char* where) {
  (void)pool;
  enum { K = 300, N = 37 };
  static const int64_t ranges[][2] = {{0, 300}, {0, 150}, {150, 150}, {1, 31}, {33, 96},
                                      {127, 3}, {31, 130}, {299, 1},   {100, 129}};
  static float w[N * K], out[3 * 16 * K];
  kiln_test_fill_f32(w, N * K, 17, -1.0f, 1.0f);
  kiln_gemm_dequant_q8_fn q8 = kiln_qc8w_dequant__generic;
  kiln_gemm_dequant_q4_fn q4 = kiln_qb4w_dequant__generic;
#ifdef KILN_GEMM_HAVE_X86
  if (kiln_cpu_isa() == KILN_ISA_AVX2 || kiln_cpu_isa() == KILN_ISA_AVX512) {
    q8 = kiln_qc8w_dequant__avx2;
    q4 = kiln_qb4w_dequant__avx2;
  }
#endif
#ifdef KILN_GEMM_HAVE_NEON
  if (kiln_cpu_isa() == KILN_ISA_NEON) {
    q8 = kiln_qc8w_dequant__neon;
    q4 = kiln_qb4w_dequant__neon;
  }
#endif
  for (int q = 0; q < N_KINDS; ++q) {
    const quant_kind_t* qk = &quant_kinds[q];
    size_t bytes = kiln_gemm_quant_packed_size(K, N, qk->bits, qk->group, qk->asym);
    uint8_t* blob = quant_alloc(bytes);
    kiln_gemm_quant_pack_b(K, N, w, 1, K, qk->bits, qk->group, qk->asym, blob);
    const uint8_t* body = blob + KILN_GEMM_QUANT_HEADER;
    const int64_t np = (N + 15) / 16, kg = qk->group ? (K + qk->group - 1) / qk->group : 0;
    const int form = qk->bits == 4 ? (int)KILN_GEMM_QUANT_BF16_SCALES | qk->asym : 0;
    for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); ++r) {
      const int64_t p0 = ranges[r][0], kc = ranges[r][1];
      if (qk->bits == 8)
        q8(K, p0, kc, (const int8_t*)(body + np * 16 * 4), (const float*)body, (int)np, out);
      else
        q4(kg, qk->group, form, p0, kc, body, (int)np, out);
      int bad = 0;
      for (int64_t j = 0; j < np * 16; ++j)
        for (int64_t p = 0; p < kc; ++p) {
          float got = out[(j / 16) * kc * 16 + p * 16 + j % 16];
          float want = j < N ? kiln_gemm_quant_weight(blob, p0 + p, j) : 0.0f;
          bad += memcmp(&got, &want, sizeof got) != 0 && !(want == 0.0f && got == 0.0f);
        }
      KILN_EXPECT(bad == 0, "%s int%d g%d%s rows [%lld, %lld): %d values differ from the rule",
                  where, qk->bits, qk->group, qk->asym ? " asym" : "", (long long)p0,
                  (long long)(p0 + kc), bad);
    }
    free(blob);
  }
}

/* The rules: within half a step of the original (int8: s = max|w| / 127;
 * int4 sym: |d| = max|w| / 8, asym: s = (max - min) / 15 over the group and
 * 0), and every column past N zero. int4 keeps its scale in bf16 (within
 * 2^-8 of the fp32 one, relatively), so a weight may be off by that much
 * more per unit of q (|q - z| <= 15): half a step plus 16 * 2^-8 steps; the
 * largest-magnitude element of a symmetric group is -8 times the bf16
 * scale, within 8 * 2^-8 steps of itself. */
static void quant_rules(void) {
  enum { K = 70, N = 19 };
  static float w[N * K];
  kiln_test_fill_f32(w, N * K, 91, -2.0f, 1.0f);
  for (int p = 0; p < K; ++p) w[3 * K + p] = 0.0f; /* an all-zero column */
  for (int q = 0; q < N_KINDS; ++q) {
    const quant_kind_t* qk = &quant_kinds[q];
    size_t bytes = kiln_gemm_quant_packed_size(K, N, qk->bits, qk->group, qk->asym);
    void* blob = quant_alloc(bytes);
    kiln_gemm_quant_pack_b(K, N, w, 1, K, qk->bits, qk->group, qk->asym, blob);
    int bad = 0, exact_missing = 0;
    for (int j = 0; j < N; ++j) {
      int gs = qk->bits == 8 ? K : qk->group;
      for (int p0 = 0; p0 < K; p0 += gs) {
        int p1 = p0 + gs < K ? p0 + gs : K;
        float amax = 0, lo = 0, hi = 0;
        for (int p = p0; p < p1; ++p) {
          float v = w[j * K + p];
          amax = fmaxf(amax, fabsf(v));
          lo = fminf(lo, v);
          hi = fmaxf(hi, v);
        }
        float step = qk->bits == 8 ? amax / 127 : qk->asym ? (hi - lo) / 15 : amax / 8;
        float slack = qk->bits == 4 ? 16.0f / 256.0f : 0.0f; /* the bf16 scale */
        int exact = 0;
        for (int p = p0; p < p1; ++p) {
          float v = w[j * K + p], d = kiln_gemm_quant_weight(blob, p, j);
          if (fabsf(d - v) > step * (0.5001f + slack) + 1e-6f) bad++;
          if (fabsf(v) == amax && fabsf(d - v) <= step * 8.0f / 256.0f) exact = 1;
        }
        if (qk->bits == 4 && !qk->asym && amax > 0 && !exact) exact_missing++;
      }
    }
    KILN_EXPECT(bad == 0, "int%d g%d asym %d: %d weights off by more than half a step", qk->bits,
                qk->group, qk->asym, bad);
    KILN_EXPECT(exact_missing == 0, "int%d g%d: %d groups lost their extreme", qk->bits, qk->group,
                exact_missing);
    float past = 0;
    for (int p = 0; p < K; ++p) past += fabsf(kiln_gemm_quant_weight(blob, p, N + 2));
    KILN_EXPECT(past == 0.0f, "columns past N are zero weights");
    /* A wrong header is refused. */
    KILN_EXPECT(kiln_gemm_quant_check(blob, bytes - 1, K, N) != 0, "short blob refused");
    KILN_EXPECT(kiln_gemm_quant_check(blob, bytes, K + 1, N) != 0, "wrong K refused");
    ((unsigned char*)blob)[0] ^= 1;
    KILN_EXPECT(kiln_gemm_quant_check(blob, bytes, K, N) != 0, "bad magic refused");
    free(blob);
  }
  KILN_EXPECT(kiln_gemm_quant_packed_size(8, 8, 4, 48, 0) == 0, "group 48 unsupported");
  KILN_EXPECT(kiln_gemm_quant_packed_size(8, 8, 8, 0, 1) == 0, "asymmetric int8 unsupported");
  KILN_EXPECT(kiln_gemm_quant_packed_size(8, 8, 2, 32, 0) == 0, "int2 unsupported");
}

/* W (N, K rows) packed by kiln_gemm_quant_pack_b into *fast and by the
 * scalar rule into *rule (both new); returns their size. */
static size_t quant_pack_both(int64_t K, int64_t N, const float* w, const quant_kind_t* qk,
                              unsigned char** fast, unsigned char** rule) {
  size_t bytes = kiln_gemm_quant_packed_size(K, N, qk->bits, qk->group, qk->asym);
  *fast = quant_alloc(bytes);
  *rule = quant_alloc(bytes);
  kiln_gemm_quant_pack_b(K, N, w, 1, K, qk->bits, qk->group, qk->asym, *fast);
  kiln_gemm_quant_pack_b_reference(K, N, w, 1, K, qk->bits, qk->group, qk->asym, *rule);
  return bytes;
}

/* The packer's fast path (contiguous columns, finite values, a normal
 * scale) writes exactly the bytes of the scalar rule
 * (kiln_gemm_quant_pack_b_reference), over every choice (groups up to 128
 * are assembled 16 columns at a time, 256 column by column) and columns
 * built to reach each branch: ties in magnitude (negative first, positive
 * first: the rule keeps the first), all zeros, -0 only, a zero group
 * beside -0, -0 the least value (the asymmetric zero point's sign), non-negative and
 * non-positive groups, a scale that would be denormal (the rule runs),
 * values near FLT_MAX, denormals, and K not a multiple of the group (the
 * short last group takes the rule). */
static void quant_pack_fast(void) {
  static const quant_kind_t kinds[] = {{8, 0, 0},  {4, 32, 0},  {4, 32, 1}, {4, 64, 0},
                                       {4, 128, 0}, {4, 128, 1}, {4, 256, 0}, {4, 256, 1}};
  static const int64_t ks[] = {256, 300, 33};
  enum { N = 37, KMAX = 300 };
  static float w[N * KMAX];
  for (int ki = 0; ki < 3; ++ki) {
    const int64_t K = ks[ki];
    kiln_test_fill_f32(w, N * K, 77 + (int)K, -3.0f, 3.0f);
    for (int64_t p = 0; p < K; ++p) {
      w[0 * K + p] = p % 32 == 3 ? -2.5f : p % 32 == 9 ? 2.5f : 0.25f * (float)(p % 5); /* tie, - first */
      w[1 * K + p] = p % 32 == 3 ? 2.5f : p % 32 == 9 ? -2.5f : -0.25f * (float)(p % 5); /* tie, + first */
      w[2 * K + p] = 0.0f;
      w[3 * K + p] = -0.0f;
      w[4 * K + p] = p % 2 ? -0.0f : 0.0f;
      w[5 * K + p] = 0.5f + 0.01f * (float)p;              /* all positive */
      w[6 * K + p] = -0.5f - 0.01f * (float)p;             /* all negative */
      w[7 * K + p] = (float)(p % 7) * 1e-39f;              /* denormals: a denormal scale */
      w[8 * K + p] = (p % 3 ? -1.0f : 1.0f) * 3.0e38f;      /* near FLT_MAX */
      w[9 * K + p] = (float)(p % 9) * 1.2e-37f;            /* m / -8 a denormal bf16 */
      w[10 * K + p] = p % 32 == 0 ? -8.0f : 1.0f;           /* a scale of exactly -1 */
      w[11 * K + p] = p % 4 ? 0.3f * (float)p : -0.0f;      /* -0 the least value */
    }
    for (size_t q = 0; q < sizeof(kinds) / sizeof(kinds[0]); ++q) {
      const quant_kind_t* qk = &kinds[q];
      unsigned char *fast, *rule;
      size_t bytes = quant_pack_both(K, N, w, qk, &fast, &rule);
      size_t first = bytes;
      for (size_t i = 0; i < bytes && first == bytes; ++i)
        if (fast[i] != rule[i]) first = i;
      KILN_EXPECT(first == bytes, "int%d g%d asym %d K %lld: packed bytes differ from the rule's at %zu of %zu",
                  qk->bits, qk->group, qk->asym, (long long)K, first, bytes);
      free(fast);
      free(rule);
    }
  }
}

/* A column (int8) or group (int4) holding a NaN or an infinity dequantizes
 * to NaN throughout, as the rules give in torch (its max propagates a NaN;
 * an infinite scale makes 0 * inf): never a finite stand-in for a weight
 * the model does not have. Checked by the scalar rule, both packers (a
 * NaN in a full group and in the short last one, +inf, -inf), and the
 * kernels of the running level with and without int8 activations, at a
 * GEMV's M and the blocked path's: those columns' outputs are all NaN, the
 * others the reference's. */
static void quant_nonfinite_level(kiln_pool_t* pool, const char* where) {
  enum { K = 70, N = 19 };
  static const int64_t ms[] = {1, 3, 9};
  static const int cols[] = {2, 5, 7, 11}, rows[] = {5, 40, 69, 33};
  static const float bad_values[] = {NAN, INFINITY, -INFINITY, NAN};
  static float w[N * K], a[9 * K], bias[N], c_got[9 * N], c_ref[9 * N];
  kiln_test_fill_f32(w, N * K, 5, -1.0f, 1.0f);
  kiln_test_fill_f32(a, 9 * K, 6, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, N, 7, -1.0f, 1.0f);
  for (int i = 0; i < 4; ++i) w[cols[i] * K + rows[i]] = bad_values[i];
  for (int q = 0; q < N_KINDS; ++q)
    for (int a8 = 0; a8 < 2; ++a8) {
      const quant_kind_t* qk = &quant_kinds[q];
      unsigned char *blob, *rule;
      size_t bytes = quant_pack_both(K, N, w, qk, &blob, &rule);
      KILN_EXPECT(!memcmp(blob, rule, bytes), "int%d g%d asym %d: fast packer differs from the rule",
                  qk->bits, qk->group, qk->asym);
      if (a8) kiln_gemm_quant_set_a8(blob);
      int wrong = 0;
      for (int j = 0; j < N; ++j)
        for (int p = 0; p < K; ++p) {
          int gs = qk->bits == 8 ? K : qk->group, nonfinite = 0;
          for (int i = 0; i < 4; ++i) nonfinite |= cols[i] == j && rows[i] / gs == p / gs;
          wrong += isnan(kiln_gemm_quant_weight(blob, p, j)) != nonfinite;
        }
      KILN_EXPECT(wrong == 0, "int%d g%d asym %d: %d weights NaN where their group is finite or not NaN where it is not",
                  qk->bits, qk->group, qk->asym, wrong);
      for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); ++im) {
        kiln_gemm_f32_args_t g;
        memset(&g, 0, sizeof(g));
        g.batch = 1, g.m = ms[im], g.n = N, g.k = K;
        g.a = a, g.a_row_stride = K, g.a_col_stride = 1;
        g.b_packed_q = blob;
        g.c = c_got, g.c_row_stride = N;
        g.bias = bias;
        kiln_gemm_f32_args_t ref = g;
        ref.c = c_ref;
        kiln_gemm_f32_reference(&ref);
        kiln_gemm_f32(&g, pool);
        char what[160];
        snprintf(what, sizeof(what), "[%s] non-finite weights, int%d g%d%s%s m=%lld", where, qk->bits,
                 qk->group, qk->asym ? " asym" : "", a8 ? " a8" : "", (long long)ms[im]);
        kiln_test_compare_f32(what, c_got, c_ref, (size_t)(ms[im] * N), 2e-5f * sqrtf((float)K) + 1e-5f, 1e-4f);
        int nan_cols = 0;
        for (int j = 0; j < N; ++j) {
          int all = 1;
          for (int64_t i = 0; i < ms[im]; ++i) all &= isnan(c_got[i * N + j]) != 0;
          nan_cols += all;
        }
        KILN_EXPECT(nan_cols == 4, "%s: %d columns NaN, want the 4 with a non-finite weight", what, nan_cols);
      }
      free(blob);
      free(rule);
    }
}

/* Through the compiler and runtime: weights_quant packs the LINEAR's
 * weight in the quantized layout, the model computes x Wq + b, and a blob
 * of the wrong size is refused by the CPU target. */
static void quant_compile(void) {
  enum { M = 3, K = 45, N = 21 };
  static float w[K * N], bias[N], x[M * K], want[M * N], got[M * N];
  kiln_test_fill_f32(w, K * N, 41, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, N, 42, -0.5f, 0.5f);
  kiln_test_fill_f32(x, M * K, 43, -1, 1);
  for (int q = 0; q < 3; ++q) {
    const quant_kind_t* qk = &quant_kinds[q];
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    int64_t sx[2] = {M, K}, sw[2] = {K, N}, sb[1] = {N};
    int32_t vx, vw, vb, mm, out;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias, sizeof bias, &vb));
    int32_t i1[2] = {vx, vw};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
    int32_t i2[2] = {mm, vb};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &out));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    o.weights_quant = qk->bits;
    o.weights_group = qk->group ? qk->group : 32;
    o.weights_asym = qk->asym;
    kiln_graph_t* compiled = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
    if (!compiled) return;
    const kiln_value_t* wv = &compiled->values[compiled->nodes[0].inputs[1]];
    kiln_layout_t want_layout = qk->bits == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8 : KILN_LAYOUT_GEMM_PACKED_B_Q4;
    KILN_EXPECT(compiled->n_nodes == 1 && wv->layout == want_layout &&
                    wv->nbytes == kiln_gemm_quant_packed_size(K, N, qk->bits, qk->group, qk->asym),
                "weight quantized (layout %d, %zu bytes)", (int)wv->layout, wv->nbytes);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double acc = bias[j];
        for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * kiln_gemm_quant_weight(wv->data, p, j);
        want[i * N + j] = (float)acc;
      }
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
    if (!m) return;
    int64_t shx[2] = {M, K}, shy[2] = {M, N};
    kiln_tensor_t in = {x, KILN_F32, 2, shx}, outt = {got, KILN_F32, 2, shy};
    KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &outt, 1));
    kiln_test_compare_f32("linear with quantized weights", got, want, M * N, 1e-5f, 1e-4f);
    kiln_model_release(m);
  }
  /* A blob one byte short (and one with a bad header) is refused. */
  for (int bad = 0; bad < 2; ++bad) {
    size_t bytes = kiln_gemm_quant_packed_size(K, N, 8, 0, 0);
    void* blob = quant_alloc(bytes);
    kiln_gemm_quant_pack_b(K, N, w, N, 1, 8, 0, 0, blob);
    if (bad) ((unsigned char*)blob)[5] = 4; /* claims int4 in the int8 layout */
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    int64_t sx[2] = {M, K}, sw[2] = {K, N};
    int32_t vx, vw, y;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_GEMM_PACKED_B_Q8,
                                           blob, bad ? bytes : bytes - 1, &vw));
    int32_t in[2] = {vx, vw};
    const int64_t p[1] = {KILN_ACT_NONE};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, 1, NULL, 0, NULL, &y));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
    kiln_model_t* m = NULL;
    KILN_EXPECT_ERROR(kiln_model_create(g, NULL, NULL, &m), KILN_INVALID_ARGUMENT);
    KILN_EXPECT(m == NULL, "no model from a malformed quantized weight");
    free(blob);
  }
}

/* nn.Linear on x.transpose(-1, -2): a MATMUL of a transposed x by a 2-d
 * constant. Simplify used to read x transposed in place, and that MATMUL
 * was no LINEAR: its weight stayed fp32, unpacked, whatever weights_quant
 * said (fuzzer seed 2 graph 30 of the quant mode). Now the transpose is a
 * copy and the rest one LINEAR on the int4 weight (and, without quantized
 * weights, on the packed fp32 one). */
static void quant_compile_transposed_x(void) {
  enum { M = 6, K = 45, N = 21 };
  static float w[K * N], xt[K * M], want[M * N], got[M * N];
  kiln_test_fill_f32(w, K * N, 44, -0.5f, 0.5f);
  kiln_test_fill_f32(xt, K * M, 45, -1, 1);
  for (int bits = 0; bits <= 4; bits += 4) {
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    int64_t sxt[2] = {K, M}, sw[2] = {K, N};
    int32_t vxt, vx, vw, y;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "xt", KILN_F32, 2, sxt, &vxt));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
    int64_t p[KILN_MAX_PARAMS] = {0};
    p[KILN_P(VIEW, RANK)] = 2;
    p[KILN_P(VIEW, DIMS)] = M, p[KILN_P(VIEW, DIMS) + 1] = K;
    p[KILN_P(VIEW, STRIDES)] = 1, p[KILN_P(VIEW, STRIDES) + 1] = M;
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &vxt, 1, p, KILN_MAX_PARAMS, NULL, 0, NULL, &vx));
    int32_t in[2] = {vx, vw};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, NULL, &y));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    o.weights_quant = bits;
    o.weights_group = 32;
    kiln_graph_t* compiled = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
    if (!compiled) return;
    const kiln_node_t* lin = &compiled->nodes[compiled->n_nodes - 1];
    const kiln_value_t* wv = &compiled->values[lin->inputs[1]];
    kiln_layout_t want_layout = bits ? KILN_LAYOUT_GEMM_PACKED_B_Q4 : KILN_LAYOUT_GEMM_PACKED_B;
    KILN_EXPECT(compiled->n_nodes == 2 && compiled->nodes[0].op == KILN_OP_STRIDED_COPY &&
                    lin->op == KILN_OP_LINEAR && wv->layout == want_layout,
                "int%d: a transpose copy and a LINEAR on the packed weight (%d nodes, last %s, layout %d)",
                bits ? bits : 32, (int)compiled->n_nodes, kiln_op_name(lin->op), (int)wv->layout);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double acc = 0;
        for (int q = 0; q < K; ++q)
          acc += (double)xt[q * M + i] * (bits ? kiln_gemm_quant_weight(wv->data, q, j) : (double)w[q * N + j]);
        want[i * N + j] = (float)acc;
      }
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
    if (!m) return;
    int64_t shy[2] = {M, N};
    kiln_tensor_t tin = {xt, KILN_F32, 2, sxt}, tout = {got, KILN_F32, 2, shy};
    KILN_EXPECT_OK(kiln_model_run(m, &tin, 1, &tout, 1));
    kiln_test_compare_f32(bits ? "int4 linear on a transposed x" : "linear on a transposed x", got, want, M * N,
                          1e-5f, 1e-4f);
    kiln_model_release(m);
  }
}

/* A MATMUL of x (2, M, K) by a constant (1, K, N) (torch's matmul of a 3-d
 * x it cannot fold, by a (K, N) weight: an expand and a bmm; or a bmm by a
 * batch-1 parameter) is a linear layer too: one LINEAR on the int8 weight,
 * taken as (K, N) (it stayed a MATMUL on the fp32 constant: fuzzer seed 3
 * graph 239 of the quant mode); also when another node reads the constant
 * as it is (shared = 1: w * z, z an input, exact; seed 20020 graph 420). */
static void quant_compile_batch1_weight(int shared) {
  enum { B = 2, M = 3, K = 45, N = 21 };
  static float w[K * N], x[B * M * K], want[B * M * N], got[B * M * N], z[K * N], wz[K * N];
  kiln_test_fill_f32(w, K * N, 46, -0.5f, 0.5f);
  kiln_test_fill_f32(x, B * M * K, 47, -1, 1);
  kiln_test_fill_f32(z, K * N, 48, -1, 1);
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t sx[3] = {B, M, K}, sw[3] = {1, K, N}, sy[3] = {B, M, N};
  int32_t vx, vz = -1, vw, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 3, sx, &vx));
  if (shared) KILN_EXPECT_OK(kiln_graph_add_input(g, "z", KILN_F32, 3, sw, &vz));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 3, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  int32_t in[2] = {vx, vw}, sq[2] = {vw, vz}, outs[2];
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, NULL, &y));
  outs[0] = y;
  if (shared) KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, sq, 2, NULL, 0, NULL, 0, NULL, &outs[1]));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, outs, 1 + shared));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.weights_quant = 8;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  const kiln_value_t* wv = &compiled->values[compiled->nodes[0].inputs[1]];
  KILN_EXPECT(compiled->n_nodes == 1 + shared && compiled->nodes[0].op == KILN_OP_LINEAR &&
                  wv->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 && wv->rank == 2,
              "one LINEAR on the int8 weight (%d nodes, %s, layout %d, rank %d)", (int)compiled->n_nodes,
              kiln_op_name(compiled->nodes[0].op), (int)wv->layout, (int)wv->rank);
  for (int i = 0; i < B * M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int q = 0; q < K; ++q) acc += (double)x[i * K + q] * kiln_gemm_quant_weight(wv->data, q, j);
      want[i * N + j] = (float)acc;
    }
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  kiln_tensor_t tin[2] = {{x, KILN_F32, 3, sx}, {z, KILN_F32, 3, sw}};
  kiln_tensor_t tout[2] = {{got, KILN_F32, 3, sy}, {wz, KILN_F32, 3, sw}};
  KILN_EXPECT_OK(kiln_model_run(m, tin, 1 + shared, tout, 1 + shared));
  kiln_test_compare_f32("int8 linear by a batch-1 constant", got, want, B * M * N, 1e-5f, 1e-4f);
  for (int i = 0; shared && i < K * N; ++i)
    KILN_EXPECT(wz[i] == w[i] * z[i], "the constant read as it is by the other node (%d)", i);
  kiln_model_release(m);
}

/* Quantized embeddings: a GATHER along axis 0 of a constant (V, D) table
 * with weights_quant gets the table packed as B = table^T, and each row it
 * gathers is exactly the scalar rule's dequantized column (int8: a scale
 * per row; int4: groups along the row, D = 70 not a multiple of 32);
 * indices out of range are an error, negative ones count from the end.
 * Without weights_quant the table stays dense. */
static void quant_gather(void) {
  enum { V = 37, D = 70, T = 5 };
  static float table[V * D], got[T * D];
  static int64_t ids[T] = {0, 5, -1, 36, 17};
  kiln_test_fill_f32(table, V * D, 51, -1.0f, 1.0f);
  for (int q = 0; q < N_KINDS + 1; ++q) {
    const quant_kind_t* qk = q < N_KINDS ? &quant_kinds[q] : NULL; /* last: no quantization */
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    int64_t st[2] = {V, D}, si[1] = {T};
    int32_t vt, vi, y;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "ids", KILN_I64, 1, si, &vi));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "table", KILN_F32, 2, st, KILN_LAYOUT_DENSE, table,
                                           sizeof table, &vt));
    int32_t in[2] = {vt, vi};
    const int64_t axis[1] = {0};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GATHER, in, 2, axis, 1, NULL, 0, NULL, &y));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    if (qk) {
      o.weights_quant = qk->bits;
      o.weights_group = qk->group ? qk->group : 32;
      o.weights_asym = qk->asym;
    }
    kiln_graph_t* compiled = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
    if (!compiled) return;
    const kiln_value_t* tv = &compiled->values[compiled->nodes[0].inputs[0]];
    kiln_layout_t want_layout = !qk ? KILN_LAYOUT_DENSE
                                : qk->bits == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8
                                                : KILN_LAYOUT_GEMM_PACKED_B_Q4;
    KILN_EXPECT(tv->layout == want_layout, "kind %d: table layout %d, want %d", q, (int)tv->layout,
                (int)want_layout);
    if (qk)
      KILN_EXPECT(tv->nbytes == kiln_gemm_quant_packed_size(D, V, qk->bits, qk->group, qk->asym),
                  "kind %d: %zu bytes", q, tv->nbytes);
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
    if (!m) return;
    int64_t sy[2] = {T, D};
    kiln_tensor_t tin = {ids, KILN_I64, 1, si}, tout = {got, KILN_F32, 2, sy};
    KILN_EXPECT_OK(kiln_model_run(m, &tin, 1, &tout, 1));
    int bad = 0;
    for (int i = 0; i < T; ++i) {
      int64_t j = ids[i] < 0 ? ids[i] + V : ids[i];
      for (int p = 0; p < D; ++p) {
        float want = qk ? kiln_gemm_quant_weight(tv->data, p, j) : table[j * D + p];
        bad += got[i * D + p] != want;
      }
    }
    KILN_EXPECT(bad == 0, "kind %d: %d gathered elements differ from the rule", q, bad);
    /* The rule really quantized: int8 within half a step of the table. */
    if (qk && qk->bits == 8)
      for (int i = 0; i < T; ++i) {
        int64_t j = ids[i] < 0 ? ids[i] + V : ids[i];
        float amax = 0.0f;
        for (int p = 0; p < D; ++p) amax = fmaxf(amax, fabsf(table[j * D + p]));
        for (int p = 0; p < D; ++p)
          KILN_EXPECT(fabsf(got[i * D + p] - table[j * D + p]) <= amax / 254.0f * 1.001f,
                      "int8 row %lld within half a step", (long long)j);
      }
    int64_t outside[T] = {0, 1, V, 2, -V - 1};
    tin.data = outside;
    KILN_EXPECT_ERROR(kiln_model_run(m, &tin, 1, &tout, 1), KILN_INVALID_ARGUMENT);
    kiln_model_release(m);
  }
}

void kiln_test_suite_gemm_quant(void) {
  quant_rules();
  quant_pack_fast();
  kiln_test_each_isa_and_pool(quant_level);
  kiln_test_each_isa_and_pool(quant_fly_level);
  kiln_test_each_isa_and_pool(quant_dequant_level);
  kiln_test_each_isa_and_pool(quant_nonfinite_level);
  quant_compile();
  quant_compile_transposed_x();
  quant_compile_batch1_weight(0);
  quant_compile_batch1_weight(1);
  quant_gather();
}
