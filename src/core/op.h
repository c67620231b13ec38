/* The op interface: each op file defines one bpt_op_definition with its shape inference, forward and
 * backward side by side. The op enum and table are generated from ops.def. */
#ifndef BPT_CORE_OP_H
#define BPT_CORE_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h" /* bpt_op_id, generated from ops.def, and the kernel description */
#include "bptrain/common.h"

typedef struct bpt_graph bpt_graph;
typedef struct bpt_node bpt_node;

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
  /* Whether backward can overwrite, rather than add into, an input gradient it is the first writer of, so the
   * gradient need not be cleared first: run.c then leaves it unset and the backward's kernel call gets beta 0
   * for it (bpt_node_run_backward_kernels), when the kernels' supports accepts beta 0 (compile time). Such a
   * backward must then write every element of that gradient. */
  bool overwrites_unset_gradients;
  /* Kernels (kernel_select.c), optional. uses_kernels: whether this node calls its op's registered kernels
   * (NULL: yes; bpt_op_uses_no_kernels for ops built from shared primitives only). configure: called at compile
   * before the capability query, to pick a variant the backend supports (relu's mask). */
  bool (*uses_kernels)(const bpt_node *node);
  void (*configure)(bpt_node *node);
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
/* For uses_kernels: the op runs on shared primitives (copy, add_scaled, gemm) only. */
bool bpt_op_uses_no_kernels(const bpt_node *node);

#endif
