/* Layer helpers on top of the graph API: a layer creates its named parameters and ops in one call, a
 * ResNet basic block wires two conv-BN pairs and its shortcut, and a sequential stack builds a table of
 * layers, so an example's model reads like the architecture's diagram. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/cnn.h"
#include "core/graph.h"

#define NAME_SIZE (BPT_NAME_SIZE + 16)

/* Also sets *out to NULL, so that a failed layer leaves NULL, which the next builder reports with this error. */
static bpt_status check(bpt_graph *graph, const char *where, const void *x, const char *name, bpt_node **out) {
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!x || !name || !out)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: x, name and out must be non-NULL", where);
  if (graph->compiled)
    return bpt_error(graph->context, BPT_ERR_STATE, "%s '%s': the graph is already compiled; layers cannot be added",
                     where, name);
  return BPT_OK;
}

static bpt_status build_conv2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels, int64_t kernel,
                               int64_t stride, int64_t padding, int with_bias, bpt_node **out) {
  BPT_CHECK(check(graph, "bpt_layer_conv2d", x, name, out));
  if (x->rank != 4 || !x->batched)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "bpt_layer_conv2d '%s': input '%s' is not (N, C, H, W)", name,
                     x->name);
  char parameter_name[NAME_SIZE];
  bpt_node *weight, *bias = NULL;
  const int64_t weight_dims[4] = {out_channels, x->dims[1], kernel, kernel};
  snprintf(parameter_name, sizeof parameter_name, "%s.weight", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 4, weight_dims, BPT_INIT_HE_NORMAL, &weight));
  if (with_bias) {
    snprintf(parameter_name, sizeof parameter_name, "%s.bias", name);
    BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &out_channels, BPT_INIT_ZEROS, &bias));
  }
  bpt_conv2d_options options = bpt_conv2d_options_default();
  options.stride_height = options.stride_width = stride;
  options.padding_height = options.padding_width = padding;
  return bpt_conv2d(graph, name, x, weight, bias, &options, out);
}

bpt_status bpt_layer_conv2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels, int64_t kernel,
                            int64_t stride, int64_t padding, int with_bias, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark,
                              build_conv2d(graph, name, x, out_channels, kernel, stride, padding, with_bias, out), out);
}

static bpt_status build_embedding(bpt_graph *graph, const char *name, bpt_node *ids, int64_t vocabulary, int64_t dim,
                                  bpt_node **out) {
  BPT_CHECK(check(graph, "bpt_layer_embedding", ids, name, out));
  char parameter_name[NAME_SIZE];
  bpt_node *table;
  const int64_t table_dims[2] = {vocabulary, dim};
  snprintf(parameter_name, sizeof parameter_name, "%s.weight", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 2, table_dims, BPT_INIT_NORMAL_SMALL, &table));
  return bpt_embedding(graph, name, ids, table, out);
}

bpt_status bpt_layer_embedding(bpt_graph *graph, const char *name, bpt_node *ids, int64_t vocabulary, int64_t dim,
                               bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_embedding(graph, name, ids, vocabulary, dim, out), out);
}

/* bpt_layer_batch_norm and bpt_layer_batch_norm_relu: the same parameters, then the plain or the fused op. */
static bpt_status batch_norm_layer(bpt_graph *graph, const char *where, const char *name, bpt_node *x, bool relu,
                                   bpt_node **out) {
  BPT_CHECK(check(graph, where, x, name, out));
  if (x->rank < 2 || !x->batched)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "%s '%s': input '%s' has no channel axis", where, name, x->name);
  char parameter_name[NAME_SIZE];
  bpt_node *gamma, *beta, *running_mean, *running_variance;
  const int64_t channels = x->dims[1];
  snprintf(parameter_name, sizeof parameter_name, "%s.gamma", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &channels, BPT_INIT_ONES, &gamma));
  snprintf(parameter_name, sizeof parameter_name, "%s.beta", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &channels, BPT_INIT_ZEROS, &beta));
  snprintf(parameter_name, sizeof parameter_name, "%s.running_mean", name);
  BPT_CHECK(bpt_graph_nontrainable_parameter(graph, parameter_name, 1, &channels, BPT_INIT_ZEROS, &running_mean));
  snprintf(parameter_name, sizeof parameter_name, "%s.running_variance", name);
  BPT_CHECK(bpt_graph_nontrainable_parameter(graph, parameter_name, 1, &channels, BPT_INIT_ONES, &running_variance));
  return (relu ? bpt_batch_norm_relu : bpt_batch_norm)(graph, name, x, gamma, beta, running_mean, running_variance,
                                                       0.1f, 1e-5f, out);
}

bpt_status bpt_layer_batch_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, batch_norm_layer(graph, "bpt_layer_batch_norm", name, x, false, out), out);
}

bpt_status bpt_layer_batch_norm_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, batch_norm_layer(graph, "bpt_layer_batch_norm_relu", name, x, true, out),
                              out);
}

static bpt_status build_resnet_basic_block(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels,
                                           int64_t stride, bpt_node **out) {
  BPT_CHECK(check(graph, "bpt_layer_resnet_basic_block", x, name, out));
  if (x->rank != 4 || !x->batched)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "bpt_layer_resnet_basic_block '%s': input '%s' is not (N, C, H, W)",
                     name, x->name);
  char layer[NAME_SIZE];
  bpt_node *y, *shortcut = x;
  /* Convolutions before batch norm carry no bias: BN's beta would cancel it. */
  snprintf(layer, sizeof layer, "%s.conv1", name);
  BPT_CHECK(bpt_layer_conv2d(graph, layer, x, out_channels, 3, stride, 1, 0, &y));
  snprintf(layer, sizeof layer, "%s.bn1", name);
  BPT_CHECK(bpt_layer_batch_norm_relu(graph, layer, y, &y));
  snprintf(layer, sizeof layer, "%s.conv2", name);
  BPT_CHECK(bpt_layer_conv2d(graph, layer, y, out_channels, 3, 1, 1, 0, &y));
  snprintf(layer, sizeof layer, "%s.bn2", name);
  BPT_CHECK(bpt_layer_batch_norm(graph, layer, y, &y));
  if (stride != 1 || x->dims[1] != out_channels) {
    snprintf(layer, sizeof layer, "%s.shortcut", name);
    BPT_CHECK(bpt_layer_conv2d(graph, layer, x, out_channels, 1, stride, 0, 0, &shortcut));
    snprintf(layer, sizeof layer, "%s.shortcut_bn", name);
    BPT_CHECK(bpt_layer_batch_norm(graph, layer, shortcut, &shortcut));
  }
  snprintf(layer, sizeof layer, "%s.add", name);
  return bpt_add_relu(graph, layer, y, shortcut, out);
}

bpt_status bpt_layer_resnet_basic_block(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels,
                                        int64_t stride, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_resnet_basic_block(graph, name, x, out_channels, stride, out), out);
}

static const char *kind_name(bpt_layer_kind kind) {
  switch (kind) {
  case BPT_LAYER_CONV2D: return "conv";
  case BPT_LAYER_BATCH_NORM: return "bn";
  case BPT_LAYER_RELU: return "relu";
  case BPT_LAYER_MAX_POOL: return "maxpool";
  case BPT_LAYER_AVG_POOL: return "avgpool";
  case BPT_LAYER_GLOBAL_AVG_POOL: return "gap";
  case BPT_LAYER_FLATTEN: return "flatten";
  case BPT_LAYER_LINEAR: return "fc";
  case BPT_LAYER_DROPOUT: return "dropout";
  case BPT_LAYER_RESNET_BLOCK: return "block";
  case BPT_LAYER_TANH: return "tanh";
  case BPT_LAYER_SIGMOID: return "sigmoid";
  }
  return NULL;
}

bpt_layer_spec bpt_layer_spec_default(bpt_layer_kind kind) {
  bpt_layer_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.size = sizeof spec;
  spec.kind = kind;
  return spec;
}

static bpt_status build_sequential(bpt_graph *graph, const char *prefix, bpt_node *x, const bpt_layer_spec *layers,
                                   int count, bpt_node **out) {
  bpt_node *y = x;
  for (int i = 0; i < count; i++) {
    const bpt_layer_spec *l = &layers[i];
    const char *kind = kind_name(l->kind);
    if (!kind)
      return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_sequential '%s': layer %d has kind %d",
                       prefix, i, (int)l->kind);
    char layer[NAME_SIZE];
    snprintf(layer, sizeof layer, "%s%d.%s", prefix, i, kind);
    /* A convolution directly followed by batch norm needs no bias. */
    const int followed_by_bn = i + 1 < count && layers[i + 1].kind == BPT_LAYER_BATCH_NORM;
    switch (l->kind) {
    case BPT_LAYER_CONV2D:
      BPT_CHECK(bpt_layer_conv2d(graph, layer, y, l->units, l->kernel, l->stride ? l->stride : 1, l->padding,
                                 !followed_by_bn, &y));
      break;
    case BPT_LAYER_BATCH_NORM:
      if (i + 1 < count && layers[i + 1].kind == BPT_LAYER_RELU) {
        BPT_CHECK(bpt_layer_batch_norm_relu(graph, layer, y, &y));
        i++; /* the ReLU is part of this node */
      } else {
        BPT_CHECK(bpt_layer_batch_norm(graph, layer, y, &y));
      }
      break;
    case BPT_LAYER_RELU: BPT_CHECK(bpt_relu(graph, layer, y, &y)); break;
    case BPT_LAYER_TANH: BPT_CHECK(bpt_tanh(graph, layer, y, &y)); break;
    case BPT_LAYER_SIGMOID: BPT_CHECK(bpt_sigmoid(graph, layer, y, &y)); break;
    case BPT_LAYER_MAX_POOL:
      BPT_CHECK(bpt_max_pool2d(graph, layer, y, l->kernel, l->stride ? l->stride : l->kernel, l->padding, &y));
      break;
    case BPT_LAYER_AVG_POOL:
      BPT_CHECK(bpt_avg_pool2d(graph, layer, y, l->kernel, l->stride ? l->stride : l->kernel, l->padding, &y));
      break;
    case BPT_LAYER_GLOBAL_AVG_POOL: BPT_CHECK(bpt_global_avg_pool(graph, layer, y, &y)); break;
    case BPT_LAYER_FLATTEN: BPT_CHECK(bpt_flatten(graph, layer, y, &y)); break;
    case BPT_LAYER_LINEAR: BPT_CHECK(bpt_layer_linear(graph, layer, y, l->units, BPT_INIT_HE_UNIFORM, &y)); break;
    case BPT_LAYER_DROPOUT: BPT_CHECK(bpt_dropout(graph, layer, y, l->rate, &y)); break;
    case BPT_LAYER_RESNET_BLOCK:
      BPT_CHECK(bpt_layer_resnet_basic_block(graph, layer, y, l->units, l->stride ? l->stride : 1, &y));
      break;
    }
  }
  *out = y;
  return BPT_OK;
}

/* The caller's entries are sizeof(bpt_layer_spec) of the headers it was compiled with apart; each is copied
 * into today's layout (fields it does not know stay 0) before anything is built. */
static bpt_status copy_and_build_sequential(bpt_graph *graph, const char *prefix, bpt_node *x,
                                            const bpt_layer_spec *layers, int count, bpt_node **out) {
  const char *where = "bpt_layer_sequential";
  BPT_CHECK(check(graph, where, x, prefix, out));
  if (count < 1 || !layers)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s '%s': no layers", where, prefix);
  const size_t stride = layers[0].size;
  if (stride < offsetof(bpt_layer_spec, rate) + sizeof layers[0].rate || stride > (1u << 16))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s '%s': layer 0 has size %zu; start each entry with BPT_LAYER(kind) or bpt_layer_spec_default()",
                     where, prefix, stride);
  bpt_layer_spec *specs = bpt_calloc(graph->context, (size_t)count, sizeof *specs, "layer specs");
  if (!specs) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = BPT_OK;
  for (int i = 0; i < count && status == BPT_OK; i++) {
    const bpt_layer_spec *theirs = (const bpt_layer_spec *)((const char *)layers + (size_t)i * stride);
    if (theirs->size != stride)
      status = bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s '%s': layer %d has size %zu, layer 0 %zu",
                         where, prefix, i, theirs->size, stride);
    else
      memcpy(&specs[i], theirs, stride < sizeof specs[i] ? stride : sizeof specs[i]);
  }
  if (status == BPT_OK) status = build_sequential(graph, prefix, x, specs, count, out);
  free(specs);
  return status;
}

bpt_status bpt_layer_sequential(bpt_graph *graph, const char *prefix, bpt_node *x, const bpt_layer_spec *layers,
                                int count, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, copy_and_build_sequential(graph, prefix, x, layers, count, out), out);
}
