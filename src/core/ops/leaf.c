/* Inputs and parameters: leaves of the graph. Their shapes are set where they are declared (graph.c)
 * and their values come from the caller or the initialiser, so they have no kernels. */
#include "core/graph.h"

const bpt_op_definition bpt_op_input = {.name = "input", .uses_kernels = bpt_op_uses_no_kernels};
const bpt_op_definition bpt_op_parameter = {.name = "parameter", .uses_kernels = bpt_op_uses_no_kernels};
