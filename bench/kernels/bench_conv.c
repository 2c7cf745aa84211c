/* Convolution benchmark: ResNet-18's conv shapes (batch 1, 224x224) through
 * kiln_conv2d_f32 with weights packed ahead (as a compiled model runs
 * them), each as GFLOP/s and as a fraction of this machine's FMA peak
 * measured in the same process (CPU time, so time sliced away to other
 * processes on a shared machine does not count), with the weights packed in
 * panels of 6 (pixel-vector kernel) and 16 (channel-vector), and which one
 * kiln_conv2d_f32_panel_for picks. For comparison, the plain
 * GEMM of the same M, N, K with B packed. Usage: bench_conv [threads (1) [layer-name-prefix [runs (15)]]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/gemm/kiln_gemm.h"

/* One thread's AVX2 FMA peak in GFLOP/s per CPU second (0 without AVX2):
 * measured here, not read from kiln info, because this tool times each call
 * as a CPU-time minimum and divides by a peak taken the same way (kiln
 * info's peaks are wall-time rates). */
static double bench_peak(void) { return bench_fma_peak_cpu(5, 20000000L); }

typedef struct {
  const char* name;
  int64_t c, o, k, s, p, hw;
} bench_layer_t;

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  const char* only = argc > 2 ? argv[2] : NULL; /* a layer name prefix */
  int reps = argc > 3 ? atoi(argv[3]) : 15;
  if (reps < 1 || reps > 100000) reps = 15;
  kiln_pool_t* pool = NULL;
  if (kiln_pool_create(threads, &pool)) return 1;
  double peak = bench_peak();
  printf("isa %s, %d thread(s), one thread's FMA peak %.1f GFLOP/s (CPU time)\n",
         kiln_cpu_isa_name(kiln_cpu_isa()), threads, peak);
  static const bench_layer_t layers[] = {
      {"conv1 7x7/2", 3, 64, 7, 2, 3, 224},     {"l1 3x3 64", 64, 64, 3, 1, 1, 56},
      {"l2 3x3/2", 64, 128, 3, 2, 1, 56},       {"l2 1x1/2", 64, 128, 1, 2, 0, 56},
      {"l2 3x3 128", 128, 128, 3, 1, 1, 28},    {"l3 3x3/2", 128, 256, 3, 2, 1, 28},
      {"l3 1x1/2", 128, 256, 1, 2, 0, 28},      {"l3 3x3 256", 256, 256, 3, 1, 1, 14},
      {"l4 3x3/2", 256, 512, 3, 2, 1, 14},      {"l4 1x1/2", 256, 512, 1, 2, 0, 14},
      {"l4 3x3 512", 512, 512, 3, 1, 1, 7},
  };
  printf("%-12s %9s %7s %9s %7s %6s %9s %7s\n", "layer", "conv6 ms", "peak", "conv16 ms", "peak",
         "chosen", "gemm ms", "peak");
  for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); ++li) {
    const bench_layer_t* L = &layers[li];
    if (only && strncmp(L->name, only, strlen(only)) != 0) continue;
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = L->c, a.h = a.w = L->hw, a.o = L->o, a.kh = a.kw = L->k;
    a.sh = a.sw = L->s, a.ph = a.pw = L->p, a.dh = a.dw = 1, a.groups = 1;
    a.ho = a.wo = (L->hw + 2 * L->p - L->k) / L->s + 1;
    a.act = KILN_ACT_RELU;
    int64_t K = L->c * L->k * L->k, N = a.ho * a.wo;
    float* x = calloc((size_t)(L->c * L->hw * L->hw), sizeof(float));
    float* w = calloc((size_t)(L->o * K), sizeof(float));
    float* wp = aligned_alloc(64, (kiln_conv2d_f32_packed_size(L->o, K, 1, 6) + 63) / 64 * 64);
    float* wp16 = aligned_alloc(64, (kiln_conv2d_f32_packed_size(L->o, K, 1, 16) + 63) / 64 * 64);
    float* bias = calloc((size_t)L->o, sizeof(float));
    float* y = calloc((size_t)(L->o * N), sizeof(float));
    float* col = aligned_alloc(64, (kiln_gemm_f32_packed_size(K, N) + 63) / 64 * 64);
    for (int64_t i = 0; i < L->c * L->hw * L->hw; ++i) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < L->o * K; ++i) w[i] = (float)(i % 5) * 0.01f;
    memset(col, 0, kiln_gemm_f32_packed_size(K, N));
    kiln_conv2d_f32_pack_weight(L->o, K, 1, 6, w, wp);
    kiln_conv2d_f32_pack_weight(L->o, K, 1, 16, w, wp16);
    a.x = x, a.weight = wp, a.weight_packed = 6, a.bias = bias, a.y = y;
    kiln_conv2d_f32_args_t a16 = a;
    a16.weight = wp16, a16.weight_packed = 16;
    int chosen = kiln_conv2d_f32_panel_for(&a);
    kiln_gemm_f32_args_t g;
    memset(&g, 0, sizeof(g));
    g.batch = 1, g.m = L->o, g.n = N, g.k = K;
    g.a = w, g.a_row_stride = K, g.a_col_stride = 1, g.b_packed = col;
    g.c = y, g.c_row_stride = N;
    double* tc = calloc((size_t)reps, sizeof(double));
    double* tg = calloc((size_t)reps, sizeof(double));
    double* t16 = calloc((size_t)reps, sizeof(double));
    for (int r = -2; r < reps; ++r) {
      double c0 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32(&a, pool);
      double c1 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_gemm_f32(&g, pool);
      double c2 = threads > 1 ? bench_now() : bench_cpu_now();
      kiln_conv2d_f32(&a16, pool);
      double c3 = threads > 1 ? bench_now() : bench_cpu_now();
      if (r >= 0) tc[r] = c1 - c0, tg[r] = c2 - c1, t16[r] = c3 - c2;
    }
    qsort(tc, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(tg, (size_t)reps, sizeof(double), bench_cmp_double);
    qsort(t16, (size_t)reps, sizeof(double), bench_cmp_double);
    double flop = 2.0 * (double)L->o * (double)K * (double)N;
    double gc = flop / tc[0] * 1e-9, gg = flop / tg[0] * 1e-9;
    double g16 = flop / t16[0] * 1e-9;
    printf("%-12s %9.3f %6.0f%% %9.3f %6.0f%% %6d %9.3f %6.0f%%\n", L->name, tc[0] * 1e3,
           peak > 0 ? 100 * gc / (peak * threads) : 0, t16[0] * 1e3,
           peak > 0 ? 100 * g16 / (peak * threads) : 0, chosen, tg[0] * 1e3,
           peak > 0 ? 100 * gg / (peak * threads) : 0);
    free(x), free(w), free(wp), free(bias), free(y), free(col), free(tc), free(tg);
    free(wp16), free(t16);
  }
  kiln_pool_release(pool);
  return 0;
}
