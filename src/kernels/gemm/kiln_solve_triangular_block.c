/* One pair's column block of the triangular solve (kiln_solve_triangular.h),
 * built once per ISA (kiln_isa_variant.h): the same portable C, which the
 * compiler vectorises for each level's registers (4 doubles an AVX2 vector
 * where the generic build has SSE2's 2: 1.8x fewer instructions, counted
 * by callgrind).
 *
 * Rows are solved in order, the block's columns together, so A's row is
 * read once per row and the solved rows of X stream. Each column's sum
 * runs over j in the reference's order, a product then a difference (ISO
 * C: never contracted to an FMA), so every level returns the reference's
 * bits. (Solving 4 rows at a time, to widen each solved row of X once for
 * the 4, took more instructions, not fewer, and no less time.) */
#include "kernels/gemm/kiln_solve_triangular.h"
#include "kernels/kiln_isa_variant.h"

void KILN_ISA_VARIANT(kiln_solve_triangular_block)(const kiln_solve_triangular_f32_args_t* p,
                                                     int64_t pair, int64_t c0, int64_t c1) {
  const int64_t n = p->n, k = p->k;
  const float* a = p->a + pair * n * n;
  const float* b = p->b + pair * n * k;
  float* x = p->x + pair * n * k;
  double acc[KILN_TRSM_COLS];
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = p->upper ? n - 1 - r : r;
    for (int64_t c = c0; c < c1; ++c) acc[c - c0] = b[i * k + c];
    const int64_t j0 = p->upper ? i + 1 : 0, j1 = p->upper ? n : i;
    for (int64_t j = j0; j < j1; ++j) {
      const double aij = a[i * n + j];
      const float* xj = x + j * k;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] -= aij * (double)xj[c];
    }
    const double d = p->unit ? 1.0 : (double)a[i * n + i];
    for (int64_t c = c0; c < c1; ++c) x[i * k + c] = (float)(acc[c - c0] / d);
  }
}
