/* The exp loop of softmax and attention rows (exp_rows.c), in the widest vector loops the backend allows. */
#ifndef BPT_CPU_EXP_ROWS_H
#define BPT_CPU_EXP_ROWS_H

#include "backends/cpu/cpu.h"

/* row[i] = exp(row[i] - shift) for i < count (fast_exp.h's exp); returns the sum of the new values. loops:
 * bpt_cpu_vector_loops(), which version runs. */
float bpt_cpu_exp_row(bpt_cpu_loops loops, float *row, int64_t count, float shift);

#endif
