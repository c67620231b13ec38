/* Discarded speculative gradients: recording them (one row per discarded sample: a linear layer's dy and
 * input, a kernel layer's parameter gradients), collecting the worker's rows of the missed samples, merging
 * the worker's gradient sum, and subtracting every discarded term with one product per parameter. */
#include "core/speculative.h"

static bpt_status copy(bpt_speculative_trainer *trainer, void *dst, const void *src, int64_t count, const char *what) {
  bpt_backend *backend = trainer->backend;
  bpt_status status = backend->vtable->copy(backend, dst, src, (size_t)count * sizeof(float));
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, what);
}

bpt_status bpt_speculative_record_discard(bpt_speculative_trainer *trainer, const bpt_speculative_state *state) {
  const char *where = "bpt_speculative: recording a discarded gradient";
  int64_t row = trainer->retract_rows;
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    if (layer->parameter_row)
      BPT_CHECK(copy(trainer, layer->retract_parameters + row * layer->parameter_row, layer->main_parameters,
                     layer->parameter_row, where));
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
      if (layer->parameter_row)
        BPT_CHECK(copy(trainer, layer->retract_parameters + kept * layer->parameter_row,
                       layer->retract_parameters + row * layer->parameter_row, layer->parameter_row, where));
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
  /* gradients += speculative: add_scaled with alpha 1 adds exactly, as the product with a one would */
  bpt_status status =
      backend->vtable->add_scaled(backend, count, 1.0f, trainer->speculative_gradients, trainer->graph->gradient_block);
  if (status == BPT_OK)
    status = backend->vtable->memset_zero(backend, trainer->speculative_gradients, (size_t)count * sizeof(float));
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, "bpt_speculative: merging gradients");
}

/* A kernel layer's parameters: grad (1, n) -= ones (1, rows) . R (rows, n), R the discarded rows' slice of each
 * parameter (row stride parameter_row). */
static bpt_status retract_kernel_layer(bpt_speculative_trainer *trainer, const bpt_speculative_layer *layer,
                                       int64_t rows) {
  bpt_backend *backend = trainer->backend;
  for (int k = 1; k < layer->node->input_count; k++) {
    if (layer->parameter_offsets[k] < 0) continue;
    const bpt_node *parameter = layer->node->inputs[k];
    const int64_t n = bpt_node_inner_count(parameter);
    bpt_gemm_args product = {.m = 1,
                             .n = n,
                             .k = rows,
                             .alpha = -1.0f,
                             .a = trainer->ones,
                             .lda = rows,
                             .b = layer->retract_parameters + layer->parameter_offsets[k],
                             .ldb = layer->parameter_row,
                             .beta = 1.0f,
                             .c = parameter->grad,
                             .ldc = n};
    bpt_status status = backend->vtable->gemm(backend, &product);
    if (status != BPT_OK) return bpt_backend_error(trainer->context, status, "bpt_speculative: retracting gradients");
  }
  return BPT_OK;
}

bpt_status bpt_speculative_retract(bpt_speculative_trainer *trainer) {
  bpt_backend *backend = trainer->backend;
  int64_t rows = trainer->retract_rows;
  trainer->retract_rows = 0;
  if (rows == 0) return BPT_OK;
  for (int i = 0; i < trainer->layer_count; i++) {
    const bpt_speculative_layer *layer = &trainer->layers[i];
    if (layer->parameter_row) BPT_CHECK(retract_kernel_layer(trainer, layer, rows));
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
