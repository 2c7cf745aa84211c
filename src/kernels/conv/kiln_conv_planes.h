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
 * output row of it, bias, residual and activation included. acc is
 * kiln_conv_dw_scratch_floats(a) floats of the caller's scratch. */
typedef void (*kiln_conv_dw_plane_fn)(const kiln_conv2d_f32_args_t* a, int64_t plane,
                                      float* acc);

/* Stride 1 planes of at most this many floats (zero-bordered input and
 * output rows at its pitch) take the flat path (kiln_conv_planes.c). */
#define KILN_CONV_DW_FLAT_MAX ((int64_t)1 << 18)

/* Floats of scratch a depthwise plane needs: the flat path's bordered
 * input, its reach past the end and its outputs at the input's pitch, or
 * one output row. */
static inline int64_t kiln_conv_dw_flat_floats(const kiln_conv2d_f32_args_t* a) {
  if (a->sh != 1 || a->sw != 1) return 0;
  const int64_t hp = a->ho + (a->kh - 1) * a->dh, wp = a->wo + (a->kw - 1) * a->dw;
  const int64_t n = hp * wp + (a->kw - 1) * a->dw + a->ho * wp;
  return n <= KILN_CONV_DW_FLAT_MAX ? n : 0;
}
static inline int64_t kiln_conv_dw_scratch_floats(const kiln_conv2d_f32_args_t* a) {
  const int64_t f = kiln_conv_dw_flat_floats(a);
  return f > a->wo ? f : a->wo;
}

/* Average pooling of plane `plane`: rows summed over the window's rows
 * first (whole input rows, vectorised), then over the window's columns.
 * Needs a->w and a->wo at most KILN_CONV_PLANES_ROW_MAX. */
typedef void (*kiln_avg_pool_plane_fn)(const kiln_pool2d_f32_args_t* a, int64_t plane);

/* Max pooling over channels-last x: output row i of image n (every pixel,
 * every channel; kiln_pool_nhwc.c). */
typedef void (*kiln_max_pool_nhwc_row_fn)(const kiln_pool2d_f32_args_t* a, int64_t n, int64_t i);

/* Depthwise conv channels-last (groups == C == O, kiln_conv_dw_nhwc.c):
 * output row i of image n, every pixel and channel: bias plus sums,
 * clamped to [clamp[0], clamp[1]] (NaN and -0.0 pass: none, relu, relu6),
 * into yrow (Wo x C; the driver applies other activations and a residual):
 * floats, or bf16 rounded to nearest even when bf16_y (only with the args'
 * y_bf16). x holds bf16 when the args' x_bf16 says so.
 * wt: the weight taps-major, wt[(u kw + v) C + c]. At most
 * KILN_CONV_DW_NHWC_TAPS taps. */
#define KILN_CONV_DW_NHWC_TAPS 49
typedef void (*kiln_conv_dw_nhwc_row_fn)(const kiln_conv2d_f32_args_t* a, const float* wt,
                                         int64_t n, int64_t i, const float* clamp, void* yrow,
                                         int bf16_y);

#define KILN_CONV_PLANES_DECLARE_(isa, LEVEL, unused)                                      \
  void kiln_f32_conv_dw_nhwc_row__##isa(const kiln_conv2d_f32_args_t* a, const float* wt,  \
                                        int64_t n, int64_t i, const float* clamp,          \
                                        void* yrow, int bf16_y);                           \
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

static inline kiln_conv_dw_nhwc_row_fn kiln_conv_dw_nhwc_row_for(kiln_isa_t isa) {
  static const kiln_conv_dw_nhwc_row_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_conv_dw_nhwc_row);
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
