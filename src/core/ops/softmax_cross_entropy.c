/* softmax_cross_entropy: loss = mean_n -log softmax(logits_n)[label_n], logits (N, C), labels (N) i32; for a
 * sequence, logits (N, T, C) and labels (N, T), the mean over all N T tokens. Fused so the backward is simply
 * (softmax - onehot) / rows; the probabilities are kept in node->saved.
 *
 * Options (bpt_softmax_cross_entropy_options), as PyTorch's F.cross_entropy: positions whose label is the
 * ignore index add nothing and the mean is over the others (a batch with every position ignored has loss 0 and
 * zero gradients, not 0/0); label smoothing eps mixes the target with the uniform distribution, so a position
 * costs (1 - eps) (-log p[label]) + eps mean_c (-log p[c]) and its gradient is p - ((1 - eps) onehot + eps / C).
 * Attributes: int 0 whether an ignore index is set (0 in graphs and checkpoints from before, so they keep
 * today's arithmetic), int 1 the index, float 0 eps. With an ignore index, saved holds one float more after
 * the probabilities: the kernels may keep the count of positions there (CUDA does, for its backward). */

#include "backends/kernel_args.h"
#include "core/graph.h"

enum {
  CROSS_ENTROPY_HAS_IGNORE = BPT_CROSS_ENTROPY_HAS_IGNORE,
  CROSS_ENTROPY_IGNORE_INDEX = BPT_CROSS_ENTROPY_IGNORE_INDEX
};
enum { CROSS_ENTROPY_SMOOTHING = BPT_CROSS_ENTROPY_SMOOTHING };

/* ignore_index is compared with i32 labels; without has_ignore it is 0 and unused. */
static const bpt_param_decl cross_entropy_parameters[] = {
    {.name = "has_ignore", .type = BPT_OP_VALUE_BOOL, .slot = CROSS_ENTROPY_HAS_IGNORE, .maximum = 1},
    {.name = "ignore_index",
     .type = BPT_OP_VALUE_INT,
     .slot = CROSS_ENTROPY_IGNORE_INDEX,
     .minimum = -BPT_OP_ANY_INT,
     .maximum = BPT_OP_ANY_INT},
    {.name = "label_smoothing",
     .type = BPT_OP_VALUE_FLOAT,
     .slot = CROSS_ENTROPY_SMOOTHING,
     .minimum = 0.0,
     .maximum = 1.0}};

static bpt_status softmax_cross_entropy_infer_shape(bpt_node *node) {
  const bpt_node *logits = node->inputs[0], *labels = node->inputs[1];
  if (logits->dtype != BPT_DTYPE_F32 || !logits->batched || logits->rank != bpt_node_leading_axes(logits) + 1)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "logits '%s' must be f32 (batch, classes) or a sequence's (batch, "
                          "length, classes)",
                          logits->name);
  if (labels->dtype != BPT_DTYPE_I32 || !labels->batched || bpt_node_features(labels) != 1 ||
      labels->sequence != logits->sequence || (logits->sequence && labels->dims[1] != logits->dims[1]))
    return bpt_node_error(node, BPT_ERR_DTYPE, "labels '%s' must be an i32 input with one label per %s", labels->name,
                          logits->sequence ? "token of a sequence as long as the logits'" : "sample");
  node->batched = false;
  node->rank = 0;
  return BPT_OK;
}

static size_t softmax_cross_entropy_saved_bytes(const bpt_node *node) {
  const size_t count_slot = node->int_attributes[CROSS_ENTROPY_HAS_IGNORE] ? 1 : 0;
  return ((size_t)(node->graph->max_batch * bpt_node_inner_count(node->inputs[0])) + count_slot) * sizeof(float);
}

static bpt_status softmax_cross_entropy_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status softmax_cross_entropy_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Backward reads the labels and the saved probabilities, not the logits. */
static bool softmax_cross_entropy_backward_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input == 1;
}

const bpt_op_definition bpt_op_softmax_cross_entropy = {.name = "softmax_cross_entropy",
                                                        BPT_OP_PARAMETERS(cross_entropy_parameters),
                                                        .infer_shape = softmax_cross_entropy_infer_shape,
                                                        .saved_bytes = softmax_cross_entropy_saved_bytes,
                                                        .forward = softmax_cross_entropy_forward,
                                                        .backward = softmax_cross_entropy_backward,
                                                        .backward_reads_input =
                                                            softmax_cross_entropy_backward_reads_input,
                                                        .backward_reads_output = bpt_op_reads_no_output};

bpt_status bpt_softmax_cross_entropy(bpt_graph *graph, const char *name, bpt_node *logits, bpt_node *labels,
                                     bpt_node **out) {
  bpt_node *inputs[2] = {logits, labels};
  return bpt_graph_add_node(graph, BPT_OP_SOFTMAX_CROSS_ENTROPY, name, inputs, 2, out);
}

bpt_status bpt_softmax_cross_entropy_options(bpt_graph *graph, const char *name, bpt_node *logits, bpt_node *labels,
                                             int64_t ignore_index, float label_smoothing, bpt_node **out) {
  bpt_node *inputs[2] = {logits, labels};
  const int64_t attributes[2] = {[CROSS_ENTROPY_HAS_IGNORE] = 1, [CROSS_ENTROPY_IGNORE_INDEX] = ignore_index};
  const float smoothing[1] = {[CROSS_ENTROPY_SMOOTHING] = label_smoothing};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_SOFTMAX_CROSS_ENTROPY, name, inputs, 2, attributes, 2,
                                            smoothing, 1, out);
}
