/* The CPU target's constant forms: which constants it packs ahead of time
 * and how. A LINEAR's dense (K, N) weight (or its (N, K) transpose,
 * KILN_LAYOUT_TRANSPOSED_2D) becomes the GEMM's packed panels (fp32, bf16
 * weights, bf16-compute VNNI pairs, or int8 / int4 quantized, as the weight
 * options say); a CONV2D's dense float32 weight (not depthwise, whose direct
 * loop reads it dense) becomes the panels the conv kernel picks for that
 * node's shape; a CONV2D_NHWC's, panels of 16 (the fp32 NHWC kernel's
 * packing), or with compute_bf16 the bf16-compute layout
 * (kiln_cpu_conv_form says when). A bf16 model's linear weight (held as
 * torch's (N, K) bf16 rows by the fold, KILN_LAYOUT_WIDENED_BF16_T) is kept
 * where it lies when the options read such weights in place and x's rows
 * are few or not known (the kernels read the rows: kiln_gemm_bf16_rows);
 * otherwise a LINEAR whose x is bf16 (a bf16 model's linear layer, see
 * python/kiln/lowp.py) and whose weight holds only bf16 values (a bf16
 * parameter widened) gets the VNNI form unasked: rounding A and W to bf16
 * changes neither, so the bf16 engines compute exactly the products eager
 * does and the weight takes half the bytes; the same weight read by a
 * float32 x gets its own fp32 form. With quantized weights, the table of a
 * GATHER along axis 0 of a 2-d float32 constant (an embedding) is
 * quantized too, packed as the blob of B = table^T so that each row is
 * quantized as a linear weight's output channel; the target dequantizes
 * the rows it gathers (kiln_gemm_quant_gather). A checkpoint's quantized
 * constant (kiln_quant_const.h) gets the blob of its own integers where
 * one fits them exactly, else its dequantized values
 * (kiln_cpu_quant_const_form). Everything else is kept as it is. The compiler's pack pass
 * asks here and packs what it is told, so that no run packs a weight. */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_bf16.h"
#include "hal/cpu/kiln_hal_cpu.h"
#include "ir/kiln_joined_const.h"
#include "ir/kiln_quant_const.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/gemm/kiln_gemm.h"

enum { KILN_CPU_DETAIL_GROUPS = 0, KILN_CPU_DETAIL_PANEL = 1 };
enum { KILN_CPU_DETAIL_QGROUP = 0, KILN_CPU_DETAIL_QASYM = 1, KILN_CPU_DETAIL_QFLAGS = 2 };
/* QFLAGS bits: int8 activations (a LINEAR's, KILN_GEMM_QUANT_A8); an
 * embedding table (a GATHER's, packed as its transpose); a checkpoint's
 * integers (a KILN_LAYOUT_QUANT_ROWS(_T) constant's, packed as they are). */
enum { KILN_CPU_QFLAG_A8 = 1, KILN_CPU_QFLAG_TABLE = 2, KILN_CPU_QFLAG_CHECKPOINT = 4 };

static kiln_gemm_quant_ints_t kiln_cpu_ints(const kiln_quant_const_view_t* v) {
  kiln_gemm_quant_ints_t src = {v->q, v->q_unsigned, v->scales, v->zeros, v->group};
  return src;
}

/* A checkpoint's quantized constant (kiln_quant_const.h): a LINEAR weight
 * whose rows are its output channels (QUANT_ROWS_T, nn.Linear's W^T) or an
 * embedding table read along axis 0 takes the int8 / int4 blob holding the
 * checkpoint's integers, when one holds them exactly; every other reader,
 * and those when none does, gets the dequantized float32 values (dense, or
 * the stored rows as a transposed 2-d constant), with a note saying why. */
static kiln_status_t kiln_cpu_quant_const_form(const kiln_graph_t* g, const kiln_node_t* n,
                                               int32_t slot, const kiln_value_t* w,
                                               const kiln_hal_weights_t* o,
                                               kiln_hal_constant_form_t* f) {
  (void)g;
  kiln_quant_const_view_t v;
  if (kiln_quant_const_view(w, &v))
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "constant '%s' (%zu bytes) is not a well-formed quantized constant",
                            w->name ? w->name : "?", w->nbytes);
  f->layout = w->layout == KILN_LAYOUT_QUANT_ROWS_T ? KILN_LAYOUT_TRANSPOSED_2D : KILN_LAYOUT_DENSE;
  f->nbytes = kiln_value_dense_bytes(w);
  int weight = n->op == KILN_OP_LINEAR && slot == 1;
  int table = n->op == KILN_OP_GATHER && slot == 0 && n->params[KILN_P(AXIS, AXIS)] == 0 &&
              w->rank == 2 && w->layout == KILN_LAYOUT_QUANT_ROWS;
  if (weight && w->layout != KILN_LAYOUT_QUANT_ROWS_T) {
    f->note = "dequantized to fp32: the checkpoint's scales run along the input channels";
    return kiln_ok();
  }
  if (!weight && !table) return kiln_ok();
  kiln_gemm_quant_ints_t src = kiln_cpu_ints(&v);
  int bits, group, asym;
  const char* why;
  if (!kiln_gemm_quant_ints_form(v.cols, v.rows, &src, &bits, &group, &asym, &why)) {
    f->note = why;
    return kiln_ok();
  }
  f->layout = bits == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8 : KILN_LAYOUT_GEMM_PACKED_B_Q4;
  f->nbytes = kiln_gemm_quant_ints_packed_size(v.cols, v.rows, bits, group, asym);
  f->detail[KILN_CPU_DETAIL_QGROUP] = group;
  f->detail[KILN_CPU_DETAIL_QASYM] = asym;
  /* weights_dtype "...:a8" asks linear layers for int8 activations: a
   * checkpoint's blob takes them too, on its own integers. */
  int a8 = weight && o->quant_a8;
  f->detail[KILN_CPU_DETAIL_QFLAGS] = KILN_CPU_QFLAG_CHECKPOINT | (table ? KILN_CPU_QFLAG_TABLE : 0) |
                                      (a8 ? KILN_CPU_QFLAG_A8 : 0);
  f->note = "the checkpoint's integers and scales";
  return kiln_ok();
}

static void kiln_cpu_quant_const_pack(const kiln_value_t* w, const kiln_hal_constant_form_t* f,
                                      void* out) {
  kiln_quant_const_view_t v;
  if (kiln_quant_const_view(w, &v)) return; /* the form refused it */
  kiln_gemm_quant_ints_t src = kiln_cpu_ints(&v);
  if (f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) {
    kiln_gemm_quant_pack_b_ints(v.cols, v.rows, &src, f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4,
                                (int)f->detail[KILN_CPU_DETAIL_QGROUP],
                                (int)f->detail[KILN_CPU_DETAIL_QASYM], out);
    if (f->detail[KILN_CPU_DETAIL_QFLAGS] & KILN_CPU_QFLAG_A8) kiln_gemm_quant_set_a8(out);
  } else /* the stored rows, dense: the value (QUANT_ROWS) or its transpose (_T) */
    kiln_gemm_quant_ints_dequantize(v.cols, v.rows, &src, out);
}

/* 1 when every one of n floats is a bf16 value (its low 16 bits zero). */
static int kiln_cpu_floats_bf16_exact(const float* x, size_t n) {
  const uint32_t* bits = (const uint32_t*)x;
  uint32_t any = 0;
  for (size_t i = 0; i < n; ++i) any |= bits[i] & 0xffffu;
  return any == 0;
}

/* 1 when every element of a float32 weight (dense, transposed or joined) is
 * a bf16 value: packing it as bf16 loses nothing. One held as bf16
 * numbers (KILN_LAYOUT_WIDENED_BF16(_T), or joined from such) is. */
static int kiln_cpu_is_bf16_exact(const kiln_value_t* w) {
  if (w->dtype != KILN_F32 || !w->data) return 0;
  if (kiln_layout_is_widened_bf16(w->layout)) return 1;
  kiln_joined_const_t j;
  if (w->layout != KILN_LAYOUT_JOINED_COLS)
    return kiln_cpu_floats_bf16_exact(w->data, w->nbytes / sizeof(float));
  size_t half = (size_t)kiln_value_numel(w) / 2;
  if (kiln_joined_const_view(w, &j)) return 0;
  return kiln_layout_is_widened_bf16((kiln_layout_t)j.layout) ||
         (kiln_cpu_floats_bf16_exact(j.part[0], half) && kiln_cpu_floats_bf16_exact(j.part[1], half));
}

static int64_t kiln_cpu_conv_k(const kiln_value_t* w) {
  return w->shape[1] * w->shape[2] * w->shape[3];
}

/* CONV2D / CONV2D_NHWC: panels for the node's groups, or the dense form.
 * A CONV2D_NHWC under compute_bf16 (o->bf16 == 2) gets the bf16-compute
 * layout (VNNI channel pairs for VDPBF16PS, kiln_conv_nhwc_bf16.h) only
 * when kiln_cpu_bf16() reports an engine now, at compile time: on a CPU
 * without one the bf16 form would only add rounding and the widening of
 * the portable path, so there such convs keep the fp32 panels and run
 * exactly as fast as in fp32. (An artifact compiled with the engine and
 * run without it still runs, on the portable path.) So does, unasked, a
 * bf16 model's conv (ROUND_X: eager convolves x rounded to bf16) whose
 * weight holds only bf16 values (a bf16 parameter widened): the kernel
 * rounds x as eager does, the weight loses nothing, and the products are
 * eager's (as a bf16 model's LINEAR, below). NCHW CONV2D and depthwise
 * convs keep fp32 weights (a ROUND_X conv then reads x unrounded: kiln
 * rounds where eager rounds, or not at all; a depthwise conv under
 * compute_bf16 may read and store bf16 activations, kiln_pass_conv_bf16_io);
 * a CONV2D_NHWC left in fp32 under compute_bf16 or ROUND_X says why in its
 * note (kiln.explain, KILN_LOG). */
static void kiln_cpu_conv_form(const kiln_graph_t* g, const kiln_node_t* n,
                               const kiln_hal_weights_t* o, kiln_hal_constant_form_t* f) {
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  const kiln_value_t* y = &g->values[n->outputs[0]];
  int64_t groups = n->params[KILN_P(CONV2D, GROUPS)];
  if (w->layout != KILN_LAYOUT_DENSE || w->dtype != KILN_F32 || kiln_value_numel(w) == 0) return;
  int panel;
  const int depthwise = groups > 1 && w->shape[1] == 1; /* one input channel a group */
  const int bf16_model = n->op == KILN_OP_CONV2D_NHWC && n->params[KILN_P(CONV2D_NHWC, ROUND_X)] &&
                         o->bf16 != 2 && kiln_cpu_is_bf16_exact(w);
  if (n->op == KILN_OP_CONV2D_NHWC && (o->bf16 == 2 || bf16_model) && !depthwise &&
      kiln_conv2d_bf16_has_engine()) {
    size_t bytes = kiln_conv2d_bf16_packed_size(w->shape[0], w->shape[1], w->shape[2],
                                                w->shape[3], groups);
    if (!bytes) return;
    f->layout = KILN_LAYOUT_CONV2D_PACKED_16_BF16;
    f->nbytes = bytes;
    f->detail[KILN_CPU_DETAIL_GROUPS] = groups;
    if (bf16_model) f->note = "bf16: a bf16 model's conv (x read as bf16, as eager)";
    return;
  }
  if (n->op == KILN_OP_CONV2D_NHWC && (o->bf16 == 2 || bf16_model))
    f->note = depthwise ? "fp32 weight: a depthwise conv (under compute_dtype=bf16 it reads and "
                          "stores bf16 between bf16 convs: kiln_pass_conv_bf16_io)"
                        : "fp32: no bf16 engine at compile time";
  if (n->op == KILN_OP_CONV2D_NHWC) {
    /* Depthwise: kiln_conv2d_f32_nhwc_depthwise reads the dense weight. */
    if (groups == x->shape[3] && groups == w->shape[0]) return;
    panel = KILN_CONV_PANEL_WIDE;
  } else {
    if (groups == x->shape[1] && groups == w->shape[0]) return; /* depthwise */
    kiln_conv2d_f32_args_t a;
    kiln_hal_cpu_conv2d_args(g, n, NULL, &a);
    a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
    a.ho = y->shape[2], a.wo = y->shape[3];
    panel = kiln_conv2d_f32_panel_for(&a);
  }
  size_t bytes = kiln_conv2d_f32_packed_size(w->shape[0], kiln_cpu_conv_k(w), groups, panel);
  if (!bytes) return;
  f->layout = panel == KILN_CONV_PANEL_WIDE ? KILN_LAYOUT_CONV2D_PACKED_16
                                            : KILN_LAYOUT_CONV2D_PACKED;
  f->nbytes = bytes;
  f->detail[KILN_CPU_DETAIL_GROUPS] = groups;
  f->detail[KILN_CPU_DETAIL_PANEL] = panel;
}

/* A LINEAR's (K, N) float32 weight w: its GEMM form as the weight options
 * say (w may be dense, transposed or joined; only its shape and values are
 * read). */
static kiln_status_t kiln_cpu_linear_form(const kiln_graph_t* g, const kiln_node_t* n,
                                          const kiln_value_t* w, const kiln_hal_weights_t* o,
                                          kiln_hal_constant_form_t* f) {
  int64_t k = w->shape[0], nn = w->shape[1];
  if (o->quant_bits) {
    int group = o->quant_bits == 8 ? 0 : o->quant_group;
    f->nbytes = kiln_gemm_quant_packed_size(k, nn, o->quant_bits, group, o->quant_asym);
    if (!f->nbytes)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "weights: int%d with group %d%s%s is not a supported quantization",
                              o->quant_bits, group, o->quant_asym ? " (asymmetric)" : "",
                              o->quant_a8 ? " and int8 activations" : "");
    f->layout = o->quant_bits == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8 : KILN_LAYOUT_GEMM_PACKED_B_Q4;
    f->detail[KILN_CPU_DETAIL_QGROUP] = group;
    f->detail[KILN_CPU_DETAIL_QASYM] = o->quant_asym;
    f->detail[KILN_CPU_DETAIL_QFLAGS] = o->quant_a8 ? KILN_CPU_QFLAG_A8 : 0;
  } else if (o->bf16 == 2 || (g->values[n->inputs[0]].dtype == KILN_BF16 && kiln_cpu_is_bf16_exact(w))) {
    f->layout = KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI;
    f->nbytes = kiln_gemm_bf16_vnni_packed_size(k, nn);
  } else if (o->bf16) {
    f->layout = KILN_LAYOUT_GEMM_PACKED_B_BF16;
    f->nbytes = kiln_gemm_bf16_packed_size(k, nn);
  } else {
    f->layout = KILN_LAYOUT_GEMM_PACKED_B;
    f->nbytes = kiln_gemm_f32_packed_size(k, nn);
  }
  return kiln_ok();
}

/* A joined weight [A | B] (kiln_joined_const.h), which only the gated-MLP
 * fusion makes, as a LINEAR's weight: the form a copy of it would get (the
 * packers read the halves where they lie). */
static kiln_status_t kiln_cpu_joined_form(const kiln_graph_t* g, const kiln_node_t* n,
                                          int32_t slot, const kiln_value_t* w,
                                          const kiln_hal_weights_t* o,
                                          kiln_hal_constant_form_t* f) {
  kiln_joined_const_t j;
  if (n->op != KILN_OP_LINEAR || slot != 1 || kiln_joined_const_view(w, &j))
    return kiln_status_make(KILN_INTERNAL, "constant '%s': a joined weight read by %s input %d",
                            w->name ? w->name : "?", kiln_op_name(n->op), (int)slot);
  return kiln_cpu_linear_form(g, n, w, o, f);
}

/* A LINEAR's rows of x (the product of x's dims but the last), or -1 when
 * one is symbolic. */
static int64_t kiln_cpu_linear_rows(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* x = &g->values[n->inputs[0]];
  int64_t rows = 1;
  for (int32_t d = 0; d + 1 < x->rank; ++d) {
    if (kiln_dim_is_sym(x->shape[d])) return -1;
    rows *= x->shape[d];
  }
  return rows;
}

/* From this many rows of x (known when compiling), a bf16 model's linear
 * weight is packed even when the options would read it in place: tiles
 * over the rows of x and W (kiln_gemm_bf16_rows) run such a product at
 * 0.83-0.87x the packed bf16 engine on a Zen 4 core (the sums' reductions),
 * while below it, and for any-length graphs (a generation step: mostly one
 * row per call), reading in place is as fast and saves the copy. */
#define KILN_CPU_IN_PLACE_MAX_ROWS 31

kiln_status_t kiln_hal_cpu_constant_form(const kiln_graph_t* g, const kiln_node_t* n,
                                         int32_t slot, const kiln_hal_weights_t* o,
                                         kiln_hal_constant_form_t* f) {
  const kiln_value_t* w = &g->values[n->inputs[slot]];
  memset(f, 0, sizeof(*f));
  f->layout = w->layout;
  f->nbytes = w->nbytes;
  if (w->kind != KILN_VALUE_CONSTANT) return kiln_ok();
  if (kiln_layout_is_quant_const(w->layout)) return kiln_cpu_quant_const_form(g, n, slot, w, o, f);
  if (w->layout == KILN_LAYOUT_JOINED_COLS) return kiln_cpu_joined_form(g, n, slot, w, o, f);
  if (kiln_layout_is_widened_bf16(w->layout)) {
    /* A bf16 weight held narrow: a LINEAR's weight torch keeps as (N, K)
     * rows stays there when the options say so (the kernels read its rows
     * in place: kiln_hal_weights_t.bf16_in_place) and x's rows are few or
     * not known, else packs from the bf16 numbers; any other reader gets
     * the float32 values, stored as they are (dense, or the transpose). */
    if (n->op == KILN_OP_LINEAR && slot == 1) {
      if (o->bf16_in_place && w->layout == KILN_LAYOUT_WIDENED_BF16_T && !o->quant_bits &&
          o->bf16 != 2 && kiln_cpu_linear_rows(g, n) <= KILN_CPU_IN_PLACE_MAX_ROWS)
        return kiln_ok(); /* kept as it is */
      return kiln_cpu_linear_form(g, n, w, o, f);
    }
    f->layout = w->layout == KILN_LAYOUT_WIDENED_BF16_T ? KILN_LAYOUT_TRANSPOSED_2D : KILN_LAYOUT_DENSE;
    f->nbytes = kiln_value_dense_bytes(w);
    return kiln_ok();
  }
  if (n->op == KILN_OP_GATHER && slot == 0) {
    if (!o->quant_bits || n->params[KILN_P(AXIS, AXIS)] != 0 || w->layout != KILN_LAYOUT_DENSE ||
        w->dtype != KILN_F32 || w->rank != 2 || w->shape[0] == 0 || w->shape[1] == 0)
      return kiln_ok();
    int group = o->quant_bits == 8 ? 0 : o->quant_group;
    size_t bytes = kiln_gemm_quant_packed_size(w->shape[1], w->shape[0], o->quant_bits, group,
                                               o->quant_asym);
    if (!bytes) return kiln_ok(); /* the LINEAR weights' form reports the bad choice */
    f->layout = o->quant_bits == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8 : KILN_LAYOUT_GEMM_PACKED_B_Q4;
    f->nbytes = bytes;
    f->detail[KILN_CPU_DETAIL_QGROUP] = group;
    f->detail[KILN_CPU_DETAIL_QASYM] = o->quant_asym;
    f->detail[KILN_CPU_DETAIL_QFLAGS] = KILN_CPU_QFLAG_TABLE;
    return kiln_ok();
  }
  if (slot != 1) return kiln_ok();
  if (n->op == KILN_OP_CONV2D || n->op == KILN_OP_CONV2D_NHWC) {
    kiln_cpu_conv_form(g, n, o, f);
    return kiln_ok();
  }
  if (n->op != KILN_OP_LINEAR ||
      (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_TRANSPOSED_2D))
    return kiln_ok();
  return kiln_cpu_linear_form(g, n, w, o, f);
}

/* A LINEAR weight's (K, N) elements, read from src, into form f. */
static void kiln_cpu_linear_pack(int64_t k, int64_t nn, const kiln_gemm_b_src_t* src,
                                 const kiln_hal_constant_form_t* f, void* out) {
  switch (f->layout) {
    case KILN_LAYOUT_GEMM_PACKED_B_Q8:
    case KILN_LAYOUT_GEMM_PACKED_B_Q4:
      kiln_gemm_quant_pack_b_src(k, nn, src, f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4,
                                 (int)f->detail[KILN_CPU_DETAIL_QGROUP],
                                 (int)f->detail[KILN_CPU_DETAIL_QASYM], out);
      if (f->detail[KILN_CPU_DETAIL_QFLAGS] & KILN_CPU_QFLAG_A8) kiln_gemm_quant_set_a8(out);
      break;
    case KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI:
      kiln_gemm_bf16_vnni_pack_b_src(k, nn, src, out);
      break;
    case KILN_LAYOUT_GEMM_PACKED_B_BF16:
      kiln_gemm_bf16_pack_b_src(k, nn, src, out);
      break;
    default:
      kiln_gemm_f32_pack_b_src(k, nn, src, out);
      break;
  }
}

/* Columns [j0, j0 + w) of a B held as bf16 numbers widened into dst,
 * column j at dst + (j - j0) * k (exact: widening is a shift). */
static void kiln_cpu_narrow_widen(int64_t k, int64_t j0, int64_t w, const kiln_gemm_b_src16_t* s,
                                  float* dst) {
  for (int64_t j = j0; j < j0 + w; ++j) {
    const uint16_t* col = j < s->split ? s->a + j * s->cs : s->b + (j - s->split) * s->cs;
    float* d = dst + (j - j0) * k;
    for (int64_t p = 0; p < k; ++p) d[p] = kiln_bf16_to_f32(col[p * s->rs]);
  }
}

/* Packs a LINEAR weight held as bf16 numbers (a half of a joined one, or
 * the whole) into form f: the bf16-compute layout straight from them;
 * the other panel layouts panel by panel through a float32 copy of 16
 * columns (each panel packs alone); a quantized form, whose blob spans
 * every column, through a float32 copy of the weight made for the packing
 * and freed after it. Either way the graph never holds the float32 weight. */
static kiln_status_t kiln_cpu_linear_pack_narrow(int64_t k, int64_t nn,
                                                 const kiln_gemm_b_src16_t* s,
                                                 const kiln_hal_constant_form_t* f, void* out) {
  if (f->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI) {
    kiln_gemm_bf16_vnni_pack_b_src16(k, nn, s, out);
    return kiln_ok();
  }
  const int P = KILN_GEMM_PANEL;
  int quant = f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4;
  int64_t cols = quant ? nn : P;
  float* tmp = malloc((size_t)(k * cols) * sizeof(float) + 1);
  if (!tmp)
    return kiln_status_make(KILN_OUT_OF_MEMORY, "widening a bf16 weight (%lld x %lld) to pack it",
                            (long long)k, (long long)nn);
  if (quant) {
    kiln_cpu_narrow_widen(k, 0, nn, s, tmp);
    kiln_gemm_b_src_t src = {tmp, NULL, nn, 1, k};
    kiln_cpu_linear_pack(k, nn, &src, f, out);
  } else { /* fp32 or bf16 panels: K rows of P elements each */
    size_t elem = f->layout == KILN_LAYOUT_GEMM_PACKED_B ? sizeof(float) : sizeof(uint16_t);
    for (int64_t j0 = 0; j0 < nn; j0 += P) {
      int64_t w = nn - j0 < P ? nn - j0 : P;
      kiln_cpu_narrow_widen(k, j0, w, s, tmp);
      kiln_gemm_b_src_t src = {tmp, NULL, w, 1, k};
      kiln_cpu_linear_pack(k, w, &src, f, (char*)out + (size_t)(j0 * k) * elem);
    }
  }
  free(tmp);
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_constant_pack(const kiln_value_t* w, const kiln_hal_constant_form_t* f,
                                         void* out) {
  if (kiln_layout_is_quant_const(w->layout)) {
    kiln_cpu_quant_const_pack(w, f, out);
    return kiln_ok();
  }
  if (f->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16) {
    kiln_conv2d_bf16_pack_weight(w->shape[0], w->shape[1], w->shape[2], w->shape[3],
                                 f->detail[KILN_CPU_DETAIL_GROUPS], w->data, out);
    return kiln_ok();
  }
  if (f->layout == KILN_LAYOUT_CONV2D_PACKED || f->layout == KILN_LAYOUT_CONV2D_PACKED_16) {
    kiln_conv2d_f32_pack_weight(w->shape[0], kiln_cpu_conv_k(w), f->detail[KILN_CPU_DETAIL_GROUPS],
                                (int)f->detail[KILN_CPU_DETAIL_PANEL], w->data, out);
    return kiln_ok();
  }
  if (kiln_layout_is_widened_bf16(w->layout) && kiln_layout_is_dense_sized(f->layout)) {
    /* The float32 values, stored in the same order (dense, or transposed). */
    const uint16_t* h = w->data;
    float* y = out;
    for (size_t i = 0, n = w->nbytes / sizeof(uint16_t); i < n; ++i) y[i] = kiln_bf16_to_f32(h[i]);
    return kiln_ok();
  }
  if ((f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) &&
      (f->detail[KILN_CPU_DETAIL_QFLAGS] & KILN_CPU_QFLAG_TABLE)) { /* (N, K) table as B = table^T */
    kiln_gemm_quant_pack_b(w->shape[1], w->shape[0], w->data, 1, w->shape[1],
                           f->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4,
                           (int)f->detail[KILN_CPU_DETAIL_QGROUP],
                           (int)f->detail[KILN_CPU_DETAIL_QASYM], out);
    return kiln_ok();
  }
  /* A LINEAR weight: (K, N) read row-major or as its stored transpose; a
   * joined one from its two halves, each (K, N / 2) stored so; as float32
   * or as bf16 numbers. */
  int64_t k = w->shape[0], nn = w->shape[1];
  const void* part[2] = {w->data, NULL};
  int64_t split = nn;
  kiln_layout_t stored = w->layout;
  if (w->layout == KILN_LAYOUT_JOINED_COLS) {
    kiln_joined_const_t j;
    if (kiln_joined_const_view(w, &j)) return kiln_ok(); /* the form refused it */
    part[0] = j.part[0], part[1] = j.part[1], split = nn / 2;
    stored = (kiln_layout_t)j.layout;
  }
  const int64_t cols = part[1] ? nn / 2 : nn; /* columns of one stored matrix */
  const int transposed = kiln_layout_is_stored_transposed(stored);
  const int64_t rs = transposed ? 1 : cols, cs = transposed ? k : 1;
  if (kiln_layout_is_widened_bf16(stored)) {
    const kiln_gemm_b_src16_t narrow = {part[0], part[1], split, rs, cs};
    return kiln_cpu_linear_pack_narrow(k, nn, &narrow, f, out);
  }
  kiln_gemm_b_src_t src = {part[0], part[1], split, rs, cs};
  kiln_cpu_linear_pack(k, nn, &src, f, out);
  return kiln_ok();
}
