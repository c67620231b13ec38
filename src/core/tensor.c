/* Host tensors: creation with overflow-checked sizes, shape queries, and batch resizing within capacity. */
#include "core/tensor.h"

#include <stdlib.h>

#include "core/checked.h"
#include "core/context.h"

bpt_status bpt_tensor_create(bpt_context *context, bpt_dtype dtype, int rank, const int64_t *dims, bpt_tensor **out) {
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_tensor_create: out is NULL");
  *out = NULL;
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_tensor_create: context is NULL");
  if (bpt_dtype_size(dtype) == 0)
    return bpt_error(context, BPT_ERR_DTYPE, "bpt_tensor_create: unknown dtype %d", (int)dtype);
  if (rank < 1 || rank > BPT_MAX_RANK)
    return bpt_error(context, BPT_ERR_SHAPE, "bpt_tensor_create: rank %d is outside [1, %d]", rank, BPT_MAX_RANK);
  if (!dims) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_tensor_create: dims is NULL");
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 1 || dims[i] > BPT_MAX_ELEMENTS / count)
      return bpt_error(context, BPT_ERR_SHAPE, "bpt_tensor_create: dimension %d is %lld (non-positive or too large)",
                       i, (long long)dims[i]);
    count *= dims[i];
  }
  bpt_tensor *tensor = bpt_calloc(context, 1, sizeof *tensor, "tensor");
  if (!tensor) return BPT_ERR_OUT_OF_MEMORY;
  tensor->data = bpt_calloc(context, (size_t)count, bpt_dtype_size(dtype), "tensor data");
  if (!tensor->data) {
    free(tensor);
    return BPT_ERR_OUT_OF_MEMORY;
  }
  tensor->context = context;
  bpt_context_retain(context);
  tensor->dtype = dtype;
  tensor->rank = rank;
  for (int i = 0; i < rank; i++) tensor->dims[i] = dims[i];
  tensor->capacity = count;
  *out = tensor;
  return BPT_OK;
}

void bpt_tensor_destroy(bpt_tensor *tensor) {
  if (!tensor) return;
  bpt_context_release(tensor->context);
  free(tensor->data);
  free(tensor);
}

void *bpt_tensor_data(bpt_tensor *tensor) { return tensor ? tensor->data : NULL; }
bpt_dtype bpt_tensor_dtype(const bpt_tensor *tensor) { return tensor ? tensor->dtype : BPT_DTYPE_F32; }
int bpt_tensor_rank(const bpt_tensor *tensor) { return tensor ? tensor->rank : 0; }

int64_t bpt_tensor_dim(const bpt_tensor *tensor, int axis) {
  return tensor && axis >= 0 && axis < tensor->rank ? tensor->dims[axis] : 0;
}

int64_t bpt_tensor_element_count(const bpt_tensor *tensor) {
  if (!tensor) return 0;
  int64_t count = 1;
  for (int i = 0; i < tensor->rank; i++) count *= tensor->dims[i];
  return count;
}

bpt_status bpt_tensor_set_batch(bpt_tensor *tensor, int64_t batch) {
  if (!tensor) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_tensor_set_batch: tensor is NULL");
  int64_t inner = bpt_tensor_element_count(tensor) / tensor->dims[0];
  if (batch < 1 || batch > tensor->capacity / inner)
    return bpt_error(tensor->context, BPT_ERR_SHAPE, "bpt_tensor_set_batch: batch %lld is outside [1, %lld]",
                     (long long)batch, (long long)(tensor->capacity / inner));
  tensor->dims[0] = batch;
  return BPT_OK;
}
