/* Elementwise-chain fusion: a connected group of float32 elementwise nodes
 * whose intermediates have no other user becomes one ELTWISE_FUSED node, a
 * register program (base/kiln_fused_program.h) that reads the
 * group's inputs once and writes its result once.
 *
 * Members: the float unary ops (NEG..COS, ACOS..SIGN), the float binary ops
 * ADD..MINIMUM and ATAN2..DIV_FLOOR, FMA_SCALAR (two immediates, a MUL and an
 * ADD), WHERE whose condition is a float comparison (EQ..GE) made for it
 * (clamp's lowering), and transformers' rotate_half, cat(-x[..., h:], x[..., :h]) along
 * the last dim (two slices, a NEG and a CAT, each used once), which becomes
 * one rotated load of x, a half of x's last dim (a slice x[..., :h] or
 * x[..., h:] of a known even 2h, what kiln_pass_fuse_glu makes of two
 * GEMMs sharing an input), which becomes one load of that half in place,
 * and (with rounds set) a float32 -> bf16 -> float32
 * CAST pair whose bf16 value is read once, which becomes one ROUND_BF16 of
 * its float32 source (the pairs kiln_pass_casts leaves: autocast's rounding
 * of an op's result, read back in float32 by the next op). Elementwise ops commute with broadcasting, so a
 * group is evaluated at its last node's shape with every input broadcast to
 * it, whatever the shapes of the intermediates.
 *
 * Groups grow from their last node (nodes are visited last to first)
 * towards the producers of its operands, taking a producer only when every
 * reader of its value is in the group and it is not a graph output. A group needs at least two nodes; one that would
 * exceed 8 inputs, 46 program slots or 16 registers stops growing there (or
 * is left unfused). The pass runs after the GEMM, conv and attention
 * fusions, so it only sees what their epilogues did not take. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "base/kiln_fused_program.h"
#include "ir/kiln_sym.h"

enum { KILN_FUSE_MAX_MEMBERS = 24 };

/* A program's opcode for each op it can apply keeps the value .kiln files
 * hold, 8 + the op's number. */
#define KILN_FE_SAME_NUMBER(name, arity, code) \
  _Static_assert((code) == 8 + KILN_OP_##name, "fused opcode of " #name " (.kiln format)");
KILN_FUSED_OP_LIST(KILN_FE_SAME_NUMBER)
#undef KILN_FE_SAME_NUMBER

/* The opcode of an op a program can apply, with its arity; 0 for others. */
static uint32_t kiln_fe_opcode(kiln_op_t op, int* arity) {
  switch (op) {
#define KILN_FE_OPCODE_CASE(name, n, code) \
  case KILN_OP_##name:                     \
    *arity = n;                            \
    return KILN_FUSED_##name;
    KILN_FUSED_OP_LIST(KILN_FE_OPCODE_CASE)
#undef KILN_FE_OPCODE_CASE
    default:
      return 0;
  }
}

typedef struct {
  const kiln_graph_t* g;
  int32_t* uses;
  int32_t* rot_src; /* per node: a CAT that is rotate_half(x): x, else -1 */
  int32_t* rnd_src; /* per node: the outer CAST of a rounding pair: its float32 source, else -1 */
  int32_t* half_src; /* per node: a STRIDED_COPY taking a half of x's last dim: x, else -1 */
  char* half_hi;     /* per node with half_src: 1 for the second half */
  int32_t* group;   /* per node: the group's root node, or -1 */
} kiln_fe_t;

static int kiln_fe_f32(const kiln_graph_t* g, int32_t v) {
  return v >= 0 && g->values[v].dtype == KILN_F32;
}

static int32_t kiln_fe_producer(const kiln_graph_t* g, int32_t v) {
  return v >= 0 && g->values[v].kind == KILN_VALUE_INTERMEDIATE ? g->values[v].producer : -1;
}

/* A STRIDED_COPY of x taking [..., off : off + h] of x's last dim (2h). */
static int kiln_fe_is_half(const kiln_graph_t* g, int32_t ni, int32_t x, int64_t off) {
  const kiln_node_t* n = &g->nodes[ni];
  const kiln_value_t* xv = &g->values[x];
  if (n->op != KILN_OP_STRIDED_COPY || n->inputs[0] != x || n->params[KILN_P(VIEW, RANK)] != xv->rank) return 0;
  const int64_t *dims = n->params + KILN_P(VIEW, DIMS), *strides = n->params + KILN_P(VIEW, STRIDES);
  int32_t r = xv->rank;
  if (r < 1 || kiln_dim_is_sym(xv->shape[r - 1])) return 0;
  int64_t stride = 1;
  for (int32_t d = r - 1; d >= 0; --d) {
    int64_t want = d == r - 1 ? xv->shape[d] / 2 : xv->shape[d];
    if (dims[d] != want) return 0;
    if (dims[d] != 1 && strides[d] != stride) return 0;
    stride = kiln_graph_dim_mul(g, stride, xv->shape[d]);
  }
  return n->params[KILN_P(VIEW, OFFSET)] == off;
}

/* rotate_half: CAT(NEG(slice_hi(x)), slice_lo(x)) along the last dim, each
 * piece used once. Returns x or -1. */
static int32_t kiln_fe_match_rotate(const kiln_fe_t* f, int32_t ni) {
  const kiln_graph_t* g = f->g;
  const kiln_node_t* n = &g->nodes[ni];
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (n->op != KILN_OP_CAT || n->n_inputs != 2 || y->dtype != KILN_F32 || y->rank < 1 ||
      n->params[KILN_P(AXIS, AXIS)] != y->rank - 1 || kiln_dim_is_sym(y->shape[y->rank - 1]) ||
      y->shape[y->rank - 1] % 2)
    return -1;
  int32_t neg = kiln_fe_producer(g, n->inputs[0]), lo = kiln_fe_producer(g, n->inputs[1]);
  if (neg < 0 || lo < 0 || f->uses[n->inputs[0]] != 1 || f->uses[n->inputs[1]] != 1 ||
      g->nodes[neg].op != KILN_OP_NEG)
    return -1;
  int32_t hi = kiln_fe_producer(g, g->nodes[neg].inputs[0]);
  if (hi < 0 || f->uses[g->nodes[neg].inputs[0]] != 1) return -1;
  int32_t x = g->nodes[lo].inputs[0];
  if (!kiln_fe_f32(g, x) || !kiln_value_same_type(&g->values[x], y)) return -1;
  int64_t h = y->shape[y->rank - 1] / 2;
  if (!kiln_fe_is_half(g, lo, x, 0) || !kiln_fe_is_half(g, hi, x, h)) return -1;
  return x;
}

/* A STRIDED_COPY taking the first or second half of a float32 x's last dim
 * (a known even size): returns x (*hi 1 for the second half), or -1. */
static int32_t kiln_fe_match_half(const kiln_fe_t* f, int32_t ni, char* hi) {
  const kiln_graph_t* g = f->g;
  const kiln_node_t* n = &g->nodes[ni];
  if (n->op != KILN_OP_STRIDED_COPY || !kiln_fe_f32(g, n->inputs[0]) || !kiln_fe_f32(g, n->outputs[0]))
    return -1;
  int32_t x = n->inputs[0];
  const kiln_value_t* xv = &g->values[x];
  if (xv->rank < 1 || kiln_dim_is_sym(xv->shape[xv->rank - 1]) || xv->shape[xv->rank - 1] < 2 ||
      xv->shape[xv->rank - 1] % 2)
    return -1;
  int64_t h = xv->shape[xv->rank - 1] / 2;
  *hi = (char)kiln_fe_is_half(g, ni, x, h);
  return *hi || kiln_fe_is_half(g, ni, x, 0) ? x : -1;
}

/* A CAST to float32 of a CAST of a float32 x to bf16 read only by it:
 * returns x, or -1. */
static int32_t kiln_fe_match_round(const kiln_fe_t* f, int32_t ni) {
  const kiln_graph_t* g = f->g;
  const kiln_node_t* n = &g->nodes[ni];
  if (n->op != KILN_OP_CAST || !kiln_fe_f32(g, n->outputs[0]) ||
      g->values[n->inputs[0]].dtype != KILN_BF16 || f->uses[n->inputs[0]] != 1)
    return -1;
  int32_t p = kiln_fe_producer(g, n->inputs[0]);
  if (p < 0 || g->nodes[p].op != KILN_OP_CAST || !kiln_fe_f32(g, g->nodes[p].inputs[0])) return -1;
  return g->nodes[p].inputs[0];
}

/* 1 when node ni can be a member; *n_ops its operand values. */
static int kiln_fe_member(const kiln_fe_t* f, int32_t ni, int32_t* ops, int* n_ops) {
  const kiln_graph_t* g = f->g;
  const kiln_node_t* n = &g->nodes[ni];
  if (f->rnd_src[ni] >= 0) {
    ops[0] = f->rnd_src[ni];
    *n_ops = 1;
    return 1;
  }
  if (f->rot_src[ni] >= 0 || f->half_src[ni] >= 0) {
    ops[0] = f->rot_src[ni] >= 0 ? f->rot_src[ni] : f->half_src[ni];
    *n_ops = 1;
    return 1;
  }
  int arity = 0, compare = n->op >= KILN_OP_EQ && n->op <= KILN_OP_GE;
  if (n->op == KILN_OP_WHERE) {
    /* Only with a float comparison made for it as the condition: a bool
     * tensor from elsewhere has no float register form. */
    int32_t c = kiln_fe_producer(g, n->inputs[0]);
    if (n->n_inputs != 3 || c < 0 || f->uses[n->inputs[0]] != 1 || !kiln_fe_f32(g, n->outputs[0]) ||
        g->nodes[c].op < KILN_OP_EQ || g->nodes[c].op > KILN_OP_GE ||
        !kiln_fe_f32(g, g->nodes[c].inputs[0]) || !kiln_fe_f32(g, n->inputs[1]) ||
        !kiln_fe_f32(g, n->inputs[2]))
      return 0;
    memcpy(ops, n->inputs, 3 * sizeof(int32_t));
    *n_ops = 3;
    return 1;
  }
  if (n->op == KILN_OP_FMA_SCALAR) arity = 1;
  else if (!kiln_fe_opcode(n->op, &arity)) return 0;
  /* A comparison gives bool: a member only inside a group (its WHERE). */
  if (n->n_inputs != arity ||
      (compare ? g->values[n->outputs[0]].dtype != KILN_BOOL : !kiln_fe_f32(g, n->outputs[0])))
    return 0;
  for (int i = 0; i < arity; ++i) {
    if (!kiln_fe_f32(g, n->inputs[i])) return 0;
    ops[i] = n->inputs[i];
  }
  *n_ops = arity;
  return 1;
}

/* A fused group, built at its root. */
typedef struct {
  int64_t params[KILN_MAX_PARAMS];
  int32_t ins[KILN_FUSED_MAX_INPUTS];
  int32_t n_ins;
  char origin[768];
} kiln_fe_group_t;

/* ---- code generation ---- */

typedef struct {
  uint32_t code[KILN_FUSED_MAX_SLOTS];
  int32_t n_code;
  int32_t ins[KILN_FUSED_MAX_INPUTS];
  int32_t n_ins;
  uint32_t free_regs;
  int failed;
} kiln_fe_prog_t;

static void kiln_fe_emit(kiln_fe_prog_t* p, uint32_t w) {
  if (p->n_code >= KILN_FUSED_MAX_SLOTS) {
    p->failed = 1;
    return;
  }
  p->code[p->n_code++] = w;
}

static uint32_t kiln_fe_alloc(kiln_fe_prog_t* p) {
  for (uint32_t r = 0; r < KILN_FUSED_MAX_REGS; ++r)
    if (p->free_regs >> r & 1u) {
      p->free_regs &= ~(1u << r);
      return r;
    }
  p->failed = 1;
  return 0;
}

static int32_t kiln_fe_input(kiln_fe_prog_t* p, int32_t v) {
  for (int32_t i = 0; i < p->n_ins; ++i)
    if (p->ins[i] == v) return i;
  if (p->n_ins >= KILN_FUSED_MAX_INPUTS) {
    p->failed = 1;
    return 0;
  }
  p->ins[p->n_ins] = v;
  return p->n_ins++;
}

static void kiln_fe_imm(kiln_fe_prog_t* p, uint32_t dst, float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_IMM, dst, 0, 0));
  kiln_fe_emit(p, bits);
}

/* Compiles the members (node indices, ascending) into p. reg[v] holds the
 * register of each value computed or loaded so far (-1 none); left[v] the
 * uses still to come inside the group, so a register is freed after its
 * last read. Both are n_values long and restored to -1 / 0 after. */
static void kiln_fe_compile(const kiln_fe_t* f, const int32_t* members, int32_t n_members,
                            int32_t* reg, int32_t* left, kiln_fe_prog_t* p) {
  const kiln_graph_t* g = f->g;
  memset(p, 0, sizeof(*p));
  p->free_regs = (1u << KILN_FUSED_MAX_REGS) - 1u;
  int32_t ops[3];
  int n_ops;
  for (int32_t m = 0; m < n_members; ++m) {
    (void)kiln_fe_member(f, members[m], ops, &n_ops);
    if (f->rot_src[members[m]] >= 0 || f->half_src[members[m]] >= 0) continue; /* its load is not shared */
    for (int i = 0; i < n_ops; ++i) left[ops[i]]++;
  }
  for (int32_t m = 0; m < n_members && !p->failed; ++m) {
    const kiln_node_t* n = &g->nodes[members[m]];
    (void)kiln_fe_member(f, members[m], ops, &n_ops);
    int32_t out = n->outputs[0];
    if (f->rot_src[members[m]] >= 0) {
      uint32_t r = kiln_fe_alloc(p);
      int32_t i = kiln_fe_input(p, ops[0]);
      kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_LOAD_ROTATE_HALF, r, (uint32_t)i, 0));
      reg[out] = (int32_t)r;
      continue;
    }
    if (f->half_src[members[m]] >= 0) {
      uint32_t r = kiln_fe_alloc(p);
      int32_t i = kiln_fe_input(p, ops[0]);
      kiln_fe_emit(p, kiln_fused_word(f->half_hi[members[m]] ? KILN_FUSED_LOAD_HIGH_HALF
                                                               : KILN_FUSED_LOAD_LOW_HALF,
                                      r, (uint32_t)i, 0));
      reg[out] = (int32_t)r;
      continue;
    }
    uint32_t src[3] = {0, 0, 0};
    for (int i = 0; i < n_ops; ++i) {
      if (reg[ops[i]] < 0) { /* an external input: load it on first use */
        if (!kiln_fe_f32(g, ops[i])) p->failed = 1; /* a bool condition from outside */
        uint32_t r = kiln_fe_alloc(p);
        int32_t in = kiln_fe_input(p, ops[i]);
        kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_LOAD, r, (uint32_t)in, 0));
        reg[ops[i]] = (int32_t)r;
      }
      src[i] = (uint32_t)reg[ops[i]];
    }
    /* Release operands read for the last time (dst may reuse one: the
     * kernel handles dst == a source). */
    for (int i = 0; i < n_ops; ++i)
      if (--left[ops[i]] == 0 && reg[ops[i]] >= 0) {
        p->free_regs |= 1u << (uint32_t)reg[ops[i]];
        reg[ops[i]] = -1;
      }
    if (n->op == KILN_OP_WHERE) {
      /* SELECT overwrites the condition's register: it must be dead now. */
      if (p->free_regs >> src[0] & 1u) {
        p->free_regs &= ~(1u << src[0]);
        kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_SELECT, src[0], src[1], src[2]));
        reg[out] = (int32_t)src[0];
      } else {
        p->failed = 1;
      }
      continue;
    }
    uint32_t dst = kiln_fe_alloc(p);
    if (n->op == KILN_OP_FMA_SCALAR) {
      /* dst = x * scale + shift: the src register may be dst itself. */
      uint32_t t = kiln_fe_alloc(p);
      kiln_fe_imm(p, t, n->fparams[KILN_FP(FMA, SCALE)]);
      kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_MUL, dst, src[0], t));
      kiln_fe_imm(p, t, n->fparams[KILN_FP(FMA, SHIFT)]);
      kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_ADD, dst, dst, t));
      p->free_regs |= 1u << t;
    } else if (f->rnd_src[members[m]] >= 0) {
      kiln_fe_emit(p, kiln_fused_word(KILN_FUSED_ROUND_BF16, dst, src[0], 0));
    } else {
      int arity;
      kiln_fe_emit(p, kiln_fused_word(kiln_fe_opcode(n->op, &arity), dst, src[0],
                                      n_ops == 2 ? src[1] : 0));
    }
    reg[out] = (int32_t)dst;
  }
  /* Restore the scratch maps for the next group. */
  for (int32_t m = 0; m < n_members; ++m) {
    (void)kiln_fe_member(f, members[m], ops, &n_ops);
    reg[g->nodes[members[m]].outputs[0]] = -1;
    for (int i = 0; i < n_ops; ++i) {
      reg[ops[i]] = -1;
      left[ops[i]] = 0;
    }
  }
}

/* The node params of program p: the slot count, then two slots per param
 * (base/kiln_fused_program.h). */
static void kiln_fe_params(const kiln_fe_prog_t* p, int64_t* params) {
  memset(params, 0, sizeof(int64_t) * KILN_MAX_PARAMS);
  params[KILN_P(FUSED, N_SLOTS)] = p->n_code;
  int64_t* program = params + KILN_P(FUSED, PROGRAM);
  for (int32_t k = 0; k < p->n_code; ++k)
    program[k / 2] = (int64_t)((uint64_t)program[k / 2] | (uint64_t)p->code[k] << (32 * (k % 2)));
}

/* 1 unless the program loads an input by halves and the fused node would
 * not be valid with the root's type (an input also loaded whole, halves
 * broadcast along the last dim): such a group is left unfused. */
static int kiln_fe_halves_fit(const kiln_fe_t* f, const kiln_fe_prog_t* p, int32_t root) {
  int any = 0;
  for (int32_t k = 0; k < p->n_code; ++k) {
    uint32_t opc = p->code[k] & 255u;
    if (opc == KILN_FUSED_IMM) ++k;
    else any |= opc == KILN_FUSED_LOAD_LOW_HALF || opc == KILN_FUSED_LOAD_HIGH_HALF;
  }
  if (!any) return 1;
  kiln_node_t n;
  memset(&n, 0, sizeof(n));
  n.op = KILN_OP_ELTWISE_FUSED;
  n.n_inputs = p->n_ins;
  n.n_outputs = 1;
  memcpy(n.inputs, p->ins, sizeof(int32_t) * (size_t)p->n_ins);
  n.outputs[0] = f->g->nodes[root].outputs[0];
  kiln_fe_params(p, n.params);
  kiln_value_t out;
  kiln_status_t s = kiln_graph_infer_node(f->g, &n, &out);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  return kiln_value_same_type(&out, &f->g->values[n.outputs[0]]);
}

/* 1 when value v has as many elements as the group's result y: a producer
 * of a smaller value (a broadcast operand: F.normalize's norm of each row,
 * RoPE's cos and sin of each position) stays out of the group, computed
 * once per its own element instead of once per element of y. Even a
 * compare and a select cost that: each op of a program is a pass over its
 * tile (F.normalize, (8, 128, 768): its clamp's compare and select fused
 * into the division 0.14 ms, the division alone 0.045). Symbolic sizes:
 * the same dims. */
static int kiln_fe_full_size(const kiln_graph_t* g, int32_t v, int32_t y) {
  const kiln_value_t *a = &g->values[v], *b = &g->values[y];
  int64_t na = 1, nb = 1;
  int sym = 0;
  for (int32_t d = 0; d < a->rank; ++d) {
    sym |= kiln_dim_is_sym(a->shape[d]);
    na *= kiln_dim_is_sym(a->shape[d]) ? 1 : a->shape[d];
  }
  for (int32_t d = 0; d < b->rank; ++d) {
    sym |= kiln_dim_is_sym(b->shape[d]);
    nb *= kiln_dim_is_sym(b->shape[d]) ? 1 : b->shape[d];
  }
  if (!sym) return na == nb;
  if (a->rank != b->rank) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* "eltwise_fused[aten.mul.Tensor aten.add.Tensor ...] <the last node's origin>" */
static void kiln_fe_origin(const kiln_graph_t* g, const int32_t* members, int32_t n_members,
                           const int32_t* rot_parts, char* buf, size_t size) {
  size_t at = 0;
  int w = snprintf(buf, size, "fused[");
  at = w > 0 ? (size_t)w : 0;
  for (int32_t m = 0; m < n_members; ++m) {
    int32_t part[4] = {members[m], -1, -1, -1};
    if (rot_parts) memcpy(part + 1, rot_parts + 3 * m, 3 * sizeof(int32_t));
    for (int k = 0; k < 4; ++k) {
      if (part[k] < 0) continue;
      const char* o = g->nodes[part[k]].origin;
      const char* name = o ? o : kiln_op_name(g->nodes[part[k]].op);
      size_t len = strcspn(name, " ");
      if (at + len + 8 >= size) break;
      at += (size_t)snprintf(buf + at, size - at, "%s%.*s", at > 6 ? " " : "", (int)len, name);
    }
  }
  const char* root = g->nodes[members[n_members - 1]].origin;
  const char* rest = root ? strchr(root, ' ') : NULL;
  snprintf(buf + at, size - at, "]%s", rest ? rest : "");
}

kiln_status_t kiln_pass_fuse_eltwise(kiln_graph_t* g, int rounds, kiln_graph_t** out_graph,
                                     int32_t* out_fused) {
  *out_graph = NULL;
  *out_fused = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  kiln_fe_t f;
  f.g = g;
  f.uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  f.rot_src = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  f.rnd_src = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  f.half_src = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  f.half_hi = malloc((size_t)nn + 1);
  f.group = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  int32_t* reg = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* left = calloc((size_t)nv + 1, sizeof(int32_t));
  int32_t* rot_parts = malloc(sizeof(int32_t) * 3 * (size_t)(nn + 1)); /* hi, neg, lo */
  char* skip = calloc((size_t)nn + 1, 1);
  kiln_fe_group_t* groups = malloc(sizeof(kiln_fe_group_t) * (size_t)(nn + 1));
  int32_t* root_group = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  int32_t n_groups = 0;
  int64_t n_reads = 0;
  for (int32_t ni = 0; ni < nn; ++ni) n_reads += g->nodes[ni].n_inputs;
  int32_t* user_start = malloc(sizeof(int32_t) * (size_t)(nv + 2));
  int32_t* users = malloc(sizeof(int32_t) * (size_t)(n_reads + 1));
  int32_t* fill = calloc((size_t)nv + 1, sizeof(int32_t));
  char* is_output = calloc((size_t)nv + 1, 1);
  kiln_rewriter_t rw;
  memset(&rw, 0, sizeof(rw));
  kiln_status_t s = (!f.uses || !f.rot_src || !f.rnd_src || !f.half_src || !f.half_hi || !f.group || !reg || !left || !rot_parts || !skip ||
                     !groups || !root_group ||
                     !user_start || !users || !fill || !is_output)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "eltwise fusion")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done;
  kiln_graph_count_uses(g, f.uses);
  /* Each value's reader nodes (CSR), and whether it is a graph output. */
  for (int32_t v = 0; v <= nv; ++v) user_start[v] = 0;
  for (int32_t ni = 0; ni < nn; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) user_start[g->nodes[ni].inputs[i] + 1]++;
  for (int32_t v = 0; v < nv; ++v) user_start[v + 1] += user_start[v];
  for (int32_t ni = 0; ni < nn; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i) {
      int32_t v = g->nodes[ni].inputs[i];
      if (v >= 0) users[user_start[v] + fill[v]++] = ni;
    }
  for (int32_t o = 0; o < g->n_outputs; ++o) is_output[g->outputs[o]] = 1;
  for (int32_t v = 0; v < nv; ++v) reg[v] = -1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    f.group[ni] = -1;
    f.rot_src[ni] = -1;
    f.rnd_src[ni] = -1;
    f.half_src[ni] = -1;
    root_group[ni] = -1;
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    f.rnd_src[ni] = rounds ? kiln_fe_match_round(&f, ni) : -1;
    if (f.rnd_src[ni] >= 0) { /* the inner CAST goes with it */
      rot_parts[3 * ni + 0] = g->values[g->nodes[ni].inputs[0]].producer;
      rot_parts[3 * ni + 1] = rot_parts[3 * ni + 2] = -1;
      continue;
    }
    f.rot_src[ni] = kiln_fe_match_rotate(&f, ni);
    if (f.rot_src[ni] < 0) {
      f.half_src[ni] = kiln_fe_match_half(&f, ni, &f.half_hi[ni]);
      continue;
    }
    const kiln_node_t* n = &g->nodes[ni];
    int32_t neg = g->values[n->inputs[0]].producer;
    rot_parts[3 * ni + 0] = g->values[g->nodes[neg].inputs[0]].producer;
    rot_parts[3 * ni + 1] = neg;
    rot_parts[3 * ni + 2] = g->values[n->inputs[1]].producer;
  }

  /* Grow groups from their last node; members[] of the group being built. */
  int32_t members[KILN_FUSE_MAX_MEMBERS], ops[3];
  int n_ops;
  for (int32_t root = nn - 1; root >= 0; --root) {
    if (f.group[root] >= 0 || !kiln_fe_member(&f, root, ops, &n_ops)) continue;
    int32_t n_members = 1, weight = f.rot_src[root] >= 0 ? 4 : f.rnd_src[root] >= 0 ? 2 : 1;
    members[0] = root;
    f.group[root] = root;
    if (!kiln_fe_f32(g, g->nodes[root].outputs[0])) {
      f.group[root] = -1;
      continue;
    }
    /* A pair's inner CAST reads its source for the group: x's producer may join. */
    if (f.rnd_src[root] >= 0) f.group[rot_parts[3 * root]] = root;
    /* Until nothing joins: a value read twice inside the group (clamp's
     * x in lt(x, c) and where(.., c, x)) joins once both readers are in. */
    for (int changed = 1; changed;) {
      changed = 0;
      for (int32_t at = 0; at < n_members; ++at) {
        (void)kiln_fe_member(&f, members[at], ops, &n_ops);
        for (int i = 0; i < n_ops && n_members < KILN_FUSE_MAX_MEMBERS; ++i) {
          int32_t p = kiln_fe_producer(g, ops[i]), pops[3];
          int pn;
          if (p < 0 || f.group[p] >= 0 || is_output[ops[i]] || !kiln_fe_member(&f, p, pops, &pn) ||
              !kiln_fe_full_size(g, ops[i], g->nodes[root].outputs[0]))
            continue;
          int all_in = 1;
          for (int32_t u = user_start[ops[i]]; u < user_start[ops[i] + 1] && all_in; ++u)
            all_in = f.group[users[u]] == root;
          if (!all_in) continue;
          f.group[p] = root;
          if (f.rnd_src[p] >= 0) f.group[rot_parts[3 * p]] = root;
          members[n_members++] = p;
          weight += f.rot_src[p] >= 0 ? 4 : f.rnd_src[p] >= 0 ? 2 : 1;
          changed = 1;
        }
      }
    }
    /* Ascending node order is an order the program can run in. */
    for (int32_t i = 1; i < n_members; ++i)
      for (int32_t j = i; j > 0 && members[j - 1] > members[j]; --j) {
        int32_t t = members[j];
        members[j] = members[j - 1];
        members[j - 1] = t;
      }
    kiln_fe_prog_t prog;
    if (weight >= 2) kiln_fe_compile(&f, members, n_members, reg, left, &prog);
    if (weight >= 2 && !prog.failed) prog.failed = !kiln_fe_halves_fit(&f, &prog, root);
    if (weight < 2 || prog.failed) {
      /* Left as it was; its members may not join another group (they were
       * visited as part of this one), which only costs a missed fusion. */
      for (int32_t m = 0; m < n_members; ++m) f.group[members[m]] = -2;
      continue;
    }
    /* Record the group: the emit walk below builds its node at the root. */
    for (int32_t m = 0; m < n_members; ++m) {
      if (members[m] != root) skip[members[m]] = 1;
      if (f.rot_src[members[m]] >= 0 || f.rnd_src[members[m]] >= 0)
        for (int k = 0; k < 3; ++k)
          if (rot_parts[3 * members[m] + k] >= 0) skip[rot_parts[3 * members[m] + k]] = 1;
    }
    kiln_fe_group_t* gr = &groups[n_groups];
    root_group[root] = n_groups++;
    kiln_fe_params(&prog, gr->params);
    memcpy(gr->ins, prog.ins, sizeof(prog.ins));
    gr->n_ins = prog.n_ins;
    int32_t mparts[3 * KILN_FUSE_MAX_MEMBERS];
    for (int32_t m = 0; m < n_members; ++m)
      for (int k = 0; k < 3; ++k)
        mparts[3 * m + k] = f.rot_src[members[m]] >= 0 || f.rnd_src[members[m]] >= 0
                                ? rot_parts[3 * members[m] + k]
                                : -1;
    kiln_fe_origin(g, members, n_members, mparts, gr->origin, sizeof gr->origin);
    ++*out_fused;
  }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (skip[ni]) continue;
    if (root_group[ni] < 0) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    const kiln_fe_group_t* gr = &groups[root_group[ni]];
    int32_t ins[KILN_FUSED_MAX_INPUTS];
    for (int32_t i = 0; i < gr->n_ins && !s; ++i) s = kiln_rewriter_value(&rw, gr->ins[i], &ins[i]);
    if (!s)
      s = kiln_graph_add_node(rw.dst, KILN_OP_ELTWISE_FUSED, ins, gr->n_ins, gr->params,
                              KILN_MAX_PARAMS, NULL, 0, gr->origin, &rw.remap[n->outputs[0]]);
    if (!s && !kiln_value_same_type(&rw.dst->values[rw.remap[n->outputs[0]]],
                                    &g->values[n->outputs[0]]))
      s = kiln_status_make(KILN_INTERNAL, "eltwise fusion changed the shape of %s",
                           n->origin ? n->origin : kiln_op_name(n->op));
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  kiln_rewriter_deinitialize(&rw);
  free(groups);
  free(root_group);
  free(user_start);
  free(users);
  free(fill);
  free(is_output);
  free(f.uses);
  free(f.rot_src);
  free(f.rnd_src);
  free(f.half_src);
  free(f.half_hi);
  free(f.group);
  free(reg);
  free(left);
  free(rot_parts);
  free(skip);
  return s;
}
