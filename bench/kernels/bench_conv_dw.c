/* Depthwise convolution NCHW against NHWC on MobileNetV2's depthwise
 * shapes (batch 1, 224x224 input, 3x3, ReLU6 epilogue): kiln_conv2d_f32
 * (the planes kernel) and kiln_conv2d_f32_nhwc (the channels-last
 * depthwise kernel, dense weight), interleaved repetition by repetition.
 * Minimum over the repetitions, in process CPU time with one thread, wall
 * time with more. Prints ms, GB/s of x read plus y written, and the ratio
 * NCHW / NHWC (> 1: NHWC faster).
 * Usage: bench_conv_dw [threads (1) [runs (15)]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc.h"

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1 || reps > 100000) reps = 15;
  kiln_pool_t* pool = NULL;
  if (kiln_pool_create(threads, &pool)) return 1;
  printf("isa %s, %d thread(s), min of %d runs (%s)\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         threads, reps, threads > 1 ? "wall" : "CPU time");
  /* channels, input size, stride */
  static const int64_t layers[][3] = {{32, 112, 1},  {96, 112, 2}, {144, 56, 1}, {144, 56, 2},
                                      {192, 28, 1},  {192, 28, 2}, {384, 14, 1}, {576, 14, 1},
                                      {576, 14, 2},  {960, 7, 1}};
  printf("%-14s %9s %9s %9s %9s %7s\n", "layer", "nchw ms", "GB/s", "nhwc ms", "GB/s", "ratio");
  double sum_c = 0, sum_h = 0;
  for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); ++li) {
    const int64_t C = layers[li][0], hw = layers[li][1], s = layers[li][2];
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = a.o = a.groups = C, a.h = a.w = hw, a.kh = a.kw = 3;
    a.sh = a.sw = s, a.ph = a.pw = 1, a.dh = a.dw = 1;
    a.ho = a.wo = (hw + 2 - 3) / s + 1;
    a.act = KILN_ACT_RELU6;
    const int64_t nx = C * hw * hw, ny = C * a.ho * a.wo;
    float* x = bench_alloc_floats((size_t)nx);
    float* w = malloc((size_t)C * 9 * sizeof(float));
    float* bias = malloc((size_t)C * sizeof(float));
    float* y = bench_alloc_floats((size_t)ny);
    for (int64_t i = 0; i < nx; ++i) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < C * 9; ++i) w[i] = (float)(i % 5) * 0.1f;
    for (int64_t i = 0; i < C; ++i) bias[i] = 0.01f * (float)i;
    a.x = x, a.weight = w, a.bias = bias, a.y = y;
    double* tc = calloc((size_t)reps, sizeof(double));
    double* th = calloc((size_t)reps, sizeof(double));
    for (int rr = -2; rr < reps; ++rr) {
      double c0 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32(&a, pool);
      double c1 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32_nhwc(&a, pool);
      double c2 = threads > 1 ? bench_now() : bench_cpu_now();
      if (rr >= 0) tc[rr] = c1 - c0, th[rr] = c2 - c1;
    }
    qsort(tc, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(th, (size_t)reps, sizeof(double), bench_cmp_double);
    const double gb = (double)(nx + ny) * 4e-9;
    char name[32];
    snprintf(name, sizeof name, "%lldx%lld /%lld", (long long)C, (long long)hw, (long long)s);
    printf("%-14s %9.3f %9.1f %9.3f %9.1f %7.2f\n", name, tc[0] * 1e3, gb / tc[0], th[0] * 1e3,
           gb / th[0], tc[0] / th[0]);
    fflush(stdout);
    sum_c += tc[0], sum_h += th[0];
    free(x), free(w), free(bias), free(y), free(tc), free(th);
  }
  printf("%-14s %9.3f %9s %9.3f %9s %7.2f\n", "sum", sum_c * 1e3, "", sum_h * 1e3, "",
         sum_c / sum_h);
  kiln_pool_release(pool);
  return 0;
}
