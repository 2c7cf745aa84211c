/* Per-plane kernels of depthwise convolution and average pooling, compiled
 * once per ISA from kiln_conv_planes.c (KILN_CONV_PLANES_SUFFIX names the
 * variant, as kernels/nn and kernels/math do): plain C loops that GCC
 * vectorises at the width of the flags the file is built with, FMA
 * included at AVX2. The drivers (kiln_conv.c, kiln_pool2d.c) pick a variant
 * from kiln_cpu_isa() once per call; the scalar references are
 * kiln_conv2d_f32_reference and kiln_avg_pool2d_f32_reference. */
#ifndef KILN_CONV_PLANES_H
#define KILN_CONV_PLANES_H

#include <stdint.h>

#include "base/kiln_cpu.h"
#include "kernels/conv/kiln_conv.h"

/* Widest input row (and output row) the separable average pooling takes;
 * wider planes take the reference's direct loop. */
#define KILN_CONV_PLANES_ROW_MAX 4096

/* Depthwise conv (groups == C == O) of plane `plane` (n * C + c): every
 * output row of it, bias, residual and activation included. acc is Wo
 * floats of the caller's scratch. */
typedef void (*kiln_conv_dw_plane_fn)(const kiln_conv2d_f32_args_t* a, int64_t plane,
                                      float* acc);

/* Average pooling of plane `plane`: rows summed over the window's rows
 * first (whole input rows, vectorised), then over the window's columns.
 * Needs a->w and a->wo at most KILN_CONV_PLANES_ROW_MAX. */
typedef void (*kiln_avg_pool_plane_fn)(const kiln_pool2d_f32_args_t* a, int64_t plane);

#define KILN_CONV_PLANES_DECLARE(sfx)                                                    \
  void kiln_conv_dw_plane##sfx(const kiln_conv2d_f32_args_t* a, int64_t plane, float* acc); \
  void kiln_avg_pool_plane##sfx(const kiln_pool2d_f32_args_t* a, int64_t plane);

KILN_CONV_PLANES_DECLARE(_generic)
#if defined(__x86_64__) || defined(__i386__)
KILN_CONV_PLANES_DECLARE(_avx2)
#endif

/* The variants for an ISA level (never NULL); AVX-512 CPUs run the AVX2
 * one. */
static inline kiln_conv_dw_plane_fn kiln_conv_dw_plane_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= KILN_ISA_AVX2) return kiln_conv_dw_plane_avx2;
#endif
  (void)isa;
  return kiln_conv_dw_plane_generic;
}

static inline kiln_avg_pool_plane_fn kiln_avg_pool_plane_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= KILN_ISA_AVX2) return kiln_avg_pool_plane_avx2;
#endif
  (void)isa;
  return kiln_avg_pool_plane_generic;
}

#endif /* KILN_CONV_PLANES_H */
