/* int8 x int8 (int8 weights flagged a8, activations quantized per row at
 * run time; the rule is in kiln_gemm.h): at every ISA level this machine
 * has, 1 and 2 threads, kiln_gemm_f32 against kiln_gemm_q8a8_reference, on
 * edge shapes:
 *   prefill (the blocked kernel): M 9, 13, 32, 37, 70 around the 6- and
 *   12-row tiles and the row blocks; N 1, 15, 16, 17, 33 around the
 *   16-column panels and the int8 engine's two-panel tiles; K 1, 2, 3, 31,
 *   64, 67, 300 (odd K: the last row alone; K % 4: the engine's masked
 *   last quad; an odd count of quads: SMMLA's last quad paired with
 *   zeros), and 16384, 16385 (either side of SMMLA's K bound);
 *   decode (the GEMV, M 1..8): N 1, 15, 16, 17, 33, 70; K 1, 3, 7 (a
 *   partial quad of rows alone), 8, 50, 64, 301, and 4096, 4099;
 * with bias, activation and residual (also in place), bf16 and strided A, a
 * batch, and a row with a NaN or an infinity (its outputs NaN, the other
 * rows unaffected); kiln_gemm_quant_last_path says which kernel ran.
 *
 * Tolerance: the integer sums are exact and every kernel scales them in the
 * rule's order, so without an activation the result equals the reference
 * bit for bit; GELU/SiLU come from the ISA's epilogue, a few ulps apart:
 * rtol 1e-6, atol 1e-6 there. The reference is itself checked against the
 * rule written out here in double (the same quantized values, a double
 * sum: 1e-6 relative), at M = 8 too. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kiln_test.h"
#include "kiln_test_qgemm.h"

/* KILN_GEMM_GEMV_MAX_M (kiln_gemm_internal.h): the most rows the GEMV takes. */
enum { Q8A8_GEMV_MAX_M = 8 };

typedef struct {
  int64_t batch, m, n, k;
  int bias, residual, res_alias, a16, a_strided, nan_row;
  kiln_activation_t act;
} q8a8_case_t;

static void* q8a8_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }

/* The rule, written out independently of the library: C for one row. */
static void q8a8_rule_row(int64_t k, int64_t n, const float* a, int64_t cs, const void* blob,
                          double* out) {
  float amax = 0.0f;
  for (int64_t p = 0; p < k; ++p) amax = fmaxf(amax, fabsf(a[p * cs]));
  float s = amax / 127.0f;
  if (s == 0.0f) s = 1.0f;
  for (int64_t j = 0; j < n; ++j) {
    double acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      float q = nearbyintf(a[p * cs] / s);
      q = q < -127 ? -127 : q > 127 ? 127 : q;
      acc += (double)q * s * kiln_gemm_quant_weight(blob, p, j);
    }
    out[j] = acc;
  }
}

static void q8a8_run(const q8a8_case_t* tc, kiln_pool_t* pool, const char* where) {
  const int64_t B = tc->batch, M = tc->m, N = tc->n, K = tc->k;
  kiln_test_qgemm_t t;
  kiln_test_qgemm_init(&t, B, M, N, K, tc->a_strided, tc->a16, tc->nan_row, 0,
                       (unsigned)(M * 7919 + N * 104729 + K * 31 + B),
                       kiln_gemm_quant_packed_size(K, N, 8, 0, 0));
  kiln_gemm_quant_pack_b(K, N, t.w, 1, K, 8, 0, 0, t.blob);
  kiln_gemm_quant_set_a8(t.blob);
  const float* a = t.a;
  const float* c_got = t.c_got;
  const float* c_want = t.c_want;
  const void* blob = t.blob;
  const int64_t acs = t.acs, lda = t.lda, ldc = t.ldc;
  kiln_gemm_f32_args_t g, ref;
  kiln_test_qgemm_args(&t, tc->bias, tc->residual, tc->res_alias, tc->act, &g, &ref);
  kiln_gemm_q8a8_reference(&ref);
  kiln_gemm_f32(&g, pool);

  char what[256];
  snprintf(what, sizeof(what),
           "[%s] b=%lld m=%lld n=%lld k=%lld bias=%d res=%d alias=%d act=%d a16=%d stride=%d nan=%d",
           where, (long long)B, (long long)M, (long long)N, (long long)K, tc->bias, tc->residual,
           tc->res_alias, (int)tc->act, tc->a16, tc->a_strided, tc->nan_row);
  float tol = tc->act == KILN_ACT_NONE ? 0.0f : 1e-6f;
  kiln_test_compare_f32(what, t.c_got, t.c_want, t.nc, tol, tol);
  /* M <= 8: the GEMV (never the reference, its fallback without scratch). */
  const char* path = kiln_gemm_quant_last_path();
  const int gemv = M <= Q8A8_GEMV_MAX_M;
  KILN_EXPECT(!strncmp(path, gemv ? "q8a8-gemv-" : "q8a8-", gemv ? 10 : 5) &&
                  (gemv || strncmp(path, "q8a8-gemv-", 10)) && !strstr(path, "reference"),
              "%s: ran %s", what, path);
  /* Both kernels: an int8 engine's wherever the CPU has it (VNNI and VBMI
     at the avx512 level, dotprod at the neon level: so that kernel ran
     here; with i8mm too, SMMLA's for prefill up to K 16384; for prefill
     AMX-INT8 tiles where AMX is allowed), else the level's. */
  {
    const kiln_cpu_features_t* f = kiln_cpu_features();
    int vnni = kiln_cpu_isa() == KILN_ISA_AVX512 && f->avx512_vnni && f->avx512_vbmi;
    int amx = !gemv && kiln_cpu_isa() == KILN_ISA_AVX512 && f->amx_int8 && f->avx512_vbmi &&
              (kiln_cpu_bf16() & KILN_CPU_BF16_AMX);
    int sdot = kiln_cpu_isa() == KILN_ISA_NEON && f->neon_dotprod;
    int i8mm = sdot && f->neon_i8mm && !gemv && K <= 16384;
    KILN_EXPECT(!strcmp(path + (gemv ? 10 : 5),
                        amx    ? "amx"
                        : vnni ? "avx512vnni"
                        : i8mm ? "neoni8mm"
                        : sdot ? "neondot"
                               : kiln_cpu_isa_name(kiln_gemm_q8a8_level())),
                "%s: ran %s", what, path);
  }
  if (tc->nan_row)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float v = c_got[i * ldc + j];
        KILN_EXPECT(i == M / 2 ? isnan(v) : !isnan(v), "%s: (%lld, %lld) is %g", what,
                    (long long)i, (long long)j, v);
      }
  /* The reference against the rule written out above (no epilogue). */
  if (!tc->bias && !tc->residual && !tc->res_alias && tc->act == KILN_ACT_NONE && !tc->nan_row) {
    double* row = malloc((size_t)N * sizeof(double));
    for (int64_t bt = 0; bt < B; ++bt)
      for (int64_t i = 0; i < M; i += 7) {
        q8a8_rule_row(K, N, a + bt * M * lda + i * lda, acs, blob, row);
        for (int64_t j = 0; j < N; ++j) {
          double got = c_want[bt * M * ldc + i * ldc + j];
          KILN_EXPECT(fabs(got - row[j]) <= 1e-6 * fabs(row[j]) + 1e-6, "%s: reference (%lld, %lld) %g, rule %g",
                      what, (long long)i, (long long)j, got, row[j]);
        }
      }
    free(row);
  }
  kiln_test_qgemm_free(&t);
}

/* Each (batch, M, N, K) of big with every variation: plain, bias + SiLU +
 * residual + bf16 A, in-place residual + strided A, a NaN row, a -inf row. */
static void q8a8_variations(const int64_t (*big)[4], size_t n, kiln_pool_t* pool,
                            const char* where) {
  q8a8_case_t tc;
  for (size_t z = 0; z < n; ++z)
    for (int v = 0; v < 5; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = big[z][0], tc.m = big[z][1], tc.n = big[z][2], tc.k = big[z][3];
      tc.bias = v != 0;
      tc.act = v == 1 ? KILN_ACT_SILU : KILN_ACT_NONE;
      tc.residual = v == 1;
      tc.res_alias = v == 2;
      tc.a16 = v == 1;
      tc.a_strided = v == 2;
      tc.nan_row = v == 3 ? 1 : v == 4 ? 2 : 0;
      q8a8_run(&tc, pool, where);
    }
}

static void q8a8_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ms[] = {9, 13, 32, 37, 70};
  static const int64_t ns[] = {1, 15, 16, 17, 33};
  static const int64_t ks[] = {1, 2, 3, 31, 64, 67, 300};
  q8a8_case_t tc;
  int n = 0;
  for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); ++im)
    for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in)
      for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik, ++n) {
        memset(&tc, 0, sizeof(tc));
        tc.batch = 1, tc.m = ms[im], tc.n = ns[in], tc.k = ks[ik];
        tc.bias = n % 2;
        tc.act = n % 3 == 0 ? KILN_ACT_NONE : n % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_GELU;
        tc.residual = n % 5 == 1;
        tc.res_alias = n % 5 == 3;
        q8a8_run(&tc, pool, where);
      }
  /* Larger: several row blocks (K 1000: 126 rows per block) and strip
   * runs. */
  static const int64_t big[][4] = {{1, 300, 100, 1000}, {2, 40, 65, 257}, {1, 129, 260, 96}};
  q8a8_variations(big, sizeof(big) / sizeof(big[0]), pool, where);
  /* K past the SMMLA kernel's 16384 (its strip buffer's bound): the SDOT
   * kernel there, on either side of it. */
  static const int64_t ks_long[] = {16384, 16385};
  for (size_t ik = 0; ik < 2; ++ik) {
    memset(&tc, 0, sizeof(tc));
    tc.batch = 1, tc.m = 13, tc.n = 17, tc.k = ks_long[ik];
    tc.bias = 1;
    q8a8_run(&tc, pool, where);
  }
}

/* The decode GEMV (M <= 8): M = 1..8 on N 1, 15, 16, 17, 33, 70 (ragged
 * panels, and enough panels for 4-panel tiles and several tasks) and K 1,
 * 3, 7 (a partial quad of rows alone), 8, 50, 64, 301, with bias,
 * activations, residuals, some bf16 and strided A; then K 4099 (a large
 * odd K) and 4096 with every variation. */
static void q8a8_gemv_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ns[] = {1, 15, 16, 17, 33, 70};
  static const int64_t ks[] = {1, 3, 7, 8, 50, 64, 301};
  q8a8_case_t tc;
  int n = 0;
  for (int64_t m = 1; m <= Q8A8_GEMV_MAX_M; ++m)
    for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in)
      for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik, ++n) {
        memset(&tc, 0, sizeof(tc));
        tc.batch = 1, tc.m = m, tc.n = ns[in], tc.k = ks[ik];
        tc.bias = n % 2;
        tc.act = n % 3 == 0 ? KILN_ACT_NONE : n % 3 == 1 ? KILN_ACT_RELU : KILN_ACT_GELU;
        tc.residual = n % 5 == 1;
        tc.res_alias = n % 5 == 3;
        tc.a16 = n % 11 == 4;
        tc.a_strided = n % 13 == 6;
        q8a8_run(&tc, pool, where);
      }
  static const int64_t big[][4] = {{1, 1, 100, 4099}, {2, 3, 65, 257}, {1, 8, 260, 96},
                                   {1, 5, 33, 4096}};
  q8a8_variations(big, sizeof(big) / sizeof(big[0]), pool, where);
}

/* An a8 blob takes the int8 x int8 rule at every M: the GEMV up to
 * KILN_GEMM_GEMV_MAX_M rows, the blocked kernel above, the scalar reference
 * choosing the same rule (here checked against the rule written out). */
static void q8a8_threshold(void) {
  enum { M = Q8A8_GEMV_MAX_M, N = 20, K = 50 };
  static float a[M * K], w[N * K], got[M * N], want[M * N];
  kiln_test_fill_f32(a, M * K, 5, -1, 1);
  kiln_test_fill_f32(w, N * K, 6, -1, 1);
  void* blob = q8a8_alloc(kiln_gemm_quant_packed_size(K, N, 8, 0, 0));
  kiln_gemm_quant_pack_b(K, N, w, 1, K, 8, 0, 0, blob);
  kiln_gemm_quant_set_a8(blob);
  KILN_EXPECT(kiln_gemm_quant_check(blob, kiln_gemm_quant_packed_size(K, N, 8, 0, 0), K, N) == 0,
              "an a8 int8 blob is well formed");
  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1, g.m = M, g.n = N, g.k = K, g.a = a, g.a_row_stride = K, g.a_col_stride = 1;
  g.b_packed_q = blob, g.c = got, g.c_row_stride = N;
  KILN_EXPECT(kiln_gemm_q8a8_applies(&g), "M %d is the a8 rule", M);
  kiln_gemm_f32(&g, NULL);
  KILN_EXPECT(!strncmp(kiln_gemm_quant_last_path(), "q8a8-gemv-", 10), "M %d ran %s", M,
              kiln_gemm_quant_last_path());
  g.c = want;
  kiln_gemm_f32_reference(&g);
  kiln_test_compare_f32("a8 blob at M 8: the reference", got, want, M * N, 0.0f, 0.0f);
  double row[N];
  for (int i = 0; i < M; ++i) {
    q8a8_rule_row(K, N, a + i * K, 1, blob, row);
    for (int j = 0; j < N; ++j)
      KILN_EXPECT(fabs(got[i * N + j] - row[j]) <= 1e-6 * fabs(row[j]) + 1e-6,
                  "M 8 (%d, %d): %g, the rule %g", i, j, got[i * N + j], row[j]);
  }
  /* One rule, one answer per row: the same 8 rows as the first of 9 (the
   * blocked kernel) give the GEMV's bits. */
  static float a9[(M + 1) * K], got9[(M + 1) * N];
  memcpy(a9, a, sizeof(a));
  kiln_test_fill_f32(a9 + M * K, K, 7, -1, 1);
  g.a = a9, g.m = M + 1, g.c = got9;
  kiln_gemm_f32(&g, NULL);
  KILN_EXPECT(!strncmp(kiln_gemm_quant_last_path(), "q8a8-", 5) &&
                  strncmp(kiln_gemm_quant_last_path(), "q8a8-gemv-", 10),
              "M 9 ran %s", kiln_gemm_quant_last_path());
  kiln_test_compare_f32("rows 0-7 at M 9 and at M 8", got9, got, M * N, 0.0f, 0.0f);
  free(blob);
}

#ifdef KILN_GEMM_HAVE_NEON
/* The SDOT engine's two blocked microkernels side by side where the CPU
 * has them (a CPU with i8mm runs only SMMLA's through the driver up to K
 * 16384): one 12-row quad panel by two 16-column panels (SDOT: ns = 2) and
 * by each panel laid out for SMMLA, against the int32 sums written out
 * here, exact. K around the quads and SMMLA's pairs of quads. */
static void q8a8_arm_ukernels(void) {
  const kiln_cpu_features_t* f = kiln_cpu_features();
  if (!f->neon_dotprod) return;
  static const int64_t ks[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 31, 64, 67, 300};
  for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik) {
    const int64_t k = ks[ik], quads = (k + 3) / 4;
    int8_t* a = calloc((size_t)(quads * 48), 1);
    int8_t* b = malloc((size_t)(2 * 16 * k));
    int8_t* bp = malloc((size_t)((k + 7) / 8 * 128));
    int32_t want[2 * 192], got[2 * 192];
    uint32_t x = 12345u + (uint32_t)k;
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < 12; ++i) {
        x = x * 1664525u + 1013904223u;
        a[(p / 4) * 48 + 4 * i + p % 4] = (int8_t)((int)(x >> 24) % 255 - 127);
      }
    for (int64_t e = 0; e < 2 * 16 * k; ++e) {
      x = x * 1664525u + 1013904223u;
      b[e] = (int8_t)(x >> 24); /* -128 included: the blob's range */
    }
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 12; ++i)
        for (int j = 0; j < 16; ++j) {
          int32_t acc = 0;
          for (int64_t p = 0; p < k; ++p)
            acc += (int32_t)a[(p / 4) * 48 + 4 * i + p % 4] * b[s * 16 * k + p * 16 + j];
          want[s * 192 + i * 16 + j] = acc;
        }
    kiln_qd8_qc8w_gemm_ukernel_12x16__neondot(k, a, b, 16 * k, 2, got);
    for (int e = 0; e < 2 * 192; ++e)
      KILN_EXPECT(got[e] == want[e], "SDOT kernel, K %lld: element %d is %d, want %d",
                  (long long)k, e, got[e], want[e]);
    if (f->neon_i8mm)
      for (int s = 0; s < 2; ++s) {
        kiln_qd8_qc8w_gemm_prep_b__neoni8mm(k, b + s * 16 * k, bp);
        kiln_qd8_qc8w_gemm_ukernel_12x16__neoni8mm(k, a, bp, got);
        for (int e = 0; e < 192; ++e)
          KILN_EXPECT(got[e] == want[s * 192 + e], "SMMLA kernel, K %lld, panel %d: element %d is %d, want %d",
                      (long long)k, s, e, got[e], want[s * 192 + e]);
      }
    free(a);
    free(b);
    free(bp);
  }
}
#endif

void kiln_test_suite_gemm_q8a8(void) {
#ifdef KILN_GEMM_HAVE_NEON
  q8a8_arm_ukernels();
#endif
  q8a8_threshold();
  kiln_test_each_isa_and_pool(q8a8_level);
  /* With AMX-INT8, the prefill cases again with AMX off: VNNI's kernel. */
  const unsigned engines = kiln_cpu_bf16();
  if (engines & KILN_CPU_BF16_AMX && kiln_cpu_features()->amx_int8) {
    kiln_cpu_bf16_set(engines & ~(unsigned)KILN_CPU_BF16_AMX);
    kiln_test_each_isa_and_pool(q8a8_level);
    kiln_cpu_bf16_set(engines);
  }
  kiln_test_each_isa_and_pool(q8a8_gemv_level);
}
