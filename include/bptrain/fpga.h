/**
 * @file fpga.h
 * @brief The "fpga-sim" backend: HLS-style kernels run as a C simulation, with a configurable number format
 * (f32 or ap_fixed-style fixed point) and a cycle and resource model that reports simulated cycles, seconds,
 * per-kernel utilisation and energy. Create a context with backend "fpga-sim", then configure it here.
 */
#ifndef BPTRAIN_FPGA_H
#define BPTRAIN_FPGA_H

#include "context.h"

BPT_EXTERN_C_BEGIN

/** Number format of every value the simulated kernels read and write. */
typedef enum bpt_fpga_number_format {
  BPT_FPGA_FORMAT_F32 = 0,  /**< IEEE single precision */
  BPT_FPGA_FORMAT_FIXED = 1 /**< signed fixed point, like ap_fixed<word_bits, integer_bits, rounding, overflow> */
} bpt_fpga_number_format;

/** Quantisation mode of fixed point (ap_fixed's AP_TRN and AP_RND). */
typedef enum bpt_fpga_rounding {
  BPT_FPGA_TRUNCATE = 0, /**< toward minus infinity (AP_TRN) */
  BPT_FPGA_ROUND = 1     /**< to nearest, ties toward plus infinity (AP_RND) */
} bpt_fpga_rounding;

/** Overflow mode of fixed point (ap_fixed's AP_WRAP and AP_SAT). */
typedef enum bpt_fpga_overflow {
  BPT_FPGA_WRAP = 0,    /**< two's complement wrap-around (AP_WRAP) */
  BPT_FPGA_SATURATE = 1 /**< clamp to the largest or smallest representable value (AP_SAT) */
} bpt_fpga_overflow;

/** Options of the fpga-sim backend; get them from bpt_fpga_options_default(). */
typedef struct bpt_fpga_options {
  size_t size;                    /**< sizeof(bpt_fpga_options), set by the default function */
  bpt_fpga_number_format format;  /**< f32 (default) or fixed point */
  int word_bits;                  /**< fixed point: total bits W, 2..32 */
  int integer_bits;               /**< fixed point: integer bits I including the sign, 1..W (fraction bits = W - I) */
  bpt_fpga_rounding rounding;     /**< fixed point: truncate or round (default) */
  bpt_fpga_overflow overflow;     /**< fixed point: wrap or saturate (default) */
  double clock_mhz;               /**< kernel clock, > 0 */
  int dsp_slices;                 /**< DSP slices of each of the two engines (forward, backward), >= 1 */
  int lanes_per_slice;            /**< multiply-accumulates per slice per cycle, >= 1 */
  int initiation_interval;        /**< II of every pipelined loop, >= 1 */
  int pipeline_depth;             /**< latency in cycles of one pipelined loop iteration, >= 1 */
  int64_t bram_bytes;             /**< on-chip memory; allocations beyond it live off chip, >= 0 */
  double offchip_bytes_per_cycle; /**< off-chip bandwidth per kernel clock cycle, > 0 */
  double board_watts;             /**< board power for the energy estimate, >= 0 */
} bpt_fpga_options;

/**
 * @return a Zynq UltraScale+ ZU3-class part: f32, 200 MHz, 8 DSP slices in each of two engines (16 used),
 * 1 lane per slice, II 1, depth 8, 972 KiB of BRAM, 16 bytes per cycle off chip (one 128-bit AXI port),
 * 7.3 W. Fixed point fields describe ap_fixed<16, 6, AP_RND, AP_SAT> but are unused while format is f32.
 */
BPT_API bpt_fpga_options bpt_fpga_options_default(void);

/**
 * Reconfigures the fpga-sim backend of @p context: the number format applies to every later kernel call, the
 * model parameters to every later cycle count, and on-chip placement is redone in allocation order.
 * Resets the cycle counters. Fails with ::BPT_ERR_INVALID_ARGUMENT when @p context is not on "fpga-sim" or an
 * option is out of range.
 */
BPT_API bpt_status bpt_fpga_configure(bpt_context *context, const bpt_fpga_options *options);

/** Totals of the cycle model since the last reset. */
typedef struct bpt_fpga_report {
  size_t size;                   /**< set by the caller to sizeof(bpt_fpga_report) */
  uint64_t cycles;               /**< simulated kernel clock cycles, overlap accounted for */
  uint64_t compute_cycles;       /**< cycles of pipelined loops, summed over both engines */
  uint64_t transfer_cycles;      /**< cycles moving off-chip data, summed over both engines */
  uint64_t overlap_saved_cycles; /**< cycles hidden by running the two engines concurrently */
  uint64_t kernel_calls;         /**< kernel calls, memory transfers included */
  double seconds;                /**< cycles / clock */
  double joules;                 /**< seconds * board power */
  int64_t on_chip_bytes;         /**< bytes of allocations placed in BRAM */
  int64_t off_chip_bytes;        /**< bytes of allocations placed off chip */
} bpt_fpga_report;

/** Fills @p report (whose size field the caller sets) with the totals since the last reset. */
BPT_API bpt_status bpt_fpga_get_report(bpt_context *context, bpt_fpga_report *report);

/** Statistics of one kernel of the cycle model since the last reset. */
typedef struct bpt_fpga_kernel_report {
  size_t size;              /**< set by the caller to sizeof(bpt_fpga_kernel_report) */
  const char *name;         /**< "gemm", "bias_add", ... (static storage) */
  uint64_t calls;           /**< kernel calls */
  uint64_t compute_cycles;  /**< cycles of its pipelined loops */
  uint64_t transfer_cycles; /**< cycles moving its off-chip operands */
  uint64_t operations;      /**< multiply-accumulates (gemm) or elements processed */
  double utilisation;       /**< operations / ((compute + transfer cycles) * lanes of one engine), 0..1 */
} bpt_fpga_kernel_report;

/** @return how many kernels the cycle model keeps statistics for (indices for bpt_fpga_get_kernel_report()). */
BPT_API int bpt_fpga_kernel_count(void);

/** Fills @p report (whose size field the caller sets) for kernel @p index, 0 <= index < bpt_fpga_kernel_count(). */
BPT_API bpt_status bpt_fpga_get_kernel_report(bpt_context *context, int index, bpt_fpga_kernel_report *report);

/** Zeroes the cycle counters and per-kernel statistics (allocations and their placement stay). */
BPT_API bpt_status bpt_fpga_reset_counters(bpt_context *context);

/**
 * Writes a human-readable table (one line per kernel: calls, cycles, share, DSP utilisation) followed by the
 * totals into @p buffer of @p size bytes, truncated if needed.
 */
BPT_API bpt_status bpt_fpga_format_report(bpt_context *context, char *buffer, size_t size);

BPT_EXTERN_C_END

#endif
