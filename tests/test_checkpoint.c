/* Checkpoints: round trips, bit-identical resume of a shuffled MLP training run (SGD with momentum and
 * Adam), refusal of files that do not match (with the message naming the difference), corruption and
 * truncation, forward-compatible optional sections, and a save killed with SIGKILL mid-write. */
#define _POSIX_C_SOURCE 200809L
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/graph.h"
#include "test_support.h"

enum { SAMPLES = 64, SIDE = 4, CLASSES = 3, BATCH = 10, HIDDEN = 8 };

/* Synthetic IDX files: SAMPLES 4x4 images whose class decides which quadrant is bright. */
static void write_dataset(char *images_path, char *labels_path) {
  unsigned char images[16 + SAMPLES * SIDE * SIDE], labels[8 + SAMPLES];
  const unsigned char image_header[16] = {0, 0, 8, 3, 0, 0, 0, SAMPLES, 0, 0, 0, SIDE, 0, 0, 0, SIDE};
  const unsigned char label_header[8] = {0, 0, 8, 1, 0, 0, 0, SAMPLES};
  memcpy(images, image_header, 16);
  memcpy(labels, label_header, 8);
  test_random random;
  test_random_seed(&random, 5);
  for (int n = 0; n < SAMPLES; n++) {
    labels[8 + n] = (unsigned char)(n % CLASSES);
    for (int i = 0; i < SIDE * SIDE; i++) {
      float base = (i % CLASSES) == n % CLASSES ? 180.0f : 40.0f;
      images[16 + n * SIDE * SIDE + i] = (unsigned char)(base + test_random_uniform(&random, 0.0f, 70.0f));
    }
  }
  strcpy(images_path, test_write_file("ckpt-images-idx3-ubyte", images, sizeof images));
  strcpy(labels_path, test_write_file("ckpt-labels-idx1-ubyte", labels, sizeof labels));
}

static char *temporary(const char *name) {
  static char paths[4][4096];
  static int slot;
  char *path = paths[slot++ % 4];
  strcpy(path, test_write_file(name, "", 0));
  return path;
}

typedef struct model {
  bpt_context *context;
  bpt_dataset *data;
  bpt_graph *graph;
  bpt_node *x, *y, *logits, *loss;
  bpt_optimizer *optimizer;
  bpt_tensor *images, *labels;
  uint64_t seed;
} model;

/* The precision policy model_create gives its graphs (set by one test, cleared by its teardown). */
static bpt_precision_options model_precision;
static bool model_uses_precision;

static void model_create(model *m, bpt_optimizer_kind kind, int64_t hidden, uint64_t seed) {
  memset(m, 0, sizeof *m);
  char images_path[4096], labels_path[4096];
  write_dataset(images_path, labels_path);
  m->seed = seed;
  m->context = test_context(seed);
  bpt_context *c = m->context;
  assert_ok(c, bpt_dataset_load_idx(c, images_path, labels_path, &m->data));
  int64_t features = SIDE * SIDE, dims[2] = {BATCH, SIDE * SIDE};
  bpt_node *h;
  assert_ok(c, bpt_graph_create(c, &m->graph));
  if (model_uses_precision) assert_ok(c, bpt_graph_set_precision(m->graph, &model_precision));
  assert_ok(c, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &m->x));
  assert_ok(c, bpt_graph_input(m->graph, "y", BPT_DTYPE_I32, 0, NULL, &m->y));
  assert_ok(c, bpt_layer_linear(m->graph, "fc1", m->x, hidden, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(c, bpt_relu(m->graph, "relu1", h, &h));
  /* Dropout's masks follow the optimiser step count, which a resumed run must pick up where it stopped. */
  assert_ok(c, bpt_dropout(m->graph, "dropout1", h, 0.2f, &h));
  assert_ok(c, bpt_layer_linear(m->graph, "fc2", h, CLASSES, BPT_INIT_XAVIER_UNIFORM, &m->logits));
  assert_ok(c, bpt_softmax_cross_entropy(m->graph, "loss", m->logits, m->y, &m->loss));
  assert_ok(c, bpt_graph_compile(m->graph, m->loss, BATCH));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = kind;
  options.learning_rate = kind == BPT_OPTIMIZER_SGD ? 0.1f : 0.01f;
  options.momentum = kind == BPT_OPTIMIZER_SGD ? 0.9f : 0.0f;
  options.weight_decay = 1e-4f;
  assert_ok(c, bpt_optimizer_create(m->graph, &options, &m->optimizer));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, dims, &m->images));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, dims, &m->labels));
}

static void model_destroy(model *m) {
  bpt_tensor_destroy(m->images);
  bpt_tensor_destroy(m->labels);
  bpt_optimizer_destroy(m->optimizer);
  bpt_graph_destroy(m->graph);
  bpt_dataset_destroy(m->data);
  bpt_context_destroy(m->context);
}

/* The examples' loop: a shuffle (composing with the previous ones) at the start of each epoch, then batches,
 * with a step-decayed learning rate. Stops after max_steps optimizer steps, leaving (epoch, step) where the next
 * batch would start. */
static void train(model *m, int64_t *epoch, int64_t *step, int64_t epochs, int64_t max_steps) {
  bpt_context *c = m->context;
  int64_t batches = bpt_dataset_batch_count(m->data, BATCH), done = 0;
  while (*epoch < epochs) {
    if (*step == 0) assert_ok(c, bpt_dataset_shuffle(m->data, m->seed + (uint64_t)*epoch));
    for (; *step < batches; (*step)++) {
      if (done == max_steps) return;
      assert_ok(c, bpt_dataset_batch(m->data, *step, BATCH, m->images, m->labels));
      assert_ok(c, bpt_graph_set_input(m->graph, m->x, m->images));
      assert_ok(c, bpt_graph_set_input(m->graph, m->y, m->labels));
      assert_ok(c, bpt_graph_forward(m->graph));
      assert_ok(c, bpt_graph_backward(m->graph));
      assert_ok(c, bpt_optimizer_step(m->optimizer));
      float rate = bpt_optimizer_learning_rate(m->optimizer);
      if (bpt_optimizer_step_count(m->optimizer) % 5 == 0)
        assert_ok(c, bpt_optimizer_set_learning_rate(m->optimizer, rate * 0.9f));
      done++;
    }
    *step = 0;
    (*epoch)++;
  }
}

static float *read_parameters(model *m) {
  int64_t count = bpt_graph_parameter_count(m->graph);
  float *values = malloc((size_t)count * sizeof *values);
  assert_ok(m->context, bpt_graph_read_parameters(m->graph, values, count));
  return values;
}

static bpt_checkpoint_contents full_contents(model *m, int64_t epoch, int64_t step) {
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = m->optimizer;
  contents.dataset = m->data;
  contents.epoch = epoch;
  contents.step = step;
  return contents;
}

/* Trains 4 epochs straight, and again stopped at step `stop` (mid-epoch), saved, torn down, rebuilt with a
 * different seed (so nothing but the checkpoint can carry the state) and resumed: the results must be equal
 * to the bit. */
static void check_resume(bpt_optimizer_kind kind, int64_t stop) {
  const int64_t epochs = 4;
  model straight, first, second;
  int64_t epoch = 0, step = 0;
  model_create(&straight, kind, HIDDEN, 11);
  train(&straight, &epoch, &step, epochs, -1);
  float *expected = read_parameters(&straight);
  float final_loss;
  assert_ok(straight.context, bpt_graph_loss(straight.graph, &final_loss));

  const char *path = temporary("resume.ckpt");
  epoch = step = 0;
  model_create(&first, kind, HIDDEN, 11);
  train(&first, &epoch, &step, epochs, stop);
  assert_true(epoch < epochs && step > 0); /* really mid-epoch */
  const float expected_scale = bpt_graph_loss_scale(first.graph);
  const int64_t expected_steps = bpt_optimizer_step_count(first.optimizer); /* skipped steps do not count */
  const int64_t expected_skipped = bpt_graph_skipped_steps(first.graph);
  bpt_checkpoint_contents contents = full_contents(&first, epoch, step);
  assert_ok(first.context, bpt_checkpoint_save(first.graph, path, &contents));
  model_destroy(&first);

  model_create(&second, kind, HIDDEN, 999);
  second.seed = 11; /* the loop's shuffle seeds; the context seed (initial weights) stays different */
  contents = full_contents(&second, -1, -1);
  assert_ok(second.context, bpt_checkpoint_load(second.graph, path, &contents));
  assert_int_equal(contents.epoch, epoch);
  assert_int_equal(contents.step, step);
  assert_int_equal(bpt_optimizer_step_count(second.optimizer), expected_steps);
  assert_true(bpt_graph_loss_scale(second.graph) == expected_scale);
  assert_int_equal(bpt_graph_skipped_steps(second.graph), expected_skipped);
  epoch = contents.epoch;
  step = contents.step;
  train(&second, &epoch, &step, epochs, -1);
  float *actual = read_parameters(&second);
  int64_t count = bpt_graph_parameter_count(second.graph);
  assert_memory_equal(actual, expected, (size_t)count * sizeof *actual);
  float resumed_loss;
  assert_ok(second.context, bpt_graph_loss(second.graph, &resumed_loss));
  assert_memory_equal(&resumed_loss, &final_loss, sizeof final_loss);
  assert_true(bpt_optimizer_learning_rate(second.optimizer) == bpt_optimizer_learning_rate(straight.optimizer));

  /* Control: without restoring the sample order, the same resume diverges (the test can fail). */
  model third;
  model_create(&third, kind, HIDDEN, 999);
  third.seed = 11;
  contents = full_contents(&third, 0, 0);
  contents.dataset = NULL;
  assert_ok(third.context, bpt_checkpoint_load(third.graph, path, &contents));
  epoch = contents.epoch;
  step = contents.step;
  train(&third, &epoch, &step, epochs, -1);
  float *diverged = read_parameters(&third);
  assert_true(memcmp(diverged, expected, (size_t)count * sizeof *diverged) != 0);

  free(expected);
  free(actual);
  free(diverged);
  model_destroy(&straight);
  model_destroy(&second);
  model_destroy(&third);
}

static void resume_sgd_momentum_is_bit_identical(void **state) {
  (void)state;
  check_resume(BPT_OPTIMIZER_SGD, 10);
}

/* f16 compute with dynamic loss scaling from a scale that overflows: the scaler backs off, skips steps and
 * grows again every 2 clean steps, so a resume that restarted it would skip different steps. */
static void resume_loss_scaled_f16_is_bit_identical(void **state) {
  (void)state;
  model_precision = bpt_precision_options_default();
  model_precision.compute_dtype = BPT_DTYPE_F16;
  model_precision.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  model_precision.initial_loss_scale = 0x1p20f;
  model_precision.growth_interval = 2;
  model_uses_precision = true;
  model probe;
  int64_t epoch = 0, step = 0;
  model_create(&probe, BPT_OPTIMIZER_SGD, HIDDEN, 11);
  train(&probe, &epoch, &step, 4, 13);
  /* The scaler must really have skipped and stepped by the stop, or the test proves nothing. */
  assert_true(bpt_graph_skipped_steps(probe.graph) > 0 && bpt_optimizer_step_count(probe.optimizer) > 0);
  model_destroy(&probe);
  check_resume(BPT_OPTIMIZER_SGD, 13);
}

static int use_plain_f32(void **state) {
  (void)state;
  model_uses_precision = false;
  return 0;
}

static void resume_adam_is_bit_identical(void **state) {
  (void)state;
  check_resume(BPT_OPTIMIZER_ADAM, 17);
}

/* Loads `path` into a fresh model built with `hidden` units and `kind`, expecting failure with `fragment`. */
static void expect_refusal(const char *path, bpt_optimizer_kind kind, int64_t hidden, bool with_optimizer,
                           bpt_status expected, const char *fragment) {
  model m;
  model_create(&m, kind, hidden, 3);
  float *before = read_parameters(&m);
  bpt_checkpoint_contents contents = full_contents(&m, 0, 0);
  if (!with_optimizer) contents.optimizer = NULL;
  assert_fails(m.context, expected, fragment, bpt_checkpoint_load(m.graph, path, &contents));
  float *after = read_parameters(&m);
  assert_memory_equal(before, after, (size_t)bpt_graph_parameter_count(m.graph) * sizeof *after);
  free(before);
  free(after);
  model_destroy(&m);
}

static void mismatching_files_are_refused(void **state) {
  (void)state;
  model m;
  model_create(&m, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  int64_t epoch = 0, step = 0;
  train(&m, &epoch, &step, 1, 3);
  char path[4096];
  strcpy(path, temporary("mismatch.ckpt"));
  bpt_checkpoint_contents contents = full_contents(&m, epoch, step);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, &contents));
  model_destroy(&m);

  expect_refusal(path, BPT_OPTIMIZER_SGD, HIDDEN + 1, true, BPT_ERR_SHAPE,
                 "parameter 'fc1.weight': shape [8,16] in the file, [9,16] in the graph");
  expect_refusal(path, BPT_OPTIMIZER_ADAM, HIDDEN, true, BPT_ERR_INVALID_ARGUMENT,
                 "saved optimizer is sgd, this one is adam");

  /* The same parameters in another architecture: a strict load compares the nodes both graphs name alike (here
   * 'loss', another op) and refuses, naming the node. */
  {
    bpt_context *c = test_context(1);
    bpt_graph *graph;
    bpt_node *x, *h, *loss, *target;
    int64_t features = SIDE * SIDE, classes = CLASSES;
    assert_ok(c, bpt_graph_create(c, &graph));
    assert_ok(c, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
    assert_ok(c, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &classes, &target));
    assert_ok(c, bpt_layer_linear(graph, "fc1", x, HIDDEN, BPT_INIT_HE_UNIFORM, &h));
    assert_ok(c, bpt_tanh(graph, "act", h, &h));
    assert_ok(c, bpt_dropout(graph, "dropout", h, 0.2f, &h));
    assert_ok(c, bpt_layer_linear(graph, "fc2", h, CLASSES, BPT_INIT_HE_UNIFORM, &h));
    assert_ok(c, bpt_mse_loss(graph, "loss", h, target, &loss));
    assert_ok(c, bpt_graph_compile(graph, loss, BATCH));
    assert_fails(c, BPT_ERR_SHAPE, "node 'loss' is softmax_cross_entropy in the file but mse in this graph",
                 bpt_checkpoint_load(graph, path, NULL));
    bpt_graph_destroy(graph);
    bpt_context_destroy(c);
  }

  /* The same graph with a different momentum: the update rule differs. */
  {
    model other;
    model_create(&other, BPT_OPTIMIZER_SGD, HIDDEN, 3);
    bpt_optimizer_options options = bpt_optimizer_options_default();
    options.momentum = 0.5f;
    bpt_optimizer *optimizer;
    assert_ok(other.context, bpt_optimizer_create(other.graph, &options, &optimizer));
    bpt_checkpoint_contents with = full_contents(&other, 0, 0);
    with.optimizer = optimizer;
    assert_fails(other.context, BPT_ERR_INVALID_ARGUMENT, "momentum 0.9, this one 0.5",
                 bpt_checkpoint_load(other.graph, path, &with));
    bpt_optimizer_destroy(optimizer);
    model_destroy(&other);
  }

  /* Corruption: one flipped byte in the parameters, a truncated file, trailing bytes, a bad magic. */
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  unsigned char *copy = malloc(size + 1);
  memcpy(copy, bytes, size);
  copy[size - 100] ^= 0x40;
  expect_refusal(test_write_file("flipped.ckpt", copy, size), BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT,
                 "CRC mismatch");
  expect_refusal(test_write_file("truncated.ckpt", bytes, size - 7), BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT,
                 "truncated");
  memcpy(copy, bytes, size);
  copy[size] = 0;
  expect_refusal(test_write_file("trailing.ckpt", copy, size + 1), BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT,
                 "unexpected data after the last section");
  copy[0] = 'X';
  expect_refusal(test_write_file("magic.ckpt", copy, size), BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT,
                 "not a libbptrain checkpoint");
  expect_refusal(test_write_file("empty.ckpt", "", 0), BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT,
                 "not a libbptrain checkpoint");
  expect_refusal("/nonexistent/dir/x.ckpt", BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_IO, "cannot open");
  free(copy);
  free(bytes);

  /* A parameters-only checkpoint cannot restore an optimizer. */
  model plain;
  model_create(&plain, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  assert_ok(plain.context, bpt_checkpoint_save(plain.graph, path, NULL));
  model_destroy(&plain);
  expect_refusal(path, BPT_OPTIMIZER_SGD, HIDDEN, true, BPT_ERR_FORMAT, "no optimizer state");
}

/* Builds a file by hand from a saved one plus one extra section, to check forward compatibility. */
static void check_extra_section(uint32_t flags, bool accepted) {
  model m;
  model_create(&m, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  const char *path = temporary("extra.ckpt");
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  bpt_writer writer = {0};
  bpt_put_bytes(&writer, bytes, size);
  size_t start = bpt_section_begin(&writer, BPT_TAG('Z', 'Z', 'Z', 'Z'), flags);
  bpt_put_string(&writer, "a section from the future");
  bpt_section_end(&writer, start);
  uint32_t sections = bytes[16] | (uint32_t)bytes[17] << 8;
  bpt_writer_finish(&writer, sections + 1);
  free(bytes);
  const char *extended = test_write_file("extended.ckpt", writer.bytes, writer.size);
  if (accepted)
    assert_ok(m.context, bpt_checkpoint_load(m.graph, extended, NULL));
  else
    assert_fails(m.context, BPT_ERR_FORMAT, "required section 'ZZZZ' is unknown",
                 bpt_checkpoint_load(m.graph, extended, NULL));
  bpt_writer_free(&writer);
  model_destroy(&m);
}

static void unknown_sections_skip_when_optional(void **state) {
  (void)state;
  check_extra_section(BPT_SECTION_OPTIONAL, true);
  check_extra_section(0, false);
}

/* Non-trainable buffers registered by ops (batch-norm running statistics) travel with the checkpoint. */
static void registered_buffers_round_trip(void **state) {
  (void)state;
  model m;
  model_create(&m, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  float *running = NULL;
  bpt_backend *backend = m.graph->backend;
  assert_int_equal(backend->vtable->alloc(backend, 5 * sizeof(float), (void **)&running), BPT_OK);
  const float saved[5] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f}, changed[5] = {0};
  float loaded[5];
  backend->vtable->upload(backend, running, saved, sizeof saved);
  assert_ok(m.context, bpt_graph_register_buffer(m.graph, "bn.running_mean", running, 5));
  const char *path = temporary("buffers.ckpt");
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  backend->vtable->upload(backend, running, changed, sizeof changed);
  assert_ok(m.context, bpt_checkpoint_load(m.graph, path, NULL));
  backend->vtable->download(backend, loaded, running, sizeof loaded);
  assert_memory_equal(loaded, saved, sizeof saved);

  /* A graph without the buffer refuses the file rather than silently dropping the statistics. */
  model other;
  model_create(&other, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  assert_fails(other.context, BPT_ERR_SHAPE, "buffer 'bn.running_mean' [5] in the file is not in this graph",
               bpt_checkpoint_load(other.graph, path, NULL));
  model_destroy(&other);
  backend->vtable->free(backend, running);
  model_destroy(&m);
}

/* An op's builder can register a buffer inside its node's saved memory before that memory exists. */
static void node_buffers_register_before_compile(void **state) {
  (void)state;
  bpt_context *c = test_context(5);
  bpt_graph *graph;
  bpt_node *x, *y, *logits, *loss;
  int64_t features = 4;
  assert_ok(c, bpt_graph_create(c, &graph));
  assert_ok(c, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(c, bpt_graph_input(graph, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(c, bpt_layer_linear(graph, "fc", x, 3, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(c, bpt_softmax_cross_entropy(graph, "loss", logits, y, &loss));
  assert_ok(c, bpt_graph_register_node_buffer(graph, "loss.statistic", loss, 2 * sizeof(float), 3));
  assert_ok(c, bpt_graph_compile(graph, loss, 2));
  bpt_backend *backend = graph->backend;
  const float saved[3] = {4.0f, -1.0f, 0.5f}, changed[3] = {0};
  float loaded[3];
  float *where = (float *)loss->saved + 2;
  backend->vtable->upload(backend, where, saved, sizeof saved);
  const char *path = temporary("node-buffer.ckpt");
  assert_ok(c, bpt_checkpoint_save(graph, path, NULL));
  backend->vtable->upload(backend, where, changed, sizeof changed);
  assert_ok(c, bpt_checkpoint_load(graph, path, NULL));
  backend->vtable->download(backend, loaded, where, sizeof loaded);
  assert_memory_equal(loaded, saved, sizeof saved);
  bpt_graph_destroy(graph);
  bpt_context_destroy(c);
}

/* A failed save (missing directory, target is a directory, disk full) reports an error and keeps the old file. */
static void failed_saves_keep_the_previous_file(void **state) {
  (void)state;
  model m;
  model_create(&m, BPT_OPTIMIZER_SGD, HIDDEN, 3);
  assert_fails(m.context, BPT_ERR_IO, "cannot create", bpt_checkpoint_save(m.graph, "/nonexistent/dir/x.ckpt", NULL));
  const char *file = temporary("kept.ckpt");
  char directory[4096];
  snprintf(directory, sizeof directory, "%s", file);
  *strrchr(directory, '/') = 0;
  assert_fails(m.context, BPT_ERR_IO, "is a directory", bpt_checkpoint_save(m.graph, directory, NULL));

  /* A full disk, simulated with a file-size limit in a child: the write fails, the old checkpoint stays. */
  const char *path = temporary("full-disk.ckpt");
  float *before = read_parameters(&m);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    struct rlimit limit = {512, 512}; /* the file is about 1.2 KB */
    signal(SIGXFSZ, SIG_IGN);
    int64_t count = bpt_graph_parameter_count(m.graph);
    float *zeros = calloc((size_t)count, sizeof *zeros);
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0 || bpt_graph_write_parameters(m.graph, zeros, count) != BPT_OK) _exit(2);
    bpt_status status = bpt_checkpoint_save(m.graph, path, NULL);
    _exit(status == BPT_ERR_IO && strstr(bpt_context_last_error(m.context), "write failed") ? 0 : 1);
  }
  int status;
  waitpid(child, &status, 0);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  model other;
  model_create(&other, BPT_OPTIMIZER_SGD, HIDDEN, 77);
  assert_ok(other.context, bpt_checkpoint_load(other.graph, path, NULL));
  float *after = read_parameters(&other);
  assert_memory_equal(before, after, (size_t)bpt_graph_parameter_count(m.graph) * sizeof *after);
  free(before);
  free(after);
  model_destroy(&other);
  model_destroy(&m);
}

/* A child saves in a loop, each save with all parameters and the epoch equal to its counter; SIGKILL
 * lands at random points of the write. The file must always load and be one complete save. */
static void kill_during_save_leaves_a_valid_file(void **state) {
  (void)state;
  model m;
  model_create(&m, BPT_OPTIMIZER_SGD, 4096, 3); /* a larger layer makes each save take longer */
  char path[4096];
  strcpy(path, temporary("killed.ckpt"));
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *values = malloc((size_t)count * sizeof *values);
  for (int64_t i = 0; i < count; i++)
    values[i] = 0.0f;
  assert_ok(m.context, bpt_graph_write_parameters(m.graph, values, count));
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  int kills = 0, reloads = 0, mid_write = 0;
  int64_t versions = 0;
  struct timespec begin;
  clock_gettime(CLOCK_MONOTONIC, &begin);
  for (int round = 0; round < 12; round++) {
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      close(ready[0]);
      for (int64_t version = 1;; version++) {
        for (int64_t i = 0; i < count; i++)
          values[i] = (float)version;
        bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
        contents.epoch = version;
        if (bpt_graph_write_parameters(m.graph, values, count) != BPT_OK ||
            bpt_checkpoint_save(m.graph, path, &contents) != BPT_OK)
          _exit(3);
        /* After the first complete save, tell the parent it may start aiming its SIGKILL (under valgrind
           the child is slow to start, and killing it before any save would test nothing). */
        if (version == 1 && (write(ready[1], "s", 1) != 1 || close(ready[1]) != 0)) _exit(4);
      }
    }
    close(ready[1]);
    char byte;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    struct timespec pause = {0, (long)(2 + 5 * round) * 1000000L};
    nanosleep(&pause, NULL);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    test_forget_killed_process(child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    kills++;
    bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
    assert_ok(m.context, bpt_checkpoint_load(m.graph, path, &contents));
    assert_ok(m.context, bpt_graph_read_parameters(m.graph, values, count));
    for (int64_t i = 0; i < count; i++)
      assert_true(values[i] == (float)contents.epoch);
    reloads++;
    versions += contents.epoch;
    /* The killed child may leave its temporary file (then it died mid-save); it never replaces the checkpoint. */
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s.tmp-*", path);
    glob_t found;
    if (glob(pattern, 0, NULL, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; i++)
        mid_write += unlink(found.gl_pathv[i]) == 0;
      globfree(&found);
    }
  }
  print_message("%d SIGKILLs during save loops (%d left a partial temporary file), %d valid reloads, %lld saves "
                "completed before the kills\n",
                kills, mid_write, reloads, (long long)versions);
  assert_true(versions > 0);
  free(values);
  model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resume_sgd_momentum_is_bit_identical),
      cmocka_unit_test(resume_adam_is_bit_identical),
      cmocka_unit_test_teardown(resume_loss_scaled_f16_is_bit_identical, use_plain_f32),
      cmocka_unit_test(mismatching_files_are_refused),
      cmocka_unit_test(unknown_sections_skip_when_optional),
      cmocka_unit_test(registered_buffers_round_trip),
      cmocka_unit_test(node_buffers_register_before_compile),
      cmocka_unit_test(failed_saves_keep_the_previous_file),
      cmocka_unit_test(kill_during_save_leaves_a_valid_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
