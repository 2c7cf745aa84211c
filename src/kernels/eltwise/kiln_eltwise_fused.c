/* The ELTWISE_FUSED kernel: a register program (kiln_eltwise_fused.h) run
 * over tiles of KILN_FUSED_TILE output elements. Each instruction calls the
 * existing vectorised kernels on one tile (kiln_unary_f32, kiln_math_unary_f32,
 * kiln_binary, kiln_math_binary, without a pool: the tile is the unit of
 * threading here), so the chain costs one pass over memory and every
 * intermediate stays in a stack buffer of 2 KiB.
 *
 * Registers are either a tile (`n` floats) or a scalar (one float, read with
 * stride 0): IMM and loads of a single-element input stay scalars until an
 * op combines them with a tile, so `x * 0.5` never fills a tile with 0.5.
 * A load of an input whose strides are the output's dense strides points at
 * the input itself (no copy); other loads gather row by row.
 */
#include "kernels/eltwise/kiln_eltwise_fused.h"

#include <math.h>
#include <string.h>

#include "base/kiln_bf16.h"
#include "kernels/eltwise/kiln_cast_bf16_variants.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_fused_rows_variants.h"
#include "kernels/math/kiln_math.h"
#include "kernels/nn/kiln_nn.h"

/* 1024 floats: 4 KiB per register (68 KiB of stack for the 16 and a
 * scratch tile); real chains keep three or four live, in L1. Each step of a
 * program is a kernel call with its own set-up per tile: at 512 floats
 * that set-up was most of a short-op program's time (hardswish over
 * (8, 128, 768): 0.26 ms at 512, 0.18 at 1024 and 2048; Zen 5, 2 threads). */
enum { KILN_FUSED_TILE = 1024, KILN_FUSED_MIN_PARALLEL = 16384 };

/* Each run of consecutive opcodes maps onto a kernel enum by subtraction. */
_Static_assert(KILN_FUSED_MINIMUM - KILN_FUSED_ADD == KILN_BINARY_MINIMUM - KILN_BINARY_ADD &&
                   KILN_FUSED_GE - KILN_FUSED_ADD == KILN_BINARY_GE - KILN_BINARY_ADD,
               "ADD..GE in kiln_binary_t order");
_Static_assert(KILN_FUSED_COS - KILN_FUSED_NEG == KILN_UNARY_COS - KILN_UNARY_NEG &&
                   KILN_UNARY_NEG == 0,
               "NEG..COS in kiln_unary_t order");
_Static_assert(KILN_FUSED_SIGN - KILN_FUSED_ACOS == KILN_MATH_SIGN - KILN_MATH_ACOS &&
                   KILN_MATH_ACOS == 0,
               "ACOS..SIGN in kiln_math_unary_t order");
_Static_assert(KILN_FUSED_FMOD - KILN_FUSED_ATAN2 == KILN_MATH_FMOD - KILN_MATH_ATAN2 &&
                   KILN_FUSED_DIV_FLOOR - KILN_FUSED_ATAN2 == KILN_MATH_DIV_FLOOR - KILN_MATH_ATAN2 &&
                   KILN_MATH_ATAN2 == 0,
               "ATAN2..DIV_FLOOR in kiln_math_binary_t order");

/* ---- the tiled kernel ---- */

typedef struct {
  const kiln_eltwise_fused_args_t* a;
  int64_t numel, last;       /* output elements; the last dim's length */
  int32_t dense[KILN_FUSED_MAX_INPUTS];  /* input's strides are the output's dense ones */
  int32_t scalar[KILN_FUSED_MAX_INPUTS]; /* input is read with stride 0 everywhere */
  /* Input is constant along each row (stride 0 in the last dim only): with
   * row_tiles, a tile never crosses a row, and such a load is a scalar. */
  int32_t row_scalar[KILN_FUSED_MAX_INPUTS];
  int row_tiles;
  int64_t per_task;
  /* The running ISA's loops (kiln_fused_rows.c), looked up once a call. */
  kiln_fused_arith_rows_fn arith;
  kiln_fused_compare_rows_fn compare;
  kiln_fused_select_rows_fn select;
  kiln_fused_compare_select_rows_fn compare_select;
} kiln_fused_ctx_t;

/* Input i's element offset at the start of output row `row`. */
static int64_t kiln_fused_row_base(const kiln_eltwise_fused_args_t* a, int i, int64_t row) {
  int64_t base = 0;
  for (int32_t d = a->rank - 2; d >= 0; --d) {
    int64_t len = a->shape[d];
    base += (row % len) * a->strides[i][d];
    row /= len;
  }
  return base;
}

/* Where a load of input i reads from: the input, or for LOAD_HIGH_HALF its
 * rows' second halves (the output's last dim on, in the input's stride). */
static const float* kiln_fused_load_base(const kiln_eltwise_fused_args_t* a, uint32_t opc,
                                         uint32_t i) {
  if (opc != KILN_FUSED_LOAD_HIGH_HALF || a->rank < 1) return a->inputs[i];
  return a->inputs[i] + a->shape[a->rank - 1] * a->strides[i][a->rank - 1];
}

/* Gathers input i (its elements from x on) over output elements [s, s + n)
 * into buf: the first row's offset by division, then an odometer over the
 * outer dims (a division per dim per row cost more than a short row's
 * copy: a batch norm over NCHW rows of 56 ran at a fifth of eager). */
static void kiln_fused_gather(const kiln_fused_ctx_t* c, int i, const float* x, int rotate,
                              int64_t s, int64_t n, float* buf) {
  const kiln_eltwise_fused_args_t* a = c->a;
  const int64_t* st = a->strides[i];
  int64_t last = c->last, sl = a->rank ? st[a->rank - 1] : 0, h = last / 2;
  int64_t col = s % last, rem = s / last, base = 0;
  int64_t idx[KILN_FUSED_MAX_RANK] = {0};
  for (int32_t d = a->rank - 2; d >= 0; --d) {
    idx[d] = rem % a->shape[d];
    rem /= a->shape[d];
    base += idx[d] * st[d];
  }
  for (int64_t k = 0; k < n;) {
    int64_t cnt = last - col < n - k ? last - col : n - k;
    const float* xr = x + base;
    float* o = buf + k;
    if (rotate) {
      for (int64_t j = 0; j < cnt; ++j) {
        int64_t cc = col + j;
        o[j] = cc < h ? -xr[(cc + h) * sl] : xr[(cc - h) * sl];
      }
    } else if (sl == 1) {
      memcpy(o, xr + col, (size_t)cnt * sizeof(float));
    } else if (sl == 0) { /* broadcast along the last dim (a per-row mean or rstd): a fill */
      float v = xr[0];
      for (int64_t j = 0; j < cnt; ++j) o[j] = v;
    } else {
      for (int64_t j = 0; j < cnt; ++j) o[j] = xr[(col + j) * sl];
    }
    k += cnt;
    col = 0;
    for (int32_t d = a->rank - 2; d >= 0; --d) {
      base += st[d];
      if (++idx[d] < a->shape[d]) break;
      base -= a->shape[d] * st[d];
      idx[d] = 0;
    }
  }
}

/* Binary ops: comparisons give 1.0 / 0.0 floats inside a program (a
 * WHERE reads them); arithmetic and comparisons run the ISA's loops of
 * kiln_fused_rows.c directly (through kiln_binary's n-d set-up a 1024-float
 * op cost several times its work); pow and the math family (atan2, fmod,
 * ...) go through their kernels. */
static void kiln_fused_binary(const kiln_fused_ctx_t* c, uint32_t op, int64_t n, float* out,
                              const float* x, int sx, const float* y, int sy) {
  if (op >= KILN_FUSED_EQ && op <= KILN_FUSED_GE) {
    c->compare(op, n, out, x, !sx, y, !sy);
    return;
  }
  if (op <= KILN_FUSED_MINIMUM && op != KILN_FUSED_POW) {
    c->arith(op, n, out, x, !sx, y, !sy);
    return;
  }
  kiln_nd_t nd;
  memset(&nd, 0, sizeof(nd));
  nd.rank = 1;
  nd.shape[0] = n;
  nd.strides[0][0] = 1;
  nd.strides[1][0] = sx;
  nd.strides[2][0] = sy;
  if (op <= KILN_FUSED_MINIMUM)
    kiln_binary((kiln_binary_t)(op - KILN_FUSED_ADD), KILN_F32, &nd, out, x, y, NULL);
  else
    (void)kiln_math_binary((kiln_math_binary_t)(op - KILN_FUSED_ATAN2), KILN_F32, &nd, out, x, y,
                           NULL);
}

/* y = x rounded to bf16 and widened: the CAST kernel's rule (nearest even,
 * a NaN made quiet), kept in float32. The scalar form is the reference
 * (kiln_fused_ref's); tiles run kiln_round_bf16_f32, the running ISA's
 * variant of the same integer arithmetic (kiln_cast_bf16.c). */
static void kiln_fused_round_bf16(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = kiln_bf16_round_f32(x[i]);
}

static void kiln_fused_unary(uint32_t op, int64_t n, const float* x, float* y) {
  if (op == KILN_FUSED_ROUND_BF16)
    kiln_round_bf16_f32((size_t)n, x, y);
  else if (op <= KILN_FUSED_COS)
    kiln_unary_f32((kiln_unary_t)(op - KILN_FUSED_NEG), (size_t)n, x, y, NULL);
  else
    kiln_math_unary_f32((kiln_math_unary_t)(op - KILN_FUSED_ACOS), (size_t)n, x, y, NULL);
}

/* A compare into register r followed by the SELECT that takes r as its
 * condition (and neither arm is r): one pass, (x op y) ? p : q, into r
 * (or the output when the select is the program's last step). The
 * compare's result is gone after the select (the select overwrites r), so
 * nothing else reads it. x must be a tile: a scalar x against a tile y
 * swaps them, the op mirrored; all-scalar pairs stay two steps. Returns 1
 * when it ran. */
static int kiln_fused_compare_select(const kiln_fused_ctx_t* c, int64_t n, uint32_t next,
                                     uint32_t dst, uint32_t op, uint32_t ra, uint32_t rb,
                                     int last, float* out, float** buf, const float** val,
                                     int* scal, float** scratch) {
  const uint32_t sa = next >> 16 & 255u, sb = next >> 24 & 255u;
  if ((next & 255u) != KILN_FUSED_SELECT || (next >> 8 & 255u) != dst || sa == dst || sb == dst)
    return 0;
  if (scal[ra]) {
    if (scal[rb]) return 0;
    static const uint8_t mirror[] = {KILN_FUSED_EQ, KILN_FUSED_NE, KILN_FUSED_GT,
                                     KILN_FUSED_GE, KILN_FUSED_LT, KILN_FUSED_LE};
    op = mirror[op - KILN_FUSED_EQ];
    uint32_t t = ra;
    ra = rb, rb = t;
  }
  float* target = last ? out : buf[dst];
  const float* b = buf[dst];
  const int aliased =
      target == b && (val[ra] == b || val[rb] == b || val[sa] == b || val[sb] == b);
  if (aliased) target = *scratch;
  c->compare_select(op, n, target, val[ra], val[rb], scal[rb], val[sa], scal[sa],
                    val[sb], scal[sb]);
  if (aliased) {
    *scratch = buf[dst];
    buf[dst] = target;
  }
  if (!last) {
    val[dst] = buf[dst];
    scal[dst] = 0;
  }
  return 1;
}

/* Runs the program over output elements [s, s + n), n <= KILN_FUSED_TILE. */
static void kiln_fused_tile(const kiln_fused_ctx_t* c, int64_t s, int64_t n) {
  const kiln_eltwise_fused_args_t* a = c->a;
  float storage[KILN_FUSED_MAX_REGS + 1][KILN_FUSED_TILE];
  float imm[KILN_FUSED_MAX_REGS];
  float* buf[KILN_FUSED_MAX_REGS];
  float* scratch = storage[KILN_FUSED_MAX_REGS];
  const float* val[KILN_FUSED_MAX_REGS];
  int scal[KILN_FUSED_MAX_REGS];
  for (int r = 0; r < KILN_FUSED_MAX_REGS; ++r) {
    buf[r] = storage[r];
    val[r] = buf[r];
    scal[r] = 0;
  }
  float* out = a->out + s;
  int32_t result = 0;
  for (int32_t k = 0; k < a->n_code; ++k) {
    uint32_t w = a->code[k], opc = w & 255u, dst = w >> 8 & 255u, ra = w >> 16 & 255u,
             rb = w >> 24 & 255u;
    result = (int32_t)dst;
    int is_last = k == a->n_code - 1;
    if (kiln_fused_is_load(opc)) {
      /* A half is read like a whole input (its strides are the input's),
       * from the row's first or second half. */
      int rot = opc == KILN_FUSED_LOAD_ROTATE_HALF;
      const float* x = kiln_fused_load_base(a, opc, ra);
      if (!rot && c->scalar[ra]) {
        val[dst] = x;
        scal[dst] = 1;
      } else if (!rot && c->row_tiles && c->row_scalar[ra]) {
        val[dst] = x + kiln_fused_row_base(a, (int)ra, s / c->last);
        scal[dst] = 1;
      } else if (!rot && c->dense[ra]) {
        val[dst] = x + s;
        scal[dst] = 0;
      } else {
        kiln_fused_gather(c, (int)ra, x, rot, s, n, buf[dst]);
        val[dst] = buf[dst];
        scal[dst] = 0;
      }
      continue;
    }
    if (opc == KILN_FUSED_IMM) {
      uint32_t bits = a->code[++k];
      memcpy(&imm[dst], &bits, sizeof(float));
      val[dst] = &imm[dst];
      scal[dst] = 1;
      continue;
    }
    if (opc >= KILN_FUSED_EQ && opc <= KILN_FUSED_GE && k + 1 < a->n_code &&
        kiln_fused_compare_select(c, n, a->code[k + 1], dst, opc, ra, rb,
                                  k + 1 == a->n_code - 1, out, buf, val, scal, &scratch)) {
      ++k; /* the select ran too */
      if (k == a->n_code - 1) return;
      continue;
    }
    /* SELECT reads its condition from dst, then the arms ra and rb. */
    const int sel = opc == KILN_FUSED_SELECT;
    const int arity = sel ? 3 : kiln_fused_op_arity(opc);
    const int scalar_out =
        scal[ra] && (arity == 1 || scal[rb]) && (!sel || scal[dst]);
    const int64_t m = scalar_out ? 1 : n;
    /* Write into the register's own buffer, the output on the last step, or
     * the scratch tile when an operand lives in dst's buffer (the loops'
     * output may not alias an operand), which then becomes dst's. */
    float* target = is_last && !scalar_out ? out : buf[dst];
    int aliased = target == buf[dst] && (val[ra] == buf[dst] || (arity >= 2 && val[rb] == buf[dst]) ||
                                         (sel && val[dst] == buf[dst]));
    if (aliased) target = scratch;
    if (sel)
      c->select(m, target, val[dst], scal[dst], val[ra], scal[ra], val[rb], scal[rb]);
    else if (arity == 1)
      kiln_fused_unary(opc, m, val[ra], target);
    else
      kiln_fused_binary(c, opc, m, target, val[ra], !scal[ra] && !scalar_out, val[rb],
                        !scal[rb] && !scalar_out);
    if (aliased) {
      scratch = buf[dst];
      buf[dst] = target;
    }
    if (target == out) return;
    val[dst] = buf[dst];
    scal[dst] = scalar_out;
  }
  /* The result is a load, an IMM or a scalar: copy or fill. */
  if (scal[result]) {
    float v = val[result][0];
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  } else {
    memcpy(out, val[result], (size_t)n * sizeof(float));
  }
}

static void kiln_fused_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_fused_ctx_t* c = ctx;
  int64_t lo = (int64_t)task * c->per_task;
  int64_t hi = lo + c->per_task < c->numel ? lo + c->per_task : c->numel;
  for (int64_t s = lo; s < hi;) {
    int64_t e = hi - s < KILN_FUSED_TILE ? hi : s + KILN_FUSED_TILE;
    if (c->row_tiles) {
      int64_t row_end = (s / c->last + 1) * c->last;
      e = e < row_end ? e : row_end;
    }
    kiln_fused_tile(c, s, e - s);
    s = e;
  }
}

/* Moves the loads and immediates between a compare and the SELECT that
 * reads it (torch's where(x != x, 0, x) loads the 0 in between) to before
 * the compare, so the pair runs as one pass (kiln_fused_compare_select).
 * A load moves only when the compare neither reads nor writes its
 * register; it reads nothing itself. code has n slots (an IMM's bits in
 * the slot after it). */
static void kiln_fused_hoist_loads(uint32_t* code, int32_t n) {
  for (int32_t k = 0; k < n; ++k) {
    uint32_t w = code[k], op = w & 255u;
    if (op == KILN_FUSED_IMM) {
      ++k;
      continue;
    }
    if (op < KILN_FUSED_EQ || op > KILN_FUSED_GE) continue;
    const uint32_t dst = w >> 8 & 255u, ra = w >> 16 & 255u, rb = w >> 24 & 255u;
    int32_t j = k + 1;
    while (j < n) {
      uint32_t o = code[j] & 255u, d = code[j] >> 8 & 255u;
      if (!kiln_fused_is_load(o) && o != KILN_FUSED_IMM) break;
      if (d == dst || d == ra || d == rb) break;
      j += o == KILN_FUSED_IMM ? 2 : 1;
    }
    if (j == k + 1 || j >= n || (code[j] & 255u) != KILN_FUSED_SELECT || (code[j] >> 8 & 255u) != dst)
      continue;
    /* code[k + 1, j) are the loads: rotate the compare past them. */
    for (int32_t i = k; i < j - 1; ++i) code[i] = code[i + 1];
    code[j - 1] = w;
    k = j; /* the select */
  }
}

/* Drops size-1 dims and merges dims every input reads contiguously (the
 * output is dense), so that an NCHW batch norm's per-channel scale reads
 * as rows of H x W, not of W. The last dim stays as it is when the
 * program loads halves of its rows. */
static void kiln_fused_collapse(kiln_eltwise_fused_args_t* m) {
  int halves = 0;
  for (int32_t k = 0; k < m->n_code; ++k) {
    uint32_t opc = m->code[k] & 255u;
    if (opc == KILN_FUSED_IMM) ++k; /* its bits follow in the next slot */
    else if (kiln_fused_is_load(opc) && opc != KILN_FUSED_LOAD) halves = 1;
  }
  const int32_t rank = m->rank;
  int32_t r = 0;
  for (int32_t d = 0; d < rank; ++d) {
    const int keep_last = halves && d == rank - 1;
    if (m->shape[d] == 1 && !keep_last) continue;
    int merge = r > 0 && !keep_last;
    for (int i = 0; merge && i < m->n_inputs; ++i)
      merge = m->strides[i][r - 1] == m->strides[i][d] * m->shape[d];
    if (merge) {
      m->shape[r - 1] *= m->shape[d];
      for (int i = 0; i < m->n_inputs; ++i) m->strides[i][r - 1] = m->strides[i][d];
      continue;
    }
    m->shape[r] = m->shape[d];
    for (int i = 0; i < m->n_inputs; ++i) m->strides[i][r] = m->strides[i][d];
    ++r;
  }
  m->rank = r;
}

void kiln_eltwise_fused_f32(const kiln_eltwise_fused_args_t* args, kiln_pool_t* pool) {
  kiln_eltwise_fused_args_t m = *args;
  kiln_fused_collapse(&m);
  uint32_t code[KILN_FUSED_MAX_SLOTS];
  if (m.n_code > 0 && m.n_code <= KILN_FUSED_MAX_SLOTS) {
    memcpy(code, m.code, (size_t)m.n_code * sizeof(uint32_t));
    kiln_fused_hoist_loads(code, m.n_code);
    m.code = code;
  }
  const kiln_eltwise_fused_args_t* a = &m;
  kiln_fused_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.a = a;
  c.numel = 1;
  for (int32_t d = 0; d < a->rank; ++d) c.numel *= a->shape[d];
  c.last = a->rank ? a->shape[a->rank - 1] : 1;
  if (c.numel == 0) return;
  {
    static const kiln_fused_arith_rows_fn ar[KILN_ISA_COUNT] =
        KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_fused_arith_rows);
    static const kiln_fused_compare_rows_fn cr[KILN_ISA_COUNT] =
        KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_fused_compare_rows);
    static const kiln_fused_select_rows_fn sr[KILN_ISA_COUNT] =
        KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_fused_select_rows);
    kiln_isa_t level =
        kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa());
    static const kiln_fused_compare_select_rows_fn csr[KILN_ISA_COUNT] =
        KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_fused_compare_select_rows);
    c.arith = ar[level], c.compare = cr[level], c.select = sr[level];
    c.compare_select = csr[level];
  }
  for (int i = 0; i < a->n_inputs; ++i) {
    int dense = 1, scalar = 1;
    int64_t want = 1;
    for (int32_t d = a->rank - 1; d >= 0; --d) {
      if (a->shape[d] != 1) {
        if (a->strides[i][d] != want) dense = 0;
        if (a->strides[i][d] != 0) scalar = 0;
      }
      want *= a->shape[d];
    }
    c.dense[i] = dense;
    c.scalar[i] = scalar;
    c.row_scalar[i] = !scalar && a->rank >= 2 && a->strides[i][a->rank - 1] == 0;
    /* Rows of a few hundred floats or more: tiles cut at row ends cost
     * little, and each such input is then a scalar per tile, not a fill. */
    if (c.row_scalar[i] && c.last >= 256) c.row_tiles = 1;
  }
  int threads = kiln_pool_size(pool);
  size_t tasks = 1;
  c.per_task = c.numel;
  if (threads > 1 && c.numel >= KILN_FUSED_MIN_PARALLEL) {
    int64_t want_tasks = (int64_t)threads * 4;
    int64_t tiles = (c.numel + KILN_FUSED_TILE - 1) / KILN_FUSED_TILE;
    if (want_tasks > tiles) want_tasks = tiles;
    int64_t per_tiles = (tiles + want_tasks - 1) / want_tasks;
    c.per_task = per_tiles * KILN_FUSED_TILE;
    tasks = (size_t)((c.numel + c.per_task - 1) / c.per_task);
  }
  kiln_pool_parallel_for(tasks > 1 ? pool : NULL, tasks, kiln_fused_task, &c);
}

/* ---- the scalar reference ---- */

static float kiln_fused_ref_binary(uint32_t op, float x, float y) {
  switch (op) {
    case KILN_FUSED_ADD: return x + y;
    case KILN_FUSED_SUB: return x - y;
    case KILN_FUSED_MUL: return x * y;
    case KILN_FUSED_DIV: return x / y;
    case KILN_FUSED_POW: return powf(x, y);
    case KILN_FUSED_MAXIMUM: return x != x ? x : y != y ? y : x > y ? x : y;
    case KILN_FUSED_MINIMUM: return x != x ? x : y != y ? y : x < y ? x : y;
    case KILN_FUSED_EQ: return x == y ? 1.0f : 0.0f;
    case KILN_FUSED_NE: return x != y ? 1.0f : 0.0f;
    case KILN_FUSED_LT: return x < y ? 1.0f : 0.0f;
    case KILN_FUSED_LE: return x <= y ? 1.0f : 0.0f;
    case KILN_FUSED_GT: return x > y ? 1.0f : 0.0f;
    case KILN_FUSED_GE: return x >= y ? 1.0f : 0.0f;
    default: return kiln_math_binary_f32_reference((kiln_math_binary_t)(op - KILN_FUSED_ATAN2), x, y);
  }
}

void kiln_eltwise_fused_f32_reference(const kiln_eltwise_fused_args_t* a) {
  int64_t numel = 1;
  for (int32_t d = 0; d < a->rank; ++d) numel *= a->shape[d];
  int64_t last = a->rank ? a->shape[a->rank - 1] : 1;
  for (int64_t e = 0; e < numel; ++e) {
    float reg[KILN_FUSED_MAX_REGS] = {0};
    int32_t result = 0;
    for (int32_t k = 0; k < a->n_code; ++k) {
      uint32_t w = a->code[k], opc = w & 255u, dst = w >> 8 & 255u, ra = w >> 16 & 255u,
               rb = w >> 24 & 255u;
      result = (int32_t)dst;
      if (kiln_fused_is_load(opc)) {
        int64_t col = e % last, src = opc == KILN_FUSED_LOAD_HIGH_HALF ? col + last : col;
        float sign = 1.0f;
        if (opc == KILN_FUSED_LOAD_ROTATE_HALF) {
          src = col < last / 2 ? col + last / 2 : col - last / 2;
          sign = col < last / 2 ? -1.0f : 1.0f;
        }
        int64_t off = kiln_fused_row_base(a, (int)ra, e / last);
        if (a->rank) off += src * a->strides[ra][a->rank - 1];
        reg[dst] = sign * a->inputs[ra][off];
      } else if (opc == KILN_FUSED_IMM) {
        uint32_t bits = a->code[++k];
        memcpy(&reg[dst], &bits, sizeof(float));
      } else if (opc == KILN_FUSED_SELECT) {
        reg[dst] = reg[dst] != 0.0f ? reg[ra] : reg[rb];
      } else {
        float x = reg[ra], y;
        if (kiln_fused_op_arity(opc) == 2) {
          reg[dst] = kiln_fused_ref_binary(opc, x, reg[rb]);
        } else if (opc == KILN_FUSED_ROUND_BF16) {
          kiln_fused_round_bf16(1, &x, &reg[dst]);
        } else if (opc <= KILN_FUSED_COS) {
          kiln_unary_f32_reference((kiln_unary_t)(opc - KILN_FUSED_NEG), 1, &x, &y);
          reg[dst] = y;
        } else {
          kiln_math_unary_f32_reference((kiln_math_unary_t)(opc - KILN_FUSED_ACOS), 1, &x, &y);
          reg[dst] = y;
        }
      }
    }
    a->out[e] = reg[result];
  }
}
