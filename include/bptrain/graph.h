/**
 * @file graph.h
 * @brief Define-then-run graphs: declare inputs, parameters and ops once, compile, then run forward and
 * backward for each batch.
 *
 * Shapes of inputs and activations are given per sample; every such node gets a leading batch dimension.
 * A graph is compiled for a largest batch and may then run any batch from 1 up to it.
 */
#ifndef BPTRAIN_GRAPH_H
#define BPTRAIN_GRAPH_H

#include "tensor.h"

BPT_EXTERN_C_BEGIN

/** A computation graph with its parameters, gradients and activations. */
typedef struct bpt_graph bpt_graph;
/** One value in a graph: an input, a parameter or the result of an op. Owned by its graph. */
typedef struct bpt_node bpt_node;

/** How a parameter is filled when the graph is compiled. */
typedef enum bpt_initializer {
  BPT_INIT_ZEROS = 0,
  BPT_INIT_ONES = 1,
  BPT_INIT_HE_NORMAL = 2,     /**< N(0, 2 / fan_in) */
  BPT_INIT_HE_UNIFORM = 3,    /**< U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)) */
  BPT_INIT_XAVIER_NORMAL = 4, /**< N(0, 2 / (fan_in + fan_out)) */
  BPT_INIT_XAVIER_UNIFORM = 5, /**< U(-sqrt(6 / (fan_in + fan_out)), +sqrt(...)) */
  BPT_INIT_NORMAL_SMALL = 6    /**< N(0, 0.02^2), GPT-2's embeddings and projections */
} bpt_initializer;

/** Creates an empty graph on @p context's backend. */
BPT_API bpt_status bpt_graph_create(bpt_context *context, bpt_graph **out);

/**
 * Destroys a graph with its nodes and device memory. Optimisers, data-parallel handles and speculative
 * trainers made from it may still be alive: the graph first frees their device state and detaches them (a
 * data-parallel handle waits for its in-flight all-reduces, at most the timeout; a trainer stops its thread),
 * after which their calls fail with ::BPT_ERR_STATE and their destroy frees only host memory. NULL is a
 * no-op.
 */
BPT_API void bpt_graph_destroy(bpt_graph *graph);

/**
 * Declares an input fed per batch with bpt_graph_set_input().
 * @param dims per-sample shape (the batch dimension is implied), @p rank of them; rank 0 for one value
 *        per sample such as an integer label
 * @param dtype ::BPT_DTYPE_F32 for data, ::BPT_DTYPE_I32 for class labels
 */
BPT_API bpt_status bpt_graph_input(bpt_graph *graph, const char *name, bpt_dtype dtype, int rank,
                                   const int64_t *dims, bpt_node **out);

/**
 * Declares a sequence input fed per batch: each sample is @p length tokens of shape @p dims, so the node's
 * shape is (batch, length, dims...). The sequence axis is a leading axis like the batch: per-token ops
 * (bpt_linear()) map over both and act on the per-token dims, and element-wise ops, add and mul keep it.
 * A run may feed fewer tokens, as it may feed a smaller batch: the graph then computes exactly what a graph
 * declared that long would (see bpt_graph_set_input()).
 * @param length the most tokens per sample: memory and kernels are planned for it; bpt_graph_set_input() takes
 *        (batch, length, dims...) or (batch, t, dims...) for any t in [1, length]
 * @param rank per-token rank, 0 for one value per token such as a token id or a label
 * @param dtype ::BPT_DTYPE_F32 for data, ::BPT_DTYPE_I32 for ids and labels
 */
BPT_API bpt_status bpt_graph_input_sequence(bpt_graph *graph, const char *name, bpt_dtype dtype, int64_t length,
                                            int rank, const int64_t *dims, bpt_node **out);

/**
 * Declares a trainable f32 parameter (no batch dimension), filled by @p initializer at compile time.
 * Fan-in is the product of dims[1..]; fan-out is dims[0] times the product of dims[2..].
 */
BPT_API bpt_status bpt_graph_parameter(bpt_graph *graph, const char *name, int rank, const int64_t *dims,
                                       bpt_initializer initializer, bpt_node **out);

/**
 * y = x W^T + b over x's features. W: (out, in); b: (out) or NULL. x: (N, in) or (N, ...) flattened to in
 * features, y (N, out); a sequence x (N, T, in) or (N, T, ...) is a product per token, y (N, T, out).
 */
BPT_API bpt_status bpt_linear(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *weight,
                              bpt_node *bias, bpt_node **out);
/** y = max(x, 0). */
BPT_API bpt_status bpt_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** y = x for x > 0, slope * x otherwise. */
BPT_API bpt_status bpt_leaky_relu(bpt_graph *graph, const char *name, bpt_node *x, float slope, bpt_node **out);
/** y = 1 / (1 + exp(-x)). */
BPT_API bpt_status bpt_sigmoid(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** y = tanh(x). */
BPT_API bpt_status bpt_tanh(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** y = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact GELU (PyTorch's default, not the tanh approximation).
 * x must be f32; y has its shape. */
BPT_API bpt_status bpt_gelu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** y = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), GELU's tanh approximation (PyTorch's
 * F.gelu(x, approximate='tanh'), GPT-2's activation). x must be f32; y has its shape. */
BPT_API bpt_status bpt_gelu_tanh(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** y = x sigmoid(x) = x / (1 + exp(-x)), SiLU (PyTorch's F.silu). x must be f32; y has its shape. */
BPT_API bpt_status bpt_silu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);
/** Element-wise a * b, with the broadcasting of bpt_add(). */
BPT_API bpt_status bpt_mul(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out);
/**
 * Matrix products over the last two axes, C = op(A) op(B) with op a transpose where @p transpose_a or
 * @p transpose_b is non-zero: A (..., m, k), B (..., k, n), C (..., m, n); attention's Q K^T is
 * bpt_matmul(q, k, 0, 1). Every leading axis (the batch included) is a batch of products: A's and B's leading
 * axes are equal, or one operand is a single matrix (no leading axes, an unbatched rank-2 value such as a
 * weight) used by every product. A batched rank-2 A is one (batch, k) matrix, its rows the samples. Runs on
 * every backend (one strided-batched GEMM); products run in f32, or bf16 under the bf16 policy.
 */
BPT_API bpt_status bpt_matmul(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, int transpose_a,
                              int transpose_b, bpt_node **out);
/**
 * The axes of @p x in a new order: y.dims[i] = x.dims[axes[i]] over the whole shape, the batch included as
 * axis 0, which must stay axis 0. @p rank is x's full rank. (N, T, H, D) with axes {0, 2, 1, 3} gives
 * (N, H, T, D), attention's heads split from a (N, T, H D) value reshaped to (N, T, H, D). A view of x (no
 * copy) when every reader takes strided input (bpt_matmul(), a slice or reshape that is itself a view);
 * otherwise the values are copied (CPU kernels; other backends use the CPU fallback when allowed). Either way
 * the values are the same.
 */
BPT_API bpt_status bpt_permute(bpt_graph *graph, const char *name, bpt_node *x, int rank, const int64_t *axes,
                               bpt_node **out);
/**
 * Layer normalisation over the last axis (C values per row; every other axis, the batch and a sequence
 * included, indexes rows): y = (x - mean) / sqrt(var + epsilon) * gamma + beta, with the biased variance and
 * epsilon inside the square root, as PyTorch's F.layer_norm(x, (C,), gamma, beta, epsilon). The output keeps
 * x's shape, batch and sequence axis. Forward keeps the mean and 1 / std of each row for backward.
 * @param gamma unbatched f32 with C values (a parameter, usually)
 * @param beta unbatched f32 with C values, or NULL for no shift
 * @param epsilon > 0 (1e-5 is PyTorch's default)
 */
BPT_API bpt_status bpt_layer_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                                  float epsilon, bpt_node **out);
/**
 * RMS normalisation over the last axis (C values per row, as bpt_layer_norm()): y = x / sqrt(mean(x^2) +
 * epsilon) * gamma, as PyTorch's F.rms_norm(x, (C,), gamma, epsilon). The output keeps x's shape, batch and
 * sequence axis. Forward keeps 1 / rms of each row for backward.
 * @param gamma unbatched f32 with C values (a parameter, usually)
 * @param epsilon > 0
 */
BPT_API bpt_status bpt_rms_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, float epsilon,
                                bpt_node **out);
/**
 * Softmax over the last axis, F.softmax(x, dim=-1): y = exp(x - max) / sum exp(x - max) along it. @p x is f32
 * with at least one per-sample axis; y has its shape. With @p causal non-zero, x's last two axes are
 * (rows Tq, columns Tk) and element (i, j) is masked where j > i + (Tk - Tq) (bottom-right aligned, as in
 * attention over cached keys); masked elements are 0, and a row with every element masked (or -inf) is all
 * zeros rather than NaN.
 */
BPT_API bpt_status bpt_softmax(bpt_graph *graph, const char *name, bpt_node *x, int causal, bpt_node **out);
/**
 * Fused multi-head scaled dot-product attention, F.scaled_dot_product_attention with scale 1 / sqrt(D):
 * @p q (N, Tq, C), @p k and @p v (N, Tk, C), f32, C = @p heads D. Head h reads columns [h D, (h + 1) D) of
 * every token of q, k and v and writes the same columns of the output (N, Tq, C), so heads need no permute or
 * reshape. With @p causal non-zero, query i sees key j only where j <= i + (Tk - Tq) (bottom-right aligned); a
 * query that sees no key outputs zeros. @p dropout in [0, 1) drops attention probabilities in training
 * (inverted scaling; the mask is reproducible from the context's seed and fixed between optimiser steps; the
 * evaluation and deterministic modes skip it). Memory: forward keeps only the log-sum-exp, N heads Tq floats;
 * backward recomputes the probabilities block by block, so no Tq x Tk matrix is stored.
 */
BPT_API bpt_status bpt_scaled_dot_product_attention(bpt_graph *graph, const char *name, bpt_node *q, bpt_node *k,
                                                    bpt_node *v, int64_t heads, int causal, float dropout,
                                                    bpt_node **out);
/**
 * [@p start, @p start + @p length) along @p axis of @p x (the batch counted as axis 0, which cannot be
 * sliced); every other axis is kept, and so are the batch and sequence marks (slicing the sequence axis gives a
 * shorter sequence). Three slices of the last axis split a fused (N, T, 3C) qkv projection into q, k and v. A
 * view of x (no copy) when every reader takes strided input (bpt_matmul(), and
 * bpt_scaled_dot_product_attention() on the CPU and CUDA), otherwise a copy. Backward gives dy to the matching part of dx (the
 * rest of dx gets nothing from this node).
 */
BPT_API bpt_status bpt_slice(bpt_graph *graph, const char *name, bpt_node *x, int axis, int64_t start, int64_t length,
                             bpt_node **out);
/**
 * The @p count (1 to 5) @p inputs joined along @p axis in order (the batch counted as axis 0, which cannot be
 * joined); every other axis must agree, and the inputs are all batched or all not. The output keeps input 0's
 * batch and sequence marks. A copy; backward gives each input its part of dy.
 */
BPT_API bpt_status bpt_concat(bpt_graph *graph, const char *name, int count, bpt_node *const *inputs, int axis,
                              bpt_node **out);
/**
 * Rows of a table by integer id, PyTorch's F.embedding: out[n, t, :] = table[ids[n, t], :].
 * @param ids batched i32 (N) or (N, T) (a sequence input keeps its mark: out is a sequence too)
 * @param table unbatched f32 (vocabulary, dim), usually a parameter
 * @param out (N, dim) or (N, T, dim)
 * An id outside [0, vocabulary) fails bpt_graph_forward() with BPT_ERR_INVALID_ARGUMENT, the message naming
 * the node, the sample (and token) and the id. The table's gradient is a scatter-add of dy into the rows the
 * ids name, summed in token order on every backend, so repeated ids give the same sum on every run.
 */
BPT_API bpt_status bpt_embedding(bpt_graph *graph, const char *name, bpt_node *ids, bpt_node *table, bpt_node **out);
/**
 * Mean over the batch of -log softmax(logits)[label], computed stably in one op; for a sequence, the mean over
 * every token of every sample.
 * @param logits (N, classes) f32, or a sequence's (N, T, classes)
 * @param labels (N) i32 input with values in [0, classes), or a sequence input (N, T) of the same length
 */
BPT_API bpt_status bpt_softmax_cross_entropy(bpt_graph *graph, const char *name, bpt_node *logits,
                                             bpt_node *labels, bpt_node **out);
/**
 * bpt_softmax_cross_entropy() with PyTorch's F.cross_entropy(ignore_index=, label_smoothing=) options:
 * positions whose label equals @p ignore_index contribute nothing and the mean is over the others (a batch
 * whose every position is ignored gives loss 0 and zero gradients); every other label must be in
 * [0, classes). With @p label_smoothing eps in [0, 1] a position costs (1 - eps) (-log p[label]) +
 * eps mean over classes of (-log p[c]). Pass -100 (PyTorch's default) when no label is to be ignored.
 * Runs on the CPU and CUDA; fpga-sim refuses it at compile (or leaves it to the CPU with cpu_fallback).
 */
BPT_API bpt_status bpt_softmax_cross_entropy_options(bpt_graph *graph, const char *name, bpt_node *logits,
                                                     bpt_node *labels, int64_t ignore_index, float label_smoothing,
                                                     bpt_node **out);
/** Mean over all elements of (prediction - target)^2; both nodes must have the same shape. */
BPT_API bpt_status bpt_mse_loss(bpt_graph *graph, const char *name, bpt_node *prediction, bpt_node *target,
                                bpt_node **out);

/**
 * Layer helper: creates parameters "<name>.weight" (out_features, in) with @p initializer and
 * "<name>.bias" (out_features, zeros), then a linear op named @p name.
 */
BPT_API bpt_status bpt_layer_linear(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_features,
                                    bpt_initializer initializer, bpt_node **out);

/**
 * Compiles the graph for batches of up to @p max_batch samples: infers shapes, orders the nodes,
 * plans and allocates memory, and initialises parameters from the context's seed. No nodes can be added
 * afterwards.
 * @param loss the scalar node that backward differentiates; NULL for an inference-only graph
 */
BPT_API bpt_status bpt_graph_compile(bpt_graph *graph, bpt_node *loss, int64_t max_batch);

/**
 * Copies one batch into input @p node. Dimension 0 of @p tensor is the batch size (1..max_batch); the
 * other dimensions and the dtype must match the input's declaration. All inputs of one run must agree.
 * A sequence input (bpt_graph_input_sequence()) also takes (batch, t, per-token dims...) for a t shorter than
 * its declared length; sequence inputs declared equally long must be fed equally long. The next forward then
 * runs every node at that length (each op's shape rule applied again); a node whose shape cannot follow it (a
 * parameter as long as the declared sequence, a reshape that merges the sequence axis with others) makes that
 * forward fail with BPT_ERR_SHAPE naming the node and the lengths (BPT_ERR_UNSUPPORTED where a node's kernels
 * do not take the shorter shapes).
 */
BPT_API bpt_status bpt_graph_set_input(bpt_graph *graph, bpt_node *node, const bpt_tensor *tensor);

/** Runs the forward pass on the batch set by bpt_graph_set_input(). */
BPT_API bpt_status bpt_graph_forward(bpt_graph *graph);

/** Runs the backward pass from the loss; parameter gradients are overwritten. Requires a forward first. */
BPT_API bpt_status bpt_graph_backward(bpt_graph *graph);

/** Like bpt_graph_backward() but adds to the parameter gradients (gradient accumulation). */
BPT_API bpt_status bpt_graph_backward_accumulate(bpt_graph *graph);

/** Sets every parameter gradient to zero. */
BPT_API bpt_status bpt_graph_zero_gradients(bpt_graph *graph);

/** Reads the loss of the last forward pass. */
BPT_API bpt_status bpt_graph_loss(bpt_graph *graph, float *loss);

/**
 * Copies @p node's value from the last forward pass into @p tensor, whose dimension 0 is set to the batch
 * size; after a run at a shorter sequence, a tensor of the node's rank takes the node's shape at that length
 * ((N, t, ...), and wherever else the length shows, as the heads' (N, H, t, D)). The tensor must have the node's dtype and enough capacity. Values that only forward needs share
 * memory (see docs/precision.md): reading one fails with BPT_ERR_STATE once a later node or backward has
 * reused its bytes, unless the graph keeps every value (keep_all_values in bpt_precision_options).
 */
BPT_API bpt_status bpt_graph_read(bpt_graph *graph, const bpt_node *node, bpt_tensor *tensor);

/** @return the total number of f32 parameter elements (0 before compile or for NULL). */
BPT_API int64_t bpt_graph_parameter_count(const bpt_graph *graph);

/** Copies all parameters, in declaration order, to @p values (bpt_graph_parameter_count() floats). */
BPT_API bpt_status bpt_graph_read_parameters(bpt_graph *graph, float *values, int64_t count);

/** Overwrites all parameters, in declaration order, from @p values. */
BPT_API bpt_status bpt_graph_write_parameters(bpt_graph *graph, const float *values, int64_t count);

/** Copies all parameter gradients, in declaration order, to @p values. */
BPT_API bpt_status bpt_graph_read_gradients(bpt_graph *graph, float *values, int64_t count);

/** Finds a node by name; returns ::BPT_ERR_INVALID_ARGUMENT when there is none. */
BPT_API bpt_status bpt_graph_find_node(bpt_graph *graph, const char *name, bpt_node **out);

/** @return the node's name ("" for NULL). */
BPT_API const char *bpt_node_name(const bpt_node *node);

/** @return the node's rank including the batch dimension where it has one. Valid after compile. */
BPT_API int bpt_node_rank(const bpt_node *node);

/**
 * @return the node's dimension @p axis as declared (dimension 0 is the compiled batch size for batched nodes;
 * a sequence axis is its declared length, whatever length the last run fed).
 */
BPT_API int64_t bpt_node_dim(const bpt_node *node, int axis);

BPT_EXTERN_C_END

#endif
