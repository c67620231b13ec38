/**
 * @file checkpoint.h
 * @brief Checkpoints: save a compiled graph's parameters, its non-trainable buffers and random generator
 * state, an optimiser's state, a data set's sample order and the training loop's position to one file, and
 * load them back so that training resumes exactly where it stopped.
 *
 * Saving is atomic: a crash or kill during a save leaves the previous file intact. Loading validates the
 * whole file (format, CRC of every section, graph structure, names, shapes, dtypes) before changing anything,
 * so a refused file leaves the graph, optimiser and data set as they were. The format is in docs/checkpoints.md.
 */
#ifndef BPTRAIN_CHECKPOINT_H
#define BPTRAIN_CHECKPOINT_H

#include "data.h"
#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/** What a checkpoint holds besides the graph; get it from bpt_checkpoint_contents_default(). */
typedef struct bpt_checkpoint_contents {
  size_t size;              /**< sizeof(bpt_checkpoint_contents), set by the default function */
  bpt_optimizer *optimizer; /**< its state (moments, step count, learning rate) is saved / restored; NULL: none */
  bpt_dataset *dataset;     /**< its sample order (shuffles compose) is saved / restored; NULL: none */
  int64_t epoch;            /**< training-loop position: saved as given, filled in by a load */
  int64_t step;             /**< e.g. batches of the epoch already trained: saved as given, filled in by a load */
} bpt_checkpoint_contents;

/** @return contents with no optimiser, no data set and epoch = step = 0. */
BPT_API bpt_checkpoint_contents bpt_checkpoint_contents_default(void);

/**
 * Saves a compiled @p graph (and what @p contents names; NULL for parameters only) to @p path atomically:
 * the bytes go to "<path>.tmp-<pid>", which is fsync'ed and renamed over @p path, then the directory is
 * fsync'ed. On failure (::BPT_ERR_IO) the previous file at @p path is untouched.
 */
BPT_API bpt_status bpt_checkpoint_save(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents);

/**
 * Loads @p path into a compiled @p graph built like the one that was saved. When @p contents names an
 * optimiser or data set, the file must hold their state; epoch and step are filled in. Fails with
 * ::BPT_ERR_IO (unreadable), ::BPT_ERR_FORMAT (corrupt, truncated, unknown version) or ::BPT_ERR_SHAPE /
 * ::BPT_ERR_INVALID_ARGUMENT (the file does not match: the message says which node, parameter or option
 * differs), and then changes nothing.
 */
BPT_API bpt_status bpt_checkpoint_load(bpt_graph *graph, const char *path, bpt_checkpoint_contents *contents);

BPT_EXTERN_C_END

#endif
