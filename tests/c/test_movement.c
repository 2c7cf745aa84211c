/* Tests of the PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT kernels
 * against scalar references, at every ISA level and on 1- and 2-thread
 * pools (kiln_test_each_isa_and_pool): kiln_pad against kiln_pad_reference
 * (every mode, ranks 1..4, size-1 and zero-size dims, negative pads, 1-, 4-
 * and 8-byte elements, big enough to split over threads), the others
 * against straightforward loops written here. Outputs carry a guard region
 * past their end, so an out-of-bounds write shows. The shape rules are
 * checked to refuse bad params with a status.
 *
 * Exactness: pad, scatter-assign, argsort and integer scans move or count
 * values, so they must match bit for bit; float scans and scatter sums are
 * compared to double references with rtol 1e-6 (a few float32 roundings of
 * values in [-1, 1]). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_movement_ops.h"
#include "kiln_test.h"

#define MV_GUARD 16
#define MV_GUARD_BYTE 0xA5

static int mv_guard_ok(const unsigned char* end) {
  for (int i = 0; i < MV_GUARD; ++i)
    if (end[i] != MV_GUARD_BYTE) return 0;
  return 1;
}

/* ---- PAD ---------------------------------------------------------------------- */

typedef struct {
  int mode;
  int32_t rank;
  int64_t shape[4], before[4], after[4];
} pad_case_t;

static void pad_test_run(const pad_case_t* tc, size_t elem, kiln_pool_t* pool, const char* where) {
  int64_t y_shape[4], xn = 1, yn = 1;
  for (int32_t d = 0; d < tc->rank; ++d) {
    y_shape[d] = tc->shape[d] + tc->before[d] + tc->after[d];
    xn *= tc->shape[d];
    yn *= y_shape[d];
  }
  unsigned char* x = malloc((size_t)xn * elem + 1);
  unsigned char* got = malloc((size_t)yn * elem + MV_GUARD);
  unsigned char* want = malloc((size_t)yn * elem + 1);
  if (!x || !got || !want) {
    KILN_EXPECT(0, "out of memory");
    free(x), free(got), free(want);
    return;
  }
  for (size_t i = 0; i < (size_t)xn * elem; ++i) x[i] = (unsigned char)(i * 7 + 3);
  unsigned char fill[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  memset(got, MV_GUARD_BYTE, (size_t)yn * elem + MV_GUARD);
  kiln_pad((kiln_pad_mode_t)tc->mode, elem, tc->rank, tc->shape, y_shape, tc->before, fill, x, got,
           pool);
  kiln_pad_reference((kiln_pad_mode_t)tc->mode, elem, tc->rank, tc->shape, y_shape, tc->before,
                     fill, x, want);
  KILN_EXPECT(memcmp(got, want, (size_t)yn * elem) == 0,
              "pad mode %d rank %d elem %zu %s: differs from the reference", tc->mode, tc->rank,
              elem, where);
  KILN_EXPECT(mv_guard_ok(got + (size_t)yn * elem), "pad wrote past y %s", where);
  free(x), free(got), free(want);
}

/* Spot checks of the reference itself against torch's documented results:
 * reflect of [0 1 2 3] by (2, 1) is [2 1 0 1 2 3 2], replicate [0 0 0 1 2 3 3],
 * constant with a negative front pad crops. */
static void pad_test_reference(void) {
  const float x[4] = {0, 1, 2, 3};
  int64_t xs[1] = {4}, ys[1] = {7}, before[1] = {2};
  float y[7], fill = -1;
  const float reflect[7] = {2, 1, 0, 1, 2, 3, 2}, replicate[7] = {0, 0, 0, 1, 2, 3, 3};
  kiln_pad_reference(KILN_PAD_REFLECT, 4, 1, xs, ys, before, &fill, x, y);
  KILN_EXPECT(memcmp(y, reflect, sizeof y) == 0, "reflect reference");
  kiln_pad_reference(KILN_PAD_REPLICATE, 4, 1, xs, ys, before, &fill, x, y);
  KILN_EXPECT(memcmp(y, replicate, sizeof y) == 0, "replicate reference");
  int64_t crop_ys[1] = {4}, crop_before[1] = {-1}; /* (-1, 1): [1 2 3 fill] */
  const float crop[4] = {1, 2, 3, -1};
  kiln_pad_reference(KILN_PAD_CONSTANT, 4, 1, xs, crop_ys, crop_before, &fill, x, y);
  KILN_EXPECT(memcmp(y, crop, sizeof crop) == 0, "constant crop reference");
}

static void pad_test_level(kiln_pool_t* pool, const char* where) {
  static const pad_case_t cases[] = {
      {0, 1, {5}, {2}, {3}},
      {1, 1, {5}, {4}, {4}},
      {2, 1, {1}, {3}, {2}},
      {0, 1, {0}, {2}, {1}},                      /* zero-size dim padded */
      {0, 1, {6}, {-2}, {-3}},                    /* crop both ends */
      {0, 2, {3, 4}, {-1, 2}, {2, -3}},           /* mixed crop and pad */
      {1, 2, {3, 4}, {2, 3}, {1, 0}},
      {2, 2, {1, 5}, {2, 0}, {1, 4}},             /* size-1 dim replicated */
      {0, 3, {2, 0, 3}, {0, 1, 1}, {0, 1, 0}},    /* zero-size middle dim */
      {1, 3, {2, 3, 4}, {1, 2, 3}, {1, 2, 3}},
      {2, 4, {2, 3, 4, 5}, {0, 1, 2, 3}, {1, 2, 0, 4}},
      {0, 4, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}},
      {1, 3, {4, 67, 129}, {0, 5, 7}, {0, 3, 128}}, /* many rows: split over threads */
      {2, 2, {300, 200}, {3, 1}, {2, 9}},
      {2, 2, {4, 6}, {-1, 2}, {1, -3}},           /* replicate with crops */
      {2, 3, {3, 1, 5}, {-2, 2, -1}, {1, 0, -1}},
      {1, 2, {4, 4}, {-1, -2}, {1, 1}},           /* reflect with crops (OpInfo's) */
      {1, 2, {3, 5}, {-2, 2}, {2, -3}},
  };
  static const size_t elems[] = {1, 4, 8};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    for (size_t e = 0; e < 3; ++e) pad_test_run(&cases[i], elems[e], pool, where);
}

/* ---- STRIDED_SCATTER ---------------------------------------------------------------- */

static void strided_scatter_test(void) {
  /* y (4, 5) = base; src (2, 3) written at rows 1, 3 and columns 4, 2, 0
   * (a negative stride), and a 0-d src. */
  float base[20], src[6], got[20 + MV_GUARD / 4], want[20];
  for (int i = 0; i < 20; ++i) base[i] = (float)i;
  for (int i = 0; i < 6; ++i) src[i] = 100.0f + (float)i;
  int64_t shape[2] = {2, 3}, strides[2] = {10, -2};
  memset(got, MV_GUARD_BYTE, sizeof got);
  kiln_strided_scatter(4, 20, base, 2, shape, strides, 9, src, got);
  memcpy(want, base, sizeof want);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want[9 + 10 * i - 2 * j] = src[i * 3 + j];
  KILN_EXPECT(memcmp(got, want, sizeof want) == 0, "strided scatter differs");
  KILN_EXPECT(mv_guard_ok((unsigned char*)(got + 20)), "strided scatter wrote past y");
  kiln_strided_scatter(4, 20, base, 0, shape, strides, 7, src, got);
  KILN_EXPECT(got[7] == src[0] && got[6] == base[6] && got[8] == base[8], "0-d strided scatter");
}

/* ---- SCATTER ---------------------------------------------------------------------- */

/* The reference in double: each target collects its contributions in
 * index order, then reduces. x (R, C), index (IR, IC), src (R2, C2) with
 * IR <= R2, IC <= C2, axis 0 or 1. */
static void scatter_reference(int reduce, int include_self, int axis, const float* x,
                              const int64_t* xs, const int64_t* idx, const int64_t* is,
                              const float* src, const int64_t* ss, double* want) {
  int64_t n = xs[0] * xs[1];
  double* acc = calloc((size_t)n, sizeof(double));
  int64_t* cnt = calloc((size_t)n, sizeof(int64_t));
  if (!acc || !cnt) {
    free(acc), free(cnt);
    return;
  }
  for (int64_t i = 0; i < n; ++i) want[i] = x[i];
  for (int64_t r = 0; r < is[0]; ++r)
    for (int64_t c = 0; c < is[1]; ++c) {
      int64_t j = idx[r * is[1] + c];
      int64_t size = xs[axis];
      if (j < 0) j += size;
      if (j < 0 || j >= size) continue;
      int64_t t = axis == 0 ? j * xs[1] + c : r * xs[1] + j;
      double v = src[r * ss[1] + c];
      if (!cnt[t]) acc[t] = v;
      else if (reduce == KILN_SCATTER_ASSIGN) acc[t] = v;
      else if (reduce == KILN_SCATTER_SUM || reduce == KILN_SCATTER_MEAN) acc[t] += v;
      else if (reduce == KILN_SCATTER_PROD) acc[t] *= v;
      else if (reduce == KILN_SCATTER_AMAX) acc[t] = v > acc[t] ? v : acc[t];
      else acc[t] = v < acc[t] ? v : acc[t];
      cnt[t]++;
    }
  for (int64_t t = 0; t < n; ++t) {
    if (!cnt[t]) continue;
    double s = x[t], a = acc[t];
    if (reduce == KILN_SCATTER_ASSIGN) want[t] = a;
    else if (reduce == KILN_SCATTER_SUM) want[t] = include_self ? s + a : a;
    else if (reduce == KILN_SCATTER_PROD) want[t] = include_self ? s * a : a;
    else if (reduce == KILN_SCATTER_MEAN) want[t] = (include_self ? s + a : a) / (double)(cnt[t] + include_self);
    else if (reduce == KILN_SCATTER_AMAX) want[t] = include_self && s > a ? s : a;
    else want[t] = include_self && s < a ? s : a;
  }
  free(acc), free(cnt);
}

static void scatter_test(void) {
  enum { R = 5, C = 7, IR = 4, IC = 6, SR = 6, SC = 7 };
  const int64_t xs[2] = {R, C}, is[2] = {IR, IC}, ss[2] = {SR, SC};
  float x[R * C], src[SR * SC], got[R * C + MV_GUARD / 4];
  double want[R * C];
  int64_t idx[IR * IC];
  kiln_test_fill_f32(x, R * C, 1, -1, 1);
  kiln_test_fill_f32(src, SR * SC, 2, -1, 1);
  for (int axis = 0; axis < 2; ++axis) {
    /* Indices with duplicates and negative values, all in range. */
    for (int i = 0; i < IR * IC; ++i) idx[i] = (i * 5 + 3) % xs[axis] - (i % 3 == 0 ? xs[axis] : 0);
    for (int reduce = 0; reduce < KILN_SCATTER_REDUCE_COUNT; ++reduce)
      for (int self = 0; self < 2; ++self) {
        /* Assignment with duplicates is order-dependent: give each target
         * one index so any write order agrees. */
        int64_t uniq[IR * IC];
        memcpy(uniq, idx, sizeof uniq);
        if (reduce == KILN_SCATTER_ASSIGN)
          for (int r = 0; r < IR; ++r)
            for (int c = 0; c < IC; ++c) uniq[r * IC + c] = axis == 0 ? (r + c) % R : (c + r) % C;
        memset(got, MV_GUARD_BYTE, sizeof got);
        int64_t bad = -1;
        KILN_EXPECT_OK(kiln_scatter((kiln_scatter_reduce_t)reduce, self, 1, KILN_F32, 2, xs, axis, x,
                                    is, KILN_I64, uniq, ss, src, got, &bad));
        scatter_reference(reduce, self || reduce == KILN_SCATTER_ASSIGN, axis, x, xs, uniq, is,
                          src, ss, want);
        float wantf[R * C];
        for (int i = 0; i < R * C; ++i) wantf[i] = (float)want[i];
        char what[64];
        snprintf(what, sizeof what, "scatter axis %d reduce %d self %d", axis, reduce, self);
        kiln_test_compare_f32(what, got, wantf, R * C, 1e-6f, 1e-6f);
        KILN_EXPECT(bad == 0, "%s: %lld bad indices", what, (long long)bad);
        KILN_EXPECT(mv_guard_ok((unsigned char*)(got + R * C)), "%s wrote past y", what);
      }
  }
  /* Out of range: counted, nothing written for them. */
  int64_t oob[IR * IC];
  for (int i = 0; i < IR * IC; ++i) oob[i] = i % 4 == 0 ? (i % 8 ? R : -R - 1) : 0;
  int64_t bad = 0;
  memset(got, MV_GUARD_BYTE, sizeof got);
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_SUM, 1, 1, KILN_F32, 2, xs, 0, x, is, KILN_I64, oob, ss,
                              src, got, &bad));
  KILN_EXPECT(bad == IR * IC / 4, "out-of-range count %lld, want %d", (long long)bad, IR * IC / 4);
  /* Without wrapping, negative indices are out of range too (torch.scatter). */
  for (int i = 0; i < IR * IC; ++i) oob[i] = i % 3 == 0 ? -1 : 0;
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_ASSIGN, 1, 0, KILN_F32, 2, xs, 0, x, is, KILN_I64, oob,
                              ss, src, got, &bad));
  KILN_EXPECT(bad == IR * IC / 3, "negative without wrap: %lld bad, want %d", (long long)bad,
              IR * IC / 3);
  KILN_EXPECT(mv_guard_ok((unsigned char*)(got + R * C)), "out-of-range scatter wrote past y");
  /* NaN propagates through amax and amin; integer mean floors. */
  float nx[2] = {1, 2}, nsrc[2] = {NAN, 3}, ny[2];
  int64_t nidx[2] = {0, 0}, ns[2] = {1, 2};
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_AMAX, 1, 1, KILN_F32, 1, ns + 1, 0, nx, ns + 1, KILN_I64,
                              nidx, ns + 1, nsrc, ny, &bad));
  KILN_EXPECT(isnan(ny[0]) && ny[1] == 2, "amax with NaN: %g %g", ny[0], ny[1]);
  int64_t ix[1] = {-4}, isrc[2] = {1, 0}, iy[1], ione[1] = {1}, itwo[1] = {2};
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_MEAN, 1, 1, KILN_I64, 1, ione, 0, ix, itwo, KILN_I64,
                              nidx, itwo, isrc, iy, &bad));
  KILN_EXPECT(iy[0] == -1, "integer mean floor(-3 / 3) = -1, got %lld", (long long)iy[0]);
  ix[0] = -5;
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_MEAN, 0, 1, KILN_I64, 1, ione, 0, ix, itwo, KILN_I64,
                              nidx, itwo, isrc, iy, &bad));
  KILN_EXPECT(iy[0] == 0, "integer mean without self floor(1 / 2) = 0, got %lld", (long long)iy[0]);
  isrc[0] = -3;
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_MEAN, 0, 1, KILN_I64, 1, ione, 0, ix, itwo, KILN_I64,
                              nidx, itwo, isrc, iy, &bad));
  KILN_EXPECT(iy[0] == -2, "integer mean floor(-3 / 2) = -2, got %lld", (long long)iy[0]);
  /* bool sums are or (torch's saturating add). */
  uint8_t bx[2] = {0, 1}, bsrc[3] = {1, 1, 0}, by[2];
  int64_t bidx[3] = {0, 0, 1}, bthree[1] = {3};
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_SUM, 1, 1, KILN_BOOL, 1, itwo, 0, bx, bthree, KILN_I64,
                              bidx, bthree, bsrc, by, &bad));
  KILN_EXPECT(by[0] == 1 && by[1] == 1 && bad == 0, "bool scatter sum: %d %d", by[0], by[1]);
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_AMIN, 1, 1, KILN_BOOL, 1, itwo, 0, bx, bthree, KILN_I64,
                              bidx, bthree, bsrc, by, &bad));
  KILN_EXPECT(by[0] == 0 && by[1] == 0, "bool scatter amin (and): %d %d", by[0], by[1]);
  KILN_EXPECT_OK(kiln_scatter(KILN_SCATTER_PROD, 0, 1, KILN_BOOL, 1, itwo, 0, bx, bthree, KILN_I64,
                              bidx, bthree, bsrc, by, &bad));
  KILN_EXPECT(by[0] == 1 && by[1] == 0, "bool scatter prod without self: %d %d", by[0], by[1]);
}

/* ---- SCAN ---------------------------------------------------------------------------- */

static void scan_test_level(kiln_pool_t* pool, const char* where) {
  static const int64_t shapes[][3] = {{1, 1, 1}, {3, 17, 5}, {1, 1000, 1}, {64, 9, 70}, {2, 0, 3}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t o = shapes[s][0], l = shapes[s][1], in = shapes[s][2], n = o * l * in;
    float* x = malloc((size_t)(n + 1) * sizeof(float));
    float* got = malloc((size_t)n * sizeof(float) + MV_GUARD);
    float* want = malloc((size_t)(n + 1) * sizeof(float));
    int64_t* xi = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t* gi = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!x || !got || !want || !xi || !gi) {
      KILN_EXPECT(0, "out of memory");
      free(x), free(got), free(want), free(xi), free(gi);
      return;
    }
    kiln_test_fill_f32(x, (size_t)n, (unsigned)s, 0.5f, 1.5f);
    if (n > 20) x[20] = NAN, x[n - 1] = INFINITY; /* propagate to the end of their lines */
    for (int op = 0; op < 2; ++op) {
      memset(got, MV_GUARD_BYTE, (size_t)n * sizeof(float) + MV_GUARD);
      kiln_scan(op, KILN_F32, o, l, in, x, got, pool);
      for (int64_t a = 0; a < o; ++a)
        for (int64_t c = 0; c < in; ++c) {
          double acc = op;
          for (int64_t i = 0; i < l; ++i) {
            int64_t at = (a * l + i) * in + c;
            acc = op ? acc * x[at] : acc + x[at];
            want[at] = (float)acc;
          }
        }
      char what[96];
      snprintf(what, sizeof what, "scan op %d (%lld, %lld, %lld) %s", op, (long long)o,
               (long long)l, (long long)in, where);
      kiln_test_compare_f32(what, got, want, (size_t)n, 0, 1e-6f);
      KILN_EXPECT(mv_guard_ok((unsigned char*)(got + n)), "%s wrote past y", what);
    }
    for (int64_t i = 0; i < n; ++i) xi[i] = (i * 37) % 11 - 5 + (i == 3 ? INT64_MAX : 0);
    kiln_scan(0, KILN_I64, o, l, in, xi, gi, pool);
    int ok = 1;
    for (int64_t a = 0; a < o; ++a)
      for (int64_t c = 0; c < in; ++c) {
        uint64_t acc = 0; /* wraps, as the kernel must */
        for (int64_t i = 0; i < l; ++i) {
          int64_t at = (a * l + i) * in + c;
          acc += (uint64_t)xi[at];
          ok &= gi[at] == (int64_t)acc;
        }
      }
    KILN_EXPECT(ok, "int64 cumsum differs %s", where);
    free(x), free(got), free(want), free(xi), free(gi);
  }
}

/* ---- ARGSORT ----------------------------------------------------------------------- */

/* NaN is the largest; equal keys keep index order (insertion sort is stable). */
static int argsort_before(float a, float b, int desc) {
  if (desc) return (isnan(a) && !isnan(b)) || a > b;
  return !isnan(a) && (isnan(b) || a < b);
}

static void argsort_test_level(kiln_pool_t* pool, const char* where) {
  static const int64_t shapes[][3] = {{1, 1, 1}, {4, 33, 3}, {1, 257, 1}, {40, 50, 2}, {3, 2, 0}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t o = shapes[s][0], l = shapes[s][1], in = shapes[s][2], n = o * l * in;
    float* x = malloc((size_t)(n + 1) * sizeof(float));
    int64_t* got = malloc((size_t)(n + 1) * sizeof(int64_t) + MV_GUARD);
    int64_t* ref = malloc((size_t)(l + 1) * sizeof(int64_t));
    int64_t* xi = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!x || !got || !ref || !xi) {
      KILN_EXPECT(0, "out of memory");
      free(x), free(got), free(ref), free(xi);
      return;
    }
    /* Few distinct values (many ties), some NaN, -0.0 and +0.0 (equal). */
    for (int64_t i = 0; i < n; ++i) {
      x[i] = (float)((i * 7919) % 9) - 4.0f;
      if (i % 13 == 5) x[i] = NAN;
      if (i % 17 == 2) x[i] = -0.0f;
      xi[i] = (i * 31) % 7;
    }
    for (int desc = 0; desc < 2; ++desc)
      for (int kind = 0; kind < 5; ++kind) {
        /* The full sort, then topks: a merge sort's prefix, and the
         * selection's (k <= 16). */
        const int64_t ks[5] = {l, (l + 1) / 2, 1, 5, 16};
        int64_t k = ks[kind] < l ? ks[kind] : l;
        memset(got, MV_GUARD_BYTE, (size_t)(o * k * in) * sizeof(int64_t) + MV_GUARD);
        KILN_EXPECT_OK(kiln_argsort(KILN_F32, o, l, in, desc, k, x, got, pool));
        int ok = 1;
        for (int64_t a = 0; a < o; ++a)
          for (int64_t c = 0; c < in; ++c) {
            for (int64_t i = 0; i < l; ++i) { /* insertion sort of the line's indices */
              int64_t j = i;
              float v = x[(a * l + i) * in + c];
              while (j > 0 && argsort_before(v, x[(a * l + ref[j - 1]) * in + c], desc)) {
                ref[j] = ref[j - 1];
                --j;
              }
              ref[j] = i;
            }
            for (int64_t i = 0; i < k; ++i) ok &= got[(a * k + i) * in + c] == ref[i];
          }
        KILN_EXPECT(ok, "argsort (%lld, %lld, %lld) desc %d k %lld %s differs", (long long)o,
                    (long long)l, (long long)in, desc, (long long)k, where);
        KILN_EXPECT(mv_guard_ok((unsigned char*)(got + o * k * in)), "argsort wrote past y %s",
                    where);
      }
    /* int64 keys: ascending, stable. */
    KILN_EXPECT_OK(kiln_argsort(KILN_I64, o, l, in, 0, l, xi, got, pool));
    int ok = 1;
    for (int64_t a = 0; a < o; ++a)
      for (int64_t c = 0; c < in; ++c)
        for (int64_t i = 1; i < l; ++i) {
          int64_t p = got[(a * l + i - 1) * in + c], q = got[(a * l + i) * in + c];
          int64_t vp = xi[(a * l + p) * in + c], vq = xi[(a * l + q) * in + c];
          ok &= vp < vq || (vp == vq && p < q);
        }
    KILN_EXPECT(ok, "int64 argsort not a stable ascending order %s", where);
    /* int64 topk by the selection: the full sort's first 3, both ways. */
    for (int desc = 0; desc < 2 && l > 3; ++desc) {
      int64_t* full = malloc((size_t)(n + 1) * sizeof(int64_t));
      int64_t* top = malloc((size_t)(o * 3 * in + 1) * sizeof(int64_t));
      if (full && top) {
        KILN_EXPECT_OK(kiln_argsort(KILN_I64, o, l, in, desc, l, xi, full, pool));
        KILN_EXPECT_OK(kiln_argsort(KILN_I64, o, l, in, desc, 3, xi, top, pool));
        ok = 1;
        for (int64_t a = 0; a < o; ++a)
          for (int64_t c = 0; c < in; ++c)
            for (int64_t i = 0; i < 3; ++i)
              ok &= top[(a * 3 + i) * in + c] == full[(a * l + i) * in + c];
        KILN_EXPECT(ok, "int64 topk 3 desc %d is not the sort's first 3 %s", desc, where);
      }
      free(full), free(top);
    }
    free(x), free(got), free(ref), free(xi);
  }
}

/* ---- shape rules -------------------------------------------------------------------- */

static void movement_test_shape_rules(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[2] = {3, 4}, is[2] = {2, 4}, ss[1] = {4};
  int32_t x, xi, idx, src, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "xi", KILN_I64, 2, xs, &xi));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "i", KILN_I64, 2, is, &idx));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "s", KILN_F32, 1, ss, &src));
  /* PAD: [mode, before x8, after x8, fill] */
  int64_t pad[18] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 2, 3};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_PAD, &x, 1, pad, 18, NULL, 0, "pad", &y));
  KILN_EXPECT(g->values[y].shape[0] == 7 && g->values[y].shape[1] == 10, "pad shape");
  int64_t pad_bad[][18] = {
      {1, 3},                       /* reflect pad equal to the size */
      {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}, /* reflect pad after equal to the size */
      {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, -5}, /* replicate cropped below zero */
      {3},                          /* unknown mode */
      {0, 0, 0, 1},                 /* pad of a dim past the rank */
      {0, -2, 0, 0, 0, 0, 0, 0, 0, -2}, /* cropped below zero */
      {0, (int64_t)1 << 50},        /* huge */
  };
  for (size_t i = 0; i < sizeof(pad_bad) / sizeof(pad_bad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_PAD, &x, 1, pad_bad[i], 18, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT);
  /* STRIDED_SCATTER of a (4,) src into (3, 4): row 2 fits, row 3 does not. */
  int32_t ss_in[2] = {x, src};
  int64_t view[18] = {1, 4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_SCATTER, ss_in, 2, view, 18, NULL, 0, "ss", &y));
  view[17] = 9;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_STRIDED_SCATTER, ss_in, 2, view, 18, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  view[17] = 3, view[9] = -1; /* reads 3, 2, 1, 0: fine */
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_SCATTER, ss_in, 2, view, 18, NULL, 0, "ss", &y));
  view[17] = 2; /* would write element -1 */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_STRIDED_SCATTER, ss_in, 2, view, 18, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  /* SCATTER: index (2, 4) into x (3, 4) with src x. */
  int32_t sc_in[3] = {x, idx, x};
  int64_t sc_ok[4] = {0, 1, 1, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SCATTER, sc_in, 3, sc_ok, 4, NULL, 0, "sc", &y));
  int64_t sc_bad[][4] = {{2, 0, 1}, {0, 6, 1}, {0, 1, 2}, {0, 1, 1, 2}};
  for (size_t i = 0; i < 4; ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SCATTER, sc_in, 3, sc_bad[i], 4, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT);
  int32_t sc_mixed[3] = {x, idx, xi}; /* src dtype differs */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SCATTER, sc_mixed, 3, sc_ok, 4, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  int32_t x2;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x2", KILN_F32, 2, is, &x2));
  int32_t sc_big[3] = {x2, xi, x}; /* index (3, 4) larger than x (2, 4) off the axis */
  int64_t sc_axis1[3] = {1, 0, 1};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SCATTER, sc_big, 3, sc_axis1, 3, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  /* SCAN and ARGSORT */
  int64_t scan_bad[2] = {0, 2}, argsort_ok[3] = {1, 1, 2}, argsort_bad[3] = {1, 0, 5};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SCAN, &x, 1, scan_bad, 2, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ARGSORT, &x, 1, argsort_ok, 3, NULL, 0, "topk", &y));
  KILN_EXPECT(g->values[y].dtype == KILN_I64 && g->values[y].shape[1] == 2, "argsort shape");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_ARGSORT, &x, 1, argsort_bad, 3, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

/* WHERE over float32 rows: dense arms, a scalar arm either side and a
 * strided one, conditions of any byte (not 0 is true), NaN arms carried as
 * they are. */
static void where_test_level(kiln_pool_t* pool, const char* where) {
  enum { N = 1000 };
  static uint8_t cond[N];
  static float a[2 * N], b[2 * N], got[N];
  for (int i = 0; i < N; ++i) cond[i] = (uint8_t)((i * 7919) % 5 == 0 ? 0 : (i % 3));
  kiln_test_fill_f32(a, 2 * N, 3u, -2.0f, 2.0f);
  kiln_test_fill_f32(b, 2 * N, 4u, -2.0f, 2.0f);
  a[5] = NAN;
  b[7] = NAN;
  static const int64_t st[][2] = {{1, 1}, {1, 0}, {0, 1}, {2, 1}, {1, 2}, {0, 0}};
  for (size_t s = 0; s < sizeof st / sizeof st[0]; ++s) {
    kiln_nd_t nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = 1;
    nd.shape[0] = N;
    nd.strides[0][0] = 1, nd.strides[1][0] = 1, nd.strides[2][0] = st[s][0], nd.strides[3][0] = st[s][1];
    kiln_where(KILN_F32, &nd, got, cond, a, b, pool);
    int ok = 1;
    for (int i = 0; i < N; ++i) {
      float want = cond[i] ? a[i * st[s][0]] : b[i * st[s][1]];
      ok &= memcmp(&got[i], &want, sizeof(float)) == 0;
    }
    KILN_EXPECT(ok, "where, arm strides %lld / %lld, %s", (long long)st[s][0], (long long)st[s][1],
                where);
  }
}

/* Rows longer than a task, fewer than the tasks wanted (a contiguous op
 * collapses to one row): kiln_nd_for_rows cuts them in pieces. Binary ops
 * (float out and bool out), where and a strided copy over one row, three
 * rows of an odd length and a strided inner dim, against the reference or
 * the plain loop, bit for bit. */
static void long_rows_test_level(kiln_pool_t* pool, const char* where) {
  enum { N = 200003 };
  float* a = malloc(2 * N * sizeof(float));
  float* b = malloc(2 * N * sizeof(float));
  float* got = malloc(N * sizeof(float));
  float* want = malloc(N * sizeof(float));
  uint8_t* cond = malloc(N);
  if (!a || !b || !got || !want || !cond) goto done;
  kiln_test_fill_f32(a, 2 * N, 11u, -3.0f, 3.0f);
  kiln_test_fill_f32(b, 2 * N, 12u, -3.0f, 3.0f);
  for (int i = 0; i < N; ++i) cond[i] = (uint8_t)(i % 7 < 3);
  /* {rows, inner, a's inner stride, b's inner stride} */
  static const int64_t cases[][4] = {{1, N, 1, 1}, {3, 66667, 1, 0}, {2, 100001, 2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    kiln_nd_t nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = cases[c][0] > 1 ? 2 : 1;
    int32_t in = nd.rank - 1;
    if (nd.rank == 2) {
      nd.shape[0] = cases[c][0];
      nd.strides[0][0] = cases[c][1];
      nd.strides[1][0] = cases[c][1] * cases[c][2];
      nd.strides[2][0] = cases[c][1] * cases[c][3];
      nd.strides[3][0] = cases[c][1] * cases[c][3];
    }
    nd.shape[in] = cases[c][1];
    nd.strides[0][in] = 1, nd.strides[1][in] = cases[c][2], nd.strides[2][in] = cases[c][3];
    nd.strides[3][in] = cases[c][3];
    const size_t n = (size_t)(cases[c][0] * cases[c][1]);
    static const kiln_binary_t ops[] = {KILN_BINARY_ADD, KILN_BINARY_DIV, KILN_BINARY_LT};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
      size_t bytes = ops[o] == KILN_BINARY_LT ? n : n * sizeof(float);
      memset(got, 0xAB, bytes);
      memset(want, 0xCD, bytes);
      kiln_binary(ops[o], KILN_F32, &nd, got, a, b, pool);
      kiln_binary_reference(ops[o], KILN_F32, &nd, want, a, b);
      KILN_EXPECT(memcmp(got, want, bytes) == 0, "binary op %d over long rows, case %zu, %s",
                  (int)ops[o], c, where);
    }
    /* where: operand 1 is the condition, dense; a and b at operands 2, 3. */
    kiln_nd_t wd = nd;
    for (int32_t d = 0; d < nd.rank; ++d) {
      wd.strides[1][d] = nd.strides[0][d];
      wd.strides[2][d] = nd.strides[1][d];
    }
    kiln_where(KILN_F32, &wd, got, cond, a, b, pool);
    int ok = 1;
    for (int64_t r = 0; r < cases[c][0]; ++r)
      for (int64_t j = 0; j < cases[c][1]; ++j) {
        int64_t e = r * cases[c][1] + j;
        float w = cond[e] ? a[r * wd.strides[2][0] * (nd.rank - 1) + j * cases[c][2]]
                          : b[r * wd.strides[3][0] * (nd.rank - 1) + j * cases[c][3]];
        ok &= memcmp(&got[e], &w, sizeof w) == 0;
      }
    KILN_EXPECT(ok, "where over long rows, case %zu, %s", c, where);
    /* A strided copy of a: out[e] = a at operand 1's strides. */
    kiln_strided_copy(KILN_F32, &nd, got, a, pool);
    ok = 1;
    for (int64_t r = 0; r < cases[c][0]; ++r)
      for (int64_t j = 0; j < cases[c][1]; ++j)
        ok &= got[r * cases[c][1] + j] == a[r * nd.strides[1][0] * (nd.rank - 1) + j * cases[c][2]];
    KILN_EXPECT(ok, "strided copy over long rows, case %zu, %s", c, where);
  }
done:
  free(a);
  free(b);
  free(got);
  free(want);
  free(cond);
}

static void movement_test_level(kiln_pool_t* pool, const char* where) {
  pad_test_level(pool, where);
  where_test_level(pool, where);
  long_rows_test_level(pool, where);
  scan_test_level(pool, where);
  argsort_test_level(pool, where);
}

void kiln_test_suite_movement(void) {
  pad_test_reference();
  kiln_test_each_isa_and_pool(movement_test_level);
  strided_scatter_test();
  scatter_test();
  movement_test_shape_rules();
}
