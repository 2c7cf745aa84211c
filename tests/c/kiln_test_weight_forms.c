#include "kiln_test_weight_forms.h"

const kiln_test_weight_form_t kiln_test_weight_forms[] = {
    {.name = "fp32"},
    {.name = "bf16 weights", .weights_bf16 = 1},
    {.name = "bf16 compute", .compute_bf16 = 1},
    {.name = "int8", .quant = 8},
    {.name = "int8:a8", .quant = 8, .a8 = 1},
    {.name = "int4", .quant = 4, .group = 32},
    {.name = "int4 asym", .quant = 4, .group = 32, .asym = 1},
    {.name = "int4:a8", .quant = 4, .group = 32, .a8 = 1},
    {.name = "bf16 model", .bf16_x = 1},
};
const size_t kiln_test_n_weight_forms = sizeof kiln_test_weight_forms / sizeof kiln_test_weight_forms[0];

void kiln_test_weight_form_options(const kiln_test_weight_form_t* f, kiln_compile_options_t* o) {
  kiln_compile_options_initialize(o);
  o->verify_each = 1;
  o->weights_quant = f->quant;
  o->weights_group = f->group ? f->group : 32;
  o->weights_asym = f->asym;
  o->weights_a8 = f->a8;
  o->weights_bf16 = f->weights_bf16;
  o->compute_bf16 = f->compute_bf16;
}
