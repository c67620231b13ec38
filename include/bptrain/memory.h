/**
 * @file memory.h
 * @brief The memory a compiled graph holds: activations, transient values, gradients, parameters and inputs.
 */
#ifndef BPTRAIN_MEMORY_H
#define BPTRAIN_MEMORY_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** Memory a compiled graph holds, for its compiled (largest) batch. */
typedef struct bpt_graph_memory_stats {
  size_t size;                  /**< set to sizeof(bpt_graph_memory_stats) by the caller */
  int64_t max_batch;            /**< the batch the figures below are for */
  size_t activation_bytes_held; /**< values and op buffers kept from forward until backward */
  size_t transient_bytes;       /**< memory reused by values that only forward needs */
  size_t gradient_bytes;        /**< activation gradients, shared by backward lifetime; the same bytes as the
                                     transient values, so the two overlap rather than add */
  size_t parameter_bytes;       /**< master parameters, their gradients and compute-dtype weight copies (under
                                     bf16: 2-byte copies, plus f32 ones of the parameters not only linears read) */
  size_t input_bytes;           /**< the part of activation_bytes_held that is graph inputs */
  size_t recompute_bytes;       /**< the part of activation_bytes_held that recompute segments share */
  size_t activation_bytes;      /**< all activation memory: held values, op buffers and the transient/gradient
                                     region, in each activation's storage dtype (bf16 where the bf16 policy
                                     stores it so, docs/precision.md) */
  size_t activation_bytes_f32;  /**< activation_bytes as planned with every activation stored in f32 */
} bpt_graph_memory_stats;

/** Fills @p stats (whose size field the caller sets) for a compiled graph: at most stats->size bytes are
 * written, and the size field then says how many. */
BPT_API bpt_status bpt_graph_memory(const bpt_graph *graph, bpt_graph_memory_stats *stats);

/**
 * Activation recomputation ("gradient checkpointing"): the nodes created from @p first to @p last (inclusive, in
 * creation order) form a segment whose values only the segment itself reads are not kept from forward to
 * backward; backward computes them again just before the segment's backward. All segments share one region the
 * size of the largest segment's values, so a stack of L marked blocks holds about one block's activations
 * instead of L, for about one more forward pass of compute. Values read outside the segment are kept as usual.
 * Call before bpt_graph_compile(); segments may not overlap. Fails with ::BPT_ERR_UNSUPPORTED for a segment
 * holding an op whose forward changes state (batch norm's running statistics, a key/value cache).
 */
BPT_API bpt_status bpt_graph_recompute_segment(bpt_graph *graph, bpt_node *first, bpt_node *last);

BPT_EXTERN_C_END

#endif
