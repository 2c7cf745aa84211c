/* The machinery of named node parameters: from the parameter layouts the
 * op records name (kiln_ops.h: KILN_PARAMS_<L> lists of P(NAME, count)
 * fields, packed in order from index 0), KILN_P(L, NAME) is field NAME's
 * index in layout L (n->params[KILN_P(CONV2D, GROUPS)]), KILN_FP(L, NAME) a
 * float field's, KILN_P_COUNT(L) the layout's length. Included by
 * kiln_ops.h after the layouts; nothing else includes it.
 */
#ifndef KILN_OP_PARAMS_H
#define KILN_OP_PARAMS_H

#include <stddef.h>

/* The index constants: a struct per layout whose char arrays stand for the
 * fields, so offsetof gives each field's index and the end its count. */
#define KILN_PARAM_FIELD(name, count) char f_##name[count];
#define KILN_PARAM_STRUCT(L)                                  \
  struct kiln_param_layout_##L##_s {                          \
    KILN_PARAMS_##L(KILN_PARAM_FIELD) char f_END_[1];          \
  };
#define KILN_FPARAM_STRUCT(L)                                  \
  struct kiln_fparam_layout_##L##_s {                          \
    KILN_FPARAMS_##L(KILN_PARAM_FIELD) char f_END_[1];          \
  };
KILN_PARAM_LAYOUTS(KILN_PARAM_STRUCT)
KILN_FPARAM_LAYOUTS(KILN_FPARAM_STRUCT)
#undef KILN_PARAM_STRUCT
#undef KILN_FPARAM_STRUCT

#define KILN_P(L, name) ((int)offsetof(struct kiln_param_layout_##L##_s, f_##name))
#define KILN_FP(L, name) ((int)offsetof(struct kiln_fparam_layout_##L##_s, f_##name))
#define KILN_P_COUNT(L) KILN_P(L, END_)
#define KILN_FP_COUNT(L) KILN_FP(L, END_)

#endif /* KILN_OP_PARAMS_H */
