/* The op interface: each op file defines one bpt_op_definition with its shape inference, forward and
 * backward side by side. The op enum and table are generated from ops.def. */
#ifndef BPT_CORE_OP_H
#define BPT_CORE_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "bptrain/common.h"

typedef struct bpt_graph bpt_graph;
typedef struct bpt_node bpt_node;

typedef enum bpt_op_id {
#define BPT_OP(id, name, inputs) BPT_OP_##id,
#include "core/ops.def"
#undef BPT_OP
  BPT_OP_COUNT
} bpt_op_id;

typedef struct bpt_op_definition {
  const char *name;
  /* Validates the inputs and sets the node's dtype, rank, dims and batched flag. */
  bpt_status (*infer_shape)(bpt_node *node);
  /* Bytes of op-private memory kept from forward to backward for the compiled batch (NULL: none). */
  size_t (*saved_bytes)(const bpt_node *node);
  bpt_status (*forward)(bpt_node *node);
  /* Adds (+=) this node's contribution to each input gradient that is required. */
  bpt_status (*backward)(bpt_node *node);
  /* profiler: optional. Sets the floating-point operations and bytes moved by forward (backward == 0) or
   * backward for the current batch (graph->batch). NULL: the profiler estimates bytes from the shapes. */
  void (*cost)(const bpt_node *node, int backward, double *flops, double *bytes);

  /* Activation memory (issue 4), optional: whether backward reads the value of input `input`, and the
   * node's own value. NULL means yes; values nothing reads after forward share memory (compile.c). */
  bool (*backward_reads_input)(const bpt_node *node, int input);
  bool (*backward_reads_output)(const bpt_node *node);
  /* Whether backward overwrites, rather than adds into, an input gradient it is the first writer of when
   * run.c left it unset (bpt_node_take_unset_gradient), so the gradient need not be cleared first. Such a
   * backward must then write every element of that gradient. */
  bool overwrites_unset_gradients;
} bpt_op_definition;

#define BPT_OP(id, name, inputs) extern const bpt_op_definition bpt_op_##name;
#include "core/ops.def"
#undef BPT_OP

const bpt_op_definition *bpt_op_get(bpt_op_id id);
/* The most inputs an op takes, from ops.def (optional inputs such as a bias may be absent). */
int bpt_op_max_inputs(bpt_op_id id);
/* For ops whose backward reads no activation value, only gradients and what forward saved: lets the memory
 * plan reuse their inputs' and output's memory. */
bool bpt_op_reads_no_input(const bpt_node *node, int input);
bool bpt_op_reads_no_output(const bpt_node *node);

#endif
