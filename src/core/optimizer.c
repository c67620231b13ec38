/* Optimisers: validate options, own the state buffers (velocity, Adam moments) laid out like the flat
 * parameter block, and run the backend update kernel over it each step: once per run of consecutive
 * parameters that share a learning rate and weight decay (parameter groups), skipping buffers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/cnn.h"
#include "bptrain/optimizer.h"
#include "core/graph.h"
#include "core/graph_owner.h"
#include "core/profiler.h"
#include "core/optimizer_state.h"
#include "core/precision.h"
#include "core/schedule.h"
#include "core/thread_guard.h"

struct bpt_optimizer {
  bpt_graph *graph;                 /* NULL once the graph was destroyed (bpt_graph_destroy detaches us) */
  bpt_attachment attachment; /* on graph->attachments while the graph lives */
  bpt_optimizer_options options;
  float *state0, *state1; /* device, graph->parameter_elements floats each (state1: Adam only) */
  int64_t steps;
  /* Parameter groups, per parameter in declaration order. */
  float *learning_rate_scales;
  float *weight_decays;
  bool has_schedule;
  bpt_schedule_options schedule;
};

bpt_optimizer_options bpt_optimizer_options_default(void) {
  bpt_optimizer_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = 0.01f;
  options.beta1 = 0.9f;
  options.beta2 = 0.999f;
  options.epsilon = 1e-8f;
  return options;
}

static bool in_unit_interval(float x) { return x >= 0.0f && x < 1.0f; }

/* One rule for the learning rate, wherever it enters: creation, the setter, and a checkpoint's saved rate. */
static bool learning_rate_valid(float rate) { return rate >= 0.0f && isfinite(rate); }

bpt_status bpt_optimizer_options_check(bpt_context *context, const bpt_optimizer_options *o, const char *where) {
  if ((unsigned)o->kind > (unsigned)BPT_OPTIMIZER_ADAMW)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown optimizer kind %d", where, (int)o->kind);
  if (!learning_rate_valid(o->learning_rate))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: learning_rate %g must be finite and >= 0", where,
                     (double)o->learning_rate);
  if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: weight_decay %g must be finite and >= 0", where,
                     (double)o->weight_decay);
  if (o->kind == BPT_OPTIMIZER_SGD) {
    if (!in_unit_interval(o->momentum))
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: momentum %g is outside [0, 1)", where,
                       (double)o->momentum);
    if (o->nesterov && o->momentum == 0.0f)
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: Nesterov momentum needs momentum > 0", where);
  } else {
    if (!in_unit_interval(o->beta1) || !in_unit_interval(o->beta2))
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: beta1 %g and beta2 %g must be in [0, 1)", where,
                       (double)o->beta1, (double)o->beta2);
    if (!(o->epsilon > 0.0f))
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: epsilon %g must be > 0", where, (double)o->epsilon);
  }
  return BPT_OK;
}

static bpt_status allocate_state(bpt_optimizer *optimizer, float **out) {
  bpt_graph *graph = optimizer->graph;
  bpt_backend *backend = graph->backend;
  size_t bytes = (size_t)graph->parameter_elements * sizeof(float);
  if (backend->vtable->alloc(backend, bytes ? bytes : 64, (void **)out) != BPT_OK ||
      backend->vtable->memset_zero(backend, *out, bytes) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_optimizer_create: allocating state");
  return BPT_OK;
}

/* The graph is going: its backend frees our device state now, and every later call but destroy fails. */
static void detach_from_graph(void *owner) {
  bpt_optimizer *optimizer = owner;
  bpt_backend *backend = optimizer->graph->backend;
  if (optimizer->state0) backend->vtable->free(backend, optimizer->state0);
  if (optimizer->state1) backend->vtable->free(backend, optimizer->state1);
  optimizer->state0 = optimizer->state1 = NULL;
  optimizer->graph = NULL;
}

/* BPT_ERR_STATE (on this thread's slot: the graph's context may be gone too) once the graph is destroyed. */
static bpt_status check_attached(const bpt_optimizer *optimizer, const char *where) {
  if (!optimizer) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", where);
  if (!optimizer->graph)
    return bpt_error(NULL, BPT_ERR_STATE, "%s: the optimizer's graph was destroyed; only bpt_optimizer_destroy is valid",
                     where);
  return BPT_OK;
}

bpt_status bpt_optimizer_create(bpt_graph *graph, const bpt_optimizer_options *options, bpt_optimizer **out) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_optimizer_create: graph is NULL");
  bpt_context *context = graph->context;
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_optimizer_create: out is NULL");
  *out = NULL;
  if (!graph->compiled || !graph->loss)
    return bpt_error(context, BPT_ERR_STATE, "bpt_optimizer_create: the graph must be compiled with a loss");
  bpt_optimizer_options copy = bpt_optimizer_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                               offsetof(bpt_optimizer_options, epsilon) + sizeof copy.epsilon, "bpt_optimizer_create"));
  BPT_CHECK(bpt_optimizer_options_check(context, &copy, "bpt_optimizer_create"));
  bpt_optimizer *optimizer = bpt_calloc(context, 1, sizeof *optimizer, "optimizer");
  if (!optimizer) return BPT_ERR_OUT_OF_MEMORY;
  optimizer->graph = graph;
  bpt_attach(&graph->attachments, &optimizer->attachment, detach_from_graph, optimizer);
  optimizer->options = copy;
  optimizer->learning_rate_scales = calloc((size_t)graph->parameter_count + 1, sizeof(float));
  optimizer->weight_decays = calloc((size_t)graph->parameter_count + 1, sizeof(float));
  if (!optimizer->learning_rate_scales || !optimizer->weight_decays) {
    bpt_optimizer_destroy(optimizer);
    return bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "bpt_optimizer_create: out of memory for parameter groups");
  }
  for (int p = 0; p < graph->parameter_count; p++) {
    optimizer->learning_rate_scales[p] = 1.0f;
    optimizer->weight_decays[p] = copy.weight_decay;
  }
  bool needs_velocity = copy.kind != BPT_OPTIMIZER_SGD || copy.momentum > 0.0f;
  bpt_status status = needs_velocity ? allocate_state(optimizer, &optimizer->state0) : BPT_OK;
  if (status == BPT_OK && copy.kind != BPT_OPTIMIZER_SGD) status = allocate_state(optimizer, &optimizer->state1);
  if (status != BPT_OK) {
    bpt_optimizer_destroy(optimizer);
    return status;
  }
  *out = optimizer;
  return BPT_OK;
}

void bpt_optimizer_destroy(bpt_optimizer *optimizer) {
  if (!optimizer) return;
  if (optimizer->graph) {
    bpt_unattach(&optimizer->graph->attachments, &optimizer->attachment);
    detach_from_graph(optimizer);
  }
  free(optimizer->learning_rate_scales);
  free(optimizer->weight_decays);
  free(optimizer);
}

static bpt_status optimizer_step(bpt_optimizer *optimizer);

/* The profiler (core/profiler.h) times the whole step, every update kernel call included. */
bpt_status bpt_optimizer_step(bpt_optimizer *optimizer) {
  BPT_CHECK(check_attached(optimizer, "bpt_optimizer_step"));
  bpt_graph *graph = optimizer->graph;
  bpt_context *context = graph->context;
  BPT_CHECK(bpt_graph_enter(graph, "bpt_optimizer_step"));
  if (__builtin_expect(!context || !context->profiler, 1)) return bpt_graph_leave(graph, optimizer_step(optimizer));
  uint64_t start = bpt_profiler_begin(context);
  bpt_status status = bpt_graph_leave(graph, optimizer_step(optimizer));
  if (status != BPT_OK) return status;
  /* Reads parameters, gradients and each state buffer; writes the parameters and the state back. */
  int buffers = 1 + (optimizer->state0 != NULL) + (optimizer->state1 != NULL);
  double bytes = (double)optimizer->graph->parameter_elements * sizeof(float) * (double)(2 * buffers + 1);
  const char *kind = optimizer->options.kind == BPT_OPTIMIZER_SGD ? "sgd" : "adam";
  bpt_profiler_record(context, BPT_PROFILE_OPTIMIZER, "step", kind, start, bytes, 0.0);
  return BPT_OK;
}

/* Told once per step on every rank, taken or skipped, so that hooks counting steps (local SGD's averaging)
 * stay in step across ranks whose loss scaling skipped different updates. */
static bpt_status after_update(bpt_graph *graph) {
  return graph->hook ? graph->hook(graph->hook_data, graph, BPT_GRAPH_EVENT_AFTER_UPDATE, -1) : BPT_OK;
}

static bpt_status optimizer_step(bpt_optimizer *optimizer) {
  bpt_graph *graph = optimizer->graph;
  if (!graph->backward_done)
    return bpt_error(graph->context, BPT_ERR_STATE, "bpt_optimizer_step: run bpt_graph_backward first");
  BPT_CHECK(bpt_thread_guard_enter(graph->context, "bpt_optimizer_step"));
  if (optimizer->steps == INT64_MAX) /* restorable from a checkpoint: the next step must not wrap */
    return bpt_error(graph->context, BPT_ERR_STATE, "bpt_optimizer_step: the step count is INT64_MAX and cannot advance");
  if (graph->hook) BPT_CHECK(graph->hook(graph->hook_data, graph, BPT_GRAPH_EVENT_BEFORE_UPDATE, -1));
  /* A precision policy unscales and checks the gradients and may skip this update. Without one the step is
   * the update kernels alone: no precision work and no host-device synchronisation (anomaly mode is the
   * check for non-finite values then). */
  if (graph->precision) {
    bool skip = false;
    BPT_CHECK(bpt_precision_before_step(graph, &skip));
    if (skip) return after_update(graph);
  }
  bpt_optimizer_options *o = &optimizer->options;
  if (optimizer->has_schedule) {
    float rate = o->learning_rate;
    BPT_CHECK(bpt_schedule_learning_rate(graph->context, &optimizer->schedule, optimizer->steps, &rate));
    o->learning_rate = rate;
  }
  bpt_backend *backend = graph->backend;
  bpt_status (*kernel)(bpt_backend *, const bpt_update_args *) =
      o->kind == BPT_OPTIMIZER_SGD ? backend->vtable->sgd_update : backend->vtable->adam_update;
  if (!kernel)
    return bpt_error(graph->context, BPT_ERR_UNSUPPORTED, "bpt_optimizer_step: backend '%s' has no %s update kernel",
                     backend->vtable->name, o->kind == BPT_OPTIMIZER_SGD ? "SGD" : "Adam");
  backend->error_message[0] = 0;
  int32_t *found_nonfinite = NULL;
  BPT_CHECK(bpt_parameter_check_prepare(graph, &found_nonfinite));
  /* One kernel call per run of consecutive trainable parameters with equal settings; a run ends where the
   * next parameter begins, so alignment padding (zero values, zero gradients) rides along unchanged. */
  for (int first = 0; first < graph->parameter_count;) {
    if (!graph->parameters[first]->requires_grad) {
      first++;
      continue;
    }
    int last = first;
    while (last + 1 < graph->parameter_count && graph->parameters[last + 1]->requires_grad &&
           optimizer->learning_rate_scales[last + 1] == optimizer->learning_rate_scales[first] &&
           optimizer->weight_decays[last + 1] == optimizer->weight_decays[first])
      last++;
    const int64_t begin = graph->parameters[first]->param_offset;
    const int64_t end = last + 1 < graph->parameter_count ? graph->parameters[last + 1]->param_offset
                                                          : graph->parameter_elements;
    bpt_update_args args = {.count = end - begin,
                            .parameters = graph->parameter_block + begin,
                            .gradients = graph->gradient_block + begin,
                            .state0 = optimizer->state0 ? optimizer->state0 + begin : NULL,
                            .state1 = optimizer->state1 ? optimizer->state1 + begin : NULL,
                            .learning_rate = o->learning_rate * optimizer->learning_rate_scales[first],
                            .weight_decay = optimizer->weight_decays[first],
                            .momentum = o->momentum,
                            .nesterov = o->nesterov != 0,
                            .beta1 = o->beta1,
                            .beta2 = o->beta2,
                            .epsilon = o->epsilon,
                            .decoupled_weight_decay = o->kind == BPT_OPTIMIZER_ADAMW,
                            .step = optimizer->steps + 1,
                            .found_nonfinite = found_nonfinite};
    bpt_status status = kernel(backend, &args);
    if (status != BPT_OK) return bpt_backend_error(graph->context, status, "bpt_optimizer_step");
    first = last + 1;
  }
  graph->random_step++;
  optimizer->steps++;
  BPT_CHECK(bpt_parameter_check_after_step(graph, optimizer->steps)); /* inf/NaN parameters fail the step */
  return after_update(graph);
}

bpt_status bpt_optimizer_set_learning_rate(bpt_optimizer *optimizer, float learning_rate) {
  BPT_CHECK(check_attached(optimizer, "bpt_optimizer_set_learning_rate"));
  if (!learning_rate_valid(learning_rate))
    return bpt_error(optimizer->graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_optimizer_set_learning_rate: %g must be finite and >= 0", (double)learning_rate);
  optimizer->options.learning_rate = learning_rate;
  return BPT_OK;
}

float bpt_optimizer_learning_rate(const bpt_optimizer *optimizer) {
  return optimizer ? optimizer->options.learning_rate : 0.0f;
}

int64_t bpt_optimizer_step_count(const bpt_optimizer *optimizer) { return optimizer ? optimizer->steps : 0; }

bpt_status bpt_optimizer_set_schedule(bpt_optimizer *optimizer, const bpt_schedule_options *schedule) {
  BPT_CHECK(check_attached(optimizer, "bpt_optimizer_set_schedule"));
  bpt_context *context = optimizer->graph->context;
  BPT_CHECK(bpt_schedule_validate(context, schedule, "bpt_optimizer_set_schedule"));
  optimizer->schedule = bpt_schedule_options_default();
  memcpy(&optimizer->schedule, schedule,
         schedule->size < sizeof optimizer->schedule ? schedule->size : sizeof optimizer->schedule);
  optimizer->schedule.size = sizeof optimizer->schedule;
  optimizer->has_schedule = true;
  return bpt_schedule_learning_rate(context, &optimizer->schedule, optimizer->steps, &optimizer->options.learning_rate);
}

bpt_status bpt_optimizer_set_group(bpt_optimizer *optimizer, bpt_node *const *parameters, int count,
                                   float learning_rate_scale, float weight_decay) {
  const char *where = "bpt_optimizer_set_group";
  BPT_CHECK(check_attached(optimizer, where));
  bpt_graph *graph = optimizer->graph;
  if ((count > 0 && !parameters) || count < 0)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: %d parameters from a NULL list", where, count);
  if (!(learning_rate_scale >= 0.0f) || !isfinite(learning_rate_scale) || !(weight_decay >= 0.0f) ||
      !isfinite(weight_decay))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: learning-rate scale %g and weight decay %g must be finite and >= 0", where,
                     (double)learning_rate_scale, (double)weight_decay);
  for (int i = 0; i < count; i++) {
    const bpt_node *node = parameters[i];
    if (!node || node->graph != graph || node->op != BPT_OP_PARAMETER)
      return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: entry %d is not a parameter of the graph", where,
                       i);
  }
  for (int i = 0; i < count; i++)
    for (int p = 0; p < graph->parameter_count; p++)
      if (graph->parameters[p] == parameters[i]) {
        optimizer->learning_rate_scales[p] = learning_rate_scale;
        optimizer->weight_decays[p] = weight_decay;
      }
  return BPT_OK;
}

bpt_status bpt_optimizer_no_decay_on_vectors(bpt_optimizer *optimizer) {
  BPT_CHECK(check_attached(optimizer, "bpt_optimizer_no_decay_on_vectors"));
  bpt_graph *graph = optimizer->graph;
  for (int p = 0; p < graph->parameter_count; p++)
    if (graph->parameters[p]->rank == 1) optimizer->weight_decays[p] = 0.0f;
  return BPT_OK;
}

/* A parameter is a matrix here when some node multiplies by it; one only added, scaled or looked up is not. */
static bool used_as_matrix(const bpt_graph *graph, const bpt_node *parameter) {
  for (int n = 0; n < graph->node_count; n++) {
    const bpt_node *node = graph->nodes[n];
    const bool product = node->op == BPT_OP_LINEAR || node->op == BPT_OP_CONV2D || node->op == BPT_OP_MATMUL;
    if (product && node->input_count > 1 && node->inputs[1] == parameter) return true;
  }
  return false;
}

bpt_status bpt_optimizer_decay_only_matrices(bpt_optimizer *optimizer) {
  BPT_CHECK(check_attached(optimizer, "bpt_optimizer_decay_only_matrices"));
  bpt_graph *graph = optimizer->graph;
  for (int p = 0; p < graph->parameter_count; p++)
    if (!used_as_matrix(graph, graph->parameters[p])) optimizer->weight_decays[p] = 0.0f;
  return BPT_OK;
}

/* Checkpoints read and restore the state through this view (core/optimizer_state.h). */
void bpt_optimizer_state_view(bpt_optimizer *optimizer, bpt_optimizer_state *view) {
  view->graph = optimizer->graph;
  view->options = &optimizer->options;
  view->steps = &optimizer->steps;
  view->buffers[0] = optimizer->state0;
  view->buffers[1] = optimizer->state1;
}

bpt_status bpt_optimizer_check_owner(const bpt_optimizer *optimizer, const bpt_graph *graph, const char *where) {
  if (!optimizer->graph)
    return bpt_error(graph->context, BPT_ERR_STATE, "%s: the optimizer's graph was destroyed", where);
  if (optimizer->graph != graph)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: the optimizer belongs to another graph (it steps that graph's parameters); create one with "
                     "bpt_optimizer_create on this graph",
                     where);
  return BPT_OK;
}
