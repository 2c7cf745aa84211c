/* GEMM benchmark: first measures what this machine can do (the FMA peak of
 * a register-only loop, and DRAM read bandwidth), then kiln_gemm_f32 on
 * 1024^3 and the transformer shapes with B packed, and the M=1 decode GEMV
 * over a 14336 x 4096 packed B, with 1 and 2 threads. Every figure is the
 * median of several timed runs; results are printed as a fraction of the
 * peaks measured in the same process, since the machines are shared and
 * noisy. Usage: bench_gemm [max_threads (default 2)] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/gemm/kiln_gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds used by all threads of the process: on a shared machine,
 * time sliced away to other processes does not count, so flops per CPU
 * second per thread shows the kernel's own efficiency (spinning pool
 * workers do count, which is fair). */
static double bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double bench_median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  return v[n / 2];
}

/* ---- FMA peak: 12 independent FMA chains, no memory traffic ------------ */

#define BENCH_FMA_ITERS 20000000L

#ifdef BENCH_X86
__attribute__((target("avx2,fma"))) static float bench_fma_avx2(long iters) {
  __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}
__attribute__((target("avx512f"))) static float bench_fma_avx512(long iters) {
  __m512 acc[12], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
#endif

static float bench_fma_generic(long iters) {
  float acc[12][8], x = 0.999f, y = 1e-7f;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = (float)(i + j);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i)
      for (int j = 0; j < 8; ++j) acc[i][j] = acc[i][j] * x + y;
  float s = 0;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 8; ++j) s += acc[i][j];
  return s;
}

static volatile float bench_sink;

/* FLOP per iteration of the loop that ran. */
static double bench_fma_run(long iters) {
#ifdef BENCH_X86
  if (kiln_cpu_isa() >= KILN_ISA_AVX512) {
    bench_sink = bench_fma_avx512(iters);
    return 12.0 * 16 * 2;
  }
  if (kiln_cpu_isa() >= KILN_ISA_AVX2) {
    bench_sink = bench_fma_avx2(iters);
    return 12.0 * 8 * 2;
  }
#endif
  bench_sink = bench_fma_generic(iters);
  return 12.0 * 8 * 2;
}

static void bench_fma_task(void* ctx, size_t task, int thread) {
  (void)thread;
  ((double*)ctx)[task] = bench_fma_run(BENCH_FMA_ITERS);
}

/* GFLOP/s of `threads` cores all running the FMA loop (one task each), by
 * the wall clock and (out_cpu) per CPU second times threads. */
static double bench_fma_peak(kiln_pool_t* pool, int threads, double* out_cpu) {
  double t[5], c[5], flop_per_iter[2] = {0, 0};
  for (int r = 0; r < 5; ++r) {
    double t0 = bench_now(), c0 = bench_cpu_now();
    kiln_pool_parallel_for(pool, (size_t)threads, bench_fma_task, flop_per_iter);
    t[r] = bench_now() - t0;
    c[r] = (bench_cpu_now() - c0) / threads;
  }
  double flop = flop_per_iter[0] * BENCH_FMA_ITERS * threads;
  *out_cpu = flop / bench_median(c, 5) * 1e-9;
  return flop / bench_median(t, 5) * 1e-9;
}

/* ---- DRAM read bandwidth: sum a buffer much larger than the L3 ---------- */

typedef struct {
  const float* p;
  size_t n, chunks;
  double sum[64];
} bench_read_t;

static void bench_read_task(void* ctx, size_t task, int thread) {
  bench_read_t* r = ctx;
  size_t per = r->n / r->chunks, i0 = task * per, i1 = i0 + per;
  /* 32 independent sums (eight SSE accumulators once auto-vectorised), so
   * the add latency never limits the loads, with any vector width. */
  float s[32] = {0};
  for (size_t i = i0; i + 32 <= i1; i += 32)
    for (int j = 0; j < 32; ++j) s[j] += r->p[i + j];
  for (int j = 0; j < 32; ++j) r->sum[thread] += s[j];
}

static double bench_read_bw(kiln_pool_t* pool, const float* p, size_t n) {
  bench_read_t r;
  memset(&r, 0, sizeof(r));
  r.p = p, r.n = n, r.chunks = 64;
  double t[5];
  for (int k = 0; k < 5; ++k) {
    double t0 = bench_now();
    kiln_pool_parallel_for(pool, r.chunks, bench_read_task, &r);
    t[k] = bench_now() - t0;
  }
  bench_sink = (float)r.sum[0];
  return (double)n * sizeof(float) / bench_median(t, 5) * 1e-9;
}

/* ---- GEMM ---------------------------------------------------------------- */

static float* bench_alloc(size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
  float* p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

static void bench_fill(float* x, size_t n, unsigned seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

/* Median seconds per call, each sample timing enough calls for ~30 ms;
 * out_cpu: median CPU seconds per call divided by the thread count. */
static double bench_gemm_time(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool, int samples,
                              double* out_cpu) {
  kiln_gemm_f32(g, pool); /* warm: caches, scratch, page faults */
  double t0 = bench_now();
  kiln_gemm_f32(g, pool);
  double one = bench_now() - t0;
  int calls = one > 0.03 ? 1 : (int)(0.03 / (one > 1e-6 ? one : 1e-6)) + 1;
  double t[32], cpu[32];
  if (samples > 32) samples = 32;
  for (int s = 0; s < samples; ++s) {
    t0 = bench_now();
    double c0 = bench_cpu_now();
    for (int c = 0; c < calls; ++c) kiln_gemm_f32(g, pool);
    t[s] = (bench_now() - t0) / calls;
    cpu[s] = (bench_cpu_now() - c0) / calls / kiln_pool_size(pool);
  }
  *out_cpu = bench_median(cpu, samples);
  return bench_median(t, samples);
}

static void bench_gemm_args(kiln_gemm_f32_args_t* g, int64_t m, int64_t n, int64_t k,
                            const float* a, const float* bp, float* c) {
  memset(g, 0, sizeof(*g));
  g->batch = 1, g->m = m, g->n = n, g->k = k;
  g->a = a, g->a_row_stride = k, g->a_col_stride = 1;
  g->b_packed = bp;
  g->c = c, g->c_row_stride = n;
}

int main(int argc, char** argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  if (max_threads < 1) max_threads = 1;
  if (max_threads > 2) max_threads = 2;
  kiln_pool_t* pools[2] = {NULL, NULL};
  for (int t = 1; t <= max_threads; ++t) {
    kiln_status_t s = kiln_pool_create(t, &pools[t - 1]);
    if (s) {
      fprintf(stderr, "could not create a %d-thread pool: %s\n", t, kiln_status_message(s));
      kiln_status_free(s);
      return 1;
    }
  }
  printf("kiln GEMM benchmark, ISA %s\n\n", kiln_cpu_isa_name(kiln_cpu_isa()));

  double peak[2] = {0, 0}, peak_cpu[2] = {0, 0}, bw[2] = {0, 0};
  for (int t = 1; t <= max_threads; ++t)
    peak[t - 1] = bench_fma_peak(pools[t - 1], t, &peak_cpu[t - 1]);
  size_t bw_n = (size_t)64 << 20; /* 256 MiB: far beyond the L3 */
  float* bw_buf = bench_alloc(bw_n);
  if (bw_buf) {
    bench_fill(bw_buf, bw_n, 7);
    for (int t = 1; t <= max_threads; ++t) bw[t - 1] = bench_read_bw(pools[t - 1], bw_buf, bw_n);
    free(bw_buf);
  }
  printf("machine        1 thread    2 threads\n");
  printf("FMA peak       %7.1f     %7.1f   GFLOP/s (wall clock)\n", peak[0], peak[1]);
  printf("FMA peak       %7.1f     %7.1f   GFLOP/s (per CPU second x threads)\n", peak_cpu[0],
         peak_cpu[1]);
  printf("DRAM read      %7.1f     %7.1f   GB/s\n\n", bw[0], bw[1]);

  static const int64_t shapes[][3] = {
      {1024, 1024, 1024}, {128, 768, 768}, {128, 3072, 768}, {512, 768, 3072}};
  printf("%-22s %-8s %10s %8s %12s %8s\n", "M x N x K (B packed)", "threads", "GFLOP/s",
         "% peak", "cpu GFLOP/s", "% peak");
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    float* a = bench_alloc((size_t)(m * k));
    float* b = bench_alloc((size_t)(k * n));
    float* bp = bench_alloc(kiln_gemm_f32_packed_size(k, n) / sizeof(float));
    float* c = bench_alloc((size_t)(m * n));
    if (!a || !b || !bp || !c) {
      fprintf(stderr, "out of memory\n");
      return 1;
    }
    bench_fill(a, (size_t)(m * k), 1);
    bench_fill(b, (size_t)(k * n), 2);
    kiln_gemm_f32_pack_b(k, n, b, n, 1, bp);
    kiln_gemm_f32_args_t g;
    bench_gemm_args(&g, m, n, k, a, bp, c);
    for (int t = 1; t <= max_threads; ++t) {
      double cpu, sec = bench_gemm_time(&g, pools[t - 1], 9, &cpu);
      double flop = 2.0 * (double)m * (double)n * (double)k;
      double gf = flop / sec * 1e-9, gf_cpu = flop / cpu * 1e-9;
      char label[64];
      snprintf(label, sizeof(label), "%lld x %lld x %lld", (long long)m, (long long)n,
               (long long)k);
      printf("%-22s %-8d %10.1f %7.1f%% %12.1f %7.1f%%\n", label, t, gf, 100.0 * gf / peak[t - 1],
             gf_cpu, 100.0 * gf_cpu / peak_cpu[t - 1]);
    }
    free(a), free(b), free(bp), free(c);
  }

  /* Decode: one token through a 14336 -> 4096 projection (235 MB of B). */
  {
    const int64_t m = 1, n = 4096, k = 14336;
    size_t pbytes = kiln_gemm_f32_packed_size(k, n);
    float* a = bench_alloc((size_t)k);
    float* bp = bench_alloc(pbytes / sizeof(float));
    float* c = bench_alloc((size_t)n);
    if (!a || !bp || !c) {
      fprintf(stderr, "out of memory\n");
      return 1;
    }
    bench_fill(a, (size_t)k, 3);
    bench_fill(bp, pbytes / sizeof(float), 4);
    kiln_gemm_f32_args_t g;
    bench_gemm_args(&g, m, n, k, a, bp, c);
    printf("\n%-22s %-8s %10s %10s\n", "GEMV (B packed)", "threads", "GB/s", "% DRAM");
    for (int t = 1; t <= max_threads; ++t) {
      double cpu, sec = bench_gemm_time(&g, pools[t - 1], 7, &cpu);
      double gbs = (double)pbytes / sec * 1e-9;
      printf("%-22s %-8d %10.1f %9.1f%%\n", "1 x 4096 x 14336", t, gbs,
             bw[t - 1] > 0 ? 100.0 * gbs / bw[t - 1] : 0.0);
    }
    free(a), free(bp), free(c);
  }
  for (int t = 0; t < max_threads; ++t) kiln_pool_release(pools[t]);
  return 0;
}
