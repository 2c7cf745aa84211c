/* Graph rewriting: every pass reads one graph and emits a new one through a
 * rewriter, which keeps graph inputs in order, copies each old value into the
 * new graph on first use (constants by moving their bytes, not copying), and
 * remaps ids. Emitting in old node order keeps the new graph topological. */
#ifndef KILN_REWRITE_H
#define KILN_REWRITE_H

#include "ir/kiln_graph.h"

typedef struct kiln_rewriter_s {
  kiln_graph_t* src; /* constants' owned bytes move out of it */
  kiln_graph_t* dst;
  int32_t* remap; /* src value id -> dst value id, or -1 */
} kiln_rewriter_t;

/* Makes dst with src's inputs already added. */
kiln_status_t kiln_rewriter_initialize(kiln_rewriter_t* rw, kiln_graph_t* src);
/* Releases dst unless it was taken. */
void kiln_rewriter_deinitialize(kiln_rewriter_t* rw);

/* The dst id for src value v, adding a constant on first use. */
kiln_status_t kiln_rewriter_value(kiln_rewriter_t* rw, int32_t v, int32_t* out_id);

/* Emits src node `n` unchanged (inputs remapped); maps its output. */
kiln_status_t kiln_rewriter_copy_node(kiln_rewriter_t* rw, const kiln_node_t* n);

/* Emits a node built from src ids (-1 allowed for absent inputs) and maps
 * src value `result` to its output. */
kiln_status_t kiln_rewriter_emit(kiln_rewriter_t* rw, kiln_op_t op, const int32_t* src_inputs,
                                 int32_t n_inputs, const int64_t* params, const float* fparams,
                                 const char* origin, int32_t result);

/* Sets dst's outputs from src's and hands dst over (rw no longer owns it). */
kiln_status_t kiln_rewriter_finish(kiln_rewriter_t* rw, kiln_graph_t** out_graph);

/* Number of uses of each value (node inputs plus graph outputs) into counts
 * (n_values long, caller-allocated). */
void kiln_graph_count_uses(const kiln_graph_t* graph, int32_t* counts);

/* The kiln_activation_t an elementwise op computes, for epilogue fusion;
 * 0 when the op is not one. */
int kiln_op_as_activation(kiln_op_t op, int64_t* out_act);

/* 1 when v is a dense float32 constant whose every element is finite (a
 * conv weight for which skipping a padded tap equals adding w * 0). */
int kiln_value_is_finite_constant(const kiln_value_t* v);

/* 1 when the nodes reading value v compute KILN_ACT_RELU6 as the front end
 * spells hardtanh(0, 6), clamp(0, 6) and nn.ReLU6 (optable/elementwise.py's
 * _clamp): y = WHERE(LT(v, 0), 0, v), then WHERE(GT(y, 6), 6, y), float32,
 * each bound a scalar constant and each intermediate read by the pattern
 * alone. nodes: LT, WHERE, GT, WHERE (the last ends it). uses as
 * kiln_graph_count_uses gives; user: each value's last reader, or -1. */
int kiln_graph_match_relu6(const kiln_graph_t* g, const int32_t* uses, const int32_t* user,
                           int32_t v, int32_t nodes[4]);

/* 1 when the nodes reading value v compute KILN_ACT_HARDSWISH as torch
 * decomposes nn.Hardswish: t = ADD(v, 3), the relu6 clamp of t
 * (kiln_graph_match_relu6), p = MUL(v, clamp) (either order), DIV(p, 6),
 * float32, each constant a scalar and each intermediate read by the
 * pattern alone (v by the ADD and the MUL alone). nodes: ADD, LT, WHERE,
 * GT, WHERE, MUL, DIV (the last ends it). */
int kiln_graph_match_hardswish(const kiln_graph_t* g, const int32_t* uses, const int32_t* user,
                               int32_t v, int32_t nodes[7]);

/* 1 when MATMUL node n is a linear layer: its B a constant, unflagged, 2-d
 * (an unpacked weight) or (1, .., 1, K, N) dense float32 with A of at least
 * its rank (torch's matmul of a 3-d x by a (K, N) weight it cannot fold to
 * 2-d: an expand and a bmm). kiln_pass_fuse_gemm makes it a LINEAR, whose
 * weight is packed and quantized as the weight options say; the passes
 * before it keep it in that form (simplify does not absorb A's transpose
 * into a flag). */
int kiln_matmul_has_linear_weight(const kiln_graph_t* graph, const kiln_node_t* n);

#endif /* KILN_REWRITE_H */
