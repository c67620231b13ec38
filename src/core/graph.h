/* The graph's private layout: nodes, their shapes and device buffers, the flat parameter block,
 * and the per-run state shared by compile.c, run.c and the ops. */
#ifndef BPT_CORE_GRAPH_H
#define BPT_CORE_GRAPH_H

#include <stdatomic.h>
#include <stdbool.h>

#include "base/attachment.h"
#include "bptrain/graph.h"
#include "core/context.h"
#include "core/op.h"

#define BPT_NAME_SIZE 64
#define BPT_MAX_INPUTS 5 /* batch_norm: x, gamma, beta, running mean, running variance */
#define BPT_MAX_INT_ATTRIBUTES 16
#define BPT_MAX_FLOAT_ATTRIBUTES 4
#define BPT_MAX_NODE_STATE 4 /* run-time state slots of each kind (bpt_state_decl) */

struct bpt_node {
  bpt_graph *graph;
  int index; /* position in graph->nodes, i.e. creation order */
  bpt_op_id op;
  char name[BPT_NAME_SIZE];
  bpt_node *inputs[BPT_MAX_INPUTS];
  int input_count;
  int64_t int_attributes[BPT_MAX_INT_ATTRIBUTES];
  float float_attributes[BPT_MAX_FLOAT_ATTRIBUTES];
  /* The op's declared parameters live in the attribute slots (bpt_param_decl); what the library writes at run
   * time lives here instead (bpt_state_decl: linear's FP8 scale, relu's mask choice). */
  int64_t int_state[BPT_MAX_NODE_STATE];
  float float_state[BPT_MAX_NODE_STATE];

  /* Shape: dims[0] is the batch (compiled maximum) when batched. Filled at creation for inputs and
   * parameters, by the op's infer_shape for the rest. With sequence (only when batched), dims[1] is a sequence
   * axis, its length at most the declared one (declared_dims): per-token ops (linear) map over dims[0] and
   * dims[1] together, the leading axes, and act on the rest, the features (bpt_node_features); without it the
   * features are every per-sample axis. */
  bpt_dtype dtype;
  int rank;
  int64_t dims[BPT_MAX_RANK];
  /* The shape as declared (the longest sequences; dims[0] the compiled batch as above), set at creation. dims
   * is that shape, or the shape at a run's shorter sequences while the graph is fitted to them
   * (sequence_length.c); memory, views and kernels are planned for declared_dims. */
  int64_t declared_dims[BPT_MAX_RANK];
  bool batched;
  bool sequence;
  /* The axis that runs along the sequence (sequence_length.c): 1 with sequence, another where a permute moved it
   * (the heads' (N, H, T, D) have 2), 0 for none. A permute back to axis 1 makes the node a sequence again (the
   * heads merged to (N, T, H, D)). Set by the shape rules that move it; every other rule leaves 0, and a
   * sequence gets 1. */
  int sequence_axis;
  bool requires_grad;
  bpt_initializer initializer;
  /* How value and grad are stored, set at compile before the memory plan (bpt_precision_plan_storage): dtype,
   * or BPT_DTYPE_BF16 for an activation of the bf16 policy whose kernels all take bf16 storage. */
  bpt_dtype storage;

  /* A view (its op's view_of_input): the node whose value and gradient buffers it shares, never itself a view
   * (a view of a view shares the first one's source); NULL for a node with buffers of its own. The memory plan
   * places only the source, for the lifetimes and readers of the source and all its views together. */
  bpt_node *view_source;
  /* Layout, set at compile (strided_views.c): elements between neighbours along each axis and the element
   * offset into the buffer owner's storage. Contiguous with offset 0 for every node but a strided view: a
   * permute or slice whose every reader takes strided input becomes a view of its input with that input's
   * strides reordered or offset, so it moves nothing; otherwise it stays a copy. */
  int64_t strides[BPT_MAX_RANK];
  int64_t view_offset;

  /* Device memory, valid after compile. Parameters point into the flat blocks. */
  void *value;
  /* Trainable parameters under the bf16 policy, where some linear takes it: the value as bf16, written with the
   * f32 copies before each forward (precision.c), so products read 2-byte weights narrowed once per update. */
  const void *value_bf16;
  float *grad;
  void *saved;          /* op-private buffer kept from forward to backward (size from op->saved_bytes) */
  int64_t param_offset; /* parameters: element offset in the flat block */
  int64_t input_batch;  /* inputs: batch set by the last bpt_graph_set_input, 0 if none */
  int64_t input_length; /* sequence inputs: length set by the last bpt_graph_set_input, 0 if none */
  size_t saved_capacity; /* bytes the memory plan gave node->saved, for the declared shape */

  /* Activation memory: the value shares memory with later nodes once forward is past it. */
  const bpt_node *value_reused_by;
  bool value_transient; /* only forward reads it: its bytes are reused in forward or by gradients in backward */
  /* Recomputation (bpt_graph_recompute_segment): the segment this node belongs to, 0 for none; recomputed: its
   * value lives in the graph's recompute region, shared by every segment, and backward computes it again before
   * the segment's backward instead of keeping it from forward. */
  int recompute_segment;
  bool recomputed;
  /* Activation gradients share memory too (memory_plan.c): the index of the node whose backward first adds
   * into this node's gradient (run.c zeroes the gradient just before it), or node_count for the loss, whose
   * gradient is seeded before backward starts. */
  int gradient_first_writer;
  /* Set by run.c instead of clearing the gradient when its first writer can overwrite it (its
   * overwrites_gradients): the writer takes it with bpt_node_take_unset_gradient() and assigns rather than adds. */
  bool gradient_unset;

  /* Kernels, chosen once at compile (kernel_select.c): the op's registered kernels on kernel_backend, the
   * graph's backend or, for a node it does not support when the context allows the fallback, the CPU, with
   * explicit transfers. NULL kernels: the node needs none (or the graph is not compiled). */
  const bpt_op_kernels *kernels;
  bpt_backend *kernel_backend;
  /* The op's overwrites_unset_gradients, confirmed by the kernels' supports for beta 0. */
  bool overwrites_gradients;
};

/* BPT_OK when node's value can still be read (forward ran and its memory has not been reused since); a
 * BPT_ERR_STATE error naming node and where otherwise. */
bpt_status bpt_node_check_value_readable(const bpt_node *node, const char *where);

/* Moments a graph hook is told about. position is the index in graph->order of the node whose backward
 * just ran (NODE_BACKWARD, for every node in reverse order, with or without a backward of its own), 1 or 0
 * for BACKWARD_BEGIN (accumulating or not), -1 otherwise. Data-parallel training uses them to start each
 * gradient bucket's all-reduce as soon as the last node touching it is done, and to wait for them all
 * before the update. */
typedef enum bpt_graph_event {
  BPT_GRAPH_EVENT_BACKWARD_BEGIN, /* before parameter gradients are cleared (or kept, to accumulate) */
  BPT_GRAPH_EVENT_NODE_BACKWARD,
  BPT_GRAPH_EVENT_BACKWARD_END,
  BPT_GRAPH_EVENT_BEFORE_UPDATE, /* bpt_optimizer_step, before it reads the gradients */
  BPT_GRAPH_EVENT_AFTER_UPDATE   /* bpt_optimizer_step, after the update (or after skipping it: loss scaling) */
} bpt_graph_event;
/* A failure aborts the backward pass or the step with that status (the hook reports its own message). */
typedef bpt_status (*bpt_graph_hook)(void *data, bpt_graph *graph, bpt_graph_event event, int position);

struct bpt_graph {
  bpt_context *context;
  bpt_backend *backend;
  bpt_node **nodes;
  int node_count, node_capacity;

  bool compiled;
  bpt_node *loss;
  int64_t max_batch;
  int64_t batch; /* batch of the current run */
  bool forward_done;
  /* The loss as bpt_graph_loss last downloaded it, valid until the next forward begins: the optimiser step
   * reads it to refuse a non-finite loss, and the caller's read after the step (bpt_train's, every step) then
   * costs no second wait for the device (issue 27). */
  bool loss_on_host;
  float host_loss;
  bool backward_done;
  /* Why the last bpt_graph_forward failed (empty after one that succeeded), so that the calls needing a
   * forward can repeat it instead of saying "run forward first" to someone who just did. */
  char forward_error[BPT_ERROR_MESSAGE_SIZE];
  /* Backward ran since the last forward: transient values' bytes then hold activation gradients. */
  bool transient_values_overwritten;

  bpt_node **order; /* topological order of the nodes the loss or outputs need: all nodes, creation order */
  bpt_node **parameters;
  int parameter_count;
  int64_t parameter_elements;
  float *parameter_block; /* device: all parameters, contiguous */
  float *gradient_block;  /* device: all parameter gradients, same layout */
  void *activation_arena; /* device: every other node's value, gradient and saved buffer */
  size_t activation_bytes;
  float *loss_gradient; /* device: the constant 1 that seeds backward */

  /* Checkpoints and anomaly detection. */
  bpt_rng rng;                      /* stream for stochastic ops, seeded at compile; saved in checkpoints */
  int64_t forward_count;            /* forward passes run since compile (the "step" anomaly reports name) */
  bool anomaly_detection;           /* check every op's output for inf/NaN (bpt_graph_set_anomaly_detection) */
  bool parameter_check_off;         /* skip the per-step parameter check (bpt_graph_set_parameter_check) */
  void *parameter_check_flag;       /* device int32 the check sets, allocated at its first step */
  int64_t parameter_check_since;    /* first step the flag covers since it was last read */
  struct bpt_graph_buffer *buffers; /* non-trainable state saved in checkpoints (bpt_graph_register_buffer) */
  int buffer_count, buffer_capacity;
  /* One observer of backward and of the optimiser step, NULL when none. */
  bpt_graph_hook hook;
  void *hook_data;
  /* The public call running on this graph now (bpt_graph_forward, a backward, bpt_optimizer_step), NULL when
   * none: a second thread entering is refused by name (core/graph_owner.h) instead of mixing two passes. */
  _Atomic(const char *) running;
  /* Optimisers, data-parallel handles and speculative trainers made from the graph (base/attachment.h):
   * a graph destroyed first detaches them; each frees what needs the graph and sets its graph pointer to
   * NULL, so its own destroy later frees host memory only and its other calls fail with BPT_ERR_STATE. */
  bpt_attachment *attachments;

  /* Precision, stochastic ops and activation memory. */
  struct bpt_precision_state *precision; /* NULL until bpt_graph_set_precision(): f32, no scaling */
  bool deterministic;                    /* stochastic ops use their evaluation form */
  uint64_t forward_seed;                 /* drawn from rng for each forward pass */
  size_t held_bytes, transient_bytes, gradient_bytes, input_bytes; /* memory plan, for bpt_graph_memory() */
  size_t recompute_bytes;  /* the recompute region, shared by all segments (part of held_bytes) */
  size_t activation_bytes_f32; /* the activation arena as it would be with every activation stored in f32 */
  int recompute_segments;  /* segments marked so far; ids run 1 .. this */
  int recompute_resident;  /* the segment whose values the recompute region holds now, 0 for none */

  /* Train/eval mode, folding and dropout. */
  bool evaluation;       /* inference mode: batch norm uses running statistics, dropout passes values through */
  bool folded;           /* batch norms were folded into convolutions: forward only */
  uint64_t random_step;  /* advanced by every optimiser step: dropout masks stay fixed between two steps */
  uint64_t dropout_seed; /* the context seed at compile, or the one a loaded checkpoint was saved with */

  /* A CPU backend for the nodes the graph's backend does not support (kernel_select.c), NULL when none. */
  bpt_backend *fallback_backend;
  /* Tests: every permute and slice stays a copy (strided_views.c), the arithmetic the views must reproduce. */
  bool strided_views_off;
  /* Whether some node's dims are a run's shorter sequences rather than the declared ones (sequence_length.c). */
  bool lengths_fitted;
};

/* Elements per sample (batched) or in total (unbatched) for the node's compiled shape. */
int64_t bpt_node_inner_count(const bpt_node *node);
/* The axes per-token ops map over: 0 (unbatched), 1 (the batch) or 2 (batch and sequence). */
static inline int bpt_node_leading_axes(const bpt_node *node) {
  return (node->batched ? 1 : 0) + (node->sequence ? 1 : 0);
}
/* Elements per token: the product of the dims after the leading axes (per sample when there is no sequence). */
int64_t bpt_node_features(const bpt_node *node);
/* Elements of the node for the current batch. */
int64_t bpt_node_count(const bpt_node *node);
/* Element-wise ops' shape rule: the output takes input 0's shape (sequence axis included); input 0 must be f32. */
bpt_status bpt_node_infer_elementwise_shape(bpt_node *node);
/* Runs node's shape rule (at creation, and again for a run's sequence lengths), then gives a sequence its
 * sequence_axis of 1. */
bpt_status bpt_node_infer_shape(bpt_node *node);
/* Binary element-wise ops' shape rule (add, mul): NumPy broadcasting of inputs 0 and 1, both f32, their shapes
 * aligned at the last axis, each pair of axes equal or one of them 1. The batch stays axis 0: an unbatched
 * operand spans at most the per-sample axes (or has a 1 against the batch), two batched ones have one rank.
 * The output is batched (and a sequence) when an input is; the message names both inputs and shapes. */
bpt_status bpt_node_infer_broadcast_shape(bpt_node *node);
/* Whether input's shape differs from node's, so that its values are repeated (and its gradient summed). */
bool bpt_node_broadcasts(const bpt_node *node, const bpt_node *input);
/* BPT_OK when every dimension of node's inferred shape is in [1, BPT_MAX_DIM] and its per-sample element count
 * at most BPT_MAX_ELEMENTS (core/checked.h); run after every shape rule, so no later size arithmetic wraps. */
bpt_status bpt_node_check_shape(const bpt_node *node);
/* A layer helper that fails leaves the graph as it found it: it marks graph->node_count on entry and, on failure,
 * discards every node added since (the parameters made before the op that refused, and the checkpoint buffers
 * those nodes own), so the caller can retry under the same names and no orphan parameter reaches compile, a
 * checkpoint or a load report. Only nodes made during the call are past the mark, so none is anyone's input. */
void bpt_graph_discard_nodes(bpt_graph *graph, int mark);
static inline int bpt_graph_mark(const bpt_graph *graph) { return graph ? graph->node_count : 0; }
static inline bpt_status bpt_graph_keep_if_ok(bpt_graph *graph, int mark, bpt_status status, bpt_node **out) {
  if (status != BPT_OK && graph) bpt_graph_discard_nodes(graph, mark);
  if (status != BPT_OK && out) *out = NULL; /* never a discarded node */
  return status;
}
/* Adds a node of op with the given inputs; ops then fill attributes. */
bpt_status bpt_graph_add_node(bpt_graph *graph, bpt_op_id op, const char *name, bpt_node *const *inputs,
                              int input_count, bpt_node **out);
/* Like bpt_graph_add_node() but sets attributes before infer_shape runs, for ops whose shape depends on
 * them (strides, kernel sizes). Either array may be NULL with a count of 0. */
bpt_status bpt_graph_add_node_with_attributes(bpt_graph *graph, bpt_op_id op, const char *name, bpt_node *const *inputs,
                                              int input_count, const int64_t *int_attributes, int int_count,
                                              const float *float_attributes, int float_count, bpt_node **out);
/* Typed parameters (op_parameters.c). BPT_OK when every parameter node's op declares is of its type and in
 * its range and every undeclared slot is 0; else BPT_ERR_INVALID_ARGUMENT naming op, node, parameter, value
 * and range (bpt_graph_add_node_with_attributes calls it before the shape rule). */
bpt_status bpt_node_check_parameters(const bpt_node *node);
/* The declared parameter (or state entry) of node's op called name; NULL when none. */
const bpt_param_decl *bpt_node_find_parameter(const bpt_node *node, const char *name);
const bpt_state_decl *bpt_node_find_state(const bpt_node *node, const char *name);
/* A parameter's value (element `element` of an axis list) as a double: exact for every int a slot can hold
 * within 2^53, and every float. */
double bpt_node_parameter_value(const bpt_node *node, const bpt_param_decl *parameter, int element);
/* A parameter read or written by name, for code outside the op's file (the ONNX emitters, fold.c), which so
 * needs no slot numbers. Element: the index within an axis list, else 0. A name the op does not declare (a
 * programming error inside the library) reads as NAN or 0 and is not written; bpt_node_set_parameter then
 * returns BPT_ERR_INTERNAL. */
double bpt_node_float_parameter(const bpt_node *node, const char *name);
int64_t bpt_node_int_parameter(const bpt_node *node, const char *name, int element);
bpt_status bpt_node_set_parameter(bpt_node *node, const char *name, int64_t value);
double bpt_node_state_value(const bpt_node *node, const bpt_state_decl *state);
void bpt_node_set_state_value(bpt_node *node, const bpt_state_decl *state, double value);
/* Writes "name=value, ..." for node's parameters into buffer (enums by name, axis lists as [a, b]); "" when
 * the op declares none. Returns buffer. */
const char *bpt_node_parameters_string(const bpt_node *node, char *buffer, size_t size);
/* Frees the device memory of a compiled (or half-compiled) graph. */
void bpt_graph_release_memory(bpt_graph *graph);
/* Shorthand for "<op> '<node>': <message>" errors. */
bpt_status bpt_node_error(const bpt_node *node, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes "2x3x4" into buffer. */
const char *bpt_shape_string(const bpt_node *node, char *buffer, size_t size);
/* The same for the declared shape (the longest sequences). */
const char *bpt_declared_shape_string(const bpt_node *node, char *buffer, size_t size);

/* The node whose buffers hold node's value and gradient: its view source, or node itself. */
static inline bpt_node *bpt_node_buffer_owner(bpt_node *node) {
  return node->view_source ? node->view_source : node;
}

/* Strided views (strided_views.c). At compile, before the kernels are chosen: every node's strides, and which
 * permutes and slices are views. */
bpt_status bpt_graph_plan_strided_views(bpt_graph *graph);
/* Whether node's elements lie in row-major order over its dims (from its view offset on). */
bool bpt_node_contiguous(const bpt_node *node);
/* Whether node is a view that covers only part of its source (a slice): a writer of its gradient then adds
 * into a cleared source gradient, never overwrites it. */
bool bpt_node_partial_view(const bpt_node *node);
/* Lays the strides out again for the current dims with the views chosen at compile, and checks that every
 * reader still takes its view; for a run's sequence lengths (sequence_length.c). */
bpt_status bpt_graph_lay_out_views(bpt_graph *graph, const char *where);

/* Sequence lengths per run (sequence_length.c). bpt_graph_fit_run_lengths fits every node's dims to the lengths
 * the sequence inputs were last fed (shape rules, strides and kernel supports again; no work when they already
 * are); bpt_graph_fit_declared_lengths goes back to the declared shape, for calls that read every op's own
 * shapes to describe the graph (ONNX export; checkpoints, signatures and the summary read declared_dims). A fit
 * that fails leaves the graph at its declared lengths; lengths refused before any fit (two equally declared
 * inputs fed different lengths) leave it as it was. */
bpt_status bpt_graph_fit_run_lengths(bpt_graph *graph, const char *where);
bpt_status bpt_graph_fit_declared_lengths(bpt_graph *graph, const char *where);
/* The length a sequence input accepts at most: its declared one. */
static inline int64_t bpt_node_declared_length(const bpt_node *node) { return node->declared_dims[1]; }

/* Host copy of a strided view's values (f32, row-major over its dims at the current batch) for reads. */
bpt_status bpt_node_download_strided(const bpt_node *node, float *host, const char *where);

/* For an op's backward about to write input's gradient: true (once) when the gradient was left unset for it to
 * overwrite, false when it must add into it. A view's gradient is its source's, and so is the flag. */
static inline bool bpt_node_take_unset_gradient(bpt_node *input) {
  input = bpt_node_buffer_owner(input);
  const bool unset = input->gradient_unset;
  input->gradient_unset = false;
  return unset;
}

/* Calls a shared primitive of the graph's backend, turning NULL into BPT_ERR_UNSUPPORTED and failures into
 * messages naming the node. */
#define BPT_KERNEL(node, member, ...)                                                                                  \
  ((node)->graph->backend->vtable->member                                                                              \
       ? bpt_kernel_result((node), (node)->graph->backend->vtable->member((node)->graph->backend, __VA_ARGS__),        \
                           #member)                                                                                    \
       : bpt_node_error((node), BPT_ERR_UNSUPPORTED, "kernel '%s' is not supported on backend '%s'", #member,          \
                        (node)->graph->backend->vtable->name))
bpt_status bpt_kernel_result(const bpt_node *node, bpt_status status, const char *kernel);

/* Op kernels (kernel_call.c). bpt_node_describe fills the graph-free description of node for the current
 * batch, every beta 1; an op adds what its kernels need (a seed). The run functions call node->kernels on
 * node->kernel_backend (with transfers for a CPU fallback); the backward one first sets each input's beta
 * (0 for a gradient left unset for this node, see bpt_node_take_unset_gradient). */
void bpt_node_describe(const bpt_node *node, bpt_kernel_node *description);
bpt_status bpt_node_run_forward_kernels(bpt_node *node, const bpt_kernel_node *description);
bpt_status bpt_node_run_backward_kernels(bpt_node *node, bpt_kernel_node *description);
/* bpt_node_describe and the run function in one, for ops whose kernels need nothing more. */
bpt_status bpt_node_forward_kernels(bpt_node *node);
bpt_status bpt_node_backward_kernels(bpt_node *node);
/* Compile time (kernel_select.c): picks each node's kernels and backend, or fails naming node, op and backend. */
bpt_status bpt_graph_select_kernels(bpt_graph *graph);
/* Whether backend supports node as described at the compiled batch: for an op's configure. */
bool bpt_node_supported_on(const bpt_node *node, const bpt_backend *backend);
/* Frees the fallback backend, if any. */
void bpt_graph_release_kernels(bpt_graph *graph);

/* A named range of device floats that is not a trainable parameter (batch-norm
 * running statistics, say) but must survive a checkpoint; the graph keeps a view, not a copy. Either an
 * absolute device pointer, registered once memory exists, or a place inside a node's saved buffer
 * (node->saved + byte_offset), which an op's builder can register before compile. Re-registering a name
 * updates it. Declared here, defined in checkpoint.c. */
typedef struct bpt_graph_buffer {
  char name[BPT_NAME_SIZE];
  float *values;         /* device, or NULL when owner is set */
  const bpt_node *owner; /* values live at owner->saved + byte_offset */
  size_t byte_offset;
  int64_t count;
} bpt_graph_buffer;
bpt_status bpt_graph_register_buffer(bpt_graph *graph, const char *name, float *values, int64_t count);
bpt_status bpt_graph_register_node_buffer(bpt_graph *graph, const char *name, const bpt_node *owner, size_t byte_offset,
                                          int64_t count);
/* Check node's value (after its forward), or its inputs' gradients (after its backward), for inf/NaN when
 * anomaly detection is on (anomaly.c; called from the loops in run.c). */
bpt_status bpt_anomaly_check(bpt_node *node);
/* After an optimiser update: BPT_ERR_NUMERIC naming the first parameter that holds an inf or NaN, unless the
 * check is off (parameter_check.c; called from bpt_optimizer_step). */
bpt_status bpt_parameter_check_after_step(bpt_graph *graph, int64_t step);
/* The device flag the update kernels set (bpt_update_args.found_nonfinite), allocated on first use; NULL when
 * the check is off. */
bpt_status bpt_parameter_check_prepare(bpt_graph *graph, int32_t **flag);
/* Frees the check's device flag (with the graph's device memory). */
void bpt_parameter_check_release(bpt_graph *graph);
bpt_status bpt_anomaly_check_backward(bpt_node *node);

#endif
