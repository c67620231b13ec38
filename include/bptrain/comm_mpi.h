/**
 * @file comm_mpi.h
 * @brief Convenience wrappers taking an MPI_Comm, for programs that use MPI themselves.
 *
 * Optional and not included by bptrain.h: it includes mpi.h, which must come from the MPI the program is
 * built with. The library itself takes MPI_Comm_c2f() handles, so its ABI does not depend on the MPI.
 */
#ifndef BPTRAIN_COMM_MPI_H
#define BPTRAIN_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

BPT_EXTERN_C_BEGIN

/** bpt_comm_create_mpi() taking the MPI communicator itself. */
static inline bpt_status bpt_comm_create_from_mpi(bpt_context *context, MPI_Comm comm, const bpt_comm_options *options,
                                                  bpt_comm **out) {
  return bpt_comm_create_mpi(context, (int64_t)MPI_Comm_c2f(comm), options, out);
}

/** bpt_comm_create_nccl_mpi() taking the MPI communicator itself. */
static inline bpt_status bpt_comm_create_nccl_from_mpi(bpt_context *context, MPI_Comm comm, int device,
                                                       const bpt_comm_options *options, bpt_comm **out) {
  return bpt_comm_create_nccl_mpi(context, (int64_t)MPI_Comm_c2f(comm), device, options, out);
}

BPT_EXTERN_C_END

#endif
