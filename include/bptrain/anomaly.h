/**
 * @file anomaly.h
 * @brief Anomaly detection: an opt-in debugging mode that checks every node's value for inf and NaN during
 * the forward pass (and every gradient during the backward pass) and stops at the first one, naming the op,
 * its shape and the pass.
 */
#ifndef BPTRAIN_ANOMALY_H
#define BPTRAIN_ANOMALY_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/**
 * Turns anomaly detection on (@p enabled non-zero) or off. While on, bpt_graph_forward() checks each input,
 * parameter and op output in order right after it is computed and fails with ::BPT_ERR_NUMERIC at the first
 * inf or NaN, with a message such as "anomaly: linear 'fc2' (shape 32x10) produced NaN at element 17 (3
 * non-finite values) in forward pass 5; its inputs are finite". bpt_graph_backward() likewise checks the input
 * gradients each op's backward produced ("anomaly: backward of linear 'fc2' produced -inf in the gradient of
 * relu 'relu' (shape 3x5) ..."). Every check copies values to the host, so it is
 * slow: use it to find where a run diverges, not in production.
 */
BPT_API bpt_status bpt_graph_set_anomaly_detection(bpt_graph *graph, int enabled);

/** @return 1 when anomaly detection is on, 0 when off or for NULL. */
BPT_API int bpt_graph_anomaly_detection(const bpt_graph *graph);

/**
 * Turns the per-step parameter check on (@p enabled non-zero, the default) or off. While on,
 * bpt_optimizer_step() checks the parameter block on the backend after each update (one vectorised pass over the
 * parameters: 1-2% of a 784-512-256-10 MLP step at batch 128, less for convolutional networks, whose steps do
 * far more work per parameter) and fails with ::BPT_ERR_NUMERIC when the update made
 * any parameter inf or NaN, naming the first one ("bpt_optimizer_step: step 12 made parameter 'fc1.weight'
 * non-finite (NaN at element 0, 784 non-finite values); ..."). The update has then been applied: restore a
 * checkpoint or stop. Independent of anomaly detection, which names the op that first produced the value.
 */
BPT_API bpt_status bpt_graph_set_parameter_check(bpt_graph *graph, int enabled);

/** @return 1 when the per-step parameter check is on (the default), 0 when off or for NULL. */
BPT_API int bpt_graph_parameter_check(const bpt_graph *graph);

BPT_EXTERN_C_END

#endif
