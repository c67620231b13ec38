/**
 * @file bptrain.h
 * @brief libbptrain: the one header a user includes.
 *
 * Everything public lives behind opaque handles; every call that can fail returns a ::bpt_status and
 * leaves a message in its context (bpt_context_last_error(), bpt_context_last_status()). Nothing here
 * aborts the host process. docs/api.md lists each header with its concept.
 */
#ifndef BPTRAIN_H
#define BPTRAIN_H

/* Foundations: versions, statuses, dtypes, the context, host tensors. */
#include "bptrain/common.h"
#include "bptrain/context.h"
#include "bptrain/tensor.h"
/* Building and running graphs. */
#include "bptrain/graph.h"
#include "bptrain/cnn_ops.h"
#include "bptrain/binary_stochastic.h"
#include "bptrain/layers.h"
#include "bptrain/transformer.h"
#include "bptrain/mode.h"
#include "bptrain/fold.h"
#include "bptrain/introspection.h"
#include "bptrain/memory.h"
/* Training: optimisers, schedules, parameter groups, gradient operations, precision. */
#include "bptrain/optimizer.h"
#include "bptrain/schedule.h"
#include "bptrain/parameter_groups.h"
#include "bptrain/gradients.h"
#include "bptrain/number_format.h"
#include "bptrain/precision.h"
/* Data, checkpoints and diagnostics. */
#include "bptrain/data.h"
#include "bptrain/train.h"
#include "bptrain/checkpoint.h"
#include "bptrain/onnx.h"
#include "bptrain/anomaly.h"
#include "bptrain/profiler.h"
#include "bptrain/compute_info.h"
/* Multi-process training, the FPGA simulation backend and speculative backpropagation. */
#include "bptrain/comm.h"
#include "bptrain/fpga.h"
#include "bptrain/speculative.h"
/* Umbrellas kept for code that includes them: cnn.h (the CNN toolkit's headers above). */
#include "bptrain/cnn.h"

#endif
