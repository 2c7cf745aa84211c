/* Shape rules of GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG. Every param is
 * untrusted (it may come from a .kiln file): each is bounded before it is
 * used in arithmetic, so no product overflows int64 and a verified node
 * cannot make its kernel index outside its buffers. */
#include "ir/kiln_shape_rules.h"

#include <string.h>

#include "ir/kiln_shape_common.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* Sizes, kernels, strides, dilations and pads beyond 2^31 are refused: a
 * product of two stays far inside int64. */
#define KILN_SAMPLE_LIM ((int64_t)1 << 31)

static const kiln_value_t* sp_input(const kiln_graph_t* g, const kiln_node_t* n, int i) {
  if (i >= n->n_inputs || n->inputs[i] < 0 || n->inputs[i] >= g->n_values) return NULL;
  return &g->values[n->inputs[i]];
}

static void sp_set(kiln_value_t* out, kiln_dtype_t dtype, int32_t rank, const int64_t* shape) {
  out->dtype = dtype;
  out->rank = rank;
  memset(out->shape, 0, sizeof(out->shape));
  memcpy(out->shape, shape, (size_t)rank * sizeof(int64_t));
}

static kiln_status_t sp_check(const char* name, const char* what, const kiln_value_t* v,
                              int32_t rank, int float_only) {
  if (!v) FAIL("%s: %s is required", name, what);
  if (v->rank != rank) FAIL("%s: %s must be rank %d, got rank %d", name, what, rank, v->rank);
  if (v->layout != KILN_LAYOUT_DENSE) FAIL("%s: %s must be dense", name, what);
  if (float_only && v->dtype != KILN_F32)
    FAIL("%s: %s must be float32, got %s", name, what, kiln_dtype_name(v->dtype));
  if (!float_only && v->dtype != KILN_I64 && v->dtype != KILN_I32)
    FAIL("%s: %s must be int64 or int32, got %s", name, what, kiln_dtype_name(v->dtype));
  return kiln_ok();
}

static kiln_status_t sp_check_range(const char* name, const char* what, int64_t v, int64_t lo,
                                    int64_t hi) {
  if (v < lo || v > hi)
    FAIL("%s: %s %lld is outside [%lld, %lld]", name, what, (long long)v, (long long)lo,
         (long long)hi);
  return kiln_ok();
}

kiln_status_t kiln_shape_grid_sampler(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = "grid_sampler_2d";
  const int64_t* p = n->params;
  const kiln_value_t *x = sp_input(g, n, 0), *grid = sp_input(g, n, 1);
  KILN_RETURN_IF_ERROR(sp_check(name, "x", x, 4, 1));
  KILN_RETURN_IF_ERROR(sp_check(name, "grid", grid, 4, 1));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "mode (0 bilinear, 1 nearest)",
                                      p[KILN_P(GRID_SAMPLER, MODE)], 0, 1));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "padding (0 zeros, 1 border, 2 reflection)",
                                      p[KILN_P(GRID_SAMPLER, PADDING)], 0, 2));
  KILN_RETURN_IF_ERROR(
      sp_check_range(name, "align_corners", p[KILN_P(GRID_SAMPLER, ALIGN_CORNERS)], 0, 1));
  if (grid->shape[0] != x->shape[0] || grid->shape[3] != 2)
    FAIL("%s: grid must be (N, Ho, Wo, 2) with x's N = %lld, got (%lld, %lld, %lld, %lld)", name,
         (long long)x->shape[0], (long long)grid->shape[0], (long long)grid->shape[1],
         (long long)grid->shape[2], (long long)grid->shape[3]);
  /* The kernel's pixel indices go through int32, as eager's. */
  KILN_RETURN_IF_ERROR(sp_check_range(name, "height", x->shape[2], 1, KILN_SAMPLE_LIM - 1));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "width", x->shape[3], 1, KILN_SAMPLE_LIM - 1));
  int64_t shape[4] = {x->shape[0], x->shape[1], grid->shape[1], grid->shape[2]};
  sp_set(out, KILN_F32, 4, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_col2im(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = "col2im";
  const int64_t* p = n->params;
  const kiln_value_t* x = sp_input(g, n, 0);
  KILN_RETURN_IF_ERROR(sp_check(name, "x", x, 3, 1));
  /* The ten fields in layout order: H, W, kernel, dilation, padding, stride. */
  static const char* what[10] = {"height", "width", "kernel height", "kernel width",
                                 "dilation h", "dilation w", "padding h", "padding w",
                                 "stride h", "stride w"};
  _Static_assert(KILN_P_COUNT(COL2IM) == 10 && KILN_P(COL2IM, PAD_H) == 6 &&
                     KILN_P(COL2IM, PAD_W) == 7,
                 "col2im's fields as named here");
  for (int i = 0; i < 10; ++i)
    KILN_RETURN_IF_ERROR(sp_check_range(name, what[i], p[i],
                                        (i == KILN_P(COL2IM, PAD_H) || i == KILN_P(COL2IM, PAD_W)) ? 0 : 1,
                                        KILN_SAMPLE_LIM));
  const int64_t h = p[KILN_P(COL2IM, H)], w = p[KILN_P(COL2IM, W)];
  const int64_t kh = p[KILN_P(COL2IM, KERNEL_H)], kw = p[KILN_P(COL2IM, KERNEL_W)];
  const int64_t kk = kh * kw; /* <= 2^62 */
  if (x->shape[1] < 1 || x->shape[1] % kk)
    FAIL("%s: x's %lld rows are not a multiple of the kernel's %lld elements", name,
         (long long)x->shape[1], (long long)kk);
  int64_t lh = 0, lw = 0;
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(
      "col2im height", h, kh, p[KILN_P(COL2IM, STRIDE_H)], p[KILN_P(COL2IM, PAD_H)],
      p[KILN_P(COL2IM, DILATION_H)], 0, &lh));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(
      "col2im width", w, kw, p[KILN_P(COL2IM, STRIDE_W)], p[KILN_P(COL2IM, PAD_W)],
      p[KILN_P(COL2IM, DILATION_W)], 0, &lw));
  /* lh, lw >= 1; lh * lw compared without forming a product that overflows. */
  if (lh > x->shape[2] / lw || lh * lw != x->shape[2])
    FAIL("%s: x has %lld columns but the windows number %lld x %lld", name,
         (long long)x->shape[2], (long long)lh, (long long)lw);
  int64_t shape[4] = {x->shape[0], x->shape[1] / kk, h, w};
  sp_set(out, KILN_F32, 4, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_embedding_bag(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = "embedding_bag";
  const int64_t mode = n->params[KILN_P(EMBEDDING_BAG, MODE)];
  const int64_t last = n->params[KILN_P(EMBEDDING_BAG, INCLUDE_LAST_OFFSET)];
  const int64_t padding_idx = n->params[KILN_P(EMBEDDING_BAG, PADDING_IDX)];
  const kiln_value_t *w = sp_input(g, n, 0), *idx = sp_input(g, n, 1), *off = sp_input(g, n, 2);
  const kiln_value_t* psw = sp_input(g, n, 3);
  KILN_RETURN_IF_ERROR(sp_check(name, "weight", w, 2, 1));
  KILN_RETURN_IF_ERROR(sp_check(name, "indices", idx, 1, 0));
  KILN_RETURN_IF_ERROR(sp_check(name, "offsets", off, 1, 0));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "mode (0 sum, 1 mean, 2 max)", mode, 0, 2));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "include_last_offset", last, 0, 1));
  KILN_RETURN_IF_ERROR(sp_check_range(name, "padding_idx", padding_idx, -1, w->shape[0] - 1));
  if (psw) {
    KILN_RETURN_IF_ERROR(sp_check(name, "per_sample_weights", psw, 1, 1));
    if (mode != 0) FAIL("%s: per_sample_weights need mode 0 (sum)", name);
    if (psw->shape[0] != idx->shape[0])
      FAIL("%s: %lld per_sample_weights for %lld indices", name, (long long)psw->shape[0],
           (long long)idx->shape[0]);
  }
  int64_t bags = off->shape[0] - last;
  if (bags < 0) FAIL("%s: include_last_offset needs at least one offset", name);
  int64_t shape[2] = {bags, w->shape[1]};
  sp_set(out, KILN_F32, 2, shape);
  return kiln_ok();
}
