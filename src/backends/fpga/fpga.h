/* The fpga-sim backend's private interface: number formats, the cycle and resource model, and the HLS
 * kernels. Kernels (in gemm.c, elementwise.c, loss.c, update.c) are written in the synthesizable C subset;
 * their launchers charge the cycle model and call them. Only backend.c and api.c export anything. */
#ifndef BPT_FPGA_PRIVATE_H
#define BPT_FPGA_PRIVATE_H

#include <stdbool.h>

#include "backends/kernel_args.h"
#include "bptrain/fpga.h"

/* HLS pragmas and loop labels (which name loops in HLS reports) stay in the kernels so the files can go to
 * Vitis HLS as they are; gcc and clang ignore both. */
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma GCC diagnostic ignored "-Wunused-label"

/* Compile-time sizes of on-chip buffers inside kernels (HLS needs them fixed). Longer rows are tiled. */
#define BPT_FPGA_TILE 1024
#define BPT_FPGA_UNROLL 8 /* partial sums / lanes written into the C kernels (the model uses the option) */
#define BPT_FPGA_MAX_CLASSES 1024

/* A number format as the kernels see it. f32: quantize is the identity. */
typedef struct bpt_fpga_format {
  bool fixed;
  int word_bits, fraction_bits;
  bpt_fpga_rounding rounding;
  bpt_fpga_overflow overflow;
} bpt_fpga_format;

/* ap_fixed<W, I, Q, O> quantisation of x (NaN becomes 0). Exact in double for W <= 32. */
double bpt_fpga_quantize(const bpt_fpga_format *format, double x);
/* The format's value as a float container (kernels keep fixed-point values in float arrays). */
static inline float bpt_fpga_q(const bpt_fpga_format *format, double x) {
  return format->fixed ? (float)bpt_fpga_quantize(format, x) : (float)x;
}
/* Spacing of the fixed-point grid, 2^-fraction_bits (0 for f32). */
double bpt_fpga_resolution(const bpt_fpga_format *format);
bpt_fpga_format bpt_fpga_format_from_options(const bpt_fpga_options *options);

/* Kernels the model keeps statistics for. */
typedef enum bpt_fpga_kernel {
  BPT_FPGA_KERNEL_GEMM,
  BPT_FPGA_KERNEL_BIAS_ADD,
  BPT_FPGA_KERNEL_BIAS_BACKWARD,
  BPT_FPGA_KERNEL_ACTIVATION_FORWARD,
  BPT_FPGA_KERNEL_ACTIVATION_BACKWARD,
  BPT_FPGA_KERNEL_SOFTMAX_CE_FORWARD,
  BPT_FPGA_KERNEL_SOFTMAX_CE_BACKWARD,
  BPT_FPGA_KERNEL_MSE_FORWARD,
  BPT_FPGA_KERNEL_MSE_BACKWARD,
  BPT_FPGA_KERNEL_SGD_UPDATE,
  BPT_FPGA_KERNEL_ADAM_UPDATE,
  BPT_FPGA_KERNEL_ADD_SCALED,
  BPT_FPGA_KERNEL_MEMORY, /* copies, zeroing and host transfers */
  BPT_FPGA_KERNEL_IM2COL, /* conv2d's receptive fields streamed into columns, and back */
  BPT_FPGA_KERNEL_POOL,
  BPT_FPGA_KERNEL_NORM, /* batch normalisation's statistics, normalising and gradient passes */
  BPT_FPGA_KERNEL_COUNT
} bpt_fpga_kernel;

typedef struct bpt_fpga_kernel_stats {
  uint64_t calls, compute_cycles, transfer_cycles, operations; /* operations: multiply-accumulates or elements */
} bpt_fpga_kernel_stats;

typedef struct bpt_fpga_allocation {
  char *base;
  size_t bytes;
  bool on_chip;
} bpt_fpga_allocation;

/* The cycle model. Kernels charge the engine currently selected; a join adds the longer engine's cycles to
 * the committed total (the ping-pong swap), so work on engine 1 overlapping engine 0 costs only the excess. */
typedef struct bpt_fpga_model {
  bpt_fpga_options options;
  uint64_t committed;
  uint64_t pending[2];
  int engine;
  uint64_t overlap_saved;
  bpt_fpga_kernel_stats stats[BPT_FPGA_KERNEL_COUNT];
  bpt_fpga_allocation *allocations;
  int allocation_count, allocation_capacity;
} bpt_fpga_model;

/* Cycles of one pipelined loop: (trip_count - 1) * II + depth, and 0 for an empty loop. */
uint64_t bpt_fpga_pipelined_cycles(uint64_t trip_count, uint64_t initiation_interval, uint64_t depth);
/* Lanes of one engine: dsp_slices * lanes_per_slice. */
uint64_t bpt_fpga_lanes(const bpt_fpga_model *model);
/* Cycles of one pipelined pass over count elements, lanes at a time (the element-wise kernels' loop). */
uint64_t bpt_fpga_loop_cycles(const bpt_fpga_model *model, uint64_t count);
/* Charges a kernel call to the current engine: its loop cycles plus the transfer of off-chip bytes. */
void bpt_fpga_charge(bpt_fpga_model *model, bpt_fpga_kernel kernel, uint64_t compute_cycles, uint64_t offchip_bytes,
                     uint64_t operations);
/* Bytes the kernel moves for `count` elements at `pointer` if that memory is off chip, else 0. */
uint64_t bpt_fpga_offchip_bytes(const bpt_fpga_model *model, const void *pointer, int64_t count);
void bpt_fpga_model_select(bpt_fpga_model *model, int engine);
void bpt_fpga_model_join(bpt_fpga_model *model);
uint64_t bpt_fpga_model_cycles(const bpt_fpga_model *model);
void bpt_fpga_model_reset(bpt_fpga_model *model);
/* Places allocations on chip in allocation order while they fit; called after each alloc and reconfigure. */
void bpt_fpga_model_place(bpt_fpga_model *model);
const char *bpt_fpga_kernel_name(bpt_fpga_kernel kernel);

/* The backend state behind bpt_backend.state. */
typedef struct bpt_fpga_state {
  bpt_fpga_format format;
  bpt_fpga_model model;
} bpt_fpga_state;

static inline bpt_fpga_state *bpt_fpga_state_of(bpt_backend *backend) { return (bpt_fpga_state *)backend->state; }

/* Launchers (vtable members). */
bpt_status bpt_fpga_gemm(bpt_backend *backend, const bpt_gemm_args *args);
bpt_status bpt_fpga_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y);
bpt_status bpt_fpga_sgd_update(bpt_backend *backend, const bpt_update_args *args);
bpt_status bpt_fpga_adam_update(bpt_backend *backend, const bpt_update_args *args);

/* The table, for api.c to recognise an fpga-sim context. */
const bpt_backend_vtable *bpt_fpga_backend_register(void);
/* Validates options; writes the problem into message. */
bpt_status bpt_fpga_validate_options(const bpt_fpga_options *options, char *message, size_t size);

#endif
