/* The op records (ir/kiln_ops.h): every table the records generate has one
 * row per op and agrees with the enum ranges passes and kernels test for;
 * the parameter layouts are packed and fit a node; a node with a parameter
 * past its layout, or the wrong number of inputs, is refused naming its op;
 * and the CPU target has a kernel entry for every op. */
#include <string.h>

#include "hal/kiln_hal.h"
#include "ir/kiln_graph.h"
#include "kiln_test.h"

static void kiln_test_op_tables(void) {
  for (int op = 0; op < KILN_OP_COUNT; ++op) {
    const char* name = kiln_op_name((kiln_op_t)op);
    KILN_EXPECT(name && strcmp(name, "?") != 0, "op %d has a name", op);
    for (int other = 0; other < op; ++other)
      KILN_EXPECT(strcmp(name, kiln_op_name((kiln_op_t)other)) != 0, "%s named twice", name);
    KILN_EXPECT(kiln_op_min_inputs((kiln_op_t)op) <= kiln_op_max_inputs((kiln_op_t)op) &&
                    kiln_op_max_inputs((kiln_op_t)op) <= KILN_MAX_NODE_INPUTS,
                "%s: arity", name);
    KILN_EXPECT((unsigned)kiln_op_family((kiln_op_t)op) < KILN_FAMILY_COUNT, "%s: family", name);
    KILN_EXPECT((unsigned)kiln_op_entry((kiln_op_t)op) < KILN_ENTRY_COUNT, "%s: entry", name);
    /* The fields are packed in order and add up to the layout's length. */
    for (int fl = 0; fl < 2; ++fl) {
      kiln_op_param_t f;
      int at = 0, i = 0;
      while (kiln_op_param((kiln_op_t)op, fl, i++, &f)) {
        KILN_EXPECT(f.index == at && f.count >= 1, "%s: field %s at %d", name, f.name, f.index);
        at += f.count;
      }
      int want = fl ? kiln_op_n_fparams((kiln_op_t)op) : kiln_op_n_params((kiln_op_t)op);
      KILN_EXPECT(at == want && want <= (fl ? KILN_MAX_FPARAMS : KILN_MAX_PARAMS),
                  "%s: %s fields span %d of %d", name, fl ? "float" : "int", at, want);
    }
    /* The ranges passes and kernels test for name the ops of one entry. */
    kiln_op_entry_t e = kiln_op_entry((kiln_op_t)op);
    KILN_EXPECT(KILN_OP_IS_BINARY(op) == (e == KILN_ENTRY_binary), "%s: binary range", name);
    KILN_EXPECT(KILN_OP_IS_UNARY_MATH(op) == (e == KILN_ENTRY_unary), "%s: unary range", name);
    KILN_EXPECT(KILN_OP_IS_REDUCE(op) == (e == KILN_ENTRY_reduce), "%s: reduce range", name);
    KILN_EXPECT((KILN_OP_IS_UNARY_EXT(op) || KILN_OP_IS_BINARY_EXT(op)) == (e == KILN_ENTRY_math),
                "%s: math ranges", name);
    /* Both targets run every op. */
    kiln_node_t node;
    memset(&node, 0, sizeof(node));
    node.op = (kiln_op_t)op;
    const kiln_hal_target_t* targets[2] = {kiln_hal_target_cpu(), kiln_hal_target_reference()};
    for (int t = 0; t < 2; ++t) {
      const kiln_hal_entry_t* ce = kiln_hal_entry(targets[t], &node);
      KILN_EXPECT(ce && ce->run && (ce->prep_size == 0 || ce->prepare), "%s has no entry for %s",
                  targets[t]->name, name);
    }
    /* The reference target runs each entry's reference run where it has one. */
    const kiln_hal_entry_t *fast = kiln_hal_entry(targets[0], &node),
                           *ref = kiln_hal_entry(targets[1], &node);
    KILN_EXPECT(ref->run == (fast->reference ? fast->reference : fast->run) &&
                    ref->prepare == fast->prepare && ref->prep_size == fast->prep_size,
                "%s: the reference target's entry", name);
  }
  kiln_op_param_t f;
  KILN_EXPECT(kiln_op_param(KILN_OP_CONV2D, 0, 6, &f) && strcmp(f.name, "GROUPS") == 0 &&
                  f.index == KILN_P(CONV2D, GROUPS),
              "conv2d's field 6 is groups");
  KILN_EXPECT(!kiln_op_param(KILN_OP_ADD, 0, 0, &f) && !kiln_op_param(KILN_OP_COUNT, 0, 0, &f),
              "no fields past the end");
}

static void kiln_test_op_validity(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t s[2] = {2, 3};
  int32_t x = -1, y = -1;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, s, &x));
  const int32_t in[2] = {x, x};
  int64_t p[KILN_MAX_PARAMS] = {0};
  float fp[KILN_MAX_FPARAMS] = {0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, in, 2, p, KILN_MAX_PARAMS, fp,
                                     KILN_MAX_FPARAMS, NULL, &y));
  /* add has no params: any set one is refused, naming the op. */
  p[3] = 1;
  kiln_status_t st = kiln_graph_add_node(g, KILN_OP_ADD, in, 2, p, 4, NULL, 0, NULL, &y);
  KILN_EXPECT(kiln_status_code(st) == KILN_INVALID_ARGUMENT &&
                  strstr(kiln_status_message(st), "add") && strstr(kiln_status_message(st), "param 3"),
              "a param past add's layout: %s", kiln_status_message(st));
  kiln_status_free(st);
  p[3] = 0;
  /* softmax has two: a third is refused; a float param too. */
  int64_t sp[3] = {1, 0, 7};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SOFTMAX, in, 1, sp, 3, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOFTMAX, in, 1, sp, 2, NULL, 0, NULL, &y));
  fp[0] = 0.5f;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SOFTMAX, in, 1, sp, 2, fp, 1, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  /* fma_scalar has two float params: both are its. */
  fp[1] = 1.0f;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_FMA_SCALAR, in, 1, NULL, 0, fp, 2, NULL, &y));
  /* Arity from the record. */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_ADD, in, 1, NULL, 0, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_ops(void) {
  kiln_test_op_tables();
  kiln_test_op_validity();
}
