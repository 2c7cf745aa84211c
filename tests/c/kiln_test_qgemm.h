/* A quantized-weights GEMM problem for the int8-activation tests
 * (test_gemm_q8a8.c, test_gemm_q4a8.c): seeded buffers with padded leading
 * dimensions and the kiln_gemm_f32 arguments over them, so each test keeps
 * only its packing, its reference and its checks. */
#ifndef KILN_TEST_QGEMM_H
#define KILN_TEST_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm/kiln_gemm.h"

typedef struct {
  int64_t batch, m, n, k;
  int64_t acs, lda, ldc, ldr; /* A's column stride (2: strided A) and the leading dims */
  size_t na, nb, nc, nr;      /* elements of a, w, c_got / c_want, res */
  float *a, *w, *bias, *res, *c_got, *c_want;
  uint16_t* a16; /* bf16 A (a then holds its values widened), or NULL */
  void* blob;    /* blob_bytes for the caller to pack w (K x N, row stride 1, column stride K) into */
} kiln_test_qgemm_t;

/* Allocates and fills C(B, M, N) = A(B, M, K) . W(K, N): A in [-2, 2) with
 * every outlier_step-th element times 8 (0: none), W in [-0.5, 0.5), bias,
 * residual and C in [-1, 1) (c_want a copy of c_got); nan_row 1 (NaN) or
 * 2 (-inf) puts that value in the last column of row M / 2 of batch 0. */
void kiln_test_qgemm_init(kiln_test_qgemm_t* t, int64_t batch, int64_t m, int64_t n, int64_t k,
                          int a_strided, int a16, int nan_row, size_t outlier_step, unsigned seed,
                          size_t blob_bytes);
/* g: the GEMM into c_got (the blob as b_packed_q); ref: the same into c_want
 * (an in-place residual then reads c_want). */
void kiln_test_qgemm_args(const kiln_test_qgemm_t* t, int bias, int residual, int res_alias,
                          kiln_activation_t act, kiln_gemm_f32_args_t* g, kiln_gemm_f32_args_t* ref);
void kiln_test_qgemm_free(kiln_test_qgemm_t* t);

#endif /* KILN_TEST_QGEMM_H */
