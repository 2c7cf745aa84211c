/* Tests of the fp32 GEMM: kiln_gemm_f32 against kiln_gemm_f32_reference at
 * every ISA level the machine has (and KILN_ISA allows), on 1- and 2-thread
 * pools, over edge shapes (0, 1, tails around the 4/6/8-row and 16/32-column
 * tiles, several K blocks), transposed and strided operands, packed and
 * unpacked B, batches with broadcast operands, every epilogue, in-place
 * residuals and NaN/Inf. C is compared as a whole padded buffer, so a write
 * outside the M x N window shows up as a mismatch in the padding.
 *
 * Tolerance: inputs are uniform in [-1, 1], so each product is at most 1 in
 * magnitude and a K-term fp32 sum drifts from the double reference by about
 * eps * sqrt(K) * |partial sums| ~ 6e-8 * K / sqrt(3) in the typical case
 * (random-sign rounding errors, partial sums ~ sqrt(K / 3)): 1e-5 at
 * K = 257. atol = 1e-5 sqrt(K) + 1e-6 leaves a margin of 10x or more at the
 * sizes tested while still catching any real indexing bug (a wrong or
 * missing term is O(0.1-1)). The activations' own error (~1e-6 relative) is
 * checked separately with a tight tolerance. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kiln_test.h"

typedef struct {
  int64_t batch, m, n, k;
  int trans_a, trans_b, packed; /* packed: 1 fp32, 2 bf16 (kiln_gemm_bf16_pack_b) */
  int b_bcast, a_bcast; /* batch stride 0 */
  int bias, residual, res_alias;
  kiln_activation_t act;
  int nan_inf;
  int a16; /* A given as bf16 (a_bf16) */
} gemm_case_t;

static float* gemm_test_alloc(size_t n) {
  /* 64-byte aligned and rounded up, as the packed-B contract asks. */
  size_t bytes = ((n * sizeof(float)) + 63) & ~(size_t)63;
  return aligned_alloc(64, bytes ? bytes : 64);
}

static void gemm_test_run(const gemm_case_t* tc, kiln_pool_t* pool, const char* where) {
  const int64_t B = tc->batch, M = tc->m, N = tc->n, K = tc->k;
  /* Odd leading dimensions so that no stride equals a dimension. */
  const int64_t lda = tc->trans_a ? M + 1 : K + 3, ldb = tc->trans_b ? K + 2 : N + 1;
  const int64_t ldc = N + 2, ldr = N + 5;
  const int64_t a_mat = (tc->trans_a ? K : M) * lda, b_mat = (tc->trans_b ? N : K) * ldb;
  const int64_t c_mat = M * ldc, r_mat = M * ldr;
  size_t na = (size_t)((tc->a_bcast ? 1 : B) * a_mat) + 1;
  size_t nb = (size_t)((tc->b_bcast ? 1 : B) * b_mat) + 1;
  size_t nc = (size_t)(B * c_mat) + 1, nr = (size_t)(B * r_mat) + 1;
  float* a = gemm_test_alloc(na);
  float* b = gemm_test_alloc(nb);
  float* bias = gemm_test_alloc((size_t)N + 1);
  float* res = gemm_test_alloc(nr);
  float* c_got = gemm_test_alloc(nc);
  float* c_want = gemm_test_alloc(nc);
  size_t psize = kiln_gemm_f32_packed_size(K, N);
  float* bp = gemm_test_alloc(psize / sizeof(float) + 1);
  unsigned seed = (unsigned)(M * 7919 + N * 104729 + K * 31 + B);
  kiln_test_fill_f32(a, na, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(b, nb, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)N + 1, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(res, nr, seed + 3, -1.0f, 1.0f);
  kiln_test_fill_f32(c_got, nc, seed + 4, -1.0f, 1.0f);
  memcpy(c_want, c_got, nc * sizeof(float));
  if (tc->nan_inf && M > 0 && K > 0 && N > 0) {
    /* A NaN in one row of A, +Inf and -Inf in columns of B: rows and
     * columns they touch become NaN/Inf, the rest stay finite. */
    int64_t i = M / 2, p = K / 3, j = N - 1;
    a[tc->trans_a ? p * lda + i : i * lda + p] = NAN;
    b[tc->trans_b ? j * ldb + p : p * ldb + j] = INFINITY;
    if (N > 1) b[tc->trans_b ? 0 * ldb + (K - 1) : (K - 1) * ldb + 0] = -INFINITY;
  }

  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = B, g.m = M, g.n = N, g.k = K;
  g.a = a;
  g.a_batch_stride = tc->a_bcast ? 0 : a_mat;
  g.a_row_stride = tc->trans_a ? 1 : lda;
  g.a_col_stride = tc->trans_a ? lda : 1;
  g.b = b;
  g.b_batch_stride = tc->b_bcast ? 0 : b_mat;
  g.b_row_stride = tc->trans_b ? 1 : ldb;
  g.b_col_stride = tc->trans_b ? ldb : 1;
  g.c = c_got;
  g.c_batch_stride = c_mat;
  g.c_row_stride = ldc;
  g.bias = tc->bias ? bias : NULL;
  g.act = tc->act;
  if (tc->res_alias) {
    g.residual = c_got;
    g.r_batch_stride = c_mat;
    g.r_row_stride = ldc;
  } else if (tc->residual) {
    g.residual = res;
    g.r_batch_stride = r_mat;
    g.r_row_stride = ldr;
  }
  /* bf16 B: the reference reads the same bf16 panels (its equality with
   * fp32 on rounded weights is checked in gemm_test_bf16_semantics). */
  uint16_t* bp16 = NULL;
  if (tc->packed == 2) {
    bp16 = aligned_alloc(64, (kiln_gemm_bf16_packed_size(K, N) + 64) & ~(size_t)63);
    kiln_gemm_bf16_pack_b(K, N, b, g.b_row_stride, g.b_col_stride, bp16);
    g.b_packed_bf16 = bp16;
  }
  /* bf16 A: the test's A rounded to bf16, given only as a_bf16 (a NULL, so
   * any read of the fp32 A would crash). */
  uint16_t* a16 = NULL;
  if (tc->a16) {
    a16 = aligned_alloc(64, (na * 2 + 63) & ~(size_t)63);
    for (size_t i = 0; i < na; ++i) a16[i] = kiln_gemm_bf16_from_f32(a[i]);
    g.a = NULL;
    g.a_bf16 = a16;
  }
  kiln_gemm_f32_args_t ref = g;
  ref.c = c_want;
  if (tc->res_alias) ref.residual = c_want;
  kiln_gemm_f32_reference(&ref);
  if (tc->packed == 1) {
    kiln_gemm_f32_pack_b(K, N, b, g.b_row_stride, g.b_col_stride, bp);
    g.b_packed = bp;
  }
  kiln_gemm_f32(&g, pool);

  char what[256];
  snprintf(what, sizeof(what),
           "%s b=%lld m=%lld n=%lld k=%lld ta=%d tb=%d packed=%d bb=%d ab=%d bias=%d res=%d "
           "alias=%d act=%d naninf=%d a16=%d",
           where, (long long)B, (long long)M, (long long)N, (long long)K, tc->trans_a,
           tc->trans_b, tc->packed, tc->b_bcast, tc->a_bcast, tc->bias, tc->residual,
           tc->res_alias, (int)tc->act, tc->nan_inf, tc->a16);
  float atol = 1e-5f * sqrtf((float)K) + 1e-6f;
  kiln_test_compare_f32(what, c_got, c_want, nc, atol, 1e-5f);
  free(a);
  free(b);
  free(bias);
  free(res);
  free(c_got);
  free(c_want);
  free(bp);
  free(bp16);
  free(a16);
}

/* Activations through the API with K = 1 and B = 1: C = act(x + bias), so
 * the only error is the vectorised activation's. Tolerance: 2e-6 relative
 * (a few ulp of slack over the kernels' ~3 ulp), plus 3e-7 absolute for the
 * gelu tails, where the erff/tanhf reference itself loses relative accuracy
 * to cancellation in 1 + erf (x / sqrt 2) and 1 + tanh(u). */
static void gemm_test_activations(kiln_pool_t* pool, const char* where) {
  enum { M = 3, N = 131 };
  float a[M], b[N], bias[N], c_got[M * N], c_want[M * N];
  a[0] = 1.0f, a[1] = -1.0f, a[2] = 0.25f;
  for (int j = 0; j < N; ++j) b[j] = 1.0f;
  for (int j = 0; j < N; ++j) bias[j] = -12.0f + 24.0f * (float)j / (N - 1); /* spans 0 */
  bias[5] = 0.0f, bias[6] = 1e-4f, bias[7] = -3e-3f, bias[8] = 0.49f, bias[9] = 0.51f;
  bias[10] = 95.0f, bias[11] = -95.0f;
  for (int act = KILN_ACT_NONE; act < KILN_ACT_COUNT; ++act) {
    kiln_gemm_f32_args_t g;
    memset(&g, 0, sizeof(g));
    g.batch = 1, g.m = M, g.n = N, g.k = 1;
    g.a = a, g.a_row_stride = 1, g.a_col_stride = 1;
    g.b = b, g.b_row_stride = N, g.b_col_stride = 1;
    g.c = c_got, g.c_row_stride = N;
    g.bias = bias;
    g.act = (kiln_activation_t)act;
    kiln_gemm_f32_args_t ref = g;
    ref.c = c_want;
    kiln_gemm_f32_reference(&ref);
    kiln_gemm_f32(&g, pool);
    char what[128];
    snprintf(what, sizeof(what), "%s activation %d", where, act);
    kiln_test_compare_f32(what, c_got, c_want, M * N, 3e-7f, 2e-6f);
  }
}

static void gemm_test_level(kiln_pool_t* pool, const char* where) {
  gemm_case_t tc;
  /* Shape grid around every tile edge (MR 4/6/8, NR 16/32, K tails). */
  static const int64_t ms[] = {1, 3, 7, 8, 9, 17, 64};
  static const int64_t ns[] = {1, 15, 16, 17, 33};
  static const int64_t ks[] = {1, 7, 16, 31, 257};
  for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); ++im)
    for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); ++in)
      for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ++ik) {
        memset(&tc, 0, sizeof(tc));
        tc.batch = 1, tc.m = ms[im], tc.n = ns[in], tc.k = ks[ik];
        tc.packed = (im + in + ik) % 2;
        tc.trans_a = (im + ik) % 3 == 0;
        tc.trans_b = (in + ik) % 3 == 1;
        gemm_test_run(&tc, pool, where);
      }
  /* Empty dimensions; K = 0 still applies the epilogue. */
  static const int64_t zero[][3] = {{0, 5, 5}, {5, 0, 5}, {5, 5, 0}, {0, 0, 0}, {17, 33, 0}};
  for (size_t z = 0; z < sizeof(zero) / sizeof(zero[0]); ++z) {
    memset(&tc, 0, sizeof(tc));
    tc.batch = 2, tc.m = zero[z][0], tc.n = zero[z][1], tc.k = zero[z][2];
    tc.bias = tc.residual = 1;
    tc.act = KILN_ACT_GELU;
    gemm_test_run(&tc, pool, where);
    tc.residual = 0, tc.res_alias = 1, tc.act = KILN_ACT_SIGMOID;
    gemm_test_run(&tc, pool, where);
  }
  /* Bigger shapes: several M tiles, several K blocks (K > 256), N strips. */
  static const int64_t big[][3] = {{100, 257, 300}, {300, 100, 513}, {150, 64, 64}, {33, 500, 260}};
  for (size_t s = 0; s < sizeof(big) / sizeof(big[0]); ++s)
    for (int v = 0; v < 4; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = 1, tc.m = big[s][0], tc.n = big[s][1], tc.k = big[s][2];
      tc.trans_a = v & 1, tc.trans_b = (v >> 1) & 1, tc.packed = v == 2;
      tc.bias = v == 3;
      gemm_test_run(&tc, pool, where);
    }
  /* Batches: broadcast B (packed or not), per-batch B, broadcast A. */
  static const int64_t bshape[][3] = {{5, 33, 40}, {40, 20, 300}, {2, 64, 17}};
  for (size_t s = 0; s < sizeof(bshape) / sizeof(bshape[0]); ++s)
    for (int v = 0; v < 4; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = 3, tc.m = bshape[s][0], tc.n = bshape[s][1], tc.k = bshape[s][2];
      tc.b_bcast = v != 1;
      tc.packed = v == 2;
      tc.a_bcast = v == 3;
      tc.trans_b = v == 1;
      tc.residual = v >= 2;
      tc.bias = 1;
      tc.act = v == 3 ? KILN_ACT_RELU : KILN_ACT_NONE;
      gemm_test_run(&tc, pool, where);
    }
  /* Every epilogue, on the blocked path (one and several K blocks) and the
   * GEMV path, with a separate and an in-place residual. */
  static const int64_t eshape[][3] = {{33, 47, 70}, {17, 40, 600}, {5, 47, 70}, {1, 100, 300}};
  for (int act = KILN_ACT_NONE; act < KILN_ACT_COUNT; ++act)
    for (size_t s = 0; s < sizeof(eshape) / sizeof(eshape[0]); ++s)
      for (int alias = 0; alias < 2; ++alias) {
        memset(&tc, 0, sizeof(tc));
        tc.batch = 2, tc.m = eshape[s][0], tc.n = eshape[s][1], tc.k = eshape[s][2];
        tc.b_bcast = 1, tc.packed = (int)s % 2;
        tc.bias = act % 2 == 0 || alias;
        tc.residual = !alias, tc.res_alias = alias;
        tc.act = (kiln_activation_t)act;
        gemm_test_run(&tc, pool, where);
      }
  /* NaN and Inf propagate to exactly the elements the reference says. */
  static const int64_t nshape[][3] = {{9, 40, 20}, {3, 17, 300}, {70, 33, 520}};
  for (size_t s = 0; s < sizeof(nshape) / sizeof(nshape[0]); ++s)
    for (int v = 0; v < 2; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = 1, tc.m = nshape[s][0], tc.n = nshape[s][1], tc.k = nshape[s][2];
      tc.nan_inf = 1, tc.packed = v, tc.bias = v, tc.act = v ? KILN_ACT_RELU : KILN_ACT_NONE;
      gemm_test_run(&tc, pool, where);
    }
  /* Training layouts: unpacked B packed by the compute tasks themselves,
   * at small M and across several M blocks (M > 144), with tails of the
   * 256-column block, of the 16-column panels and of the 8- and 16-row
   * transposes of a transposed B; transposed A (the weight gradient's
   * dY^T, with a small K), K = 1, epilogues, in-place residuals with
   * several K blocks, and NaN/Inf on that path; a tall A beside a narrow B
   * (600 x 40) keeps the shared pre-pack. */
  static const int64_t tshape[][3] = {{64, 300, 520}, {150, 47, 64}, {145, 17, 300},
                                      {144, 33, 257}, {9, 529, 1},   {300, 260, 40},
                                      {13, 1, 70},    {7, 280, 23},  {600, 40, 300}};
  for (size_t s = 0; s < sizeof(tshape) / sizeof(tshape[0]); ++s)
    for (int v = 0; v < 4; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = 1, tc.m = tshape[s][0], tc.n = tshape[s][1], tc.k = tshape[s][2];
      tc.trans_a = v & 1, tc.trans_b = (v >> 1) & 1;
      tc.bias = v == 3, tc.act = v == 3 ? KILN_ACT_GELU : KILN_ACT_NONE;
      tc.residual = v == 1, tc.res_alias = v == 2;
      gemm_test_run(&tc, pool, where);
      if (v == 1 || v == 2) {
        tc.nan_inf = 1;
        gemm_test_run(&tc, pool, where);
      }
    }
  /* Per-batch unpacked B (batched matmul) on the same path. */
  for (int v = 0; v < 2; ++v) {
    memset(&tc, 0, sizeof(tc));
    tc.batch = 3, tc.m = v ? 150 : 20, tc.n = 40, tc.k = 300;
    tc.trans_a = v, tc.trans_b = !v, tc.res_alias = 1, tc.bias = 1;
    gemm_test_run(&tc, pool, where);
  }
  /* The small-M GEMV over an unpacked B stored transposed (a weight W(N, K)
   * given at run time, read in place as dot products): rows around the
   * 2-row tiles, columns around the 4-column tiles and 16-column blocks, K
   * around the 8- and 16-float steps, epilogues, in-place residuals,
   * per-batch and broadcast B, NaN/Inf, bf16 A. */
  static const int64_t nts[][3] = {{1, 1, 1},   {1, 3, 7},    {1, 4, 8},    {1, 5, 15},
                                   {1, 17, 16}, {2, 33, 17},  {3, 100, 31}, {4, 7, 24},
                                   {7, 16, 257}, {8, 47, 1030}, {5, 1, 40},  {6, 130, 33}};
  for (size_t s = 0; s < sizeof(nts) / sizeof(nts[0]); ++s)
    for (int v = 0; v < 4; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = v >= 2 ? 2 : 1, tc.b_bcast = v == 3;
      tc.m = nts[s][0], tc.n = nts[s][1], tc.k = nts[s][2];
      tc.trans_b = 1, tc.trans_a = v == 2;
      tc.bias = v & 1, tc.residual = v == 1, tc.res_alias = v == 3;
      tc.act = v == 3 ? KILN_ACT_GELU : KILN_ACT_NONE;
      gemm_test_run(&tc, pool, where);
      tc.nan_inf = 1;
      gemm_test_run(&tc, pool, where);
      tc.nan_inf = 0, tc.a16 = 1;
      gemm_test_run(&tc, pool, where);
    }
  /* bf16 weights: both paths (GEMV M <= 8, blocked), tails, K blocks,
   * epilogues, broadcast batches, NaN/Inf. */
  static const int64_t hs[][3] = {{1, 1, 1},    {1, 17, 7},   {3, 33, 257}, {5, 16, 300},
                                  {8, 47, 31},  {9, 15, 16},  {17, 33, 300}, {64, 17, 257},
                                  {100, 257, 300}, {33, 500, 260}, {7, 64, 1}};
  for (size_t s = 0; s < sizeof(hs) / sizeof(hs[0]); ++s)
    for (int v = 0; v < 3; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = v == 2 ? 2 : 1, tc.b_bcast = 1;
      tc.m = hs[s][0], tc.n = hs[s][1], tc.k = hs[s][2];
      tc.packed = 2;
      tc.trans_a = v == 1, tc.trans_b = v != 0;
      tc.bias = v > 0, tc.residual = v == 2;
      tc.act = v == 1 ? KILN_ACT_GELU : KILN_ACT_NONE;
      gemm_test_run(&tc, pool, where);
      tc.nan_inf = 1;
      gemm_test_run(&tc, pool, where);
      /* bf16 activations too (with bf16 or fp32 B). */
      tc.a16 = 1, tc.nan_inf = v == 0;
      gemm_test_run(&tc, pool, where);
      tc.packed = v == 2 ? 0 : 1;
      gemm_test_run(&tc, pool, where);
    }
  gemm_test_activations(pool, where);
}

/* What bf16 weights mean: the GEMM over kiln_gemm_bf16_pack_b's panels
 * equals the fp32 GEMM over B rounded to bf16 (exactly, in the reference:
 * widening is exact), and the rounding is torch's: nearest even, NaN kept,
 * Inf kept, overflow to Inf. */
static void gemm_test_bf16_semantics(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000u, 0x3f80}, /* 1 */
      {0x3f808000u, 0x3f80}, /* tie, even below: down */
      {0x3f818000u, 0x3f82}, /* tie, odd below: up */
      {0x3f808001u, 0x3f81}, /* just above a tie: up */
      {0x7f800000u, 0x7f80}, /* +Inf */
      {0xff800000u, 0xff80}, /* -Inf */
      {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to Inf */
      {0x80000000u, 0x8000}, /* -0 */
      {0x00000001u, 0x0000}, /* smallest subnormal: to 0 */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    float f;
    memcpy(&f, &cases[i].in, 4);
    KILN_EXPECT(kiln_gemm_bf16_from_f32(f) == cases[i].out, "bf16 rounding of 0x%08x",
                (unsigned)cases[i].in);
  }
  uint16_t nan16 = kiln_gemm_bf16_from_f32(NAN);
  KILN_EXPECT(isnan(kiln_gemm_bf16_to_f32(nan16)), "bf16 NaN stays NaN");
  /* A NaN whose payload is only in the low bits must not become Inf. */
  uint32_t low_nan = 0x7f800001u;
  float fl;
  memcpy(&fl, &low_nan, 4);
  KILN_EXPECT(isnan(kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(fl))), "low-payload NaN");
  KILN_EXPECT(kiln_gemm_bf16_packed_size(3, 17) == 3 * 32 * 2, "bf16 packed size");

  enum { M = 5, N = 37, K = 70 };
  float a[M * K], b[K * N], br[K * N], c1[M * N], c2[M * N];
  kiln_test_fill_f32(a, M * K, 11, -1.0f, 1.0f);
  kiln_test_fill_f32(b, K * N, 12, -1.0f, 1.0f);
  for (int i = 0; i < K * N; ++i) br[i] = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(b[i]));
  uint16_t* bp16 = aligned_alloc(64, (kiln_gemm_bf16_packed_size(K, N) + 63) & ~(size_t)63);
  kiln_gemm_bf16_pack_b(K, N, b, N, 1, bp16);
  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = 1, g.m = M, g.n = N, g.k = K;
  g.a = a, g.a_row_stride = K, g.a_col_stride = 1;
  g.b = br, g.b_row_stride = N, g.b_col_stride = 1;
  g.c = c1, g.c_row_stride = N;
  kiln_gemm_f32_reference(&g);
  g.b = NULL, g.b_packed_bf16 = bp16, g.c = c2;
  kiln_gemm_f32_reference(&g);
  kiln_test_compare_f32("bf16 packed = fp32 on rounded B", c2, c1, M * N, 0.0f, 0.0f);
  free(bp16);
}

/* A weight packs to the same bytes at every ISA level (the layout is part
 * of the .kiln format; each level packs with its own block packer): B
 * row-major and stored transposed (nn.Linear's W), partial last panels,
 * K tails around the 8- and 16-row register transposes. */
static void gemm_test_pack_same_bytes(kiln_pool_t* pool, const char* where) {
  (void)pool;
  static const int64_t shapes[][2] = {{1, 1}, {7, 16}, {16, 33}, {31, 17}, {64, 48}, {1000, 40}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int transposed = 0; transposed < 2; ++transposed) {
      int64_t k = shapes[i][0], n = shapes[i][1];
      size_t bytes = kiln_gemm_f32_packed_size(k, n);
      float* b = gemm_test_alloc((size_t)(k * n));
      float* got = gemm_test_alloc(bytes / sizeof(float));
      float* want = gemm_test_alloc(bytes / sizeof(float));
      if (!b || !got || !want) goto next;
      kiln_test_fill_f32(b, (size_t)(k * n), (unsigned)(k + n), -1.0f, 1.0f);
      int64_t rs = transposed ? 1 : n, cs = transposed ? k : 1;
      memset(got, 0xAB, bytes);
      kiln_gemm_f32_pack_b(k, n, b, rs, cs, got);
      kiln_isa_t level = kiln_cpu_isa();
      kiln_cpu_isa_set(KILN_ISA_GENERIC);
      memset(want, 0xCD, bytes);
      kiln_gemm_f32_pack_b(k, n, b, rs, cs, want);
      kiln_cpu_isa_set(level);
      KILN_EXPECT(!memcmp(got, want, bytes), "%s pack_b %lldx%lld%s: bytes differ from generic's",
                  where, (long long)k, (long long)n, transposed ? " transposed" : "");
    next:
      free(b);
      free(got);
      free(want);
    }
}

void kiln_test_suite_gemm(void) {
  kiln_test_each_isa_and_pool(gemm_test_level);
  kiln_test_each_isa_and_pool(gemm_test_pack_same_bytes);
  gemm_test_bf16_semantics();
  /* The packed size: whole 16-column panels. */
  KILN_EXPECT(kiln_gemm_f32_packed_size(3, 17) == 3 * 32 * sizeof(float), "packed size");
  KILN_EXPECT(kiln_gemm_f32_packed_size(0, 17) == 0, "packed size of empty B");
}
