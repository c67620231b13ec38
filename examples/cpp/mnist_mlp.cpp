// The MLP example in C++17: the same 784-512-256-10 network as examples/mnist_mlp.c, written against the
// installed C++ header bptrain.hpp (move-only handles over the C API, errors as bpt::error exceptions), so
// handles are released on every path.
//
//   mnist_mlp_cpp [--data DIR] [--epochs 2] [--batch 128] [--lr 0.05] [--limit N] [--seed 42] [--threads N]
//                 [--save FILE] [--eval FILE] [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json]
//                 [--classes N] [--backend cpu]
//
// --save writes the trained model as a checkpoint, the one model file the C and Python examples read too;
// --eval FILE skips training and reports that file's test accuracy.
#include <bptrain.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_metrics.h"
#include "example_output.h"

namespace {

// On an error the metrics close too (keeping what was recorded until then); on success run() closes them
// itself, since only that close's status says whether every output was written.
struct metrics_closer {
  void operator()(example_metrics *metrics) const { (void)example_metrics_close(metrics); }
};
typedef std::unique_ptr<example_metrics, metrics_closer> metrics_ptr;

struct options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  long epochs = 2, batch = 128, limit = 0, seed = 42, threads = 0, classes = 0;
  double learning_rate = 0.05;
  std::string save, eval, backend;
};

const char usage[] =
    "usage: mnist_mlp_cpp [--data DIR] [--epochs N] [--batch N] [--lr X] [--limit N] [--seed N] [--threads N]\n"
    "                     [--save FILE] [--eval FILE] [--backend cpu|cuda|fpga-sim]\n"
    "  --limit N            train on the first N samples of each (shuffled) epoch, 0 for all\n"
    "  --save FILE          write the trained model to FILE as a checkpoint\n"
    "  --eval FILE          skip training: load a checkpoint's parameters (by name) and report the test accuracy\n"
    "  --classes N          the number of classes (default: from the training labels, checked)\n" EXAMPLE_METRICS_USAGE;

// Levenshtein distance, for "did you mean" on a misspelt option.
std::size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); j++)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); i++) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); j++) {
      std::size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

options parse(int argc, char **argv) {
  options parsed;
  const char *valued[] = {"--data",    "--epochs", "--batch", "--lr",      "--limit", "--seed",
                          "--threads", "--classes", "--save", "--eval", "--backend", EXAMPLE_METRICS_OPTIONS};
  for (int i = 1; i < argc; i++) {
    std::string argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    bool known = false;
    for (const char *name : valued)
      known = known || argument == name;
    if (!known || i + 1 >= argc) {
      std::string guess;  // the nearest known option, at most 2 edits away
      std::size_t best = 3;
      for (const char *name : valued)
        if (!known && edit_distance(argument, name) < best) best = edit_distance(argument, name), guess = name;
      std::fprintf(stderr, "error: %s '%s'%s%s%s\n%s", known ? "missing value for" : "unknown argument", argv[i],
                   guess.empty() ? "" : "; did you mean ", guess.c_str(), guess.empty() ? "" : "?", usage);
      std::exit(2);
    }
    for (int j = 1; j < i; j += 2)  // every argument before i is a valued option and its value
      if (argument == argv[j]) {
        std::fprintf(stderr, "error: %s is given more than once\n", argv[i]);
        std::exit(2);
      }
    const char *value = argv[++i];
    char *end = nullptr;
    errno = 0;
    if (argument == "--data")
      parsed.data = value;
    else if (argument == "--epochs")
      parsed.epochs = std::strtol(value, &end, 10);
    else if (argument == "--batch")
      parsed.batch = std::strtol(value, &end, 10);
    else if (argument == "--limit")
      parsed.limit = std::strtol(value, &end, 10);
    else if (argument == "--seed")
      parsed.seed = std::strtol(value, &end, 10);
    else if (argument == "--classes")
      parsed.classes = std::strtol(value, &end, 10);
    else if (argument == "--threads")
      parsed.threads = std::strtol(value, &end, 10);
    else if (argument == "--save")
      parsed.save = value;
    else if (argument == "--eval")
      parsed.eval = value;
    else if (argument == "--backend")
      parsed.backend = value;
    else if (argument == "--lr")
      parsed.learning_rate = std::strtod(value, &end);
    if (end && (*end || end == value)) {
      std::fprintf(stderr, "error: %s expects a number, got '%s'\n", argv[i - 1], value);
      std::exit(2);
    }
    if (end && errno == ERANGE && (argument != "--lr" || std::isinf(parsed.learning_rate))) {
      std::fprintf(stderr, "error: %s %s is out of range\n", argv[i - 1], value);
      std::exit(2);
    }
  }
  if (parsed.epochs < 1 || parsed.batch < 1 || parsed.limit < 0 || parsed.threads < 0 || parsed.threads > INT_MAX ||
      parsed.classes < 0 || parsed.classes > 65536) {
    std::fprintf(stderr, "error: --epochs and --batch must be positive, --limit >= 0, --threads in [0, 2^31), --classes in [0, 65536]\n");
    std::exit(2);
  }
  if (!parsed.save.empty() && !parsed.eval.empty()) {
    std::fprintf(stderr, "error: --save and --eval exclude each other: --eval only evaluates, so nothing would be saved\n");
    std::exit(2);
  }
  // Files written after training: a path that cannot be created ends the run now, not after it.
  if (!parsed.save.empty()) example_check_output_file("--save", parsed.save.c_str());
  for (const char *name : {EXAMPLE_METRICS_OPTIONS})
    for (int i = 1; i + 1 < argc; i += 2)
      if (std::strcmp(argv[i], name) == 0) example_check_output_file(name, argv[i + 1]);
  return parsed;
}

int run(int argc, char **argv) {
  options o = parse(argc, argv);
  bpt_context_options context_options = bpt_context_options_default();
  context_options.seed = static_cast<uint64_t>(o.seed);
  context_options.num_threads = static_cast<int>(o.threads);
  if (!o.backend.empty()) context_options.backend = o.backend.c_str();
  bpt::context context(context_options);
  // Declared after the context, so it closes before the context goes (the profile reads the context).
  metrics_ptr metrics_owner(example_metrics_open(argc, argv, context.get(), "mnist_mlp (C++)"));
  example_metrics *metrics = metrics_owner.get();

  bpt::dataset train(context, o.data, "train");
  bpt::dataset test(context, o.data, "t10k");
  int64_t features = train.sample_size();
  // Checked against both label sets: one corrupt label must not silently size the output layer.
  int64_t classes = train.check_classes(test, static_cast<int>(o.classes));

  bpt::graph graph(context);
  bpt_node *images = graph.input("images", BPT_DTYPE_F32, {features});
  bpt_node *labels = graph.input("labels", BPT_DTYPE_I32, {});
  bpt_node *hidden = graph.relu("relu1", graph.linear("fc1", images, 512));
  hidden = graph.relu("relu2", graph.linear("fc2", hidden, 256));
  bpt_node *logits = graph.linear("fc3", hidden, classes);
  graph.compile(graph.softmax_cross_entropy("loss", logits, labels), o.batch);

  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = static_cast<float>(o.learning_rate);
  optimizer_options.momentum = 0.9f;
  bpt::optimizer optimizer(graph, optimizer_options);

  if (!o.eval.empty()) {
    // Parameters only, strictly: a file of another model fails naming the first parameter that differs.
    graph.load(o.eval);
    bpt_eval_options evaluation = bpt_eval_options_default();
    evaluation.batch_size = o.batch;
    bpt_eval_result tested = graph.evaluate(test, evaluation);
    std::printf("%s: test accuracy %.2f%%, test loss %.4f\n", o.eval.c_str(), 100.0 * tested.accuracy, tested.loss);
    return example_metrics_close(metrics_owner.release());
  }

  bpt::tensor batch_images(context, BPT_DTYPE_F32, {o.batch, features});
  bpt::tensor batch_labels(context, BPT_DTYPE_I32, {o.batch});
  std::printf("libbptrain %s (ABI %d) from C++: %lld training samples%s\n", bpt_version(), bpt_abi_version(),
              static_cast<long long>(train.size()), o.limit ? " (limited)" : "");

  double accuracy = 0.0;
  for (long epoch = 1; epoch <= o.epochs; epoch++) {
    // Unsigned: --seed may be the largest long. The limit's batch count rounds up without adding to it.
    train.shuffle(static_cast<uint64_t>(o.seed) + static_cast<uint64_t>(epoch));
    int64_t batches = train.batch_count(o.batch);
    if (o.limit) batches = std::min<int64_t>(batches, o.limit / o.batch + (o.limit % o.batch != 0));
    double loss_sum = 0.0;
    int64_t seen = 0;
    for (int64_t b = 0; b < batches; b++) {
      train.batch(b, o.batch, batch_images, batch_labels);
      graph.set_input(images, batch_images);
      graph.set_input(labels, batch_labels);
      graph.forward();
      graph.backward();
      optimizer.step();
      float batch_loss = graph.loss();
      int64_t count = batch_images.dim(0);
      loss_sum += batch_loss * static_cast<double>(count);
      seen += count;
      example_metrics_step(metrics, epoch, batch_loss, optimizer_options.learning_rate);
    }

    // Evaluation in eval mode: loss, accuracy (argmax) and top-5 over the whole test set.
    bpt_eval_result tested = graph.evaluate(test);
    accuracy = tested.accuracy;
    example_metrics_epoch(metrics, epoch, loss_sum / static_cast<double>(seen), NAN, tested.loss, accuracy,
                          optimizer_options.learning_rate);
    std::printf("epoch %ld: train loss %.4f, test loss %.4f, test accuracy %.2f%%\n", epoch,
                loss_sum / static_cast<double>(seen), tested.loss, 100.0 * accuracy);
    std::fflush(stdout);
  }
  std::printf("final test accuracy: %.2f%%\n", 100.0 * accuracy);
  if (!o.save.empty()) {
    graph.save(o.save);
    std::printf("saved the model as a checkpoint to %s\n", o.save.c_str());
  }
  return example_metrics_close(metrics_owner.release());
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &failure) {
    std::fprintf(stderr, "error: %s\n", failure.what());
    return 1;
  }
}
