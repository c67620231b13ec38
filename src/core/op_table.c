/* The op table and input counts, generated from ops.def. */
#include "core/op.h"

#include <assert.h>

static const bpt_op_definition *const op_table[] = {
#define BPT_OP(id, name, inputs) &bpt_op_##name,
#include "core/ops.def"
#undef BPT_OP
};

static const int op_max_inputs[] = {
#define BPT_OP(id, name, inputs) inputs,
#include "core/ops.def"
#undef BPT_OP
};

static_assert(sizeof op_table / sizeof op_table[0] == BPT_OP_COUNT, "ops.def and the op table disagree");

const bpt_op_definition *bpt_op_get(bpt_op_id id) {
  return (unsigned)id < (unsigned)BPT_OP_COUNT ? op_table[id] : 0;
}

int bpt_op_max_inputs(bpt_op_id id) { return (unsigned)id < (unsigned)BPT_OP_COUNT ? op_max_inputs[id] : 0; }

bool bpt_op_reads_no_input(const bpt_node *node, int input) {
  (void)node;
  (void)input;
  return false;
}

bool bpt_op_reads_no_output(const bpt_node *node) {
  (void)node;
  return false;
}

bool bpt_op_uses_no_kernels(const bpt_node *node) {
  (void)node;
  return false;
}
