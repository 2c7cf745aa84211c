/* The scalar GEMM reference: the header's contract as a plain triple loop.
 * Tests hold every fast path to it. It accumulates in double so that it is
 * a better yardstick than any float summation order, and it computes the
 * epilogue per element with libm (erff, tanhf, expf) as torch does.
 * bf16 compute (b_packed_bf16_vnni) is the same loop over the bf16-rounded
 * A and B: products of two bf16 are exact in double, so only the sum's
 * order separates it from any kernel. An int8 blob flagged for int8
 * activations follows kiln_gemm_f32's choice (kiln_gemm_q8a8_applies):
 * the int8 x int8 rule's reference (at any M), else the weight-only loop;
 * an int4 blob so flagged likewise (kiln_gemm_q4a8_applies: every M). */
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

void kiln_gemm_f32_reference(const kiln_gemm_f32_args_t* g) {
  if (kiln_gemm_q4a8_applies(g)) {
    kiln_gemm_q4a8_reference(g);
    return;
  }
  if (kiln_gemm_q8a8_applies(g)) {
    kiln_gemm_q8a8_reference(g);
    return;
  }
  for (int64_t bt = 0; bt < g->batch; ++bt) {
    const float* a = g->a_bf16 ? NULL : g->a + bt * g->a_batch_stride;
    const uint16_t* a16 = g->a_bf16 ? g->a_bf16 + bt * g->a_batch_stride : NULL;
    float* c = g->c + bt * g->c_batch_stride;
    const float* r = g->residual ? g->residual + bt * g->r_batch_stride : NULL;
    for (int64_t i = 0; i < g->m; ++i) {
      for (int64_t j = 0; j < g->n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < g->k; ++p) {
          float bv;
          if (g->b_packed_q) {
            bv = kiln_gemm_quant_weight(g->b_packed_q, p, j);
          } else if (g->b_packed_bf16_vnni) {
            int64_t kp = g->k + (g->k & 1);
            bv = kiln_gemm_bf16_to_f32(
                g->b_packed_bf16_vnni[(j / KILN_GEMM_PANEL) * kp * KILN_GEMM_PANEL +
                                      (p / 2) * 2 * KILN_GEMM_PANEL +
                                      (j % KILN_GEMM_PANEL) * 2 + (p & 1)]);
          } else if (g->b_packed_bf16) {
            bv = kiln_gemm_bf16_to_f32(
                g->b_packed_bf16[(j / KILN_GEMM_PANEL) * g->k * KILN_GEMM_PANEL +
                                 p * KILN_GEMM_PANEL + j % KILN_GEMM_PANEL]);
          } else if (g->b_packed) {
            bv = g->b_packed[(j / KILN_GEMM_PANEL) * g->k * KILN_GEMM_PANEL +
                             p * KILN_GEMM_PANEL + j % KILN_GEMM_PANEL];
          } else if (g->b_bf16) {
            bv = kiln_gemm_bf16_to_f32(
                g->b_bf16[bt * g->b_batch_stride + p * g->b_row_stride + j * g->b_col_stride]);
          } else {
            bv = g->b[bt * g->b_batch_stride + p * g->b_row_stride + j * g->b_col_stride];
            /* a folded cast: B rounded to bf16 as the packers do */
            if (g->b_round_bf16) bv = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(bv));
          }
          int64_t e = i * g->a_row_stride + p * g->a_col_stride;
          float av = a16 ? kiln_gemm_bf16_to_f32(a16[e]) : a[e];
          /* bf16 compute or a folded cast: A rounded to bf16 as the kernels do. */
          if (g->b_packed_bf16_vnni || g->a_round_bf16) av = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(av));
          acc += (double)av * (double)bv;
        }
        float x = (float)acc;
        if (g->bias) x += g->bias[j];
        x = kiln_activation_scalar(x, g->act);
        /* Read the residual before writing C: they may be the same element. */
        if (r) x += r[i * g->r_row_stride + j];
        if (g->c_round_bf16) x = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x));
        c[i * g->c_row_stride + j] = x;
      }
    }
  }
}
