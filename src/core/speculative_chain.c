/* The layer chain behind speculative backprop: finding it in a graph, caching a sample's forward state per
 * label, and running the backward from a cached state (the same kernels, in the same order, as the graph's own
 * backward). speculative_retract.c takes discarded speculative gradients back out. */
#include <stdlib.h>
#include <string.h>

#include "core/speculative.h"

/* Each op declares its role in a chain (bpt_op_definition.speculative, in its own file). */
static bpt_speculative_role role(bpt_op_id op) { return bpt_op_get(op)->speculative; }
static bool is_activation(bpt_op_id op) { return role(op) == BPT_SPECULATIVE_ELEMENTWISE; }
static bool is_kernel_layer(bpt_op_id op) { return role(op) == BPT_SPECULATIVE_KERNELS; }
static bool is_chain_op(bpt_op_id op) { return role(op) != BPT_SPECULATIVE_NONE; }

/* The checks of one chain node beyond its op: parameters where the op takes them, kernels on the graph's backend. */
static bpt_status check_node(const bpt_speculative_trainer *trainer, const bpt_node *node, const char *where) {
  bpt_context *context = trainer->context;
  if (role(node->op) == BPT_SPECULATIVE_LINEAR &&
      (node->inputs[1]->op != BPT_OP_PARAMETER || (node->input_count > 2 && node->inputs[2]->op != BPT_OP_PARAMETER)))
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: linear '%s' must take parameters as weight and bias", where,
                     node->name);
  if (!is_kernel_layer(node->op)) return BPT_OK;
  for (int k = 1; k < node->input_count; k++)
    if (node->inputs[k] && node->inputs[k]->op != BPT_OP_PARAMETER)
      return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: %s '%s' must take parameters as its inputs after the first",
                       where, bpt_op_get(node->op)->name, node->name);
  if (bpt_node_find_parameter(node, "folded") && bpt_node_int_parameter(node, "folded", 0))
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: %s '%s' is folded into its convolution (forward only)", where,
                     bpt_op_get(node->op)->name, node->name);
  /* The capability query at compile decided where the node runs: the speculative backward calls its kernels
   * directly, on the graph's backend, so a node left to the CPU fallback (fpga-sim has no convolution or
   * pooling kernels) is refused here rather than mid-step. */
  if (!node->kernels || node->kernel_backend != trainer->backend)
    return bpt_error(context, BPT_ERR_UNSUPPORTED,
                     "%s: node '%s' (%s) has no kernels on backend '%s' (it runs on the CPU fallback); speculative "
                     "training runs every op of the chain on the graph's backend",
                     where, node->name, bpt_op_get(node->op)->name, trainer->backend->vtable->name);
  return BPT_OK;
}

/* The bytes of node->saved a batch-1 backward reads, at the start of the buffer (declared by the op). */
static size_t saved_bytes_of_one_sample(const bpt_node *node) {
  size_t (*bytes)(const bpt_node *) = bpt_op_get(node->op)->speculative_saved_bytes;
  return bytes ? bytes(node) : 0;
}

static void describe_layer(bpt_speculative_trainer *trainer, bpt_speculative_layer *layer, bpt_node *node) {
  layer->node = node;
  layer->input = node->inputs[0];
  layer->in_features = bpt_node_inner_count(node->inputs[0]);
  layer->out_features = bpt_node_inner_count(node);
  if (role(node->op) == BPT_SPECULATIVE_LINEAR) {
    layer->weight = node->inputs[1];
    layer->bias = node->input_count > 2 ? node->inputs[2] : NULL;
  }
  layer->kernel_layer = is_kernel_layer(node->op);
  for (int k = 0; k < BPT_MAX_INPUTS; k++)
    layer->parameter_offsets[k] = -1;
  if (!layer->kernel_layer) return;
  trainer->has_kernel_layers = true;
  for (int k = 1; k < node->input_count; k++) {
    const bpt_node *parameter = node->inputs[k];
    if (!parameter || !parameter->requires_grad) continue;
    layer->parameter_offsets[k] = layer->parameter_row;
    layer->parameter_row += bpt_node_inner_count(parameter);
  }
  layer->saved_bytes = saved_bytes_of_one_sample(node);
  layer->saved_offset = trainer->saved_bytes;
  trainer->saved_bytes += (layer->saved_bytes + 63) / 64 * 64;
}

bpt_status bpt_speculative_build_chain(bpt_speculative_trainer *trainer) {
  bpt_context *context = trainer->context;
  const char *where = "bpt_speculative_create";
  int count = 0;
  for (bpt_node *node = trainer->logits; node != trainer->images; node = node->inputs[0]) {
    if (!is_chain_op(node->op))
      return bpt_error(
          context, BPT_ERR_UNSUPPORTED,
          "%s: node '%s' (%s) is not a linear, activation, conv2d, batch_norm(_relu), pooling or reshape op; "
          "speculative training takes chains of those from the images input to a softmax cross-entropy "
          "loss",
          where, node->name, bpt_op_get(node->op)->name);
    if (node->sequence)
      return bpt_error(context, BPT_ERR_UNSUPPORTED,
                       "%s: node '%s' is a sequence; speculative training takes one row "
                       "per sample",
                       where, node->name);
    BPT_CHECK(check_node(trainer, node, where));
    if (!node->inputs[0] || node->inputs[0]->op == BPT_OP_PARAMETER ||
        (node->inputs[0]->op == BPT_OP_INPUT && node->inputs[0] != trainer->images))
      return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: node '%s' does not lead back to input '%s'", where,
                       node->name, trainer->images->name);
    /* The cache snapshots the chain's values after backward, and the speculative backward reads every one of
     * them except the logits of a final linear layer: none may be a transient value, whose bytes forward or
     * backward reuse (a ReLU keeping a 1-bit mask makes its input transient, for one). */
    if (node->value_transient && (node != trainer->logits || is_activation(node->op)))
      return bpt_error(context, BPT_ERR_STATE,
                       "%s: the value of '%s' is not kept after forward; set keep_all_values in "
                       "bpt_precision_options before compiling the graph",
                       where, node->name);
    count++;
  }
  trainer->layers = bpt_calloc(context, (size_t)count, sizeof *trainer->layers, "speculative layers");
  if (!trainer->layers) return BPT_ERR_OUT_OF_MEMORY;
  trainer->layer_count = count;
  int index = count;
  for (bpt_node *node = trainer->logits; node != trainer->images; node = node->inputs[0])
    describe_layer(trainer, &trainer->layers[--index], node);
  /* Slot layout: the images, then each layer's output, in chain order. */
  int64_t offset = trainer->features;
  for (int i = 0; i < count; i++) {
    trainer->layers[i].input_offset = i == 0 ? 0 : trainer->layers[i - 1].output_offset;
    trainer->layers[i].output_offset = offset;
    offset += trainer->layers[i].out_features;
  }
  trainer->slot_elements = offset;
  return BPT_OK;
}

bpt_status bpt_speculative_open_worker_backend(bpt_speculative_trainer *trainer) {
  if (!trainer->has_kernel_layers || trainer->worker_backend) return BPT_OK;
  bpt_backend *backend = trainer->backend;
  if (strcmp(backend->vtable->name, "cpu") != 0) {
    const bpt_speculative_layer *layer = trainer->layers;
    while (!layer->kernel_layer)
      layer++;
    return bpt_error(trainer->context, BPT_ERR_UNSUPPORTED,
                     "bpt_speculative_create: node '%s' (%s) with threads 2 needs the cpu backend, not '%s' (the "
                     "worker runs its kernels on a backend instance of its own); use threads 1",
                     layer->node->name, bpt_op_get(layer->node->op)->name, backend->vtable->name);
  }
  bpt_backend *worker = calloc(1, sizeof *worker);
  if (!worker) return bpt_error(trainer->context, BPT_ERR_OUT_OF_MEMORY, "bpt_speculative_create: worker backend");
  worker->vtable = backend->vtable;
  /* The graph's thread count: creating a CPU backend sets OpenMP's and OpenBLAS's, which must not change. */
  bpt_backend_options options = {.num_threads = backend->num_threads};
  bpt_status status = worker->vtable->create(worker, &options);
  if (status != BPT_OK) {
    bpt_status reported = bpt_error(trainer->context, status,
                                    "bpt_speculative_create: creating the worker's CPU "
                                    "backend: %s",
                                    worker->error_message);
    free(worker);
    return reported;
  }
  trainer->worker_backend = worker;
  return BPT_OK;
}

static bpt_status device_alloc(bpt_speculative_trainer *trainer, size_t bytes, void **out, const char *what) {
  bpt_backend *backend = trainer->backend;
  backend->error_message[0] = 0;
  if (backend->vtable->alloc(backend, bytes ? bytes : 64, out) != BPT_OK) {
    *out = NULL;
    return bpt_backend_error(trainer->context, BPT_ERR_OUT_OF_MEMORY, what);
  }
  return BPT_OK;
}

static void device_free(bpt_speculative_trainer *trainer, void *pointer) {
  if (pointer) trainer->backend->vtable->free(trainer->backend, pointer);
}

static void release_rows(bpt_speculative_trainer *trainer) {
  for (int i = 0; i < trainer->layer_count; i++) {
    device_free(trainer, trainer->layers[i].retract_dy);
    device_free(trainer, trainer->layers[i].retract_x);
    device_free(trainer, trainer->layers[i].retract_parameters);
    trainer->layers[i].retract_dy = trainer->layers[i].retract_x = trainer->layers[i].retract_parameters = NULL;
  }
  device_free(trainer, trainer->ones);
  trainer->ones = NULL;
  free(trainer->jobs);
  trainer->jobs = NULL;
  free(trainer->missed);
  trainer->missed = NULL;
  trainer->max_rows = 0;
}

static bpt_status reserve_worker_buffers(bpt_speculative_trainer *trainer) {
  const char *where = "bpt_speculative: allocating the worker's buffers";
  if (trainer->speculative_gradients) return BPT_OK;
  for (int i = 0; i < trainer->layer_count; i++) {
    BPT_CHECK(device_alloc(trainer, (size_t)trainer->layers[i].out_features * sizeof(float),
                           (void **)&trainer->layers[i].worker_gradient, where));
    if (trainer->layers[i].parameter_row)
      BPT_CHECK(device_alloc(trainer, (size_t)trainer->layers[i].parameter_row * sizeof(float),
                             (void **)&trainer->layers[i].worker_parameters, where));
  }
  size_t bytes = (size_t)trainer->graph->parameter_elements * sizeof(float);
  BPT_CHECK(device_alloc(trainer, bytes, (void **)&trainer->speculative_gradients, where));
  bpt_backend *backend = trainer->backend;
  if (backend->vtable->memset_zero(backend, trainer->speculative_gradients, bytes) != BPT_OK)
    return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, where);
  return BPT_OK;
}

bpt_status bpt_speculative_reserve(bpt_speculative_trainer *trainer, int64_t rows, bool worker_buffers) {
  const char *where = "bpt_speculative: allocating the cache";
  bpt_backend *backend = trainer->backend;
  if (!trainer->slots) {
    trainer->slots = bpt_calloc(trainer->context, (size_t)trainer->classes, sizeof *trainer->slots, "cache slots");
    if (!trainer->slots) return BPT_ERR_OUT_OF_MEMORY;
    for (int64_t c = 0; c < trainer->classes; c++) {
      for (int s = 0; s < 2; s++) {
        bpt_speculative_state *state = &trainer->slots[c].states[s];
        BPT_CHECK(
            device_alloc(trainer, (size_t)trainer->slot_elements * sizeof(float), (void **)&state->values, where));
        BPT_CHECK(
            device_alloc(trainer, (size_t)trainer->classes * sizeof(float), (void **)&state->probabilities, where));
        state->host_probabilities = bpt_calloc(trainer->context, (size_t)trainer->classes, sizeof(float), "cache");
        if (!state->host_probabilities) return BPT_ERR_OUT_OF_MEMORY;
        if (trainer->saved_bytes) BPT_CHECK(device_alloc(trainer, trainer->saved_bytes, (void **)&state->saved, where));
      }
    }
    BPT_CHECK(
        device_alloc(trainer, (size_t)trainer->classes * sizeof(int32_t), (void **)&trainer->label_values, where));
    int32_t *labels = bpt_calloc(trainer->context, (size_t)trainer->classes, sizeof *labels, "labels");
    if (!labels) return BPT_ERR_OUT_OF_MEMORY;
    for (int64_t c = 0; c < trainer->classes; c++)
      labels[c] = (int32_t)c;
    for (int i = 0; i < trainer->layer_count; i++) {
      bpt_status status = device_alloc(trainer, (size_t)trainer->layers[i].out_features * sizeof(float),
                                       (void **)&trainer->layers[i].main_gradient, where);
      if (status == BPT_OK && trainer->layers[i].parameter_row)
        status = device_alloc(trainer, (size_t)trainer->layers[i].parameter_row * sizeof(float),
                              (void **)&trainer->layers[i].main_parameters, where);
      if (status != BPT_OK) {
        free(labels);
        return status;
      }
    }
    bpt_status status =
        backend->vtable->upload(backend, trainer->label_values, labels, (size_t)trainer->classes * sizeof *labels);
    free(labels);
    if (status != BPT_OK) return bpt_backend_error(trainer->context, status, where);
  }
  if (worker_buffers) BPT_CHECK(reserve_worker_buffers(trainer));
  if (rows <= trainer->max_rows) return BPT_OK;
  release_rows(trainer);
  trainer->jobs = bpt_calloc(trainer->context, (size_t)rows, sizeof *trainer->jobs, "speculative jobs");
  trainer->missed = bpt_calloc(trainer->context, (size_t)rows, sizeof *trainer->missed, "gate results");
  if (!trainer->jobs || !trainer->missed) return BPT_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < trainer->layer_count; i++) {
    bpt_speculative_layer *layer = &trainer->layers[i];
    if (layer->parameter_row)
      BPT_CHECK(device_alloc(trainer, (size_t)(rows * layer->parameter_row) * sizeof(float),
                             (void **)&layer->retract_parameters, where));
    if (!layer->weight) continue;
    BPT_CHECK(device_alloc(trainer, (size_t)(rows * layer->out_features) * sizeof(float), (void **)&layer->retract_dy,
                           where));
    BPT_CHECK(
        device_alloc(trainer, (size_t)(rows * layer->in_features) * sizeof(float), (void **)&layer->retract_x, where));
  }
  BPT_CHECK(device_alloc(trainer, (size_t)rows * sizeof(float), (void **)&trainer->ones, where));
  float *ones = bpt_calloc(trainer->context, (size_t)rows, sizeof *ones, "ones");
  if (!ones) return BPT_ERR_OUT_OF_MEMORY;
  for (int64_t r = 0; r < rows; r++)
    ones[r] = 1.0f;
  bpt_status status = backend->vtable->upload(backend, trainer->ones, ones, (size_t)rows * sizeof *ones);
  free(ones);
  if (status != BPT_OK) return bpt_backend_error(trainer->context, status, where);
  trainer->max_rows = rows;
  return BPT_OK;
}

void bpt_speculative_release(bpt_speculative_trainer *trainer) {
  release_rows(trainer);
  for (int i = 0; i < trainer->layer_count; i++) {
    device_free(trainer, trainer->layers[i].worker_gradient);
    device_free(trainer, trainer->layers[i].main_gradient);
    device_free(trainer, trainer->layers[i].worker_parameters);
    device_free(trainer, trainer->layers[i].main_parameters);
    trainer->layers[i].worker_gradient = trainer->layers[i].main_gradient = NULL;
    trainer->layers[i].worker_parameters = trainer->layers[i].main_parameters = NULL;
  }
  device_free(trainer, trainer->speculative_gradients);
  trainer->speculative_gradients = NULL;
  if (trainer->slots) {
    for (int64_t c = 0; c < trainer->classes; c++) {
      for (int s = 0; s < 2; s++) {
        device_free(trainer, trainer->slots[c].states[s].values);
        device_free(trainer, trainer->slots[c].states[s].probabilities);
        device_free(trainer, trainer->slots[c].states[s].saved);
        free(trainer->slots[c].states[s].host_probabilities);
      }
    }
    free(trainer->slots);
    trainer->slots = NULL;
  }
  device_free(trainer, trainer->label_values);
  trainer->label_values = NULL;
  if (trainer->worker_backend) {
    trainer->worker_backend->vtable->destroy(trainer->worker_backend);
    free(trainer->worker_backend);
    trainer->worker_backend = NULL;
  }
}

static bpt_status copy(bpt_speculative_trainer *trainer, void *dst, const void *src, int64_t count, const char *what) {
  bpt_backend *backend = trainer->backend;
  bpt_status status = backend->vtable->copy(backend, dst, src, (size_t)count * sizeof(float));
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, what);
}

bpt_status bpt_speculative_refresh(bpt_speculative_trainer *trainer, int label) {
  bpt_speculative_slot *slot = &trainer->slots[label];
  bpt_speculative_state *state = &slot->states[1 - slot->active];
  const char *where = "bpt_speculative: refreshing the cache";
  BPT_CHECK(copy(trainer, state->values, trainer->images->value, trainer->features, where));
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    BPT_CHECK(copy(trainer, state->values + layer->output_offset, layer->node->value, layer->out_features, where));
    if (layer->saved_bytes) {
      bpt_backend *backend = trainer->backend;
      bpt_status status =
          backend->vtable->copy(backend, state->saved + layer->saved_offset, layer->node->saved, layer->saved_bytes);
      if (status != BPT_OK) return bpt_backend_error(trainer->context, status, where);
    }
  }
  BPT_CHECK(copy(trainer, state->probabilities, trainer->loss->saved, trainer->classes, where));
  memcpy(state->host_probabilities, trainer->host_probabilities, (size_t)trainer->classes * sizeof(float));
  slot->active = 1 - slot->active;
  slot->valid = true;
  return BPT_OK;
}

/* Kernel calls from the speculative backward may run on the worker thread, so failures are reported as a
 * status with the backend's message and turned into a context error by the caller, on the main thread. */
#define SPECULATIVE_KERNEL(member, ...)                                                                                \
  do {                                                                                                                 \
    if (!backend->vtable->member) return BPT_ERR_UNSUPPORTED;                                                          \
    bpt_status kernel_status_ = backend->vtable->member(backend, __VA_ARGS__);                                         \
    if (kernel_status_ != BPT_OK) return kernel_status_;                                                               \
  } while (0)

/* A chain node described for one sample, for its op's kernels; the caller points the tensors at the cached
 * state. ReLU reads x here (the cached state keeps no mask). */
static bpt_kernel_node one_sample(const bpt_node *node) {
  bpt_kernel_node description;
  bpt_node_describe(node, &description);
  for (int i = 0; i <= description.input_count; i++) {
    bpt_kernel_tensor *tensor = i < description.input_count ? &description.inputs[i] : &description.output;
    if (!(i < description.input_count ? node->inputs[i] : node)->batched) continue;
    tensor->dims[0] = 1;
    tensor->count = 1;
    for (int d = 0; d < tensor->rank; d++)
      tensor->count *= tensor->dims[d];
  }
  if (node->op == BPT_OP_RELU) description.int_attributes[0] = 0;
  return description;
}

void bpt_speculative_describe(bpt_speculative_trainer *trainer) {
  for (int i = 0; i < trainer->layer_count; i++)
    trainer->layers[i].sample_description = one_sample(trainer->layers[i].node);
  trainer->loss_description = one_sample(trainer->graph->loss);
}

#define SPECULATIVE_OP_BACKWARD(node, description)                                                                     \
  do {                                                                                                                 \
    if (!(node)->kernels || (node)->kernel_backend != backend) return BPT_ERR_UNSUPPORTED;                             \
    bpt_status kernel_status_ = (node)->kernels->backward(backend, (description));                                     \
    if (kernel_status_ != BPT_OK) return kernel_status_;                                                               \
  } while (0)

/* A kernel layer (conv2d, batch_norm, pooling): its kernels' backward on the cached x, y and saved buffer, with the
 * current parameters; its parameter gradients go to the layer's row (zeroed first), which is then added to the
 * sum and, for the worker, kept as the sample's retraction row. The worker calls the kernels on its own backend
 * instance (see bpt_speculative_trainer.worker_backend). */
static bpt_status kernel_layer_backward(bpt_speculative_trainer *trainer, const bpt_speculative_layer *layer,
                                        const bpt_speculative_state *state, bool worker_buffers, int64_t row,
                                        float *parameter_gradients, float *dx) {
  bpt_backend *backend = trainer->backend;
  bpt_backend *kernel_backend = worker_buffers && trainer->worker_backend ? trainer->worker_backend : backend;
  bpt_node *node = layer->node;
  float *parameters = worker_buffers ? layer->worker_parameters : layer->main_parameters;
  if (layer->parameter_row) SPECULATIVE_KERNEL(memset_zero, parameters, (size_t)layer->parameter_row * sizeof(float));
  bpt_kernel_node description = layer->sample_description;
  description.inputs[0].value = (float *)(state->values + layer->input_offset);
  description.inputs[0].grad = layer->input->requires_grad ? dx : NULL;
  description.output.value = (float *)(state->values + layer->output_offset);
  description.output.grad = worker_buffers ? layer->worker_gradient : layer->main_gradient;
  if (layer->saved_bytes) description.saved = state->saved + layer->saved_offset;
  for (int k = 1; k < description.input_count; k++)
    description.inputs[k].grad = layer->parameter_offsets[k] >= 0 ? parameters + layer->parameter_offsets[k] : NULL;
  if (!node->kernels || !node->kernels->backward) return BPT_ERR_UNSUPPORTED;
  bpt_status status = node->kernels->backward(kernel_backend, &description);
  if (status != BPT_OK) return status;
  for (int k = 1; k < node->input_count; k++) {
    if (layer->parameter_offsets[k] < 0) continue;
    const bpt_node *parameter = node->inputs[k];
    SPECULATIVE_KERNEL(add_scaled, bpt_node_inner_count(parameter), 1.0f, parameters + layer->parameter_offsets[k],
                       parameter_gradients + parameter->param_offset);
  }
  if (row >= 0 && layer->parameter_row)
    SPECULATIVE_KERNEL(copy, layer->retract_parameters + row * layer->parameter_row, parameters,
                       (size_t)layer->parameter_row * sizeof(float));
  return BPT_OK;
}

bpt_status bpt_speculative_backward(bpt_speculative_trainer *trainer, const bpt_speculative_state *state, int label,
                                    bool worker_buffers, int64_t row) {
  bpt_backend *backend = trainer->backend;
  float *parameter_gradients = worker_buffers ? trainer->speculative_gradients : trainer->graph->gradient_block;
  /* Gradients of the chain's values start at zero, as in the graph's own backward. */
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    float *gradient = worker_buffers ? layer->worker_gradient : layer->main_gradient;
    if (layer->node->requires_grad)
      SPECULATIVE_KERNEL(memset_zero, gradient, (size_t)layer->out_features * sizeof(float));
  }
  const bpt_speculative_layer *last = &trainer->layers[trainer->layer_count - 1];
  bpt_node *loss = trainer->graph->loss;
  bpt_kernel_node loss_description = trainer->loss_description;
  loss_description.saved = state->probabilities;
  loss_description.inputs[1].value = trainer->label_values + label;
  loss_description.inputs[0].grad = worker_buffers ? last->worker_gradient : last->main_gradient;
  loss_description.output.grad = trainer->graph->loss_gradient;
  SPECULATIVE_OP_BACKWARD(loss, &loss_description);
  for (int i = trainer->layer_count - 1; i >= 0; i--) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    const float *x = state->values + layer->input_offset, *y = state->values + layer->output_offset;
    bpt_node *node = layer->node, *input = layer->input;
    float *dy = worker_buffers ? layer->worker_gradient : layer->main_gradient;
    float *dx = NULL;
    if (i > 0) dx = worker_buffers ? trainer->layers[i - 1].worker_gradient : trainer->layers[i - 1].main_gradient;
    if (layer->kernel_layer) {
      bpt_status status = kernel_layer_backward(trainer, layer, state, worker_buffers, row, parameter_gradients, dx);
      if (status != BPT_OK) return status;
      continue;
    }
    if (role(node->op) == BPT_SPECULATIVE_VIEW) {
      /* reshape's own backward: dx += dy, same values under another shape */
      if (input->requires_grad) SPECULATIVE_KERNEL(add_scaled, layer->out_features, 1.0f, dy, dx);
      continue;
    }
    if (!layer->weight) {
      if (input->requires_grad) {
        bpt_kernel_node description = layer->sample_description;
        description.inputs[0].value = (float *)x;
        description.inputs[0].grad = dx;
        description.output.value = (float *)y;
        description.output.grad = dy;
        SPECULATIVE_OP_BACKWARD(node, &description);
      }
      continue;
    }
    int64_t in = layer->in_features, out = layer->out_features;
    if (layer->weight->requires_grad) {
      /* dW (out, in) += dy^T (out, 1) . x (1, in) */
      bpt_gemm_args product = {.transpose_a = true,
                               .m = out,
                               .n = in,
                               .k = 1,
                               .alpha = 1.0f,
                               .a = dy,
                               .lda = out,
                               .b = x,
                               .ldb = in,
                               .beta = 1.0f,
                               .c = parameter_gradients + layer->weight->param_offset,
                               .ldc = in};
      SPECULATIVE_KERNEL(gemm, &product);
    }
    if (layer->bias && layer->bias->requires_grad) {
      /* linear's kernels are its bias terms: db += dy */
      bpt_kernel_node description = layer->sample_description;
      description.output.grad = dy;
      description.inputs[2].grad = parameter_gradients + layer->bias->param_offset;
      SPECULATIVE_OP_BACKWARD(node, &description);
    }
    if (input->requires_grad) {
      /* dx (1, in) += dy (1, out) . W (out, in), with the current weights */
      bpt_gemm_args product = {.m = 1,
                               .n = in,
                               .k = out,
                               .alpha = 1.0f,
                               .a = dy,
                               .lda = out,
                               .b = layer->weight->value,
                               .ldb = in,
                               .beta = 1.0f,
                               .c = dx,
                               .ldc = in};
      SPECULATIVE_KERNEL(gemm, &product);
    }
    if (row >= 0) {
      SPECULATIVE_KERNEL(copy, layer->retract_dy + row * out, dy, (size_t)out * sizeof(float));
      SPECULATIVE_KERNEL(copy, layer->retract_x + row * in, x, (size_t)in * sizeof(float));
    }
  }
  return BPT_OK;
}
