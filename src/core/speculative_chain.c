/* The layer chain behind speculative backprop: finding it in a graph, caching a sample's forward state per
 * label, running the backward from a cached state (the same kernels, in the same order, as the graph's own
 * backward), and retracting discarded speculative gradients with one rank-k product per layer. */
#include <stdlib.h>
#include <string.h>

#include "core/speculative.h"

static bool is_activation(bpt_op_id op) {
  return op == BPT_OP_RELU || op == BPT_OP_LEAKY_RELU || op == BPT_OP_SIGMOID || op == BPT_OP_TANH;
}

bpt_status bpt_speculative_build_chain(bpt_speculative_trainer *trainer) {
  bpt_context *context = trainer->context;
  const char *where = "bpt_speculative_create";
  int count = 0;
  for (bpt_node *node = trainer->logits; node != trainer->images; node = node->inputs[0]) {
    if (node->op != BPT_OP_LINEAR && !is_activation(node->op))
      return bpt_error(context, BPT_ERR_UNSUPPORTED,
                       "%s: node '%s' (%s) is not a linear or activation op; speculative training takes chains of "
                       "those from the images input to a softmax cross-entropy loss",
                       where, node->name, bpt_op_get(node->op)->name);
    if (node->sequence)
      return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: node '%s' is a sequence; speculative training takes one row "
                       "per sample", where, node->name);
    if (node->op == BPT_OP_LINEAR &&
        (node->inputs[1]->op != BPT_OP_PARAMETER || (node->input_count > 2 && node->inputs[2]->op != BPT_OP_PARAMETER)))
      return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: linear '%s' must take parameters as weight and bias", where,
                       node->name);
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
  for (bpt_node *node = trainer->logits; node != trainer->images; node = node->inputs[0]) {
    bpt_speculative_layer *layer = &trainer->layers[--index];
    layer->node = node;
    layer->input = node->inputs[0];
    layer->in_features = bpt_node_inner_count(node->inputs[0]);
    layer->out_features = bpt_node_inner_count(node);
    if (node->op == BPT_OP_LINEAR) {
      layer->weight = node->inputs[1];
      layer->bias = node->input_count > 2 ? node->inputs[2] : NULL;
    }
  }
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
    trainer->layers[i].retract_dy = trainer->layers[i].retract_x = NULL;
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
  for (int i = 0; i < trainer->layer_count; i++)
    BPT_CHECK(device_alloc(trainer, (size_t)trainer->layers[i].out_features * sizeof(float),
                           (void **)&trainer->layers[i].worker_gradient, where));
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
    trainer->layers[i].worker_gradient = trainer->layers[i].main_gradient = NULL;
  }
  device_free(trainer, trainer->speculative_gradients);
  trainer->speculative_gradients = NULL;
  if (trainer->slots) {
    for (int64_t c = 0; c < trainer->classes; c++) {
      for (int s = 0; s < 2; s++) {
        device_free(trainer, trainer->slots[c].states[s].values);
        device_free(trainer, trainer->slots[c].states[s].probabilities);
        free(trainer->slots[c].states[s].host_probabilities);
      }
    }
    free(trainer->slots);
    trainer->slots = NULL;
  }
  device_free(trainer, trainer->label_values);
  trainer->label_values = NULL;
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

#define SPECULATIVE_OP_BACKWARD(node, description)                                                                     \
  do {                                                                                                                 \
    if (!(node)->kernels || (node)->kernel_backend != backend) return BPT_ERR_UNSUPPORTED;                             \
    bpt_status kernel_status_ = (node)->kernels->backward(backend, (description));                                     \
    if (kernel_status_ != BPT_OK) return kernel_status_;                                                               \
  } while (0)

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
  bpt_kernel_node loss_description = one_sample(loss);
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
    if (!layer->weight) {
      if (input->requires_grad) {
        bpt_kernel_node description = one_sample(node);
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
      bpt_kernel_node description = one_sample(node);
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

bpt_status bpt_speculative_record_discard(bpt_speculative_trainer *trainer, const bpt_speculative_state *state) {
  const char *where = "bpt_speculative: recording a discarded gradient";
  int64_t row = trainer->retract_rows;
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    if (!layer->weight) continue;
    BPT_CHECK(
        copy(trainer, layer->retract_dy + row * layer->out_features, layer->main_gradient, layer->out_features, where));
    BPT_CHECK(copy(trainer, layer->retract_x + row * layer->in_features, state->values + layer->input_offset,
                   layer->in_features, where));
  }
  trainer->retract_rows++;
  return BPT_OK;
}

bpt_status bpt_speculative_compact_rows(bpt_speculative_trainer *trainer, const bool *missed, int64_t count) {
  const char *where = "bpt_speculative: collecting discarded gradients";
  int64_t kept = 0;
  for (int64_t row = 0; row < count; row++) {
    if (!missed[row]) continue;
    for (int i = 0; kept != row && i < trainer->layer_count; i++) {
      const bpt_speculative_layer *layer = &trainer->layers[i];
      if (!layer->weight) continue;
      BPT_CHECK(copy(trainer, layer->retract_dy + kept * layer->out_features,
                     layer->retract_dy + row * layer->out_features, layer->out_features, where));
      BPT_CHECK(copy(trainer, layer->retract_x + kept * layer->in_features, layer->retract_x + row * layer->in_features,
                     layer->in_features, where));
    }
    kept++;
  }
  trainer->retract_rows = kept;
  return BPT_OK;
}

bpt_status bpt_speculative_merge(bpt_speculative_trainer *trainer) {
  bpt_backend *backend = trainer->backend;
  int64_t count = trainer->graph->parameter_elements;
  /* gradients (1, count) += ones (1, 1) . speculative (1, count): an axpy through the one kernel every backend has */
  bpt_gemm_args product = {.m = 1,
                           .n = count,
                           .k = 1,
                           .alpha = 1.0f,
                           .a = trainer->ones,
                           .lda = 1,
                           .b = trainer->speculative_gradients,
                           .ldb = count,
                           .beta = 1.0f,
                           .c = trainer->graph->gradient_block,
                           .ldc = count};
  bpt_status status = backend->vtable->gemm(backend, &product);
  if (status == BPT_OK)
    status = backend->vtable->memset_zero(backend, trainer->speculative_gradients, (size_t)count * sizeof(float));
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, "bpt_speculative: merging gradients");
}

bpt_status bpt_speculative_retract(bpt_speculative_trainer *trainer) {
  bpt_backend *backend = trainer->backend;
  int64_t rows = trainer->retract_rows;
  trainer->retract_rows = 0;
  if (rows == 0) return BPT_OK;
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    if (!layer->weight) continue;
    int64_t in = layer->in_features, out = layer->out_features;
    bpt_status status = BPT_OK;
    if (layer->weight->requires_grad) {
      /* dW (out, in) -= DY^T (out, rows) . X (rows, in): every discarded rank-1 term in one product */
      bpt_gemm_args product = {.transpose_a = true,
                               .m = out,
                               .n = in,
                               .k = rows,
                               .alpha = -1.0f,
                               .a = layer->retract_dy,
                               .lda = out,
                               .b = layer->retract_x,
                               .ldb = in,
                               .beta = 1.0f,
                               .c = layer->weight->grad,
                               .ldc = in};
      status = backend->vtable->gemm(backend, &product);
    }
    if (status == BPT_OK && layer->bias && layer->bias->requires_grad) {
      /* db (1, out) -= ones (1, rows) . DY (rows, out) */
      bpt_gemm_args product = {.m = 1,
                               .n = out,
                               .k = rows,
                               .alpha = -1.0f,
                               .a = trainer->ones,
                               .lda = rows,
                               .b = layer->retract_dy,
                               .ldb = out,
                               .beta = 1.0f,
                               .c = layer->bias->grad,
                               .ldc = out};
      status = backend->vtable->gemm(backend, &product);
    }
    if (status != BPT_OK) return bpt_backend_error(trainer->context, status, "bpt_speculative: retracting gradients");
  }
  return BPT_OK;
}
