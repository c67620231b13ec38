/* Trains the 784-512-256-10 MLP of mnist_mlp with checkpoints: one every --save-every steps and one per epoch,
 * written atomically, so a run killed at any moment (or stopped with --stop-after) continues with --resume
 * exactly as if it had never stopped. The parameter checksum printed at the end is equal for both.
 *
 *   checkpoint_resume --checkpoint FILE [--resume] [--stop-after STEPS] [--save-every STEPS] [--data DIR]
 *                     [--epochs 2] [--batch 128] [--lr 0.05] [--momentum 0.9] [--threads N] [--seed 42]
 *                     [--backend cpu] [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json] [--classes N]
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "example_util.h"

static const char usage[] =
    "usage: checkpoint_resume --checkpoint FILE [--resume] [--stop-after STEPS] [--save-every STEPS]\n"
    "                         [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--threads N] [--seed N]\n"
    "                         [--backend cpu|cuda|fpga-sim]\n"
    "  --resume          continue from FILE (epoch, step, weights, optimizer state, sample order)\n"
    "  --stop-after N    stop after N training steps of this run, as if killed (after a checkpoint); 0: never\n"
    "  --save-every N    also write FILE every N optimizer steps (default 100; 0: only at the end of each epoch)\n"
    "  --resume needs the --data of the run that wrote FILE, and a --batch that divides the samples it had\n"
    "                    trained of its epoch (its own --batch always does); otherwise it is refused\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE;

/* The position in the epoch is saved in samples, not batches, so a resume with another --batch is either at
 * the right sample or refused; a count of batches would silently skip or repeat data. The tag bit tells such
 * a count from the batch count that files of earlier versions of this example hold. */
#define SAMPLES_TAG (INT64_C(1) << 62)

static void save(bpt_context *context, bpt_graph *graph, const char *path, bpt_optimizer *optimizer, bpt_dataset *train,
                 long epoch, long step, long batch) {
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = optimizer;
  contents.dataset = train;
  contents.epoch = epoch;
  int64_t samples = (int64_t)step * batch, size = bpt_dataset_size(train);
  contents.step = (samples < size ? samples : size) | SAMPLES_TAG;
  EXAMPLE_CHECK(context, bpt_checkpoint_save(graph, path, &contents));
}

/* The samples of its epoch that a loaded file had trained: a tagged count, or a count of batches of this
 * run's --batch in a file of an earlier version (which needed the writing run's --batch to resume). */
static int64_t saved_samples(int64_t step, long batch, int64_t size, const char *path) {
  if (step >= 0 && (step & SAMPLES_TAG)) return step & ~SAMPLES_TAG;
  if (step < 0 || step > size) return -1;
  printf("note: '%s' was written by an earlier checkpoint_resume, whose position counts batches: resuming at "
         "batch %lld of --batch %ld, as it needs the --batch of the run that wrote it\n",
         path, (long long)step, batch);
  return step * batch < size ? step * batch : size;
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--checkpoint", "--stop-after", "--save-every", "--data", "--epochs", "--batch",
                                       "--lr",         "--momentum",   "--threads",    "--seed", "--classes", "--backend", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--resume", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  const char *path = example_option(argc, argv, "--checkpoint");
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  long epochs = example_option_long(argc, argv, "--epochs", 2);
  long batch = example_option_long(argc, argv, "--batch", 128);
  long stop_after = example_option_long(argc, argv, "--stop-after", 0);
  long save_every = example_option_long(argc, argv, "--save-every", 100);
  uint64_t seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (!path || epochs < 1 || batch < 1 || stop_after < 0 || save_every < 0) {
    fprintf(stderr, "error: --checkpoint is required; --epochs and --batch must be positive, --stop-after and "
                    "--save-every >= 0\n%s", usage);
    return 2;
  }

  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  context_options.seed = seed;
  if (example_option(argc, argv, "--backend")) context_options.backend = example_option(argc, argv, "--backend");
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &context));
  example_metrics *metrics = example_metrics_open(argc, argv, context, "checkpoint_resume");
  bpt_dataset *train = NULL, *test = NULL;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "train", &train));
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "t10k", &test));
  int64_t features = bpt_dataset_sample_size(train), classes = example_class_count(argc, argv, context, train, test, 0);

  bpt_graph *graph = NULL;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  static const int64_t widths[2] = {512, 256};
  example_classifier mlp;
  EXAMPLE_CHECK(context, example_build_mlp(graph, features, widths, 2, classes, &mlp));
  bpt_node *images = mlp.images, *labels = mlp.labels, *loss = mlp.loss;
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, batch));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = (float)example_option_double(argc, argv, "--lr", 0.05);
  optimizer_options.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  long epoch = 0, step = 0;
  if (example_flag(argc, argv, "--resume")) {
    bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
    contents.optimizer = optimizer;
    contents.dataset = train;
    EXAMPLE_CHECK(context, bpt_checkpoint_load(graph, path, &contents));
    int64_t size = bpt_dataset_size(train), samples = saved_samples(contents.step, batch, size, path);
    /* A file at the last epoch's end is a finished run; one past it comes from a run with more --epochs. */
    if (contents.epoch < 0 || contents.epoch > epochs || (contents.epoch == epochs && samples > 0) || samples < 0 ||
        samples > size) {
      fprintf(stderr,
              "error: --resume: '%s' has %lld epoch(s) done and %lld sample(s) of the next; this run trains %ld "
              "epoch(s) of %lld samples\n",
              path, (long long)contents.epoch, (long long)samples, epochs, (long long)size);
      exit(1);
    }
    if (samples < size && samples % batch != 0) {
      fprintf(stderr,
              "error: --resume: '%s' stopped after sample %lld of epoch %lld, which is not a whole number of "
              "batches of %ld; resume with the --batch of the run that wrote it (a divisor of %lld)\n",
              path, (long long)samples, (long long)contents.epoch + 1, batch, (long long)samples);
      exit(1);
    }
    epoch = (long)contents.epoch;
    step = samples == size ? (long)bpt_dataset_batch_count(train, batch) : (long)(samples / batch);
    if (epoch == epochs)
      printf("resumed from %s: all %ld epochs were done, %lld optimizer steps taken\n", path, epochs,
             (long long)bpt_optimizer_step_count(optimizer));
    else
      printf("resumed from %s: epoch %ld, sample %lld (step %ld at batch %ld), %lld optimizer steps taken\n", path,
             epoch + 1, (long long)samples, step, batch, (long long)bpt_optimizer_step_count(optimizer));
  }

  int64_t batch_dims[2] = {batch, features};
  bpt_tensor *batch_images = NULL, *batch_labels = NULL;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, batch_dims, &batch_images));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, batch_dims, &batch_labels));
  /* Its own loop rather than bpt_train(): a resumed run starts in the middle of an epoch. */
  bpt_eval_options evaluation = bpt_eval_options_default();
  long batches = (long)bpt_dataset_batch_count(train, batch), done = 0;
  bool stopped = false;
  while (epoch < epochs && !stopped) {
    /* At an epoch's start the file written at the previous one's end already holds this position and order:
     * stopping here saves nothing, since a save after the shuffle below would make a resume shuffle twice. */
    if (step == 0 && stop_after && done == stop_after) {
      printf("stopped after %ld steps at the end of epoch %ld; continue with --resume\n", done, epoch);
      break;
    }
    /* Shuffles compose, so a resumed epoch keeps the order restored from the checkpoint. */
    if (step == 0) EXAMPLE_CHECK(context, bpt_dataset_shuffle(train, seed + (uint64_t)epoch));
    for (; step < batches; step++) {
      if (stop_after && done == stop_after) {
        save(context, graph, path, optimizer, train, epoch, step, batch);
        printf("stopped after %ld steps at epoch %ld, step %ld; continue with --resume\n", done, epoch + 1, step);
        stopped = true;
        break;
      }
      EXAMPLE_CHECK(context, bpt_dataset_batch(train, step, batch, batch_images, batch_labels));
      EXAMPLE_CHECK(context, bpt_graph_set_input(graph, images, batch_images));
      EXAMPLE_CHECK(context, bpt_graph_set_input(graph, labels, batch_labels));
      EXAMPLE_CHECK(context, bpt_graph_forward(graph));
      EXAMPLE_CHECK(context, bpt_graph_backward(graph));
      EXAMPLE_CHECK(context, bpt_optimizer_step(optimizer));
      float batch_loss;
      EXAMPLE_CHECK(context, bpt_graph_loss(graph, &batch_loss));
      example_metrics_step(metrics, epoch + 1, batch_loss, bpt_optimizer_learning_rate(optimizer));
      done++;
      if (save_every && bpt_optimizer_step_count(optimizer) % save_every == 0)
        save(context, graph, path, optimizer, train, epoch, step + 1, batch);
    }
    if (stopped) break;
    step = 0;
    epoch++;
    save(context, graph, path, optimizer, train, epoch, 0, batch);
    bpt_eval_result tested = {.size = sizeof tested};
    EXAMPLE_CHECK(context, bpt_evaluate(graph, test, &evaluation, &tested));
    example_metrics_epoch(metrics, epoch, NAN, NAN, tested.loss, tested.accuracy,
                          bpt_optimizer_learning_rate(optimizer));
    printf("epoch %ld: test accuracy %.2f%%, test loss %.4f (checkpoint %s)\n", epoch, 100.0 * tested.accuracy,
           tested.loss, path);
    fflush(stdout);
  }
  printf("parameter checksum: %016llx after %lld optimizer steps\n",
         (unsigned long long)example_parameter_checksum(context, graph), (long long)bpt_optimizer_step_count(optimizer));

  bpt_tensor_destroy(batch_images);
  bpt_tensor_destroy(batch_labels);
  const int status = example_metrics_close(metrics);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(train);
  bpt_dataset_destroy(test);
  bpt_context_destroy(context);
  return status;
}
