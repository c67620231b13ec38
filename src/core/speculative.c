/* The speculative backprop trainer: per sample, the backward from the label's cached forward state runs
 * (on a worker thread, or on a simulated second engine) while the sample's own forward runs; the gate then
 * keeps it or discards it and runs the ordinary backward. Gradients are summed over the mini-batch, the
 * discarded speculative terms retracted, and the optimiser steps once. See docs/fpga.md. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/optimizer_state.h"
#include "core/speculative.h"
#include "core/tensor.h"
#include "core/thread_guard.h"

bpt_speculative_options bpt_speculative_options_default(void) {
  bpt_speculative_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.threshold = 0.0f;
  options.distance = BPT_SPECULATIVE_MEAN_ABSOLUTE;
  options.final_threshold = 0.0f;
  options.schedule_steps = 0;
  options.threads = 2;
  options.gradient_clip = 0.0f;
  return options;
}

static bpt_status validate(bpt_context *context, const bpt_speculative_options *o) {
  const char *where = "bpt_speculative_create";
  if (!(o->threshold >= 0.0f) || !isfinite(o->threshold) || !(o->final_threshold >= 0.0f) ||
      !isfinite(o->final_threshold))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: thresholds %g and %g must be finite and >= 0", where,
                     (double)o->threshold, (double)o->final_threshold);
  if ((unsigned)o->distance > (unsigned)BPT_SPECULATIVE_L2)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown distance %d", where, (int)o->distance);
  if (o->schedule_steps < 0)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: schedule_steps %lld must be >= 0", where,
                     (long long)o->schedule_steps);
  if (o->threads != 1 && o->threads != 2)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: threads is %d, must be 1 or 2", where, o->threads);
  if (!(o->gradient_clip >= 0.0f) || !isfinite(o->gradient_clip))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: gradient_clip %g must be finite and >= 0", where,
                     (double)o->gradient_clip);
  return BPT_OK;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU time of the calling thread: the busy-time counters exclude time spent waiting for a core. */
static double thread_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One turn of a wait for news from the other thread. A sample takes tens of microseconds, so for the first
 * millisecond the waiter spins, yielding the core on every turn (cheap when nothing else wants it; on a shared
 * machine it lets our other thread run); false once that millisecond is over. */
static bool spin_turn(long turns, double *start) {
  if (turns < 64) return true;
  if (turns == 64) *start = now_seconds();
  if (now_seconds() - *start >= 1e-3) return false;
  sched_yield();
  return true;
}

/* The main thread's wait for the worker's job counter: spinning, then 50 us naps (what is queued ends soon). */
static void wait_until(atomic_long *value, long target) {
  double start = 0.0;
  for (long turns = 0; atomic_load_explicit(value, memory_order_acquire) < target; turns++)
    if (!spin_turn(turns, &start)) nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 50000}, NULL);
}

/* The worker's wait for job `job`: spinning for the first millisecond (jobs of a mini-batch come tens of
 * microseconds apart), then asleep until the main thread posts a job or the stop, so that an idle worker holds
 * no core while the caller evaluates or loads data. Sequentially consistent stores and loads of job_posted and
 * sleeping on both sides: either the worker sees the job before it sleeps, or the poster sees it asleep and
 * signals under the lock. */
static void wait_for_work(bpt_speculative_trainer *trainer, long job) {
  double start = 0.0;
  for (long turns = 0; atomic_load(&trainer->job_posted) < job && !atomic_load(&trainer->stop); turns++) {
    if (spin_turn(turns, &start)) continue;
    pthread_mutex_lock(&trainer->idle_lock);
    atomic_store(&trainer->sleeping, true);
    while (atomic_load(&trainer->job_posted) < job && !atomic_load(&trainer->stop))
      pthread_cond_wait(&trainer->wake, &trainer->idle_lock);
    atomic_store(&trainer->sleeping, false);
    pthread_mutex_unlock(&trainer->idle_lock);
    return;
  }
}

/* Called after storing job_posted or stop: wakes the worker if it sleeps. */
static void wake_worker(bpt_speculative_trainer *trainer) {
  if (!atomic_load(&trainer->sleeping)) return;
  pthread_mutex_lock(&trainer->idle_lock);
  pthread_cond_signal(&trainer->wake);
  pthread_mutex_unlock(&trainer->idle_lock);
}

static void *worker_main(void *argument) {
  bpt_speculative_trainer *trainer = argument;
#ifdef _OPENMP
  /* The worker is one of the trainer's two threads: its kernels must not start a team of their own. */
  omp_set_num_threads(1);
#endif
  for (long job = 1;; job++) {
    wait_for_work(trainer, job);
    if (atomic_load_explicit(&trainer->stop, memory_order_acquire)) return NULL;
    const bpt_speculative_job *work = &trainer->jobs[(job - 1) % trainer->max_rows];
    double start = thread_seconds();
    bpt_status status = bpt_speculative_backward(trainer, work->state, work->label, true, work->row);
    trainer->counters.worker_thread_seconds += thread_seconds() - start; /* read by the main thread after a drain */
    if (status != BPT_OK && trainer->job_status == BPT_OK) trainer->job_status = status;
    atomic_store_explicit(&trainer->job_done, job, memory_order_release);
  }
}

static bpt_node *find_loss(bpt_graph *graph) { return graph ? graph->loss : NULL; }

/* Stops the worker and frees the device buffers, while the graph and its backend are still there. */
static void let_go_of_graph(bpt_speculative_trainer *trainer) {
  if (trainer->threaded) {
    atomic_store(&trainer->stop, true);
    wake_worker(trainer);
    pthread_join(trainer->worker, NULL);
    trainer->threaded = false;
  }
  bpt_speculative_release(trainer);
  trainer->graph = NULL;
  trainer->optimizer = NULL;
}

/* A graph destroyed before its trainer lets the trainer go first (the guide's "any destroy order"): the
 * trainer's calls then fail with BPT_ERR_STATE and its destroy frees host memory only. */
static void detach_from_graph(void *owner) { let_go_of_graph(owner); }

/* Whether the trainer's graph and optimiser still exist: an optimiser destroyed first has taken itself off
 * the graph's attachments (its owner pointer is compared, never dereferenced). */
static bpt_status check_alive(const bpt_speculative_trainer *trainer, const char *where) {
  if (!trainer->graph)
    return bpt_error(NULL, BPT_ERR_STATE, "%s: the trainer's graph was destroyed; destroy the trainer", where);
  for (const bpt_attachment *a = trainer->graph->attachments; a; a = a->next)
    if (a->owner == trainer->optimizer) return BPT_OK;
  return bpt_error(trainer->context, BPT_ERR_STATE, "%s: the trainer's optimizer was destroyed; destroy the trainer",
                   where);
}

bpt_status bpt_speculative_create(bpt_graph *graph, bpt_node *images, bpt_node *labels, bpt_optimizer *optimizer,
                                  const bpt_speculative_options *options, bpt_speculative_trainer **out) {
  const char *where = "bpt_speculative_create";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  bpt_context *context = graph->context;
  if (!out || !images || !labels || !optimizer)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: images, labels, optimizer and out must be non-NULL",
                     where);
  *out = NULL;
  BPT_CHECK(bpt_optimizer_check_owner(optimizer, graph, where));
  bpt_node *loss = find_loss(graph);
  if (!graph->compiled || !loss || loss->op != BPT_OP_SOFTMAX_CROSS_ENTROPY)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: the graph must be compiled with a softmax cross-entropy loss",
                     where);
  if (images->graph != graph || images->op != BPT_OP_INPUT || images->dtype != BPT_DTYPE_F32)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: '%s' is not an f32 input of this graph", where,
                     images->name);
  if (loss->inputs[1] != labels)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: '%s' is not the label input of loss '%s'", where,
                     labels->name, loss->name);
  bpt_speculative_options copy = bpt_speculative_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                               offsetof(bpt_speculative_options, gradient_clip) + sizeof copy.gradient_clip, where));
  BPT_CHECK(validate(context, &copy));

  bpt_speculative_trainer *trainer = bpt_calloc(context, 1, sizeof *trainer, "speculative trainer");
  if (!trainer) return BPT_ERR_OUT_OF_MEMORY;
  trainer->graph = graph;
  trainer->context = context;
  trainer->backend = graph->backend;
  trainer->optimizer = optimizer;
  trainer->options = copy;
  trainer->images = images;
  trainer->labels = labels;
  trainer->loss = loss;
  trainer->logits = loss->inputs[0];
  trainer->classes = trainer->logits->dims[1];
  trainer->features = bpt_node_inner_count(images);
  trainer->counters.size = sizeof trainer->counters;

  int64_t image_dims[2] = {1, trainer->features}, label_dims[1] = {1};
  bpt_status status = bpt_speculative_build_chain(trainer);
  /* A backend that models time runs everything on this thread and simulates the second engine. */
  bool threaded = copy.threads == 2 && !trainer->backend->vtable->engine_select;
  if (status == BPT_OK && threaded) status = bpt_speculative_open_worker_backend(trainer);
  if (status == BPT_OK) status = bpt_speculative_reserve(trainer, 1, threaded);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_F32, 2, image_dims, &trainer->sample_images);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &trainer->sample_labels);
  if (status == BPT_OK) {
    trainer->host_probabilities = bpt_calloc(context, (size_t)trainer->classes, sizeof(float), "probabilities");
    if (!trainer->host_probabilities) status = BPT_ERR_OUT_OF_MEMORY;
  }
  if (status == BPT_OK && threaded) {
    if (pthread_mutex_init(&trainer->idle_lock, NULL) != 0) {
      status = bpt_error(context, BPT_ERR_INTERNAL, "%s: cannot create the speculative worker's lock", where);
    } else if (pthread_cond_init(&trainer->wake, NULL) != 0) {
      pthread_mutex_destroy(&trainer->idle_lock);
      status = bpt_error(context, BPT_ERR_INTERNAL, "%s: cannot create the speculative worker's condition", where);
    } else {
      trainer->idle_sync = true;
    }
  }
  if (status == BPT_OK && threaded) {
    if (pthread_create(&trainer->worker, NULL, worker_main, trainer) != 0)
      status = bpt_error(context, BPT_ERR_INTERNAL, "%s: cannot start the speculative worker thread", where);
    else
      trainer->threaded = true;
  }
  if (status != BPT_OK) {
    bpt_speculative_destroy(trainer);
    return status;
  }
  bpt_attach(&graph->attachments, &trainer->attachment, detach_from_graph, trainer);
  *out = trainer;
  return BPT_OK;
}

void bpt_speculative_destroy(bpt_speculative_trainer *trainer) {
  if (!trainer) return;
  if (trainer->graph) {
    bpt_unattach(&trainer->graph->attachments, &trainer->attachment);
    let_go_of_graph(trainer);
  }
  bpt_tensor_destroy(trainer->sample_images);
  bpt_tensor_destroy(trainer->sample_labels);
  free(trainer->host_probabilities);
  free(trainer->host_gradients);
  free(trainer->layers);
  if (trainer->idle_sync) { /* the worker was joined when the trainer let go of its graph */
    pthread_cond_destroy(&trainer->wake);
    pthread_mutex_destroy(&trainer->idle_lock);
  }
  free(trainer);
}

float bpt_speculative_current_threshold(const bpt_speculative_trainer *trainer) {
  if (!trainer) return 0.0f;
  const bpt_speculative_options *o = &trainer->options;
  if (o->schedule_steps == 0) return o->threshold;
  double progress = (double)trainer->batches / (double)o->schedule_steps;
  if (progress > 1.0) progress = 1.0;
  return (float)(o->threshold + (o->final_threshold - o->threshold) * progress);
}

static double gate_distance(const bpt_speculative_trainer *trainer, const float *p, const float *q) {
  double sum = 0.0;
  for (int64_t c = 0; c < trainer->classes; c++) {
    double difference = (double)p[c] - (double)q[c];
    sum += trainer->options.distance == BPT_SPECULATIVE_L2 ? difference * difference : fabs(difference);
  }
  return trainer->options.distance == BPT_SPECULATIVE_L2 ? sqrt(sum) : sum / (double)trainer->classes;
}

static bpt_status engine(bpt_speculative_trainer *trainer, int which) {
  bpt_backend *backend = trainer->backend;
  if (!backend->vtable->engine_select) return BPT_OK;
  bpt_status status = backend->vtable->engine_select(backend, which);
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, "bpt_speculative: engine_select");
}

static bpt_status join(bpt_speculative_trainer *trainer) {
  bpt_backend *backend = trainer->backend;
  if (!backend->vtable->engine_join) return BPT_OK;
  bpt_status status = backend->vtable->engine_join(backend);
  return status == BPT_OK ? BPT_OK : bpt_backend_error(trainer->context, status, "bpt_speculative: engine_join");
}

static bpt_status speculative_failed(bpt_speculative_trainer *trainer, bpt_status status) {
  return bpt_error(trainer->context, status, "bpt_speculative: speculative backward on backend '%s': %s",
                   trainer->backend->vtable->name,
                   trainer->backend->error_message[0] ? trainer->backend->error_message : bpt_status_string(status));
}

/* The main thread's waits for the worker, timed so that they can be left out of its busy time. */
static void wait_for_job(bpt_speculative_trainer *trainer, long job) {
  if (atomic_load_explicit(&trainer->job_done, memory_order_acquire) >= job) return;
  double start = thread_seconds();
  wait_until(&trainer->job_done, job);
  trainer->main_wait_seconds += thread_seconds() - start;
}

/* Waits until the worker has finished every job posted so far, and reports its first failure. */
static bpt_status drain(bpt_speculative_trainer *trainer) {
  if (!trainer->threaded) return BPT_OK;
  wait_for_job(trainer, atomic_load_explicit(&trainer->job_posted, memory_order_relaxed));
  bpt_status status = trainer->job_status;
  trainer->job_status = BPT_OK;
  return status;
}

/* Forward of sample `row` of the mini-batch, overlapped with the speculative backward from `state` when it is
 * not NULL. Two threads: the job is queued for the worker, which runs ahead on its own buffers; the main thread
 * only waits for it at the end of the mini-batch or before overwriting a state it reads. One thread: the
 * speculative backward runs first, on engine 1 of a time-modelling backend, and the join charges the overlap. */
static bpt_status forward_with_speculation(bpt_speculative_trainer *trainer, int label, bpt_speculative_state *state,
                                           int64_t row, bpt_status *speculative_status) {
  *speculative_status = BPT_OK;
  if (state && trainer->threaded) {
    long job = atomic_load_explicit(&trainer->job_posted, memory_order_relaxed) + 1;
    trainer->jobs[(job - 1) % trainer->max_rows] = (bpt_speculative_job){.label = label, .state = state, .row = row};
    state->reader_job = job;
    atomic_store(&trainer->job_posted, job);
    wake_worker(trainer);
    return bpt_graph_forward(trainer->graph);
  }
  if (state) {
    BPT_CHECK(engine(trainer, 1));
    *speculative_status = bpt_speculative_backward(trainer, state, label, false, -1);
    if (*speculative_status != BPT_OK) return BPT_OK;
  }
  BPT_CHECK(engine(trainer, 0));
  BPT_CHECK(bpt_graph_forward(trainer->graph));
  return join(trainer);
}

static bpt_status clip_gradients(bpt_speculative_trainer *trainer) {
  bpt_graph *graph = trainer->graph;
  bpt_backend *backend = trainer->backend;
  size_t count = (size_t)graph->parameter_elements;
  const float clip = trainer->options.gradient_clip;
  /* On the backend where it can (no round trip through the host); the same clamp either way, NaN kept. */
  if (backend->vtable->scale_clamp) {
    if (backend->vtable->scale_clamp(backend, (int64_t)count, 1.0f, -clip, clip, graph->gradient_block) != BPT_OK)
      return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, "bpt_speculative: clipping gradients");
    return BPT_OK;
  }
  if (!trainer->host_gradients) {
    trainer->host_gradients = bpt_calloc(trainer->context, count, sizeof(float), "clipping buffer");
    if (!trainer->host_gradients) return BPT_ERR_OUT_OF_MEMORY;
  }
  float *values = trainer->host_gradients;
  if (backend->vtable->download(backend, values, graph->gradient_block, count * sizeof(float)) != BPT_OK)
    return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, "bpt_speculative: clipping gradients");
  for (size_t i = 0; i < count; i++)
    values[i] = values[i] > clip ? clip : values[i] < -clip ? -clip : values[i];
  if (backend->vtable->upload(backend, graph->gradient_block, values, count * sizeof(float)) != BPT_OK)
    return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, "bpt_speculative: clipping gradients");
  return BPT_OK;
}

static bpt_status set_seed(bpt_speculative_trainer *trainer, float seed) {
  bpt_backend *backend = trainer->backend;
  if (backend->vtable->upload(backend, trainer->graph->loss_gradient, &seed, sizeof seed) != BPT_OK)
    return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, "bpt_speculative: setting the loss gradient");
  return BPT_OK;
}

/* One sample: forward (with speculation when the label has a cached state), gate, fallback, cache refresh. */
static bpt_status train_sample(bpt_speculative_trainer *trainer, int64_t row, float threshold, double *loss_sum) {
  bpt_graph *graph = trainer->graph;
  int label = ((const int32_t *)trainer->sample_labels->data)[0];
  if (label < 0 || label >= trainer->classes)
    return bpt_error(trainer->context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_speculative_train_batch: label %d is outside "
                     "[0, %lld)",
                     label, (long long)trainer->classes);
  BPT_CHECK(bpt_graph_set_input(graph, trainer->images, trainer->sample_images));
  BPT_CHECK(bpt_graph_set_input(graph, trainer->labels, trainer->sample_labels));
  bpt_speculative_slot *slot = &trainer->slots[label];
  bpt_speculative_state *cached = slot->valid ? &slot->states[slot->active] : NULL;
  bool speculate = threshold > 0.0f && cached;
  bpt_status speculative_status;
  BPT_CHECK(forward_with_speculation(trainer, label, speculate ? cached : NULL, row, &speculative_status));
  if (speculative_status != BPT_OK) return speculative_failed(trainer, speculative_status);

  bpt_backend *backend = trainer->backend;
  float loss = 0.0f;
  BPT_CHECK(bpt_graph_loss(graph, &loss));
  *loss_sum += loss;
  if (backend->vtable->download(backend, trainer->host_probabilities, trainer->loss->saved,
                                (size_t)trainer->classes * sizeof(float)) != BPT_OK)
    return bpt_backend_error(trainer->context, BPT_ERR_DEVICE, "bpt_speculative: reading the softmax output");

  bool hit = false;
  if (cached) {
    double distance = gate_distance(trainer, trainer->host_probabilities, cached->host_probabilities);
    trainer->distance_sum += distance;
    trainer->distance_count++;
    hit = speculate && distance <= (double)threshold;
  } else {
    trainer->counters.cold_fallbacks++;
  }
  trainer->counters.samples++;
  trainer->missed[row] = speculate && !hit;
  if (hit) {
    trainer->counters.hits++;
  } else {
    trainer->counters.fallbacks++;
    if (speculate && !trainer->threaded) BPT_CHECK(bpt_speculative_record_discard(trainer, cached));
    BPT_CHECK(engine(trainer, 1));
    BPT_CHECK(bpt_graph_backward_accumulate(graph));
    BPT_CHECK(join(trainer));
  }
  /* The refresh writes the slot's other state: wait if a queued job still reads it (rare: that job belongs to
   * an earlier sample of this label). */
  if (trainer->threaded) {
    const bpt_speculative_state *other = &slot->states[1 - slot->active];
    wait_for_job(trainer, other->reader_job);
  }
  return bpt_speculative_refresh(trainer, label);
}

bpt_status bpt_speculative_train_batch(bpt_speculative_trainer *trainer, const bpt_tensor *images,
                                       const bpt_tensor *labels, float *mean_loss) {
  const char *where = "bpt_speculative_train_batch";
  if (!trainer) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: trainer is NULL", where);
  bpt_context *context = trainer->context;
  if (!images || !labels) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: images or labels is NULL", where);
  BPT_CHECK(check_alive(trainer, where));
  if (images->dtype != BPT_DTYPE_F32 || labels->dtype != BPT_DTYPE_I32)
    return bpt_error(context, BPT_ERR_DTYPE, "%s: images must be f32 and labels i32", where);
  BPT_CHECK(bpt_thread_guard_enter(context, where));
  int64_t batch = images->dims[0];
  int64_t inner = 1;
  for (int i = 1; i < images->rank; i++)
    inner *= images->dims[i];
  if (inner != trainer->features || batch < 1 || labels->dims[0] != batch)
    return bpt_error(context, BPT_ERR_SHAPE,
                     "%s: images hold %lld samples of %lld values and labels %lld; input '%s' takes %lld values", where,
                     (long long)batch, (long long)inner, (long long)labels->dims[0], trainer->images->name,
                     (long long)trainer->features);
  BPT_CHECK(bpt_speculative_reserve(trainer, batch, trainer->threaded)); /* the worker is idle between batches */
  bpt_speculative_describe(trainer);
  double start = thread_seconds();
  trainer->main_wait_seconds = 0.0;
  float threshold = bpt_speculative_current_threshold(trainer);
  BPT_CHECK(bpt_graph_zero_gradients(trainer->graph));
  /* Each sample's loss is seeded with 1 / batch, so the summed gradients are the mini-batch mean. */
  BPT_CHECK(set_seed(trainer, 1.0f / (float)batch));
  trainer->retract_rows = 0;
  double loss_sum = 0.0;
  bpt_status status = BPT_OK;
  for (int64_t n = 0; n < batch && status == BPT_OK; n++) {
    memcpy(trainer->sample_images->data, (const float *)images->data + n * inner, (size_t)inner * sizeof(float));
    ((int32_t *)trainer->sample_labels->data)[0] = ((const int32_t *)labels->data)[n];
    status = train_sample(trainer, n, threshold, &loss_sum);
  }
  /* Every queued speculative backward finishes before its gradients are merged, retracted or overwritten. */
  bpt_status worker_status = drain(trainer);
  if (status == BPT_OK && worker_status != BPT_OK) status = speculative_failed(trainer, worker_status);
  if (status == BPT_OK && trainer->threaded && threshold > 0.0f) {
    status = bpt_speculative_merge(trainer);
    if (status == BPT_OK) status = bpt_speculative_compact_rows(trainer, trainer->missed, batch);
  }
  if (status == BPT_OK) status = bpt_speculative_retract(trainer);
  bpt_status restore = set_seed(trainer, 1.0f);
  if (status == BPT_OK) status = restore;
  if (status == BPT_OK && trainer->options.gradient_clip > 0.0f) status = clip_gradients(trainer);
  /* The gradients are complete even when every sample hit and the graph's own backward never ran. */
  if (status == BPT_OK) trainer->graph->backward_done = true;
  if (status == BPT_OK) status = bpt_optimizer_step(trainer->optimizer);
  trainer->counters.main_thread_seconds += thread_seconds() - start - trainer->main_wait_seconds;
  if (status != BPT_OK) return status;
  trainer->batches++;
  trainer->counters.mean_distance =
      trainer->distance_count ? trainer->distance_sum / (double)trainer->distance_count : 0.0;
  if (mean_loss) *mean_loss = (float)(loss_sum / (double)batch);
  return BPT_OK;
}

bpt_status bpt_speculative_get_counters(const bpt_speculative_trainer *trainer, bpt_speculative_counters *counters) {
  if (!trainer || !counters)
    return bpt_error(trainer ? trainer->context : NULL, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_speculative_get_counters: trainer or counters is NULL");
  return bpt_copy_output(trainer->context, counters, &trainer->counters, sizeof trainer->counters,
                         offsetof(bpt_speculative_counters, cold_fallbacks) + sizeof counters->cold_fallbacks,
                         "bpt_speculative_get_counters");
}

bpt_status bpt_speculative_reset_counters(bpt_speculative_trainer *trainer) {
  if (!trainer) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_speculative_reset_counters: trainer is NULL");
  memset(&trainer->counters, 0, sizeof trainer->counters);
  trainer->counters.size = sizeof trainer->counters;
  trainer->distance_sum = 0.0;
  trainer->distance_count = 0;
  return BPT_OK;
}

bpt_status bpt_speculative_clear_cache(bpt_speculative_trainer *trainer) {
  if (!trainer) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_speculative_clear_cache: trainer is NULL");
  if (!trainer->slots) return BPT_OK; /* released with its graph: nothing cached */
  for (int64_t c = 0; c < trainer->classes; c++)
    trainer->slots[c].valid = false;
  return BPT_OK;
}
