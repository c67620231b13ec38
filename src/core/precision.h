/* The engine side of a graph's precision policy (see include/bptrain/precision.h and docs/precision.md):
 * hooks that compile.c, run.c and optimizer.c call at fixed points, so the policy lives in one file. */
#ifndef BPT_CORE_PRECISION_H
#define BPT_CORE_PRECISION_H

#include <stdbool.h>

#include "bptrain/precision.h"

typedef struct bpt_precision_state {
  bpt_precision_options options;
  bool scaling;             /* dynamic loss scaling is on */
  float loss_scale;         /* 1 without scaling */
  int64_t clean_steps;      /* since the last change of the scale */
  int64_t skipped_steps;
  float *weight_copies;     /* device: parameters rounded to the compute dtype (NULL for f32) */
  uint16_t *weight_bf16;    /* device: the same copies as bf16 codes, where a linear reads them (else NULL) */
  size_t copy_bytes;        /* the two blocks above together, for bpt_graph_memory */
  int32_t *found_nonfinite; /* device: one flag for unscale_check_finite */
  float *widen_scratch;     /* device: f32 copies of bf16-stored tensors around f32-only kernels (kernel_call.c) */
  size_t widen_scratch_bytes;
  /* Tests only: with 16-bit storage, keep values read by more than one node in f32 (storage.c), so that
   * storage and the rounding path give the same gradients, not only the same forward values. */
  bool single_reader_storage;
} bpt_precision_state;

/* After the memory plan: allocates weight copies and the flag, points parameters at the copies, seeds the
 * loss gradient with the loss scale. */
bpt_status bpt_precision_compile(bpt_graph *graph);
/* Frees what bpt_precision_compile allocated (the options survive, so compile can be retried). */
void bpt_precision_release(bpt_graph *graph);
/* Frees the state itself, with the graph. */
void bpt_precision_destroy(bpt_graph *graph);

/* The bf16 copy of weight for consumer's products, or NULL where there is none or consumer's kernels (which
 * the copy is handed to) do not take bf16 storage. */
const void *bpt_precision_weight_bf16(const bpt_node *consumer, const bpt_node *weight);
/* Whether node's kernels take bf16 storage where they run (storage.c). */
bool bpt_node_kernels_take_bf16(const bpt_node *node);
/* Whether node's kernels take f32 only but may be handed bf16-stored tensors widened into f32 scratch around
 * the call (its op is kernels_only, on the graph's backend, which casts; storage.c). */
bool bpt_node_kernels_widen_bf16(const bpt_node *node);
/* At least bytes of f32 scratch on the graph's backend for those widened calls, grown as needed and kept until
 * bpt_precision_release. */
bpt_status bpt_precision_widen_scratch(bpt_graph *graph, size_t bytes, float **scratch);

/* Forward: refresh the weight copies from the f32 masters, then round every op's output. */
bpt_status bpt_precision_before_forward(bpt_graph *graph);
bpt_status bpt_precision_after_forward_node(bpt_node *node);
/* Sets every node's storage dtype (storage.c): its dtype, or bf16 for the bf16 policy's activations whose
 * producer and consumers take bf16 storage; all_f32 plans f32 everywhere (for the f32 figure of
 * bpt_graph_memory). Run after kernel selection and before the memory plan. */
bpt_status bpt_precision_plan_storage(bpt_graph *graph, bool all_f32);
/* Whether the graph's policy asks for 16-bit storage (bf16 compute, store_activations_16bit, saved activations
 * in the compute dtype): what the storage plan then applies. */
bool bpt_precision_stores_16bit(const bpt_graph *graph);
/* Downloads count elements of one of node's buffers (its value or gradient, stored in node->storage) into host
 * as f32; host holds count floats. */
/* Uploads count f32 values from host into node's value, narrowed to its storage dtype on the way (rounded to
 * nearest even, as the rounding pass would round them on the device). */
bpt_status bpt_node_upload_f32(const bpt_node *node, const float *host, int64_t count);
bpt_status bpt_node_download_f32(const bpt_node *node, const void *device, int64_t count, float *host);
/* Whether forward read node's values from its bf16 copy alone: a weight that only linears read under the bf16
 * policy has no rounded f32 copy, and its value is the f32 master (precision.c). */
bool bpt_node_forward_read_bf16_copy(const bpt_node *node);
/* The count values forward read of node, as f32 on the host: its storage widened, or its bf16 copy where
 * bpt_node_forward_read_bf16_copy. */
bpt_status bpt_node_read_forward_f32(const bpt_node *node, int64_t count, float *host);
/* Backward: round each activation gradient once complete. */
bpt_status bpt_precision_before_backward_node(bpt_node *node);
/* Rounds the parameter gradients to the compute dtype (called by bpt_precision_before_step). */
bpt_status bpt_precision_round_gradients(bpt_graph *graph);
/* Before an optimiser update of a graph with a policy (never called without one): unscale and check the gradients (one
 * kernel pass), update the loss scale, and set *skip when the update must be skipped. Fails with BPT_ERR_NUMERIC,
 * naming the first op whose output went non-finite, when the loss or (without scaling) a gradient is not finite. */
bpt_status bpt_precision_before_step(bpt_graph *graph, bool *skip);
/* The one rule for a dynamic loss scaler's state, used by bpt_graph_set_precision (the initial scale) and by the
 * checkpoint loader (a saved scaler), so whatever the scaler can hold is saved and loaded alike. */
bpt_status bpt_precision_check_scaler(bpt_context *context, float loss_scale, int64_t clean_steps,
                                      int64_t skipped_steps, const char *where);
/* Whether the graph's products may run on bf16 operands (a bf16 policy): the GEMMs of linear and conv2d pass it
 * to the backend (bpt_gemm_args.bf16_products), which uses bf16 arithmetic where the hardware has it. */
bool bpt_graph_bf16_products(const bpt_graph *graph);
/* Checkpoints: puts back a saved dynamic loss scaler (the scale seeds the loss gradient). */
bpt_status bpt_precision_restore_scaler(bpt_graph *graph, float loss_scale, int64_t clean_steps,
                                        int64_t skipped_steps);

#endif
