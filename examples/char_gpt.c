/* Trains a byte-level GPT (vocabulary 256) on text: by default every collection of Debian's fortunes package,
 * concatenated in name order, the first 90% for training and the rest for validation. Then it reports the
 * validation loss (mean nats per byte) and, with --sample N, generates N bytes after --prompt.
 *
 *   token + position embeddings - layers x [pre-LN block: causal attention, GELU MLP] - LN - linear head (untied)
 *
 * Recipe (GPT-2's, as nanoGPT trains it): AdamW (0.9, 0.95), weight decay 0.1 on matrices only, linear warm-up
 * then cosine decay to 10% of the peak rate, gradient clipping at global norm 1.0, layer-norm epsilon 1e-5.
 *
 *   char_gpt [--data FILE|DIR] [--layers 4] [--dim 128] [--heads 4] [--context 128] [--batch 32] [--steps 2000]
 *            [--lr 1e-3] [--warmup 100] [--threads N] [--backend cpu] [--dtype f32|bf16|f16] [--seed 42] [--recompute]
 *            [--store-16bit|--store-f32]
 *            [--val-batches 20] [--sample N] [--prompt TEXT] [--temperature 0] [--top-k 0] [--save FILE]
 *            [--eval FILE] [--checkpoint FILE [--resume] [--stop-after N] [--save-every N]] [--onnx FILE]
 *            [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json]
 */
#define _POSIX_C_SOURCE 200809L /* fileno, isatty, strdup, opendir */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "example_output.h"
#include "example_util.h"
#include "text_corpus.h"

static const char usage[] =
    "usage: char_gpt [--data FILE|DIR] [--layers N] [--dim N] [--heads N] [--context N] [--batch N] [--steps N]\n"
    "                [--lr X] [--warmup N] [--threads N] [--backend cpu|cuda|fpga-sim] [--dtype f32|bf16|f16]\n"
    "                [--recompute] [--no-kv-cache] [--store-16bit|--store-f32]\n"
    "                [--seed N] [--val-batches N] [--sample N] [--prompt TEXT] [--temperature X] [--top-k N]\n"
    "                [--save FILE] [--eval FILE] [--checkpoint FILE [--resume] [--stop-after N] [--save-every N]]\n"
    "                [--onnx FILE]\n"
    "  --data         a text file, or a directory whose extensionless files are concatenated in name order\n"
    "                 (default /usr/share/games/fortunes); 90% trains, the last 10% validates\n"
    "  --layers --dim --heads --context   the model: 4 blocks of width 128, 4 heads, 128 bytes of context\n"
    "  --batch --steps --lr --warmup      32 windows a step, 2000 steps, peak rate 1e-3 after 100 warm-up steps\n"
    "  --dtype        f32 (default), or the bf16 / f16 precision policy\n"
    "  --recompute    recompute each block's activations in backward instead of keeping them (less memory)\n"
    "  --store-16bit  with --dtype bf16: store activations and their gradients as bf16 wherever the plan can\n"
    "                 (the default on the CPU); --store-f32: f32 buffers rounded in place instead\n"
    "  --val-batches  validation batches (of --batch windows, evenly spaced) for the final val loss (default 20)\n"
    "  --sample N     generate N bytes after --prompt (default \"\\n\"): greedy, or drawn at --temperature X,\n"
    "                 from the --top-k K likeliest bytes when K > 0; a key/value cache makes each byte one\n"
    "                 single-token pass (--no-kv-cache: a whole window per byte, for comparison)\n"
    "  --save FILE    write the trained model as a checkpoint;  --eval FILE: load one, skip training\n"
    "  --checkpoint FILE  save the whole training state (weights, optimiser, step) every --save-every steps\n"
    "                 (default 100) and at the end; --resume continues from it; --stop-after N stops after N\n"
    "                 steps of this run, as if killed\n"
    "  --onnx FILE    export the model (inputs tokens and positions, output logits) to FILE as ONNX\n"
    "  --dump-parameters FILE  write the trained parameters as raw f32 (for tests comparing runs)\n"
    "  Data parallel: mpirun -np R char_gpt ... splits each --batch over R ranks (--batch a multiple of R);\n"
    "  the ranks' gradients are averaged, so R ranks train as one rank on the whole batch\n" EXAMPLE_USAGE;

enum { VOCABULARY = 256 };

typedef struct gpt_config {
  long layers, dim, heads, context, batch;
  bool recompute; /* each block a recompute segment */
} gpt_config;

typedef struct gpt_model {
  bpt_node *tokens, *positions, *targets, *logits, *loss;
} gpt_model;

/* The model, the same for training, validation and generation, so that parameters are declared in one order and
 * checkpoints of one load into the others. Positions are an input rather than a constant so that a window can
 * start anywhere. decode: the generation form, key/value-cached attention, whose passes feed any number of
 * tokens up to the context (a whole prompt at once, then one token a pass): a run may feed a shorter sequence
 * than the one declared. */
static void build_gpt(bpt_context *context, bpt_graph *graph, const gpt_config *c, bool with_loss, bool decode,
                      gpt_model *m) {
  bpt_node *x, *position;
  const int64_t length = c->context;
  EXAMPLE_CHECK(context, bpt_graph_input_sequence(graph, "tokens", BPT_DTYPE_I32, length, 0, NULL, &m->tokens));
  EXAMPLE_CHECK(context, bpt_graph_input_sequence(graph, "positions", BPT_DTYPE_I32, length, 0, NULL, &m->positions));
  EXAMPLE_CHECK(context, bpt_layer_embedding(graph, "tok", m->tokens, VOCABULARY, c->dim, &x));
  EXAMPLE_CHECK(context, bpt_layer_embedding(graph, "pos", m->positions, c->context, c->dim, &position));
  EXAMPLE_CHECK(context, bpt_add(graph, "embed", x, position, &x));
  bpt_transformer_block_options block = bpt_transformer_block_options_default();
  block.heads = c->heads;
  block.recompute = c->recompute && !decode && with_loss;
  for (long layer = 0; layer < c->layers; layer++) {
    char name[32];
    snprintf(name, sizeof name, "block%ld", layer);
    if (decode)
      EXAMPLE_CHECK(context,
                    bpt_layer_transformer_block_cached(graph, name, x, m->positions, c->context, &block, &x));
    else
      EXAMPLE_CHECK(context, bpt_layer_transformer_block(graph, name, x, &block, &x));
  }
  EXAMPLE_CHECK(context, bpt_layer_layer_norm(graph, "ln_f", x, 1e-5f, &x));
  const int64_t head_dims[2] = {VOCABULARY, c->dim};
  bpt_node *head;
  EXAMPLE_CHECK(context, bpt_graph_parameter(graph, "head.weight", 2, head_dims, BPT_INIT_NORMAL_SMALL, &head));
  EXAMPLE_CHECK(context, bpt_linear(graph, "head", x, head, NULL, &m->logits));
  m->targets = m->loss = NULL;
  if (!with_loss) return;
  EXAMPLE_CHECK(context, bpt_graph_input_sequence(graph, "targets", BPT_DTYPE_I32, c->context, 0, NULL, &m->targets));
  EXAMPLE_CHECK(context, bpt_softmax_cross_entropy(graph, "loss", m->logits, m->targets, &m->loss));
}

/* splitmix64: windows are drawn from (seed, step, row) alone, so a resumed run reads the data the uninterrupted
 * one would have, and the data position is just the step count. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

typedef struct batch_tensors {
  bpt_tensor *tokens, *positions, *targets;
} batch_tensors;

/* Row r of the batch: bytes [start, start + T) predict [start + 1, start + T + 1). */
static void fill_row(batch_tensors *b, long r, long T, const unsigned char *text, int64_t start) {
  int32_t *tokens = (int32_t *)bpt_tensor_data(b->tokens) + r * T;
  int32_t *positions = (int32_t *)bpt_tensor_data(b->positions) + r * T;
  int32_t *targets = (int32_t *)bpt_tensor_data(b->targets) + r * T;
  for (long t = 0; t < T; t++) {
    tokens[t] = text[start + t];
    positions[t] = (int32_t)t;
    targets[t] = text[start + t + 1];
  }
}

static void set_batch(bpt_context *context, bpt_graph *graph, const gpt_model *m, batch_tensors *b) {
  EXAMPLE_CHECK(context, bpt_graph_set_input(graph, m->tokens, b->tokens));
  EXAMPLE_CHECK(context, bpt_graph_set_input(graph, m->positions, b->positions));
  EXAMPLE_CHECK(context, bpt_graph_set_input(graph, m->targets, b->targets));
}

/* Mean loss over `batches` batches of windows evenly spaced over text, in evaluation mode (no dropout). */
static double validation_loss(bpt_context *context, bpt_graph *graph, const gpt_model *m, batch_tensors *b,
                              const gpt_config *c, const unsigned char *text, int64_t size, long batches) {
  const int64_t windows = (int64_t)batches * c->batch, span = size - c->context - 1;
  double total = 0.0;
  EXAMPLE_CHECK(context, bpt_graph_set_training(graph, 0));
  for (long i = 0; i < batches; i++) {
    for (long r = 0; r < c->batch; r++)
      fill_row(b, r, c->context, text, windows > 1 ? (i * c->batch + r) * span / (windows - 1) : 0);
    set_batch(context, graph, m, b);
    EXAMPLE_CHECK(context, bpt_graph_forward(graph));
    float loss;
    EXAMPLE_CHECK(context, bpt_graph_loss(graph, &loss));
    total += loss;
  }
  EXAMPLE_CHECK(context, bpt_graph_set_training(graph, 1));
  return total / (double)batches;
}

/* One progress line: redrawn in place on a terminal, printed every `every` steps otherwise (logs, CI). */
static void progress(long step, long steps, long every, double tokens_per_second, double loss, double rate,
                     bool final) {
  const bool interactive = isatty(fileno(stderr));
  if (!final && !interactive && step % every != 0) return;
  const int width = 30, filled = (int)((double)width * (double)step / (double)steps);
  char bar[64];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[width] = 0;
  fprintf(stderr, "%sstep %ld/%ld [%s] %.0f tokens/s  loss %.4f  lr %.2e%s", interactive ? "\r" : "", step, steps,
          bar, tokens_per_second, loss, rate, interactive && !final ? "" : "\n");
  fflush(stderr);
}

/* Draws the next byte from one row of logits: the argmax at temperature 0, else a sample of softmax(logits / T)
 * restricted to the top_k likeliest bytes (all when top_k is 0). */
static int draw_byte(const float *logits, double temperature, int top_k, uint64_t *rng) {
  int best = 0;
  for (int i = 1; i < VOCABULARY; i++)
    if (logits[i] > logits[best]) best = i;
  if (temperature <= 0.0) return best;
  double threshold = -INFINITY;
  if (top_k > 0 && top_k < VOCABULARY) {
    float sorted[VOCABULARY];
    memcpy(sorted, logits, sizeof sorted);
    for (int k = 0; k < top_k; k++) /* partial selection: the k-th largest ends at sorted[k] */
      for (int i = k + 1; i < VOCABULARY; i++)
        if (sorted[i] > sorted[k]) {
          float t = sorted[k];
          sorted[k] = sorted[i];
          sorted[i] = t;
        }
    threshold = sorted[top_k - 1];
  }
  double weights[VOCABULARY], total = 0.0;
  for (int i = 0; i < VOCABULARY; i++) {
    weights[i] = logits[i] >= threshold ? exp((logits[i] - logits[best]) / temperature) : 0.0;
    total += weights[i];
  }
  *rng = mix(*rng);
  double u = (double)(*rng >> 11) * 0x1.0p-53 * total;
  for (int i = 0; i < VOCABULARY; i++) {
    u -= weights[i];
    if (u < 0.0 && weights[i] > 0.0) return i;
  }
  return best;
}

static void print_byte(int byte) {
  if (byte == '\n' || byte == '\t' || (byte >= 32 && byte < 127))
    putchar(byte);
  else
    printf("\\x%02x", byte);
}

/* A batch-1 generation graph (decode: the key/value-cached form; otherwise the training form, a whole window per
 * byte) holding the trained weights, and its logits. */
typedef struct generator {
  bpt_graph *graph;
  gpt_model m;
  bpt_tensor *logits;
  long length; /* the most positions a pass feeds */
  /* The ids and positions of the last pass, fed_length tokens each, kept for the next pass of that length (every
   * byte after the prompt is a one-token pass with the cache). */
  bpt_tensor *ids, *positions;
  long fed_length;
} generator;

static void generator_open(generator *g, bpt_context *context, bpt_graph *trained, const gpt_config *c, bool decode) {
  *g = (generator){.length = c->context};
  EXAMPLE_CHECK(context, bpt_graph_create(context, &g->graph));
  build_gpt(context, g->graph, c, false, decode, &g->m);
  EXAMPLE_CHECK(context, bpt_graph_compile(g->graph, NULL, 1));
  int64_t parameters;
  float *weights = example_read_parameters(context, trained, &parameters);
  EXAMPLE_CHECK(context, bpt_graph_write_parameters(g->graph, weights, parameters));
  free(weights);
  const int64_t logit_dims[3] = {1, g->length, VOCABULARY};
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, logit_dims, &g->logits));
}

static void generator_close(generator *g) {
  bpt_tensor_destroy(g->ids);
  bpt_tensor_destroy(g->positions);
  bpt_tensor_destroy(g->logits);
  bpt_graph_destroy(g->graph);
}

/* One pass of count (<= g->length) tokens, a sequence that long: the logits row for the next byte after
 * tokens[0 .. count) at positions first .. first + count - 1. */
static const float *generator_run(bpt_context *context, generator *g, const unsigned char *tokens, long count,
                                  long first) {
  if (count != g->fed_length) {
    const int64_t dims[2] = {1, count};
    bpt_tensor_destroy(g->ids);
    bpt_tensor_destroy(g->positions);
    EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &g->ids));
    EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &g->positions));
    g->fed_length = count;
  }
  int32_t *id = bpt_tensor_data(g->ids), *position = bpt_tensor_data(g->positions);
  for (long t = 0; t < count; t++) {
    id[t] = tokens[t];
    position[t] = (int32_t)(first + t);
  }
  EXAMPLE_CHECK(context, bpt_graph_set_input(g->graph, g->m.tokens, g->ids));
  EXAMPLE_CHECK(context, bpt_graph_set_input(g->graph, g->m.positions, g->positions));
  EXAMPLE_CHECK(context, bpt_graph_forward(g->graph));
  EXAMPLE_CHECK(context, bpt_graph_read(g->graph, g->m.logits, g->logits));
  return (const float *)bpt_tensor_data(g->logits) + (count - 1) * VOCABULARY;
}

/* Generates count bytes after prompt. With the cache the prompt is one pass and each byte after it one
 * single-token pass; once the context is full, the last half of it is fed again from position 0 in one pass
 * (learned positions stop at the context) and generation goes on. Without it, each byte runs the last (up to
 * `context`) bytes as a window. */
static void generate(bpt_context *context, bpt_graph *trained, const gpt_config *c, const char *prompt, long count,
                     double temperature, int top_k, uint64_t seed, bool cached) {
  generator g;
  generator_open(&g, context, trained, c, cached);
  const size_t prompt_length = strlen(prompt);
  unsigned char *text = malloc(prompt_length + (size_t)count + 2);
  if (!text) {
    fprintf(stderr, "error: out of memory\n");
    exit(1);
  }
  memcpy(text, prompt, prompt_length);
  long length = (long)prompt_length;
  if (length == 0) text[length++] = '\n';
  if (length > c->context) { /* only the last context bytes of a long prompt can be seen */
    memmove(text, text + length - c->context, (size_t)c->context);
    length = c->context;
  }
  printf("sample (%ld bytes, %s, %s):\n", count, temperature > 0.0 ? "sampled" : "greedy",
         cached ? "key/value cache" : "a window per byte");
  fwrite(text, 1, (size_t)length, stdout);
  uint64_t rng = seed ^ 0x5A17ULL;
  const double start = example_seconds();
  const float *row = NULL;
  long position = 0; /* cached: tokens in the cache */
  if (cached) {
    row = generator_run(context, &g, text, length, 0);
    position = length;
  }
  for (long i = 0; i < count; i++) {
    if (!cached) {
      const long window = length < c->context ? length : c->context;
      row = generator_run(context, &g, text + length - window, window, 0);
    } else if (i > 0) {
      if (position == c->context) { /* full: start afresh from the last half */
        const long keep = c->context / 2;
        if (keep > 1) generator_run(context, &g, text + length - keep, keep - 1, 0);
        position = keep - 1;
      }
      row = generator_run(context, &g, text + length - 1, 1, position++);
    }
    const int byte = draw_byte(row, temperature, top_k, &rng);
    text[length++] = (unsigned char)byte;
    print_byte(byte);
  }
  const double seconds = example_seconds() - start;
  printf("\nsampling: %ld bytes in %.2f s (%.1f bytes/s, %s)\n", count, seconds,
         seconds > 0 ? (double)count / seconds : 0.0, cached ? "key/value cache" : "a window per byte");
  free(text);
  generator_close(&g);
}

static void save_checkpoint(bpt_context *context, bpt_graph *graph, bpt_optimizer *optimizer, const char *path,
                            long step) {
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = optimizer;
  contents.step = step;
  EXAMPLE_CHECK(context, bpt_checkpoint_save(graph, path, &contents));
}

/* Open MPI's and MPICH's launchers say so in the environment; a plain start needs no MPI at all. */
static bool launched_by_mpi(void) {
  const char *size = getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = getenv("PMI_SIZE");
  return size && atoi(size) > 1;
}

static void dump_parameters(bpt_context *context, bpt_graph *graph, const char *path) {
  int64_t count;
  float *values = example_read_parameters(context, graph, &count);
  FILE *file = fopen(path, "wb");
  if (!file) {
    fprintf(stderr, "error: --dump-parameters '%s': cannot write it\n", path);
    exit(1);
  }
  const bool written = fwrite(values, sizeof *values, (size_t)count, file) == (size_t)count;
  if (fclose(file) != 0 || !written) {
    fprintf(stderr, "error: --dump-parameters '%s': short write\n", path);
    exit(1);
  }
  free(values);
}

static bpt_dtype parse_dtype(const char *name) {
  if (!name || strcmp(name, "f32") == 0) return BPT_DTYPE_F32;
  if (strcmp(name, "bf16") == 0) return BPT_DTYPE_BF16;
  if (strcmp(name, "f16") == 0) return BPT_DTYPE_F16;
  fprintf(stderr, "error: --dtype '%s': expected f32, bf16 or f16\n", name);
  exit(2);
}

int main(int argc, char **argv) {
  static const char *const valued[] = {
      "--data",    "--layers",      "--dim",   "--heads",  "--context",     "--batch",      "--steps",
      "--lr",      "--warmup",      "--threads", "--backend", "--dtype",    "--seed",       "--val-batches",
      "--sample",  "--prompt",      "--temperature", "--top-k", "--save",   "--eval",       "--checkpoint",
      "--stop-after", "--save-every", "--onnx", "--dump-parameters", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--resume", "--no-kv-cache", "--recompute", "--store-16bit", "--store-f32", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  const gpt_config c = {.layers = example_option_long(argc, argv, "--layers", 4),
                        .dim = example_option_long(argc, argv, "--dim", 128),
                        .heads = example_option_long(argc, argv, "--heads", 4),
                        .context = example_option_long(argc, argv, "--context", 128),
                        .batch = example_option_long(argc, argv, "--batch", 32),
                        .recompute = example_flag(argc, argv, "--recompute")};
  const long steps = example_option_long(argc, argv, "--steps", 2000);
  const long warmup = example_option_long(argc, argv, "--warmup", 100);
  const long val_batches = example_option_long(argc, argv, "--val-batches", 20);
  const long sample = example_option_long(argc, argv, "--sample", 0);
  const long stop_after = example_option_long(argc, argv, "--stop-after", 0);
  const long save_every = example_option_long(argc, argv, "--save-every", 100);
  const double learning_rate = example_option_double(argc, argv, "--lr", 1e-3);
  const double temperature = example_option_double(argc, argv, "--temperature", 0.0);
  const int top_k = example_option_int(argc, argv, "--top-k", 0);
  const bpt_dtype dtype = parse_dtype(example_option(argc, argv, "--dtype"));
  const char *checkpoint = example_option(argc, argv, "--checkpoint");
  const bool resume = example_flag(argc, argv, "--resume");
  const int store_16bit = example_store_16bit(argc, argv);
  if (store_16bit >= 0 && dtype != BPT_DTYPE_BF16) {
    fprintf(stderr, "error: --store-16bit and --store-f32 work with --dtype bf16\n%s", usage);
    return 2;
  }
  if (c.layers < 1 || c.dim < 1 || c.heads < 1 || c.context < 2 || c.batch < 1 || steps < 1 || warmup < 0 ||
      val_batches < 1 || sample < 0 || stop_after < 0 || save_every < 0 || top_k < 0 || !(learning_rate > 0.0) ||
      !(temperature >= 0.0) || c.dim % c.heads != 0 || c.context > 1 << 20 || c.dim > 1 << 16 || c.layers > 1024) {
    fprintf(stderr, "error: --layers, --dim, --heads, --batch, --steps, --val-batches and --lr must be positive, "
                    "--context at least 2, --dim a multiple of --heads, the others not negative\n");
    return 2;
  }
  if (resume && !checkpoint) {
    fprintf(stderr, "error: --resume needs --checkpoint FILE\n");
    return 2;
  }
  if (example_option(argc, argv, "--eval") && (example_option(argc, argv, "--save") || checkpoint)) {
    fprintf(stderr, "error: --save and --eval exclude each other (as do --checkpoint and --eval): --eval trains "
                    "nothing\n");
    return 2;
  }
  example_check_output_file("--dump-parameters", example_option(argc, argv, "--dump-parameters"));
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/games/fortunes";

  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (example_option(argc, argv, "--backend")) context_options.backend = example_option(argc, argv, "--backend");
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &context));
  /* Under mpirun the ranks split each batch; alone, there is no communicator and no MPI start-up. */
  bpt_comm *comm = NULL;
  int rank = 0, ranks = 1;
  if (launched_by_mpi()) {
    bpt_comm_options comm_options = bpt_comm_options_default();
    EXAMPLE_CHECK(context, bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &comm_options, &comm));
    rank = bpt_comm_rank(comm);
    ranks = bpt_comm_size(comm);
    if (c.batch % ranks != 0) {
      if (rank == 0) fprintf(stderr, "error: --batch %ld must be a multiple of the %d ranks\n", c.batch, ranks);
      bpt_comm_destroy(comm);
      bpt_context_destroy(context);
      return 2;
    }
  }
  const long share = c.batch / ranks;
  example_metrics *metrics = rank == 0 ? example_metrics_open(argc, argv, context, "char_gpt") : NULL;

  /* Both parts must hold at least one window plus its target byte. */
  text_corpus corpus = text_corpus_load(data, 10 * (c.context + 2));
  const int64_t train_size = corpus.size * 9 / 10, val_size = corpus.size - train_size;
  const unsigned char *train_text = corpus.bytes, *val_text = corpus.bytes + train_size;
  if (rank == 0)
    example_banner(context, "byte-level GPT on %lld bytes of text from %d files in %s (%lld train, %lld validation)",
                   (long long)corpus.size, corpus.files, data, (long long)train_size, (long long)val_size);
  if (ranks > 1 && rank == 0)
    printf("data parallel: %d ranks over %s, %ld windows each per step\n", ranks, bpt_comm_engine(comm), share);

  bpt_graph *graph = NULL;
  gpt_model m;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  build_gpt(context, graph, &c, true, false, &m);
  if (dtype != BPT_DTYPE_F32) {
    bpt_precision_options precision = bpt_precision_options_default();
    precision.compute_dtype = dtype;
    precision.store_activations_16bit = store_16bit;
    EXAMPLE_CHECK(context, bpt_graph_set_precision(graph, &precision));
  }
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, m.loss, c.batch));
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  EXAMPLE_CHECK(context, bpt_graph_memory(graph, &memory));
  const double tokens = (double)c.batch * (double)c.context;
  if (rank == 0) {
  printf("model: %ld layers, width %ld, %ld heads, context %ld: %lld parameters\n", c.layers, c.dim, c.heads,
         c.context, (long long)bpt_graph_parameter_count(graph));
  printf("activation memory: %.0f bytes per token held for backward (%s), %.0f transient (%s values)\n",
         (double)memory.activation_bytes_held / tokens, c.recompute ? "blocks recomputed" : "no recomputation",
         (double)memory.transient_bytes / tokens,
         dtype == BPT_DTYPE_F32 ? "f32" : dtype == BPT_DTYPE_BF16 ? "bf16" : "f16");
  printf("activation memory: %.0f bytes per token in all (%.0f with every activation stored in f32: %.0f%%)\n",
         (double)memory.activation_bytes / tokens, (double)memory.activation_bytes_f32 / tokens,
         100.0 * (double)memory.activation_bytes / (double)memory.activation_bytes_f32);
  fflush(stdout);
  }

  const int64_t dims[2] = {c.batch, c.context};
  batch_tensors b = {NULL, NULL, NULL}, part = {NULL, NULL, NULL};
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &b.tokens));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &b.positions));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &b.targets));
  const int64_t part_dims[2] = {share, c.context};
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, part_dims, &part.tokens));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, part_dims, &part.positions));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, part_dims, &part.targets));

  const char *eval_path = example_option(argc, argv, "--eval");
  int status = 0;
  if (eval_path) {
    EXAMPLE_CHECK(context, bpt_checkpoint_load(graph, eval_path, NULL));
  } else {
    bpt_optimizer_options o = bpt_optimizer_options_default();
    o.kind = BPT_OPTIMIZER_ADAMW;
    o.learning_rate = (float)learning_rate;
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    o.weight_decay = 0.1f;
    bpt_optimizer *optimizer = NULL;
    EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &o, &optimizer));
    EXAMPLE_CHECK(context, bpt_optimizer_decay_only_matrices(optimizer));
    bpt_schedule_options schedule = bpt_schedule_options_default();
    schedule.kind = BPT_SCHEDULE_COSINE;
    schedule.base_learning_rate = (float)learning_rate;
    schedule.warmup_steps = warmup;
    schedule.warmup_start_factor = warmup > 0 ? 1.0f / (float)warmup : 1.0f;
    schedule.total_steps = steps > warmup ? steps - warmup : 1;
    schedule.minimum_learning_rate = (float)(0.1 * learning_rate);
    EXAMPLE_CHECK(context, bpt_optimizer_set_schedule(optimizer, &schedule));
    bpt_data_parallel *parallel = NULL;
    if (comm) {
      bpt_data_parallel_options parallel_options = bpt_data_parallel_options_default();
      EXAMPLE_CHECK(context, bpt_data_parallel_create(graph, comm, &parallel_options, &parallel));
    }
    long step = 0;
    if (resume) {
      bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
      contents.optimizer = optimizer;
      EXAMPLE_CHECK(context, bpt_checkpoint_load(graph, checkpoint, &contents));
      step = (long)contents.step;
      printf("resumed from %s at step %ld\n", checkpoint, step);
    }
    const long every = steps / 20 > 0 ? steps / 20 : 1, first = step;
    const uint64_t seed = context_options.seed;
    double running = 0.0, start = example_seconds(), warm = 0.0;
    float loss = 0.0f;
    for (; step < steps; step++) {
      if (step == first + 3) warm = example_seconds(); /* the first steps allocate and warm caches */
      /* Rank k trains rows [k share, (k + 1) share) of the global batch's windows. */
      for (long r = 0; r < share; r++) {
        const uint64_t row = (uint64_t)step * (uint64_t)c.batch + (uint64_t)(rank * share + r);
        fill_row(&part, r, c.context, train_text,
                 (int64_t)(mix(seed ^ mix(row)) % (uint64_t)(train_size - c.context - 1)));
      }
      set_batch(context, graph, &m, &part);
      EXAMPLE_CHECK(context, bpt_graph_forward(graph));
      EXAMPLE_CHECK(context, bpt_graph_backward(graph));
      /* Clipping reads the averaged gradients: wait for the all-reduces the backward started. */
      if (parallel) EXAMPLE_CHECK(context, bpt_data_parallel_wait(parallel));
      EXAMPLE_CHECK(context, bpt_graph_clip_gradient_norm(graph, 1.0f, NULL));
      EXAMPLE_CHECK(context, bpt_optimizer_step(optimizer));
      const float rate = bpt_optimizer_learning_rate(optimizer); /* the schedule's rate this step used */
      EXAMPLE_CHECK(context, bpt_graph_loss(graph, &loss));
      running = step == first ? loss : 0.95 * running + 0.05 * loss;
      example_metrics_step(metrics, 1, loss, rate);
      const double seconds = example_seconds() - start;
      if (rank == 0)
        progress(step + 1, steps, every, seconds > 0 ? (double)(step + 1 - first) * tokens / seconds : 0.0, running,
               rate, step + 1 == steps);
      if (checkpoint && rank == 0 && save_every > 0 && (step + 1) % save_every == 0)
        save_checkpoint(context, graph, optimizer, checkpoint, step + 1);
      if (stop_after > 0 && step + 1 - first == stop_after && step + 1 < steps) {
        step++;
        break;
      }
    }
    const double seconds = example_seconds() - start;
    if (checkpoint && rank == 0) save_checkpoint(context, graph, optimizer, checkpoint, step);
    bpt_data_parallel_destroy(parallel);
    if (rank == 0) {
    printf("trained %ld steps in %.1f s (%.0f tokens/s", step - first, seconds,
           seconds > 0 ? (double)(step - first) * tokens / seconds : 0.0);
    if (warm > 0.0 && example_seconds() > warm)
      printf("; %.0f after the first 3 steps", (double)(step - first - 3) * tokens / (start + seconds - warm));
    printf("), last loss %.4f\n", loss);
    }
    if (step < steps) {
      printf("stopped at step %ld of %ld (--stop-after); continue with --resume\n", step, steps);
      printf("parameter checksum %016llx\n", (unsigned long long)example_parameter_checksum(context, graph));
      bpt_optimizer_destroy(optimizer);
      goto done;
    }
    const char *save_path = example_option(argc, argv, "--save");
    if (save_path && rank == 0) EXAMPLE_CHECK(context, bpt_checkpoint_save(graph, save_path, NULL));
    bpt_optimizer_destroy(optimizer);
  }
  if (rank == 0) {
    const double start = example_seconds();
    const double val = validation_loss(context, graph, &m, &b, &c, val_text, val_size, val_batches);
    printf("val loss %.4f (mean nats per byte over %ld batches of %ld windows, %.1f s)\n", val, val_batches, c.batch,
           example_seconds() - start);
    example_metrics_epoch(metrics, 1, NAN, NAN, val, NAN, NAN);
    printf("parameter checksum %016llx\n", (unsigned long long)example_parameter_checksum(context, graph));
    fflush(stdout);
  }
  const char *dump = example_option(argc, argv, "--dump-parameters");
  if (dump && rank == 0) dump_parameters(context, graph, dump);
  const char *onnx = example_option(argc, argv, "--onnx");
  if (onnx && rank == 0) {
    bpt_onnx_export_options options = bpt_onnx_export_options_default();
    EXAMPLE_CHECK(context, bpt_graph_export_onnx(graph, onnx, &options));
    printf("wrote %s\n", onnx);
  }
  if (sample > 0 && rank == 0) {
    const char *prompt = example_option(argc, argv, "--prompt");
    generate(context, graph, &c, prompt ? prompt : "", sample, temperature, top_k, context_options.seed,
             !example_flag(argc, argv, "--no-kv-cache"));
  }
done:
  status = example_metrics_close(metrics);
  bpt_tensor_destroy(b.tokens);
  bpt_tensor_destroy(b.positions);
  bpt_tensor_destroy(b.targets);
  bpt_tensor_destroy(part.tokens);
  bpt_tensor_destroy(part.positions);
  bpt_tensor_destroy(part.targets);
  bpt_graph_destroy(graph);
  bpt_comm_destroy(comm);
  free(corpus.bytes);
  bpt_context_destroy(context);
  return status;
}
