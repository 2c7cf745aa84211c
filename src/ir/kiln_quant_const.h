/* Constants quantized the PyTorch way: a checkpoint's integers with its
 * scales and zero points (quantized_decomposed.dequantize_per_channel,
 * _per_channel_group and _per_tensor of constant weights), held as they
 * are so that the target can run them on its own quantized kernels without
 * quantizing again (kiln_graph_add_constant_quant, layouts
 * KILN_LAYOUT_QUANT_ROWS and KILN_LAYOUT_QUANT_ROWS_T in kiln_graph.h).
 *
 * The value is float32; its bytes are (host byte order, offsets in bytes):
 *   0   u32  magic KILN_QUANT_CONST_MAGIC ("KQCK")
 *   4   u8   the integers' dtype: KILN_I8 or KILN_U8
 *   5   u8   flags: bit 0, zero points present
 *   6   u16  0
 *   8   i64  rows: output channels (the value's dim 0 for QUANT_ROWS; for
 *            QUANT_ROWS_T, whose value is the (cols, rows) transpose, dim 1)
 *   16  i64  cols: elements per row
 *   24  i64  group: 0, one scale per row; else one per `group` consecutive
 *            elements of a row (cols a multiple of it)
 *   32  the integers, rows x cols bytes row-major, zero-padded to a
 *       multiple of 4 bytes
 *   then the scales, float32 [rows][ng] (ng = cols / group, or 1),
 *   then, when flagged, the zero points, float32 [rows][ng].
 * Element (i, j) of the stored rows is ((float)q[i][j] - z) * s with z and
 * s those of j's group (z 0 without zero points), in fp32: torch's
 * dequantize, whose (q - z) is exact for the integers these hold.
 *
 * These constants exist between capture and the pack pass only: no kernel
 * reads them (kiln_hal_cpu_supports refuses them), and the pack pass gives
 * every reader a form of its own (the checkpoint's integers in the
 * target's quantized GEMM layout where they fit it exactly, else the
 * dequantized values). */
#ifndef KILN_QUANT_CONST_H
#define KILN_QUANT_CONST_H

#include <stdint.h>
#include <string.h>

#include "ir/kiln_graph.h"

#define KILN_QUANT_CONST_MAGIC 0x4b43514bu /* "KQCK" */
#define KILN_QUANT_CONST_HEADER 32

typedef struct {
  int q_unsigned; /* the integers are uint8 (else int8) */
  int64_t rows, cols, group;
  const void* q;        /* rows x cols */
  const float* scales;  /* rows x ng */
  const float* zeros;   /* rows x ng, or NULL */
} kiln_quant_const_view_t;

/* Bytes of such a constant; 0 when the sizes are impossible. */
static inline size_t kiln_quant_const_size(int64_t rows, int64_t cols, int64_t group, int zeros) {
  if (rows < 0 || cols < 0 || group < 0 || (group && cols % group) || rows > ((int64_t)1 << 40) ||
      cols > ((int64_t)1 << 40) || (cols && rows > ((int64_t)1 << 44) / cols))
    return 0;
  int64_t ng = group ? cols / group : 1;
  size_t qbytes = ((size_t)(rows * cols) + 3) & ~(size_t)3;
  return KILN_QUANT_CONST_HEADER + qbytes + (size_t)(rows * ng) * sizeof(float) * (zeros ? 2 : 1);
}

static inline int kiln_layout_is_quant_const(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_QUANT_ROWS || layout == KILN_LAYOUT_QUANT_ROWS_T;
}

/* Reads constant v's header into out: 0 when v is a well-formed quantized
 * constant whose rows and cols match its shape, else 1. */
static inline int kiln_quant_const_view(const kiln_value_t* v, kiln_quant_const_view_t* out) {
  uint32_t magic;
  int64_t hdr[3];
  const unsigned char* b = v->data;
  if (!kiln_layout_is_quant_const(v->layout) || v->dtype != KILN_F32 || !b ||
      v->nbytes < KILN_QUANT_CONST_HEADER)
    return 1;
  memcpy(&magic, b, 4);
  memcpy(hdr, b + 8, sizeof hdr);
  if (magic != KILN_QUANT_CONST_MAGIC || (b[4] != KILN_I8 && b[4] != KILN_U8) || (b[5] & ~1u))
    return 1;
  int64_t rows = hdr[0], cols = hdr[1], group = hdr[2];
  size_t size = kiln_quant_const_size(rows, cols, group, b[5] & 1);
  if (!size || size != v->nbytes || v->rank < 1) return 1;
  if (v->layout == KILN_LAYOUT_QUANT_ROWS_T) {
    if (v->rank != 2 || v->shape[0] != cols || v->shape[1] != rows) return 1;
  } else if (v->shape[0] != rows || kiln_value_numel(v) != rows * cols) {
    return 1;
  }
  int64_t ng = group ? cols / group : 1;
  size_t qbytes = ((size_t)(rows * cols) + 3) & ~(size_t)3;
  out->q_unsigned = b[4] == KILN_U8;
  out->rows = rows, out->cols = cols, out->group = group;
  out->q = b + KILN_QUANT_CONST_HEADER;
  out->scales = (const float*)(const void*)(b + KILN_QUANT_CONST_HEADER + qbytes);
  out->zeros = (b[5] & 1) ? out->scales + rows * ng : NULL;
  return 0;
}

/* The bytes of such a constant (allocated with allocator) from q's
 * integers (int8 or uint8; rows x cols of them, row-major, from q->data),
 * float32 scales (n_scales: 1 for every row, or rows x ng) and zero points
 * z (NULL, or n_scales elements of an integer dtype or float32, checked
 * exact); KILN_UNSUPPORTED naming `what` otherwise. */
kiln_status_t kiln_quant_const_make(kiln_allocator_t allocator, const kiln_value_t* q,
                                    int64_t rows, int64_t cols, int64_t group,
                                    const float* scales, int64_t n_scales, const kiln_value_t* z,
                                    const char* what, void** out_bytes, size_t* out_size);

#endif /* KILN_QUANT_CONST_H */
