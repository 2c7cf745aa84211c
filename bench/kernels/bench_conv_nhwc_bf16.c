/* bf16-compute against fp32 channels-last convolution on ResNet-18's conv
 * shapes (batch 1, 224x224): kiln_conv2d_f32_nhwc with the weight packed
 * in 16s and kiln_conv2d_bf16_nhwc with the bf16-compute layout (VDPBF16PS
 * where kiln_cpu_bf16() has it, else its portable path), relu epilogue,
 * interleaved repetition by repetition so both see the same machine.
 * Minimum over the repetitions, in the calling thread's CPU time with one
 * thread (time sliced away to other processes does not count), wall time
 * with more. Prints ms and GFLOP/s of each and the bf16 share of this
 * machine's measured bf16 dot peak (kiln_machine_get: VDPBF16PS, the same
 * thread count). The stem (x given NCHW, as the first conv of a
 * channels-last region runs), a ResNet-50 style 1x1 and MobileNetV2's 1x1
 * convs and stem are included.
 * Usage: bench_conv_nhwc_bf16 [threads (1) [runs (15) [layer name prefix]]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "runtime/kiln_machine.h"

typedef struct {
  const char* name;
  int64_t c, o, k, s, p, hw;
  int residual, x_nchw;
} bench_layer_t;

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1 || reps > 100000) reps = 15;
  const char* only = argc > 3 ? argv[3] : "";
  kiln_pool_t* pool = NULL;
  if (kiln_pool_create(threads, &pool)) return 1;
  kiln_machine_t mc;
  memset(&mc, 0, sizeof(mc));
  kiln_status_t st = kiln_machine_get(pool, 0, &mc);
  kiln_status_free(st);
  const double peak = threads > 1 ? mc.bf16_gflops : mc.bf16_gflops_1;
  printf("isa %s, %s; %d thread(s), min of %d runs (%s); VDPBF16PS peak %.0f GFLOP/s\n",
         kiln_cpu_isa_name(kiln_cpu_isa()), kiln_conv2d_bf16_describe(), threads, reps,
         threads > 1 ? "wall" : "thread CPU time", peak);
  static const bench_layer_t layers[] = {
      {"conv1 7x7/2", 3, 64, 7, 2, 3, 224, 0, 1}, {"l1 3x3 64", 64, 64, 3, 1, 1, 56, 0, 0},
      {"l1 3x3 64+r", 64, 64, 3, 1, 1, 56, 1, 0}, {"l2 3x3/2", 64, 128, 3, 2, 1, 56, 0, 0},
      {"l2 1x1/2", 64, 128, 1, 2, 0, 56, 0, 0},   {"l2 3x3 128", 128, 128, 3, 1, 1, 28, 0, 0},
      {"l3 3x3/2", 128, 256, 3, 2, 1, 28, 0, 0},  {"l3 1x1/2", 128, 256, 1, 2, 0, 28, 0, 0},
      {"l3 3x3 256", 256, 256, 3, 1, 1, 14, 0, 0}, {"l4 3x3/2", 256, 512, 3, 2, 1, 14, 0, 0},
      {"l4 1x1/2", 256, 512, 1, 2, 0, 14, 0, 0},  {"l4 3x3 512", 512, 512, 3, 1, 1, 7, 0, 0},
      {"r50 1x1 64-256", 64, 256, 1, 1, 0, 56, 0, 0},
      /* A UNet block's convs at 32x32 (no relu there; the shapes are what matter). */
      {"unet 3x3 128", 128, 128, 3, 1, 1, 32, 0, 0}, {"unet 3x3 128-256", 128, 256, 3, 1, 1, 32, 0, 0},
      {"unet 3x3 256", 256, 256, 3, 1, 1, 32, 1, 0}, {"unet 3x3 256 nchw x", 256, 256, 3, 1, 1, 32, 1, 1},
      /* MobileNetV2's 1x1 convs (expansions with relu; the projections have
       * none in the model, the relu here changes nothing that matters). */
      {"mnv2 1x1 32-16", 32, 16, 1, 1, 0, 112, 0, 0},   {"mnv2 1x1 16-96", 16, 96, 1, 1, 0, 112, 0, 0},
      {"mnv2 1x1 24-144", 24, 144, 1, 1, 0, 56, 0, 0},  {"mnv2 1x1 144-24", 144, 24, 1, 1, 0, 56, 0, 0},
      {"mnv2 1x1 32-192", 32, 192, 1, 1, 0, 28, 0, 0},  {"mnv2 1x1 192-32", 192, 32, 1, 1, 0, 28, 0, 0},
      {"mnv2 1x1 64-384", 64, 384, 1, 1, 0, 14, 0, 0},  {"mnv2 1x1 384-64", 384, 64, 1, 1, 0, 14, 0, 0},
      {"mnv2 1x1 96-576", 96, 576, 1, 1, 0, 14, 0, 0},  {"mnv2 1x1 576-96", 576, 96, 1, 1, 0, 14, 0, 0},
      {"mnv2 1x1 160-960", 160, 960, 1, 1, 0, 7, 0, 0}, {"mnv2 1x1 960-160", 960, 160, 1, 1, 0, 7, 0, 0},
      {"mnv2 1x1 960-320", 960, 320, 1, 1, 0, 7, 0, 0}, {"mnv2 1x1 320-1280", 320, 1280, 1, 1, 0, 7, 0, 0},
      {"mnv2 stem 3x3/2", 3, 32, 3, 2, 1, 224, 0, 1},
  };
  printf("%-20s %9s %9s %9s %9s %6s %6s\n", "layer", "fp32 ms", "bf16 ms", "fp32 GF/s", "bf16 GF/s",
         "ratio", "%peak");
  for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); ++li) {
    const bench_layer_t* L = &layers[li];
    if (strncmp(L->name, only, strlen(only))) continue;
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = L->c, a.h = a.w = L->hw, a.o = L->o, a.kh = a.kw = L->k;
    a.sh = a.sw = L->s, a.ph = a.pw = L->p, a.dh = a.dw = 1, a.groups = 1;
    a.ho = a.wo = (L->hw + 2 * L->p - L->k) / L->s + 1;
    a.act = KILN_ACT_RELU;
    a.residual_before_act = L->residual;
    const int64_t K = L->c * L->k * L->k, N = a.ho * a.wo;
    float* x = bench_alloc_floats((size_t)(L->c * L->hw * L->hw));
    float* w = malloc((size_t)(L->o * K) * sizeof(float));
    float* bias = calloc((size_t)L->o, sizeof(float));
    float* y = bench_alloc_floats((size_t)(L->o * N));
    float* res = L->residual ? bench_alloc_floats((size_t)(L->o * N)) : NULL;
    float* w16 = malloc(kiln_conv2d_f32_packed_size(L->o, K, 1, KILN_CONV_PANEL_WIDE));
    uint16_t* wb = malloc(kiln_conv2d_bf16_packed_size(L->o, L->c, L->k, L->k, 1));
    for (int64_t i = 0; i < L->c * L->hw * L->hw; ++i) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < L->o * K; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-4f - 0.05f;
    kiln_conv2d_f32_pack_weight(L->o, K, 1, KILN_CONV_PANEL_WIDE, w, w16);
    kiln_conv2d_bf16_pack_weight(L->o, L->c, L->k, L->k, 1, w, wb);
    a.x = x, a.bias = bias, a.residual = res, a.y = y;
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps + 2; ++r)
      for (int m = 0; m < 2; ++m) {
        a.weight = m ? (const float*)(const void*)wb : w16;
        a.weight_packed = m ? KILN_CONV_PACKED_BF16 : KILN_CONV_PANEL_WIDE;
        double t0 = threads > 1 ? bench_now() : bench_thread_cpu_now();
        if (m) kiln_conv2d_bf16_nhwc(&a, L->x_nchw, pool);
        else if (L->x_nchw) kiln_conv2d_f32_nhwc_from_nchw(&a, pool);
        else kiln_conv2d_f32_nhwc(&a, pool);
        double t = (threads > 1 ? bench_now() : bench_thread_cpu_now()) - t0;
        if (r >= 2 && t < best[m]) best[m] = t; /* two warm-up rounds */
      }
    const double flop = 2.0 * (double)(K * N * L->o);
    printf("%-20s %9.3f %9.3f %9.1f %9.1f %5.2fx %5.0f%%\n", L->name, best[0] * 1e3, best[1] * 1e3,
           flop / best[0] * 1e-9, flop / best[1] * 1e-9, best[0] / best[1],
           peak > 0 ? 100.0 * flop / best[1] * 1e-9 / peak : 0.0);
    free(x), free(w), free(bias), free(y), free(res), free(w16), free(wb);
  }
  kiln_pool_release(pool);
  return 0;
}
