/* The op interface: each op file defines one bpt_op_definition with its shape inference, forward and
 * backward side by side. The op enum and table are generated from ops.def. */
#ifndef BPT_CORE_OP_H
#define BPT_CORE_OP_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h" /* bpt_op_id, generated from ops.def, and the kernel description */
#include "bptrain/common.h"

typedef struct bpt_graph bpt_graph;
typedef struct bpt_node bpt_node;

/* Typed op parameters (issue 24): each op file declares, in a static table, the configuration its builder
 * stores in the node's attribute slots, and the run-time state its code keeps in the node's state slots; the
 * graph validates (bpt_node_check_parameters), prints (bpt_graph_describe), checkpoints and exports them by
 * name through that table (op_parameters.c). */
typedef enum bpt_op_value_type {
  BPT_OP_VALUE_INT,   /* int_attributes / int_state */
  BPT_OP_VALUE_FLOAT, /* float_attributes / float_state; always finite */
  BPT_OP_VALUE_BOOL,  /* int slot holding 0 or 1 */
  BPT_OP_VALUE_ENUM   /* int slot holding 0 .. maximum, named by enum_names */
} bpt_op_value_type;

typedef struct bpt_param_decl {
  const char *name; /* lower_case identifier; messages print it with spaces for underscores */
  bpt_op_value_type type;
  int slot;             /* first slot in int_attributes (int, bool, enum) or float_attributes (float) */
  int length;           /* consecutive slots the value spans (an axis list); 0 means 1 */
  double default_value; /* stored in slots a builder does not pass */
  /* Valid range, inclusive unless the open flag says otherwise (floats only); +-INFINITY for none. */
  double minimum, maximum;
  bool minimum_open, maximum_open;
  const char *const *enum_names; /* ENUM: the name of each value 0 .. maximum */
} bpt_param_decl;

/* Run-time state: values the library writes while compiling or running (not configuration), kept in the node's
 * int_state / float_state, saved in checkpoints by name. */
typedef struct bpt_state_decl {
  const char *name;
  bpt_op_value_type type; /* float: float_state; the others: int_state */
  int slot;
  /* >= 0: also handed to the kernels in this slot of the kernel description's int or float attributes (the
   * backends' interface is unchanged; the slot must not hold a parameter of the op). -1: core-only. */
  int kernel_slot;
  /* Whether a checkpoint load restores it; false for state that compile derives from the backend (relu's mask
   * choice), which a file only records. */
  bool restored;
} bpt_state_decl;

/* No bound: for integers the shape rule checks against the inputs (an axis, a head count), with its own
 * messages. */
#define BPT_OP_ANY_INT INFINITY

/* For a definition: `BPT_OP_PARAMETERS(table)` and `BPT_OP_STATE(table)` of a static array. */
#define BPT_OP_PARAMETERS(table) .parameters = (table), .parameter_count = (int)(sizeof(table) / sizeof((table)[0]))
#define BPT_OP_STATE(table) .state = (table), .state_count = (int)(sizeof(table) / sizeof((table)[0]))

/* How speculative backprop's layer chain (speculative_chain.c) may hold an op: declared by the op, so a new op
 * joins the chain from its own file. */
typedef enum bpt_speculative_role {
  BPT_SPECULATIVE_NONE = 0,    /* ends the chain: speculative training refuses a graph that needs it */
  BPT_SPECULATIVE_LINEAR,      /* linear: weight and bias parameters, its row gradients accumulated by the chain */
  BPT_SPECULATIVE_ELEMENTWISE, /* an activation: its backward kernel on the cached x and y */
  BPT_SPECULATIVE_KERNELS,     /* a layer whose kernels run the whole backward from x, y, dy and its saved buffer;
                                * every input after the first must be a parameter */
  BPT_SPECULATIVE_VIEW         /* the same values under a new shape (reshape) */
} bpt_speculative_role;

typedef struct bpt_op_definition {
  const char *name;
  /* The op's parameters and run-time state (NULL / 0: none). */
  const bpt_param_decl *parameters;
  int parameter_count;
  const bpt_state_decl *state;
  int state_count;
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
  /* Speculative backprop: the op's role in a layer chain, and for BPT_SPECULATIVE_KERNELS the bytes at the
   * start of node->saved that a backward of sample 0 alone reads (NULL: none). */
  bpt_speculative_role speculative;
  size_t (*speculative_saved_bytes)(const bpt_node *node);
  /* Whether forward and backward touch the node's tensors only through the op's registered kernels (no shared
   * primitive or host access on them, no aliasing): then the storage plan may store its activations as bf16
   * even where the kernels take f32 only, and the kernel call widens them into f32 scratch around the kernels
   * (kernel_call.c, storage.c). */
  bool kernels_only;
  /* Whether the output is input 0's values under another shape, the same elements in the same order (reshape):
   * the node is then a view, sharing its input's value and gradient buffers (graph.h's view_source), so forward
   * and backward have nothing to move and the memory plan gives it no bytes of its own. */
  bool view_of_input;
  /* Strided views (issue 24.2; permute, slice): the output as a view of input 0, given input 0's strides
   * (elements), as strides for the output's axes and an element offset from input 0's first element. The
   * compile makes the node such a view when every reader takes it (reads_strided_input or kernels registered
   * strided), and a copy through the op's kernels otherwise. */
  void (*strided_view)(const bpt_node *node, const int64_t *input_strides, int64_t *strides, int64_t *offset);
  /* For ops on shared primitives (matmul): whether forward and backward can take input through its strides
   * (node->inputs[input]->strides, its value and gradient alike). NULL: every input must be contiguous. Ops with
   * kernels say so by registering them strided instead. */
  bool (*reads_strided_input)(const bpt_node *node, int input);
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
