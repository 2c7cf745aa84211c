/* int4 x int8 (int4 weights flagged a8, activations quantized per row and
 * weight group at run time; the rule is in kiln_gemm.h): at every ISA level
 * this machine has, 1 and 2 threads, kiln_gemm_f32 on M = 1..8 (decode) and
 * M = 9, 17, 40 and 300 (prefill: several slabs of 8 rows, a partial slab,
 * two passes of quantized rows) against
 *   (1) kiln_gemm_q4a8_reference: every kernel computes the rule's float
 *       operations in its order, so without an activation the result is
 *       the reference's bit for bit (GELU/SiLU come from the ISA's
 *       epilogue: 1e-6);
 *   (2) the rule evaluated here in double from the blob's raw nibbles (the
 *       same fp32 d and int8 q): the fp32 result may differ by the
 *       rounding of scale * d and of each group's FMA, at most (kg + 2)
 *       units of 2^-24 of sum_g |scale d acc| (kg roundings of the running
 *       sum, one of the product, one spare);
 *   (3) the weight-only product in double: |C - C_w| <= sum_p |w_pj|
 *       d_ig(p) / 2 (each q d is within d / 2 of its activation, the
 *       division's own rounding adds 127 ulp of d at most: 1e-5 relative
 *       slack) plus (2)'s rounding;
 * on K 7, 32, 50, 200, 300 (K not a multiple of G: the last group partial),
 * N 1, 15, 16, 17, 33, 70 (not multiples of 16), groups 32 and 128,
 * symmetric and asymmetric, with bias, activation and residual (also in
 * place), bf16 and strided A, a batch, and a row with a NaN (its outputs
 * NaN, the other rows unaffected). */
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

typedef struct {
  int64_t batch, m, n, k;
  int group, asym;
  int bias, residual, res_alias, a16, a_strided, nan_row;
  kiln_activation_t act;
} q4a8_case_t;

static void* q4a8_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }

/* The blob's raw nibble, scale and zero point of (p, j), read from the
 * documented layout (kiln_gemm.h) independently of the library. */
/* Entry i of a group block's header: e bytes each (2: bf16, 4: fp32). */
static float q4a8_entry(const uint8_t* blk, int e, int i) {
  uint32_t bits = 0;
  if (e == 2) {
    uint16_t h;
    memcpy(&h, blk + 2 * i, 2);
    bits = (uint32_t)h << 16;
  } else {
    memcpy(&bits, blk + 4 * i, 4);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static int q4a8_raw(const void* blob, int64_t k, int group, int asym, int64_t p, int64_t j,
                    float* scale, float* zero) {
  const uint8_t* body = (const uint8_t*)blob + KILN_GEMM_QUANT_HEADER;
  /* Header flags bit 2: scales and zero points in bf16 (2 bytes), else fp32. */
  const int e = (((const uint8_t*)blob)[6] & KILN_GEMM_QUANT_BF16_SCALES) ? 2 : 4;
  int64_t kg = (k + group - 1) / group, hdr = 16 * e * (1 + asym), gb = hdr + 8 * (int64_t)group;
  const uint8_t* blk = body + ((j / 16) * kg + p / group) * gb;
  int c = (int)(j % 16);
  int64_t r = p % group;
  *scale = q4a8_entry(blk, e, c);
  *zero = asym ? q4a8_entry(blk, e, 16 + c) : 8.0f;
  uint8_t byte = blk[hdr + (r / 2) * 16 + 2 * (c & 7) + (r & 1)];
  return c < 8 ? byte & 15 : byte >> 4;
}

/* Checks (2) and (3) for one row i of A (fp32 values at a, stride cs) against
 * got (no epilogue). */
static void q4a8_check_rule(const char* what, int64_t i, int64_t k, int64_t n, int group, int asym,
                            const float* a, int64_t cs, const void* blob, const float* got) {
  int64_t kg = (k + group - 1) / group;
  float* d = malloc((size_t)kg * sizeof(float));
  float* q = malloc((size_t)k * sizeof(float));
  for (int64_t g = 0; g < kg; ++g) {
    int64_t p0 = g * group, len = k - p0 < group ? k - p0 : group;
    float amax = 0.0f;
    for (int64_t p = p0; p < p0 + len; ++p) amax = fmaxf(amax, fabsf(a[p * cs]));
    d[g] = amax / 127.0f;
    if (d[g] == 0.0f) d[g] = 1.0f;
    for (int64_t p = p0; p < p0 + len; ++p) {
      float v = nearbyintf(a[p * cs] / d[g]);
      q[p] = v < -127 ? -127 : v > 127 ? 127 : v;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    double rule = 0, rule_abs = 0, weight_only = 0, bound = 0, wo_abs = 0;
    for (int64_t g = 0; g < kg; ++g) {
      int64_t p0 = g * group, len = k - p0 < group ? k - p0 : group;
      double acc = 0;
      float scale = 0, zero = 0;
      for (int64_t p = p0; p < p0 + len; ++p) {
        int nib = q4a8_raw(blob, k, group, asym, p, j, &scale, &zero);
        double w = ((double)nib - zero) * scale;
        acc += (double)(nib - zero) * q[p];
        weight_only += (double)a[p * cs] * w;
        wo_abs += fabs((double)a[p * cs] * w);
        bound += fabs(w) * d[g] / 2;
      }
      rule += (double)scale * d[g] * acc;
      rule_abs += fabs((double)scale * d[g] * acc);
    }
    double round_tol = (double)(kg + 2) * ldexp(1.0, -24) * rule_abs + 1e-30;
    KILN_EXPECT(fabs(got[j] - rule) <= round_tol, "%s: row %lld col %lld: %.9g, the rule %.9g (tol %g)",
                what, (long long)i, (long long)j, got[j], rule, round_tol);
    double wo_tol = bound * (1 + 1e-5) + round_tol + 1e-6 * wo_abs;
    KILN_EXPECT(fabs(got[j] - weight_only) <= wo_tol,
                "%s: row %lld col %lld: %.9g, weight-only %.9g, bound %g", what, (long long)i,
                (long long)j, got[j], weight_only, wo_tol);
  }
  free(d), free(q);
}

static void q4a8_run(const q4a8_case_t* tc, kiln_pool_t* pool, const char* where) {
  const int64_t B = tc->batch, M = tc->m, N = tc->n, K = tc->k;
  /* Some activations far from the rest (every 37th times 8): groups with
   * different scales. */
  kiln_test_qgemm_t t;
  kiln_test_qgemm_init(&t, B, M, N, K, tc->a_strided, tc->a16, tc->nan_row, 37,
                       (unsigned)(M * 7919 + N * 104729 + K * 31 + B + tc->group + tc->asym),
                       kiln_gemm_quant_packed_size(K, N, 4, tc->group, tc->asym));
  kiln_gemm_quant_pack_b(K, N, t.w, 1, K, 4, tc->group, tc->asym, t.blob);
  kiln_gemm_quant_set_a8(t.blob);
  const float* a = t.a;
  const float* c_got = t.c_got;
  const int64_t acs = t.acs, lda = t.lda, ldc = t.ldc;
  kiln_gemm_f32_args_t g, ref;
  kiln_test_qgemm_args(&t, tc->bias, tc->residual, tc->res_alias, tc->act, &g, &ref);
  kiln_gemm_f32_reference(&ref);
  kiln_gemm_f32(&g, pool);

  char what[256];
  snprintf(what, sizeof(what),
           "[%s] b=%lld m=%lld n=%lld k=%lld g=%d asym=%d bias=%d res=%d alias=%d act=%d a16=%d "
           "stride=%d nan=%d",
           where, (long long)B, (long long)M, (long long)N, (long long)K, tc->group, tc->asym,
           tc->bias, tc->residual, tc->res_alias, (int)tc->act, tc->a16, tc->a_strided, tc->nan_row);
  float tol = tc->act == KILN_ACT_NONE ? 0.0f : 1e-6f;
  kiln_test_compare_f32(what, t.c_got, t.c_want, t.nc, tol, tol);
  const char* path = kiln_gemm_quant_last_path();
  /* An int8 engine wherever the CPU has it (VNNI and VBMI at the avx512
     level, dotprod at the neon level: so that kernel ran here), else the
     level's kernel. */
  const kiln_cpu_features_t* f = kiln_cpu_features();
  int vnni = kiln_cpu_isa() == KILN_ISA_AVX512 && f->avx512_vnni && f->avx512_vbmi;
  int sdot = kiln_cpu_isa() == KILN_ISA_NEON && f->neon_dotprod;
  KILN_EXPECT(!strncmp(path, "q4a8-", 5) &&
                  !strcmp(path + 5, vnni ? "avx512vnni" : sdot ? "neondot"
                                                        : kiln_cpu_isa_name(kiln_gemm_q4a8_level())),
              "%s: ran %s", what, path);
  if (tc->nan_row)
    for (int64_t bt = 0; bt < B; ++bt)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float v = c_got[bt * M * ldc + i * ldc + j];
          int want_nan = bt == 0 && i == M / 2;
          KILN_EXPECT(want_nan ? isnan(v) : !isnan(v), "%s: (%lld, %lld, %lld) is %g", what,
                      (long long)bt, (long long)i, (long long)j, v);
        }
  if (!tc->bias && !tc->residual && !tc->res_alias && tc->act == KILN_ACT_NONE && !tc->nan_row)
    for (int64_t bt = 0; bt < B; ++bt)
      for (int64_t i = 0; i < M; ++i)
        q4a8_check_rule(what, i, K, N, tc->group, tc->asym, a + bt * M * lda + i * lda, acs, t.blob,
                        c_got + bt * M * ldc + i * ldc);
  kiln_test_qgemm_free(&t);
}

static void q4a8_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ns[] = {1, 15, 16, 17, 33, 70};
  static const int64_t ks[] = {7, 32, 50, 200, 300};
  q4a8_case_t tc;
  int n = 0;
  for (int64_t m = 1; m <= 8; ++m)
    for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in)
      for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik, ++n) {
        memset(&tc, 0, sizeof(tc));
        tc.batch = 1, tc.m = m, tc.n = ns[in], tc.k = ks[ik];
        tc.group = n % 4 == 3 ? 128 : 32;
        tc.asym = n % 3 == 1;
        tc.bias = n % 2;
        tc.act = n % 5 == 0 ? KILN_ACT_GELU : n % 7 == 0 ? KILN_ACT_RELU : KILN_ACT_NONE;
        tc.residual = n % 5 == 1;
        tc.res_alias = n % 5 == 3;
        q4a8_run(&tc, pool, where);
      }
  /* Larger, with every variation: several panel runs per task, a batch,
   * bf16 and strided A, a NaN row. */
  static const int64_t big[][4] = {{1, 1, 300, 1000}, {2, 3, 65, 257}, {1, 8, 260, 96},
                                   {1, 9, 33, 50},    {1, 17, 70, 200}, {2, 40, 33, 96},
                                   {1, 300, 20, 64}};
  for (size_t z = 0; z < sizeof(big) / sizeof(big[0]); ++z)
    for (int v = 0; v < 4; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = big[z][0], tc.m = big[z][1], tc.n = big[z][2], tc.k = big[z][3];
      tc.group = z == 1 ? 128 : 32;
      tc.asym = v == 2 || z == 2;
      tc.bias = v != 0;
      tc.act = v == 1 ? KILN_ACT_SILU : KILN_ACT_NONE;
      tc.residual = v == 1;
      tc.res_alias = v == 2;
      tc.a16 = v == 1;
      tc.a_strided = v == 2;
      tc.nan_row = v == 3;
      q4a8_run(&tc, pool, where);
    }
}

/* The flag on an int4 blob is well formed, and every M takes the a8 path
 * (prefill as decode: one rule per row, whatever the row count). */
static void q4a8_flag(void) {
  enum { M = 9, N = 20, K = 50 };
  static float a[M * K], w[N * K], got[M * N], want[M * N];
  kiln_test_fill_f32(a, M * K, 5, -1, 1);
  kiln_test_fill_f32(w, N * K, 6, -1, 1);
  size_t n4 = kiln_gemm_quant_packed_size(K, N, 4, 32, 1);
  unsigned char* blob = q4a8_alloc(n4);
  kiln_gemm_quant_pack_b(K, N, w, 1, K, 4, 32, 1, blob);
  kiln_gemm_quant_set_a8(blob);
  KILN_EXPECT(blob[6] == (1 | KILN_GEMM_QUANT_A8 | KILN_GEMM_QUANT_BF16_SCALES), "flags %d", blob[6]);
  KILN_EXPECT(kiln_gemm_quant_check(blob, n4, K, N) == 0, "an a8 int4 blob is well formed");
  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1, g.m = M, g.n = N, g.k = K, g.a = a, g.a_row_stride = K, g.a_col_stride = 1;
  g.b_packed_q = blob, g.c = got, g.c_row_stride = N;
  KILN_EXPECT(kiln_gemm_q4a8_applies(&g), "M %d is the a8 path", M);
  kiln_gemm_f32(&g, NULL);
  KILN_EXPECT(!strncmp(kiln_gemm_quant_last_path(), "q4a8-", 5), "M %d ran %s", M,
              kiln_gemm_quant_last_path());
  g.c = want;
  kiln_gemm_f32_reference(&g);
  kiln_test_compare_f32("int4 a8 blob above the GEMV rows", got, want, M * N, 0.0f, 0.0f);
  free(blob);
}

void kiln_test_suite_gemm_q4a8(void) {
  q4a8_flag();
  kiln_test_each_isa_and_pool(q4a8_level);
}
