/**
 * @file checkpoint.h
 * @brief Checkpoints: save a compiled graph's parameters, its non-trainable buffers and random generator
 * state, an optimiser's state, a data set's sample order and the training loop's position to one file, and
 * load them back so that training resumes exactly where it stopped.
 *
 * Saving is atomic: a crash or kill during a save leaves the previous file intact. Loading matches the
 * file's parameters and buffers to the graph's by name and shape (so an inference graph built with the same
 * layers, without labels or loss, loads a training checkpoint), and validates the whole file (format, CRC of
 * every section, names, shapes, dtypes) before changing anything, so a refused file leaves the graph,
 * optimiser and data set as they were. The format is in docs/checkpoints.md.
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
  int64_t step;             /**< e.g. the samples of the epoch already trained: saved as given, filled in by a load */
} bpt_checkpoint_contents;

/** @return contents with no optimiser, no data set and epoch = step = 0. */
BPT_API bpt_checkpoint_contents bpt_checkpoint_contents_default(void);

/**
 * Saves a compiled @p graph (and what @p contents names; NULL for parameters only) to @p path atomically:
 * the bytes go to a new "<path>.tmp-<16 random hex digits>", which is fsync'ed and renamed over @p path, then the
 * directory is fsync'ed. On failure (::BPT_ERR_IO) the previous file at @p path is untouched.
 */
BPT_API bpt_status bpt_checkpoint_save(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents);

/**
 * Loads @p path into a compiled @p graph: bpt_checkpoint_load_with_options() with the default (strict)
 * options and no report. Every parameter and buffer of the graph must be in the file with the same name and
 * shape, and every one in the file must be in the graph; the graph may otherwise differ from the saved one
 * (an inference graph without labels or loss, another batch size). When @p contents names an optimiser or
 * data set, the file must hold their state; epoch and step are filled in. Fails with ::BPT_ERR_IO
 * (unreadable), ::BPT_ERR_FORMAT (corrupt, truncated, unknown version, or an old BPTPARAM / BPTPARM1
 * parameter file: the message says how to convert it) or ::BPT_ERR_SHAPE / ::BPT_ERR_INVALID_ARGUMENT (the
 * file does not match: the message names the first parameter, buffer, node or option that differs), and
 * then changes nothing.
 */
BPT_API bpt_status bpt_checkpoint_load(bpt_graph *graph, const char *path, bpt_checkpoint_contents *contents);

/** How bpt_checkpoint_load_with_options() matches a file to a graph. */
typedef struct bpt_checkpoint_load_options {
  size_t size; /**< sizeof(bpt_checkpoint_load_options), set by the default function */
  int strict;  /**< 1 (default): every parameter/buffer of the graph must be in the file with the same shape and
                    dtype, and every one in the file must be in the graph; 0: load what matches, report the rest */
} bpt_checkpoint_load_options;

/** @return strict options. */
BPT_API bpt_checkpoint_load_options bpt_checkpoint_load_options_default(void);

/** What a load did with each parameter and buffer (opaque; from bpt_checkpoint_load_with_options()). */
typedef struct bpt_checkpoint_report bpt_checkpoint_report;

/** The lists of a report. */
typedef enum bpt_checkpoint_entry {
  BPT_CHECKPOINT_LOADED = 0,  /**< in the file and in the graph with the same shape: loaded */
  BPT_CHECKPOINT_SKIPPED = 1, /**< in the file, not loaded: no such name in the graph, or its shape differs */
  BPT_CHECKPOINT_MISSING = 2  /**< in the graph, not in the file: left as it was */
} bpt_checkpoint_entry;

/**
 * Loads @p path into a compiled @p graph, matching parameters and registered buffers by name and shape.
 * Strict (the default, as bpt_checkpoint_load()): any difference fails, naming the first parameter or buffer
 * that differs. Not strict: loads the parameters and buffers whose name and shape match, leaves the graph's
 * others as they were, and skips the file's others; with an optimiser in @p contents and optimiser state in
 * the file, its state is restored for the loaded parameters only (step count and learning rate too), the
 * others keep theirs; without optimiser state in the file the optimiser is left unchanged. An old BPTPARAM
 * or BPTPARM1 file (values without names or shapes) loads, not strictly only, by position when its value
 * count equals the graph's; each entry's reason then says so. The whole file is validated before anything
 * changes. @p report (NULL: none) receives, on success only, a report to free with
 * bpt_checkpoint_report_destroy(); on failure it is set to NULL.
 */
BPT_API bpt_status bpt_checkpoint_load_with_options(bpt_graph *graph, const char *path,
                                                    bpt_checkpoint_contents *contents,
                                                    const bpt_checkpoint_load_options *options,
                                                    bpt_checkpoint_report **report);

/** @return the number of entries in @p report's list @p entry (0 for a NULL report or an unknown list). */
BPT_API int64_t bpt_checkpoint_report_count(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry);

/** @return the name of entry @p index of list @p entry; NULL when out of range. */
BPT_API const char *bpt_checkpoint_report_name(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry,
                                               int64_t index);

/**
 * @return why entry @p index of list @p entry is there, e.g. "shape [8,4] in the file, [3,4] in the graph",
 * "not in this graph", "not in the file"; "" for one loaded by name; NULL when out of range.
 */
BPT_API const char *bpt_checkpoint_report_reason(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry,
                                                 int64_t index);

/** Frees a report (NULL: nothing). */
BPT_API void bpt_checkpoint_report_destroy(bpt_checkpoint_report *report);

BPT_EXTERN_C_END

#endif
