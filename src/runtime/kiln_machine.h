/* The machine as kiln sees it, and its measured peaks (kiln_machine.c):
 * what `kiln info` (no file) prints and kiln.machine() returns; the
 * profiler (kiln.profile) reads its roofs from it.
 *
 * Peaks are measured once and cached in a user file: $KILN_MACHINE_CACHE,
 * else $XDG_CACHE_HOME/kiln/machine.json, else ~/.cache/kiln/machine.json;
 * the file is reused only for the same CPU model, ISA level and thread
 * count. Rates are per second: GFLOP/s (a multiply-add is 2), GOP/s for
 * int8, GB/s (1e9 bytes); `_1` fields are one thread, the others all of the
 * pool's threads. A field is 0 where the CPU lacks the instruction.
 *
 * A peak taken while other work ran (a test suite beside it) reads low, and
 * a cache would keep it: the roofline would then
 * divide by a ceiling the machine passes. Peaks are maxima, so a
 * measurement that kiln_machine_busy flags is repeated (twice more) and the
 * attempts merged field by field by their maximum; one still flagged is
 * marked busy in the cache, and the next process to read that cache
 * measures again (once: a process that has measured reuses the cache as it
 * is, so its calls agree) and merges with it, so the figures climb to the
 * machine's own over the processes that need them. A cache without the
 * mark (older kiln) counts as busy. */
#ifndef KILN_MACHINE_H
#define KILN_MACHINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_status.h"

typedef struct kiln_machine_s {
  char cpu_model[128];
  int cores;   /* online CPUs */
  int physical_cores; /* cores, counting SMT siblings once (sysfs; = cores when unknown) */
  int threads; /* the pool's threads */
  long l1d_bytes, l2_bytes, l3_bytes; /* per sysconf; 0 when unknown */
  int avx2, avx512, avx512_bf16, avx512_vnni, avx512_vbmi, amx_bf16, amx_int8; /* present */
  char isa[32];         /* the level in use (KILN_ISA caps it) */
  char bf16_engine[32]; /* the bf16 engine in use: amx, avx512_bf16 or none */
  double fma_gflops_1, fma_gflops;
  double bf16_gflops_1, bf16_gflops; /* VDPBF16PS */
  double int8_gops_1, int8_gops;     /* VPDPBUSD */
  double bandwidth_gbs_1, bandwidth_gbs; /* reading a 128 MiB buffer */
  /* 1: the bandwidth for the profile's thread count is a sample taken
   * beside its runs (kiln_profile_bandwidth_now), not the cached peak */
  int bandwidth_sampled;
  int measured;        /* 1: measured by this call; 0: read from the cache */
  int busy;            /* kiln_machine_busy held for the figures as kept */
  double others_load;  /* share of all cores' time other processes used while measuring (0: unknown) */
  int64_t measured_at; /* Unix time of the measurement */
  char cache_path[4096]; /* "" when there is no cache file */
} kiln_machine_t;

/* Measures now (about a second) on `pool`'s threads; does not touch the cache. */
kiln_status_t kiln_machine_measure(kiln_pool_t* pool, kiln_machine_t* out);
/* The cached figures when they fit this machine, else (or when remeasure)
 * measures and rewrites the cache (a cache that cannot be written is not an
 * error). */
kiln_status_t kiln_machine_get(kiln_pool_t* pool, int remeasure, kiln_machine_t* out);
/* One sample of a peak probe on `threads` of `pool`'s threads (pool may be
 * NULL for 1): the fp32 FMA loop for about 30 ms (GFLOP/s in *out), or one
 * read of a 128 MiB buffer (GB/s; the buffer is made on the first such call
 * and kept for the process). The same loops as the cached peaks: what a
 * benchmark samples beside each of its rows, so that a row and the roof it
 * is divided by see the same stretch of a shared machine (bench/kernels). */
typedef enum kiln_machine_probe_e {
  KILN_MACHINE_PROBE_FMA = 0,
  KILN_MACHINE_PROBE_READ = 1
} kiln_machine_probe_t;
kiln_status_t kiln_machine_sample(kiln_pool_t* pool, int threads, kiln_machine_probe_t probe,
                                  double* out);
/* 1 when the figures cannot all be the machine's peaks, as when part of it
 * was busy while they were measured: other processes used more than 15 %
 * of all cores' time meanwhile (/proc/stat, less kiln's own), or the
 * figures contradict each other: the all-threads FMA rate outside 0.5 to
 * 1.3 times the one-thread rate times the cores the threads can use (the
 * pool's threads, at most the physical cores: SMT siblings share the FMA
 * units; the bounds leave room for all-core clocks below one core's turbo
 * and for slower cores of a hybrid CPU), or the all-threads read bandwidth
 * below 0.8 times one thread's (more readers never draw less on an idle
 * machine). */
int kiln_machine_busy(const kiln_machine_t* m);
/* The cache file's path; 0 when there is none (no HOME). */
int kiln_machine_cache_path(char* out, size_t size);

#endif /* KILN_MACHINE_H */
