/* Every weight form the CPU target packs a LINEAR's weight into, as compile
 * options (test_glu_joined.c, test_bf16_hold.c): fp32, bf16 weights, bf16
 * compute, int8 and int4 (symmetric, asymmetric, with int8 activations),
 * and a bf16 model's bf16 x, which takes bf16 compute unasked. */
#ifndef KILN_TEST_WEIGHT_FORMS_H
#define KILN_TEST_WEIGHT_FORMS_H

#include <stddef.h>

#include "compiler/kiln_compiler.h"

typedef struct {
  const char* name;
  int quant, group, asym, a8, weights_bf16, compute_bf16;
  int bf16_x; /* a bf16 model: x bf16, the weights bf16 values (VNNI unasked) */
} kiln_test_weight_form_t;

extern const kiln_test_weight_form_t kiln_test_weight_forms[];
extern const size_t kiln_test_n_weight_forms;

/* Default compile options (each pass verified) with form f's weights. */
void kiln_test_weight_form_options(const kiln_test_weight_form_t* f, kiln_compile_options_t* o);

#endif /* KILN_TEST_WEIGHT_FORMS_H */
