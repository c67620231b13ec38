/**
 * @file bptrain.h
 * @brief libbptrain: the one header a user includes.
 *
 * Everything public lives behind opaque handles; every call that can fail returns a ::bpt_status and
 * leaves a message in its context (bpt_context_last_error()). Nothing here aborts the host process.
 */
#ifndef BPTRAIN_H
#define BPTRAIN_H

#include "bptrain/common.h"
#include "bptrain/context.h"
#include "bptrain/tensor.h"
#include "bptrain/graph.h"
#include "bptrain/optimizer.h"
#include "bptrain/data.h"
#include "bptrain/profiler.h"
/* Robustness (issue 9) */
#include "bptrain/checkpoint.h"
#include "bptrain/anomaly.h"
/* issue 6: FPGA simulation backend and speculative backpropagation */
#include "bptrain/fpga.h"
#include "bptrain/speculative.h"
#include "bptrain/comm.h"
/* Precision, number formats, binary stochastic neurons, activation memory (issue 4). */
#include "bptrain/precision.h"
/* Convolutional networks and the training toolkit (issue 3) */
#include "bptrain/cnn.h"

#endif
