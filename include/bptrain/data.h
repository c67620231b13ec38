/**
 * @file data.h
 * @brief Data sets read from IDX files (the MNIST format, plain or gzip-compressed), with seeded shuffling
 * and batching. Images stay uint8 in memory and are normalised per batch.
 */
#ifndef BPTRAIN_DATA_H
#define BPTRAIN_DATA_H

#include "tensor.h"

BPT_EXTERN_C_BEGIN

/** Samples (uint8 images) with optional integer labels. */
typedef struct bpt_dataset bpt_dataset;

/**
 * Loads an IDX image file and, optionally, an IDX label file (NULL for none). Either may be gzip-compressed.
 * Fails with ::BPT_ERR_IO (unreadable) or ::BPT_ERR_FORMAT (malformed) and a message naming the file.
 */
BPT_API bpt_status bpt_dataset_load_idx(bpt_context *context, const char *images_path, const char *labels_path,
                                        bpt_dataset **out);

/**
 * Loads "<split>-images-idx3-ubyte" and "<split>-labels-idx1-ubyte" (with or without ".gz") from
 * @p directory; @p split is "train" or "t10k" for MNIST-style sets.
 */
BPT_API bpt_status bpt_dataset_load_idx_directory(bpt_context *context, const char *directory, const char *split,
                                                  bpt_dataset **out);

/** Destroys a data set. NULL is a no-op. */
BPT_API void bpt_dataset_destroy(bpt_dataset *dataset);

/** @return the number of samples. */
BPT_API int64_t bpt_dataset_size(const bpt_dataset *dataset);

/** @return the number of uint8 values in one sample (784 for 28x28 images). */
BPT_API int64_t bpt_dataset_sample_size(const bpt_dataset *dataset);

/** @return the rank of one sample (2 for images), and fills dims (up to ::BPT_MAX_RANK) when non-NULL. */
BPT_API int bpt_dataset_sample_shape(const bpt_dataset *dataset, int64_t *dims);

/** @return one more than the largest label, or 0 without labels. Prefer bpt_dataset_check_classes() to size a
 * model: one corrupt label (200 in a 10-class set) makes this 201. */
BPT_API int bpt_dataset_class_count(const bpt_dataset *dataset);

/**
 * The class count a classifier over @p train and @p test (NULL: none) must have, checked against both label
 * sets. @p requested > 0 gives the count; 0 infers it as one more than the largest training label. Fails with
 * ::BPT_ERR_FORMAT and a message naming the label file when a label of either set is not below the count, or
 * when classes in [0, count) have no training sample (the first few are listed: "IDX label file '...' (training set):
 * 190 of the 201 classes have no samples: 10-199 (the largest label is 200); ..."). A test set may lack classes.
 * @param classes receives the count (0 on failure)
 */
BPT_API bpt_status bpt_dataset_check_classes(const bpt_dataset *train, const bpt_dataset *test, int requested,
                                             int *classes);

/** Sets the normalisation applied per batch: value = (byte / 255 - mean) / std. Default mean 0, std 1. */
BPT_API bpt_status bpt_dataset_set_normalization(bpt_dataset *dataset, float mean, float std);

/** Shuffles the sample order with a seeded generator; equal seeds give equal orders. */
BPT_API bpt_status bpt_dataset_shuffle(bpt_dataset *dataset, uint64_t seed);

/** Restores the file order. */
BPT_API bpt_status bpt_dataset_reset_order(bpt_dataset *dataset);

/**
 * Fills batch @p batch_index (of size @p batch_size, in the current order) into @p images (f32,
 * (capacity, sample dims...)) and @p labels (i32, (capacity)), or NULL to skip labels. Dimension 0 of both
 * is set to the number of samples filled, which is smaller for the last batch.
 */
BPT_API bpt_status bpt_dataset_batch(bpt_dataset *dataset, int64_t batch_index, int64_t batch_size,
                                     bpt_tensor *images, bpt_tensor *labels);

/** @return the number of batches of @p batch_size in one pass (the last may be short). */
BPT_API int64_t bpt_dataset_batch_count(const bpt_dataset *dataset, int64_t batch_size);

BPT_EXTERN_C_END

#endif
