/* The MPI engine's ring all-reduce splits each rank's chunk into segments that move through the hops on
 * their own, received into a few shared slots (src/comm/mpi.c). These sizes give one, several and the most
 * segments per chunk, with chunks and segments of unequal lengths, in every dtype the engine sums (f32,
 * f16, bf16, and int8 in u8 storage for the int8 codec), with and without the progress thread; and two
 * all-reduces of different segment counts in flight at once, whose messages must not be matched with each
 * other's. Every element is checked exactly against the sum over ranks, with values that change along the
 * buffer so a segment landing in another segment's place shows up. */
#include <stdlib.h>
#include <string.h>

#include "bptrain/comm_mpi.h"
#include "comm/comm.h"
#include "comm/compress.h"
#include "mpi_check.h"

/* Integers in [-30, 30]: sums over 3 ranks stay exact in bf16 and inside int8. The slow term (i >> 10)
 * keeps a displaced segment from matching by chance after one period. */
static int value_at(int64_t i, int rank) { return (int)((i * 7 + (i >> 10) * 5 + rank * 3) % 61) - 30; }

static size_t element_bytes(bpt_dtype dtype) { return dtype == BPT_DTYPE_U8 ? 1 : bpt_dtype_size(dtype); }

static void fill(bpt_dtype dtype, void *buffer, int64_t count, int rank) {
  for (int64_t i = 0; i < count; i++) {
    float value = (float)value_at(i, rank);
    switch (dtype) {
    case BPT_DTYPE_F32: ((float *)buffer)[i] = value; break;
    case BPT_DTYPE_F16: ((uint16_t *)buffer)[i] = bpt_float_to_f16(value); break;
    case BPT_DTYPE_BF16: ((uint16_t *)buffer)[i] = bpt_float_to_bf16(value); break;
    default: ((int8_t *)buffer)[i] = (int8_t)value_at(i, rank); break;
    }
  }
}

static void check_sums(bpt_dtype dtype, const void *buffer, int64_t count, int size, const char *what) {
  for (int64_t i = 0; i < count; i++) {
    int expected = 0;
    for (int r = 0; r < size; r++)
      expected += value_at(i, r);
    float got;
    switch (dtype) {
    case BPT_DTYPE_F32: got = ((const float *)buffer)[i]; break;
    case BPT_DTYPE_F16: got = bpt_f16_to_float(((const uint16_t *)buffer)[i]); break;
    case BPT_DTYPE_BF16: got = bpt_bf16_to_float(((const uint16_t *)buffer)[i]); break;
    default: got = (float)((const int8_t *)buffer)[i]; break;
    }
    MPI_CHECK(got == (float)expected, "%s %s of %lld elements: element %lld is %g, expected %d", what,
              dtype == BPT_DTYPE_U8 ? "int8" : bpt_dtype_name(dtype), (long long)count, (long long)i, got, expected);
  }
}

/* Starts an in-place sum through the engine: the public call takes no int8, which the codec sums. */
static bpt_comm_request *start_sum(bpt_context *context, bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype) {
  bpt_comm_request *request = NULL;
  MPI_CHECK_OK(context, comm->engine->allreduce_start(comm, buffer, count, dtype, BPT_COMM_REDUCE_SUM, 1.0f, &request));
  return request;
}

/* Elements for a chunk of about `mebibytes` per rank, made odd and not a multiple of the rank count so chunks
 * and segments come out unequal. */
static int64_t count_for(double mebibytes, bpt_dtype dtype, int size) {
  int64_t count = (int64_t)(mebibytes * (1 << 20) / (double)element_bytes(dtype)) * size;
  return count + (count % 2 == 0) + (count % size == 0 ? 2 : 0);
}

static void segmented_sums(bpt_context *context, bpt_comm *comm) {
  /* For chunks of 1 MiB or more cut into segments of 256 KiB or more, at most 16, in two receive slots
   * (mpi.c): one segment; five of unequal lengths, so slots are reused; ten; more than 16 wanted (f32 only:
   * it is the slowest case under sanitizers, and the segment arithmetic is in elements, the same for every
   * dtype). */
  const double chunk_sizes[] = {0.6, 1.3, 2.5, 8.7};
  const bpt_dtype dtypes[] = {BPT_DTYPE_F32, BPT_DTYPE_F16, BPT_DTYPE_BF16, BPT_DTYPE_U8};
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm);
  size_t largest = 0;
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    size_t bytes = (size_t)count_for(chunk_sizes[3], dtypes[d], size) * element_bytes(dtypes[d]);
    largest = bytes > largest ? bytes : largest;
  }
  void *buffer = malloc(largest);
  MPI_CHECK(buffer != NULL, "out of memory");
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t s = 0; s < sizeof chunk_sizes / sizeof chunk_sizes[0] - (dtypes[d] != BPT_DTYPE_F32); s++) {
      int64_t count = count_for(chunk_sizes[s], dtypes[d], size);
      fill(dtypes[d], buffer, count, rank);
      if (dtypes[d] == BPT_DTYPE_U8) {
        bpt_comm_request *request = start_sum(context, comm, buffer, count, dtypes[d]);
        MPI_CHECK_OK(context, bpt_comm_wait_all(comm, &request, 1, "int8 all-reduce"));
      } else {
        MPI_CHECK_OK(context, bpt_comm_allreduce(comm, buffer, count, dtypes[d], BPT_REDUCE_SUM));
      }
      check_sums(dtypes[d], buffer, count, size, "sum");
    }
  free(buffer);
}

/* A many-segment and a one-segment all-reduce in flight together, then the other way round. */
static void concurrent_sums(bpt_context *context, bpt_comm *comm) {
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm);
  int64_t large = count_for(5.3, BPT_DTYPE_F32, size), small = count_for(0.6, BPT_DTYPE_F32, size);
  float *first = malloc((size_t)large * sizeof *first), *second = malloc((size_t)large * sizeof *second);
  MPI_CHECK(first && second, "out of memory");
  for (int order = 0; order < 2; order++) {
    int64_t first_count = order ? small : large, second_count = order ? large : small;
    fill(BPT_DTYPE_F32, first, first_count, rank);
    fill(BPT_DTYPE_F32, second, second_count, rank);
    bpt_comm_request *requests[2] = {start_sum(context, comm, first, first_count, BPT_DTYPE_F32),
                                     start_sum(context, comm, second, second_count, BPT_DTYPE_F32)};
    MPI_CHECK_OK(context, bpt_comm_wait_all(comm, requests, 2, "two all-reduces"));
    check_sums(BPT_DTYPE_F32, first, first_count, size, "first of two concurrent");
    check_sums(BPT_DTYPE_F32, second, second_count, size, "second of two concurrent");
  }
  free(first);
  free(second);
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
  /* "polling-only" (the 3-rank run, oversubscribed on small machines) skips the progress thread's pass. */
  int first_pass = argc > 1 && strcmp(argv[1], "polling-only") == 0 ? 0 : 1;
  for (int progress_thread = first_pass; progress_thread >= 0; progress_thread--) {
    comm_options.progress_thread = progress_thread;
    bpt_comm *comm = NULL;
    MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &comm));
    segmented_sums(context, comm);
    concurrent_sums(context, comm);
    bpt_comm_destroy(comm);
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) printf("segmented ring all-reduce over %d ranks: ok\n", size);
  bpt_context_destroy(context);
  MPI_Finalize();
  return 0;
}
