/* The .kiln file layout, byte by byte. This header is the normative
 * description of format 1.x (docs/format.md repeats it with tables and the
 * versioning policy); the writer and reader use only the constants below,
 * never a C struct copied to or from the file, so no compiler padding or host
 * byte order can leak into the format.
 *
 * General rules
 *   - All integers are little-endian, fixed width; floats are IEEE-754
 *     binary32 bit patterns stored as u32. Signed integers are two's
 *     complement.
 *   - The file is: a 64-byte header, a section table, then sections. Every
 *     section starts at a file offset that is a multiple of 64, and sections
 *     appear in the table in increasing offset order without overlapping each
 *     other, the header or the table. Bytes between sections are padding
 *     (written as zero, not read).
 *   - Required sections: "graph" (the IR) and "consts" (the constant blob),
 *     each exactly once; "syms" (symbolic sizes, 2.7) is the reader's too,
 *     when present. Any other name is a caller section (the runtime's
 *     memory plan, the Python front end's JSON metadata, ...), opaque to the
 *     reader; unknown sections are skipped, never an error.
 *   - Fields marked "reserved" or "unused slot" are written as zero and a 1.x
 *     reader rejects non-zero there (the only way to extend a record is a
 *     major version bump; additive changes go in new sections).
 *
 * Header (64 bytes at file offset 0)
 *   off size type  meaning
 *     0    4 u8[4] magic "KILN"
 *     4    2 u16   format major version (KILN_FORMAT_MAJOR)
 *     6    2 u16   format minor version (KILN_FORMAT_MINOR)
 *     8    4 u32   flags: must-understand feature bits; 1.x defines none, so
 *                  any set bit is rejected
 *    12    4 u32   header size, 64
 *    16    8 u64   file size in bytes; must equal the buffer's length
 *    24    8 u64   section table offset (>= 64)
 *    32    4 u32   section count (2..KILN_FORMAT_MAX_SECTIONS)
 *    36    4 u32   section table entry size, 48
 *    40   24       reserved
 *
 * Section table entry (48 bytes each, `count` of them at the table offset)
 *   off size type   meaning
 *     0   32 u8[32] name: 1..31 printable ASCII bytes (0x21..0x7e), then NUL
 *                   bytes to the end of the field; names are unique
 *    32    8 u64    offset of the section from the start of the file
 *                   (multiple of 64)
 *    40    8 u64    size of the section in bytes (offset + size <= file size)
 *
 * "graph" section
 *   graph header (32 bytes)
 *     off size type meaning
 *       0    4 u32  V: number of values
 *       4    4 u32  N: number of nodes
 *       8    4 u32  I: number of graph inputs
 *      12    4 u32  O: number of graph outputs (>= 1)
 *      16    8 u64  S: size of the string table in bytes
 *      24    8      reserved
 *   then V value records, N node records, I input ids (i32 each), O output
 *   ids (i32 each), and the S-byte string table; the section's size is
 *   exactly the sum of these, so every count is bounded by the section size
 *   before anything is allocated from it.
 *
 *   value record (104 bytes), in value id order (record k is value k)
 *     off size type   meaning
 *       0    4 u32    kind (kiln_value_kind_t: 0 intermediate, 1 input,
 *                     2 constant)
 *       4    4 u32    dtype (kiln_dtype_t)
 *       8    4 u32    layout (kiln_layout_t; 0 dense unless a constant)
 *      12    4 i32    rank, 0..8
 *      16   64 i64[8] shape; dims 0..2^40, at most 2^44 elements; entries at
 *                     and after `rank` are zero
 *      80    4 u32    name: string table offset, or 0xffffffff for none
 *      84    4        reserved
 *      88    8 u64    constants: byte offset of the data in "consts"
 *                     (multiple of 64); zero for other kinds
 *      96    8 u64    constants: byte size of the data (the dense size when
 *                     the layout is dense); zero for other kinds
 *   Constants appear in increasing offset order without overlap.
 *   Intermediates name no producer: the k-th intermediate (in id order) is
 *   the output of node k, which is what a graph built by appending nodes
 *   looks like, and what lets the reader replay values in id order.
 *
 *   node record (264 bytes), in execution (topological) order
 *     off size type    meaning
 *       0    4 u32     op (kiln_op_t)
 *       4    4 u32     number of inputs (within the op's min..max)
 *       8    4 u32     number of outputs, 1
 *      12    4 u32     origin: string table offset, or 0xffffffff for none
 *      16   32 i32[8]  input value ids; -1 for an absent optional input;
 *                      slots from the input count on are zero
 *      48    4 i32     output value id
 *      52    4         reserved
 *      56  192 i64[24] params (all of them, including unused zeros)
 *     248   16 u32[4]  fparams as binary32 bit patterns
 *
 *   string table: NUL-terminated byte strings (UTF-8 by convention); a
 *   reference is the offset of a string's first byte and must be followed
 *   by a NUL inside the table.
 *
 * "consts" section
 *   The constants' bytes, each at its record's offset. Since the section
 *   starts 64-aligned in the file and every offset is a multiple of 64, a
 *   file loaded or mapped at a 64-aligned address can be used in place.
 *
 * "syms" section (2.7): the graph's symbolic sizes (ir/kiln_sym.h)
 *   Present, once, exactly when a value dimension or a node param is
 *   symbolic: a value in [KILN_SYM_BASE, KILN_SYM_BASE + KILN_SYM_MAX_EXPRS)
 *   stored as the i64 it is, naming expression (value - KILN_SYM_BASE) of
 *   this table. A graph without symbolic sizes writes no such section and
 *   stamps minor version 6 (KILN_FORMAT_MINOR_CONCRETE), so its file is
 *   byte for byte what a 2.6 writer made; a file with one stamps 7. A reader
 *   interprets "syms" only in files of minor version >= 7 (in older files
 *   the name was a caller section's) and rebuilds the table before the
 *   graph's values, so a symbolic dim or param must name an expression the
 *   table has. A file with a "syms" section has no "plan" section (plans are
 *   made per binding of the symbols).
 *   header (16 bytes)
 *     off size type meaning
 *       0    4 u32  E: number of expressions (Y..KILN_SYM_MAX_EXPRS)
 *       4    4 u32  Y: number of symbols (1..KILN_SYM_MAX_VARS)
 *       8    8 u64  S: size of the section's string table in bytes
 *   then Y symbol records, E expression records and the S-byte string
 *   table (as the graph's: NUL-terminated strings, a reference is a first
 *   byte's offset); the section's size is exactly 16 + 24 Y + 24 E + S.
 *   symbol record (24 bytes), symbol k
 *     off size type meaning
 *       0    4 u32  name: string table offset (required)
 *       4    4      reserved
 *       8    8 i64  lo: smallest value, 0 <= lo <= hi
 *      16    8 i64  hi: largest value, 1 <= hi <= 2^40
 *   expression record (24 bytes), in id order (record k is expression k)
 *     off size type meaning
 *       0    4 u32  kind (kiln_sym_kind_t: 0 symbol, 1 a + b, 2 a * b,
 *                   3 a // b, 4 a mod b, 5 max, 6 min)
 *       4    4      reserved
 *       8    8 i64  a: for a symbol, its index; else an operand
 *      16    8 i64  b: for a symbol, 0; else an operand
 *   An operand is a number (>= KILN_SYM_BASE + KILN_SYM_MAX_EXPRS) or an
 *   encoded expression of lower id. The k-th symbol expression (in id
 *   order) is symbol k, and every symbol has one. Entries are the
 *   canonical forms kiln_sym.c builds: the reader re-creates each through
 *   the table's constructors (kiln_sym_var, kiln_dim_op), which must give
 *   back exactly its id as a new entry (a duplicate, or a form the
 *   constructors would simplify, is refused). Operands nest at most
 *   KILN_FORMAT_SYM_MAX_DEPTH deep.
 *
 * Enum numberings (ops, dtypes, layouts, value kinds) are part of the
 * format: they are only ever appended to (kiln_ops.h, kiln_dtype.h).
 */
#ifndef KILN_FORMAT_H
#define KILN_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_activation.h"
#include "ir/kiln_graph.h"

#define KILN_FORMAT_MAGIC "KILN"
#define KILN_FORMAT_MAJOR 2 /* 2.0: MATMUL params[0] became transpose flags (a 1.x reader would misread them) */
#define KILN_FORMAT_MINOR 24 /* 2.1: ELTWISE_FUSED, the optional "plan" section; 2.2: CONV2D_NHWC; 2.3: GELU_BACKWARD, LAYER_NORM_BACKWARD; 2.4: LINEAR with a graph-value weight; 2.5: layout 6, bf16-compute LINEAR weights; 2.6: layouts 7 and 8, int8 and int4 LINEAR weights; 2.7: the "syms" section (symbolic sizes); 2.8: the GROUPED_MM op; 2.9: folded bf16 casts; 2.10: the "guards" section; 2.11: int4 weights with bf16 scales; 2.12: GEMMs that round b; 2.13: fused programs loading halves; 2.14: SDPA's run-time default scale; 2.15: the RANDOM op; 2.16: bf16-compute conv weights (layout 12); 2.17: GEMMs that round y; 2.18: SDPA in bf16 (KILN_SDPA_BF16) ; 2.19: convs that read x as bf16 (ROUND_X); 2.20: the SOLVE_TRIANGULAR op; 2.21: bf16 linear weights read in place (layout 14); 2.22: SDPA reading every key (KILN_SDPA_EVERY_KEY), the RELU6 activation; 2.23: convs storing y in bf16 (CONV2D_NHWC's Y_BF16); 2.24: the HARDSWISH activation */
/* The minor version a file without symbolic sizes is stamped with: such a
 * file is exactly what a 2.6 writer made. */
#define KILN_FORMAT_MINOR_CONCRETE 6
/* The first minor version whose files may have a "syms" section. */
#define KILN_FORMAT_MINOR_SYMS 7
/* The minor version a file using GROUPED_MM is stamped with (others are
 * stamped as before: 7 with symbolic sizes, else 6). */
#define KILN_FORMAT_MINOR_GROUPED_MM 8
/* The minor version a file using folded bf16 casts is stamped with
 * (kiln_pass_casts: MATMUL's KILN_MATMUL_ROUND_A_BF16, LINEAR's ROUND_A, a
 * bf16 MATMUL b or LINEAR w, the fused ROUND_BF16 opcode 4). A 2.8 reader
 * refuses each: an unknown matmul flag, a LINEAR param past its layout, a
 * bf16 b or w, an unknown fused opcode. */
#define KILN_FORMAT_MINOR_CASTS 9
/* The minor version a file with a "guards" section is stamped with (a
 * symbolic graph whose table holds guards, kiln_sym_guard_add). A 2.9 reader
 * skips the section it does not know and runs without the checks. */
#define KILN_FORMAT_MINOR_GUARDS 10
/* The minor version a file holding an int4 weight with bf16 scales is
 * stamped with (layout 8 whose blob has flags bit 2,
 * KILN_GEMM_QUANT_BF16_SCALES). A 2.10 reader refuses the constant when it
 * makes a model of the file (an unknown blob flag). */
#define KILN_FORMAT_MINOR_BF16_SCALES 11
/* The minor version a file with a GEMM that rounds its b to bf16 is stamped
 * with (kiln_pass_casts: MATMUL's KILN_MATMUL_ROUND_B_BF16, LINEAR's
 * ROUND_B). A 2.11 reader refuses each: an unknown matmul flag, a LINEAR
 * param past its layout. */
#define KILN_FORMAT_MINOR_ROUND_B 12
/* The minor version a file with a fused program that loads an input by
 * halves (LOAD_LOW_HALF, LOAD_HIGH_HALF: kiln_pass_fuse_glu) is stamped
 * with. A 2.12 reader refuses the program (an unknown opcode). */
#define KILN_FORMAT_MINOR_HALVES 13
/* The minor version a file with an SDPA that takes torch's default scale
 * from its head dim at run time (KILN_SDPA_SCALE_HEAD_DIM: a symbolic D) is
 * stamped with. A 2.13 reader refuses the node (an unknown flag). */
#define KILN_FORMAT_MINOR_SDPA_SCALE 14
/* The minor version a file with a RANDOM node (dropout, torch.rand) is
 * stamped with. A 2.14 reader refuses the node (an unknown op). */
#define KILN_FORMAT_MINOR_RANDOM 15
/* The minor version a file holding a bf16-compute conv weight (layout 12,
 * KILN_LAYOUT_CONV2D_PACKED_16_BF16) is stamped with. A 2.15 reader refuses
 * the value (an unknown layout); this reader refuses the layout in a file
 * stamped older (no writer of that version made one). */
#define KILN_FORMAT_MINOR_CONV_BF16 16
/* The minor version a file with a GEMM that rounds its y to bf16 is stamped
 * with (kiln_pass_fuse_gemm: MATMUL's KILN_MATMUL_ROUND_Y_BF16, LINEAR's
 * ROUND_Y). A 2.16 reader refuses each: an unknown matmul flag, a LINEAR
 * param past its layout. */
#define KILN_FORMAT_MINOR_ROUND_Y 17
/* The minor version a file with an SDPA computed in bf16 (KILN_SDPA_BF16,
 * compute_dtype=bf16) is stamped with. A 2.17 reader refuses the node (an
 * unknown flag); this reader refuses the flag in a file stamped older (no
 * writer of that version set it). */
#define KILN_FORMAT_MINOR_SDPA_BF16 18
/* The minor version a file with a conv that reads x as bf16 (CONV2D's and
 * CONV2D_NHWC's ROUND_X: a bf16 model's conv) or scales its sums (a fifth
 * input, scale: a batch norm folded into such a conv) is stamped with. A
 * 2.18 reader refuses the node (a param past its layout, an input too
 * many); this reader refuses either in a file stamped older (no writer of
 * that version made one). */
#define KILN_FORMAT_MINOR_CONV_ROUND_X 19
/* The minor version a file with a SOLVE_TRIANGULAR node is stamped with. */
#define KILN_FORMAT_MINOR_SOLVE_TRIANGULAR 20
/* The minor version a file holding a bf16 model's linear weight as its own
 * (N, K) rows of bf16, read in place (KILN_LAYOUT_WIDENED_BF16_T, kept so by
 * kiln_hal_weights_t.bf16_in_place), is stamped with. A 2.20 reader refuses
 * the value (the layout existed only before packing); this reader refuses
 * it in a file stamped older, and the untransposed held layout always. */
#define KILN_FORMAT_MINOR_BF16_ROWS 21
/* The minor version a file with an SDPA that reads every key
 * (KILN_SDPA_EVERY_KEY: attention eager runs on its math path) is stamped
 * with. A 2.21 reader refuses the node (an unknown flag); this reader
 * refuses the flag in a file stamped older. */
#define KILN_FORMAT_MINOR_SDPA_EVERY_KEY 22
/* The minor version a file with a LINEAR or conv whose activation is
 * KILN_ACT_RELU6, or a CONV2D_NHWC with end padding, is stamped with: a 2.21
 * reader refuses the node (an activation out of range, a param past its
 * layout); this reader refuses either in a file stamped older. */
#define KILN_FORMAT_MINOR_RELU6 22
#define KILN_FORMAT_MINOR_CONV_PAD_END 22
/* The minor version a file with a CONV2D_NHWC that stores y in bf16
 * (Y_BF16: kiln_pass_conv_bf16_io.c) is stamped with: a 2.22 reader
 * refuses the node (a param past its layout); this reader refuses it in a
 * file stamped older. */
#define KILN_FORMAT_MINOR_CONV_BF16_IO 23
/* The minor version a file with a LINEAR or conv whose activation is
 * KILN_ACT_HARDSWISH is stamped with: a 2.23 reader refuses the node (an
 * activation out of range); this reader refuses it in a file stamped
 * older. */
#define KILN_FORMAT_MINOR_HARDSWISH 24

/* 1 when node n is a CONV2D_NHWC storing y in bf16 (format 2.23). */
static inline int kiln_artifact_conv_y_bf16(const kiln_node_t* n) {
  return n->op == KILN_OP_CONV2D_NHWC && n->params[KILN_P(CONV2D_NHWC, Y_BF16)] != 0;
}

/* 1 when node n is a CONV2D_NHWC with end padding (PAD_H_END, PAD_W_END:
 * format 2.22, as the relu6 activation). */
static inline int kiln_artifact_conv_pads_end(const kiln_node_t* n) {
  return n->op == KILN_OP_CONV2D_NHWC &&
         (n->params[KILN_P(CONV2D_NHWC, PAD_H_END)] || n->params[KILN_P(CONV2D_NHWC, PAD_W_END)]);
}

/* The activation param of node n (LINEAR, CONV2D, CONV2D_NHWC), else 0. */
static inline int64_t kiln_artifact_node_act(const kiln_node_t* n) {
  _Static_assert(KILN_P(CONV2D, ACT) == KILN_P(CONV2D_NHWC, ACT), "conv layouts");
  return n->op == KILN_OP_LINEAR ? n->params[KILN_P(LINEAR, ACT)]
         : n->op == KILN_OP_CONV2D || n->op == KILN_OP_CONV2D_NHWC ? n->params[KILN_P(CONV2D, ACT)]
                                                                    : 0;
}

/* 1 when node n is a conv that reads x as bf16 or scales its sums
 * (format 2.19). */
static inline int kiln_artifact_conv_rounds_x(const kiln_node_t* n) {
  return (n->op == KILN_OP_CONV2D || n->op == KILN_OP_CONV2D_NHWC) &&
         (n->params[KILN_P(CONV2D, ROUND_X)] != 0 || n->n_inputs > 4);
}
#define KILN_FORMAT_ALIGN 64
#define KILN_FORMAT_MAX_SECTIONS 1024
#define KILN_FORMAT_NO_STRING 0xffffffffu

/* Header fields. */
#define KILN_FORMAT_HEADER_SIZE 64
#define KILN_FORMAT_HDR_MAGIC 0
#define KILN_FORMAT_HDR_MAJOR 4
#define KILN_FORMAT_HDR_MINOR 6
#define KILN_FORMAT_HDR_FLAGS 8
#define KILN_FORMAT_HDR_HEADER_SIZE 12
#define KILN_FORMAT_HDR_FILE_SIZE 16
#define KILN_FORMAT_HDR_TABLE_OFFSET 24
#define KILN_FORMAT_HDR_SECTION_COUNT 32
#define KILN_FORMAT_HDR_ENTRY_SIZE 36
#define KILN_FORMAT_HDR_RESERVED 40

/* Section table entry fields. */
#define KILN_FORMAT_ENTRY_SIZE 48
#define KILN_FORMAT_NAME_SIZE 32
#define KILN_FORMAT_ENTRY_NAME 0
#define KILN_FORMAT_ENTRY_OFFSET 32
#define KILN_FORMAT_ENTRY_SIZE_FIELD 40

#define KILN_FORMAT_SECTION_GRAPH "graph"
#define KILN_FORMAT_SECTION_CONSTS "consts"
#define KILN_FORMAT_SECTION_SYMS "syms"
#define KILN_FORMAT_SECTION_GUARDS "guards"
/* The runtime's memory plan (runtime/kiln_plan_io.h's KILN_PLAN_SECTION):
 * named here because a file with symbolic sizes must not have one. */
#define KILN_FORMAT_SECTION_PLAN "plan"

/* Graph section header fields. */
#define KILN_FORMAT_GRAPH_HEADER_SIZE 32
#define KILN_FORMAT_GH_N_VALUES 0
#define KILN_FORMAT_GH_N_NODES 4
#define KILN_FORMAT_GH_N_INPUTS 8
#define KILN_FORMAT_GH_N_OUTPUTS 12
#define KILN_FORMAT_GH_STRINGS_SIZE 16
#define KILN_FORMAT_GH_RESERVED 24

/* Value record fields. */
#define KILN_FORMAT_VALUE_SIZE 104
#define KILN_FORMAT_V_KIND 0
#define KILN_FORMAT_V_DTYPE 4
#define KILN_FORMAT_V_LAYOUT 8
#define KILN_FORMAT_V_RANK 12
#define KILN_FORMAT_V_SHAPE 16
#define KILN_FORMAT_V_NAME 80
#define KILN_FORMAT_V_RESERVED 84
#define KILN_FORMAT_V_CONST_OFFSET 88
#define KILN_FORMAT_V_CONST_SIZE 96

/* Node record fields. */
#define KILN_FORMAT_NODE_SIZE 264
#define KILN_FORMAT_N_OP 0
#define KILN_FORMAT_N_N_INPUTS 4
#define KILN_FORMAT_N_N_OUTPUTS 8
#define KILN_FORMAT_N_ORIGIN 12
#define KILN_FORMAT_N_INPUTS 16
#define KILN_FORMAT_N_OUTPUT 48
#define KILN_FORMAT_N_RESERVED 52
#define KILN_FORMAT_N_PARAMS 56
#define KILN_FORMAT_N_FPARAMS 248

/* "syms" section fields. */
#define KILN_FORMAT_SYMS_HEADER_SIZE 16
#define KILN_FORMAT_SH_N_EXPRS 0
#define KILN_FORMAT_SH_N_VARS 4
#define KILN_FORMAT_SH_STRINGS_SIZE 8
#define KILN_FORMAT_SYM_VAR_SIZE 24
#define KILN_FORMAT_SV_NAME 0
#define KILN_FORMAT_SV_RESERVED 4
#define KILN_FORMAT_SV_LO 8
#define KILN_FORMAT_SV_HI 16
#define KILN_FORMAT_SYM_EXPR_SIZE 24
#define KILN_FORMAT_SE_KIND 0
#define KILN_FORMAT_SE_RESERVED 4
#define KILN_FORMAT_SE_A 8
#define KILN_FORMAT_SE_B 16
/* "guards" section fields: a header, then one record per guard. */
#define KILN_FORMAT_GUARDS_HEADER_SIZE 8
#define KILN_FORMAT_GDH_N_GUARDS 0
#define KILN_FORMAT_GDH_RESERVED 4
#define KILN_FORMAT_GUARD_SIZE 24
#define KILN_FORMAT_G_REL 0
#define KILN_FORMAT_G_RESERVED 4
#define KILN_FORMAT_G_A 8
#define KILN_FORMAT_G_B 16
/* How deep operands may nest (an expression of symbols is depth 1 more than
 * its deepest operand; a symbol is 1): code that walks expressions
 * recursively (kiln_sym_describe) stays shallow on any file. */
#define KILN_FORMAT_SYM_MAX_DEPTH 256

/* Record capacities fixed by format 1.x. */
#define KILN_FORMAT_RANK 8
#define KILN_FORMAT_NODE_INPUTS 8
#define KILN_FORMAT_NODE_OUTPUTS 1
#define KILN_FORMAT_PARAMS 24
#define KILN_FORMAT_FPARAMS 4

/* Shape limits, the same as the graph's own (kiln_graph.c). */
#define KILN_FORMAT_MAX_DIM ((int64_t)1 << 40)
#define KILN_FORMAT_MAX_NUMEL ((int64_t)1 << 44)

/* The record layouts above hold exactly the IR's capacities; growing one of
 * these in the IR changes the file format (a major version bump). */
_Static_assert(KILN_MAX_RANK == KILN_FORMAT_RANK, "value record holds KILN_MAX_RANK dims");
_Static_assert(KILN_MAX_NODE_INPUTS == KILN_FORMAT_NODE_INPUTS, "node record input slots");
_Static_assert(KILN_MAX_NODE_OUTPUTS == KILN_FORMAT_NODE_OUTPUTS, "node record output slots");
_Static_assert(KILN_MAX_PARAMS == KILN_FORMAT_PARAMS, "node record params");
_Static_assert(KILN_MAX_FPARAMS == KILN_FORMAT_FPARAMS, "node record fparams");
_Static_assert(KILN_FORMAT_V_SHAPE + 8 * KILN_FORMAT_RANK == KILN_FORMAT_V_NAME,
               "value record: shape is followed by the name");
_Static_assert(KILN_FORMAT_V_CONST_SIZE + 8 == KILN_FORMAT_VALUE_SIZE, "value record size");
_Static_assert(KILN_FORMAT_N_INPUTS + 4 * KILN_FORMAT_NODE_INPUTS == KILN_FORMAT_N_OUTPUT,
               "node record: inputs are followed by the output");
_Static_assert(KILN_FORMAT_N_PARAMS + 8 * KILN_FORMAT_PARAMS == KILN_FORMAT_N_FPARAMS,
               "node record: params are followed by fparams");
_Static_assert(KILN_FORMAT_N_FPARAMS + 4 * KILN_FORMAT_FPARAMS == KILN_FORMAT_NODE_SIZE,
               "node record size");
_Static_assert(KILN_FORMAT_HDR_RESERVED + 24 == KILN_FORMAT_HEADER_SIZE, "header size");
_Static_assert(KILN_FORMAT_ENTRY_SIZE_FIELD + 8 == KILN_FORMAT_ENTRY_SIZE, "entry size");
_Static_assert(sizeof(float) == 4, "fparams are binary32");
_Static_assert(KILN_FORMAT_SV_HI + 8 == KILN_FORMAT_SYM_VAR_SIZE, "symbol record size");
_Static_assert(KILN_FORMAT_SE_B + 8 == KILN_FORMAT_SYM_EXPR_SIZE, "expression record size");
_Static_assert(KILN_FORMAT_SH_STRINGS_SIZE + 8 == KILN_FORMAT_SYMS_HEADER_SIZE, "syms header size");
_Static_assert(KILN_FORMAT_G_B + 8 == KILN_FORMAT_GUARD_SIZE, "guard record size");
_Static_assert(KILN_FORMAT_GDH_RESERVED + 4 == KILN_FORMAT_GUARDS_HEADER_SIZE, "guards header size");

/* Little-endian field access by shifts, so the code is the same on any host
 * and never performs an unaligned load. */
static inline uint16_t kiln_format_get_u16(const uint8_t* p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t kiln_format_get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}
static inline uint64_t kiln_format_get_u64(const uint8_t* p) {
  return (uint64_t)kiln_format_get_u32(p) | ((uint64_t)kiln_format_get_u32(p + 4) << 32);
}
static inline void kiln_format_put_u16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void kiln_format_put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kiln_format_put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

#endif /* KILN_FORMAT_H */
