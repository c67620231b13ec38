/**
 * @file comm.h
 * @brief Collective communication between processes (MPI on CPUs, NCCL on GPUs) and data-parallel
 * training: every process runs the same graph on its share of the batch and gradients are averaged.
 *
 * A communicator is made once per process from an MPI communicator or, for NCCL, from a unique id that
 * rank 0 creates and the caller shares (bpt_comm_create_nccl_mpi() does it over MPI). Every collective
 * waits at most the communicator's timeout for its peers, then fails with ::BPT_ERR_COMM and a message:
 * a rank that dies or hangs never leaves the others waiting forever. After such a failure the communicator
 * only accepts bpt_comm_destroy() (which never blocks) and bpt_comm_abort_job().
 *
 * This header does not include mpi.h: MPI communicators are passed as the integer handle of
 * MPI_Comm_c2f(), which is stable across MPI implementations. include/bptrain/comm_mpi.h wraps that for
 * programs that use MPI themselves.
 */
#ifndef BPTRAIN_COMM_H
#define BPTRAIN_COMM_H

#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/** A group of processes that reduce buffers together. One per process, not thread-safe. */
typedef struct bpt_comm bpt_comm;

/** Passed to bpt_comm_create_mpi() for MPI_COMM_WORLD, initialising MPI when the program has not. */
#define BPT_COMM_MPI_WORLD ((int64_t)-1)

/** Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
#define BPT_COMM_UNIQUE_ID_BYTES 128

/** An opaque id that names one NCCL communicator; made on one rank, copied to the others. */
typedef struct bpt_comm_unique_id {
  unsigned char bytes[BPT_COMM_UNIQUE_ID_BYTES]; /**< the ncclUniqueId, copied as is */
} bpt_comm_unique_id;

/** How all-reduce combines the buffers of the ranks. */
typedef enum bpt_reduce_op {
  BPT_REDUCE_SUM = 0,
  BPT_REDUCE_AVERAGE = 1 /**< the sum divided by the number of ranks */
} bpt_reduce_op;

/** Options for the bpt_comm_create functions; get them from bpt_comm_options_default(). */
typedef struct bpt_comm_options {
  size_t size;            /**< sizeof(bpt_comm_options), set by the default function */
  double timeout_seconds; /**< how long a collective waits for its peers before ::BPT_ERR_COMM; 0: forever */
  int progress_thread;    /**< MPI: non-zero (default) runs a thread that moves data while the caller computes,
                               when MPI was initialised with MPI_THREAD_MULTIPLE (BPT_COMM_MPI_WORLD does);
                               otherwise data moves only while the library polls (between backward nodes) */
} bpt_comm_options;

/** @return the default options: a 300 s timeout, a progress thread. */
BPT_API bpt_comm_options bpt_comm_options_default(void);

/**
 * Makes a communicator over an MPI communicator, duplicated so that its traffic never mixes with the
 * caller's. MPI reports errors to us (MPI_ERRORS_RETURN on the duplicate). Collective over the ranks.
 * @param mpi_comm MPI_Comm_c2f(comm) of the caller's communicator, or ::BPT_COMM_MPI_WORLD; with the
 *        latter, MPI is initialised here if the program has not done it, and finalised when the last
 *        communicator is destroyed
 * @return ::BPT_ERR_UNSUPPORTED when the library was built without MPI
 */
BPT_API bpt_status bpt_comm_create_mpi(bpt_context *context, int64_t mpi_comm, const bpt_comm_options *options,
                                       bpt_comm **out);

/** Makes a new NCCL unique id (on one rank only); ::BPT_ERR_UNSUPPORTED without NCCL. */
BPT_API bpt_status bpt_comm_nccl_unique_id(bpt_context *context, bpt_comm_unique_id *out);

/**
 * Makes an NCCL communicator for GPU @p device as rank @p rank of @p world_size, all ranks passing the same
 * @p id. Buffers given to its collectives are device memory (the "cuda" backend's). The communicator is
 * non-blocking: initialisation and collectives are waited for with the timeout, and a failure or timeout
 * aborts it (ncclCommAbort). Collective over the ranks.
 */
BPT_API bpt_status bpt_comm_create_nccl(bpt_context *context, const bpt_comm_unique_id *id, int rank, int world_size,
                                        int device, const bpt_comm_options *options, bpt_comm **out);

/**
 * Bootstraps an NCCL communicator over MPI: rank 0 of @p mpi_comm (see bpt_comm_create_mpi()) makes the
 * unique id and broadcasts it; each rank uses GPU @p device (-1: its rank on this node modulo the GPUs).
 */
BPT_API bpt_status bpt_comm_create_nccl_mpi(bpt_context *context, int64_t mpi_comm, int device,
                                            const bpt_comm_options *options, bpt_comm **out);

/**
 * Destroys a communicator, waiting at most its timeout for the other ranks (after a failure: not at all).
 * Data-parallel handles on it let go first, each waiting at most the timeout for its all-reduces in flight;
 * their graphs' backward passes and optimiser steps then fail with ::BPT_ERR_STATE until
 * bpt_data_parallel_destroy(). Not while another thread is inside such a graph's backward pass or step.
 * When the library initialised MPI and this is its last communicator, MPI is finalised, but only once every
 * rank answered a closing roll call, and MPI_Finalize itself is bounded by the timeout too.
 * @return ::BPT_OK; or ::BPT_ERR_COMM when a rank did not answer in time (the context's last error names
 * it): the communicator is freed anyway, MPI is left initialised and cannot be used again by this process,
 * which should exit (the launcher then ends the job) or have called bpt_comm_abort_job(). NULL: ::BPT_OK.
 */
BPT_API bpt_status bpt_comm_close(bpt_comm *comm);

/** bpt_comm_close() without the status (the context's last error still says what went wrong). NULL is a
 * no-op. Blocks at most the communicator's timeout, once per data-parallel handle on it and once for it. */
BPT_API void bpt_comm_destroy(bpt_comm *comm);

/**
 * Gives up on the whole job after a failure: MPI terminates every process of the communicator
 * (MPI_Abort, the only way MPI offers to free ranks stuck in a collective, and it ends this process too);
 * NCCL aborts the communicator (ncclCommAbort) and returns, leaving the process running.
 */
BPT_API void bpt_comm_abort_job(bpt_comm *comm, int exit_code);

/** @return this process's rank (0-based), or -1 for NULL. */
BPT_API int bpt_comm_rank(const bpt_comm *comm);

/** @return the number of ranks, or 0 for NULL. */
BPT_API int bpt_comm_size(const bpt_comm *comm);

/** @return the engine's name, "mpi" or "nccl" ("" for NULL). */
BPT_API const char *bpt_comm_engine(const bpt_comm *comm);

/**
 * Reduces @p count elements of @p buffer in place across all ranks: afterwards every rank holds the sum
 * (or average). @p dtype is ::BPT_DTYPE_F32, ::BPT_DTYPE_F16 or ::BPT_DTYPE_BF16; 16-bit values are summed
 * in f32 and rounded once per hop. Host memory for MPI, device memory for NCCL.
 */
BPT_API bpt_status bpt_comm_allreduce(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype, bpt_reduce_op op);

/** Copies @p bytes of @p buffer from rank @p root to every other rank. */
BPT_API bpt_status bpt_comm_broadcast(bpt_comm *comm, void *buffer, size_t bytes, int root);

/** Returns once every rank has called it (or fails after the timeout). */
BPT_API bpt_status bpt_comm_barrier(bpt_comm *comm);

/** Data-parallel training of one graph over one communicator. */
typedef struct bpt_data_parallel bpt_data_parallel;

/** What gradients are sent as. Lossy kinds keep what they drop and add it back next step (error feedback). */
typedef enum bpt_compression {
  BPT_COMPRESSION_NONE = 0, /**< f32 */
  BPT_COMPRESSION_F16 = 1,  /**< cast to f16 (half the bytes) */
  BPT_COMPRESSION_INT8 = 2, /**< int8 with one scale per bucket agreed by all ranks (a quarter of the bytes) */
  BPT_COMPRESSION_TOPK = 3  /**< the largest |g| of each bucket as (index, value) pairs, all-gathered */
} bpt_compression;

/** Options for bpt_data_parallel_create(); get them from bpt_data_parallel_options_default(). */
typedef struct bpt_data_parallel_options {
  size_t size;                 /**< sizeof(bpt_data_parallel_options), set by the default function */
  size_t bucket_bytes;         /**< cap on the f32 gradient bytes of one bucket (default 25 MiB) */
  size_t first_bucket_bytes;   /**< cap on the first bucket, sent first, kept small so it starts early (1 MiB) */
  int overlap;                 /**< non-zero (default): start each bucket during backward as soon as its
                                    gradients are final; 0: start all of them after backward */
  int accumulation_steps;      /**< micro-batches per optimiser step (default 1); only the last communicates */
  bpt_compression compression; /**< what gradients are sent as (default ::BPT_COMPRESSION_NONE) */
  float topk_ratio;            /**< ::BPT_COMPRESSION_TOPK: fraction of each bucket sent (default 0.01) */
  int error_feedback;          /**< non-zero (default): lossy compression carries its error into the next step */
  int broadcast_parameters;    /**< non-zero (default): rank 0's initial parameters and registered state
                                    (batch-norm running statistics) are copied to every rank */
  int average_every;           /**< 1 (default): synchronous data parallel, gradients averaged every step.
                                    H > 1: local SGD (periodic model averaging): each rank steps on its own
                                    gradients and the parameters are averaged over the ranks after every H-th
                                    bpt_optimizer_step(); optimiser state and batch-norm statistics stay per
                                    rank. Needs accumulation_steps 1 and no compression. */
  int max_staleness;           /**< local SGD only. 0 (default): each averaging blocks its step until every
                                    rank has joined it. S in [1, average_every]: bounded staleness: the
                                    averaging of the parameters after an H-th step runs while the rank trains
                                    on, and is folded in after S more steps as parameters += average - (this
                                    rank's parameters when it started), so a rank is never more than S steps
                                    ahead of the slowest; costs two more parameter-sized buffers. */
} bpt_data_parallel_options;

/** @return 25 MiB buckets, a 1 MiB first bucket, overlap on, no accumulation or compression, gradients
 * averaged every step. */
BPT_API bpt_data_parallel_options bpt_data_parallel_options_default(void);

/**
 * Attaches data-parallel training to a compiled graph with a loss. Afterwards bpt_graph_backward() starts
 * each bucket's all-reduce as soon as its gradients are final, and bpt_optimizer_step() waits for all of
 * them, so the optimiser sees gradients averaged over ranks (and micro-batches): the mean-loss gradient of
 * the global batch. With accumulation_steps k, run backward (first micro-batch) or
 * bpt_graph_backward_accumulate() (the others) k times, then step. Every rank must build the same graph.
 * Collective (it broadcasts the initial parameters).
 */
BPT_API bpt_status bpt_data_parallel_create(bpt_graph *graph, bpt_comm *comm, const bpt_data_parallel_options *options,
                                            bpt_data_parallel **out);

/**
 * Waits until every bucket of the last backward pass is reduced. bpt_optimizer_step() calls it; call it
 * yourself to read averaged gradients (bpt_graph_read_gradients()) before stepping.
 */
BPT_API bpt_status bpt_data_parallel_wait(bpt_data_parallel *data_parallel);

/**
 * Local SGD (average_every > 1): averages the parameters over the ranks now, as every H-th step does, and
 * starts a new count of H steps; call it on every rank (collective), e.g. once after training so that each
 * rank evaluates and saves the same model. With max_staleness, an averaging still in flight is folded in
 * first. BPT_ERR_STATE for synchronous data parallel.
 */
BPT_API bpt_status bpt_data_parallel_average_parameters(bpt_data_parallel *data_parallel);

/** @return the number of gradient buckets, or 0 for NULL. */
BPT_API int bpt_data_parallel_bucket_count(const bpt_data_parallel *data_parallel);

/**
 * Detaches from the graph and frees the buckets, first waiting (at most the timeout) for buckets still in
 * flight; after a communicator failure it does not wait. It may outlive its graph (bpt_graph_destroy()
 * detaches it) and its communicator (bpt_comm_destroy() detaches it). NULL is a no-op.
 */
BPT_API void bpt_data_parallel_destroy(bpt_data_parallel *data_parallel);

BPT_EXTERN_C_END

#endif
