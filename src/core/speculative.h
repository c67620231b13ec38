/* Speculative backprop internals shared by speculative.c (the trainer: scheduling, gate, threads) and
 * speculative_chain.c (the layer chain, the per-label cache and the backward that starts from it). */
#ifndef BPT_CORE_SPECULATIVE_H
#define BPT_CORE_SPECULATIVE_H

#include <pthread.h>
#include <stdatomic.h>

#include "bptrain/speculative.h"
#include "core/graph.h"

/* One op of the chain, input to output: a linear layer or an element-wise activation. */
typedef struct bpt_speculative_layer {
  bpt_node *node;
  bpt_node *input;                 /* inputs[0] */
  bpt_node *weight, *bias;         /* linear only; bias may be NULL */
  int64_t in_features, out_features; /* per sample */
  int64_t input_offset, output_offset; /* element offsets of input and output values in a cache slot */
  float *retract_dy, *retract_x;   /* linear: rows of discarded speculative gradients (max_rows x out / in) */
} bpt_speculative_layer;

/* The cached forward state of one label: every chain value and the softmax output of its last sample. */
typedef struct bpt_speculative_slot {
  float *values;        /* device: slot_elements floats */
  float *probabilities; /* device: classes floats */
  float *host_probabilities;
  bool valid;
} bpt_speculative_slot;

struct bpt_speculative_trainer {
  bpt_graph *graph;
  bpt_context *context;
  bpt_backend *backend;
  bpt_optimizer *optimizer;
  bpt_speculative_options options;
  bpt_node *images, *labels, *loss, *logits;

  bpt_speculative_layer *layers;
  int layer_count;
  int64_t slot_elements, classes, features;
  bpt_speculative_slot *slots; /* one per class */
  int32_t *label_values;       /* device: 0 .. classes-1, so a label is a device pointer */
  float *ones;                 /* device: max_rows ones, for retracting bias gradients */
  int64_t max_rows;            /* rows of the retraction buffers (largest mini-batch so far) */
  int64_t retract_rows;        /* discarded speculative gradients in the current mini-batch */

  bpt_tensor *sample_images, *sample_labels; /* host, batch 1 */
  float *host_probabilities;                 /* the current sample's softmax output */
  float *host_gradients;                     /* clipping buffer */
  int64_t batches;
  bpt_speculative_counters counters;
  double distance_sum;
  int64_t distance_count;

  /* The speculative worker (2-thread mode). */
  bool threaded;
  pthread_t worker;
  atomic_long job_posted, job_done;
  atomic_bool stop;
  int job_label;
  bpt_status job_status;
};

/* Finds the chain from the images input to the logits; fails with BPT_ERR_UNSUPPORTED naming the node. */
bpt_status bpt_speculative_build_chain(bpt_speculative_trainer *trainer);
/* Allocates the per-label cache and the retraction buffers for mini-batches of up to rows samples. */
bpt_status bpt_speculative_reserve(bpt_speculative_trainer *trainer, int64_t rows);
void bpt_speculative_release(bpt_speculative_trainer *trainer);
/* Copies the graph's current (batch 1) forward state into the slot of label. */
bpt_status bpt_speculative_refresh(bpt_speculative_trainer *trainer, int label);
/* Adds the gradient of the cached state of label to the parameter gradients: the speculative backward.
 * Uses only the cache, the parameters and the chain's gradient buffers, so it may run beside a forward. */
bpt_status bpt_speculative_backward(bpt_speculative_trainer *trainer, int label);
/* Records the speculative gradient just computed for label as discarded (to retract at the batch end). */
bpt_status bpt_speculative_record_discard(bpt_speculative_trainer *trainer, int label);
/* Subtracts every discarded speculative gradient of the mini-batch from the parameter gradients. */
bpt_status bpt_speculative_retract(bpt_speculative_trainer *trainer);

#endif
