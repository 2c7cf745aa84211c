/* Quantized-weight GEMV / GEMM figures: C(M, N) = A(M, K) . B(K, N) with B
 * packed as fp32, bf16, int8 (per column) and int4 (groups of 32 and 128;
 * weight-only, then with int8 activations: "a8", kiln_gemm_q8a8 /
 * kiln_gemm_q4a8 for M <= 8; last weight-only asymmetric int4), at 1 and 2 threads (BENCH_THREADS=1: 1 only), against this machine's read bandwidth (a streaming
 * sum over a buffer far larger than the caches, measured here).
 *
 * Each figure is the fastest of many calls: at 1 thread in the calling
 * thread's CPU time, at 2 threads in wall time. GB/s counts the bytes of
 * the packed weights (scales included) read once per call. Each call reads
 * a different copy of the weights in turn (enough copies to exceed the L3),
 * so that no call finds them in the caches.
 * BENCH_HOT=1 reads one copy instead (the kernels' speed on cached weights).
 * Usage: bench_gemm_quant [M N K ...] (default the decode GEMVs
 * 1x4096x4096 and 1x4096x14336 (N x K), then M = 8 and 128). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "kernels/gemm/kiln_gemm.h"

#define BENCH_COPIES_BYTES ((size_t)768 << 20) /* total weight copies per kind */

static double bench_read_bw(int threads, kiln_pool_t* pool);

typedef struct {
  const float* buf;
  size_t n;
  double sums[8];
} bench_bw_t;

#ifdef BENCH_X86
__attribute__((target("avx2")))
#endif
static void bench_bw_task(void* p, size_t task, int thread) {
  (void)thread;
  bench_bw_t* b = p;
  size_t per = b->n / 2, lo = task * per, hi = lo + per;
#ifdef BENCH_X86
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = lo; i + 32 <= hi; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(b->buf + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(b->buf + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(b->buf + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(b->buf + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  b->sums[task] = t[0] + t[7];
#else
  double s = 0;
  for (size_t i = lo; i < hi; ++i) s += b->buf[i];
  b->sums[task] = s;
#endif
}

/* GB/s of a streaming read of 512 MiB: 1 thread (2 halves in turn) or 2. */
static double bench_read_bw(int threads, kiln_pool_t* pool) {
  static float* buf = NULL;
  const size_t n = (size_t)128 << 20;
  if (!buf) {
    buf = aligned_alloc(64, n * sizeof(float));
    for (size_t i = 0; i < n; ++i) buf[i] = (float)(i & 7);
  }
  bench_bw_t b = {buf, n, {0}};
  double best = 1e30;
  for (int r = 0; r < 8; ++r) {
    double t0 = threads == 1 ? bench_thread_cpu_now() : bench_now();
    if (threads == 1) {
      bench_bw_task(&b, 0, 0);
      bench_bw_task(&b, 1, 0);
    } else {
      kiln_pool_parallel_for(pool, 2, bench_bw_task, &b);
    }
    double t = (threads == 1 ? bench_thread_cpu_now() : bench_now()) - t0;
    if (t < best) best = t;
  }
  bench_sink = (float)(b.sums[0] + b.sums[1]);
  return (double)n * sizeof(float) / best * 1e-9;
}

typedef struct {
  const char* name;
  size_t bytes;
  int copies;
  void** w; /* copies of the packed weights */
} bench_kind_t;

static double bench_best(kiln_gemm_f32_args_t* g, bench_kind_t* kd, int kind, int reps,
                         int threads, kiln_pool_t* pool) {
  double best = 1e30;
  for (int r = -1; r < reps; ++r) {
    const void* w = kd->w[(r + 1) % kd->copies];
    g->b_packed = kind == 0 ? w : NULL;
    g->b_packed_bf16 = kind == 1 ? w : NULL;
    g->b_packed_q = kind >= 2 ? w : NULL;
    double t0 = threads == 1 ? bench_thread_cpu_now() : bench_now();
    kiln_gemm_f32(g, pool);
    double t = (threads == 1 ? bench_thread_cpu_now() : bench_now()) - t0;
    if (r >= 0 && t < best) best = t;
  }
  return best;
}

int main(int argc, char** argv) {
  int64_t shapes[16][3] = {{1, 4096, 4096}, {1, 4096, 14336}, {8, 4096, 4096}, {128, 4096, 4096}};
  int n_shapes = 4;
  if (argc > 3) {
    n_shapes = 0;
    for (int i = 1; i + 2 < argc && n_shapes < 16; i += 3, ++n_shapes)
      for (int d = 0; d < 3; ++d) shapes[n_shapes][d] = atoll(argv[i + d]);
  }
  /* BENCH_THREADS=1: the 1-thread rows only (a shared machine). */
  const char* bt = getenv("BENCH_THREADS");
  int max_threads = bt && atoi(bt) == 1 ? 1 : 2;
  /* BENCH_HOT=1: one copy of the weights, read from the caches (the
   * kernel's own speed, not the memory's). */
  const char* ht = getenv("BENCH_HOT");
  const int hot = ht && atoi(ht) == 1;
  printf("isa %s\n", kiln_cpu_isa_name(kiln_cpu_isa()));
  kiln_pool_t* pools[2] = {NULL, NULL};
  if (kiln_pool_create(1, &pools[0]) || kiln_pool_create(2, &pools[1])) return 1;
  printf("read bandwidth (512 MiB stream): %.1f GB/s 1 thread, %.1f GB/s 2 threads\n",
         bench_read_bw(1, pools[0]), bench_read_bw(2, pools[1]));
  printf("%-18s %3s | %-13s %9s %8s %8s %7s\n", "M x N x K", "thr", "weights", "MiB", "us",
         "GB/s", "vs fp32");
  for (int s = 0; s < n_shapes; ++s) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float* a = aligned_alloc(64, (size_t)(M * K * 4 + 64) & ~(size_t)63);
    float* w = aligned_alloc(64, (size_t)(N * K * 4 + 64) & ~(size_t)63);
    float* c = aligned_alloc(64, (size_t)(M * N * 4 + 64) & ~(size_t)63);
    for (int64_t i = 0; i < M * K; ++i) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < N * K; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    enum { KINDS = 9 };
    bench_kind_t kinds[KINDS] = {
        {"fp32", kiln_gemm_f32_packed_size(K, N), 0, NULL},
        {"bf16", kiln_gemm_bf16_packed_size(K, N), 0, NULL},
        {"int8", kiln_gemm_quant_packed_size(K, N, 8, 0, 0), 0, NULL},
        {"int4 g32", kiln_gemm_quant_packed_size(K, N, 4, 32, 0), 0, NULL},
        {"int4 g128", kiln_gemm_quant_packed_size(K, N, 4, 128, 0), 0, NULL},
        {"int4 g32 a8", kiln_gemm_quant_packed_size(K, N, 4, 32, 0), 0, NULL},
        {"int4 g128 a8", kiln_gemm_quant_packed_size(K, N, 4, 128, 0), 0, NULL},
        {"int8 a8", kiln_gemm_quant_packed_size(K, N, 8, 0, 0), 0, NULL},
        {"int4 g32 asym", kiln_gemm_quant_packed_size(K, N, 4, 32, 1), 0, NULL}};
    for (int k = 0; k < KINDS; ++k) {
      bench_kind_t* kd = &kinds[k];
      kd->copies = (int)(BENCH_COPIES_BYTES / kd->bytes);
      if (kd->copies < 2) kd->copies = 2;
      if (kd->copies > 64) kd->copies = 64;
      if (hot) kd->copies = 1;
      kd->w = calloc((size_t)kd->copies, sizeof(void*));
      kd->w[0] = aligned_alloc(64, (kd->bytes + 63) & ~(size_t)63);
      if (k == 0) kiln_gemm_f32_pack_b(K, N, w, 1, K, kd->w[0]);
      if (k == 1) kiln_gemm_bf16_pack_b(K, N, w, 1, K, kd->w[0]);
      if (k == 2 || k == 7) kiln_gemm_quant_pack_b(K, N, w, 1, K, 8, 0, 0, kd->w[0]);
      if (k == 3) kiln_gemm_quant_pack_b(K, N, w, 1, K, 4, 32, 0, kd->w[0]);
      if (k == 4 || k == 6) kiln_gemm_quant_pack_b(K, N, w, 1, K, 4, 128, 0, kd->w[0]);
      if (k == 5) kiln_gemm_quant_pack_b(K, N, w, 1, K, 4, 32, 0, kd->w[0]);
      if (k == 8) kiln_gemm_quant_pack_b(K, N, w, 1, K, 4, 32, 1, kd->w[0]);
      if (k >= 5 && k <= 7) kiln_gemm_quant_set_a8(kd->w[0]);
      for (int cp = 1; cp < kd->copies; ++cp) {
        kd->w[cp] = aligned_alloc(64, (kd->bytes + 63) & ~(size_t)63);
        memcpy(kd->w[cp], kd->w[0], kd->bytes);
      }
    }
    for (int threads = 1; threads <= max_threads; ++threads) {
      kiln_gemm_f32_args_t g;
      memset(&g, 0, sizeof(g));
      g.batch = 1, g.m = M, g.n = N, g.k = K;
      g.a = a, g.a_row_stride = K, g.a_col_stride = 1;
      g.c = c, g.c_row_stride = N;
      double t32 = 0;
      for (int k = 0; k < KINDS; ++k) {
        int reps = M >= 64 ? 10 : 60;
        double t = bench_best(&g, &kinds[k], k, reps, threads, pools[threads - 1]);
        if (k == 0) t32 = t;
        char name[64];
        snprintf(name, sizeof(name), "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        printf("%-18s %3d | %-13s %9.1f %8.1f %8.1f %6.2fx\n", name, threads, kinds[k].name,
               (double)kinds[k].bytes / (1 << 20), t * 1e6, (double)kinds[k].bytes / t * 1e-9,
               t32 / t);
        fflush(stdout);
      }
    }
    for (int k = 0; k < KINDS; ++k) {
      for (int cp = 0; cp < kinds[k].copies; ++cp) free(kinds[k].w[cp]);
      free(kinds[k].w);
    }
    free(a), free(w), free(c);
  }
  kiln_pool_release(pools[0]);
  kiln_pool_release(pools[1]);
  return 0;
}
