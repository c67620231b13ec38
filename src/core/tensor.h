/* The host tensor's private layout (see include/bptrain/tensor.h). */
#ifndef BPT_CORE_TENSOR_H
#define BPT_CORE_TENSOR_H

#include "bptrain/tensor.h"

struct bpt_tensor {
  bpt_context *context;
  bpt_dtype dtype;
  int rank;
  int64_t dims[BPT_MAX_RANK];
  int64_t capacity; /* elements allocated */
  void *data;
};

#endif
