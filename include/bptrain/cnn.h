/**
 * @file cnn.h
 * @brief Convolutional networks and their training toolkit, in one include: the CNN ops, train/eval mode,
 * layer helpers, batch-norm folding, learning-rate schedules, parameter groups, gradient operations and
 * graph introspection. Each concept has its own header; this one includes them all.
 */
#ifndef BPTRAIN_CNN_H
#define BPTRAIN_CNN_H

#include "cnn_ops.h"
#include "fold.h"
#include "gradients.h"
#include "introspection.h"
#include "layers.h"
#include "mode.h"
#include "parameter_groups.h"
#include "schedule.h"

#endif
