/* Per-plane kernels of depthwise convolution and average pooling, and the
 * channels-last max pool's per-row one, compiled once per ISA of the conv
 * family's list from kiln_conv_planes.c (KILN_CONV_ISAS,
 * kernels/kiln_isa_variant.h): plain C loops that GCC vectorises at the
 * width of the flags the file is built with, FMA included at AVX2. The
 * drivers (kiln_conv.c, kiln_pool2d.c, kiln_pool_nhwc.c) pick a variant
 * from kiln_cpu_isa() once per call; the scalar references are
 * kiln_conv2d_f32_reference, kiln_avg_pool2d_f32_reference and
 * kiln_max_pool2d_f32_nhwc_reference. */
#ifndef KILN_CONV_PLANES_H
#define KILN_CONV_PLANES_H

#include <stdint.h>

#include "base/kiln_cpu.h"
#include "kernels/kiln_isa_variant.h"
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

/* Max pooling over channels-last x: output row i of image n (every pixel,
 * every channel; kiln_pool_nhwc.c). */
typedef void (*kiln_max_pool_nhwc_row_fn)(const kiln_pool2d_f32_args_t* a, int64_t n, int64_t i);

#define KILN_CONV_PLANES_DECLARE_(isa, LEVEL, unused)                                      \
  void kiln_f32_conv_dw_plane__##isa(const kiln_conv2d_f32_args_t* a, int64_t plane,       \
                                     float* acc);                                          \
  void kiln_f32_avg_pool_plane__##isa(const kiln_pool2d_f32_args_t* a, int64_t plane);    \
  void kiln_f32_max_pool_nhwc_row__##isa(const kiln_pool2d_f32_args_t* a, int64_t n, int64_t i);
KILN_CONV_ISAS(KILN_CONV_PLANES_DECLARE_, ~)

/* The variants for an ISA level (never NULL). */
static inline kiln_conv_dw_plane_fn kiln_conv_dw_plane_for(kiln_isa_t isa) {
  static const kiln_conv_dw_plane_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_conv_dw_plane);
  return v[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_CONV_ISAS), isa)];
}

static inline kiln_avg_pool_plane_fn kiln_avg_pool_plane_for(kiln_isa_t isa) {
  static const kiln_avg_pool_plane_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_avg_pool_plane);
  return v[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_CONV_ISAS), isa)];
}

static inline kiln_max_pool_nhwc_row_fn kiln_max_pool_nhwc_row_for(kiln_isa_t isa) {
  static const kiln_max_pool_nhwc_row_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_max_pool_nhwc_row);
  return v[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_CONV_ISAS), isa)];
}

#endif /* KILN_CONV_PLANES_H */
