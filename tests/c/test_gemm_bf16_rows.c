/* A bf16 model's linear weight read where torch keeps it: kiln_gemm_f32
 * with b_bf16 the (N, K) rows and b_bf16_weight set (what a LINEAR over a
 * KILN_LAYOUT_WIDENED_BF16_T constant the pack pass kept binds), against a
 * float64 reference of the same bf16 numbers, at every M the drivers
 * split on (with a bf16 x and VDPBF16PS: the rows kernels, one W row at a
 * time below 32 rows, 4 x 4 tiles from 32; with AMX too, from 16 rows W's
 * rows packed per call in column chunks for the tiles, the engine that ran
 * checked; without an engine or with an fp32 x, the fp32 paths widening
 * W), with x bf16 and float32, a bias, an activation and a residual, at
 * odd K and partial panels, at every ISA level, with each bf16 engine mask
 * the CPU allows (AMX and VDPBF16PS, VDPBF16PS alone, none), 1 and 2
 * threads. The bound: each output within 2^-16 of sum |x_p w_p| (+ |bias|)
 * of the reference: the products are exact in float32 (bf16 x bf16) and
 * only the float32 sums round (K <= 257 terms, each rounding at most
 * 2^-24 relative of a partial sum). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_bf16.h"
#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kiln_test.h"

static void rows_case(kiln_pool_t* pool, const char* where, int64_t M, int64_t N, int64_t K,
                      int x_bf16, int epi, const char* engine) {
  float* xf = malloc(sizeof(float) * (size_t)(M * K));
  uint16_t* x16 = malloc(sizeof(uint16_t) * (size_t)(M * K));
  uint16_t* w = malloc(sizeof(uint16_t) * (size_t)(N * K));
  float* bias = malloc(sizeof(float) * (size_t)N);
  float* res = malloc(sizeof(float) * (size_t)(M * N));
  float* y = malloc(sizeof(float) * (size_t)(M * N));
  kiln_test_fill_f32(xf, (size_t)(M * K), 7 + (unsigned)(M * 31 + K), -2.0f, 2.0f);
  kiln_test_fill_f32(bias, (size_t)N, 8, -1.0f, 1.0f);
  kiln_test_fill_f32(res, (size_t)(M * N), 9, -1.0f, 1.0f);
  float* wf = malloc(sizeof(float) * (size_t)(N * K));
  kiln_test_fill_f32(wf, (size_t)(N * K), 10 + (unsigned)N, -1.0f, 1.0f);
  for (int64_t i = 0; i < N * K; ++i) w[i] = kiln_bf16_from_f32(wf[i]);
  for (int64_t i = 0; i < M * K; ++i) {
    x16[i] = kiln_bf16_from_f32(xf[i]);
    if (x_bf16) xf[i] = kiln_bf16_to_f32(x16[i]); /* the same numbers either way */
  }
  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1, g.m = M, g.n = N, g.k = K;
  if (x_bf16)
    g.a_bf16 = x16;
  else
    g.a = xf;
  g.a_row_stride = K, g.a_col_stride = 1;
  g.b_bf16 = w, g.b_row_stride = 1, g.b_col_stride = K, g.b_bf16_weight = 1;
  g.c = y, g.c_row_stride = N;
  if (epi) {
    g.bias = bias;
    g.act = KILN_ACT_RELU;
    g.residual = res, g.r_row_stride = N;
  }
  kiln_gemm_bf16_note_engine("none");
  kiln_gemm_f32(&g, pool);
  if (engine && x_bf16)
    KILN_EXPECT(!strcmp(kiln_gemm_bf16_last_engine(), engine), "%s M %lld N %lld K %lld: ran %s, want %s",
                where, (long long)M, (long long)N, (long long)K, kiln_gemm_bf16_last_engine(), engine);
  int bad = 0;
  for (int64_t i = 0; i < M && bad < 3; ++i)
    for (int64_t j = 0; j < N && bad < 3; ++j) {
      double want = 0.0, mag = 0.0;
      for (int64_t p = 0; p < K; ++p) {
        double t = (double)xf[i * K + p] * (double)kiln_bf16_to_f32(w[j * K + p]);
        want += t;
        mag += fabs(t);
      }
      if (epi) {
        want += bias[j];
        mag += fabs(bias[j]);
        want = (want > 0.0 ? want : 0.0) + res[i * N + j];
      }
      double got = y[i * N + j];
      if (!(fabs(got - want) <= ldexp(mag, -16) + 1e-30)) {
        ++bad;
        KILN_EXPECT(0, "%s M %lld N %lld K %lld x %s%s: y[%lld][%lld] = %.9g, want %.9g",
                    where, (long long)M, (long long)N, (long long)K, x_bf16 ? "bf16" : "fp32",
                    epi ? " +bias relu +res" : "", (long long)i, (long long)j, got, want);
      }
    }
  if (!bad) KILN_EXPECT(1, "ok");
  free(xf), free(x16), free(w), free(wf), free(bias), free(res), free(y);
}

/* The bf16 engines this CPU has, taken at the top level (below AVX-512,
 * kiln_cpu_bf16() reports none). */
static unsigned rows_engines;

static void rows_level(kiln_pool_t* pool, const char* where) {
  static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 9, 15, 16, 33};
  static const int64_t nk[][2] = {{1, 1}, {17, 31}, {40, 64}, {33, 100}, {16, 257}};
  const unsigned engines = kiln_cpu_bf16() ? rows_engines : 0u;
  const unsigned masks[3] = {engines & KILN_CPU_BF16_AMX ? engines : 0u,
                             engines & KILN_CPU_BF16_AVX512, 0u};
  for (int e = 0; e < 3; ++e) {
    if (e < 2 && !masks[e]) continue;
    kiln_cpu_bf16_set(masks[e]);
    char at[96];
    snprintf(at, sizeof at, "%s%s", where,
             e == 0 ? " (amx)" : e == 1 ? " (avx512_bf16)" : " (no bf16 engine)");
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi) {
      const char* want = e == 2 ? NULL : e == 0 && ms[mi] >= 16 ? "amx" : "avx512_bf16";
      for (size_t s = 0; s < sizeof nk / sizeof nk[0]; ++s)
        for (int xb = 0; xb < 2; ++xb)
          rows_case(pool, at, ms[mi], nk[s][0], nk[s][1], xb, (int)(s + mi + xb) % 2, want);
    }
    /* AMX: W in two column chunks of 8 MiB (992 columns at K 4097; the
     * second 8 wide), the epilogue's bias and residual offset with them. */
    if (e == 0) rows_case(pool, at, 17, 1000, 4097, 1, 1, "amx");
  }
  kiln_cpu_bf16_set(rows_engines);
}

void kiln_test_suite_gemm_bf16_rows(void) {
  rows_engines = kiln_cpu_bf16();
  kiln_test_each_isa_and_pool(rows_level);
}
