/* Tests of the convolution and pooling gradient kernels.
 *
 * Convolution: kiln_conv2d_grad_{input,weight}_f32 against their scalar
 * references at every ISA level and on 1- and 2-thread pools, over stride,
 * padding, dilation, groups (and depthwise), 1x1, N = 2 and odd sizes, with
 * a guard region past each output. The references themselves are held
 * against the forward reference by the adjoint identity
 *     <conv(x, w), dy> = <x, grad_input(dy, w)> = <w, grad_weight(dy, x)>,
 * which any wrong tap or index breaks.
 *
 * Tolerances: inputs uniform in [-1, 1]; a K-term fp32 sum drifts from the
 * double reference by ~eps K / sqrt(3) (see test_conv.c), so atol =
 * 1e-5 sqrt(K) + 1e-6, rtol 1e-5, with K the number of terms summed per
 * output (Og kh kw for grad input, N Ho Wo for grad weight). The adjoint
 * sums are taken in double from float outputs: relative 1e-5 of the sum of
 * absolute products.
 *
 * Pooling: max indices against a brute-force scan (ties, NaN, all -inf);
 * max grad against a direct scatter, and an out-of-range index counted and
 * not written; avg grad by the adjoint identity with kiln_avg_pool2d_f32. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_graph.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_backward.h"
#include "kiln_test.h"

#define GRAD_GUARD 29

static int64_t grad_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

static double grad_dot(const float* a, const float* b, size_t n, double* abs_sum) {
  double s = 0.0, t = 0.0;
  for (size_t i = 0; i < n; ++i) {
    s += (double)a[i] * b[i];
    t += fabs((double)a[i] * b[i]);
  }
  *abs_sum = t;
  return s;
}

/* n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups */
static const int64_t grad_shapes[][14] = {
    {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* 3x3 same */
    {2, 5, 11, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},  /* stride 2, odd sizes, N = 2 */
    {1, 4, 10, 13, 5, 3, 2, 1, 2, 2, 0, 2, 1, 1}, /* dilation, mixed */
    {2, 16, 7, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1}, /* 1x1 */
    {1, 16, 8, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1},  /* 1x1 stride 2: skipped pixels */
    {1, 8, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4},  /* groups */
    {2, 7, 12, 10, 7, 3, 3, 1, 1, 1, 1, 1, 1, 7}, /* depthwise */
    {1, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1}, /* 7x7 stem */
    {1, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1},   /* window = input, 1x1 out */
    {1, 2, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1},   /* stride > kernel reach */
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1},   /* size 1 */
};

typedef struct {
  kiln_conv2d_grad_f32_args_t a;
  float *x, *w, *dy, *dx, *dw;
  size_t nx, nw, ny;
} grad_case_t;

static void grad_case_make(const int64_t* p, grad_case_t* t) {
  memset(t, 0, sizeof(*t));
  kiln_conv2d_grad_f32_args_t* a = &t->a;
  a->n = p[0], a->c = p[1], a->h = p[2], a->w = p[3], a->o = p[4], a->kh = p[5], a->kw = p[6];
  a->sh = p[7], a->sw = p[8], a->ph = p[9], a->pw = p[10], a->dh = p[11], a->dw = p[12];
  a->groups = p[13];
  a->ho = grad_out(a->h, a->kh, a->sh, a->ph, a->dh);
  a->wo = grad_out(a->w, a->kw, a->sw, a->pw, a->dw);
  t->nx = (size_t)(a->n * a->c * a->h * a->w);
  t->nw = (size_t)(a->o * (a->c / a->groups) * a->kh * a->kw);
  t->ny = (size_t)(a->n * a->o * a->ho * a->wo);
  t->x = malloc((t->nx + GRAD_GUARD) * sizeof(float));
  t->w = malloc((t->nw + GRAD_GUARD) * sizeof(float));
  t->dy = malloc((t->ny + GRAD_GUARD) * sizeof(float));
  t->dx = malloc((t->nx + GRAD_GUARD) * sizeof(float));
  t->dw = malloc((t->nw + GRAD_GUARD) * sizeof(float));
  unsigned seed = (unsigned)(a->c * 131 + a->h * 17 + a->o * 7 + a->kh + a->groups * 1009);
  kiln_test_fill_f32(t->x, t->nx, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(t->w, t->nw, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(t->dy, t->ny, seed + 2, -1.0f, 1.0f);
  a->x = t->x, a->weight = t->w, a->dy = t->dy, a->dx = t->dx, a->dweight = t->dw;
}

static void grad_case_free(grad_case_t* t) {
  free(t->x);
  free(t->w);
  free(t->dy);
  free(t->dx);
  free(t->dw);
}

static void grad_describe(const kiln_conv2d_grad_f32_args_t* a, const char* where, const char* what,
                          char* buf, size_t size) {
  snprintf(buf, size,
           "%s %s n%lld c%lld %lldx%lld o%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld",
           where, what, (long long)a->n, (long long)a->c, (long long)a->h, (long long)a->w,
           (long long)a->o, (long long)a->kh, (long long)a->kw, (long long)a->sh, (long long)a->sw,
           (long long)a->ph, (long long)a->pw, (long long)a->dh, (long long)a->dw,
           (long long)a->groups);
}

static void grad_test_level(kiln_pool_t* pool, const char* where) {
  for (size_t s = 0; s < sizeof(grad_shapes) / sizeof(grad_shapes[0]); ++s) {
    grad_case_t t;
    grad_case_make(grad_shapes[s], &t);
    kiln_conv2d_grad_f32_args_t* a = &t.a;
    float* want_dx = malloc((t.nx + GRAD_GUARD) * sizeof(float));
    float* want_dw = malloc((t.nw + GRAD_GUARD) * sizeof(float));
    /* Guards: both sides start with the same junk past the end. */
    kiln_test_fill_f32(want_dx, t.nx + GRAD_GUARD, 7, -9.0f, 9.0f);
    kiln_test_fill_f32(want_dw, t.nw + GRAD_GUARD, 8, -9.0f, 9.0f);
    memcpy(t.dx, want_dx, (t.nx + GRAD_GUARD) * sizeof(float));
    memcpy(t.dw, want_dw, (t.nw + GRAD_GUARD) * sizeof(float));
    kiln_conv2d_grad_input_f32(a, pool);
    kiln_conv2d_grad_weight_f32(a, pool);
    a->dx = want_dx, a->dweight = want_dw;
    kiln_conv2d_grad_input_f32_reference(a);
    kiln_conv2d_grad_weight_f32_reference(a);
    char what[256];
    int64_t k_in = (a->o / a->groups) * a->kh * a->kw, k_w = a->n * a->ho * a->wo;
    grad_describe(a, where, "grad_input", what, sizeof what);
    kiln_test_compare_f32(what, t.dx, want_dx, t.nx + GRAD_GUARD,
                          1e-5f * sqrtf((float)k_in) + 1e-6f, 1e-5f);
    grad_describe(a, where, "grad_weight", what, sizeof what);
    kiln_test_compare_f32(what, t.dw, want_dw, t.nw + GRAD_GUARD,
                          1e-5f * sqrtf((float)k_w) + 1e-6f, 1e-5f);
    free(want_dx);
    free(want_dw);
    grad_case_free(&t);
  }
}

/* The references against the forward: the adjoint identity. */
static void grad_test_adjoint(void) {
  for (size_t s = 0; s < sizeof(grad_shapes) / sizeof(grad_shapes[0]); ++s) {
    grad_case_t t;
    grad_case_make(grad_shapes[s], &t);
    kiln_conv2d_grad_f32_args_t* a = &t.a;
    float* y = malloc(t.ny * sizeof(float));
    kiln_conv2d_f32_args_t f;
    memset(&f, 0, sizeof(f));
    f.n = a->n, f.c = a->c, f.h = a->h, f.w = a->w, f.o = a->o, f.kh = a->kh, f.kw = a->kw;
    f.ho = a->ho, f.wo = a->wo, f.sh = a->sh, f.sw = a->sw, f.ph = a->ph, f.pw = a->pw;
    f.dh = a->dh, f.dw = a->dw, f.groups = a->groups, f.act = KILN_ACT_NONE;
    f.x = t.x, f.weight = t.w, f.y = y;
    kiln_conv2d_f32_reference(&f);
    kiln_conv2d_grad_input_f32_reference(a);
    kiln_conv2d_grad_weight_f32_reference(a);
    double m0, m1, m2;
    double lhs = grad_dot(y, t.dy, t.ny, &m0);
    double in = grad_dot(t.x, t.dx, t.nx, &m1);
    double wt = grad_dot(t.w, t.dw, t.nw, &m2);
    char what[256];
    grad_describe(a, "[reference]", "adjoint", what, sizeof what);
    KILN_EXPECT(fabs(lhs - in) <= 1e-5 * (m0 + m1) + 1e-9, "%s: <y,dy> %.9g vs <x,dx> %.9g", what,
                lhs, in);
    KILN_EXPECT(fabs(lhs - wt) <= 1e-5 * (m0 + m2) + 1e-9, "%s: <y,dy> %.9g vs <w,dw> %.9g", what,
                lhs, wt);
    free(y);
    grad_case_free(&t);
  }
}

/* ---- pooling --------------------------------------------------------------- */

/* kernel h, w, stride h, w, pad h, w, dilation h, w, count_include_pad, H, W */
static const int64_t pool_shapes[][11] = {
    {2, 2, 2, 2, 0, 0, 1, 1, 1, 8, 8},   /* the usual 2x2 */
    {3, 3, 2, 2, 1, 1, 1, 1, 1, 9, 7},   /* overlapping, padded */
    {3, 3, 2, 2, 1, 1, 1, 1, 0, 9, 7},   /* without the padding count */
    {3, 2, 1, 2, 1, 1, 2, 1, 1, 10, 9},  /* dilated (max only) */
    {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1},   /* size 1 */
    {4, 4, 4, 4, 0, 0, 1, 1, 1, 8, 12},  /* adaptive-style even blocks */
};

static void pool_make(const int64_t* p, int avg, kiln_pool2d_grad_f32_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->n = 2, a->c = 3, a->h = p[9], a->w = p[10];
  a->kh = p[0], a->kw = p[1], a->sh = p[2], a->sw = p[3], a->ph = p[4], a->pw = p[5];
  a->dh = avg ? 1 : p[6], a->dw = avg ? 1 : p[7];
  a->count_include_pad = (int)p[8];
  a->ho = grad_out(a->h, a->kh, a->sh, a->ph, a->dh);
  a->wo = grad_out(a->w, a->kw, a->sw, a->pw, a->dw);
}

static void pool_test_level(kiln_pool_t* pool, const char* where) {
  for (size_t s = 0; s < sizeof(pool_shapes) / sizeof(pool_shapes[0]); ++s) {
    kiln_pool2d_grad_f32_args_t a;
    pool_make(pool_shapes[s], 0, &a);
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* dy = malloc(ny * sizeof(float));
    float* dx = malloc((nx + GRAD_GUARD) * sizeof(float));
    float* want = malloc((nx + GRAD_GUARD) * sizeof(float));
    int64_t* idx = malloc((ny + GRAD_GUARD) * sizeof(int64_t));
    kiln_test_fill_f32(x, nx, (unsigned)s, -1.0f, 1.0f);
    kiln_test_fill_f32(dy, ny, (unsigned)s + 5, -1.0f, 1.0f);
    /* Ties (a repeated value), a NaN pair and an all -inf plane. */
    if (nx > 4) x[1] = x[0], x[3] = NAN, x[4] = NAN;
    int64_t hw = a.h * a.w;
    if (a.n * a.c > 1)
      for (int64_t i = 0; i < hw; ++i) x[hw + i] = -INFINITY;
    for (size_t i = 0; i < GRAD_GUARD; ++i) idx[ny + i] = -7;
    a.x = x, a.out_indices = idx;
    kiln_max_pool2d_indices_f32(&a, pool);
    int bad = 0;
    for (int64_t pl = 0; pl < a.n * a.c; ++pl)
      for (int64_t i = 0; i < a.ho; ++i)
        for (int64_t j = 0; j < a.wo; ++j) {
          /* Brute force over the window in row-major order. */
          int64_t best = -1;
          float m = -INFINITY;
          for (int64_t u = 0; u < a.kh; ++u)
            for (int64_t v = 0; v < a.kw; ++v) {
              int64_t iy = i * a.sh - a.ph + u * a.dh, ix = j * a.sw - a.pw + v * a.dw;
              if (iy < 0 || iy >= a.h || ix < 0 || ix >= a.w) continue;
              float t = x[pl * hw + iy * a.w + ix];
              /* The first in-bounds tap starts as the best; from then on
               * strictly greater or NaN replaces it (torch's CPU rule). */
              if (best < 0 || t > m || isnan(t)) {
                best = iy * a.w + ix;
                m = t;
              }
            }
          bad += idx[(pl * a.ho + i) * a.wo + j] != best;
        }
    for (size_t i = 0; i < GRAD_GUARD; ++i) bad += idx[ny + i] != -7;
    KILN_EXPECT(bad == 0, "%s max_pool2d indices case %zu: %d wrong", where, s, bad);
    /* Max grad: a direct scatter of dy through the indices. */
    kiln_test_fill_f32(want, nx + GRAD_GUARD, 3, -9.0f, 9.0f);
    memcpy(dx, want, (nx + GRAD_GUARD) * sizeof(float));
    memset(want, 0, nx * sizeof(float));
    for (int64_t pl = 0; pl < a.n * a.c; ++pl)
      for (int64_t k = 0; k < a.ho * a.wo; ++k)
        want[pl * hw + idx[pl * a.ho * a.wo + k]] += dy[pl * a.ho * a.wo + k];
    a.dy = dy, a.indices = idx, a.dx = dx;
    int64_t nbad = kiln_max_pool2d_grad_f32(&a, pool);
    KILN_EXPECT(nbad == 0, "%s max_pool2d grad: %lld bad indices", where, (long long)nbad);
    char what[128];
    snprintf(what, sizeof what, "%s max_pool2d grad case %zu", where, s);
    kiln_test_compare_f32(what, dx, want, nx + GRAD_GUARD, 1e-6f, 1e-6f);
    /* An index outside the plane is counted, never written. */
    memcpy(dx + nx, want + nx, GRAD_GUARD * sizeof(float));
    idx[ny - 1] = hw;
    idx[0] = -1;
    nbad = kiln_max_pool2d_grad_f32(&a, pool);
    KILN_EXPECT(nbad == (ny > 1 ? 2 : 1), "%s max_pool2d grad: %lld bad indices, expected 2", where,
                (long long)nbad);
    kiln_test_compare_f32(what, dx + nx, want + nx, GRAD_GUARD, 0.0f, 0.0f);
    free(x);
    free(dy);
    free(dx);
    free(want);
    free(idx);
  }
  /* Average: the adjoint identity against the forward kernel. */
  for (size_t s = 0; s < sizeof(pool_shapes) / sizeof(pool_shapes[0]); ++s) {
    kiln_pool2d_grad_f32_args_t a;
    pool_make(pool_shapes[s], 1, &a);
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* y = malloc(ny * sizeof(float));
    float* dy = malloc(ny * sizeof(float));
    float* dx = malloc((nx + GRAD_GUARD) * sizeof(float));
    kiln_test_fill_f32(x, nx, (unsigned)s + 11, -1.0f, 1.0f);
    kiln_test_fill_f32(dy, ny, (unsigned)s + 12, -1.0f, 1.0f);
    for (size_t i = 0; i < GRAD_GUARD; ++i) dx[nx + i] = 42.0f;
    kiln_pool2d_f32_args_t f;
    memset(&f, 0, sizeof(f));
    f.n = a.n, f.c = a.c, f.h = a.h, f.w = a.w, f.ho = a.ho, f.wo = a.wo, f.kh = a.kh, f.kw = a.kw;
    f.sh = a.sh, f.sw = a.sw, f.ph = a.ph, f.pw = a.pw, f.dh = 1, f.dw = 1;
    f.count_include_pad = a.count_include_pad;
    f.x = x, f.y = y;
    kiln_avg_pool2d_f32(&f, pool);
    a.dy = dy, a.dx = dx;
    kiln_avg_pool2d_grad_f32(&a, pool);
    double m0, m1;
    double lhs = grad_dot(y, dy, ny, &m0), rhs = grad_dot(x, dx, nx, &m1);
    KILN_EXPECT(fabs(lhs - rhs) <= 1e-5 * (m0 + m1) + 1e-9,
                "%s avg_pool2d grad case %zu: <y,dy> %.9g vs <x,dx> %.9g", where, s, lhs, rhs);
    int guard_ok = 1;
    for (size_t i = 0; i < GRAD_GUARD; ++i) guard_ok &= dx[nx + i] == 42.0f;
    KILN_EXPECT(guard_ok, "%s avg_pool2d grad case %zu wrote past dx", where, s);
    free(x);
    free(y);
    free(dy);
    free(dx);
  }
}

/* Adaptive average pooling: against a double-precision brute force with
 * torch's window rule written independently (floor / ceil in floating
 * point), and the gradient by the adjoint identity with the forward. */
static void adaptive_test_level(kiln_pool_t* pool, const char* where) {
  /* h, w, ho, wo: shrinking unevenly, even, growing (overlapping windows), size 1 */
  static const int64_t cases[][4] = {{7, 5, 3, 2}, {8, 6, 4, 3}, {3, 4, 5, 7}, {1, 1, 1, 1},
                                     {10, 9, 1, 1}, {6, 11, 4, 5}};
  for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); ++s) {
    kiln_pool2d_grad_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 2, a.c = 3, a.h = cases[s][0], a.w = cases[s][1], a.ho = cases[s][2], a.wo = cases[s][3];
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* y = malloc((ny + GRAD_GUARD) * sizeof(float));
    float* want = malloc((ny + GRAD_GUARD) * sizeof(float));
    float* dy = malloc(ny * sizeof(float));
    float* dx = malloc((nx + GRAD_GUARD) * sizeof(float));
    kiln_test_fill_f32(x, nx, (unsigned)s + 21, -1.0f, 1.0f);
    kiln_test_fill_f32(dy, ny, (unsigned)s + 22, -1.0f, 1.0f);
    kiln_test_fill_f32(y, ny + GRAD_GUARD, 5, -9.0f, 9.0f);
    memcpy(want, y, (ny + GRAD_GUARD) * sizeof(float));
    for (int64_t pl = 0; pl < a.n * a.c; ++pl)
      for (int64_t i = 0; i < a.ho; ++i)
        for (int64_t j = 0; j < a.wo; ++j) {
          int64_t h0 = (int64_t)floor((double)i * a.h / a.ho);
          int64_t h1 = (int64_t)ceil((double)(i + 1) * a.h / a.ho);
          int64_t w0 = (int64_t)floor((double)j * a.w / a.wo);
          int64_t w1 = (int64_t)ceil((double)(j + 1) * a.w / a.wo);
          double acc = 0.0;
          for (int64_t u = h0; u < h1; ++u)
            for (int64_t v = w0; v < w1; ++v) acc += x[(pl * a.h + u) * a.w + v];
          want[(pl * a.ho + i) * a.wo + j] = (float)(acc / (double)((h1 - h0) * (w1 - w0)));
        }
    a.x = x, a.y = y;
    kiln_adaptive_avg_pool2d_f32(&a, pool);
    char what[128];
    snprintf(what, sizeof what, "%s adaptive_avg_pool2d %lldx%lld -> %lldx%lld", where,
             (long long)a.h, (long long)a.w, (long long)a.ho, (long long)a.wo);
    /* Windows of at most 10x9 O(1) terms: fp32 sums within ~1e-6. */
    kiln_test_compare_f32(what, y, want, ny + GRAD_GUARD, 1e-6f, 1e-5f);
    for (size_t i = 0; i < GRAD_GUARD; ++i) dx[nx + i] = 42.0f;
    a.dy = dy, a.dx = dx;
    kiln_adaptive_avg_pool2d_grad_f32(&a, pool);
    double m0, m1;
    double lhs = grad_dot(y, dy, ny, &m0), rhs = grad_dot(x, dx, nx, &m1);
    KILN_EXPECT(fabs(lhs - rhs) <= 1e-5 * (m0 + m1) + 1e-9, "%s grad: <y,dy> %.9g vs <x,dx> %.9g",
                what, lhs, rhs);
    int guard_ok = 1;
    for (size_t i = 0; i < GRAD_GUARD; ++i) guard_ok &= dx[nx + i] == 42.0f;
    KILN_EXPECT(guard_ok, "%s grad wrote past dx", what);
    free(x);
    free(y);
    free(want);
    free(dy);
    free(dx);
  }
}

/* Bilinear upsampling: the table-driven kernel against the per-element
 * reference (same rule, double blend: within a few fp32 ulp of O(1)
 * values), both ways of align_corners, shrinking and growing, a scale
 * factor, size 1, and a NaN that must reach exactly the outputs reading it. */
static void upsample_test_level(kiln_pool_t* pool, const char* where) {
  /* h, w, ho, wo, align_corners, scale_h x 100, scale_w x 100 */
  static const int64_t cases[][7] = {{6, 4, 7, 5, 0, 0, 0}, {6, 4, 7, 5, 1, 0, 0}, {6, 4, 3, 2, 0, 0, 0},
                                     {6, 4, 12, 3, 0, 200, 75}, {1, 1, 3, 4, 0, 0, 0},
                                     {5, 5, 1, 1, 1, 0, 0}, {4, 7, 9, 9, 1, 0, 0}};
  for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); ++s) {
    kiln_upsample_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 2, a.c = 2, a.h = cases[s][0], a.w = cases[s][1], a.ho = cases[s][2], a.wo = cases[s][3];
    a.align_corners = (int)cases[s][4];
    a.scale_h = (float)cases[s][5] / 100.0f, a.scale_w = (float)cases[s][6] / 100.0f;
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* got = malloc((ny + GRAD_GUARD) * sizeof(float));
    float* want = malloc((ny + GRAD_GUARD) * sizeof(float));
    kiln_test_fill_f32(x, nx, (unsigned)s + 31, -1.0f, 1.0f);
    if (s == 0) x[a.h * a.w - 1] = NAN; /* the first plane's last pixel */
    kiln_test_fill_f32(got, ny + GRAD_GUARD, 6, -9.0f, 9.0f);
    memcpy(want, got, (ny + GRAD_GUARD) * sizeof(float));
    a.x = x, a.y = want;
    kiln_upsample_bilinear2d_f32_reference(&a);
    a.y = got;
    kiln_upsample_bilinear2d_f32(&a, pool);
    char what[128];
    snprintf(what, sizeof what, "%s upsample_bilinear2d case %zu", where, s);
    kiln_test_compare_f32(what, got, want, ny + GRAD_GUARD, 1e-6f, 1e-5f);
    if (s == 0) {
      KILN_EXPECT(isnan(got[a.ho * a.wo - 1]), "%s: the NaN corner reaches its output", what);
      KILN_EXPECT(!isnan(got[0]), "%s: the NaN stays local", what);
    }
    free(x);
    free(got);
    free(want);
  }
}

/* The shape rules reject bad parameters with a status, never a crash. */
static void grad_test_shape_rules(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[4] = {2, 4, 8, 8}, ws[4] = {6, 2, 3, 3}, dys[4] = {2, 6, 4, 4};
  int64_t is[4] = {2, 4, 4, 4};
  int32_t x, w, dy, di, ii, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "w", KILN_F32, 4, ws, &w));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "dy", KILN_F32, 4, dys, &dy));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "dp", KILN_F32, 4, is, &di));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "i", KILN_I64, 4, is, &ii));
  /* stride 2, pad 1, groups 2: 8x8 -> 4x4 */
  int32_t gin[2] = {dy, w}, gw[2] = {dy, x};
  int64_t ok_in[9] = {2, 2, 1, 1, 1, 1, 2, 8, 8}, ok_w[9] = {2, 2, 1, 1, 1, 1, 2, 3, 3};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_INPUT, gin, 2, ok_in, 9, NULL, 0, "", &y));
  KILN_EXPECT(g->values[y].shape[1] == 4 && g->values[y].shape[3] == 8, "grad input shape");
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_WEIGHT, gw, 2, ok_w, 9, NULL, 0, "", &y));
  KILN_EXPECT(g->values[y].shape[0] == 6 && g->values[y].shape[1] == 2, "grad weight shape");
  /* 7x7 also gives 4x4 at stride 2: legal, the reason H, W are params. */
  int64_t ok_in7[9] = {2, 2, 1, 1, 1, 1, 2, 7, 7};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_INPUT, gin, 2, ok_in7, 9, NULL, 0, "", &y));
  int64_t bad_in[][9] = {
      {2, 2, 1, 1, 1, 1, 2, 12, 8}, /* H inconsistent with dy */
      {2, 2, 1, 1, 1, 1, 0, 8, 8},  /* zero groups */
      {2, 2, 1, 1, 1, 1, 4, 8, 8},  /* O = 6 does not split into 4 */
      {0, 2, 1, 1, 1, 1, 2, 8, 8},  /* zero stride */
      {2, 2, 1, 1, 1, 1, 2, 0, 8},  /* zero height */
      {2, 2, 1, 1, 1, 1, 2, (int64_t)1 << 50, 8}, /* huge height */
      {2, 2, -1, 1, 1, 1, 2, 8, 8}, /* negative padding */
  };
  for (size_t i = 0; i < sizeof(bad_in) / sizeof(bad_in[0]); ++i)
    KILN_EXPECT_ERROR(
        kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_INPUT, gin, 2, bad_in[i], 9, NULL, 0, "", &y),
        KILN_INVALID_ARGUMENT);
  int64_t bad_w[][9] = {
      {2, 2, 1, 1, 1, 1, 2, 5, 3},  /* kh inconsistent with dy */
      {2, 2, 1, 1, 1, 1, 3, 3, 3},  /* groups do not divide C */
      {2, 2, 1, 1, 1, 1, 2, 0, 3},  /* zero kernel */
  };
  for (size_t i = 0; i < sizeof(bad_w) / sizeof(bad_w[0]); ++i)
    KILN_EXPECT_ERROR(
        kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_WEIGHT, gw, 2, bad_w[i], 9, NULL, 0, "", &y),
        KILN_INVALID_ARGUMENT);
  /* dy and x swapped: dtype and batch checks. */
  int32_t gin_bad[2] = {dy, ii};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_CONV2D_GRAD_INPUT, gin_bad, 2, ok_in, 9, NULL, 0,
                                        "", &y), KILN_INVALID_ARGUMENT);
  int64_t mp[10] = {2, 2, 2, 2, 0, 0, 1, 1, 0, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_INDICES, &x, 1, mp, 10, NULL, 0, "", &y));
  KILN_EXPECT(g->values[y].dtype == KILN_I64 && g->values[y].shape[2] == 4, "indices shape");
  int64_t mp_bad[10] = {2, 2, 2, 2, 2, 0, 1, 1, 0, 0};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_INDICES, &x, 1, mp_bad, 10, NULL, 0,
                                        "", &y), KILN_INVALID_ARGUMENT);
  int32_t mg[2] = {di, ii};
  int64_t hw[2] = {8, 8}, hw_bad[2] = {0, 8};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_GRAD, mg, 2, hw, 2, NULL, 0, "", &y));
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_GRAD, mg, 2, hw_bad, 2, NULL, 0, "", &y),
                    KILN_INVALID_ARGUMENT);
  int32_t mg_bad[2] = {di, di}; /* float indices */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_GRAD, mg_bad, 2, hw, 2, NULL, 0, "", &y),
                    KILN_INVALID_ARGUMENT);
  int64_t ap[12] = {2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 8, 8};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D_GRAD, &di, 1, ap, 12, NULL, 0, "", &y));
  int64_t ap_bad[][12] = {
      {2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 12, 8}, /* H inconsistent with dy */
      {2, 2, 2, 2, 0, 0, 2, 1, 0, 1, 8, 8},  /* dilation */
      {2, 2, 2, 2, 0, 0, 1, 1, 0, 2, 8, 8},  /* count_include_pad not 0/1 */
  };
  for (size_t i = 0; i < sizeof(ap_bad) / sizeof(ap_bad[0]); ++i)
    KILN_EXPECT_ERROR(
        kiln_graph_add_node(g, KILN_OP_AVG_POOL2D_GRAD, &di, 1, ap_bad[i], 12, NULL, 0, "", &y),
        KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_conv_grad(void) {
  grad_test_adjoint();
  kiln_test_each_isa_and_pool(grad_test_level);
  kiln_test_each_isa_and_pool(pool_test_level);
  kiln_test_each_isa_and_pool(adaptive_test_level);
  kiln_test_each_isa_and_pool(upsample_test_level);
  grad_test_shape_rules();
}
