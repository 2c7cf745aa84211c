/* PAD: constant (with negative pads cropping), reflect and replicate
 * padding of any rank and element size. The fast path works on output rows
 * (the last dim): it maps the row's outer coordinates to a source row once,
 * copies the row's interior with one memcpy and maps only the edge
 * elements. The reference maps every element through the same per-dim rule
 * and is what the C test compares against. */
#include <string.h>

#include "kernels/eltwise/kiln_movement_ops.h"

#define KILN_PAD_MAX_RANK 8

/* The source coordinate of output coordinate o along a dim of `size` with
 * `before` elements in front, or -1 where constant padding fills. Reflect
 * needs before, after < size (the shape rule checks): then c lies in
 * (-size, 2 size - 1) and one fold lands in [0, size). Negative pads crop in
 * every mode: c = o - before just starts further in. */
static int64_t kiln_pad_source(kiln_pad_mode_t mode, int64_t o, int64_t before, int64_t size) {
  int64_t c = o - before;
  if (c >= 0 && c < size) return c;
  switch (mode) {
    case KILN_PAD_REFLECT:
      return c < 0 ? -c : 2 * (size - 1) - c;
    case KILN_PAD_REPLICATE:
      return c < 0 ? 0 : size - 1;
    default:
      return -1;
  }
}

void kiln_pad_reference(kiln_pad_mode_t mode, size_t elem_size, int32_t rank,
                        const int64_t* x_shape, const int64_t* y_shape, const int64_t* before,
                        const void* fill, const void* x, void* y) {
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) numel *= y_shape[d];
  int64_t pos[KILN_PAD_MAX_RANK] = {0};
  for (int64_t i = 0; i < numel; ++i) {
    int64_t off = 0;
    int inside = 1;
    for (int32_t d = 0; d < rank; ++d) {
      int64_t c = kiln_pad_source(mode, pos[d], before[d], x_shape[d]);
      if (c < 0) inside = 0;
      off = off * x_shape[d] + (c < 0 ? 0 : c);
    }
    char* dst = (char*)y + (size_t)i * elem_size;
    memcpy(dst, inside ? (const char*)x + (size_t)off * elem_size : (const char*)fill, elem_size);
    for (int32_t d = rank - 1; d >= 0; --d) { /* odometer over y */
      if (++pos[d] < y_shape[d]) break;
      pos[d] = 0;
    }
  }
}

typedef struct {
  kiln_pad_mode_t mode;
  size_t elem;
  int32_t rank; /* >= 1 */
  const int64_t *x_shape, *y_shape, *before;
  const char* fill;
  const char* x;
  char* y;
  int64_t rows, rows_per_task;
} kiln_pad_job_t;

static void kiln_pad_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_pad_job_t* j = p;
  int32_t last = j->rank - 1;
  int64_t w = j->y_shape[last], xw = j->x_shape[last], lo = j->before[last];
  size_t elem = j->elem;
  /* The interior [i0, i1) of a row reads x's row contiguously. */
  int64_t i0 = lo > 0 ? lo : 0, i1 = lo + xw < w ? lo + xw : w;
  if (i1 < i0) i1 = i0;
  int64_t r0 = (int64_t)task * j->rows_per_task;
  int64_t r1 = r0 + j->rows_per_task < j->rows ? r0 + j->rows_per_task : j->rows;
  for (int64_t r = r0; r < r1; ++r) {
    char* dst = j->y + (size_t)(r * w) * elem;
    /* The source row: outer coordinates of r mapped dim by dim. */
    int64_t rem = r, src_row = 0, scale = 1;
    int inside = 1;
    for (int32_t d = last - 1; d >= 0; --d) {
      int64_t o = rem % j->y_shape[d];
      rem /= j->y_shape[d];
      int64_t c = kiln_pad_source(j->mode, o, j->before[d], j->x_shape[d]);
      if (c < 0) inside = 0;
      src_row += (c < 0 ? 0 : c) * scale;
      scale *= j->x_shape[d];
    }
    if (!inside) {
      for (int64_t i = 0; i < w; ++i) memcpy(dst + (size_t)i * elem, j->fill, elem);
      continue;
    }
    const char* src = j->x + (size_t)(src_row * xw) * elem;
    for (int64_t i = 0; i < i0; ++i) {
      int64_t c = kiln_pad_source(j->mode, i, lo, xw);
      memcpy(dst + (size_t)i * elem, c < 0 ? j->fill : src + (size_t)c * elem, elem);
    }
    if (i1 > i0) memcpy(dst + (size_t)i0 * elem, src + (size_t)(i0 - lo) * elem,
                        (size_t)(i1 - i0) * elem);
    for (int64_t i = i1; i < w; ++i) {
      int64_t c = kiln_pad_source(j->mode, i, lo, xw);
      memcpy(dst + (size_t)i * elem, c < 0 ? j->fill : src + (size_t)c * elem, elem);
    }
  }
}

void kiln_pad(kiln_pad_mode_t mode, size_t elem_size, int32_t rank, const int64_t* x_shape,
              const int64_t* y_shape, const int64_t* before, const void* fill, const void* x,
              void* y, kiln_pool_t* pool) {
  if (rank == 0) { /* nothing to pad: one element */
    memcpy(y, x, elem_size);
    return;
  }
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) numel *= y_shape[d];
  if (numel == 0) return;
  kiln_pad_job_t j = {mode, elem_size, rank, x_shape, y_shape, before, fill, x, y, 0, 0};
  int64_t w = y_shape[rank - 1];
  j.rows = numel / w;
  /* Tasks of at least ~32K elements, as the other copy kernels. */
  int64_t min_rows = (32768 + w - 1) / w;
  int threads = kiln_pool_size(pool);
  int64_t per = (j.rows + threads * 4 - 1) / (threads * 4);
  j.rows_per_task = per < min_rows ? min_rows : per;
  size_t tasks = (size_t)((j.rows + j.rows_per_task - 1) / j.rows_per_task);
  kiln_pool_parallel_for(tasks > 1 ? pool : NULL, tasks, kiln_pad_task, &j);
}
