/* A float32 (K, 2N) constant [A | B] held as its two (K, N) halves where
 * they already lie (layout KILN_LAYOUT_JOINED_COLS in kiln_graph.h).
 *
 * The gated-MLP fusion (kiln_pass_fuse_glu.c) runs a SwiGLU's two GEMMs as
 * one over [W_gate | W_up]. Copying the two weights side by side costs a
 * model's whole MLP again in transient memory (2 GB for a 1.1B Llama, and
 * seconds of page faults) in every graph made from it, although the pack
 * pass then reads the copy once and frees it, or finds the packed form
 * already shared under its key and never reads it at all. So when both
 * halves are borrowed bytes (a frozen parameter: they outlive the compile)
 * and the pack pass will run, the fusion makes this descriptor instead,
 * and the target packs [A | B] straight from the halves.
 *
 * The value's bytes are the descriptor below (host pointers: never written
 * to a file, refused by the reader). No kernel reads it
 * (kiln_hal_cpu_supports refuses it), and the pack pass gives each reader
 * a form of its own. Element (p, j) of the value is A(p, j) for j < N and
 * B(p, j - N) after, each half stored as `layout` says (row-major (K, N),
 * or its (N, K) transpose: nn.Linear's weight; as float32, or as bf16
 * numbers: a bf16 model's weights, KILN_LAYOUT_WIDENED_BF16(_T)). */
#ifndef KILN_JOINED_CONST_H
#define KILN_JOINED_CONST_H

#include <stdint.h>
#include <string.h>

#include "ir/kiln_graph.h"

typedef struct {
  const void* part[2];   /* A, B: borrowed */
  int64_t layout;        /* KILN_LAYOUT_DENSE or _TRANSPOSED_2D, or WIDENED_BF16(_T) */
} kiln_joined_const_t;

/* Is a half stored as its (N, K) transpose? */
static inline int kiln_layout_is_stored_transposed(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_TRANSPOSED_2D || layout == KILN_LAYOUT_WIDENED_BF16_T;
}

/* Bytes of one stored element of a half (or of a weight) in `layout`. */
static inline size_t kiln_joined_elem_bytes(kiln_layout_t layout) {
  return kiln_layout_is_widened_bf16(layout) ? 2 : sizeof(float);
}

/* Reads constant v's descriptor into out: 0 when v is a well-formed joined
 * constant, else 1. */
static inline int kiln_joined_const_view(const kiln_value_t* v, kiln_joined_const_t* out) {
  if (v->layout != KILN_LAYOUT_JOINED_COLS || v->dtype != KILN_F32 || v->rank != 2 ||
      !v->data || v->nbytes != sizeof(*out) || v->shape[1] % 2)
    return 1;
  memcpy(out, v->data, sizeof(*out));
  return !out->part[0] || !out->part[1] ||
         (out->layout != KILN_LAYOUT_DENSE && out->layout != KILN_LAYOUT_TRANSPOSED_2D &&
          !kiln_layout_is_widened_bf16((kiln_layout_t)out->layout));
}

/* Writes [A | B] (each (k, n), both stored as `layout` says) to dst in the
 * same layout: 2 k n elements of kiln_joined_elem_bytes(layout). */
static inline void kiln_joined_const_copy(int64_t k, int64_t n, kiln_layout_t layout,
                                          const void* a, const void* b, void* dst) {
  const size_t e = kiln_joined_elem_bytes(layout), half = (size_t)(k * n) * e, row = (size_t)n * e;
  char* d = dst;
  if (kiln_layout_is_stored_transposed(layout)) { /* stored (N, K): A's rows, then B's */
    memcpy(d, a, half);
    memcpy(d + half, b, half);
    return;
  }
  for (int64_t r = 0; r < k; ++r) { /* stored (K, N): each row is A's row then B's */
    memcpy(d + (size_t)r * 2 * row, (const char*)a + (size_t)r * row, row);
    memcpy(d + (size_t)r * 2 * row + row, (const char*)b + (size_t)r * row, row);
  }
}

#endif /* KILN_JOINED_CONST_H */
