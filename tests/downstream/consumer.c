/* A program outside the libbptrain tree: it sees only the installed headers and library, trains a
 * one-layer classifier on two separable clusters and checks that it learned them. */
#include <bptrain.h>
#include <stdio.h>

#define CHECK(context, expression)                                                                                     \
  do {                                                                                                                 \
    if ((expression) != BPT_OK) {                                                                                      \
      fprintf(stderr, "consumer: %s failed: %s\n", #expression, bpt_context_last_error(context));                      \
      return 1;                                                                                                        \
    }                                                                                                                  \
  } while (0)

int main(void) {
  if (bpt_abi_version() != BPT_ABI_VERSION) {
    fprintf(stderr, "consumer: headers say ABI %d, library says %d\n", BPT_ABI_VERSION, bpt_abi_version());
    return 1;
  }
  bpt_context *context = NULL;
  CHECK(NULL, bpt_context_create(NULL, &context));
  bpt_graph *graph = NULL;
  bpt_node *x, *labels, *logits, *loss;
  const int64_t features = 2, batch = 64;
  CHECK(context, bpt_graph_create(context, &graph));
  CHECK(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  CHECK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  CHECK(context, bpt_layer_linear(graph, "fc", x, 2, BPT_INIT_XAVIER_UNIFORM, &logits));
  CHECK(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  CHECK(context, bpt_graph_compile(graph, loss, batch));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.5f;
  bpt_optimizer *optimizer = NULL;
  CHECK(context, bpt_optimizer_create(graph, &options, &optimizer));

  int64_t dims[2] = {batch, features};
  bpt_tensor *inputs = NULL, *targets = NULL;
  CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &inputs));
  CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &targets));
  float *values = bpt_tensor_data(inputs);
  int32_t *classes = bpt_tensor_data(targets);
  for (int64_t n = 0; n < batch; n++) {
    classes[n] = (int32_t)(n % 2);
    float sign = classes[n] ? 1.0f : -1.0f;
    values[2 * n] = sign * (1.0f + 0.01f * (float)(n % 7));
    values[2 * n + 1] = sign * 0.5f - 0.02f * (float)(n % 5);
  }
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 100; step++) {
    CHECK(context, bpt_graph_set_input(graph, x, inputs));
    CHECK(context, bpt_graph_set_input(graph, labels, targets));
    CHECK(context, bpt_graph_forward(graph));
    CHECK(context, bpt_graph_loss(graph, step ? &last : &first));
    CHECK(context, bpt_graph_backward(graph));
    CHECK(context, bpt_optimizer_step(optimizer));
  }
  printf("consumer: libbptrain %s, loss %.4f -> %.4f\n", bpt_version(), first, last);
  int learned = last < 0.5f * first && last < 0.05f;
  bpt_tensor_destroy(inputs);
  bpt_tensor_destroy(targets);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return learned ? 0 : 1;
}
