/* bf16 compute GEMM (kiln_gemm_bf16_vnni_pack_b weights): every path this
 * machine has, each forced on in turn, against a direct double-precision
 * product of the bf16-rounded A and B, on edge shapes (M 1, 2, 15, 16, 17,
 * 33 around the 8- and 16/32-row tiles; N tails 1, 15, 17, 31, 33 around
 * the 16/32-column strips; K 1, 2, odd K, tails around AMX's 32-K steps and
 * the fp32 driver's 256-K blocks), with and without bias, activation and
 * residual (also in place), NaN and Inf, strided A and C, a batch.
 *
 * The same for products of two bf16 graph values (bf16c_values: B packed
 * at run time, A and B in every orientation a training step reads).
 *
 * Paths: "amx" (KILN_CPU_BF16_AMX only), "avx512_bf16" (KILN_CPU_BF16_AVX512
 * only), and with both masked off the fp32 kernels at each ISA level
 * ("avx512", "avx2", "generic") reading the same weights widened. A path
 * the CPU (or the OS, for AMX) lacks is reported as skipped, not passed.
 * Each run also checks, through kiln_gemm_bf16_last_engine, that the path
 * asked for is the one that ran.
 *
 * Rounded C (c_round_bf16, a folded cast of C to bf16 and back): every
 * case runs again with it, C starting from the same bytes, on the same
 * path; each element of its M x N must be, bit for bit, the first run's
 * rounded by kiln_gemm_bf16_from_f32's rule (the same path sums in the same
 * order, so the rounding is all that differs), the elements around it
 * untouched. The same for the double reference.
 *
 * Tolerance: products of two bf16 are exact in fp32, so the kernels differ
 * from the double reference only by fp32 summation (order, and AMX's and
 * VDPBF16PS's internal pairing): inputs in [-1, 1] give ~6e-8 sqrt(K)
 * typical error; atol 1e-5 sqrt(K) + 1e-6, rtol 1e-5 keep a 10x margin. Not
 * rounding A (or rounding it by truncation) moves each product by up to
 * 2^-9 relative, ~1e-3 on these sums, and fails. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

typedef struct {
  int64_t batch, m, n, k;
  int bias, residual, res_alias, nan_inf, a16;
  kiln_activation_t act;
} bf16c_case_t;

static float bf16c_round(float x) { return kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x)); }

static void* bf16c_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }

/* g run again with c_round_bf16 on a copy `c_init` of C's bytes before the
 * first run (n_c floats in all; g->c's M x N sits in it): each element
 * must be the first run's (`plain`) rounded, bit for bit, and C's other
 * bytes unchanged. `ref`: the double reference instead of kiln_gemm_f32. */
static void bf16c_check_round(const kiln_gemm_f32_args_t* g, const float* plain,
                              const float* c_init, size_t n_c, int ref, kiln_pool_t* pool,
                              const char* what) {
  float* c = bf16c_alloc(n_c * 4);
  memcpy(c, c_init, n_c * 4);
  kiln_gemm_f32_args_t r = *g;
  if (r.residual == g->c) r.residual = c; /* the residual was C itself */
  r.c = c;
  r.c_round_bf16 = 1;
  if (ref)
    kiln_gemm_f32_reference(&r);
  else
    kiln_gemm_f32(&r, pool);
  char* inside = calloc(n_c, 1);
  int bad = 0;
  for (int64_t b = 0; b < g->batch; ++b)
    for (int64_t i = 0; i < g->m; ++i)
      for (int64_t j = 0; j < g->n; ++j) {
        size_t at = (size_t)(b * g->c_batch_stride + i * g->c_row_stride + j);
        inside[at] = 1;
        uint32_t want, got;
        float w = bf16c_round(plain[at]);
        memcpy(&want, &w, 4);
        memcpy(&got, &c[at], 4);
        bad += want != got;
      }
  for (size_t at = 0; at < n_c; ++at) bad += !inside[at] && memcmp(&c[at], &c_init[at], 4) != 0;
  KILN_EXPECT(bad == 0, "%s%s: %d elements of the rounded C are not the product rounded",
              ref ? "reference " : "", what, bad);
  free(inside);
  free(c);
}

static int bf16c_run(const bf16c_case_t* tc, kiln_pool_t* pool, const char* path) {
  const int64_t B = tc->batch, M = tc->m, N = tc->n, K = tc->k;
  const int64_t lda = K + 3, ldc = N + 2, ldr = N + 5; /* no stride equals a dimension */
  size_t na = (size_t)(B * M * lda) + 1, nb = (size_t)(K * N) + 1;
  size_t nc = (size_t)(B * M * ldc) + 1, nr = (size_t)(B * M * ldr) + 1;
  float* a = bf16c_alloc(na * 4);
  float* b = bf16c_alloc(nb * 4); /* nn.Linear's W (N, K): B = W^T */
  float* bias = bf16c_alloc((size_t)N * 4 + 4);
  float* res = bf16c_alloc(nr * 4);
  float* c_got = bf16c_alloc(nc * 4);
  float* c_want = bf16c_alloc(nc * 4);
  float* c_ref = bf16c_alloc(nc * 4);
  uint16_t* bp = bf16c_alloc(kiln_gemm_bf16_vnni_packed_size(K, N));
  uint16_t* a16 = tc->a16 ? bf16c_alloc(na * 2) : NULL;
  unsigned seed = (unsigned)(M * 7919 + N * 104729 + K * 31 + B);
  kiln_test_fill_f32(a, na, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(b, nb, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)N + 1, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(res, nr, seed + 3, -1.0f, 1.0f);
  kiln_test_fill_f32(c_got, nc, seed + 4, -1.0f, 1.0f);
  if (tc->nan_inf) {
    a[(M / 2) * lda + K / 3] = NAN;
    b[(N - 1) * K + K / 3] = INFINITY;
    if (N > 1) b[0 * K + (K - 1)] = -INFINITY;
  }
  memcpy(c_want, c_got, nc * 4);
  memcpy(c_ref, c_got, nc * 4);
  float* c_init = bf16c_alloc(nc * 4);
  memcpy(c_init, c_got, nc * 4);
  if (a16)
    for (size_t i = 0; i < na; ++i) a16[i] = kiln_gemm_bf16_from_f32(a[i]);
  kiln_gemm_bf16_vnni_pack_b(K, N, b, 1, K, bp);

  /* The contract, straight from the unpacked operands. */
  for (int64_t bt = 0; bt < B; ++bt)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < K; ++p)
          acc += (double)bf16c_round(a[bt * M * lda + i * lda + p]) * bf16c_round(b[j * K + p]);
        float x = (float)acc;
        if (tc->bias) x += bias[j];
        x = kiln_activation_scalar(x, tc->act);
        float* c = c_want + bt * M * ldc + i * ldc + j;
        if (tc->res_alias) x += *c;
        else if (tc->residual) x += res[bt * M * ldr + i * ldr + j];
        *c = x;
      }

  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = B, g.m = M, g.n = N, g.k = K;
  g.a = a16 ? NULL : a;
  g.a_bf16 = a16;
  g.a_batch_stride = M * lda, g.a_row_stride = lda, g.a_col_stride = 1;
  g.b_packed_bf16_vnni = bp;
  g.c = c_got, g.c_batch_stride = M * ldc, g.c_row_stride = ldc;
  g.bias = tc->bias ? bias : NULL;
  g.act = tc->act;
  if (tc->res_alias) {
    g.residual = c_got, g.r_batch_stride = M * ldc, g.r_row_stride = ldc;
  } else if (tc->residual) {
    g.residual = res, g.r_batch_stride = M * ldr, g.r_row_stride = ldr;
  }
  kiln_gemm_f32_args_t ref = g;
  ref.c = c_ref;
  if (tc->res_alias) ref.residual = c_ref;
  kiln_gemm_f32_reference(&ref);
  kiln_gemm_f32(&g, pool);

  char what[256];
  snprintf(what, sizeof(what),
           "[%s, %d thr] b=%lld m=%lld n=%lld k=%lld bias=%d res=%d alias=%d act=%d naninf=%d "
           "a16=%d",
           path, kiln_pool_size(pool), (long long)B, (long long)M, (long long)N, (long long)K,
           tc->bias, tc->residual, tc->res_alias, (int)tc->act, tc->nan_inf, tc->a16);
  float atol = 1e-5f * sqrtf((float)K) + 1e-6f;
  int bad = kiln_test_compare_f32(what, c_got, c_want, nc, atol, 1e-5f);
  char what_ref[300];
  snprintf(what_ref, sizeof(what_ref), "reference %s", what);
  kiln_test_compare_f32(what_ref, c_ref, c_want, nc, atol, 1e-5f);
  const char* ran = kiln_gemm_bf16_last_engine();
  KILN_EXPECT(!strcmp(ran, path), "%s: ran %s", what, ran);
  bf16c_check_round(&g, c_got, c_init, nc, 0, pool, what);
  bf16c_check_round(&ref, c_ref, c_init, nc, 1, pool, what);
  free(c_init);
  free(a), free(b), free(bias), free(res), free(c_got), free(c_want), free(c_ref), free(bp);
  free(a16);
  return bad;
}

static void bf16c_path(kiln_pool_t* pool, const char* path) {
  static const int64_t ms[] = {1, 2, 15, 16, 17, 33};
  static const int64_t ns[] = {1, 15, 17, 31, 33};
  static const int64_t ks[] = {1, 2, 31, 33, 64, 67};
  bf16c_case_t tc;
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
        bf16c_run(&tc, pool, path);
      }
  /* Larger: several strips, M blocks and K blocks (the fp32 driver's 256),
   * a batch, bf16 A, NaN/Inf, every epilogue piece at once; 450 x 1536
   * (one strip) makes 3 row blocks of 160, which 2 threads share as 4 of
   * 128. */
  static const int64_t big[][4] = {{1, 300, 100, 333}, {2, 70, 65, 257}, {1, 129, 257, 96},
                                   {1, 5, 70, 1000}, {1, 450, 24, 1536}};
  for (size_t z = 0; z < sizeof(big) / sizeof(big[0]); ++z)
    for (int v = 0; v < 3; ++v) {
      memset(&tc, 0, sizeof(tc));
      tc.batch = big[z][0], tc.m = big[z][1], tc.n = big[z][2], tc.k = big[z][3];
      tc.bias = 1;
      tc.act = v == 1 ? KILN_ACT_SILU : KILN_ACT_NONE;
      tc.residual = v == 1;
      tc.res_alias = v == 2;
      tc.nan_inf = v == 2;
      tc.a16 = v == 1;
      bf16c_run(&tc, pool, path);
    }
  /* NaN/Inf on small tiles too. */
  memset(&tc, 0, sizeof(tc));
  tc.batch = 1, tc.m = 17, tc.n = 33, tc.k = 67, tc.nan_inf = 1, tc.bias = 1;
  bf16c_run(&tc, pool, path);
}

/* Two bf16 graph values (kiln_gemm_bf16_compute_values: autocast's
 * products, B packed at run time): A row-major, transposed (dY^T of dW) or
 * with neither stride 1; B with contiguous rows (x W, dY W), contiguous
 * columns (x W^T) or neither; each given as bf16 or as fp32 rounded as it
 * is packed (a folded cast); B shared by the batch or one per batch. The
 * bf16 and rounded forms pack the same panels, so their results must be
 * the same bits; both must match the double product of the rounded
 * operands (tolerance as above). `engine`: a bf16 engine is on, so a
 * product of at least 16 rows and 2^18 multiply-adds must take it. */
static void bf16c_values_run(kiln_pool_t* pool, const char* path, int engine, int64_t B, int64_t M,
                             int64_t N, int64_t K, int ao, int bo, int b_shared) {
  /* Element (i, p) of A at i * ars + p * acs; (p, j) of B at p * brs + j * bcs. */
  int64_t ars = ao == 0 ? K + 1 : ao == 1 ? 1 : 2 * K + 3, acs = ao == 0 ? 1 : ao == 1 ? M + 2 : 2;
  int64_t brs = bo == 0 ? N + 3 : bo == 1 ? 1 : 2, bcs = bo == 0 ? 1 : bo == 1 ? K + 1 : 2 * K + 1;
  size_t a_span = (size_t)((M - 1) * ars + (K - 1) * acs + 1);
  size_t b_span = (size_t)((K - 1) * brs + (N - 1) * bcs + 1);
  int64_t bbs = b_shared ? 0 : (int64_t)b_span;
  size_t na = (size_t)B * a_span, nb = (size_t)(b_shared ? 1 : B) * b_span, nc = (size_t)(B * M * N);
  float* a = bf16c_alloc(na * 4);
  float* b = bf16c_alloc(nb * 4);
  uint16_t* a16 = bf16c_alloc(na * 2);
  uint16_t* b16 = bf16c_alloc(nb * 2);
  float* c1 = bf16c_alloc(nc * 4);
  float* c2 = bf16c_alloc(nc * 4);
  float* want = bf16c_alloc(nc * 4);
  unsigned seed = (unsigned)(M * 31 + N * 17 + K * 7 + (uint64_t)ao * 3 + (uint64_t)bo);
  kiln_test_fill_f32(a, na, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(b, nb, seed + 1, -1.0f, 1.0f);
  for (size_t i = 0; i < na; ++i) a16[i] = kiln_gemm_bf16_from_f32(a[i]);
  for (size_t i = 0; i < nb; ++i) b16[i] = kiln_gemm_bf16_from_f32(b[i]);
  for (int64_t t = 0; t < B; ++t)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < K; ++p)
          acc += (double)bf16c_round(a[t * (int64_t)a_span + i * ars + p * acs]) *
                 bf16c_round(b[t * bbs + p * brs + j * bcs]);
        want[(t * M + i) * N + j] = (float)acc;
      }
  kiln_gemm_f32_args_t g;
  memset(&g, 0, sizeof(g));
  g.batch = B, g.m = M, g.n = N, g.k = K;
  g.a_batch_stride = (int64_t)a_span, g.a_row_stride = ars, g.a_col_stride = acs;
  g.b_batch_stride = bbs, g.b_row_stride = brs, g.b_col_stride = bcs;
  g.c_batch_stride = M * N, g.c_row_stride = N;
  kiln_gemm_f32_args_t x = g, y = g; /* x: both bf16; y: both fp32 rounded as packed */
  x.a_bf16 = a16, x.b_bf16 = b16, x.c = c1;
  y.a = a, y.a_round_bf16 = 1, y.b = b, y.b_round_bf16 = 1, y.c = c2;
  int took = kiln_gemm_bf16_compute_values(&x, pool);
  int expect = engine && M >= 16 && M * N * K >= ((int64_t)1 << 18);
  if (!took) kiln_gemm_f32(&x, pool);
  kiln_gemm_f32(&y, pool);
  char what[200];
  snprintf(what, sizeof what, "[%s, %d thr] values b=%lld m=%lld n=%lld k=%lld a%d b%d shared=%d",
           path, kiln_pool_size(pool), (long long)B, (long long)M, (long long)N, (long long)K, ao,
           bo, b_shared);
  KILN_EXPECT(took == expect, "%s: bf16 engine %s", what, took ? "took it" : "declined");
  KILN_EXPECT(memcmp(c1, c2, nc * 4) == 0, "%s: bf16 operands and rounded ones differ", what);
  kiln_test_compare_f32(what, c1, want, nc, 1e-5f * sqrtf((float)K) + 1e-6f, 1e-5f);
  /* C rounded (autocast's weight gradient: dW's C read back in float32). */
  float* c_init = bf16c_alloc(nc * 4);
  memset(c_init, 0x5a, nc * 4);
  bf16c_check_round(&y, c2, c_init, nc, 0, pool, what);
  free(c_init);
  free(a), free(b), free(a16), free(b16), free(c1), free(c2), free(want);
}

static void bf16c_values(kiln_pool_t* pool, const char* path, int engine) {
  static const int64_t shapes[][4] = {{1, 64, 96, 64},  {1, 130, 260, 96}, {1, 17, 33, 1001},
                                      {2, 48, 40, 257}, {3, 33, 47, 250},  {1, 16, 16, 16}};
  for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); ++z)
    for (int ao = 0; ao < 3; ++ao)
      for (int bo = 0; bo < 3; ++bo)
        bf16c_values_run(pool, path, engine, shapes[z][0], shapes[z][1], shapes[z][2],
                         shapes[z][3], ao, bo, (int)((z + (size_t)ao + (size_t)bo) % 2));
  /* Products too large for a task per batch: the batches one after another,
   * B packed for each. */
  bf16c_values_run(pool, path, engine, 2, 256, 256, 300, 1, 0, 0);
}

static void bf16c_each_pool(const char* path) {
  for (int t = 1; t <= 2; ++t) {
    kiln_pool_t* pool = NULL;
    KILN_EXPECT_OK(kiln_pool_create(t, &pool));
    if (!pool) continue;
    bf16c_path(pool, path);
    bf16c_values(pool, path, kiln_cpu_bf16() != 0);
    kiln_pool_release(pool);
  }
}

/* Through the compiler: compute_bf16 packs a LINEAR's weight as
 * KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI and the model computes the bf16
 * contract (y = round(x) round(W) + b, tolerance as above); a constant of
 * that layout with the wrong byte count is refused by the CPU target. */
static void bf16c_compile(void) {
  enum { M = 5, K = 41, N = 23 };
  static float w[K * N], bias[N], x[M * K], want[M * N], got[M * N];
  kiln_test_fill_f32(w, K * N, 31, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, N, 32, -0.5f, 0.5f);
  kiln_test_fill_f32(x, M * K, 33, -1, 1);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int p = 0; p < K; ++p) acc += (double)bf16c_round(x[i * K + p]) * bf16c_round(w[p * N + j]);
      want[i * N + j] = (float)acc + bias[j];
    }
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t sx[2] = {M, K}, sw[2] = {K, N}, sb[1] = {N};
  int32_t vx, vw, vb, mm, out;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias, sizeof bias, &vb));
  int32_t i1[2] = {vx, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
  int32_t i2[2] = {mm, vb};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &out));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.compute_bf16 = 1;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  const kiln_value_t* wv = &compiled->values[compiled->nodes[0].inputs[1]];
  KILN_EXPECT(compiled->n_nodes == 1 && wv->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI &&
                  wv->nbytes == kiln_gemm_bf16_vnni_packed_size(K, N),
              "weight packed for bf16 compute (layout %d, %zu bytes)", (int)wv->layout, wv->nbytes);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (m) {
    int64_t sy[2] = {M, N};
    kiln_tensor_t in = {x, KILN_F32, 2, sx}, outt = {got, KILN_F32, 2, sy};
    KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &outt, 1));
    kiln_test_compare_f32("compiled bf16-compute linear", got, want, M * N, 1e-4f, 1e-5f);
    kiln_model_release(m);
  }
  /* A hostile size. */
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  static uint16_t packed[(K + 1) * 32];
  int32_t y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI,
                                         packed, sizeof packed - 64, &vw));
  int32_t in[2] = {vx, vw};
  const int64_t p[1] = {KILN_ACT_NONE};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, 1, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  m = NULL;
  KILN_EXPECT_ERROR(kiln_model_create(g, NULL, NULL, &m), KILN_INVALID_ARGUMENT);
  KILN_EXPECT(m == NULL, "no model from a short bf16-compute weight");
}

/* A bf16 model's linear layer: x is bf16 and the weight holds bf16 values,
 * so the CPU target asks for the VNNI form unasked (the products do not
 * change), but only for a LINEAR with a bf16 x and a weight whose every
 * element is a bf16 value; the results are the exact products summed in
 * fp32 either way. Cases: 0 one bf16-x reader; 1 the same weight read by a
 * float32 x too (that LINEAR gets its own fp32 panels); 2 a weight with one
 * element that is not a bf16 value. */
static void bf16c_compile_bf16_x(int which) {
  enum { M = 4, K = 37, N = 21 };
  static float w[K * N], x[M * K], x2[M * K], want[M * N], want2[M * N], got[M * N], got2[M * N];
  static uint16_t xb[M * K];
  kiln_test_fill_f32(w, K * N, 41, -0.5f, 0.5f);
  kiln_test_fill_f32(x, M * K, 42, -1, 1);
  kiln_test_fill_f32(x2, M * K, 43, -1, 1);
  for (int i = 0; i < K * N; ++i) w[i] = bf16c_round(w[i]);
  if (which == 2) w[7] = 0.1f; /* not a bf16 value */
  for (int i = 0; i < M * K; ++i) {
    xb[i] = kiln_gemm_bf16_from_f32(x[i]);
    x[i] = kiln_gemm_bf16_to_f32(xb[i]);
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0, acc2 = 0;
      for (int p = 0; p < K; ++p) {
        acc += (double)x[i * K + p] * w[p * N + j];
        acc2 += (double)x2[i * K + p] * w[p * N + j];
      }
      want[i * N + j] = (float)acc;
      want2[i * N + j] = (float)acc2;
    }
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t sx[2] = {M, K}, sw[2] = {K, N};
  int32_t vx, vx2, vw, outs[2];
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_BF16, 2, sx, &vx));
  if (which == 1) KILN_EXPECT_OK(kiln_graph_add_input(g, "x2", KILN_F32, 2, sx, &vx2));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  int32_t i1[2] = {vx, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &outs[0]));
  if (which == 1) {
    int32_t i2[2] = {vx2, vw};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i2, 2, NULL, 0, NULL, 0, NULL, &outs[1]));
  }
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, outs, which == 1 ? 2 : 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  for (int32_t ni = 0; ni < compiled->n_nodes; ++ni) {
    const kiln_node_t* nd = &compiled->nodes[ni];
    const kiln_value_t* wv = &compiled->values[nd->inputs[1]];
    int bf16_x = compiled->values[nd->inputs[0]].dtype == KILN_BF16;
    kiln_layout_t want_layout = bf16_x && which != 2 ? KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI
                                                     : KILN_LAYOUT_GEMM_PACKED_B;
    KILN_EXPECT(nd->op == KILN_OP_LINEAR && wv->layout == want_layout,
                "case %d, node %d: weight layout %d, want %d", which, ni, (int)wv->layout,
                (int)want_layout);
  }
  KILN_EXPECT(compiled->n_nodes == (which == 1 ? 2 : 1), "case %d: %d nodes", which, compiled->n_nodes);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (m) {
    int64_t sy[2] = {M, N};
    kiln_tensor_t in[2] = {{xb, KILN_BF16, 2, sx}, {x2, KILN_F32, 2, sx}};
    kiln_tensor_t out[2] = {{got, KILN_F32, 2, sy}, {got2, KILN_F32, 2, sy}};
    int n = which == 1 ? 2 : 1;
    KILN_EXPECT_OK(kiln_model_run(m, in, n, out, n));
    /* K = 37 products of magnitude <= 0.5 summed in fp32. */
    kiln_test_compare_f32("bf16-x linear", got, want, M * N, 1e-5f, 1e-6f);
    if (which == 1) kiln_test_compare_f32("float32-x linear, same weight", got2, want2, M * N, 1e-5f, 1e-6f);
    kiln_model_release(m);
  }
}

/* Through the compiler: a bf16 product of two graph values whose result is
 * rounded to bf16 and read back in float32 (CAST, CAST: a weight's gradient
 * under autocast) compiles to one MATMUL with KILN_MATMUL_ROUND_Y_BF16
 * (form 0) or, with a bias added first, one LINEAR with ROUND_Y (form 1),
 * and gives the bits of the graph compiled without folding (fold_casts 0:
 * KILN_CASTS=keep). Its .kiln file says 2.17 and reads back to the same
 * bits; a LINEAR whose ROUND_Y is not 0 or 1 is refused. */
static void bf16c_fold_round(int form) {
  enum { M = 40, K = 24, N = 36 };
  static float a[M * K], b[K * N], bias[N], got[2][M * N];
  kiln_test_fill_f32(a, M * K, 41, -1, 1);
  kiln_test_fill_f32(b, K * N, 42, -1, 1);
  kiln_test_fill_f32(bias, N, 43, -1, 1);
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sy[2] = {M, N}, sbias[1] = {N};
  void* bytes = NULL;
  size_t size = 0;
  for (int fold = 0; fold < 2; ++fold) {
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    int32_t va, vb, vbias, a16, b16, mm, y, h, out;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, sa, &va));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 2, sb, &vb));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "bias", KILN_F32, 1, sbias, KILN_LAYOUT_DENSE, bias,
                                           sizeof bias, &vbias));
    int64_t to16 = KILN_BF16, to32 = KILN_F32;
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CAST, &va, 1, &to16, 1, NULL, 0, NULL, &a16));
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CAST, &vb, 1, &to16, 1, NULL, 0, NULL, &b16));
    int32_t i1[2] = {a16, b16};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
    y = mm;
    if (form == 1) {
      int32_t i2[2] = {mm, vbias};
      KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &y));
    }
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CAST, &y, 1, &to16, 1, NULL, 0, NULL, &h));
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CAST, &h, 1, &to32, 1, NULL, 0, NULL, &out));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    o.fold_casts = fold ? 2 : 0;
    kiln_graph_t* c = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &c));
    if (!c) return;
    int rounds = 0;
    for (int32_t i = 0; i < c->n_nodes; ++i) {
      const kiln_node_t* n = &c->nodes[i];
      rounds += (n->op == KILN_OP_MATMUL && (n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_Y_BF16)) ||
                (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_Y)] == 1);
    }
    KILN_EXPECT(fold ? c->n_nodes == 1 && rounds == 1 : rounds == 0,
                "form %d fold %d: %d nodes, %d rounding GEMMs", form, fold, (int)c->n_nodes, rounds);
    if (fold) KILN_EXPECT_OK(kiln_artifact_write(c, NULL, 0, &bytes, &size));
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(c, NULL, NULL, &m)); /* takes c */
    if (m) {
      kiln_tensor_t in[2] = {{a, KILN_F32, 2, sa}, {b, KILN_F32, 2, sb}};
      kiln_tensor_t outt = {got[fold], KILN_F32, 2, sy};
      KILN_EXPECT_OK(kiln_model_run(m, in, 2, &outt, 1));
      kiln_model_release(m);
    }
  }
  KILN_EXPECT(memcmp(got[0], got[1], sizeof got[0]) == 0, "form %d: the folded rounding differs", form);
  if (!bytes) return;
  KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) == KILN_FORMAT_MINOR_ROUND_Y,
              "a file with a GEMM rounding y is version 2.17");
  kiln_graph_t* r = NULL;
  KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &r));
  kiln_model_t* m = NULL;
  if (r) KILN_EXPECT_OK(kiln_model_create(r, NULL, NULL, &m)); /* takes r */
  if (m) {
    static float again[M * N];
    kiln_tensor_t in[2] = {{a, KILN_F32, 2, sa}, {b, KILN_F32, 2, sb}};
    kiln_tensor_t outt = {again, KILN_F32, 2, sy};
    KILN_EXPECT_OK(kiln_model_run(m, in, 2, &outt, 1));
    KILN_EXPECT(memcmp(again, got[0], sizeof again) == 0, "form %d: read back, the bits differ", form);
    kiln_model_release(m);
  }
  free(bytes);
  if (form != 1) return;
  /* ROUND_Y is a flag: 2 is refused. */
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int32_t va, vb, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, sa, &va));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 2, sb, &vb));
  int64_t p[KILN_MAX_PARAMS] = {0};
  p[KILN_P(LINEAR, ROUND_Y)] = 2;
  int32_t in[2] = {va, vb};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, KILN_MAX_PARAMS, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_gemm_bf16_compute(void) {
  bf16c_compile();
  bf16c_fold_round(0);
  bf16c_fold_round(1);
  for (int which = 0; which < 3; ++which) bf16c_compile_bf16_x(which);
  kiln_isa_t isa0 = kiln_cpu_isa();
  unsigned bf0 = kiln_cpu_bf16();
  const kiln_cpu_features_t* f = kiln_cpu_features();
  /* The bf16 engines, each alone. */
  static const struct { unsigned mask; const char* name; } engines[] = {
      {KILN_CPU_BF16_AMX, "amx"}, {KILN_CPU_BF16_AVX512, "avx512_bf16"}};
  for (int e = 0; e < 2; ++e) {
    if (f->avx512 && (isa0 < KILN_ISA_AVX512 || !(bf0 & engines[e].mask)) &&
        (kiln_cpu_bf16_set(engines[e].mask) == engines[e].mask)) {
      printf("  gemm_bf16_compute: path %s skipped (capped by KILN_ISA)\n", engines[e].name);
      continue;
    }
    if (kiln_cpu_isa_set(KILN_ISA_AVX512) != KILN_ISA_AVX512 ||
        kiln_cpu_bf16_set(engines[e].mask) != engines[e].mask) {
      printf("  gemm_bf16_compute: path %s skipped (%s)\n", engines[e].name,
             e == 0 ? (f->amx_tile ? "no AMX-BF16"
                                   : "no AMX tiles, or the OS refused the tile state")
                    : "no avx512_bf16");
      continue;
    }
    printf("  gemm_bf16_compute: path %s ran\n", engines[e].name);
    bf16c_each_pool(engines[e].name);
  }
  /* Both masked off: the fp32 kernels at every ISA level, widening. */
  kiln_cpu_bf16_set(0);
  for (int level = (int)KILN_ISA_COUNT - 1; level >= (int)KILN_ISA_GENERIC; --level) {
    const char* name = kiln_cpu_isa_name((kiln_isa_t)level);
    if (kiln_cpu_isa_rank((kiln_isa_t)level) < 0) continue; /* another architecture's */
    if (kiln_cpu_isa_rank((kiln_isa_t)level) > kiln_cpu_isa_rank(isa0)) {
      printf("  gemm_bf16_compute: path %s skipped (above the ISA level in use)\n", name);
      continue;
    }
    if (kiln_cpu_isa_set((kiln_isa_t)level) != (kiln_isa_t)level) {
      printf("  gemm_bf16_compute: path %s skipped (the CPU lacks it)\n", name);
      continue;
    }
    printf("  gemm_bf16_compute: path %s ran\n", name);
    bf16c_each_pool(name);
  }
  kiln_cpu_isa_set(isa0);
  kiln_cpu_bf16_set(bf0);
  KILN_EXPECT(kiln_cpu_bf16() == bf0, "bf16 mask restored");
}
