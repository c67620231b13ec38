/**
 * @file introspection.h
 * @brief Looking into a graph: its nodes and parameters in order, op names, and statistics of a node's values.
 */
#ifndef BPTRAIN_INTROSPECTION_H
#define BPTRAIN_INTROSPECTION_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** @return the number of parameters (buffers included) of a compiled graph. */
BPT_API int bpt_graph_parameter_node_count(const bpt_graph *graph);

/** @return parameter @p index in declaration order, or NULL. */
BPT_API bpt_node *bpt_graph_parameter_node(const bpt_graph *graph, int index);

/** @return 1 for a trainable parameter, 0 for buffers and non-parameters. */
BPT_API int bpt_node_is_trainable(const bpt_node *node);

/** @return the number of nodes in the graph (inputs, parameters and ops), or 0 for NULL. */
BPT_API int bpt_graph_node_count(const bpt_graph *graph);

/** @return node @p index in creation order (a topological order), or NULL. */
BPT_API bpt_node *bpt_graph_node(const bpt_graph *graph, int index);

/** @return the node's op name ("conv2d", "relu", "parameter", ...), or "" for NULL. */
BPT_API const char *bpt_node_op_name(const bpt_node *node);

/** Statistics of a node's values from the last forward pass (per layer: dead ReLUs show as zeros). */
typedef struct bpt_value_statistics {
  size_t size;               /**< set by the caller to sizeof(bpt_value_statistics); the bytes written on return */
  double mean;               /**< mean of the values */
  double standard_deviation; /**< population standard deviation */
  double zero_fraction;      /**< fraction of values exactly 0 */
  int64_t count;             /**< number of values (batch included) */
} bpt_value_statistics;

/** Computes statistics of @p node's values for the current batch; an older caller's smaller struct is
 * filled up to its size field and not beyond. */
BPT_API bpt_status bpt_graph_value_statistics(bpt_graph *graph, const bpt_node *node, bpt_value_statistics *statistics);

BPT_EXTERN_C_END

#endif
