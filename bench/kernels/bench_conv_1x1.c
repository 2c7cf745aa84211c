/* Pointwise (1x1, stride 1) convolution in NHWC against the fp32 GEMM on
 * the same operands, MobileNetV2's 1x1 shapes (batch 1, 224x224 input):
 * kiln_conv2d_f32_nhwc (the channel-vector implicit GEMM, weight packed in
 * 16s, bias and ReLU6 or none) and kiln_gemm_f32 with A = x (pixels x C),
 * the same packed weight as B, the same epilogue. Interleaved repetition by
 * repetition; minimum over repetitions, process CPU time at one thread,
 * wall time at more. Prints ms, GFLOP/s and the ratio conv / gemm.
 * Usage: bench_conv_1x1 [threads (1) [runs (15)]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/gemm/kiln_gemm.h"

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1 || reps > 100000) reps = 15;
  kiln_pool_t* pool = NULL;
  if (kiln_pool_create(threads, &pool)) return 1;
  printf("isa %s, %d thread(s), min of %d runs (%s)\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         threads, reps, threads > 1 ? "wall" : "CPU time");
  /* in channels, out channels, size, relu6 */
  static const int64_t layers[][4] = {
      {32, 16, 112, 0},  {16, 96, 112, 1},  {24, 144, 56, 1}, {144, 24, 56, 0},
      {32, 192, 28, 1},  {192, 32, 28, 0},  {64, 384, 14, 1}, {384, 64, 14, 0},
      {96, 576, 14, 1},  {576, 96, 14, 0},  {160, 960, 7, 1}, {960, 160, 7, 0},
      {960, 320, 7, 0},  {320, 1280, 7, 1}};
  printf("%-18s %9s %8s %9s %8s %7s\n", "layer", "conv ms", "GFLOP/s", "gemm ms", "GFLOP/s",
         "ratio");
  double sum_c = 0, sum_g = 0;
  for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); ++li) {
    const int64_t C = layers[li][0], O = layers[li][1], hw = layers[li][2];
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = C, a.o = O, a.groups = 1, a.h = a.w = a.ho = a.wo = hw;
    a.kh = a.kw = 1, a.sh = a.sw = 1, a.dh = a.dw = 1;
    a.act = layers[li][3] ? KILN_ACT_RELU6 : KILN_ACT_NONE;
    const int64_t M = hw * hw;
    float* x = bench_alloc_floats((size_t)(M * C));
    float* w = malloc((size_t)(O * C) * sizeof(float));
    float* wp = aligned_alloc(64, kiln_conv2d_f32_packed_size(O, C, 1, KILN_CONV_PANEL_WIDE) + 64);
    float* bias = malloc((size_t)O * sizeof(float));
    float* y = bench_alloc_floats((size_t)(M * O));
    float* y2 = bench_alloc_floats((size_t)(M * O));
    for (int64_t i = 0; i < M * C; ++i) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < O * C; ++i) w[i] = (float)(i % 5) * 0.1f;
    for (int64_t i = 0; i < O; ++i) bias[i] = 0.01f * (float)i;
    kiln_conv2d_f32_pack_weight(O, C, 1, KILN_CONV_PANEL_WIDE, w, wp);
    a.x = x, a.weight = wp, a.weight_packed = KILN_CONV_PANEL_WIDE, a.bias = bias, a.y = y;
    kiln_gemm_f32_args_t g;
    memset(&g, 0, sizeof(g));
    g.batch = 1, g.m = M, g.n = O, g.k = C;
    g.a = x, g.a_row_stride = C, g.a_col_stride = 1;
    g.b_packed = wp, g.c = y2, g.c_row_stride = O, g.bias = bias, g.act = a.act;
    double* tc = calloc((size_t)reps, sizeof(double));
    double* tg = calloc((size_t)reps, sizeof(double));
    for (int rr = -2; rr < reps; ++rr) {
      double c0 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32_nhwc(&a, pool);
      double c1 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_gemm_f32(&g, pool);
      double c2 = threads > 1 ? bench_now() : bench_cpu_now();
      if (rr >= 0) tc[rr] = c1 - c0, tg[rr] = c2 - c1;
    }
    double maxd = 0;
    for (int64_t i = 0; i < M * O; ++i) {
      double d = y[i] - y2[i];
      if (d < 0) d = -d;
      if (d > maxd) maxd = d;
    }
    qsort(tc, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(tg, (size_t)reps, sizeof(double), bench_cmp_double);
    const double gf = 2.0 * (double)M * (double)C * (double)O * 1e-9;
    char name[40];
    snprintf(name, sizeof name, "%lldx%lld->%lld%s", (long long)hw, (long long)C, (long long)O,
             maxd > 1e-3 ? " DIFF" : "");
    printf("%-18s %9.3f %8.1f %9.3f %8.1f %7.2f\n", name, tc[0] * 1e3, gf / tc[0], tg[0] * 1e3,
           gf / tg[0], tc[0] / tg[0]);
    fflush(stdout);
    sum_c += tc[0], sum_g += tg[0];
    free(x), free(w), free(wp), free(bias), free(y), free(y2), free(tc), free(tg);
  }
  printf("%-18s %9.3f %8s %9.3f %8s %7.2f\n", "sum", sum_c * 1e3, "", sum_g * 1e3, "",
         sum_c / sum_g);
  kiln_pool_release(pool);
  return 0;
}
