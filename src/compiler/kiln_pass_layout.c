/* Activation layout: runs chains of convolutions channels-last (NHWC) where
 * that pays, with the layout conversions only at the chains' edges.
 *
 * Why: kiln_conv2d_f32_nhwc (kernels/conv/kiln_conv_nhwc.h) stores its
 * 6-pixel x 16-channel tiles with no transpose, reads each tap's channels
 * contiguously and runs 1x1 convs on x in place. Measured against the NCHW
 * kernel on ResNet-18's conv shapes (bench/kernels/bench_conv_nhwc, one
 * thread, minimum CPU time, a shared machine: +-10 % noise) it is 1.15-1.4x
 * as fast on the strided and 1x1 convs and about even (0.95-1.1x) on the
 * stride-1 3x3 ones, whose inner loop is the same microkernel; a layout
 * conversion costs one transposing copy of the tensor. So a lone conv is not worth its two
 * conversions, a chain is.
 *
 * Regions. A candidate is a float32 CONV2D the NHWC kernel serves well: at
 * least 16 output channels per group (its tile is 16 channels wide), or a
 * depthwise one its own channels-last kernel takes (riding along, never
 * gaining: kiln_layout_depthwise). Candidates are joined
 * into a region when one's output is another's x or residual (the inputs a
 * channels-last conv reads channels-last; after fuse_conv a ResNet block is
 * two or three CONV2Ds joined this way, and its stages are one region).
 * Cost rule (kiln_layout_pays): a region goes NHWC when it holds at
 * least KILN_LAYOUT_MIN_GAINING convs that gain (groups 1, C >= 16 and
 * O >= 16: the shapes measured; a 3-channel stem's taps fill no cache
 * line) and at least two of them per layout conversion it would need;
 * else it stays NCHW. A conv the target would run on a bf16 engine
 * channels-last (compute_dtype=bf16, a bf16 model's conv: the target's
 * constant form says) counts as KILN_LAYOUT_BF16_GAIN: the bf16 kernels
 * are channels-last only and about twice as fast, so such a conv pays
 * for its conversions alone (a UNet block's convs, each between group
 * norms: a bf16 block at 32x32, 128-256 channels, 47.2 -> 27.7 ms on one
 * Zen 4 core, eager bf16 25.0).
 *
 * Pads (PAD of a 4-d float32 x) ride along too, never gaining: channels-
 * last a pad is the same copy with its dims permuted, and a TF-style
 * network's explicit pads (one before each stride-2 conv) would otherwise
 * split its region with two conversions each.
 *
 * Max pools (MAX_POOL2D) are candidates too, never gaining: channels-last
 * they are a vectorised max over whole pixels (MAX_POOL2D_NHWC: ResNet-18's
 * max pool took a fifth of the NCHW one's time in a profile), so the pool between ResNet's stem and
 * its first block joins the blocks' region, and the stem with it.
 *
 * Elementwise programs (ELTWISE_FUSED) ride along, never gaining: a
 * program is the same elementwise chain in any layout, its inputs read
 * channels-last (those of the output's shape) or permuted (a per-channel
 * scale (C, 1, 1) becomes (1, 1, 1, C): the same memory, a RESHAPE). An
 * activation the conv epilogues lack (hardswish, leaky ReLU, ELU: a
 * MobileNetV3 block) no longer cuts the network into NCHW pieces around
 * each one: a MobileNetV3-like block of hardswish convs ran every conv
 * NCHW, its 1x1 convs at a quarter of the machine's peak. Programs that
 * load rows by halves or rotated read positions along the last dim: they
 * stay NCHW.
 *
 * Reductions over a 4-d float32 x that keep their dims (SUM, MEAN, MAX,
 * MIN: a squeeze-excite block's global average, torch's mean over H and W)
 * ride along too, their axes permuted: channels-last a mean over H and W
 * sums whole pixels (the leading-axes path, vectorised over C), and the
 * excitation's 1x1 convs read it as they are. A MobileNetV3 block's
 * squeeze otherwise read the block's output NCHW: a conversion per block,
 * which kept the network NCHW.
 *
 * Rewrite. Each conv of an NHWC region becomes CONV2D_NHWC with the same
 * params, each max pool MAX_POOL2D_NHWC. A value made outside the region
 * that the region reads only once, as a conv's x, is read NCHW by that
 * conv (param 9: its bordered copy gathers it), with no conversion: the
 * region's first conv, usually. Any other x or residual made outside the
 * region is converted once per value (STRIDED_COPY (N, C, H, W) ->
 * (N, H, W, C)), shared by every region node reading it. A region node's
 * output that anything else reads (another op, a conv slot other than x /
 * residual, a graph output) is converted back once, right after the node. So every op outside the region and
 * every graph output sees NCHW, and results are the NCHW ones up to the
 * conv's own summation order. The pack pass later packs a constant weight
 * in the form the target wants for CONV2D_NHWC (on the CPU, panels of 16).
 *
 * kiln_graph_summarize_layout (ir/kiln_graph_print.h) reads the decision
 * back from any graph, also a loaded one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "base/kiln_fused_program.h"
#include "base/kiln_union_find.h"
#include "compiler/kiln_rewrite.h"

#ifndef KILN_LAYOUT_MIN_GAINING
#define KILN_LAYOUT_MIN_GAINING 2
#endif
#define KILN_LAYOUT_BF16_GAIN 4
#define KILN_LAYOUT_MUST (1 << 20)

/* A depthwise conv rides along (gains nothing: the NCHW planes kernel is
 * as fast) when the channels-last depthwise kernel takes it
 * (kiln_conv2d_f32_nhwc_depthwise: at most 49 taps, a dense weight): a
 * MobileNet block's expand, depthwise and project convs are then one
 * region, not three with a conversion around each depthwise one (17
 * conversions, a fifth of MobileNetV2's time). That kernel skips padded
 * taps, so the weight must be a finite constant (w * 0 is then 0, as the
 * NCHW kernels add it); fp32 only (a bf16 model's depthwise conv stays). */
static int kiln_layout_depthwise(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* w = &g->values[n->inputs[1]];
  return n->params[KILN_P(CONV2D, ROUND_X)] == 0 && n->n_inputs <= 4 &&
         w->shape[2] * w->shape[3] <= 49 && kiln_value_is_finite_constant(w);
}

/* Input i of an ELTWISE_FUSED node as the layout pass reads it: 2 when it
 * has the output's shape (read in the region's layout), 1 when it
 * broadcasts over the output with its channel dim alone or its H and W
 * dims alone (padded to 4 dims, (a, b, c, d) with b == 1 or c == d == 1:
 * (a, c, d, b) channels-last is the same memory), 0 otherwise. */
static int kiln_layout_eltwise_input(const kiln_graph_t* g, const kiln_node_t* n, int32_t i) {
  const kiln_value_t *x = &g->values[n->inputs[i]], *y = &g->values[n->outputs[0]];
  if (x->dtype != KILN_F32 || x->rank > 4) return 0;
  if (x->rank == 4 && memcmp(x->shape, y->shape, 4 * sizeof(int64_t)) == 0) return 2;
  int64_t d[4] = {1, 1, 1, 1};
  for (int32_t k = 0; k < x->rank; ++k) d[4 - x->rank + k] = x->shape[k];
  return d[1] == 1 || (d[2] == 1 && d[3] == 1);
}

/* An ELTWISE_FUSED node rides along (see the top) when its output is 4-d,
 * no load reads rows by halves or rotated, every input is one
 * kiln_layout_eltwise_input takes and one has the output's shape. */
static int kiln_layout_eltwise(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (y->dtype != KILN_F32 || y->rank != 4) return 0;
  const int32_t n_code = (int32_t)n->params[KILN_P(FUSED, N_SLOTS)];
  if (n_code < 1 || n_code > KILN_FUSED_MAX_SLOTS) return 0;
  for (int32_t k = 0; k < n_code; ++k) {
    const uint32_t op = kiln_fused_slot(n->params, k) & 255u;
    if (op == KILN_FUSED_IMM) ++k; /* its float's bits follow */
    else if (kiln_fused_is_load(op) && op != KILN_FUSED_LOAD) return 0;
  }
  int full = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const int how = n->inputs[i] >= 0 ? kiln_layout_eltwise_input(g, n, i) : 0;
    if (!how) return 0;
    full |= how == 2;
  }
  return full;
}

/* A reduction that rides along (see the top): float32 4-d x, dims kept. */
static int kiln_layout_reduce(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_SUM && n->op != KILN_OP_MEAN && n->op != KILN_OP_MAX && n->op != KILN_OP_MIN)
    return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  return x->dtype == KILN_F32 && x->rank == 4 && n->params[KILN_P(REDUCE, KEEPDIM)] != 0 &&
         g->values[n->outputs[0]].rank == 4;
}

static int kiln_layout_candidate(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op == KILN_OP_ELTWISE_FUSED) return kiln_layout_eltwise(g, n);
  if (kiln_layout_reduce(g, n)) return 1;
  if (n->op == KILN_OP_PAD) {
    /* Rides along (the same copy with its dims permuted) after a conv or
     * pool: never a region's entry, where NCHW it lets the conv after it
     * gather its input (param 9) with no conversion, and channels-last a
     * 3-channel image's pad copies runs of 3 floats. */
    const kiln_value_t* x = &g->values[n->inputs[0]];
    if (x->dtype != KILN_F32 || x->rank != 4 || x->producer < 0) return 0;
    const kiln_node_t* p = &g->nodes[x->producer];
    return p->op != KILN_OP_PAD && kiln_layout_candidate(g, p);
  }
  if (n->op == KILN_OP_MAX_POOL2D) { /* rides along: NHWC is as cheap for it */
    const kiln_value_t* x = &g->values[n->inputs[0]];
    return x->dtype == KILN_F32 && x->rank == 4 && n->params[KILN_P(POOL2D, DIVISOR_OVERRIDE)] == 0;
  }
  if (n->op != KILN_OP_CONV2D) return 0;
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  if (x->dtype != KILN_F32 || x->rank != 4 || w->rank != 4) return 0;
  if (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_CONV2D_PACKED_16) return 0;
  const int64_t groups = n->params[KILN_P(CONV2D, GROUPS)], C = x->shape[1], O = w->shape[0];
  if (groups < 1) return 0;
  if (groups == C && groups == O) return kiln_layout_depthwise(g, n);
  return O / groups >= 16;
}

int kiln_conv_takes_bf16_form(const kiln_graph_t* g, const kiln_node_t* n,
                              const kiln_hal_target_t* target, const kiln_hal_weights_t* weights) {
  if (!target || !target->constant_form || n->op != KILN_OP_CONV2D || n->n_inputs < 2 ||
      g->values[n->inputs[1]].kind != KILN_VALUE_CONSTANT)
    return 0;
  kiln_node_t as_nhwc = *n;
  as_nhwc.op = KILN_OP_CONV2D_NHWC;
  kiln_hal_constant_form_t f;
  kiln_status_t s = target->constant_form(g, &as_nhwc, 1, weights, &f);
  const int bf16 = !s && f.layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
  kiln_status_free(s);
  return bf16;
}

/* What a conv gains channels-last, in the cost rule's units (a layout
 * conversion costs two): 1 for a conv the fp32 NHWC kernel serves better
 * (groups 1, C and O >= 16: the shapes measured), KILN_LAYOUT_BF16_GAIN
 * for one the target would run on a bf16 engine channels-last (its
 * constant form for the conv as a CONV2D_NHWC is the bf16 layout:
 * compute_dtype=bf16, or a bf16 model's conv, kiln_hal_cpu_constant.c),
 * which has no NCHW kernel: such a conv takes about half the fp32 one's
 * time, far more than the conversions of its input and output (one
 * transposing copy each), so even a lone one pays (a UNet block's convs,
 * between group norms). */
static int kiln_layout_gains(const kiln_graph_t* g, const kiln_node_t* n,
                             const kiln_hal_target_t* target, const kiln_hal_weights_t* weights) {
  if (n->op != KILN_OP_CONV2D) return 0;
  /* A conv with scaled sums (kiln_pass_fuse_conv kept its bf16 weight)
   * runs only channels-last: its region always pays. */
  if (n->n_inputs > 4 && n->inputs[4] >= 0) return KILN_LAYOUT_MUST;
  if (kiln_conv_takes_bf16_form(g, n, target, weights)) return KILN_LAYOUT_BF16_GAIN;
  const int64_t C = g->values[n->inputs[0]].shape[1], O = g->values[n->inputs[1]].shape[0];
  return n->params[KILN_P(CONV2D, GROUPS)] == 1 && C >= 16 && O >= 16;
}

/* The cost rule: a region pays when it has at least
 * KILN_LAYOUT_MIN_GAINING gaining convs and at least two per conversion it
 * needs. A conversion reads and writes the whole tensor with a transpose,
 * about what the NHWC kernel saves on one or two convs of that tensor
 * (bench_conv_nhwc: 5-40 % of a conv that itself moves the tensor a few
 * times over), so a region whose every output leaves it (a training
 * forward graph saving each activation) stays NCHW. KILN_LAYOUT=nhwc (for
 * tests: the fuzzer's bf16-compute path) makes every region with a conv
 * go NHWC, paying or not, so small graphs reach the NHWC kernels. */
static int kiln_layout_pays(int32_t gaining, int32_t conversions, int32_t convs, int forced) {
  if (forced) return convs > 0;
  return gaining >= KILN_LAYOUT_MIN_GAINING && gaining >= 2 * conversions;
}

/* 1 for a depthwise conv (its channels-last kernel reads x channels-last:
 * it gets a conversion, not param 9). */
static int kiln_layout_is_depthwise(const kiln_graph_t* g, const kiln_node_t* n) {
  const int64_t groups = n->params[KILN_P(CONV2D, GROUPS)];
  return n->op == KILN_OP_CONV2D && groups > 1 && groups == g->values[n->inputs[0]].shape[1] &&
         groups == g->values[n->inputs[1]].shape[0];
}

/* Slots of a region node read in its own layout: a conv's x and residual,
 * a pool's or pad's x, an elementwise program's inputs of its output's
 * shape. */
static int kiln_layout_act_slot(const kiln_graph_t* g, const kiln_node_t* n, int32_t i) {
  if (n->op == KILN_OP_ELTWISE_FUSED) return kiln_layout_eltwise_input(g, n, i) == 2;
  return i == 0 || i == 3;
}

/* A transposing STRIDED_COPY of 4-d src (dst id) to NHWC (to_nhwc) or back;
 * s is src's shape in its own layout. */
static kiln_status_t kiln_layout_convert(kiln_graph_t* dst, int32_t src, const int64_t s[4],
                                         int to_nhwc, int32_t* out_id) {
  int64_t p[KILN_MAX_PARAMS];
  memset(p, 0, sizeof(p));
  p[KILN_P(VIEW, RANK)] = 4;
  /* Sizes may be symbolic (an image of any height and width): products
   * through the graph's table. */
  int64_t hw = kiln_graph_dim_mul(dst, s[1 + to_nhwc], s[2 + to_nhwc]);
  int64_t chw = kiln_graph_dim_mul(dst, hw, s[to_nhwc ? 1 : 3]);
  if (hw == KILN_DIM_INVALID || chw == KILN_DIM_INVALID)
    return kiln_status_make(KILN_INVALID_ARGUMENT, "kiln layout: a tensor's size overflows");
  if (to_nhwc) { /* src (N, C, H, W) -> (N, H, W, C) */
    int64_t dims[4] = {s[0], s[2], s[3], s[1]};
    int64_t st[4] = {chw, s[3], 1, hw};
    memcpy(p + KILN_P(VIEW, DIMS), dims, sizeof(dims));
    memcpy(p + KILN_P(VIEW, STRIDES), st, sizeof(st));
  } else { /* src (N, H, W, C) -> (N, C, H, W) */
    int64_t dims[4] = {s[0], s[3], s[1], s[2]};
    int64_t ws = kiln_graph_dim_mul(dst, s[2], s[3]);
    if (ws == KILN_DIM_INVALID)
      return kiln_status_make(KILN_INVALID_ARGUMENT, "kiln layout: a tensor's size overflows");
    int64_t st[4] = {chw, 1, ws, s[3]};
    memcpy(p + KILN_P(VIEW, DIMS), dims, sizeof(dims));
    memcpy(p + KILN_P(VIEW, STRIDES), st, sizeof(st));
  }
  return kiln_graph_add_node(dst, KILN_OP_STRIDED_COPY, &src, 1, p, KILN_P_COUNT(VIEW), NULL, 0,
                             to_nhwc ? "kiln layout: NCHW -> NHWC" : "kiln layout: NHWC -> NCHW",
                             out_id);
}

/* A broadcast input of a channels-last ELTWISE_FUSED (*id, in dst; its
 * dims padded to 4 are (a, b, c, d) with b == 1 or c == d == 1) as
 * (a, c, d, b): a RESHAPE, the same memory. An input of ones only
 * broadcasts a value: as it is. */
static kiln_status_t kiln_layout_eltwise_permute(kiln_graph_t* dst, int32_t* id) {
  const kiln_value_t* x = &dst->values[*id];
  int64_t d[4] = {1, 1, 1, 1};
  int ones = 1;
  for (int32_t k = 0; k < x->rank; ++k) {
    d[4 - x->rank + k] = x->shape[k];
    ones &= x->shape[k] == 1;
  }
  if (ones) return kiln_ok();
  int64_t p[KILN_MAX_PARAMS];
  memset(p, 0, sizeof(p));
  p[KILN_P(RESHAPE, RANK)] = 4;
  const int64_t dims[4] = {d[0], d[2], d[3], d[1]};
  memcpy(p + KILN_P(RESHAPE, DIMS), dims, sizeof(dims));
  return kiln_graph_add_node(dst, KILN_OP_RESHAPE, id, 1, p, KILN_P_COUNT(RESHAPE), NULL, 0,
                             "kiln layout: a broadcast input, channels last", id);
}

/* For the nodes marked in `nhwc`: which values something reads NCHW
 * (another op, a slot other than x / residual, a graph output), and how
 * often the marked nodes read each value in their layout (uses), as a
 * conv's x among them (x_uses). The arrays start zeroed. */
static void kiln_layout_count_uses(const kiln_graph_t* g, const char* nhwc, char* need_nchw,
                                   int32_t* uses, int32_t* x_uses) {
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t v = n->inputs[i];
      if (v < 0) continue;
      if (!(nhwc[ni] && kiln_layout_act_slot(g, n, i))) {
        need_nchw[v] = 1;
        continue;
      }
      uses[v]++;
      x_uses[v] += n->op == KILN_OP_CONV2D && i == 0 && !kiln_layout_is_depthwise(g, n);
    }
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) need_nchw[g->outputs[o]] = 1;
}

/* The PAD a channels-last depthwise conv n takes as its own padding, or
 * -1: a zero pad (+0.0) on H and W alone, at least as much at each end as
 * at its start (the rest is the conv's PAD_*_END), of an x of concrete
 * size, within the window's reach, read by n alone (uses), in the region
 * (nhwc). A TF-style "same" pad before a stride-2 conv pads one more at the
 * end, which CONV2D's symmetric padding cannot say: channels-last the pad
 * was a copy of the tensor (MobileNetV2: four, 8 % of its time). The
 * depthwise kernel skips taps past the input, exact for its finite weight
 * (kiln_layout_depthwise). */
static int32_t kiln_layout_end_pad(const kiln_graph_t* g, const kiln_node_t* n, const char* nhwc,
                                   const int32_t* uses) {
  if (!kiln_layout_is_depthwise(g, n)) return -1;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (x->producer < 0 || !nhwc[x->producer] || uses[n->inputs[0]] != 1) return -1;
  const kiln_node_t* pad = &g->nodes[x->producer];
  const kiln_value_t* src = &g->values[pad->inputs[0]];
  float fill = pad->fparams[KILN_FP(PAD, FILL)], zero = 0.0f;
  if (pad->op != KILN_OP_PAD || pad->params[KILN_P(PAD, MODE)] != 0 ||
      memcmp(&fill, &zero, sizeof zero) != 0 || kiln_dim_is_sym(src->shape[2]) ||
      kiln_dim_is_sym(src->shape[3]))
    return -1;
  const int64_t* before = &pad->params[KILN_P(PAD, BEFORE)];
  const int64_t* after = &pad->params[KILN_P(PAD, AFTER)];
  if (before[0] || after[0] || before[1] || after[1]) return -1;
  const kiln_value_t* w = &g->values[n->inputs[1]];
  for (int d = 0; d < 2; ++d) {
    const int64_t b = before[2 + d], a = after[2 + d];
    const int64_t p = n->params[d ? KILN_P(CONV2D, PAD_W) : KILN_P(CONV2D, PAD_H)];
    const int64_t reach = n->params[d ? KILN_P(CONV2D, DILATION_W) : KILN_P(CONV2D, DILATION_H)] *
                          (w->shape[2 + d] - 1);
    if (kiln_dim_is_sym(b) || kiln_dim_is_sym(a) || b < 0 || a < b || p + b > reach ||
        a - b > reach)
      return -1;
  }
  return x->producer;
}

kiln_status_t kiln_pass_layout(kiln_graph_t* g, const kiln_hal_target_t* target,
                               const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                               kiln_layout_stats_t* st) {
  *out_graph = NULL;
  memset(st, 0, sizeof(*st));
  const int32_t nn = g->n_nodes, nv = g->n_values;
  const char* env = getenv("KILN_LAYOUT");
  const int forced = env && strcmp(env, "nhwc") == 0;
  int32_t* parent = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  int32_t* gaining = calloc((size_t)nn + 1, sizeof(int32_t));
  int32_t* convs = calloc((size_t)nn + 1, sizeof(int32_t));
  int32_t* need = calloc((size_t)nn + 1, sizeof(int32_t)); /* conversions, per region root */
  char* nhwc = calloc((size_t)nn + 1, 1);
  char* need_nchw = calloc((size_t)nv + 1, 1);
  int32_t* region_uses = calloc((size_t)nv + 1, sizeof(int32_t));
  int32_t* region_x_uses = calloc((size_t)nv + 1, sizeof(int32_t));
  int32_t* nhwc_of = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* end_pad = malloc(sizeof(int32_t) * (size_t)(nn + 1)); /* kiln_layout_end_pad */
  kiln_rewriter_t rw;
  int rw_ready = 0;
  kiln_status_t s = !parent || !gaining || !convs || !need || !nhwc || !need_nchw || !nhwc_of ||
                            !region_uses || !region_x_uses || !uses || !end_pad
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "layout pass")
                        : kiln_ok();
  if (!s) {
    s = kiln_rewriter_initialize(&rw, g);
    rw_ready = !s;
  }
  if (s) goto done;

  /* Regions: candidates joined through x / residual edges. */
  for (int32_t ni = 0; ni < nn; ++ni) {
    parent[ni] = ni;
    nhwc[ni] = (char)kiln_layout_candidate(g, &g->nodes[ni]);
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (!nhwc[ni]) continue;
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      if (n->inputs[i] < 0 || !kiln_layout_act_slot(g, n, i)) continue;
      int32_t p = g->values[n->inputs[i]].producer;
      if (p >= 0 && nhwc[p]) kiln_union_find_join(parent, ni, p);
    }
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    if (!nhwc[ni]) continue;
    int32_t r = kiln_union_find_root(parent, ni);
    convs[r] += g->nodes[ni].op == KILN_OP_CONV2D;
    gaining[r] += kiln_layout_gains(g, &g->nodes[ni], target, weights);
  }
  /* The conversions each region would need (as the rewrite below places
   * them): values from outside it read other than as the one x a conv
   * gathers itself, once each, and its values something reads NCHW. */
  kiln_layout_count_uses(g, nhwc, need_nchw, region_uses, region_x_uses);
  for (int32_t v = 0; v < nv; ++v) {
    int32_t p = g->values[v].producer;
    if (p >= 0 && nhwc[p]) {
      need[kiln_union_find_root(parent, p)] += need_nchw[v];
    } else if (region_uses[v] && !(region_uses[v] == 1 && region_x_uses[v] == 1)) {
      /* Charged to the region of v's first reader (a value two regions
       * read is converted once, shared). */
      for (int32_t ni = 0; ni < nn; ++ni) {
        const kiln_node_t* n = &g->nodes[ni];
        int hit = 0;
        for (int32_t i = 0; i < n->n_inputs && nhwc[ni]; ++i)
          hit |= n->inputs[i] == v && kiln_layout_act_slot(g, n, i);
        if (hit) {
          need[kiln_union_find_root(parent, ni)]++;
          break;
        }
      }
    }
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    if (!nhwc[ni]) continue;
    int32_t r = kiln_union_find_root(parent, ni);
    if (r == ni) {
      if (kiln_layout_pays(gaining[r], need[r], convs[r], forced)) {
        st->regions++;
        st->convs += convs[r];
      } else {
        st->regions_kept++;
        st->convs_kept += convs[r];
      }
    }
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    if (!nhwc[ni]) continue;
    int32_t r = kiln_union_find_root(parent, ni);
    nhwc[ni] = (char)kiln_layout_pays(gaining[r], need[r], convs[r], forced);
    if (nhwc[ni] && g->nodes[ni].op == KILN_OP_MAX_POOL2D) st->pools++;
  }
  /* The same counts for the regions that go NHWC. */
  memset(need_nchw, 0, (size_t)nv + 1);
  memset(region_uses, 0, sizeof(int32_t) * ((size_t)nv + 1));
  memset(region_x_uses, 0, sizeof(int32_t) * ((size_t)nv + 1));
  kiln_layout_count_uses(g, nhwc, need_nchw, region_uses, region_x_uses);
  for (int32_t v = 0; v < nv; ++v) nhwc_of[v] = -1;
  /* Pads the depthwise convs after them take as their own padding: not
   * emitted; the conv reads the pad's input. */
  kiln_graph_count_uses(g, uses);
  for (int32_t ni = 0; ni < nn; ++ni)
    end_pad[ni] = nhwc[ni] ? kiln_layout_end_pad(g, &g->nodes[ni], nhwc, uses) : -1;

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (!nhwc[ni]) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    if (n->op == KILN_OP_PAD && uses[n->outputs[0]] == 1 && !need_nchw[n->outputs[0]]) {
      int taken = 0;
      for (int32_t nj = ni + 1; nj < nn && !taken; ++nj) taken = end_pad[nj] == ni;
      if (taken) continue; /* the depthwise conv reading it pads instead */
    }
    const kiln_node_t* folded = end_pad[ni] >= 0 ? &g->nodes[end_pad[ni]] : NULL;
    int32_t ins[KILN_MAX_NODE_INPUTS] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int x_nchw = 0;
    for (int32_t i = 0; i < n->n_inputs && !s; ++i) {
      int32_t v = i == 0 && folded ? folded->inputs[0] : n->inputs[i];
      if (v < 0) continue;
      if (i == 0 && nhwc_of[v] < 0 && region_uses[v] == 1 && region_x_uses[v] == 1) {
        /* The region's only read of an NCHW value, as a conv's x: the
         * conv gathers it itself (param 9), no conversion. */
        s = kiln_rewriter_value(&rw, v, &ins[0]);
        x_nchw = 1;
      } else if (kiln_layout_act_slot(g, n, i)) {
        if (nhwc_of[v] < 0) {
          int32_t nchw;
          s = kiln_rewriter_value(&rw, v, &nchw);
          if (!s) s = kiln_layout_convert(rw.dst, nchw, g->values[v].shape, 1, &nhwc_of[v]);
          if (!s) st->conversions++;
        }
        ins[i] = nhwc_of[v];
      } else {
        s = kiln_rewriter_value(&rw, v, &ins[i]);
      }
    }
    int32_t out = n->outputs[0];
    if (!s && n->op == KILN_OP_ELTWISE_FUSED) {
      for (int32_t i = 0; i < n->n_inputs && !s; ++i)
        if (!kiln_layout_act_slot(g, n, i)) s = kiln_layout_eltwise_permute(rw.dst, &ins[i]);
      if (!s)
        s = kiln_graph_add_node(rw.dst, KILN_OP_ELTWISE_FUSED, ins, n->n_inputs, n->params,
                                KILN_MAX_PARAMS, n->fparams, KILN_MAX_FPARAMS, n->origin,
                                &nhwc_of[out]);
      if (!s) st->eltwise++;
    } else if (!s && kiln_layout_reduce(g, n)) {
      /* Axis d of (N, H, W, C) is axis from[d] of (N, C, H, W). */
      static const int from[4] = {0, 2, 3, 1};
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      const uint64_t m = (uint64_t)n->params[KILN_P(REDUCE, AXES)];
      uint64_t permuted = 0;
      for (int d = 0; d < 4; ++d) permuted |= (m >> from[d] & 1u) << d;
      params[KILN_P(REDUCE, AXES)] = (int64_t)permuted;
      s = kiln_graph_add_node(rw.dst, n->op, ins, 1, params, KILN_P_COUNT(REDUCE), NULL, 0,
                              n->origin, &nhwc_of[out]);
      if (!s) st->reductions++;
    } else if (!s && n->op == KILN_OP_MAX_POOL2D) {
      s = kiln_graph_add_node(rw.dst, KILN_OP_MAX_POOL2D_NHWC, ins, 1, n->params, KILN_P_COUNT(POOL2D), NULL, 0,
                              n->origin, &nhwc_of[out]);
    } else if (!s && n->op == KILN_OP_PAD) {
      /* (N, C, H, W)'s before and after as (N, H, W, C)'s. */
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      for (int side = 0; side < 2; ++side) {
        int64_t* d = params + (side ? KILN_P(PAD, AFTER) : KILN_P(PAD, BEFORE));
        const int64_t c = d[1];
        d[1] = d[2], d[2] = d[3], d[3] = c;
      }
      s = kiln_graph_add_node(rw.dst, KILN_OP_PAD, ins, 1, params, KILN_P_COUNT(PAD), n->fparams,
                              KILN_FP_COUNT(PAD), n->origin, &nhwc_of[out]);
    }
    else if (!s) {
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      params[KILN_P(CONV2D_NHWC, X_NCHW)] = x_nchw;
      if (folded) { /* (N, C, H, W) pads: H and W at 2 and 3 */
        const int64_t* b = &folded->params[KILN_P(PAD, BEFORE)];
        const int64_t* a = &folded->params[KILN_P(PAD, AFTER)];
        params[KILN_P(CONV2D_NHWC, PAD_H)] += b[2];
        params[KILN_P(CONV2D_NHWC, PAD_W)] += b[3];
        params[KILN_P(CONV2D_NHWC, PAD_H_END)] = a[2] - b[2];
        params[KILN_P(CONV2D_NHWC, PAD_W_END)] = a[3] - b[3];
      }
      s = kiln_graph_add_node(rw.dst, KILN_OP_CONV2D_NHWC, ins, n->n_inputs, params, KILN_P_COUNT(CONV2D_NHWC), NULL, 0,
                              n->origin, &nhwc_of[out]);
    }
    if (!s && need_nchw[out]) {
      s = kiln_layout_convert(rw.dst, nhwc_of[out], rw.dst->values[nhwc_of[out]].shape, 0,
                              &rw.remap[out]);
      if (!s) st->conversions++;
    }
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  if (rw_ready) kiln_rewriter_deinitialize(&rw);
  free(parent);
  free(gaining);
  free(convs);
  free(need);
  free(nhwc);
  free(need_nchw);
  free(region_uses);
  free(region_x_uses);
  free(nhwc_of);
  free(uses);
  free(end_pad);
  return s;
}
