/* Data sets over IDX files: samples stay uint8 (a quarter of the memory of floats) and are normalised
 * per batch; a permutation array gives seeded shuffling without moving the samples. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bptrain/data.h"
#include "core/context.h"
#include "core/data/dataset_labels.h"
#include "core/data/dataset_order.h"
#include "core/data/idx.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread_guard.h"

struct bpt_dataset {
  bpt_context *context;
  bpt_idx images;
  bpt_idx labels; /* data NULL when the set has no labels */
  char *labels_path; /* for messages about the labels (class_count.c) */
  int64_t size, sample_size;
  int class_count;
  int64_t *order;
  float mean, std;
};

void bpt_dataset_destroy(bpt_dataset *dataset) {
  if (!dataset) return;
  bpt_context_release(dataset->context);
  bpt_idx_free(&dataset->images);
  bpt_idx_free(&dataset->labels);
  free(dataset->labels_path);
  free(dataset->order);
  free(dataset);
}

bpt_status bpt_dataset_load_idx(bpt_context *context, const char *images_path, const char *labels_path,
                                bpt_dataset **out) {
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_load_idx: out is NULL");
  *out = NULL;
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_load_idx: context is NULL");
  if (!images_path) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_load_idx: images_path is NULL");
  bpt_dataset *dataset = bpt_calloc(context, 1, sizeof *dataset, "data set");
  if (!dataset) return BPT_ERR_OUT_OF_MEMORY;
  dataset->context = context;
  bpt_context_retain(context);
  dataset->std = 1.0f;
  bpt_status status = bpt_idx_read(context, images_path, &dataset->images);
  if (status == BPT_OK && labels_path) status = bpt_idx_read(context, labels_path, &dataset->labels);
  /* A rank-1 file holds one value per sample: a label file given as the images, which would otherwise load as a
   * data set of one-pixel images and train a model of the wrong size without complaint. */
  if (status == BPT_OK && dataset->images.rank < 2)
    status = bpt_error(context, BPT_ERR_FORMAT,
                       "IDX image file '%s': rank 1 (one value per sample, as in a label file); images need rank 2 "
                       "or more (count, values per sample...)",
                       images_path);
  if (status == BPT_OK) {
    dataset->size = dataset->images.dims[0];
    dataset->sample_size = dataset->images.count / dataset->size;
    if (labels_path && dataset->labels.rank != 1)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX label file '%s': rank %d, expected 1", labels_path,
                         dataset->labels.rank);
    else if (labels_path && dataset->labels.dims[0] != dataset->size)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX files '%s' and '%s': %lld images but %lld labels", images_path,
                         labels_path, (long long)dataset->size, (long long)dataset->labels.dims[0]);
  }
  if (status == BPT_OK) {
    dataset->order = bpt_calloc(context, (size_t)dataset->size, sizeof *dataset->order, "sample order");
    if (!dataset->order) status = BPT_ERR_OUT_OF_MEMORY;
  }
  if (status == BPT_OK && labels_path) {
    dataset->labels_path = bpt_calloc(context, strlen(labels_path) + 1, 1, "label file name");
    if (dataset->labels_path) memcpy(dataset->labels_path, labels_path, strlen(labels_path) + 1);
    else status = BPT_ERR_OUT_OF_MEMORY;
  }
  if (status != BPT_OK) {
    bpt_dataset_destroy(dataset);
    return status;
  }
  for (int64_t i = 0; i < dataset->size; i++) dataset->order[i] = i;
  for (int64_t i = 0; labels_path && i < dataset->size; i++)
    if (dataset->labels.data[i] + 1 > dataset->class_count) dataset->class_count = dataset->labels.data[i] + 1;
  *out = dataset;
  return BPT_OK;
}

/* Finds "<directory>/<split>-<kind>" with or without ".gz". */
static bpt_status find_file(bpt_context *context, const char *directory, const char *split, const char *kind,
                            char *path, size_t size) {
  const char *suffixes[] = {".gz", ""};
  for (int i = 0; i < 2; i++) {
    int written = snprintf(path, size, "%s/%s-%s%s", directory, split, kind, suffixes[i]);
    if (written < 0 || (size_t)written >= size)
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "IDX directory '%s': path too long", directory);
    /* Only whether it exists: opening it here could block on a FIFO; bpt_idx_read opens it safely. */
    struct stat info;
    if (stat(path, &info) == 0) return BPT_OK;
  }
  return bpt_error(context, BPT_ERR_IO, "IDX directory '%s': neither %s-%s.gz nor %s-%s found", directory, split, kind,
                   split, kind);
}

bpt_status bpt_dataset_load_idx_directory(bpt_context *context, const char *directory, const char *split,
                                          bpt_dataset **out) {
  if (out) *out = NULL;
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_load_idx_directory: context is NULL");
  if (!directory || !split || !out)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_load_idx_directory: NULL argument");
  /* A mistyped directory (or a file given as one) is said so, rather than "neither file found" in it. */
  struct stat info;
  if (stat(directory, &info) != 0)
    return bpt_error(context, BPT_ERR_IO, "IDX directory '%s': cannot open: %s", directory, strerror(errno));
  if (!S_ISDIR(info.st_mode))
    return bpt_error(context, BPT_ERR_IO, "IDX directory '%s' is not a directory (give the folder holding %s-*-ubyte)",
                     directory, split);
  char images[4096], labels[4096];
  BPT_CHECK(find_file(context, directory, split, "images-idx3-ubyte", images, sizeof images));
  BPT_CHECK(find_file(context, directory, split, "labels-idx1-ubyte", labels, sizeof labels));
  return bpt_dataset_load_idx(context, images, labels, out);
}

const uint8_t *bpt_dataset_labels_view(const bpt_dataset *dataset, bpt_context **context, const char **path) {
  *context = dataset->context;
  *path = dataset->labels_path ? dataset->labels_path : "";
  return dataset->labels.data;
}

int64_t bpt_dataset_size(const bpt_dataset *dataset) { return dataset ? dataset->size : 0; }
int64_t bpt_dataset_sample_size(const bpt_dataset *dataset) { return dataset ? dataset->sample_size : 0; }
int bpt_dataset_class_count(const bpt_dataset *dataset) { return dataset ? dataset->class_count : 0; }

int bpt_dataset_sample_shape(const bpt_dataset *dataset, int64_t *dims) {
  if (!dataset) return 0;
  for (int i = 1; dims && i < dataset->images.rank; i++) dims[i - 1] = dataset->images.dims[i];
  return dataset->images.rank - 1;
}

bpt_status bpt_dataset_set_normalization(bpt_dataset *dataset, float mean, float std) {
  if (!dataset) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_set_normalization: data set is NULL");
  if (!(std > 0.0f) || !isfinite(std) || !isfinite(mean))
    return bpt_error(dataset->context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_dataset_set_normalization: mean %g and std %g must be finite, std > 0", (double)mean,
                     (double)std);
  dataset->mean = mean;
  dataset->std = std;
  return BPT_OK;
}

bpt_status bpt_dataset_shuffle(bpt_dataset *dataset, uint64_t seed) {
  if (!dataset) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_shuffle: data set is NULL");
  bpt_rng rng;
  bpt_rng_seed(&rng, seed);
  /* Fisher-Yates over the current order, so successive shuffles compose like a stream of epochs. */
  for (int64_t i = dataset->size - 1; i > 0; i--) {
    int64_t j = (int64_t)bpt_rng_below(&rng, (uint64_t)i + 1);
    int64_t swap = dataset->order[i];
    dataset->order[i] = dataset->order[j];
    dataset->order[j] = swap;
  }
  return BPT_OK;
}

bpt_status bpt_dataset_reset_order(bpt_dataset *dataset) {
  if (!dataset) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_reset_order: data set is NULL");
  for (int64_t i = 0; i < dataset->size; i++) dataset->order[i] = i;
  return BPT_OK;
}

int64_t bpt_dataset_batch_count(const bpt_dataset *dataset, int64_t batch_size) {
  if (!dataset || batch_size < 1) return 0;
  return dataset->size / batch_size + (dataset->size % batch_size != 0); /* no size + batch_size - 1: it wraps */
}

bpt_status bpt_dataset_batch(bpt_dataset *dataset, int64_t batch_index, int64_t batch_size, bpt_tensor *images,
                             bpt_tensor *labels) {
  if (!dataset) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_batch: data set is NULL");
  bpt_context *context = dataset->context;
  if (!images) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_dataset_batch: images tensor is NULL");
  if (batch_size < 1 || batch_index < 0 || batch_index >= bpt_dataset_batch_count(dataset, batch_size))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_dataset_batch: batch %lld of size %lld is outside the %lld samples", (long long)batch_index,
                     (long long)batch_size, (long long)dataset->size);
  if (images->dtype != BPT_DTYPE_F32)
    return bpt_error(context, BPT_ERR_DTYPE, "bpt_dataset_batch: images tensor must be f32, not %s",
                     bpt_dtype_name(images->dtype));
  if (labels && labels->dtype != BPT_DTYPE_I32)
    return bpt_error(context, BPT_ERR_DTYPE, "bpt_dataset_batch: labels tensor must be i32, not %s",
                     bpt_dtype_name(labels->dtype));
  if (labels && !dataset->labels.data)
    return bpt_error(context, BPT_ERR_STATE, "bpt_dataset_batch: the data set has no labels");
  int64_t first = batch_index * batch_size;
  int64_t count = dataset->size - first < batch_size ? dataset->size - first : batch_size;
  int64_t inner = bpt_tensor_element_count(images) / images->dims[0];
  if (inner != dataset->sample_size)
    return bpt_error(context, BPT_ERR_SHAPE, "bpt_dataset_batch: images tensor holds %lld values per sample, the data "
                     "set has %lld", (long long)inner, (long long)dataset->sample_size);
  if (count * inner > images->capacity || (labels && count > labels->capacity))
    return bpt_error(context, BPT_ERR_SHAPE, "bpt_dataset_batch: tensors hold fewer than %lld samples",
                     (long long)count);
  BPT_CHECK(bpt_thread_guard_enter(context, "bpt_dataset_batch"));
  BPT_CHECK(bpt_tensor_set_batch(images, count));
  if (labels) BPT_CHECK(bpt_tensor_set_batch(labels, count));
  const float scale = 1.0f / (255.0f * dataset->std), shift = dataset->mean / dataset->std;
  float *x = images->data;
  int32_t *y = labels ? labels->data : NULL;
#pragma omp parallel for if (count * inner > 65536)
  for (int64_t n = 0; n < count; n++) {
    int64_t sample = dataset->order[first + n];
    /* restrict: a uint8_t pointer may alias anything, which would otherwise block vectorisation. */
    const uint8_t *restrict source = dataset->images.data + sample * inner;
    float *restrict destination = x + n * inner;
    for (int64_t i = 0; i < inner; i++) destination[i] = (float)source[i] * scale - shift;
    if (y) y[n] = dataset->labels.data[sample];
  }
  return BPT_OK;
}

/* Robustness (issue 9): checkpoints save and restore the sample order through this (core/data/dataset_order.h). */
int64_t *bpt_dataset_order_view(bpt_dataset *dataset, int64_t *size) {
  *size = dataset->size;
  return dataset->order;
}
