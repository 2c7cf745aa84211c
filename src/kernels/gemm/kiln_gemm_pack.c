/* Packing: B into the ISA-independent panel layout (once, for weights, or
 * per call for activations), A into MR-row panels per call. The layouts are
 * documented in kiln_gemm_internal.h. Packing absorbs every operand stride,
 * so the microkernels only ever see unit-stride panels. */
#include <string.h>

#include "base/kiln_cpu.h"

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

size_t kiln_gemm_f32_packed_size(int64_t k, int64_t n) {
  if (k <= 0 || n <= 0) return 0;
  int64_t panels = (n + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
  return (size_t)panels * (size_t)k * KILN_GEMM_PANEL * sizeof(float);
}

void kiln_gemm_pack_b_block(int64_t kc, int64_t w, const float* b, int64_t rs, int64_t cs,
                            float* out) {
  const int P = KILN_GEMM_PANEL;
  if (cs == 1) {
    for (int64_t p = 0; p < kc; ++p) {
      memcpy(out + p * P, b + p * rs, (size_t)w * sizeof(float));
      for (int64_t j = w; j < P; ++j) out[p * P + j] = 0.0f;
    }
    return;
  }
  /* Any other layout (the transposed W^T has rs == 1): column by column,
   * each read contiguously when rs == 1. */
  for (int64_t j = 0; j < P; ++j) {
    if (j < w) {
      const float* col = b + j * cs;
      for (int64_t p = 0; p < kc; ++p) out[p * P + j] = col[p * rs];
    } else {
      for (int64_t p = 0; p < kc; ++p) out[p * P + j] = 0.0f;
    }
  }
}

/* A weight is packed with the block packer a GEMM uses for activations
 * (the ISA's: AVX2 transposes 8 x 8 in registers, where the portable one
 * moves a float at a time), each panel as one block of all K rows; the
 * layout does not depend on which one ran. */
void kiln_gemm_f32_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                          int64_t col_stride, float* out) {
  const kiln_gemm_b_src_t src = {b, NULL, n, row_stride, col_stride};
  kiln_gemm_f32_pack_b_src(k, n, &src, out);
}

void kiln_gemm_f32_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src, float* out) {
  if (k <= 0 || n <= 0) return;
  const kiln_gemm_kernels_t* kn = kiln_gemm_kernels_for(kiln_cpu_isa());
  const int P = KILN_GEMM_PANEL;
  for (int64_t j0 = 0; j0 < n; j0 += P) {
    const int64_t w = n - j0 < P ? n - j0 : P;
    float* dst = out + j0 * k;
    if (j0 >= src->split || j0 + w <= src->split) { /* one half's columns: the ISA's block */
      kn->pack_b_block(k, w, kiln_gemm_b_col(src, j0), src->rs, src->cs, dst);
      continue;
    }
    /* The panel where a joined B's halves meet, column by column. */
    for (int64_t j = 0; j < P; ++j) {
      const float* col = j < w ? kiln_gemm_b_col(src, j0 + j) : NULL;
      for (int64_t p = 0; p < k; ++p) dst[p * P + j] = col ? col[p * src->rs] : 0.0f;
    }
  }
}

/* One panel of MR rows; MR is a compile-time constant in each caller below
 * so the inner loop unrolls into MR loads and a contiguous store. */
static inline void kiln_gemm_pack_a_panel(const int MR, int64_t k, const float* a, int64_t rs,
                                          int64_t cs, int64_t rows, float* out) {
  if (rows == MR && cs == 1) {
    const float* r[8];
    for (int i = 0; i < MR; ++i) r[i] = a + i * rs;
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < MR; ++i) out[p * MR + i] = r[i][p];
  } else if (rows == MR && rs == 1) {
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < MR; ++i) out[p * MR + i] = a[p * cs + i];
  } else {
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < MR; ++i) out[p * MR + i] = i < rows ? a[i * rs + p * cs] : 0.0f;
  }
}

#define KILN_GEMM_PACK_A_MR(MR)                                                        \
  static void kiln_gemm_pack_a_##MR(int64_t k, const float* a, int64_t rs, int64_t cs, \
                                    int64_t rows, float* out) {                        \
    kiln_gemm_pack_a_panel(MR, k, a, rs, cs, rows, out);                               \
  }
KILN_GEMM_PACK_A_MR(4)
KILN_GEMM_PACK_A_MR(6)
KILN_GEMM_PACK_A_MR(8)

void kiln_gemm_pack_a(int mr, int64_t k, const float* a, int64_t rs, int64_t cs, int64_t row0,
                      int64_t rows, int64_t m_total, float* out) {
  for (int64_t i = 0; i < rows; i += mr) {
    int64_t live = m_total - (row0 + i);
    if (live > mr) live = mr;
    if (live > rows - i) live = rows - i;
    const float* src = a + (row0 + i) * rs;
    float* dst = out + (i / mr) * k * mr;
    switch (mr) {
      case 4: kiln_gemm_pack_a_4(k, src, rs, cs, live, dst); break;
      case 6: kiln_gemm_pack_a_6(k, src, rs, cs, live, dst); break;
      case 8: kiln_gemm_pack_a_8(k, src, rs, cs, live, dst); break;
      default: break;
    }
  }
}
