/* Speculative backprop internals shared by speculative.c (the trainer: scheduling, gate, threads) and
 * speculative_chain.c (the layer chain, the per-label cache and the backward that starts from it). */
#ifndef BPT_CORE_SPECULATIVE_H
#define BPT_CORE_SPECULATIVE_H

#include <pthread.h>
#include <stdatomic.h>

#include "bptrain/speculative.h"
#include "core/graph.h"

/* One op of the chain, input to output: a linear layer, an element-wise activation, a reshape, or an op whose
 * kernels do the whole backward (conv2d, batch_norm, max/avg pooling: the "kernel layers"). */
typedef struct bpt_speculative_layer {
  bpt_node *node;
  bpt_node *input;                     /* inputs[0] */
  bpt_node *weight, *bias;             /* linear only; bias may be NULL */
  bool kernel_layer;                   /* conv2d, batch_norm, pooling: node->kernels->backward does it all */
  /* Kernel layers with trainable parameters (conv2d, batch_norm): their gradients are written to a row of
   * parameter_row floats first (input k's at parameter_offsets[k], -1 for none), then added to the sum, so a
   * discarded one can be kept as that row and retracted like a linear bias. */
  int64_t parameter_row;
  int64_t parameter_offsets[BPT_MAX_INPUTS];
  float *main_parameters, *worker_parameters; /* one row each: the main thread's and the worker's */
  float *retract_parameters;                  /* max_rows rows */
  size_t saved_bytes, saved_offset; /* the bytes of node->saved its backward reads, and their place in a state */
  int64_t in_features, out_features;   /* per sample */
  int64_t input_offset, output_offset; /* element offsets of input and output values in a cache slot */
  float *retract_dy, *retract_x;       /* linear: rows of speculative gradient vectors (max_rows x out / in) */
  float *worker_gradient;              /* the worker's own gradient of this layer's output (out floats) */
  /* The main thread's gradient of this layer's output (out floats): not node->grad, whose bytes the graph's
   * memory plan shares with other nodes' gradients once backward is past them. */
  float *main_gradient;
  /* The node described for one sample (bpt_speculative_describe), so that the worker reads no graph state the
   * main thread's forward writes (the run's batch, per-node state). */
  bpt_kernel_node sample_description;
} bpt_speculative_layer;

/* A cached forward state: every chain value and the softmax output of one sample. */
typedef struct bpt_speculative_state {
  float *values;        /* device: slot_elements floats */
  float *probabilities; /* device: classes floats */
  unsigned char *saved; /* device: the kernel layers' saved buffers (max-pool winners, batch-norm statistics) */
  float *host_probabilities;
  long reader_job; /* the last worker job that reads this state (0: none) */
} bpt_speculative_state;

/* The cache of one label: two states, so a refresh can write one while the worker still reads the other. */
typedef struct bpt_speculative_slot {
  bpt_speculative_state states[2];
  int active;
  bool valid;
} bpt_speculative_slot;

/* One speculative backward for the worker: a sample's label, the cached state it starts from, its row. */
typedef struct bpt_speculative_job {
  int label;
  const bpt_speculative_state *state;
  int64_t row;
} bpt_speculative_job;

struct bpt_speculative_trainer {
  bpt_graph *graph; /* NULL once the graph was destroyed (bpt_graph_destroy detaches us) */
  bpt_attachment attachment;
  bpt_context *context;
  bpt_backend *backend;
  bpt_optimizer *optimizer;
  bpt_speculative_options options;
  bpt_node *images, *labels, *loss, *logits;

  bpt_speculative_layer *layers;
  int layer_count;
  bpt_kernel_node loss_description; /* the loss for one sample, as each layer's sample_description */
  int64_t slot_elements, classes, features;
  size_t saved_bytes; /* of a state's saved buffer; 0 (no buffer) for linear/activation chains */
  bool has_kernel_layers;
  /* 2-thread mode with kernel layers on the CPU: the worker runs their kernels on a CPU backend of its own,
   * because a backend's scratch memory (im2col columns, batch-norm sums) is per OpenMP thread number, and
   * the main thread and the worker are both thread 0 of their teams. NULL otherwise. */
  bpt_backend *worker_backend;
  bpt_speculative_slot *slots;  /* one per class */
  int32_t *label_values;        /* device: 0 .. classes-1, so a label is a device pointer */
  float *ones;                  /* device: max_rows ones, for retracting bias gradients */
  int64_t max_rows;             /* rows of the retraction buffers (largest mini-batch so far) */
  int64_t retract_rows;         /* discarded speculative gradients in the current mini-batch */
  float *speculative_gradients; /* device, 2-thread mode: the worker's gradient sum, merged per mini-batch */
  bool *missed;                 /* host, max_rows: 2-thread mode, speculated samples whose gate failed */

  bpt_tensor *sample_images, *sample_labels; /* host, batch 1 */
  float *host_probabilities;                 /* the current sample's softmax output */
  float *host_gradients;                     /* clipping buffer */
  int64_t batches;
  bpt_speculative_counters counters;
  double distance_sum;
  double main_wait_seconds; /* CPU time the main thread spent waiting for the worker in this mini-batch */
  int64_t distance_count;

  /* The speculative worker (2-thread mode). */
  bool threaded;
  pthread_t worker;
  atomic_long job_posted, job_done;
  atomic_bool stop;
  /* An idle worker (no job for a millisecond: threshold 0, evaluation, data loading) sleeps on `wake` until a
   * job or the stop is posted, instead of polling; `sleeping` tells the poster to signal. */
  pthread_mutex_t idle_lock;
  pthread_cond_t wake;
  atomic_bool sleeping;
  bool idle_sync; /* idle_lock and wake are initialised */
  bpt_speculative_job *jobs; /* max_rows entries, job number j at jobs[(j - 1) % max_rows] */
  bpt_status job_status;     /* the first failure of the worker, read after a drain */
};

/* Finds the chain from the images input to the logits; fails with BPT_ERR_UNSUPPORTED naming the node. */
bpt_status bpt_speculative_build_chain(bpt_speculative_trainer *trainer);
/* 2-thread mode: gives the worker its own instance of the backend when the chain has kernel layers (CPU only;
 * other backends are refused naming the node). */
bpt_status bpt_speculative_open_worker_backend(bpt_speculative_trainer *trainer);
/* Allocates the per-label cache and the row buffers for mini-batches of up to rows samples (and, with
 * worker_buffers, the worker's private gradients). Call only while the worker is idle. */
bpt_status bpt_speculative_reserve(bpt_speculative_trainer *trainer, int64_t rows, bool worker_buffers);
void bpt_speculative_release(bpt_speculative_trainer *trainer);
/* Copies the graph's current (batch 1) forward state into the inactive state of label's slot and makes it the
 * active one. The caller makes sure no worker job still reads the inactive state. */
bpt_status bpt_speculative_refresh(bpt_speculative_trainer *trainer, int label);
/* Describes each chain node and the loss for one sample, for the speculative backward's kernel calls. On the
 * main thread while the worker is idle (each mini-batch's start). */
void bpt_speculative_describe(bpt_speculative_trainer *trainer);
/* The speculative backward: adds the gradient of a cached state of label to the parameter gradients. Uses only
 * the state, the parameters and gradient buffers, so it may run beside a forward. With worker_buffers the
 * gradients go to the worker's own buffers (else the graph's); with row >= 0 each linear layer's dy and input
 * are also copied to that row of the row buffers. */
bpt_status bpt_speculative_backward(bpt_speculative_trainer *trainer, const bpt_speculative_state *state, int label,
                                    bool worker_buffers, int64_t row);
/* One-thread mode: records the speculative gradient just computed from state as discarded (row buffers). */
bpt_status bpt_speculative_record_discard(bpt_speculative_trainer *trainer, const bpt_speculative_state *state);
/* Two-thread mode: keeps the rows of the first count samples flagged in missed, in order, as the discarded ones. */
bpt_status bpt_speculative_compact_rows(bpt_speculative_trainer *trainer, const bool *missed, int64_t count);
/* Subtracts every discarded speculative gradient of the mini-batch from the parameter gradients. */
bpt_status bpt_speculative_retract(bpt_speculative_trainer *trainer);
/* Two-thread mode: graph gradients += the worker's gradients (one rank-1 product with a 1x1 one). */
bpt_status bpt_speculative_merge(bpt_speculative_trainer *trainer);

#endif
