// The C++ consumer outside the libbptrain tree: the installed bptrain.hpp alone (through find_package), the
// same two-cluster classifier as consumer.c, with move-only handles and exceptions instead of status checks.
#include <bptrain.hpp>

#include <cstdio>

int main() {
  try {
    bpt::context context;
    bpt::graph graph(context);
    const int64_t features = 2, batch = 64;
    bpt_node *x = graph.input("x", BPT_DTYPE_F32, {features});
    bpt_node *labels = graph.input("labels", BPT_DTYPE_I32, {});
    bpt_node *logits = graph.linear("fc", x, 2, BPT_INIT_XAVIER_UNIFORM);
    graph.compile(graph.softmax_cross_entropy("loss", logits, labels), batch);
    bpt_optimizer_options options = bpt_optimizer_options_default();
    options.learning_rate = 0.5f;
    bpt::optimizer optimizer(graph, options);
    bpt::tensor inputs(context, BPT_DTYPE_F32, {batch, features});
    bpt::tensor targets(context, BPT_DTYPE_I32, {batch});
    float *values = inputs.data<float>();
    int32_t *classes = targets.data<int32_t>();
    for (int64_t n = 0; n < batch; n++) {
      classes[n] = static_cast<int32_t>(n % 2);
      float sign = classes[n] ? 1.0f : -1.0f;
      values[2 * n] = sign * (1.0f + 0.01f * static_cast<float>(n % 7));
      values[2 * n + 1] = sign * 0.5f - 0.02f * static_cast<float>(n % 5);
    }
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 100; step++) {
      graph.set_input(x, inputs);
      graph.set_input(labels, targets);
      graph.forward();
      (step ? last : first) = graph.loss();
      graph.backward();
      optimizer.step();
    }
    std::printf("consumer (C++): libbptrain %s, loss %.4f -> %.4f\n", bpt_version(), first, last);
    return last < 0.5f * first && last < 0.05f ? 0 : 1;
  } catch (const bpt::error &failure) {
    std::fprintf(stderr, "consumer (C++): %s\n", failure.what());
    return 1;
  }
}
