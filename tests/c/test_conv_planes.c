/* The per-ISA plane kernels (kernels/conv/kiln_conv_planes.c) against their
 * scalar references at every ISA level, 1 and 2 threads: average pooling
 * (rows summed first, then columns) against the direct window loop, and
 * depthwise convolution against kiln_conv2d_f32_reference, on rows wide
 * enough for the vector bodies and their tails, strides 1 and 2, padding,
 * ceil-mode windows, both divisors, a plane wider than the separable
 * path takes, and NaN / Inf in the input. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_planes.h"
#include "kiln_test.h"

#define PLANES_GUARD 29

static int64_t planes_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil) {
  int64_t e = in + 2 * p - d * (k - 1) - 1;
  return (ceil ? (e + s - 1) / s : e / s) + 1;
}

static void planes_avg_level(kiln_pool_t* pool, const char* where) {
  /* c, h, w, kh, kw, sh, sw, ph, pw, ceil */
  static const int64_t cases[][10] = {
      {3, 9, 70, 3, 3, 1, 1, 1, 1, 0},  /* stride 1, padded, wide rows */
      {2, 12, 67, 3, 3, 2, 2, 1, 1, 0}, /* ResNet-like 3x3/2 */
      {2, 9, 33, 2, 2, 2, 2, 0, 0, 1},  /* 2x2/2, ceil mode past the input */
      {1, 7, 41, 3, 5, 2, 3, 1, 2, 1},  /* mixed, ceil mode */
      {2, 5, 5, 5, 5, 1, 1, 2, 2, 0},   /* window = input */
      {3, 1, 19, 1, 3, 1, 1, 0, 1, 0},  /* one row */
      {2, 8, 1, 3, 1, 3, 1, 1, 0, 1},   /* one column */
      {1, 3, 16, 3, 7, 1, 1, 1, 3, 0},  /* window as wide as the interior allows */
      {1, 2, KILN_CONV_PLANES_ROW_MAX + 3, 2, 3, 1, 2, 0, 1, 0}, /* direct-loop path */
      {5, 7, 7, 7, 7, 1, 1, 0, 0, 0},     /* global: row means */
      {700, 7, 7, 7, 7, 7, 7, 0, 0, 0},   /* global, over the parallel threshold */
      {3, 6, 45, 6, 45, 1, 1, 0, 0, 0},   /* global, rows of 270 */
      {4, 1, 1, 1, 1, 1, 1, 0, 0, 0},     /* global over one element */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    for (int incl = 0; incl < 2; ++incl) {
      const int64_t* p = cases[i];
      kiln_pool2d_f32_args_t a;
      memset(&a, 0, sizeof(a));
      a.n = 2, a.c = p[0], a.h = p[1], a.w = p[2], a.kh = p[3], a.kw = p[4], a.sh = p[5];
      a.sw = p[6], a.ph = p[7], a.pw = p[8], a.dh = 1, a.dw = 1, a.count_include_pad = incl;
      a.ho = planes_out(a.h, a.kh, a.sh, a.ph, 1, (int)p[9]);
      a.wo = planes_out(a.w, a.kw, a.sw, a.pw, 1, (int)p[9]);
      size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
      float* x = malloc(nx * sizeof(float));
      float* got = malloc((ny + PLANES_GUARD) * sizeof(float));
      float* want = malloc((ny + PLANES_GUARD) * sizeof(float));
      if (!x || !got || !want) {
        KILN_EXPECT(0, "out of memory");
        free(x), free(got), free(want);
        return;
      }
      kiln_test_fill_f32(x, nx, (unsigned)(i * 2 + (size_t)incl + 7), -1, 1);
      x[nx / 3] = NAN;
      x[nx / 2] = INFINITY;
      x[nx - 1] = -INFINITY;
      for (size_t j = 0; j < ny + PLANES_GUARD; ++j) got[j] = want[j] = (float)j;
      a.x = x, a.y = want;
      kiln_avg_pool2d_f32_reference(&a);
      a.y = got;
      kiln_avg_pool2d_f32(&a, pool);
      char what[160];
      snprintf(what, sizeof what, "%s avg pool case %zu count_include_pad %d", where, i, incl);
      /* The sums run in another order (rows first): a few float roundings
       * of values below kh * kw in magnitude. */
      kiln_test_compare_f32(what, got, want, ny + PLANES_GUARD, 2e-6f, 2e-6f);
      free(x), free(got), free(want);
    }
}

static void planes_dw_level(kiln_pool_t* pool, const char* where) {
  /* c, h, w, k, s, p, d, act, residual (0 none, 1 after act, 2 before) */
  static const int64_t cases[][9] = {
      {3, 9, 67, 3, 1, 1, 1, KILN_ACT_RELU, 0}, {2, 11, 70, 3, 2, 1, 1, KILN_ACT_NONE, 1},
      {2, 8, 37, 5, 1, 2, 1, KILN_ACT_SILU, 2}, {2, 9, 41, 5, 2, 2, 1, KILN_ACT_RELU, 1},
      {1, 7, 29, 3, 1, 2, 2, KILN_ACT_NONE, 0}, {2, 1, 17, 1, 1, 0, 1, KILN_ACT_RELU, 2},
      {2, 4, 3, 3, 1, 1, 1, KILN_ACT_NONE, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    const int64_t* p = cases[i];
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 2, a.c = a.o = a.groups = p[0], a.h = p[1], a.w = p[2], a.kh = a.kw = p[3];
    a.sh = a.sw = p[4], a.ph = a.pw = p[5], a.dh = a.dw = p[6];
    a.act = (kiln_activation_t)p[7], a.residual_before_act = p[8] == 2;
    a.ho = planes_out(a.h, a.kh, a.sh, a.ph, a.dh, 0);
    a.wo = planes_out(a.w, a.kw, a.sw, a.pw, a.dw, 0);
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), nw = (size_t)(a.o * a.kh * a.kw);
    size_t ny = (size_t)(a.n * a.o * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* w = malloc(nw * sizeof(float));
    float* bias = malloc((size_t)a.o * sizeof(float));
    float* res = malloc((ny + PLANES_GUARD) * sizeof(float));
    float* got = malloc((ny + PLANES_GUARD) * sizeof(float));
    float* want = malloc((ny + PLANES_GUARD) * sizeof(float));
    if (!x || !w || !bias || !res || !got || !want) {
      KILN_EXPECT(0, "out of memory");
      free(x), free(w), free(bias), free(res), free(got), free(want);
      return;
    }
    unsigned seed = (unsigned)(i * 5 + 3);
    kiln_test_fill_f32(x, nx, seed, -1, 1);
    kiln_test_fill_f32(w, nw, seed + 1, -1, 1);
    kiln_test_fill_f32(bias, (size_t)a.o, seed + 2, -1, 1);
    kiln_test_fill_f32(res, ny + PLANES_GUARD, seed + 3, -1, 1);
    x[nx / 3] = NAN;
    x[nx / 2] = INFINITY;
    memcpy(got, res, (ny + PLANES_GUARD) * sizeof(float));
    memcpy(want, res, (ny + PLANES_GUARD) * sizeof(float));
    a.x = x, a.weight = w, a.bias = bias;
    a.residual = p[8] ? res : NULL;
    a.y = want;
    kiln_conv2d_f32_reference(&a);
    a.y = got;
    kiln_conv2d_f32(&a, pool);
    char what[160];
    snprintf(what, sizeof what, "%s depthwise case %zu", where, i);
    /* The reference accumulates in double; k = kh * kw float FMAs here. */
    kiln_test_compare_f32(what, got, want, ny + PLANES_GUARD,
                          1e-5f * sqrtf((float)(a.kh * a.kw)) + 1e-6f, 1e-5f);
    free(x), free(w), free(bias), free(res), free(got), free(want);
  }
}

void kiln_test_suite_conv_planes(void) {
  kiln_test_each_isa_and_pool(planes_avg_level);
  kiln_test_each_isa_and_pool(planes_dw_level);
}
