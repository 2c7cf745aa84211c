/* bf16 weights: conversion, packing, and the portable kernels.
 *
 * A bf16 number is the top half of an fp32 one, so widening is exact (a
 * 16-bit shift) and every kernel accumulates in fp32: the result equals the
 * fp32 GEMM with the bf16-rounded weights, up to summation order. Packing
 * rounds to nearest even, as torch's .to(torch.bfloat16), so a model whose
 * weights were rounded by torch sees the same weights here. The packed
 * layout is kiln_gemm_f32_pack_b's with 2-byte elements (ISA independent). */
#include <string.h>

#include "base/kiln_bf16.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

uint16_t kiln_gemm_bf16_from_f32(float x) { return kiln_bf16_from_f32(x); }

float kiln_gemm_bf16_to_f32(uint16_t x) { return kiln_bf16_to_f32(x); }

size_t kiln_gemm_bf16_packed_size(int64_t k, int64_t n) {
  return kiln_gemm_f32_packed_size(k, n) / 2;
}

void kiln_gemm_bf16_pack_b(int64_t k, int64_t n, const float* b, int64_t rs, int64_t cs,
                           uint16_t* out) {
  const kiln_gemm_b_src_t src = {b, NULL, n, rs, cs};
  kiln_gemm_bf16_pack_b_src(k, n, &src, out);
}

void kiln_gemm_bf16_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src,
                               uint16_t* out) {
  if (k <= 0 || n <= 0) return;
  const int P = KILN_GEMM_PANEL;
  int64_t panels = (n + P - 1) / P;
  for (int64_t q = 0; q < panels; ++q) {
    uint16_t* dst = out + q * k * P;
    int64_t j0 = q * P, w = n - j0 < P ? n - j0 : P;
    /* K blocks so that, for column-major B (nn.Linear's W^T), each column
     * is read contiguously while the panel lines being written stay in L1. */
    for (int64_t p0 = 0; p0 < k; p0 += 64) {
      int64_t p1 = p0 + 64 < k ? p0 + 64 : k;
      for (int64_t jj = 0; jj < P; ++jj) {
        const float* col = jj < w ? kiln_gemm_b_col(src, j0 + jj) : NULL;
        for (int64_t p = p0; p < p1; ++p)
          dst[p * P + jj] = col ? kiln_gemm_bf16_from_f32(col[p * src->rs]) : 0;
      }
    }
  }
}

void kiln_bf16w_gemm_widen__generic(int64_t kc, int64_t k, int panels, const uint16_t* b,
                                    float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int q = 0; q < panels; ++q)
    for (int64_t i = 0; i < kc * P; ++i)
      out[q * kc * P + i] = kiln_gemm_bf16_to_f32(b[q * k * P + i]);
}

static void kiln_gemm_gemv_bf16_generic_1(int64_t m, int64_t k, const float* a, int64_t lda,
                                          const uint16_t* b_panel, float* out) {
  const int P = KILN_GEMM_PANEL;
  float acc[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
  for (int64_t p = 0; p < k; ++p) {
    float bp[KILN_GEMM_PANEL];
    for (int j = 0; j < P; ++j) bp[j] = kiln_gemm_bf16_to_f32(b_panel[p * P + j]);
    for (int64_t i = 0; i < m; ++i) {
      float av = a[i * lda + p];
      for (int j = 0; j < P; ++j) acc[i][j] += av * bp[j];
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int j = 0; j < P; ++j) out[i * P + j] = acc[i][j];
}

void kiln_f32_bf16w_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda,
                                  const uint16_t* b_panel, int panels, float* out) {
  for (int q = 0; q < panels; ++q)
    kiln_gemm_gemv_bf16_generic_1(m, k, a, lda, b_panel + q * k * KILN_GEMM_PANEL,
                                  out + q * m * KILN_GEMM_PANEL);
}

void kiln_gemm_pack_b_block_bf16(int64_t kc, int64_t w, const uint16_t* b, int64_t rs, int64_t cs,
                                 float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int64_t p = 0; p < kc; ++p) /* rows of 16: GCC vectorises the widening */
    for (int64_t j = 0; j < P; ++j)
      out[p * P + j] = j < w ? kiln_gemm_bf16_to_f32(b[p * rs + j * cs]) : 0.0f;
}

void kiln_gemm_pack_a_bf16(int mr, int64_t k, const uint16_t* a, int64_t rs, int64_t cs,
                           int64_t row0, int64_t rows, int64_t m_total, float* out) {
  for (int64_t i0 = 0; i0 < rows; i0 += mr) {
    int64_t live = m_total - (row0 + i0);
    if (live > mr) live = mr;
    if (live > rows - i0) live = rows - i0;
    const uint16_t* src = a + (row0 + i0) * rs;
    float* dst = out + (i0 / mr) * k * mr;
    for (int64_t p = 0; p < k; ++p)
      for (int i = 0; i < mr; ++i)
        dst[p * mr + i] = i < live ? kiln_gemm_bf16_to_f32(src[i * rs + p * cs]) : 0.0f;
  }
}

/* ---- bf16 compute: the VNNI-pair layout (kiln_gemm.h) ----------------- */

static int64_t kiln_gemm_bf16_even(int64_t k) { return k + (k & 1); }

size_t kiln_gemm_bf16_vnni_packed_size(int64_t k, int64_t n) {
  if (k <= 0 || n <= 0) return 0;
  return (size_t)((n + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL) * KILN_GEMM_PANEL *
         (size_t)kiln_gemm_bf16_even(k) * sizeof(uint16_t);
}

void kiln_gemm_bf16_vnni_pack_b(int64_t k, int64_t n, const float* b, int64_t rs, int64_t cs,
                                uint16_t* out) {
  const kiln_gemm_b_src_t src = {b, NULL, n, rs, cs};
  kiln_gemm_bf16_vnni_pack_b_src(k, n, &src, out);
}

/* Panels [q0, q1) of B (fp32 b rounded, or bf16 b16 when set; element
 * (p, j) at [p * rs + j * cs]) into out (the whole matrix's): the portable
 * packer, and the reference the ISA's is held to. */
void kiln_bf16_gemm_pack_b_vnni__generic(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                         const float* b, const uint16_t* b16, int64_t rs,
                                         int64_t cs, uint16_t* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = kiln_gemm_bf16_even(k);
  for (int64_t q = q0; q < q1; ++q) {
    uint16_t* dst = out + q * kp * P;
    int64_t j0 = q * P, w = n - j0 < P ? n - j0 : P;
    for (int64_t p0 = 0; p0 < kp; p0 += 64) { /* K blocks: see kiln_gemm_bf16_pack_b */
      int64_t p1 = p0 + 64 < kp ? p0 + 64 : kp;
      for (int64_t jj = 0; jj < P; ++jj)
        for (int64_t p = p0; p < p1; ++p)
          dst[(p / 2) * 2 * P + jj * 2 + (p & 1)] =
              jj < w && p < k ? kiln_gemm_bf16_elem(b, b16, p * rs + (j0 + jj) * cs) : 0;
    }
  }
}

void kiln_gemm_bf16_vnni_pack_b_panels(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                       const float* b, const uint16_t* b16, int64_t rs, int64_t cs,
                                       uint16_t* out) {
  if (k <= 0 || n <= 0 || q0 >= q1) return;
#if KILN_GEMM_HAVE_X86
  if (kiln_cpu_isa() == KILN_ISA_AVX512) { /* AVX-512F integer ops: any bf16 engine or none */
    kiln_bf16_gemm_pack_b_vnni__avx512(k, n, q0, q1, b, b16, rs, cs, out);
    return;
  }
#endif
  kiln_bf16_gemm_pack_b_vnni__generic(k, n, q0, q1, b, b16, rs, cs, out);
}

/* A joined source [A | B] (or one matrix: split >= n) of fp32 (a, b) or
 * bf16 (a16, b16) elements: the panels of either half through the ISA's
 * packer, the one where the halves meet column by column. */
static void kiln_gemm_bf16_vnni_pack_joined(int64_t k, int64_t n, const float* a, const float* b,
                                            const uint16_t* a16, const uint16_t* b16, int64_t split,
                                            int64_t rs, int64_t cs, uint16_t* out) {
  if (k <= 0 || n <= 0) return;
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = kiln_gemm_bf16_even(k), panels = (n + P - 1) / P;
  if (split >= n) {
    kiln_gemm_bf16_vnni_pack_b_panels(k, n, 0, panels, a, a16, rs, cs, out);
    return;
  }
  const int64_t qa = split / P, qb = (split + P - 1) / P;
  kiln_gemm_bf16_vnni_pack_b_panels(k, split, 0, qa, a, a16, rs, cs, out);
  if (qa < qb) { /* the panel where the halves meet */
    uint16_t* dst = out + qa * kp * P;
    for (int64_t jj = 0; jj < P; ++jj) {
      int64_t j = qa * P + jj;
      int in_a = j < split;
      int64_t at = (in_a ? j : j - split) * cs;
      const float* f = in_a ? a : b;
      const uint16_t* h = in_a ? a16 : b16;
      for (int64_t p = 0; p < kp; ++p)
        dst[(p / 2) * 2 * P + jj * 2 + (p & 1)] =
            j < n && p < k ? kiln_gemm_bf16_elem(f, h, at + p * rs) : 0;
    }
  }
  /* B's panels: B's columns from qb P - split on, as a matrix of their own. */
  if (qb >= panels) return;
  const int64_t off = (qb * P - split) * cs;
  kiln_gemm_bf16_vnni_pack_b_panels(k, n - qb * P, 0, panels - qb, b16 ? NULL : b + off,
                                    b16 ? b16 + off : NULL, rs, cs, out + qb * kp * P);
}

void kiln_gemm_bf16_vnni_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src,
                                    uint16_t* out) {
  kiln_gemm_bf16_vnni_pack_joined(k, n, src->a, src->b, NULL, NULL, src->split, src->rs, src->cs,
                                  out);
}

void kiln_gemm_bf16_vnni_pack_b_src16(int64_t k, int64_t n, const kiln_gemm_b_src16_t* src,
                                      uint16_t* out) {
  kiln_gemm_bf16_vnni_pack_joined(k, n, NULL, NULL, src->a, src->b, src->split, src->rs, src->cs,
                                  out);
}

void kiln_bf16vnni_gemm_widen__generic(int64_t kc, int64_t pc, int64_t kp, int panels,
                                       const uint16_t* b, float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int q = 0; q < panels; ++q)
    for (int64_t p = 0; p < kc; ++p) {
      const uint16_t* row = b + q * kp * P + ((pc + p) / 2) * 2 * P + ((pc + p) & 1);
      for (int j = 0; j < P; ++j) out[q * kc * P + p * P + j] = kiln_gemm_bf16_to_f32(row[2 * j]);
    }
}

void kiln_f32_bf16vnni_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda,
                                     const uint16_t* b_panel, int panels, float* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = kiln_gemm_bf16_even(k);
  for (int q = 0; q < panels; ++q) {
    float acc[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
    const uint16_t* bq = b_panel + q * kp * P;
    for (int64_t p = 0; p < k; ++p) {
      float bp[KILN_GEMM_PANEL];
      for (int j = 0; j < P; ++j) bp[j] = kiln_gemm_bf16_to_f32(bq[(p / 2) * 2 * P + j * 2 + (p & 1)]);
      for (int64_t i = 0; i < m; ++i) {
        float av = a[i * lda + p];
        for (int j = 0; j < P; ++j) acc[i][j] += av * bp[j];
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int j = 0; j < P; ++j) out[q * m * P + i * P + j] = acc[i][j];
  }
}

void kiln_gemm_round_bf16_f32(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x[i]));
}
