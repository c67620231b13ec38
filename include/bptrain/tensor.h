/**
 * @file tensor.h
 * @brief Host tensors: the buffers through which data enters and leaves a graph.
 *
 * A tensor owns a host buffer sized for its shape at creation (its capacity). Dimension 0 may later shrink
 * or grow within that capacity, which is how a data set hands out a short last batch without reallocating.
 */
#ifndef BPTRAIN_TENSOR_H
#define BPTRAIN_TENSOR_H

#include "context.h"

BPT_EXTERN_C_BEGIN

/** A dense, row-major host tensor. */
typedef struct bpt_tensor bpt_tensor;

/**
 * Creates a zero-filled tensor.
 * @param rank 1 to ::BPT_MAX_RANK
 * @param dims @p rank positive sizes
 */
BPT_API bpt_status bpt_tensor_create(bpt_context *context, bpt_dtype dtype, int rank, const int64_t *dims,
                                     bpt_tensor **out);

/** Destroys a tensor. NULL is a no-op. */
BPT_API void bpt_tensor_destroy(bpt_tensor *tensor);

/** @return the tensor's host buffer (row-major), or NULL for a NULL tensor. */
BPT_API void *bpt_tensor_data(bpt_tensor *tensor);

/** @return the tensor's element type. */
BPT_API bpt_dtype bpt_tensor_dtype(const bpt_tensor *tensor);

/** @return the tensor's rank, or 0 for a NULL tensor. */
BPT_API int bpt_tensor_rank(const bpt_tensor *tensor);

/** @return size of dimension @p axis, or 0 when @p axis is out of range. */
BPT_API int64_t bpt_tensor_dim(const bpt_tensor *tensor, int axis);

/** @return the number of elements in the current shape. */
BPT_API int64_t bpt_tensor_element_count(const bpt_tensor *tensor);

/** Sets dimension 0 to @p batch; the new shape must fit in the capacity allocated at creation. */
BPT_API bpt_status bpt_tensor_set_batch(bpt_tensor *tensor, int64_t batch);

BPT_EXTERN_C_END

#endif
