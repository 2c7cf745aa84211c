/* Shape rule of ELTWISE_FUSED: every input float32 and present, the output
 * their broadcast shape, and the program (which may come from a hostile
 * file) validated slot by slot by kiln_fused_program_validate before any
 * kernel sees it. A rotate_half load needs an even last dim that is the
 * output's own (never broadcast), so the kernel's column arithmetic stays
 * inside the row. An input loaded by halves broadcasts as its half (its
 * last dim halved, a known even size) and that half is the output's own
 * last dim: the kernel reads each row's half in place. */
#include "ir/kiln_shape_rules.h"

#include <string.h>

#include "base/kiln_fused_program.h"

/* kiln_fused_slot reads the program after the slot count. */
_Static_assert(KILN_P(FUSED, N_SLOTS) == 0 && KILN_P(FUSED, PROGRAM) == 1,
               "the fused program's layout as base/kiln_fused_program.h reads it");

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

kiln_status_t kiln_shape_eltwise_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                       kiln_value_t* out) {
  if (n->n_inputs < 1 || n->n_inputs > KILN_FUSED_MAX_INPUTS) FAIL("eltwise_fused: %d inputs", n->n_inputs);
  int64_t n_code = n->params[KILN_P(FUSED, N_SLOTS)];
  if (n_code < 1 || n_code > KILN_FUSED_MAX_SLOTS)
    FAIL("eltwise_fused: %lld slots, expected 1..%d", (long long)n_code, KILN_FUSED_MAX_SLOTS);
  uint32_t code[KILN_FUSED_MAX_SLOTS];
  for (int32_t k = 0; k < (int32_t)n_code; ++k) code[k] = kiln_fused_slot(n->params, k);
  kiln_fused_loads_t loads;
  KILN_RETURN_IF_ERROR(kiln_fused_program_validate(code, (int32_t)n_code, n->n_inputs, &loads));
  int32_t rank = 0;
  int64_t shape[KILN_MAX_RANK];
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < 0 || n->inputs[i] >= g->n_values) FAIL("eltwise_fused: input %d is absent", i);
    const kiln_value_t* x = &g->values[n->inputs[i]];
    if (x->dtype != KILN_F32) FAIL("eltwise_fused: input %d is %s, not float32", i, kiln_dtype_name(x->dtype));
    if (x->rank < 0 || x->rank > KILN_MAX_RANK) FAIL("eltwise_fused: input %d has rank %d", i, x->rank);
    int halved = loads.halved >> i & 1u;
    if (halved && (x->rank < 1 || kiln_dim_is_sym(x->shape[x->rank - 1]) ||
                   x->shape[x->rank - 1] < 2 || x->shape[x->rank - 1] % 2))
      FAIL("eltwise_fused: input %d is loaded by halves of a last dim that is not a known even size", i);
    /* Trailing-aligned broadcast into (rank, shape). */
    int32_t r = x->rank > rank ? x->rank : rank;
    int64_t next[KILN_MAX_RANK];
    for (int32_t d = 0; d < r; ++d) {
      int32_t da = d - (r - rank), dx = d - (r - x->rank);
      int64_t sa = da >= 0 ? shape[da] : 1, sx = dx >= 0 ? x->shape[dx] : 1;
      if (halved && dx == x->rank - 1) sx /= 2;
      if (sa != sx && sa != 1 && sx != 1)
        FAIL("eltwise_fused: input %d does not broadcast (dimension %d: %lld vs %lld)", i, d,
             (long long)sx, (long long)sa);
      next[d] = sa == 1 ? sx : sa;
    }
    rank = r;
    memcpy(shape, next, sizeof(int64_t) * (size_t)r);
  }
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = &g->values[n->inputs[i]];
    if ((loads.rotated >> i & 1u) &&
        (x->rank < 1 || x->shape[x->rank - 1] != shape[rank - 1] || x->shape[x->rank - 1] % 2))
      FAIL("eltwise_fused: input %d is rotated along a last dim that is odd or broadcast", i);
    if ((loads.halved >> i & 1u) && x->shape[x->rank - 1] / 2 != shape[rank - 1])
      FAIL("eltwise_fused: input %d is loaded by halves that are broadcast along the last dim", i);
  }
  out->dtype = KILN_F32;
  out->rank = rank;
  memset(out->shape, 0, sizeof(out->shape));
  memcpy(out->shape, shape, sizeof(int64_t) * (size_t)rank);
  return kiln_ok();
}
