/* The GEMM epilogue of every ISA level this CPU runs (the kernel table's
 * epilogue: dst = act(src + bias) + residual), each activation against a
 * double evaluation of torch's formula, over a dense sweep of x, the float
 * range's extremes and the special values; and the epilogue's pieces (bias,
 * residual, in place, row tails) against its activation alone.
 *
 * Tolerances, from kiln_gemm_epilogue_avx2.c's accuracy notes (the AVX-512
 * epilogue computes the same functions): |got - want| <= 1e-30 + rtol
 * |want|, rtol 2e-6 for x >= -3 and 1.5e-5 below (gelu: 1.1e-6 and 6e-6
 * documented; gelu_tanh 8e-7 and 1e-5; sigmoid, silu, tanh a few ulp);
 * atol 1e-30 because far left tails (gelu(x < -13) ~ 1e-38 and below) are
 * only required to be tiny; the generic level, torch's own formula in
 * float, also 1.2e-7 |x| (its 1 + erff(x / sqrt 2) cancels for x < 0,
 * as eager's does). A wrong polynomial coefficient, exp's range
 * reduction or a swapped branch misses these by orders of magnitude. NaN
 * in gives NaN out; infinities give torch's answers (gelu(-inf), silu(-inf)
 * and gelu_tanh(-inf) are NaN, as x * 0 in torch). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kiln_test.h"

static double epi_want(double x, kiln_activation_t act) {
  switch (act) {
    case KILN_ACT_RELU: return x < 0 ? 0.0 : x;
    case KILN_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case KILN_ACT_GELU_TANH: {
      /* 0.5 x (1 + tanh u), written so it does not cancel for x << 0. */
      double u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
      return x / (1.0 + exp(-2.0 * u));
    }
    case KILN_ACT_SILU: return x / (1.0 + exp(-x));
    case KILN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_ACT_TANH: return tanh(x);
    case KILN_ACT_RELU6: return x < 0 ? 0.0 : x > 6 ? 6.0 : x;
    case KILN_ACT_HARDSWISH: {
      /* torch's x * clamp(x + 3, 0, 6) / 6 overflows float in the product
       * past FLT_MAX / 6: inf, as eager's. */
      double t = x + 3 < 0 ? 0.0 : x + 3 > 6 ? 6.0 : x + 3, p = x * t;
      return fabs(p) > 3.4028234663852886e38 ? copysign(INFINITY, p) : p / 6.0;
    }
    default: return x;
  }
}

static const char* epi_name(kiln_activation_t act) {
  static const char* names[] = {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
                                 "relu6", "hardswish"};
  return (int)act < (int)KILN_ACT_COUNT ? names[act] : "?";
}

/* Every activation against double, at the running level. */
static void epi_accuracy(const kiln_gemm_kernels_t* k, const char* isa, int generic) {
  enum { N = 4096 + 64 };
  static float x[N], y[N];
  size_t n = 0;
  /* Dense over [-20, 20], then magnitudes from 1e-30 to FLT_MAX, both signs. */
  for (int i = 0; i < 4096; ++i) x[n++] = -20.0f + 40.0f * (float)i / 4095.0f;
  for (int e = -30; e <= 38 && n + 2 <= N; e += 2) {
    x[n++] = powf(10.0f, (float)e) * 1.2345f;
    x[n++] = -powf(10.0f, (float)e) * 1.2345f;
  }
  static const float sp[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 3.0e38f, -3.0e38f, 88.5f, -88.5f,
                             89.5f, -89.5f, 104.5f, -104.5f};
  for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]) && n < N; ++i) x[n++] = sp[i];
  for (int a = KILN_ACT_RELU; a < KILN_ACT_COUNT; ++a) {
    kiln_activation_t act = (kiln_activation_t)a;
    k->epilogue(1, (int64_t)n, x, (int64_t)n, y, (int64_t)n, NULL, NULL, 0, act);
    int bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < n; ++i) {
      double w = epi_want(x[i], act);
      double tol = 1e-30 + (x[i] >= -3.0f ? 2e-6 : 1.5e-5) * fabs(w);
      /* The generic level is torch's formula in float: 1 + erff(x / sqrt 2)
       * and 1 + tanhf(u) cancel left of 0 (eager's own error there). */
      if (generic) tol += 1.2e-7 * fabs((double)x[i]);
      /* Past float's range the double answer overflows float: inf. */
      int ok = fabs(w) > 3.4028234663852886e38 ? isinf(y[i]) && (y[i] > 0) == (w > 0)
                                                 : fabs((double)y[i] - w) <= tol;
      if (!ok && !bad++) first = i;
    }
    KILN_EXPECT(bad == 0, "[%s] %s: %d of %zu outside the bound, first x=%.9g got %.9g want %.9g",
                isa, epi_name(act), bad, n, (double)x[first], (double)y[first],
                epi_want(x[first], act));
  }
  /* Special values: NaN stays NaN; infinities give torch's answers. */
  static const float in[3] = {NAN, INFINITY, -INFINITY};
  /* act: want for +inf, -inf (NaN where torch computes inf * 0). */
  static const float at_inf[KILN_ACT_COUNT][2] = {
      {INFINITY, -INFINITY}, {INFINITY, 0.0f}, {INFINITY, NAN}, {INFINITY, NAN},
      {INFINITY, NAN},       {1.0f, 0.0f},     {1.0f, -1.0f},     {6.0f, 0.0f},
      {INFINITY, NAN}};
  for (int a = KILN_ACT_NONE; a < KILN_ACT_COUNT; ++a) {
    float out[3];
    k->epilogue(1, 3, in, 3, out, 3, NULL, NULL, 0, (kiln_activation_t)a);
    for (int s = 0; s < 2; ++s) {
      float w = at_inf[a][s], g = out[1 + s];
      KILN_EXPECT(isnan(w) ? isnan(g) : g == w, "[%s] %s(%sinf) = %g, want %g", isa,
                  epi_name((kiln_activation_t)a), s ? "-" : "+", (double)g, (double)w);
    }
    KILN_EXPECT(isnan(out[0]), "[%s] %s(NaN) = %g, want NaN", isa,
                epi_name((kiln_activation_t)a), (double)out[0]);
  }
  /* relu and relu6 keep -0.0, as torch's relu and hardtanh. */
  static const float mz[1] = {-0.0f};
  for (int a = KILN_ACT_NONE; a < KILN_ACT_COUNT; ++a) {
    if (a != KILN_ACT_RELU && a != KILN_ACT_RELU6) continue;
    float out[1];
    k->epilogue(1, 1, mz, 1, out, 1, NULL, NULL, 0, (kiln_activation_t)a);
    KILN_EXPECT(out[0] == 0.0f && signbit(out[0]), "[%s] %s(-0.0) = %g, want -0.0", isa,
                epi_name((kiln_activation_t)a), (double)out[0]);
  }
}

/* Bias, residual, in place and every row tail around the vector widths:
 * equal, bit for bit, to the level's activation alone applied to src +
 * bias, then + residual (the same operations in the same order), and
 * nothing written past n. */
static void epi_pieces(const kiln_gemm_kernels_t* k, const char* isa) {
  enum { M = 3, LD = 80 };
  float src[M * LD], bias[LD], res[M * LD], got[M * LD], want[M * LD];
  kiln_test_fill_f32(src, M * LD, 11, -4.0f, 4.0f);
  kiln_test_fill_f32(bias, LD, 12, -1.0f, 1.0f);
  kiln_test_fill_f32(res, M * LD, 13, -2.0f, 2.0f);
  for (int64_t n = 1; n <= 70; ++n)
    for (int v = 0; v < 4; ++v)
      for (int a = KILN_ACT_NONE; a < KILN_ACT_COUNT; ++a) {
        const float* b = v & 1 ? bias : NULL;
        const float* r = v & 2 ? res : NULL;
        kiln_activation_t act = (kiln_activation_t)a;
        for (int i = 0; i < M * LD; ++i) want[i] = got[i] = -7.0f; /* sentinels past n */
        for (int i = 0; i < M; ++i)
          for (int64_t j = 0; j < n; ++j) want[i * LD + j] = src[i * LD + j] + (b ? b[j] : 0.0f);
        k->epilogue(M, n, want, LD, want, LD, NULL, NULL, 0, act);
        if (r)
          for (int i = 0; i < M; ++i)
            for (int64_t j = 0; j < n; ++j) want[i * LD + j] += r[i * LD + j];
        k->epilogue(M, n, src, LD, got, LD, b, r, LD, act);
        char what[128];
        snprintf(what, sizeof what, "[%s] %s n=%lld bias=%d res=%d", isa, epi_name(act),
                 (long long)n, v & 1, v >> 1);
        kiln_test_compare_f32(what, got, want, M * LD, 0.0f, 0.0f);
        /* In place: dst is src (past n, src's own values stay). */
        memcpy(got, src, sizeof got);
        k->epilogue(M, n, got, LD, got, LD, b, r, LD, act);
        for (int i = 0; i < M; ++i)
          for (int64_t j = n; j < LD; ++j) want[i * LD + j] = src[i * LD + j];
        snprintf(what, sizeof what, "[%s] %s n=%lld bias=%d res=%d in place", isa,
                 epi_name(act), (long long)n, v & 1, v >> 1);
        kiln_test_compare_f32(what, got, want, M * LD, 0.0f, 0.0f);
      }
}

static void epi_level(struct kiln_pool_s* pool, const char* where) {
  (void)pool; /* the epilogue runs on the caller's thread */
  const kiln_gemm_kernels_t* k = kiln_gemm_kernels_for(kiln_cpu_isa());
  /* The neon level runs the generic epilogue too. */
  epi_accuracy(k, where, k->epilogue == kiln_gemm_kernels_for(KILN_ISA_GENERIC)->epilogue);
  epi_pieces(k, where);
}

void kiln_test_suite_gemm_epilogue(void) { kiln_test_each_isa_and_pool(epi_level); }
