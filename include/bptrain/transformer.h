/**
 * @file transformer.h
 * @brief The transformer block as a layer helper: pre-LN self-attention and a GELU MLP with residual joins,
 * parameters named so a user can predict them, and the weight-decay groups GPT-style training uses.
 */
#ifndef BPTRAIN_TRANSFORMER_H
#define BPTRAIN_TRANSFORMER_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** How bpt_layer_transformer_block() builds a block; get it from bpt_transformer_block_options_default(). */
typedef struct bpt_transformer_block_options {
  size_t size;                 /**< sizeof(bpt_transformer_block_options), set by the default function */
  int64_t heads;               /**< attention heads; the width C must be a multiple (default 4) */
  int64_t mlp_ratio;           /**< the MLP's hidden width is mlp_ratio * C (default 4) */
  float epsilon;               /**< layer-norm epsilon (default 1e-5) */
  float dropout;               /**< on attention probabilities and before each residual join, in training (0) */
  int causal;                  /**< token t attends to tokens <= t (default 1) */
  bpt_initializer initializer; /**< the four weight matrices (default ::BPT_INIT_NORMAL_SMALL) */
  int recompute;               /**< non-zero: the block is a recompute segment (bpt_graph_recompute_segment()):
                                    its activations are computed again in backward instead of kept (default 0) */
} bpt_transformer_block_options;

/** @return 4 heads, MLP ratio 4, epsilon 1e-5, no dropout, causal, N(0, 0.02^2) weights, no recomputation. */
BPT_API bpt_transformer_block_options bpt_transformer_block_options_default(void);

/**
 * A pre-LN transformer block on a sequence @p x (N, T, C): y = x + attn(LN(x)); out = y + MLP(LN(y)), with
 * attn a fused causal scaled dot-product attention over @p options->heads heads between a qkv projection and an
 * output projection, and MLP linear(C -> ratio C), GELU (tanh form), linear(ratio C -> C). Parameters:
 * "<name>.ln1.weight", "<name>.ln1.bias", "<name>.attn.qkv.weight", "<name>.attn.qkv.bias",
 * "<name>.attn.proj.weight", "<name>.attn.proj.bias", "<name>.ln2.weight", "<name>.ln2.bias",
 * "<name>.mlp.fc.weight", "<name>.mlp.fc.bias", "<name>.mlp.proj.weight", "<name>.mlp.proj.bias".
 * @param options NULL for the defaults
 */
BPT_API bpt_status bpt_layer_transformer_block(bpt_graph *graph, const char *name, bpt_node *x,
                                               const bpt_transformer_block_options *options, bpt_node **out);

/**
 * The generation form of bpt_layer_transformer_block(): the same parameters under the same names (so a trained
 * block's checkpoint loads into it), with the attention a bpt_kv_cache_attention() over @p capacity positions
 * fed by @p positions (i32 (N, T)). Dropout is off; @p options must be causal.
 */
BPT_API bpt_status bpt_layer_transformer_block_cached(bpt_graph *graph, const char *name, bpt_node *x,
                                                      bpt_node *positions, int64_t capacity,
                                                      const bpt_transformer_block_options *options, bpt_node **out);

/**
 * Causal multi-head attention for generation with a key/value cache: the node keeps the keys and values of its
 * earlier forward passes, so each new token attends to all earlier ones at O(T) cost instead of a forward over
 * the whole window. @p q, @p k, @p v (N, Tq, C) hold Tq new tokens (usually 1) at absolute @p positions (i32
 * (N, Tq), consecutive, in [0, @p capacity)); position 0 starts a sequence afresh. Heads and scale are those of
 * bpt_scaled_dot_product_attention(), so weights it trained decode here. Inference only (no backward); a position
 * out of range fails the forward with a message naming the node, the sample and the position.
 */
BPT_API bpt_status bpt_kv_cache_attention(bpt_graph *graph, const char *name, bpt_node *q, bpt_node *k, bpt_node *v,
                                          bpt_node *positions, int64_t heads, int64_t capacity, bpt_node **out);

BPT_EXTERN_C_END

#endif
