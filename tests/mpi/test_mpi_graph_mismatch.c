/* Ranks that build different models must be told so, by name, when data-parallel training is attached:
 * "size": rank 1's hidden layer has 256 units where rank 0's has 512 (before the layout check: an opaque
 * MPI_ERR_TRUNCATE from the parameter broadcast); "attribute": the same shapes, but rank 1's leaky ReLU has
 * another slope (before: not detected at all); "same": equal models still attach. Both ranks must get
 * BPT_ERR_INVALID_ARGUMENT naming rank 1 and the first difference. */
#include <stdbool.h>
#include <string.h>

#include "mpi_check.h"

static bpt_graph *build(bpt_context *context, int64_t hidden, float slope) {
  bpt_graph *graph = NULL;
  bpt_node *x, *labels, *h, *loss;
  int64_t dims = 784;
  MPI_CHECK_OK(context, bpt_graph_create(context, &graph));
  MPI_CHECK_OK(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &dims, &x));
  MPI_CHECK_OK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  MPI_CHECK_OK(context, bpt_layer_linear(graph, "fc1", x, hidden, BPT_INIT_HE_UNIFORM, &h));
  MPI_CHECK_OK(context, bpt_leaky_relu(graph, "act", h, slope, &h));
  MPI_CHECK_OK(context, bpt_layer_linear(graph, "fc2", h, 10, BPT_INIT_HE_UNIFORM, &h));
  MPI_CHECK_OK(context, bpt_softmax_cross_entropy(graph, "loss", h, labels, &loss));
  MPI_CHECK_OK(context, bpt_graph_compile(graph, loss, 8));
  return graph;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "size";
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = 1;
  bpt_context *context = NULL;
  if (bpt_context_create(&context_options, &context) != BPT_OK) return 1;
  bpt_comm_options options = bpt_comm_options_default();
  options.timeout_seconds = 20.0;
  bpt_comm *comm = NULL;
  MPI_CHECK_OK(context, bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &options, &comm));
  int rank = bpt_comm_rank(comm);
  bool size_differs = strcmp(mode, "size") == 0, slope_differs = strcmp(mode, "attribute") == 0;
  bpt_graph *graph = build(context, size_differs && rank == 1 ? 256 : 512, slope_differs && rank == 1 ? 0.2f : 0.01f);
  bpt_data_parallel *parallel = NULL;
  bpt_status status = bpt_data_parallel_create(graph, comm, NULL, &parallel);
  const char *message = bpt_context_last_error(context);
  if (strcmp(mode, "same") == 0) {
    MPI_CHECK(status == BPT_OK, "equal models were refused: %s", message);
  } else {
    MPI_CHECK(status == BPT_ERR_INVALID_ARGUMENT, "%s: got %s: %s", mode, bpt_status_string(status), message);
    MPI_CHECK(parallel == NULL, "a refused attach returned an object");
    MPI_CHECK(strstr(message, "rank 1 differs from rank 0") != NULL, "message does not name the rank: %s", message);
    const char *expected = size_differs ? "parameter 'fc1.weight': shape (256, 784) on rank 1 vs (512, 784) on rank 0"
                                        : "node 'act': float attributes (0.2) on rank 1 vs (0.01) on rank 0";
    MPI_CHECK(strstr(message, expected) != NULL, "message does not name '%s': %s", expected, message);
    printf("rank %d: %s\n", rank, message);
  }
  bpt_data_parallel_destroy(parallel);
  bpt_graph_destroy(graph);
  MPI_CHECK_OK(context, bpt_comm_close(comm)); /* the communicator still works after the refusal */
  bpt_context_destroy(context);
  return 0;
}
