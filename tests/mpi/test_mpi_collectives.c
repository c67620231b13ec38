/* Collectives over MPI on every rank of the job: all-reduce sum and average for sizes 0, 1, 2, odd and
 * larger than the default first bucket, in f32, f16 and bf16, against exact integer sums; f32 against
 * MPI_Allreduce on the same random buffers; broadcast from a non-zero root; barrier; argument errors;
 * a one-rank communicator (MPI_COMM_SELF). Sums run with and without the progress thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/comm_mpi.h"
#include "comm/compress.h"
#include "mpi_check.h"

static float value_at(int64_t i, int rank) { return (float)((i * 7 + rank * 3) % 11) - 5.0f; }

static void store(bpt_dtype dtype, void *buffer, int64_t i, float value) {
  if (dtype == BPT_DTYPE_F32)
    ((float *)buffer)[i] = value;
  else
    ((uint16_t *)buffer)[i] = dtype == BPT_DTYPE_F16 ? bpt_float_to_f16(value) : bpt_float_to_bf16(value);
}

static float load(bpt_dtype dtype, const void *buffer, int64_t i) {
  if (dtype == BPT_DTYPE_F32) return ((const float *)buffer)[i];
  uint16_t bits = ((const uint16_t *)buffer)[i];
  return dtype == BPT_DTYPE_F16 ? bpt_f16_to_float(bits) : bpt_bf16_to_float(bits);
}

static void exact_sums(bpt_context *context, bpt_comm *comm) {
  const int64_t sizes[] = {0, 1, 2, 1001, (INT64_C(1) << 18) + 3}; /* the last is 1 MiB + 12 bytes in f32 */
  const bpt_dtype dtypes[] = {BPT_DTYPE_F32, BPT_DTYPE_F16, BPT_DTYPE_BF16};
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm);
  void *buffer = malloc(((size_t)sizes[4] + 1) * sizeof(float));
  MPI_CHECK(buffer != NULL, "out of memory");
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (size_t d = 0; d < 3; d++)
      for (int average = 0; average <= 1; average++) {
        int64_t n = sizes[s];
        for (int64_t i = 0; i < n; i++)
          store(dtypes[d], buffer, i, value_at(i, rank));
        MPI_CHECK_OK(context, bpt_comm_allreduce(comm, n ? buffer : NULL, n, dtypes[d],
                                                 average ? BPT_REDUCE_AVERAGE : BPT_REDUCE_SUM));
        for (int64_t i = 0; i < n; i++) {
          float expected = 0.0f;
          for (int r = 0; r < size; r++)
            expected += value_at(i, r);
          if (average) expected /= (float)size;
          float got = load(dtypes[d], buffer, i);
          /* Integers and halves are exact in every dtype; averages over other rank counts are rounded. */
          float tolerance = size == 2 || !average ? 0.0f : 0.01f * fabsf(expected) + 1e-3f;
          MPI_CHECK(fabsf(got - expected) <= tolerance, "%s %s of %lld: element %lld is %g, expected %g",
                    bpt_dtype_name(dtypes[d]), average ? "average" : "sum", (long long)n, (long long)i, got, expected);
        }
      }
  free(buffer);
}

static void matches_mpi_allreduce(bpt_context *context, bpt_comm *comm) {
  const int64_t n = 300007;
  float *ours = malloc((size_t)n * sizeof *ours), *theirs = malloc((size_t)n * sizeof *theirs);
  MPI_CHECK(ours && theirs, "out of memory");
  srand(1234u + (unsigned)bpt_comm_rank(comm));
  for (int64_t i = 0; i < n; i++)
    ours[i] = theirs[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  MPI_CHECK_OK(context, bpt_comm_allreduce(comm, ours, n, BPT_DTYPE_F32, BPT_REDUCE_SUM));
  MPI_Allreduce(MPI_IN_PLACE, theirs, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < n; i++)
    MPI_CHECK(fabsf(ours[i] - theirs[i]) <= 1e-6f * (1.0f + fabsf(theirs[i])), "element %lld: %g vs MPI's %g",
              (long long)i, ours[i], theirs[i]);
  free(ours);
  free(theirs);
}

static void broadcast_barrier_and_errors(bpt_context *context, bpt_comm *comm) {
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm), root = size - 1;
  unsigned char bytes[12345];
  for (size_t i = 0; i < sizeof bytes; i++)
    bytes[i] = (unsigned char)(rank == root ? i * 13 : 0);
  MPI_CHECK_OK(context, bpt_comm_broadcast(comm, bytes, sizeof bytes, root));
  for (size_t i = 0; i < sizeof bytes; i++)
    MPI_CHECK(bytes[i] == (unsigned char)(i * 13), "byte %zu", i);
  MPI_CHECK_OK(context, bpt_comm_barrier(comm));

  int32_t integers[4] = {0};
  MPI_CHECK(bpt_comm_allreduce(comm, integers, 4, BPT_DTYPE_I32, BPT_REDUCE_SUM) == BPT_ERR_DTYPE &&
                strstr(bpt_context_last_error(context), "i32"),
            "i32 accepted: %s", bpt_context_last_error(context));
  MPI_CHECK(bpt_comm_allreduce(comm, integers, -1, BPT_DTYPE_F32, BPT_REDUCE_SUM) == BPT_ERR_INVALID_ARGUMENT,
            "negative count accepted");
  MPI_CHECK(bpt_comm_broadcast(comm, bytes, 1, size) == BPT_ERR_INVALID_ARGUMENT &&
                strstr(bpt_context_last_error(context), "root"),
            "root out of range accepted");
  MPI_CHECK(strcmp(bpt_comm_engine(comm), "mpi") == 0, "engine %s", bpt_comm_engine(comm));
}

static void single_rank(bpt_context *context) {
  bpt_comm *self = NULL;
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_SELF, NULL, &self));
  MPI_CHECK(bpt_comm_size(self) == 1 && bpt_comm_rank(self) == 0, "MPI_COMM_SELF has %d ranks", bpt_comm_size(self));
  float values[3] = {1.0f, -2.0f, 3.5f};
  MPI_CHECK_OK(context, bpt_comm_allreduce(self, values, 3, BPT_DTYPE_F32, BPT_REDUCE_AVERAGE));
  MPI_CHECK(values[0] == 1.0f && values[1] == -2.0f && values[2] == 3.5f, "one rank changed its values");
  MPI_CHECK_OK(context, bpt_comm_barrier(self));
  bpt_comm_destroy(self);
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 1;
  bpt_context *context = NULL;
  MPI_CHECK_OK(NULL, bpt_context_create(&options, &context));
  bpt_comm_options comm_options = bpt_comm_options_default();
  comm_options.timeout_seconds = 30.0;
  bpt_comm *comm = NULL;
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &comm));
  exact_sums(context, comm);
  /* Again with requests advanced only by our polls, never by a progress thread. */
  bpt_comm *polling = NULL;
  comm_options.progress_thread = 0;
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &polling));
  exact_sums(context, polling);
  bpt_comm_destroy(polling);
  matches_mpi_allreduce(context, comm);
  broadcast_barrier_and_errors(context, comm);
  single_rank(context);
  if (bpt_comm_rank(comm) == 0) printf("collectives over %d ranks: ok\n", bpt_comm_size(comm));
  bpt_comm_destroy(comm);
  bpt_context_destroy(context);
  MPI_Finalize();
  return 0;
}
