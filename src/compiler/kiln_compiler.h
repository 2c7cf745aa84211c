/* The graph compiler: IR-to-IR passes that make a captured graph fast, and
 * the driver that runs them in order. Pure C: no external compiler, no
 * Python. Each pass consumes its input graph and returns a new one. */
#ifndef KILN_COMPILER_H
#define KILN_COMPILER_H

#include <stdio.h>

#include "base/kiln_pool.h"
#include "hal/kiln_hal.h"
#include "ir/kiln_graph.h"

typedef struct kiln_compile_options_s {
  int fold_constants; /* evaluate nodes whose inputs are all constants: 2 holding a bf16
                       * weight's widening as its bf16 numbers (kiln_pass_fold.c), 1 making
                       * the float32 copy instead (KILN_FOLD_BF16=widen, for A/B runs), 0 not */
  int fuse;           /* GEMM epilogue fusion (bias, activation, residual) */
  int pack_weights;   /* pre-pack GEMM weights */
  int weights_bf16;   /* ... as bf16 (rounded to nearest even): half the bytes */
  int compute_bf16;   /* ... as bf16 for bf16 compute (KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI):
                       * LINEARs round their input to bf16 too and sum in fp32 */
  int weights_quant;  /* ... quantized (weight-only): 8 int8 per output channel
                       * (KILN_LAYOUT_GEMM_PACKED_B_Q8), 4 int4 in groups
                       * (KILN_LAYOUT_GEMM_PACKED_B_Q4); 0 none. Wins over the two above */
  int weights_group;  /* int4 group size along K (32 default, a multiple of 32) */
  int weights_asym;   /* int4 with zero points */
  int weights_a8;     /* int8 activations (KILN_GEMM_QUANT_A8): int8 and int4, every M */
  int bf16_in_place;  /* a bf16 model's linear weights read in place where the target
                       * says that pays, not packed (kiln_hal_weights_t.bf16_in_place): 1
                       * by default, 0 with KILN_BF16_WEIGHTS=packed; the GLU and q/k/v
                       * fusions leave such weights apart (joining them would copy them) */
  int verify_each;    /* run the verifier after every pass */
  int layout;         /* channels-last conv regions (kiln_pass_layout); 0 with KILN_LAYOUT=nchw */
  int fuse_glu;       /* gated pairs' GEMMs as one (kiln_pass_fuse_glu); 0 with KILN_GLU=off */
  int fold_casts;     /* kiln_pass_casts and fuse_eltwise's rounding pairs: 2 per value (the
                       * default), 1 chains read once only (KILN_CASTS=chains), 0 off
                       * (KILN_CASTS=keep) */
  int sdpa_bf16;      /* with compute_bf16, attention in bf16 too (kiln_pass_sdpa_bf16):
                       * 1 where it pays (the default), 2 every SDPA
                       * (KILN_ATTN_BF16=on, for tests), 0 none (=off) */
  const char* target; /* the target whose constant forms and kernels to use
                       * (kiln_hal_target_find; NULL: the default) */
  FILE* log;          /* when set, each pass prints what it did */
  /* When set, called with each pass's name as it starts, on the compiling
   * thread (a front end's progress bar); on_pass_ctx is passed back. */
  void (*on_pass)(void* ctx, const char* pass);
  void* on_pass_ctx;
} kiln_compile_options_t;

void kiln_compile_options_initialize(kiln_compile_options_t* options);

/* Dead-code elimination and constant folding (on target, through the HAL). */
kiln_status_t kiln_pass_fold(kiln_graph_t* graph, const kiln_hal_target_t* target, kiln_pool_t* pool,
                             int fold, kiln_graph_t** out_graph, int32_t* out_folded,
                             int32_t* out_dead);

/* Folds bf16 casts into the GEMMs that read them and turns float32 ->
 * bf16 -> float32 round trips into adjacent pairs, views moved after them
 * (kiln_pass_casts.c). Exact. mode: options' fold_casts (1 or 2).
 * *out_folded: the casts' readers folded. */
kiln_status_t kiln_pass_casts(kiln_graph_t* graph, int mode, kiln_graph_t** out_graph,
                              int32_t* out_folded);

/* Local rewrites in one sweep: identities (no-op reshapes, copies and
 * casts, x*1, x/1, x-0), reshape chains, decomposed GELU / SiLU / RMSNorm
 * back to their fused ops, and common-subexpression elimination; then drops
 * what no output reaches. */
kiln_status_t kiln_pass_simplify(kiln_graph_t* graph, kiln_graph_t** out_graph,
                                 int32_t* out_rewrites);

/* MATMUL with a constant 2-d right operand becomes LINEAR, absorbing a
 * following bias add, activation and residual add when each is the sole
 * user; with fold_round, also a bf16 round trip (CAST, CAST) after any
 * MATMUL or chain (ROUND_Y). */
kiln_status_t kiln_pass_fuse_gemm(kiln_graph_t* graph, int fold_round, kiln_graph_t** out_graph,
                                  int32_t* out_fused);

/* The two LINEARs of a gated linear unit, MUL(act(x Wa), x Wb) with
 * constant weights, become one LINEAR over [Wa | Wb] whose output halves
 * the MUL reads (kiln_pass_fuse_glu.c). Runs after kiln_pass_fuse_gemm.
 * joined: the pack pass runs later, so [Wa | Wb] of two borrowed weights
 * may be a KILN_LAYOUT_JOINED_COLS descriptor (kiln_joined_const.h)
 * instead of a copy. target and weights (or NULL): what the pack pass will
 * ask, so that weights the target reads where they lie stay apart
 * (kiln_pass_weight_read_in_place). */
kiln_status_t kiln_pass_fuse_glu(kiln_graph_t* graph, int joined, const kiln_hal_target_t* target,
                                 const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                                 int32_t* out_fused);

/* 1 when the pack pass will keep LINEAR node n's weight as it is because
 * target reads it in place with these weight options (a bf16 model's
 * (N, K) rows, kiln_hal_weights_t.bf16_in_place): a fusion joining it with
 * another weight would copy it. target NULL: 0. */
int kiln_pass_weight_read_in_place(const kiln_graph_t* graph, const kiln_node_t* n,
                                   const kiln_hal_target_t* target,
                                   const kiln_hal_weights_t* weights);

/* CONV2D absorbs a following run of per-channel MUL/ADD by constants (batch
 * norm: folded into its weight and bias), an activation and a residual add,
 * when each is the sole user. */
/* target and weights: what the pack pass will ask (a bf16 model's conv the
 * target runs on a bf16 engine keeps its bf16 weight: the scale goes to
 * the conv's scale input). */
kiln_status_t kiln_pass_fuse_conv(kiln_graph_t* graph, const kiln_hal_target_t* target,
                                  const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                                  int32_t* out_fused);

/* SDPA reads q/k/v through views (no permute copies), writes (B, S, H, D)
 * when that is what follows, and gets one GEMM for Q, K and V (except over
 * weights target reads in place, kiln_pass_weight_read_in_place:
 * concatenating would copy them; target NULL: no such weights). */
kiln_status_t kiln_pass_fuse_attention(kiln_graph_t* graph, const kiln_hal_target_t* target,
                                       const kiln_hal_weights_t* weights,
                                       kiln_graph_t** out_graph, int32_t* out_fused);

/* compute_bf16: SDPAs compute in bf16 (KILN_SDPA_BF16): all of them, or
 * (all 0) those where the compiling CPU has a bf16 engine and that are not
 * a decode step's. */
kiln_status_t kiln_pass_sdpa_bf16(kiln_graph_t* graph, int all, kiln_graph_t** out_graph,
                                  int32_t* out_marked);

/* Chains of float32 elementwise ops (with comparisons feeding WHERE,
 * transformers' rotate_half and, with rounds set, float32 -> bf16 -> float32
 * cast pairs) whose intermediates are read only inside the chain become one
 * ELTWISE_FUSED node each. */
kiln_status_t kiln_pass_fuse_eltwise(kiln_graph_t* graph, int rounds, kiln_graph_t** out_graph,
                                     int32_t* out_fused);

/* Runs chains of convs channels-last where the cost rule says it pays,
 * converting layouts only at their edges (kiln_pass_layout.c). */
typedef struct kiln_layout_stats_s {
  int32_t regions, convs, pools;    /* made channels-last */
  int32_t eltwise, reductions;      /* elementwise programs, reductions riding along */
  int32_t regions_kept, convs_kept; /* candidates left NCHW by the cost rule */
  int32_t conversions;              /* layout copies placed */
} kiln_layout_stats_t;
/* Whether target would give conv node n (a CONV2D, its weight a constant)
 * the bf16 weight form were it a CONV2D_NHWC: the pack pass's question,
 * asked ahead by fuse_conv and the layout pass (kiln_pass_layout.c). */
int kiln_conv_takes_bf16_form(const kiln_graph_t* g, const kiln_node_t* n,
                              const kiln_hal_target_t* target, const kiln_hal_weights_t* weights);

/* target and weights: what the pack pass will ask (a conv the target will
 * run on a bf16 engine gains more from channels-last). */
kiln_status_t kiln_pass_layout(kiln_graph_t* graph, const kiln_hal_target_t* target,
                               const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                               kiln_layout_stats_t* out_stats);

/* Puts each constant a node reads in the form target wants for that node
 * (its constant_form; on the CPU GEMM panels for LINEAR weights, in fp32,
 * bf16 or int8 / int4 as `weights` says, conv panels), once per distinct
 * (constant, form). *out_packed: the constants packed. */
kiln_status_t kiln_pass_pack_weights(kiln_graph_t* graph, const kiln_hal_target_t* target,
                                     kiln_pool_t* pool, const kiln_hal_weights_t* weights,
                                     kiln_graph_t** out_graph, int32_t* out_packed);

/* Convs whose every reader is a bf16-compute conv reading them as x (with
 * lossy, compute_dtype=bf16: or a depthwise conv) store y in bf16
 * (CONV2D_NHWC's Y_BF16; kiln_pass_conv_bf16_io.c). After the pack pass.
 * *out_marked: the convs. */
kiln_status_t kiln_pass_conv_bf16_io(kiln_graph_t* graph, int lossy, kiln_graph_t** out_graph,
                                     int32_t* out_marked);

/* Runs the passes. Consumes graph (released on failure too). */
kiln_status_t kiln_compile(kiln_graph_t* graph, const kiln_compile_options_t* options,
                           kiln_graph_t** out_graph);

#endif /* KILN_COMPILER_H */
