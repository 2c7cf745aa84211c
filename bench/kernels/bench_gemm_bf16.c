/* bf16-compute GEMM figures: C(M, N) = A(M, K) . B(K, N) for nn.Linear
 * shapes, fp32 (packed fp32 weights) against bf16 compute on each engine
 * this machine has (AMX, AVX512_BF16, and the fp32 kernels widening bf16),
 * at 1 and 2 threads, beside this machine's zmm fp32 FMA peak.
 *
 * Each figure is the fastest of many calls: at 1 thread in the calling
 * thread's CPU time (time lost to other processes on a shared machine does
 * not count), at 2 threads in wall time (the fastest call is the one nobody
 * interrupted). Usage: bench_gemm_bf16 [M N K ...] (default 1024^3 and the
 * BERT-base linears 128x768x768, 128x3072x768, 128x768x3072).
 *
 * bench_gemm_bf16 --train [M N K ...]: the products of a training step under
 * autocast, both operands bf16 graph values (fp32 buffers rounded as they
 * are packed): forward x W^T (B's columns contiguous), dX = dY W (B's rows
 * contiguous) and dW = dY^T X (A transposed, C rounded to bf16 as the
 * compiled backward's is: autocast reads it back in float32), each on the fp32 kernels
 * (bf16 engines masked) and on the bf16 engine with B packed at run time
 * (kiln_gemm_bf16_compute_values). M N K name the forward's product
 * (tokens, out features, in features). Default: the bench's
 * train_transformer (1024 tokens, d 256, ff 1024).
 *
 * bench_gemm_bf16 --attn [B S D]: attention's batched products in training
 * (default 32 heads x 128 tokens x head dim 64: train_transformer's).
 *
 * bench_gemm_bf16 --in-place [M N K ...]: a bf16 model's linear layer (x
 * and W bf16), W packed for the bf16 engine at compile time against W read
 * where torch keeps it, its (N, K) rows (kiln_hal_weights_t.bf16_in_place).
 * Each call reads the next of enough copies of W to fill 512 MiB, so W
 * streams from memory as a decode step's layers do; microseconds per call
 * (fastest of many, wall time) and the weight bytes per second that makes.
 * Default: gen_llama's decode and 128-token prefill shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "base/kiln_bf16.h"
#include "kernels/gemm/kiln_gemm.h"

#ifdef BENCH_X86
__attribute__((target("avx512f"))) static float bench_fma_zmm(long iters) {
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
         a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
    a0 = _mm512_fmadd_ps(a0, m, c), a1 = _mm512_fmadd_ps(a1, m, c), a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c), a4 = _mm512_fmadd_ps(a4, m, c), a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c), a7 = _mm512_fmadd_ps(a7, m, c), a8 = _mm512_fmadd_ps(a8, m, c);
    a9 = _mm512_fmadd_ps(a9, m, c), a10 = _mm512_fmadd_ps(a10, m, c),
    a11 = _mm512_fmadd_ps(a11, m, c);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}
#endif

typedef struct {
  kiln_gemm_f32_args_t g;
  kiln_pool_t* pool;
} bench_job_t;

/* Fastest of `reps` calls, in seconds. */
static double bench_best(bench_job_t* j, int reps, int threads) {
  double best = 1e30;
  kiln_gemm_f32(&j->g, j->pool); /* warm: scratch, pages, caches */
  for (int r = 0; r < reps; ++r) {
    double t0 = threads == 1 ? bench_thread_cpu_now() : bench_now();
    kiln_gemm_f32(&j->g, j->pool);
    double t = (threads == 1 ? bench_thread_cpu_now() : bench_now()) - t0;
    if (t < best) best = t;
  }
  return best;
}

/* One row per thread count (1, 2): g on the fp32 kernels (bf16 engines
 * masked) against the bf16 engine, in GFLOP/s (flop per call). */
static void bench_engine_rows(const kiln_gemm_f32_args_t* g, const char* what, double flop,
                              int reps, int width) {
  const unsigned bf_all = kiln_cpu_bf16();
  for (int threads = 1; threads <= 2; ++threads) {
    bench_job_t j;
    memset(&j, 0, sizeof(j));
    if (kiln_pool_create(threads, &j.pool)) return;
    j.g = *g;
    kiln_cpu_bf16_set(0);
    double f32 = flop / bench_best(&j, reps, threads) * 1e-9;
    kiln_cpu_bf16_set(bf_all);
    double b16 = bf_all ? flop / bench_best(&j, reps, threads) * 1e-9 : 0;
    char name[80];
    snprintf(name, sizeof(name), "%s %lldx%lldx%lld", what, (long long)g->m, (long long)g->n,
             (long long)g->k);
    printf("%-*s %3d %10.1f %10.1f %6.2fx\n", width, name, threads, f32, b16, b16 / f32);
    fflush(stdout);
    kiln_pool_release(j.pool);
  }
}

/* The three products of one linear layer's training step (see the top). */
static void bench_train(int64_t shapes[][3], int n_shapes) {
  printf("%-22s %3s %10s %10s %7s   (GFLOP/s; products of two bf16 values)\n", "product", "thr",
         "fp32", "bf16", "ratio");
  for (int s = 0; s < n_shapes; ++s) {
    const int64_t T = shapes[s][0], O = shapes[s][1], I = shapes[s][2];
    float* x = aligned_alloc(64, (size_t)(T * I * 4 + 64) & ~(size_t)63);  /* (T, I) */
    float* w = aligned_alloc(64, (size_t)(O * I * 4 + 64) & ~(size_t)63);  /* (O, I) */
    float* dy = aligned_alloc(64, (size_t)(T * O * 4 + 64) & ~(size_t)63); /* (T, O) */
    int64_t big = T * O > T * I ? T * O : T * I;
    big = big > O * I ? big : O * I;
    float* c = aligned_alloc(64, (size_t)(big * 4 + 64) & ~(size_t)63);
    for (int64_t i = 0; i < T * I; ++i) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < O * I; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < T * O; ++i) dy[i] = (float)((i * 31337) % 1000) * 1e-3f - 0.5f;
    for (int which = 0; which < 3; ++which) {
      kiln_gemm_f32_args_t g;
      memset(&g, 0, sizeof(g));
      g.batch = 1, g.a_col_stride = 1, g.a_round_bf16 = 1, g.b_round_bf16 = 1;
      const char* what;
      if (which == 0) { /* y = x W^T: (T, I) (I, O) */
        g.m = T, g.n = O, g.k = I, g.a = x, g.a_row_stride = I;
        g.b = w, g.b_row_stride = 1, g.b_col_stride = I;
        what = "fwd x W^T";
      } else if (which == 1) { /* dX = dY W: (T, O) (O, I) */
        g.m = T, g.n = I, g.k = O, g.a = dy, g.a_row_stride = O;
        g.b = w, g.b_row_stride = I, g.b_col_stride = 1;
        what = "dX = dY W";
      } else { /* dW = dY^T X: (O, T) (T, I) */
        g.m = O, g.n = I, g.k = T, g.a = dy, g.a_row_stride = 1, g.a_col_stride = O;
        g.b = x, g.b_row_stride = I, g.b_col_stride = 1;
        what = "dW = dY^T X";
        g.c_round_bf16 = 1; /* its C read back in float32: rounded (KILN_MATMUL_ROUND_Y_BF16) */
      }
      g.c = c, g.c_row_stride = g.n;
      double flop = 2.0 * (double)g.m * (double)g.n * (double)g.k;
      bench_engine_rows(&g, what, flop, flop > 1e9 ? 30 : 100, 22);
    }
    free(x), free(w), free(dy), free(c);
  }
}

/* Attention's batched products in training (--attn B S D): S = Q K^T
 * (B's columns contiguous), O = P V (rows contiguous), dP^T-style dW
 * products (A transposed), each a batch of B heads; fp32 kernels against
 * the bf16 engine, as bench_train. */
static void bench_attn(int64_t B, int64_t S, int64_t D) {
  float* q = aligned_alloc(64, (size_t)(B * S * D * 4 + 64) & ~(size_t)63);
  float* k = aligned_alloc(64, (size_t)(B * S * D * 4 + 64) & ~(size_t)63);
  float* p = aligned_alloc(64, (size_t)(B * S * S * 4 + 64) & ~(size_t)63);
  float* c = aligned_alloc(64, (size_t)(B * S * S * 4 + 64) & ~(size_t)63);
  for (int64_t i = 0; i < B * S * D; ++i) q[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (int64_t i = 0; i < B * S * D; ++i) k[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  for (int64_t i = 0; i < B * S * S; ++i) p[i] = (float)((i * 31337) % 1000) * 1e-3f - 0.5f;
  printf("%-26s %3s %10s %10s %7s   (GFLOP/s; batch %lld)\n", "product", "thr", "fp32", "bf16",
         "ratio", (long long)B);
  for (int which = 0; which < 3; ++which) {
    kiln_gemm_f32_args_t g;
    memset(&g, 0, sizeof(g));
    g.batch = B, g.a_round_bf16 = 1, g.b_round_bf16 = 1;
    const char* what;
    if (which == 0) { /* Q K^T: (S, D) (D, S) */
      g.m = S, g.n = S, g.k = D, g.a = q, g.a_batch_stride = S * D, g.a_row_stride = D, g.a_col_stride = 1;
      g.b = k, g.b_batch_stride = S * D, g.b_row_stride = 1, g.b_col_stride = D;
      what = "S = Q K^T";
    } else if (which == 1) { /* P V: (S, S) (S, D) */
      g.m = S, g.n = D, g.k = S, g.a = p, g.a_batch_stride = S * S, g.a_row_stride = S, g.a_col_stride = 1;
      g.b = k, g.b_batch_stride = S * D, g.b_row_stride = D, g.b_col_stride = 1;
      what = "O = P V";
    } else { /* dV = P^T dO: (S, S)^T (S, D) */
      g.m = S, g.n = D, g.k = S, g.a = p, g.a_batch_stride = S * S, g.a_row_stride = 1, g.a_col_stride = S;
      g.b = q, g.b_batch_stride = S * D, g.b_row_stride = D, g.b_col_stride = 1;
      what = "dV = P^T dO";
    }
    g.c = c, g.c_batch_stride = g.m * g.n, g.c_row_stride = g.n;
    double flop = 2.0 * (double)B * (double)g.m * (double)g.n * (double)g.k;
    bench_engine_rows(&g, what, flop, 100, 26);
  }
  free(q), free(k), free(p), free(c);
}

/* --in-place: see the top. */
static void bench_in_place(int64_t shapes[][3], int n_shapes) {
  printf("%-20s %3s %12s %12s %7s   (us per call; GB/s of weight bytes)\n", "M x N x K", "thr",
         "packed", "in place", "ratio");
  for (int s = 0; s < n_shapes; ++s) {
    const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    const size_t wb = (size_t)(N * K) * 2, pb = kiln_gemm_bf16_vnni_packed_size(K, N);
    int copies = (int)(((size_t)512 << 20) / (pb > wb ? pb : wb)) + 1;
    uint16_t* a = malloc((size_t)(M * K) * 2);
    float* w = malloc((size_t)(N * K) * 4);
    float* c = malloc((size_t)(M * N) * 4);
    uint16_t** rows = malloc(sizeof(uint16_t*) * (size_t)copies);
    uint16_t** packed = malloc(sizeof(uint16_t*) * (size_t)copies);
    for (int64_t i = 0; i < M * K; ++i) a[i] = kiln_bf16_from_f32((float)((i * 7919) % 1000) * 1e-3f - 0.5f);
    for (int64_t i = 0; i < N * K; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    for (int q = 0; q < copies; ++q) {
      rows[q] = malloc(wb);
      packed[q] = aligned_alloc(64, (pb + 63) & ~(size_t)63);
      for (int64_t i = 0; i < N * K; ++i) rows[q][i] = kiln_bf16_from_f32(w[i]);
      kiln_gemm_bf16_vnni_pack_b(K, N, w, 1, K, packed[q]);
    }
    for (int threads = 1; threads <= 2; ++threads) {
      kiln_pool_t* pool;
      if (kiln_pool_create(threads, &pool)) return;
      double best[2] = {1e30, 1e30};
      for (int r = 0; r < 8 * copies; ++r)
        for (int how = 0; how < 2; ++how) {
          kiln_gemm_f32_args_t g;
          memset(&g, 0, sizeof(g));
          g.batch = 1, g.m = M, g.n = N, g.k = K;
          g.a_bf16 = a, g.a_row_stride = K, g.a_col_stride = 1;
          g.c = c, g.c_row_stride = N;
          if (how == 0)
            g.b_packed_bf16_vnni = packed[r % copies];
          else
            g.b_bf16 = rows[r % copies], g.b_row_stride = 1, g.b_col_stride = K, g.b_bf16_weight = 1;
          double t0 = bench_now();
          kiln_gemm_f32(&g, pool);
          double t = bench_now() - t0;
          if (t < best[how]) best[how] = t;
        }
      char name[64];
      snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
      printf("%-20s %3d %7.1f %4.0f %7.1f %4.0f %6.2fx\n", name, threads, best[0] * 1e6,
             (double)pb / best[0] * 1e-9, best[1] * 1e6, (double)wb / best[1] * 1e-9,
             best[0] / best[1]);
      fflush(stdout);
      kiln_pool_release(pool);
    }
    for (int q = 0; q < copies; ++q) free(rows[q]), free(packed[q]);
    free(rows), free(packed), free(a), free(w), free(c);
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--in-place")) {
    int64_t ishapes[16][3] = {{1, 1024, 1024}, {1, 2816, 1024}, {1, 1024, 2816}, {1, 32000, 1024},
                              {128, 1024, 1024}, {128, 2816, 1024}, {128, 1024, 2816}};
    int ni = 7;
    if (argc > 4) {
      ni = 0;
      for (int i = 2; i + 2 < argc && ni < 16; i += 3, ++ni)
        for (int d = 0; d < 3; ++d) ishapes[ni][d] = atoll(argv[i + d]);
    }
    bench_in_place(ishapes, ni);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--attn")) {
    bench_attn(argc > 2 ? atoll(argv[2]) : 32, argc > 3 ? atoll(argv[3]) : 128,
               argc > 4 ? atoll(argv[4]) : 64);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--train")) {
    int64_t tshapes[16][3] = {{1024, 768, 256}, {1024, 256, 256}, {1024, 1024, 256}, {1024, 256, 1024}};
    int nt = 4;
    if (argc > 4) {
      nt = 0;
      for (int i = 2; i + 2 < argc && nt < 16; i += 3, ++nt)
        for (int d = 0; d < 3; ++d) tshapes[nt][d] = atoll(argv[i + d]);
    }
    bench_train(tshapes, nt);
    return 0;
  }
  int64_t shapes[16][3] = {{1024, 1024, 1024}, {128, 768, 768}, {128, 3072, 768}, {128, 768, 3072}};
  int n_shapes = 4;
  if (argc > 3) {
    n_shapes = 0;
    for (int i = 1; i + 2 < argc && n_shapes < 16; i += 3, ++n_shapes)
      for (int d = 0; d < 3; ++d) shapes[n_shapes][d] = atoll(argv[i + d]);
  }
  const kiln_cpu_features_t* f = kiln_cpu_features();
  unsigned bf_all = kiln_cpu_bf16();
#ifdef BENCH_X86
  if (f->avx512) {
    double best = 1e30;
    const long iters = 2000000;
    for (int r = 0; r < 20; ++r) {
      double t0 = bench_thread_cpu_now();
      bench_sink = bench_fma_zmm(iters);
      double t = bench_thread_cpu_now() - t0;
      if (t < best) best = t;
    }
    printf("fp32 zmm FMA peak (1 core): %.1f GFLOP/s\n", 12.0 * 32 * iters / best * 1e-9);
  }
#endif
  printf("isa %s, bf16 engines: %s%s\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         (bf_all & KILN_CPU_BF16_AMX) ? "amx " : "", (bf_all & KILN_CPU_BF16_AVX512) ? "avx512_bf16" : "");
  printf("%-18s %3s %10s %10s %10s %10s | %6s %6s %6s\n", "M x N x K", "thr", "fp32", "bf16-amx",
         "bf16-vdp", "bf16-wide", "amx/32", "vdp/32", "wid/32");
  for (int s = 0; s < n_shapes; ++s) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float* a = aligned_alloc(64, (size_t)(M * K * 4 + 64) & ~(size_t)63);
    float* w = aligned_alloc(64, (size_t)(N * K * 4 + 64) & ~(size_t)63);
    float* c = aligned_alloc(64, (size_t)(M * N * 4 + 64) & ~(size_t)63);
    float* bias = aligned_alloc(64, (size_t)(N * 4 + 64) & ~(size_t)63);
    for (int64_t i = 0; i < M * K; ++i) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < N * K; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < N; ++i) bias[i] = 0.1f;
    float* bp = aligned_alloc(64, kiln_gemm_f32_packed_size(K, N) + 64);
    uint16_t* bv = aligned_alloc(64, (kiln_gemm_bf16_vnni_packed_size(K, N) + 64) & ~(size_t)63);
    kiln_gemm_f32_pack_b(K, N, w, 1, K, bp);
    kiln_gemm_bf16_vnni_pack_b(K, N, w, 1, K, bv);
    double flop = 2.0 * (double)M * (double)N * (double)K;
    int reps = flop > 1e9 ? 30 : 200;
    for (int threads = 1; threads <= 2; ++threads) {
      bench_job_t j;
      memset(&j, 0, sizeof(j));
      if (kiln_pool_create(threads, &j.pool)) return 1;
      j.g.batch = 1, j.g.m = M, j.g.n = N, j.g.k = K;
      j.g.a = a, j.g.a_row_stride = K, j.g.a_col_stride = 1;
      j.g.c = c, j.g.c_row_stride = N;
      j.g.bias = bias;
      double gf[4] = {0, 0, 0, 0};
      j.g.b_packed = bp;
      gf[0] = flop / bench_best(&j, reps, threads) * 1e-9;
      j.g.b_packed = NULL;
      j.g.b_packed_bf16_vnni = bv;
      static const unsigned masks[3] = {KILN_CPU_BF16_AMX, KILN_CPU_BF16_AVX512, 0};
      for (int e = 0; e < 3; ++e) {
        if (kiln_cpu_bf16_set(masks[e]) != masks[e]) continue;
        gf[1 + e] = flop / bench_best(&j, reps, threads) * 1e-9;
      }
      kiln_cpu_bf16_set(bf_all);
      char name[64];
      snprintf(name, sizeof(name), "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
      printf("%-18s %3d %10.1f %10.1f %10.1f %10.1f | %5.2fx %5.2fx %5.2fx\n", name, threads,
             gf[0], gf[1], gf[2], gf[3], gf[1] / gf[0], gf[2] / gf[0], gf[3] / gf[0]);
      fflush(stdout);
      kiln_pool_release(j.pool);
    }
    free(a), free(w), free(c), free(bias), free(bp), free(bv);
  }
  return 0;
}
