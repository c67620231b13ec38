/* Fuzz target bodies (see fuzz_targets.h). Everything the library reads from untrusted bytes goes through
 * here: IDX files (plain and gzip) into data sets, and checkpoints into a compiled graph, optimiser and data
 * set. Whatever is accepted is then used (batches drawn, a forward pass run), so a file that passes
 * validation but is inconsistent shows up as an ASan report rather than hiding. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "bptrain.h"
#include "core/checkpoint.h"
#include "core/data/idx.h"
#include "core/graph.h"

static bpt_context *fuzz_context(void) {
  static bpt_context *context;
  if (!context) {
    bpt_context_options options = bpt_context_options_default();
    options.num_threads = 1;
    options.seed = 1;
    if (bpt_context_create(&options, &context) != BPT_OK) abort();
  }
  return context;
}

/* This process's scratch files, removed when it exits: a long fuzzing session starts many processes, and
 * files left in /dev/shm hold memory until reboot. */
enum { SCRATCH_FILES = 8 };
static char scratch_files[SCRATCH_FILES][512];

static void remove_scratch_files(void) {
  for (int i = 0; i < SCRATCH_FILES && scratch_files[i][0]; i++)
    remove(scratch_files[i]);
}

/* A per-process file in a RAM-backed folder: gzopen needs a path, and workers run in parallel. */
static const char *scratch_path(const char *suffix, char *buffer, size_t size) {
  const char *folder = getenv("BPT_FUZZ_TMPDIR");
  if (!folder) folder = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(buffer, size, "%s/bpt-fuzz-%ld-%s", folder, (long)getpid(), suffix);
  int i = 0;
  while (i < SCRATCH_FILES && scratch_files[i][0] && strcmp(scratch_files[i], buffer) != 0)
    i++;
  if (i < SCRATCH_FILES && !scratch_files[i][0]) {
    if (i == 0) atexit(remove_scratch_files);
    snprintf(scratch_files[i], sizeof scratch_files[i], "%s", buffer);
  }
  return buffer;
}

static void write_file(const char *path, const uint8_t *bytes, size_t size) {
  FILE *file = fopen(path, "wb");
  if (!file) abort();
  if (size && fwrite(bytes, 1, size, file) != size) abort();
  if (fclose(file) != 0) abort();
}

/* Draws every batch (up to 64) of a loaded data set, as training would. */
static void use_dataset(bpt_context *context, bpt_dataset *dataset, uint64_t seed) {
  int64_t sample = bpt_dataset_sample_size(dataset);
  if (sample < 1 || sample > (1 << 20)) return;
  int64_t dims[2] = {4, sample};
  bpt_tensor *images = NULL, *labels = NULL;
  if (bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &images) == BPT_OK &&
      bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &labels) == BPT_OK) {
    bpt_dataset_set_normalization(dataset, 0.5f, 0.25f);
    bpt_dataset_shuffle(dataset, seed);
    int has_labels = bpt_dataset_class_count(dataset) > 0;
    int64_t batches = bpt_dataset_batch_count(dataset, 4);
    for (int64_t b = 0; b < batches && b < 64; b++)
      if (bpt_dataset_batch(dataset, b, 4, images, has_labels ? labels : NULL) == BPT_OK && has_labels) {
        const int32_t *values = bpt_tensor_data(labels);
        for (int64_t n = 0; n < bpt_tensor_dim(labels, 0); n++)
          if (values[n] < 0 || values[n] >= bpt_dataset_class_count(dataset)) abort();
      }
  }
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
}

int bpt_fuzz_idx(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bpt_context *context = fuzz_context();
  char images_path[512], labels_path[512];
  scratch_path("images", images_path, sizeof images_path);
  scratch_path("labels", labels_path, sizeof labels_path);
  if (!(data[0] & 1)) {
    write_file(images_path, data + 1, size - 1);
    bpt_idx idx;
    if (bpt_idx_read(context, images_path, &idx) == BPT_OK) {
      int64_t count = 1;
      for (int i = 0; i < idx.rank; i++)
        count *= idx.dims[i];
      if (count != idx.count || idx.rank < 1 || idx.rank > BPT_IDX_MAX_RANK) abort();
      volatile uint8_t last = idx.data[idx.count - 1]; /* the whole promised payload is really there */
      (void)last;
      bpt_idx_free(&idx);
    }
    return 0;
  }
  if (size < 3) return 0;
  size_t split = (size_t)data[1] | (size_t)data[2] << 8;
  if (split > size - 3) split = size - 3;
  write_file(images_path, data + 3, split);
  write_file(labels_path, data + 3 + split, size - 3 - split);
  bpt_dataset *dataset = NULL;
  if (bpt_dataset_load_idx(context, images_path, (data[0] & 2) ? NULL : labels_path, &dataset) == BPT_OK) {
    use_dataset(context, dataset, data[0]);
    bpt_dataset_destroy(dataset);
  }
  return 0;
}

/* ---- checkpoints ---- */

typedef struct fixture {
  bpt_context *context;
  bpt_dataset *dataset;
  bpt_graph *graph;
  bpt_node *x, *labels;
  bpt_optimizer *optimizer;
  bpt_tensor *images, *label_values;
  float *buffer;
} fixture;

/* Five 2x2 images with labels 0..2, a 4-3-3 MLP with cross-entropy, Adam (two state buffers), and one
 * registered buffer standing in for batch-norm statistics. Built once per process. */
static fixture *checkpoint_fixture(void) {
  static fixture f;
  if (f.graph) return &f;
  f.context = fuzz_context();
  static const uint8_t images[16 + 20] = {0, 0, 8,  3,  0,  0,  0, 5, 0, 0, 0,   2,   0, 0,   0, 2, 1, 2,
                                          3, 4, 50, 60, 70, 80, 9, 8, 7, 6, 200, 100, 0, 255, 5, 5, 5, 5};
  static const uint8_t labels[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5, 0, 1, 2, 0, 1};
  char images_path[512], labels_path[512];
  write_file(scratch_path("fixture-images", images_path, sizeof images_path), images, sizeof images);
  write_file(scratch_path("fixture-labels", labels_path, sizeof labels_path), labels, sizeof labels);
  int64_t features = 4, dims[2] = {4, 4};
  bpt_node *h, *loss;
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_ADAM;
  if (bpt_dataset_load_idx(f.context, images_path, labels_path, &f.dataset) != BPT_OK ||
      bpt_graph_create(f.context, &f.graph) != BPT_OK ||
      bpt_graph_input(f.graph, "x", BPT_DTYPE_F32, 1, &features, &f.x) != BPT_OK ||
      bpt_graph_input(f.graph, "labels", BPT_DTYPE_I32, 0, NULL, &f.labels) != BPT_OK ||
      bpt_layer_linear(f.graph, "fc1", f.x, 3, BPT_INIT_HE_UNIFORM, &h) != BPT_OK ||
      bpt_relu(f.graph, "relu", h, &h) != BPT_OK ||
      bpt_layer_linear(f.graph, "fc2", h, 3, BPT_INIT_XAVIER_UNIFORM, &h) != BPT_OK ||
      bpt_softmax_cross_entropy(f.graph, "loss", h, f.labels, &loss) != BPT_OK ||
      bpt_graph_compile(f.graph, loss, 4) != BPT_OK ||
      bpt_optimizer_create(f.graph, &options, &f.optimizer) != BPT_OK ||
      bpt_tensor_create(f.context, BPT_DTYPE_F32, 2, dims, &f.images) != BPT_OK ||
      bpt_tensor_create(f.context, BPT_DTYPE_I32, 1, dims, &f.label_values) != BPT_OK) {
    fprintf(stderr, "fuzz fixture: %s\n", bpt_context_last_error(f.context));
    abort();
  }
  f.buffer = calloc(3, sizeof *f.buffer); /* CPU backend: device memory is host memory */
  if (!f.buffer || bpt_graph_register_buffer(f.graph, "bn.running_mean", f.buffer, 3) != BPT_OK) abort();
  return &f;
}

/* One training step on batch 0, which reads samples through the (possibly just loaded) order. A loaded
 * checkpoint may hold inf or NaN weights (a diverged run is still a valid file), so the step may refuse with
 * BPT_ERR_NUMERIC; it may also hold the step count INT64_MAX (the largest the optimiser reaches, so it saves
 * and loads), from which the step refuses with BPT_ERR_STATE rather than wrap. Any other failure after a
 * successful load is a bug. */
static void train_step(fixture *f) {
  bpt_status status = bpt_dataset_batch(f->dataset, 0, 4, f->images, f->label_values);
  if (status == BPT_OK) status = bpt_graph_set_input(f->graph, f->x, f->images);
  if (status == BPT_OK) status = bpt_graph_set_input(f->graph, f->labels, f->label_values);
  if (status == BPT_OK) status = bpt_graph_forward(f->graph);
  if (status == BPT_OK) status = bpt_graph_backward(f->graph);
  if (status == BPT_OK) status = bpt_optimizer_step(f->optimizer);
  const bool at_last_step = status == BPT_ERR_STATE && bpt_optimizer_step_count(f->optimizer) == INT64_MAX;
  if (status != BPT_OK && status != BPT_ERR_NUMERIC && !at_last_step) {
    fprintf(stderr, "fuzz training step: %s\n", bpt_context_last_error(f->context));
    abort();
  }
}

static uint32_t load32(const uint8_t *at) {
  return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

static void store32(uint8_t *at, uint32_t value) {
  for (int i = 0; i < 4; i++)
    at[i] = (uint8_t)(value >> (8 * i));
}

/* Inflates every member of a gzip stream with zlib alone (the oracle for bpt_fuzz_gzip); returns the output
 * (malloc'd) when the stream is one or more complete members and nothing else, NULL otherwise. */
static unsigned char *oracle_inflate(const uint8_t *data, size_t size, size_t limit, size_t *out_size) {
  size_t capacity = 4096, used = 0, at = 0;
  unsigned char *out = malloc(capacity);
  if (!out) abort();
  while (at < size) {
    z_stream stream;
    memset(&stream, 0, sizeof stream);
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) abort();
    stream.next_in = (Bytef *)data + at;
    stream.avail_in = (uInt)(size - at);
    int status;
    do {
      if (used == capacity) {
        if (capacity >= limit) break;
        capacity *= 2;
        out = realloc(out, capacity);
        if (!out) abort();
      }
      stream.next_out = out + used;
      stream.avail_out = (uInt)(capacity - used);
      status = inflate(&stream, Z_NO_FLUSH);
      used = capacity - stream.avail_out;
    } while (status == Z_OK);
    at = size - stream.avail_in;
    inflateEnd(&stream);
    if (status != Z_STREAM_END) {
      free(out);
      return NULL;
    }
  }
  *out_size = used;
  return out;
}

int bpt_fuzz_gzip(const uint8_t *data, size_t size) {
  bpt_context *context = fuzz_context();
  char path[512];
  scratch_path("gzip.gz", path, sizeof path);
  write_file(path, data, size);
  bpt_idx idx;
  if (bpt_idx_read(context, path, &idx) != BPT_OK) return 0;
  /* Accepted: a gzip file must be complete members whose contents are exactly this header and payload. */
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    size_t header = 4 + 4 * (size_t)idx.rank, inflated = 0;
    unsigned char *plain = oracle_inflate(data, size, header + (size_t)idx.count + 1, &inflated);
    if (!plain || inflated != header + (size_t)idx.count || memcmp(plain + header, idx.data, (size_t)idx.count) != 0)
      abort();
    free(plain);
  }
  bpt_idx_free(&idx);
  return 0;
}

/* Recomputes the header and section CRCs wherever the layout (docs/checkpoints.md) makes sense. */
static void fix_crcs(uint8_t *bytes, size_t size) {
  if (size < 24) return;
  store32(bytes + 20, (uint32_t)crc32(0, bytes, 20));
  size_t offset = 24;
  for (uint32_t i = 0, count = load32(bytes + 16); i < count && size - offset >= 20; i++) {
    uint64_t length = load32(bytes + offset + 8) | (uint64_t)load32(bytes + offset + 12) << 32;
    if (length > size - offset - 20) return;
    /* Format 2: the CRC covers the section header's tag, flags and length, then the payload. */
    uLong crc = crc32(0, bytes + offset, 16);
    store32(bytes + offset + 16, (uint32_t)crc32(crc, bytes + offset + 20, (uInt)length));
    offset += 20 + (size_t)length;
  }
}

int bpt_fuzz_checkpoint(const uint8_t *data, size_t size, int fix) {
  fixture *f = checkpoint_fixture();
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  if (size) memcpy(copy, data, size);
  if (fix) fix_crcs(copy, size);
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = f->optimizer;
  contents.dataset = f->dataset;
  if (bpt_checkpoint_load_memory(f->graph, copy, size, "fuzz input", &contents) == BPT_OK) train_step(f);
  if (size & 1 && bpt_checkpoint_load_memory(f->graph, copy, size, "fuzz input", NULL) == BPT_OK) train_step(f);
  /* Not strict, with a report: whatever matches loads, and every report entry must be readable. */
  bpt_checkpoint_load_options lenient = bpt_checkpoint_load_options_default();
  lenient.strict = 0;
  bpt_checkpoint_report *report = NULL;
  contents.dataset = size & 2 ? f->dataset : NULL;
  if (bpt_checkpoint_load_memory_with_options(f->graph, copy, size, "fuzz input", &contents, &lenient, &report) ==
      BPT_OK) {
    for (int entry = 0; entry < 3; entry++)
      for (int64_t i = 0; i < bpt_checkpoint_report_count(report, (bpt_checkpoint_entry)entry); i++)
        if (!bpt_checkpoint_report_name(report, (bpt_checkpoint_entry)entry, i) ||
            !bpt_checkpoint_report_reason(report, (bpt_checkpoint_entry)entry, i))
          abort();
    train_step(f);
  }
  bpt_checkpoint_report_destroy(report);
  free(copy);
  return 0;
}

int bpt_fuzz_checkpoint_seed(const char *path, int full) {
  fixture *f = checkpoint_fixture();
  bpt_dataset_shuffle(f->dataset, 3);
  train_step(f);
  f->buffer[0] = 0.25f;
  f->buffer[2] = -4.0f;
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = full ? f->optimizer : NULL;
  contents.dataset = full ? f->dataset : NULL;
  contents.epoch = 2;
  contents.step = 1;
  return bpt_checkpoint_save(f->graph, path, &contents) == BPT_OK ? 0 : 1;
}
