/* NCHW against NHWC convolution on ResNet-18's conv shapes (batch 1,
 * 224x224), in one process: kiln_conv2d_f32 with the weight packed for the
 * kernel the shape picks (what a compiled NCHW model runs) and
 * kiln_conv2d_f32_nhwc with it packed in 16s, relu epilogue, interleaved
 * repetition by repetition so both see the same machine. Minimum over the
 * repetitions, in process CPU time with one thread (time sliced away to
 * other processes does not count), wall time with more. Prints ms and the
 * ratio NCHW / NHWC (> 1: NHWC faster). Also a residual-fused variant of
 * the stride-1 3x3 layers (a ResNet block's second conv).
 * Usage: bench_conv_nhwc [threads (1) [runs (15)]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc.h"

typedef struct {
  const char* name;
  int64_t c, o, k, s, p, hw;
  int residual;
} bench_layer_t;

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1 || reps > 100000) reps = 15;
  kiln_pool_t* pool = NULL;
  if (kiln_pool_create(threads, &pool)) return 1;
  printf("isa %s, %d thread(s), min of %d runs (%s)\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         threads, reps, threads > 1 ? "wall" : "CPU time");
  static const bench_layer_t layers[] = {
      {"conv1 7x7/2", 3, 64, 7, 2, 3, 224, 0},  {"l1 3x3 64", 64, 64, 3, 1, 1, 56, 0},
      {"l1 3x3 64+r", 64, 64, 3, 1, 1, 56, 1},  {"l2 3x3/2", 64, 128, 3, 2, 1, 56, 0},
      {"l2 1x1/2", 64, 128, 1, 2, 0, 56, 0},    {"l2 3x3 128", 128, 128, 3, 1, 1, 28, 0},
      {"l2 3x3 128+r", 128, 128, 3, 1, 1, 28, 1}, {"l3 3x3/2", 128, 256, 3, 2, 1, 28, 0},
      {"l3 1x1/2", 128, 256, 1, 2, 0, 28, 0},   {"l3 3x3 256", 256, 256, 3, 1, 1, 14, 0},
      {"l3 3x3 256+r", 256, 256, 3, 1, 1, 14, 1}, {"l4 3x3/2", 256, 512, 3, 2, 1, 14, 0},
      {"l4 1x1/2", 256, 512, 1, 2, 0, 14, 0},   {"l4 3x3 512", 512, 512, 3, 1, 1, 7, 0},
      {"l4 3x3 512+r", 512, 512, 3, 1, 1, 7, 1},
  };
  printf("%-13s %6s %9s %9s %7s %11s\n", "layer", "panel", "nchw ms", "nhwc ms", "ratio",
         "nchw->nhwc");
  double sum_c = 0, sum_h = 0;
  for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); ++li) {
    const bench_layer_t* L = &layers[li];
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = L->c, a.h = a.w = L->hw, a.o = L->o, a.kh = a.kw = L->k;
    a.sh = a.sw = L->s, a.ph = a.pw = L->p, a.dh = a.dw = 1, a.groups = 1;
    a.ho = a.wo = (L->hw + 2 * L->p - L->k) / L->s + 1;
    a.act = KILN_ACT_RELU;
    a.residual_before_act = L->residual;
    int64_t K = L->c * L->k * L->k, N = a.ho * a.wo;
    float* x = bench_alloc_floats((size_t)(L->c * L->hw * L->hw));
    float* w = calloc((size_t)(L->o * K), sizeof(float));
    int panel = kiln_conv2d_f32_panel_for(&a);
    float* wp = aligned_alloc(64, (kiln_conv2d_f32_packed_size(L->o, K, 1, panel) + 63) / 64 * 64);
    float* wp16 = aligned_alloc(64, (kiln_conv2d_f32_packed_size(L->o, K, 1, 16) + 63) / 64 * 64);
    float* bias = calloc((size_t)L->o, sizeof(float));
    float* y = bench_alloc_floats((size_t)(L->o * N));
    float* r = bench_alloc_floats((size_t)(L->o * N));
    for (int64_t i = 0; i < L->c * L->hw * L->hw; ++i) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < L->o * K; ++i) w[i] = (float)(i % 5) * 0.01f;
    kiln_conv2d_f32_pack_weight(L->o, K, 1, panel, w, wp);
    kiln_conv2d_f32_pack_weight(L->o, K, 1, 16, w, wp16);
    a.x = x, a.weight = wp, a.weight_packed = panel, a.bias = bias, a.y = y;
    a.residual = L->residual ? r : NULL;
    kiln_conv2d_f32_args_t h = a;
    h.weight = wp16, h.weight_packed = 16;
    double* tc = calloc((size_t)reps, sizeof(double));
    double* th = calloc((size_t)reps, sizeof(double));
    double* tg = calloc((size_t)reps, sizeof(double));
    for (int rr = -2; rr < reps; ++rr) {
      double c0 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32(&a, pool);
      double c1 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32_nhwc(&h, pool);
      double c2 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32_nhwc_from_nchw(&h, pool);
      double c3 = threads > 1 ? bench_now() : bench_cpu_now();
      if (rr >= 0) tc[rr] = c1 - c0, th[rr] = c2 - c1, tg[rr] = c3 - c2;
    }
    qsort(tc, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(th, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(tg, (size_t)reps, sizeof(double), bench_cmp_double);
    printf("%-13s %6d %9.3f %9.3f %7.2f %11.3f\n", L->name, panel, tc[0] * 1e3, th[0] * 1e3,
           tc[0] / th[0], tg[0] * 1e3);
    fflush(stdout);
    if (!L->residual) sum_c += tc[0], sum_h += th[0];
    free(x), free(w), free(wp), free(wp16), free(bias), free(y), free(r), free(tc), free(th), free(tg);
  }
  printf("%-13s %6s %9.3f %9.3f %7.2f  (plain layers, each once)\n", "sum", "", sum_c * 1e3,
         sum_h * 1e3, sum_c / sum_h);
  kiln_pool_release(pool);
  return 0;
}
