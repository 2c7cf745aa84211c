/* Timing pieces the kernel benchmarks share (bench_gemm.c, bench_conv.c):
 * clocks, medians, and the AVX2 FMA loop that measures this machine's peak.
 *
 * On a shared machine, a figure is best taken as the minimum over many
 * short repetitions, each well under a scheduler slice, of both the peak
 * loop and the kernel, in the same process: the minimum is the repetition
 * nobody interrupted. bench_fma_peak_cpu does that for the peak, in the
 * calling thread's CPU time (time sliced away to other processes does not
 * count). */
#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kiln_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n zero floats on a 64-byte boundary, as kiln's runtime places its
 * buffers (malloc's large blocks start 16 bytes into a page, which splits
 * every 64-byte store and lets two threads' column strips share lines). */
static inline float* bench_alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
  float* p = aligned_alloc(64, bytes ? bytes : 64);
  if (p) memset(p, 0, bytes);
  return p;
}

/* The process's CPU time: with one thread, time that thread ran. */
static inline double bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's CPU time. */
static inline double bench_thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Sorts v and returns its median. */
static inline double bench_median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  return v[n / 2];
}

static volatile float bench_sink;

#ifdef BENCH_X86
/* 12 independent FMA chains on 8 floats each, no memory traffic: 192 flop
 * per iteration. Twelve named accumulators rather than an array: at -O2
 * GCC keeps an array of them in memory, and the loop then measures
 * store-to-load forwarding instead of the FMA units. */
__attribute__((target("avx2,fma"))) static inline float bench_fma_avx2(long iters) {
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
  __m256 c0 = _mm256_set1_ps(0.0f), c1 = _mm256_set1_ps(1.0f), c2 = _mm256_set1_ps(2.0f);
  __m256 c3 = _mm256_set1_ps(3.0f), c4 = _mm256_set1_ps(4.0f), c5 = _mm256_set1_ps(5.0f);
  __m256 c6 = _mm256_set1_ps(6.0f), c7 = _mm256_set1_ps(7.0f), c8 = _mm256_set1_ps(8.0f);
  __m256 c9 = _mm256_set1_ps(9.0f), c10 = _mm256_set1_ps(10.0f), c11 = _mm256_set1_ps(11.0f);
  for (long it = 0; it < iters; ++it) {
    c0 = _mm256_fmadd_ps(c0, x, y), c1 = _mm256_fmadd_ps(c1, x, y);
    c2 = _mm256_fmadd_ps(c2, x, y), c3 = _mm256_fmadd_ps(c3, x, y);
    c4 = _mm256_fmadd_ps(c4, x, y), c5 = _mm256_fmadd_ps(c5, x, y);
    c6 = _mm256_fmadd_ps(c6, x, y), c7 = _mm256_fmadd_ps(c7, x, y);
    c8 = _mm256_fmadd_ps(c8, x, y), c9 = _mm256_fmadd_ps(c9, x, y);
    c10 = _mm256_fmadd_ps(c10, x, y), c11 = _mm256_fmadd_ps(c11, x, y);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  return _mm256_cvtss_f32(s);
}
#endif

/* The calling thread's AVX2 FMA peak in GFLOP/s per CPU second, the best
 * of `reps` runs of `iters` iterations (0 without AVX2). */
static inline double bench_fma_peak_cpu(int reps, long iters) {
#ifdef BENCH_X86
  if (kiln_cpu_isa() < KILN_ISA_AVX2) return 0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double c0 = bench_thread_cpu_now();
    bench_sink = bench_fma_avx2(iters);
    double g = 12.0 * 16 * iters / (bench_thread_cpu_now() - c0) * 1e-9;
    best = g > best ? g : best;
  }
  return best;
#else
  (void)reps, (void)iters;
  return 0;
#endif
}

#endif /* BENCH_TIMING_H */
