/* The CPU backend's shared primitives, state and scratch, used across its files; only backend.c exports anything
 * (the table). Op kernels are not declared here: each is registered (BPT_REGISTER_KERNELS) and static in its
 * op's file, and tests run them through the table with a node (tests/support/test_kernels.h). */
#ifndef BPT_CPU_H
#define BPT_CPU_H

#include "backends/kernel_args.h"

/* Loops shorter than this run on one thread: waking the OpenMP team costs more than it saves. */
#define BPT_CPU_PARALLEL_THRESHOLD 32768
/* Reductions sum a fixed number of chunks in a fixed order, so results do not depend on thread timing. */
#define BPT_CPU_REDUCTION_CHUNKS 64

bpt_status bpt_cpu_gemm(bpt_backend *backend, const bpt_gemm_args *args);
bpt_status bpt_cpu_sgd_update(bpt_backend *backend, const bpt_update_args *args);
bpt_status bpt_cpu_adam_update(bpt_backend *backend, const bpt_update_args *args);

/* Precision, binary stochastic neurons and activation memory (issue 4). */
bpt_status bpt_cpu_gemm_mixed(bpt_backend *backend, const bpt_gemm_args *args);
bpt_status bpt_cpu_cast(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                        bpt_dtype destination_dtype, void *destination, float scale);
bpt_status bpt_cpu_cast_stochastic(bpt_backend *backend, int64_t count, const float *source,
                                   bpt_dtype destination_dtype, void *destination, float scale, uint64_t seed);
bpt_status bpt_cpu_round_to_dtype(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values);
bpt_status bpt_cpu_unscale_check_finite(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                        int32_t *found_nonfinite);
bpt_status bpt_cpu_absolute_max(bpt_backend *backend, int64_t count, const float *x, float *maximum);

/* cnn (issue 3): scratch memory, convolution, batch norm, pooling, dropout and the training toolkit. */
#include <stdbool.h>
#include <stddef.h>

/* The vector loops a kernel may run, narrowest first: each level's loops need the CPU to report (and the OS to
 * save) its registers. Kernels built for baseline x86-64 carry a target attribute per function and choose
 * at run time. */
typedef enum bpt_cpu_loops {
  BPT_CPU_LOOPS_PORTABLE = 1, /* plain C (what the compiler vectorises for baseline x86-64), any CPU */
  BPT_CPU_LOOPS_AVX2 = 2,     /* AVX2 and FMA */
  BPT_CPU_LOOPS_AVX512 = 3,   /* AVX-512F */
} bpt_cpu_loops;

/* The backend's state: one growing scratch buffer per thread for im2col columns and partial sums, so a
 * training step allocates nothing once the largest layer has run. */
typedef struct bpt_cpu_state {
  int slots;
  float **scratch;
  size_t *scratch_floats;
  bool gemm_convolutions_only; /* skip conv2d_direct.c's kernels (tests check the GEMM lowerings with it) */
  bpt_cpu_loops loop_limit;    /* the widest loops kernels may run (tests lower it to check the narrower
                                  ones); BPT_CPU_LOOPS_AVX512, no limit, unless a test sets it */
} bpt_cpu_state;

bpt_status bpt_cpu_state_create(bpt_backend *backend);
void bpt_cpu_state_destroy(bpt_backend *backend);
/* Makes scratch slot 0..slots-1 hold at least floats values (contents not kept); call outside parallel regions. */
bpt_status bpt_cpu_scratch_reserve(bpt_backend *backend, int slots, size_t floats);
/* The widest loops this CPU has (BPT_CPU_LOOPS_PORTABLE off x86-64), read once. */
bpt_cpu_loops bpt_cpu_loops_supported(void);
/* The loops the backend's kernels run: the CPU's widest, at most the state's loop_limit. */
bpt_cpu_loops bpt_cpu_vector_loops(bpt_backend *backend);
float *bpt_cpu_scratch(bpt_backend *backend, int slot);
/* The threads a kernel's parallel loop runs (num_threads), and so the scratch slots it may index by
 * omp_get_thread_num(). */
static inline int bpt_cpu_threads(const bpt_backend *backend) {
  return backend->num_threads > 0 ? backend->num_threads : 1;
}
/* Scratch for the row kernels that stage bf16-stored rows through f32 (bf16_storage.h): `shared` floats at the
 * front of slot 0 (a kernel's partial sums, contents not kept) and, when staged, `per_thread` floats after the
 * same offset in each of the bpt_cpu_threads() slots. bpt_cpu_row_staging: the calling thread's (inside the
 * kernel's num_threads(bpt_cpu_threads()) loop), or NULL when not staged. */
bpt_status bpt_cpu_row_staging_reserve(bpt_backend *backend, bool staged, size_t shared, size_t per_thread);
float *bpt_cpu_row_staging(bpt_backend *backend, bool staged, size_t shared);

/* Batch norm's loops over one row of S values (one sample's channel), in batch_norm_rows.c: sums of x - shift
 * and its squares; y = (x - mean) scale + shift; sums of dy and dy (x - mean); dx (+)= scale (dy - mean_dy -
 * (x - mean) coefficient). bits: the row's ReLU mask ((S + 7) / 8 bytes; NULL: no ReLU), written by the
 * normalising loop (which then stores max(y, 0)) and read by the gradient loops (dy counts as 0 where clear).
 * loops: bpt_cpu_vector_loops(), which of the row loops run. */
void bpt_cpu_batch_norm_row_sums(bpt_cpu_loops loops, const float *x, int64_t S, float shift, float *sum,
                                 float *squares);
void bpt_cpu_batch_norm_normalise_row(bpt_cpu_loops loops, const float *x, int64_t S, float mean, float scale,
                                      float shift, float *y, uint8_t *bits);
void bpt_cpu_batch_norm_gradient_row_sums(bpt_cpu_loops loops, const float *x, const float *dy, int64_t S, float mean,
                                          const uint8_t *bits, float *sum_dy, float *sum_dy_centred);
void bpt_cpu_batch_norm_input_gradient_row(bpt_cpu_loops loops, const float *x, const float *dy, int64_t S, float mean,
                                           float scale, float mean_dy, float coefficient, const uint8_t *bits,
                                           bool assign, float *dx);
bpt_status bpt_cpu_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y);
bpt_status bpt_cpu_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                     double *sum_of_squares, int64_t *zeros);
bpt_status bpt_cpu_scale_clamp(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x);

#endif
