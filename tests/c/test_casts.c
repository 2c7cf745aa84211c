/* The kernels kiln_pass_casts folds casts into, held to the casts they
 * replace bit for bit (the fold's contract: same bits as the unfused graph):
 *   - a GEMM rounding its fp32 A (a_round_bf16) or B (b_round_bf16) to bf16
 *     as it packs gives the bits of the same GEMM reading a_bf16 = cast(A)
 *     and b_bf16 = cast(B) (on the bf16 engines too, where they run it), and
 *     matches the scalar reference with the rounded operands;
 *   - a GEMM reading a bf16 B (b_bf16) gives the bits of the same GEMM
 *     reading the widened fp32 B, row-major and transposed, at the small-M
 *     (GEMV) and blocked sizes and both B packers (up front and on the fly),
 *     with A row-major and transposed (a bf16 A, a_bf16, is widened into a
 *     block and packed by the float32 packer: the same panels);
 *   - a GEMM rounding its C (c_round_bf16) gives the bits of its C cast to
 *     bf16 and back;
 *   - the fused ROUND_BF16 instruction gives the bits of the float32 ->
 *     bf16 -> float32 CAST kernels, on ties, subnormals, infinities and NaNs;
 *   - the float32 -> bf16 CAST (its ISA variants, kiln_cast_bf16.c) gives
 *     the bits of the scalar rule written out here, at every length of a
 *     vector body and tail and at unaligned starts.
 * At every ISA level this CPU has, with 1 and 2 threads. */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "kernels/eltwise/kiln_cast_bf16_variants.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_eltwise_fused.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kiln_test.h"

static int casts_same_bits(const float* a, const float* b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Values that exercise the rounding: ties both ways, a carry into the
 * exponent, subnormals, the largest finite (rounds to infinity), infinities
 * and NaNs (signalling and quiet, both signs), then random ones. */
static void casts_fill_edges(float* x, size_t n, unsigned seed) {
  static const uint32_t edge[] = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3fffffffu, 0x00000001u,
                                  0x80008000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                  0x7f800001u, 0xffc00000u, 0x7fbfffffu, 0x00000000u, 0x80000000u};
  kiln_test_fill_f32(x, n, seed, -3.0f, 3.0f);
  for (size_t i = 0; i < n && i < sizeof(edge) / sizeof(edge[0]); ++i) memcpy(&x[i], &edge[i], 4);
}

static void casts_round(const float* x, float* y, size_t n) {
  uint16_t* h = malloc(n * sizeof(uint16_t) + 2);
  kiln_cast(KILN_F32, KILN_BF16, n, x, h);
  kiln_cast(KILN_BF16, KILN_F32, n, h, y);
  free(h);
}

/* The rule, one element at a time: nearest even, a NaN made quiet. */
static uint16_t casts_bf16_rule(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static void casts_test_cast_kernel(kiln_pool_t* pool, const char* where) {
  enum { N = 70000 }; /* above kiln_cast_parallel's chunk: split across the pool */
  float* x = malloc(N * sizeof(float));
  uint16_t* h = malloc((N + 1) * sizeof(uint16_t));
  float* r = malloc(N * sizeof(float));
  casts_fill_edges(x, N, 9);
  for (size_t i = 200; i < N; i += 97) memcpy(&x[i], &(uint32_t){0x7f800001u + (uint32_t)i}, 4);
  /* Every length 0..40 (vector bodies of 8 and 16 and every tail), from an
   * unaligned start, then the whole buffer through the parallel entry. */
  for (size_t n = 0; n <= 40; ++n)
    for (size_t off = 0; off < 3; ++off) {
      h[n] = 0xabcd; /* the element after the end stays untouched */
      kiln_cast(KILN_F32, KILN_BF16, n, x + off, h);
      for (size_t i = 0; i < n; ++i)
        KILN_EXPECT(h[i] == casts_bf16_rule(x[off + i]), "%s: cast n %zu offset %zu element %zu: %04x, want %04x",
                    where, n, off, i, h[i], casts_bf16_rule(x[off + i]));
      KILN_EXPECT(h[n] == 0xabcd, "%s: cast n %zu wrote past the end", where, n);
    }
  kiln_cast_parallel(KILN_F32, KILN_BF16, N, x, h, pool);
  size_t bad = 0;
  for (size_t i = 0; i < N; ++i) bad += h[i] != casts_bf16_rule(x[i]);
  KILN_EXPECT(bad == 0, "%s: %zu of %d cast elements differ from the rule", where, bad, N);
  /* The fused rounding's vector form, in place as a fused program may run it. */
  memcpy(r, x, N * sizeof(float));
  kiln_round_bf16_f32(N, r, r);
  bad = 0;
  for (size_t i = 0; i < N; ++i) {
    uint32_t want = (uint32_t)casts_bf16_rule(x[i]) << 16, got;
    memcpy(&got, &r[i], 4);
    bad += got != want;
  }
  KILN_EXPECT(bad == 0, "%s: %zu of %d in-place roundings differ from the rule", where, bad, N);
  free(x);
  free(h);
  free(r);
}

static void casts_test_fused_round(kiln_pool_t* pool, const char* where) {
  enum { N = 3 * 512 + 37 }; /* several tiles and a tail */
  float* x = malloc(N * sizeof(float));
  float* want = malloc(N * sizeof(float));
  float* got = malloc(N * sizeof(float));
  float* ref = malloc(N * sizeof(float));
  casts_fill_edges(x, N, 7);
  casts_round(x, want, N);
  /* y = round(x) * 1 + 0 would not be bit-exact for NaN payloads: the
   * program is a load and the rounding alone, and a second one with a
   * neighbour (x_rounded + x) checks the instruction inside a chain. */
  uint32_t code[3] = {kiln_fused_word(KILN_FUSED_LOAD, 0, 0, 0),
                      kiln_fused_word(KILN_FUSED_ROUND_BF16, 1, 0, 0),
                      kiln_fused_word(KILN_FUSED_ADD, 2, 1, 0)};
  kiln_fused_loads_t rot;
  KILN_EXPECT_OK(kiln_fused_program_validate(code, 2, 1, &rot));
  KILN_EXPECT_OK(kiln_fused_program_validate(code, 3, 1, &rot));
  kiln_eltwise_fused_args_t a;
  memset(&a, 0, sizeof(a));
  a.code = code;
  a.n_code = 2;
  a.rank = 1;
  a.shape[0] = N;
  a.n_inputs = 1;
  a.inputs[0] = x;
  a.strides[0][0] = 1;
  a.out = got;
  kiln_eltwise_fused_f32(&a, pool);
  KILN_EXPECT(casts_same_bits(got, want, N), "%s: fused ROUND_BF16 differs from the cast pair", where);
  a.out = ref;
  kiln_eltwise_fused_f32_reference(&a);
  KILN_EXPECT(casts_same_bits(ref, want, N), "%s: reference ROUND_BF16 differs from the cast pair", where);
  a.n_code = 3;
  a.out = got;
  kiln_eltwise_fused_f32(&a, pool);
  for (size_t i = 0; i < N; ++i) want[i] = want[i] + x[i];
  KILN_EXPECT(kiln_test_compare_f32(where, got, want, N, 0.0f, 0.0f) == 0, "round then add");
  free(x);
  free(want);
  free(got);
  free(ref);
}

/* C = A B over (batch 2) with A (M, K) and B (K, N) or stored (N, K). */
static void casts_test_gemm(kiln_pool_t* pool, const char* where) {
  static const int64_t sizes[][3] = {{1, 37, 21}, {5, 64, 48}, {37, 70, 33}, {130, 96, 260}};
  for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); ++c)
    for (int bt = 0; bt < 4; ++bt) {
      const int at = bt >> 1; /* A stored (K, M): the widening packer's transposed path */
      const int64_t M = sizes[c][0], K = sizes[c][1], N = sizes[c][2], B = 2;
      float* a = malloc(sizeof(float) * (size_t)(B * M * K));
      float* ar = malloc(sizeof(float) * (size_t)(B * M * K));
      uint16_t* a16 = malloc(sizeof(uint16_t) * (size_t)(B * M * K));
      float* b = malloc(sizeof(float) * (size_t)(B * K * N));
      uint16_t* b16 = malloc(sizeof(uint16_t) * (size_t)(B * K * N));
      float* bw = malloc(sizeof(float) * (size_t)(B * K * N));
      float* c1 = malloc(sizeof(float) * (size_t)(B * M * N));
      float* c2 = malloc(sizeof(float) * (size_t)(B * M * N));
      float* c3 = malloc(sizeof(float) * (size_t)(B * M * N));
      kiln_test_fill_f32(a, (size_t)(B * M * K), 11 + (unsigned)c, -1, 1);
      kiln_test_fill_f32(b, (size_t)(B * K * N), 12 + (unsigned)c, -1, 1);
      kiln_cast(KILN_F32, KILN_BF16, (size_t)(B * M * K), a, a16);
      kiln_cast(KILN_BF16, KILN_F32, (size_t)(B * M * K), a16, ar);
      kiln_cast(KILN_F32, KILN_BF16, (size_t)(B * K * N), b, b16);
      kiln_cast(KILN_BF16, KILN_F32, (size_t)(B * K * N), b16, bw);
      kiln_gemm_f32_args_t g;
      memset(&g, 0, sizeof(g));
      g.batch = B;
      g.m = M;
      g.n = N;
      g.k = K;
      g.a_batch_stride = M * K;
      g.a_row_stride = at ? 1 : K;
      g.a_col_stride = at ? M : 1;
      g.b_batch_stride = K * N;
      g.b_row_stride = bt & 1 ? 1 : N; /* stored (N, K) when transposed */
      g.b_col_stride = bt & 1 ? K : 1;
      g.c_batch_stride = M * N;
      g.c_row_stride = N;
      g.act = KILN_ACT_NONE;
      /* The unfused graph: both operands cast to bf16 (a_bf16, b_bf16:
       * python/kiln/lowp.py reads a product's operands as the bf16 tensors
       * eager reads). Where the CPU has a bf16 engine and the product is
       * large enough, it computes all of these (kiln_gemm_bf16_compute_values). */
      kiln_gemm_f32_args_t u = g;
      u.a_bf16 = a16;
      u.b_bf16 = b16;
      u.c = c1;
      kiln_gemm_f32(&u, pool);
      /* C rounded (c_round_bf16): the bits of C cast to bf16 and back. */
      kiln_gemm_f32_args_t ur = u;
      ur.c = c2;
      ur.c_round_bf16 = 1;
      kiln_gemm_f32(&ur, pool);
      casts_round(c1, c3, (size_t)(B * M * N));
      KILN_EXPECT(casts_same_bits(c2, c3, (size_t)(B * M * N)),
                  "%s: M %lld K %lld N %lld aT %d bT %d: a GEMM rounding C differs from its casts",
                  where, (long long)M, (long long)K, (long long)N, at, bt & 1);
      /* An fp32 A with a bf16 B (b_bf16) gives the bits of the widened B. */
      kiln_gemm_f32_args_t w1 = g, w2 = g;
      w1.a = w2.a = ar;
      w1.b_bf16 = b16;
      w1.c = c2;
      w2.b = bw;
      w2.c = c3;
      kiln_gemm_f32(&w1, pool);
      kiln_gemm_f32(&w2, pool);
      KILN_EXPECT(casts_same_bits(c2, c3, (size_t)(B * M * N)),
                  "%s: M %lld K %lld N %lld aT %d bT %d: a bf16 B differs from its widening",
                  where, (long long)M, (long long)K, (long long)N, at, bt & 1);
      /* Folded: A rounded as packed, B read as bf16 (fb 0) or B float32
       * rounded as packed (fb 1, b_round_bf16: at small M with a transposed
       * B, rounded into scratch for the path bw takes). */
      for (int fb = 0; fb < 2; ++fb) {
        kiln_gemm_f32_args_t f = g;
        f.a = a;
        f.a_round_bf16 = 1;
        if (fb)
          f.b = b, f.b_round_bf16 = 1;
        else
          f.b_bf16 = b16;
        f.c = c2;
        kiln_gemm_f32(&f, pool);
        KILN_EXPECT(casts_same_bits(c1, c2, (size_t)(B * M * N)),
                    "%s: M %lld K %lld N %lld aT %d bT %d b %s: folded GEMM differs from the casts",
                    where, (long long)M, (long long)K, (long long)N, at, bt & 1,
                    fb ? "rounded" : "bf16");
        /* The reference with the same flags, against the rounded operands. */
        f.c = c3;
        kiln_gemm_f32_reference(&f);
        kiln_gemm_f32_args_t r = g;
        r.a = ar;
        r.b = bw;
        r.c = c2;
        kiln_gemm_f32_reference(&r);
        KILN_EXPECT(casts_same_bits(c2, c3, (size_t)(B * M * N)), "%s: reference with flags (b %s)",
                    where, fb ? "rounded" : "bf16");
        KILN_EXPECT(kiln_test_compare_f32(where, c1, c2, (size_t)(B * M * N), 1e-5f, 1e-5f) == 0,
                    "folded GEMM against the reference");
      }
      free(a);
      free(ar);
      free(a16);
      free(b);
      free(b16);
      free(bw);
      free(c1);
      free(c2);
      free(c3);
    }
}

/* Integer widenings (typed loops): every bool, uint8, int8 and int32 value
 * kind to int64 and int32 exactly; a bool byte other than 0 reads as 1. */
static void casts_test_widen(void) {
  uint8_t u[6] = {0, 1, 2, 127, 200, 255};
  int8_t s8[6] = {0, 1, -1, 127, -128, -5};
  int32_t s32[6] = {0, 1, -1, 2147483647, -2147483647 - 1, 123456};
  int64_t w64[6];
  int32_t w32[6];
  kiln_cast(KILN_BOOL, KILN_I64, 6, u, w64);
  kiln_cast(KILN_BOOL, KILN_I32, 6, u, w32);
  for (int i = 0; i < 6; ++i)
    KILN_EXPECT(w64[i] == (u[i] != 0) && w32[i] == (u[i] != 0), "bool %u widened to %lld / %d",
                u[i], (long long)w64[i], w32[i]);
  kiln_cast(KILN_U8, KILN_I64, 6, u, w64);
  kiln_cast(KILN_U8, KILN_I32, 6, u, w32);
  for (int i = 0; i < 6; ++i)
    KILN_EXPECT(w64[i] == u[i] && w32[i] == u[i], "uint8 %u widened to %lld / %d", u[i],
                (long long)w64[i], w32[i]);
  kiln_cast(KILN_I8, KILN_I64, 6, s8, w64);
  kiln_cast(KILN_I8, KILN_I32, 6, s8, w32);
  for (int i = 0; i < 6; ++i)
    KILN_EXPECT(w64[i] == s8[i] && w32[i] == s8[i], "int8 %d widened to %lld / %d", s8[i],
                (long long)w64[i], w32[i]);
  kiln_cast(KILN_I32, KILN_I64, 6, s32, w64);
  for (int i = 0; i < 6; ++i)
    KILN_EXPECT(w64[i] == s32[i], "int32 %d widened to %lld", s32[i], (long long)w64[i]);
}

static void casts_test_level(kiln_pool_t* pool, const char* where) {
  casts_test_cast_kernel(pool, where);
  casts_test_fused_round(pool, where);
  casts_test_gemm(pool, where);
}

void kiln_test_suite_casts(void) {
  kiln_test_each_isa_and_pool(casts_test_level);
  casts_test_widen();
}
