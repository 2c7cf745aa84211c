/* The op records (kiln_ops.h) as tables: names, arity, family, kernel
 * entry and parameter layouts per op, with the static checks that each
 * table has one row per op and each layout fits a node. */
#include "ir/kiln_ops.h"

#include <stddef.h>

#include "ir/kiln_graph.h"

/* Each layout's fields, by name and count; their indices follow by sum. */
typedef struct {
  const char* name;
  int count;
} kiln_field_t;
#define KILN_FIELD_ROW(name, count) {#name, count},
#define KILN_FIELDS_OF(L) static const kiln_field_t kiln_fields_##L[] = {KILN_PARAMS_##L(KILN_FIELD_ROW){NULL, 0}};
#define KILN_FFIELDS_OF(L) static const kiln_field_t kiln_ffields_##L[] = {KILN_FPARAMS_##L(KILN_FIELD_ROW){NULL, 0}};
KILN_PARAM_LAYOUTS(KILN_FIELDS_OF)
KILN_FPARAM_LAYOUTS(KILN_FFIELDS_OF)
#undef KILN_FIELDS_OF
#undef KILN_FFIELDS_OF
#undef KILN_FIELD_ROW

#define KILN_LAYOUT_FITS(L) \
  _Static_assert(KILN_P_COUNT(L) <= KILN_MAX_PARAMS, "layout " #L " fits a node's params");
#define KILN_FLAYOUT_FITS(L) \
  _Static_assert(KILN_FP_COUNT(L) <= KILN_MAX_FPARAMS, "layout " #L " fits a node's fparams");
KILN_PARAM_LAYOUTS(KILN_LAYOUT_FITS)
KILN_FPARAM_LAYOUTS(KILN_FLAYOUT_FITS)
#undef KILN_LAYOUT_FITS
#undef KILN_FLAYOUT_FITS

static const struct {
  const char* name;
  signed char min_inputs, max_inputs, n_params, n_fparams;
  kiln_op_family_t family;
  kiln_op_entry_t entry;
  const kiln_field_t *params, *fparams;
} kiln_op_table_[] = {
#define KILN_OP_ROW(e, name, lo, hi, family, P, FP, shape, entry)                         \
  {name, lo, hi, KILN_P_COUNT(P), KILN_FP_COUNT(FP), KILN_FAMILY_##family, KILN_ENTRY_##entry, \
   kiln_fields_##P, kiln_ffields_##FP},
    KILN_OP_LIST(KILN_OP_ROW)
#undef KILN_OP_ROW
};
_Static_assert(sizeof(kiln_op_table_) / sizeof(kiln_op_table_[0]) == KILN_OP_COUNT,
               "one row per op");

static const char* const kiln_family_names_[] = {
#define KILN_FAMILY_NAME(f) #f,
    KILN_OP_FAMILIES(KILN_FAMILY_NAME)
#undef KILN_FAMILY_NAME
};
_Static_assert(sizeof(kiln_family_names_) / sizeof(kiln_family_names_[0]) == KILN_FAMILY_COUNT,
               "one name per family");

static const char* const kiln_entry_names_[] = {
#define KILN_ENTRY_NAME(e) #e,
    KILN_OP_ENTRIES(KILN_ENTRY_NAME)
#undef KILN_ENTRY_NAME
};
_Static_assert(sizeof(kiln_entry_names_) / sizeof(kiln_entry_names_[0]) == KILN_ENTRY_COUNT,
               "one name per entry");

#define KILN_OP_OK(op) ((unsigned)(op) < KILN_OP_COUNT)

const char* kiln_op_name(kiln_op_t op) { return KILN_OP_OK(op) ? kiln_op_table_[op].name : "?"; }
int kiln_op_min_inputs(kiln_op_t op) { return KILN_OP_OK(op) ? kiln_op_table_[op].min_inputs : 0; }
int kiln_op_max_inputs(kiln_op_t op) { return KILN_OP_OK(op) ? kiln_op_table_[op].max_inputs : 0; }
int kiln_op_n_params(kiln_op_t op) { return KILN_OP_OK(op) ? kiln_op_table_[op].n_params : 0; }
int kiln_op_n_fparams(kiln_op_t op) { return KILN_OP_OK(op) ? kiln_op_table_[op].n_fparams : 0; }

kiln_op_family_t kiln_op_family(kiln_op_t op) {
  return KILN_OP_OK(op) ? kiln_op_table_[op].family : KILN_FAMILY_COUNT;
}
const char* kiln_op_family_name(kiln_op_family_t f) {
  return (unsigned)f < KILN_FAMILY_COUNT ? kiln_family_names_[f] : "?";
}
kiln_op_entry_t kiln_op_entry(kiln_op_t op) {
  return KILN_OP_OK(op) ? kiln_op_table_[op].entry : KILN_ENTRY_COUNT;
}
const char* kiln_op_entry_name(kiln_op_entry_t e) {
  return (unsigned)e < KILN_ENTRY_COUNT ? kiln_entry_names_[e] : "?";
}

int kiln_op_param(kiln_op_t op, int is_float, int i, kiln_op_param_t* out) {
  if (!KILN_OP_OK(op) || i < 0) return 0;
  const kiln_field_t* f = is_float ? kiln_op_table_[op].fparams : kiln_op_table_[op].params;
  int index = 0;
  for (int k = 0; k < i; ++k, ++f) {
    if (!f->name) return 0;
    index += f->count;
  }
  if (!f->name) return 0;
  out->name = f->name;
  out->index = index;
  out->count = f->count;
  return 1;
}
