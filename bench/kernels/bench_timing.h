/* Timing pieces the kernel benchmarks share (bench_gemm.c, bench_conv.c):
 * clocks, medians, and the AVX2 FMA loop that measures this machine's peak.
 *
 * On a shared machine, a figure is best taken as the minimum over many
 * short repetitions, each well under a scheduler slice, of both the peak
 * loop and the kernel, in the same process: the minimum is the repetition
 * nobody interrupted. bench_fma_peak_cpu does that for the peak, in CPU
 * time (time sliced away to other processes does not count). */
#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <stdlib.h>
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

/* The process's CPU time: with one thread, time that thread ran. */
static inline double bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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
 * per iteration. */
__attribute__((target("avx2,fma"))) static inline float bench_fma_avx2(long iters) {
  __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}
#endif

/* One thread's AVX2 FMA peak in GFLOP/s per CPU second, the best of `reps`
 * runs of `iters` iterations (0 without AVX2). */
static inline double bench_fma_peak_cpu(int reps, long iters) {
#ifdef BENCH_X86
  if (kiln_cpu_isa() < KILN_ISA_AVX2) return 0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double c0 = bench_cpu_now();
    bench_sink = bench_fma_avx2(iters);
    double g = 12.0 * 16 * iters / (bench_cpu_now() - c0) * 1e-9;
    best = g > best ? g : best;
  }
  return best;
#else
  (void)reps, (void)iters;
  return 0;
#endif
}

#endif /* BENCH_TIMING_H */
