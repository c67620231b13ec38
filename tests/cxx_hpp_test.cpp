// The installed C++ header bptrain.hpp: handles are move-only and release on destruction (ASan/LSan in the
// sanitizer build see a leak or a double destroy), a failed call throws bpt::error with the C status and the
// context's message, and a small graph trains through the wrappers alone (loss falls on a fixed batch).
#include <bptrain.hpp>

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>
#include <vector>

static_assert(!std::is_copy_constructible<bpt::graph>::value, "handles are move-only");
static_assert(!std::is_copy_assignable<bpt::tensor>::value, "handles are move-only");
static_assert(std::is_nothrow_move_constructible<bpt::context>::value, "moves never throw");
static_assert(std::is_nothrow_move_assignable<bpt::dataset>::value, "moves never throw");
#if __cplusplus >= 202002L && defined(__cpp_lib_span)
static_assert(std::is_same<bpt::span<float>, std::span<float>>::value, "C++20: bpt::span is std::span");
#endif

static int failures = 0;
#define EXPECT(condition)                                                                                              \
  do {                                                                                                                 \
    if (!(condition)) {                                                                                                \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition);                                    \
      failures++;                                                                                                      \
    }                                                                                                                  \
  } while (0)

int main() {
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 1;
  bpt::context context(options);

  // A failed call: the status and the library's message travel in the exception.
  bool thrown = false;
  try {
    bpt::dataset missing(context, "/nonexistent-bptrain-directory", "train");
  } catch (const bpt::error &failure) {
    thrown = true;
    EXPECT(failure.status() == BPT_ERR_IO);
    EXPECT(!failure.message().empty());
    EXPECT(std::string(failure.what()).find("bpt_dataset_load_idx_directory: ") == 0);
    EXPECT(std::string(failure.what()).find(failure.message()) != std::string::npos);
  }
  EXPECT(thrown);
  // A message that already names the call does not get it twice ("bpt_context_create: bpt_context_create: ...").
  thrown = false;
  try {
    bpt_context_options unknown = bpt_context_options_default();
    unknown.backend = "nosuch";
    bpt::context refused(unknown);
  } catch (const bpt::error &failure) {
    thrown = true;
    EXPECT(std::string(failure.what()).find("bpt_context_create: ") == 0);
    EXPECT(std::string(failure.what()).find("bpt_context_create: bpt_context_create") == std::string::npos);
    EXPECT(std::string(failure.what()).find("nosuch") != std::string::npos);
  }
  EXPECT(thrown);

  // Moves transfer ownership; the moved-from handle is empty and its destructor does nothing.
  bpt::tensor first(context, BPT_DTYPE_F32, {4, 3});
  bpt_tensor *raw = first.get();
  bpt::tensor second(std::move(first));
  EXPECT(!first && second.get() == raw);
  bpt::tensor third(context, BPT_DTYPE_F32, {2});
  third = std::move(second); // destroys third's old tensor (a leak otherwise)
  EXPECT(!second && third.get() == raw && third.dim(0) == 4 && third.dim(1) == 3);

  // A 3-feature, 2-class classifier trained on one fixed batch: the loss must fall.
  bpt::graph graph(context);
  bpt_node *x = graph.input("x", BPT_DTYPE_F32, {3});
  bpt_node *y = graph.input("y", BPT_DTYPE_I32, {});
  bpt_node *logits = graph.linear("fc", x, 2);
  graph.compile(graph.softmax_cross_entropy("loss", logits, y), 4);
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.5f;
  bpt::optimizer optimizer(graph, optimizer_options);
  bpt::tensor labels(context, BPT_DTYPE_I32, {4});
  const float values[12] = {1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1};
  const int32_t classes[4] = {0, 1, 0, 1};
  for (int i = 0; i < 12; i++)
    third.data<float>()[i] = values[i];
  for (int i = 0; i < 4; i++)
    labels.data<int32_t>()[i] = classes[i];
  float first_loss = 0.0f, last_loss = 0.0f;
  for (int step = 0; step < 20; step++) {
    graph.set_input(x, third);
    graph.set_input(y, labels);
    graph.forward();
    graph.backward();
    optimizer.step();
    last_loss = graph.loss();
    if (step == 0) first_loss = last_loss;
  }
  EXPECT(std::isfinite(last_loss) && last_loss < first_loss);

  // values<T>() is a span over the tensor's elements (std::span under C++20), checked against the dtype.
  bpt::span<float> view = third.values<float>();
  EXPECT(view.size() == 12 && view.data() == third.data<float>() && view[4] == 1.0f);
  float sum = 0.0f;
  for (float value : view)
    sum += value;
  EXPECT(sum == 5.0f);
  thrown = false;
  try {
    (void)labels.values<float>();
  } catch (const bpt::error &failure) {
    thrown = true;
    EXPECT(failure.status() == BPT_ERR_INVALID_ARGUMENT);
    EXPECT(failure.message().find("i32") != std::string::npos);
  }
  EXPECT(thrown);
  EXPECT(labels.values<int32_t>()[3] == 1 && labels.count() == 4 && labels.dims() == std::vector<int64_t>{4});

  // read(): the logits of the last forward, shaped (batch, classes), equal to what the C call gives. Backward
  // reuses their memory, so a forward comes first.
  graph.forward();
  bpt::tensor read_logits = graph.read(logits);
  EXPECT(read_logits.dims() == (std::vector<int64_t>{4, 2}));
  bpt::tensor direct(context, BPT_DTYPE_F32, {4, 2});
  bpt::check(context.get(), bpt_graph_read(graph.get(), logits, direct.get()), "bpt_graph_read");
  for (int i = 0; i < 8; i++)
    EXPECT(read_logits.values<float>()[static_cast<std::size_t>(i)] == direct.data<float>()[i]);

  // A one-block character model built with the wrappers alone learns a fixed batch (its loss falls).
  {
    bpt::graph gpt(context);
    bpt_node *ids = gpt.input_sequence("ids", BPT_DTYPE_I32, 4);
    bpt_node *next = gpt.input_sequence("next", BPT_DTYPE_I32, 4);
    bpt_transformer_block_options block = bpt_transformer_block_options_default();
    block.heads = 2;
    bpt_node *h = gpt.embedding("wte", ids, 8, 8);
    h = gpt.transformer_block("h0", h, block);
    h = gpt.layer_norm("ln_f", h);
    gpt.compile(gpt.softmax_cross_entropy("loss", gpt.linear("head", h, 8), next), 2);
    bpt_optimizer_options adam = bpt_optimizer_options_default();
    adam.learning_rate = 0.05f;
    bpt::optimizer gpt_optimizer(gpt, adam);
    bpt::tensor tokens(context, BPT_DTYPE_I32, {2, 4}), targets(context, BPT_DTYPE_I32, {2, 4});
    const int32_t text[10] = {1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
    for (int i = 0; i < 8; i++) {
      tokens.values<int32_t>()[static_cast<std::size_t>(i)] = text[i];
      targets.values<int32_t>()[static_cast<std::size_t>(i)] = text[i + 1];
    }
    float start = 0.0f, end = 0.0f;
    for (int step = 0; step < 30; step++) {
      gpt.set_input(ids, tokens);
      gpt.set_input(next, targets);
      gpt.forward();
      gpt.backward();
      gpt_optimizer.step();
      end = gpt.loss();
      if (step == 0) start = end;
    }
    EXPECT(std::isfinite(end) && end < 0.5f * start);
  }

  // A call out of order on a wrapper throws with the C status.
  thrown = false;
  try {
    bpt::graph uncompiled(context);
    uncompiled.forward();
  } catch (const bpt::error &failure) {
    thrown = true;
    EXPECT(failure.status() != BPT_OK);
  }
  EXPECT(thrown);
  if (failures == 0) std::printf("bptrain.hpp: moves, errors and a training loop behave\n");
  return failures == 0 ? 0 : 1;
}
