/* kernels/math against its scalar references, at every ISA level and with 1
 * and 2 threads: the unary float functions within a few ulp (exact for the
 * rounding ops and sign) over uniform and log-uniform inputs plus the
 * special values; the binary ops exactly (atan2 within an ulp) over
 * broadcast shapes, integer edge values and zero divisors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "kernels/math/kiln_math.h"
#include "kiln_test.h"

/* Distance in ulps between two floats (the bit patterns ordered as
 * integers, so that it counts representable floats between them). */
static int64_t kiln_test_ulps(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia;
  int64_t ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return oa > ob ? oa - ob : ob - oa;
}

/* Number of elements further than max_ulps from want (NaN must meet NaN, a
 * zero must keep its sign); reports the first. */
static int kiln_test_compare_ulps(const char* what, const float* x, const float* got,
                                  const float* want, size_t n, int64_t max_ulps) {
  int bad = 0;
  int64_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    float g = got[i], w = want[i];
    int ok;
    if (isnan(w) || isnan(g)) {
      ok = isnan(w) && isnan(g);
    } else if (w == 0.0f && g == 0.0f) {
      ok = signbit(w) == signbit(g);
    } else {
      int64_t u = kiln_test_ulps(g, w);
      worst = u > worst ? u : worst;
      ok = u <= max_ulps;
    }
    if (!ok) {
      if (!bad)
        fprintf(stderr, "  %s: x = %.9g: got %.9g want %.9g\n", what, (double)x[i], (double)g,
                (double)w);
      ++bad;
    }
  }
  KILN_EXPECT(bad == 0, "%s: %d of %zu elements beyond %lld ulp (worst %lld)", what, bad, n,
              (long long)max_ulps, (long long)worst);
  return bad;
}

static const char* const kiln_test_math_names[KILN_MATH_UNARY_COUNT] = {
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan",
    "expm1", "log10", "log1p", "log2", "ceil", "floor", "round", "trunc", "sign"};

/* The uniform part of each op's inputs spans its interesting range (and a
 * little past its domain, which must give NaN). */
static const float kiln_test_math_range[KILN_MATH_UNARY_COUNT][2] = {
    {-1.1f, 1.1f}, {0.9f, 40.0f}, {-1.1f, 1.1f}, {-20.0f, 20.0f}, {-10.0f, 10.0f},
    {-1.1f, 1.1f}, {-95.0f, 95.0f}, {-95.0f, 95.0f}, {-10.0f, 10.0f}, {-25.0f, 95.0f},
    {-0.5f, 100.0f}, {-1.2f, 10.0f}, {-0.5f, 100.0f}, {-10.0f, 10.0f}, {-10.0f, 10.0f},
    {-10.0f, 10.0f}, {-10.0f, 10.0f}, {-3.0f, 3.0f}};

static const float kiln_test_math_specials[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.5f, 1e-30f, -1e-30f,
    1e-45f, -1e-45f, 1e-38f, 1e-7f, -1e-7f, 3e-8f, 0.999999f, -0.999999f, 1.000001f,
    88.0f, 88.7f, 89.0f, 89.5f, 90.0f, -88.0f, -104.0f, 1e10f, -1e10f, 3e38f, -3e38f,
    8388607.5f, 8388608.0f, -8388607.5f, INFINITY, -INFINITY, NAN, -NAN};

enum { KILN_TEST_MATH_N = 40000 };

static void kiln_test_math_unary(kiln_pool_t* pool, const char* where) {
  size_t ns = sizeof(kiln_test_math_specials) / sizeof(kiln_test_math_specials[0]);
  float* x = malloc(KILN_TEST_MATH_N * sizeof(float));
  float* got = malloc(KILN_TEST_MATH_N * sizeof(float));
  float* want = malloc(KILN_TEST_MATH_N * sizeof(float));
  if (!x || !got || !want) {
    KILN_EXPECT(0, "out of memory");
    free(x), free(got), free(want);
    return;
  }
  for (int op = 0; op < KILN_MATH_UNARY_COUNT; ++op) {
    size_t n = KILN_TEST_MATH_N, half = n / 2;
    kiln_test_fill_f32(x, half, (unsigned)op, kiln_test_math_range[op][0],
                       kiln_test_math_range[op][1]);
    /* Log-uniform magnitudes from 2^-40 to 2^40, both signs. */
    kiln_test_fill_f32(x + half, n - half, 100u + (unsigned)op, -40.0f, 40.0f);
    for (size_t i = half; i < n; ++i) x[i] = ((i & 1) ? -1.0f : 1.0f) * exp2f(x[i]);
    memcpy(x + 100, kiln_test_math_specials, ns * sizeof(float));
    kiln_math_unary_f32_reference((kiln_math_unary_t)op, n, x, want);
    int exact = op >= KILN_MATH_CEIL;
    char what[96];
    /* Sizes 1, a tail that is no multiple of the vector width, and all
     * that follows x + 100 (the specials). */
    size_t sizes[] = {1, 37, n - 100};
    for (int s = 0; s < 3; ++s) {
      snprintf(what, sizeof(what), "%s %s n=%zu", kiln_test_math_names[op], where, sizes[s]);
      memset(got, 0, n * sizeof(float));
      kiln_math_unary_f32((kiln_math_unary_t)op, sizes[s], x + 100 - (s == 1), got, pool);
      kiln_test_compare_ulps(what, x + 100 - (s == 1), got, want + 100 - (s == 1), sizes[s],
                             exact ? 0 : 4);
    }
    /* In place (x and y the same array). */
    memcpy(got, x, n * sizeof(float));
    kiln_math_unary_f32((kiln_math_unary_t)op, n, got, got, pool);
    snprintf(what, sizeof(what), "%s %s in place", kiln_test_math_names[op], where);
    kiln_test_compare_ulps(what, x, got, want, n, exact ? 0 : 4);
  }
  free(x), free(got), free(want);
}

static void kiln_test_math_sign_int(void) {
  int64_t x[] = {INT64_MIN, -5, -1, 0, 1, 7, INT64_MAX}, y[7];
  int64_t want[] = {-1, -1, -1, 0, 1, 1, 1};
  kiln_math_sign_int(KILN_I64, 7, x, y);
  KILN_EXPECT(memcmp(y, want, sizeof(y)) == 0, "sign of int64");
  int32_t x32[] = {INT32_MIN, 0, 3}, y32[3], want32[] = {-1, 0, 1};
  kiln_math_sign_int(KILN_I32, 3, x32, y32);
  KILN_EXPECT(memcmp(y32, want32, sizeof(y32)) == 0, "sign of int32");
}

/* a (R, C) op b broadcast as (C,) when b_row, else as (R, C), and the same
 * with a broadcast scalar on either side. */
static void kiln_test_math_nd(kiln_nd_t* nd, int64_t r, int64_t c, int a_kind, int b_kind) {
  memset(nd, 0, sizeof(*nd));
  nd->rank = 2;
  nd->shape[0] = r;
  nd->shape[1] = c;
  kiln_nd_set_dense_output(nd);
  int64_t full[2] = {r, c}, row[1] = {c};
  int kinds[2] = {a_kind, b_kind};
  for (int k = 0; k < 2; ++k) {
    if (kinds[k] == 0) kiln_nd_set_broadcast(nd, k + 1, 2, full);
    else if (kinds[k] == 1) kiln_nd_set_broadcast(nd, k + 1, 1, row);
    else kiln_nd_set_broadcast(nd, k + 1, 0, NULL);
  }
}

static const char* const kiln_test_math_bnames[KILN_MATH_BINARY_COUNT] = {
    "atan2", "bitwise_and", "bitwise_or", "bitwise_xor", "fmod", "remainder", "div_trunc",
    "div_floor"};

static void kiln_test_math_binary_f32(kiln_pool_t* pool, const char* where) {
  enum { R = 9, C = 37 };
  static const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 7.0f, -7.0f,
                                   1e-30f, 3e38f, INFINITY, -INFINITY, NAN, 0.3f, -0.3f};
  size_t ns = sizeof(specials) / sizeof(specials[0]);
  float a[R * C], b[R * C], got[R * C], want[R * C];
  kiln_test_fill_f32(a, R * C, 7, -20.0f, 20.0f);
  kiln_test_fill_f32(b, R * C, 8, -6.0f, 6.0f);
  /* Every pair of specials in the first rows. */
  for (size_t i = 0; i < ns * ns && i < R * C; ++i) {
    a[i] = specials[i / ns];
    b[i] = specials[i % ns];
  }
  for (int op = 0; op < KILN_MATH_BINARY_COUNT; ++op) {
    if (op >= KILN_MATH_BITWISE_AND && op <= KILN_MATH_BITWISE_XOR) continue;
    for (int kinds = 0; kinds < 4; ++kinds) {
      int ak = kinds == 3 ? 2 : 0, bk = kinds == 1 ? 1 : kinds == 2 ? 2 : 0;
      kiln_nd_t nd;
      kiln_test_math_nd(&nd, R, C, ak, bk);
      int64_t zeros = kiln_math_binary((kiln_math_binary_t)op, KILN_F32, &nd, got, a, b, pool);
      for (int64_t i = 0; i < R * C; ++i) {
        float x = ak == 2 ? a[0] : a[i];
        float y = bk == 2 ? b[0] : bk == 1 ? b[i % C] : b[i];
        /* atan2 against double (its vector form: 2.4 ulp, kiln_math_binary.c) */
        want[i] = op == KILN_MATH_ATAN2 ? (float)atan2((double)x, (double)y)
                                        : kiln_math_binary_f32_reference((kiln_math_binary_t)op, x, y);
      }
      char what[96];
      snprintf(what, sizeof(what), "%s f32 %s broadcast %d", kiln_test_math_bnames[op], where,
               kinds);
      kiln_test_compare_ulps(what, a, got, want, R * C, op == KILN_MATH_ATAN2 ? 3 : 0);
      KILN_EXPECT(zeros == 0, "%s: float division by zero is IEEE, not counted", what);
    }
  }
}

static void kiln_test_math_binary_i64(kiln_pool_t* pool, const char* where) {
  enum { R = 11, C = 23 };
  static const int64_t specials[] = {INT64_MIN, INT64_MIN + 1, -7, -3, -1, 0, 1, 2, 3, 7,
                                     INT64_MAX, INT64_MAX - 1, -8, 8};
  size_t ns = sizeof(specials) / sizeof(specials[0]);
  int64_t a[R * C], b[R * C], got[R * C], want[R * C];
  uint64_t s = 12345;
  for (int i = 0; i < R * C; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = (int64_t)(s >> 33) % 2001 - 1000;
    b[i] = (int64_t)(s >> 13) % 41 - 20;
  }
  for (size_t i = 0; i < ns * ns && i < R * C; ++i) {
    a[i] = specials[i / ns];
    b[i] = specials[i % ns];
  }
  for (int op = KILN_MATH_BITWISE_AND; op < KILN_MATH_BINARY_COUNT; ++op) {
    for (int kinds = 0; kinds < 3; ++kinds) {
      int bk = kinds;
      kiln_nd_t nd;
      kiln_test_math_nd(&nd, R, C, 0, bk);
      int64_t zeros = kiln_math_binary((kiln_math_binary_t)op, KILN_I64, &nd, got, a, b, pool);
      int64_t want_zeros = 0;
      int bad = 0;
      for (int64_t i = 0; i < R * C; ++i) {
        int64_t y = bk == 2 ? b[0] : bk == 1 ? b[i % C] : b[i];
        int z;
        want[i] = kiln_math_binary_i64_reference((kiln_math_binary_t)op, a[i], y, &z);
        want_zeros += z;
        if (got[i] != want[i] && !bad++)
          fprintf(stderr, "  %s: %lld, %lld: got %lld want %lld\n", kiln_test_math_bnames[op],
                  (long long)a[i], (long long)y, (long long)got[i], (long long)want[i]);
      }
      KILN_EXPECT(bad == 0, "%s i64 %s broadcast %d: %d elements differ",
                  kiln_test_math_bnames[op], where, kinds, bad);
      KILN_EXPECT(zeros == want_zeros, "%s i64 %s: %lld zero divisors counted, want %lld",
                  kiln_test_math_bnames[op], where, (long long)zeros, (long long)want_zeros);
    }
  }
  /* int32 and bool through the same rows. */
  int32_t a32[4] = {INT32_MIN, -7, 7, 5}, b32[4] = {-1, 2, -2, 0}, g32[4];
  kiln_nd_t nd;
  kiln_test_math_nd(&nd, 1, 4, 0, 0);
  int64_t z = kiln_math_binary(KILN_MATH_DIV_FLOOR, KILN_I32, &nd, g32, a32, b32, pool);
  KILN_EXPECT(g32[0] == INT32_MIN && g32[1] == -4 && g32[2] == -4 && g32[3] == 0 && z == 1,
              "div_floor int32 %s: %d %d %d %d, %lld zeros", where, g32[0], g32[1], g32[2],
              g32[3], (long long)z);
  uint8_t ba[4] = {0, 0, 1, 1}, bb[4] = {0, 1, 0, 1}, bg[4];
  kiln_math_binary(KILN_MATH_BITWISE_XOR, KILN_BOOL, &nd, bg, ba, bb, pool);
  KILN_EXPECT(bg[0] == 0 && bg[1] == 1 && bg[2] == 1 && bg[3] == 0, "bitwise_xor bool %s", where);
  kiln_math_binary(KILN_MATH_BITWISE_AND, KILN_BOOL, &nd, bg, ba, bb, pool);
  KILN_EXPECT(bg[0] == 0 && bg[1] == 0 && bg[2] == 0 && bg[3] == 1, "bitwise_and bool %s", where);
}

/* fmod, remainder and div_floor are exact (fmod is, and the others are
 * torch's float formulas on it): the FMA path (kiln_math_binary.c) must
 * give libm's fmodf bits on quotients just under and over integers, from
 * 2^-140 to 2^127, up to and past its 2^23 limit, both signs, subnormal
 * divisors. 65536 pairs a level. */
static void kiln_test_math_fmod_exact(kiln_pool_t* pool, const char* where) {
  enum { N = 65536 };
  static float a[N], b[N], got[N], want[N];
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < N; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int e = (int)(s >> 40) % 260 - 140;                      /* y's exponent */
    const float y = ldexpf(1.0f + (float)((s >> 8) & 0xffff) / 65536.0f, e);
    const int qe = (int)((s >> 24) % 27);                          /* quotient up to 2^26 */
    const float k = floorf(ldexpf((float)((s >> 30) & 0xfff) / 4096.0f + 0.5f, qe));
    float x = k * y;                                               /* rounded: near k */
    switch ((s >> 56) % 4) {
      case 0: x = nextafterf(x, INFINITY); break;
      case 1: x = nextafterf(x, -INFINITY); break;
      case 2: x = x * 1.0000001f; break;
      default: break;
    }
    a[i] = (s >> 62) & 1 ? -x : x;
    b[i] = (s >> 61) & 1 ? -y : y;
  }
  kiln_nd_t nd;
  kiln_test_math_nd(&nd, 256, N / 256, 0, 0);
  static const kiln_math_binary_t ops[] = {KILN_MATH_FMOD, KILN_MATH_REMAINDER,
                                           KILN_MATH_DIV_FLOOR};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
    kiln_math_binary(ops[o], KILN_F32, &nd, got, a, b, pool);
    for (int i = 0; i < N; ++i) want[i] = kiln_math_binary_f32_reference(ops[o], a[i], b[i]);
    char what[96];
    snprintf(what, sizeof(what), "%s f32 %s, quotients near integers", kiln_test_math_bnames[ops[o]],
             where);
    kiln_test_compare_ulps(what, a, got, want, N, 0);
  }
}

/* atan2 over 65536 pairs of magnitudes 2^-30..2^30, both signs, every
 * octant and the reduction's edge at tan(pi/8): within 3 ulp of double
 * (kiln_math_binary.c: 2.4 measured). */
static void kiln_test_math_atan2_sweep(kiln_pool_t* pool, const char* where) {
  enum { N = 65536 };
  static float a[N], b[N], got[N], want[N];
  uint64_t s = 0x2545f4914f6cdd1dull;
  for (int i = 0; i < N; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float x = ldexpf(1.0f + (float)((s >> 8) & 0xffff) / 65536.0f, (int)((s >> 24) % 61) - 30);
    float r = i % 4 == 0 ? 0.41421356f * (1.0f + ((float)((s >> 40) & 0xff) - 128.0f) * 1e-6f)
                         : ldexpf(1.0f + (float)((s >> 32) & 0xff) / 256.0f, (int)((s >> 48) % 41) - 20);
    float y = x * r;
    if (i % 8 == 1) y = x, x = x * r; /* the octant above the diagonal */
    a[i] = (s >> 62) & 1 ? -y : y;
    b[i] = (s >> 61) & 1 ? -x : x;
    want[i] = (float)atan2((double)a[i], (double)b[i]);
  }
  kiln_nd_t nd;
  kiln_test_math_nd(&nd, 256, N / 256, 0, 0);
  kiln_math_binary(KILN_MATH_ATAN2, KILN_F32, &nd, got, a, b, pool);
  char what[96];
  snprintf(what, sizeof(what), "atan2 f32 %s, every octant", where);
  kiln_test_compare_ulps(what, a, got, want, N, 3);
}

static void kiln_test_math_level(kiln_pool_t* pool, const char* where) {
  kiln_test_math_unary(pool, where);
  kiln_test_math_atan2_sweep(pool, where);
  kiln_test_math_fmod_exact(pool, where);
  kiln_test_math_binary_f32(pool, where);
  kiln_test_math_binary_i64(pool, where);
}

void kiln_test_suite_math(void) {
  kiln_test_math_sign_int();
  kiln_test_each_isa_and_pool(kiln_test_math_level);
}
