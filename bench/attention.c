/* Fused attention (bpt_scaled_dot_product_attention) against two unfused references, forward + backward per
 * step, fastest of --repeats: "composed", the same attention from the library's own ops (reshape, permute,
 * matmul Q K^T, scale, causal softmax, matmul P V, permute back; the Tq x Tk scores and probabilities are held
 * for backward), and "naive", plain C loops over a materialised score matrix (the textbook algorithm a port
 * without a fused kernel starts from). Batch times length is --tokens; causal self-attention. Times are CPU
 * seconds of the process (see cpu_seconds), so run it with --threads 1 on a busy machine.
 *
 *   attention_bench [--threads 1] [--tokens 2048] [--channels 128] [--heads 4] [--repeats 5]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "bptrain.h"
#include "example_util.h"

/* The process's CPU seconds: on a machine shared with other work, a one-thread run's CPU time is what its own
 * instructions cost (wall time also counts the slices the scheduler gave to others). With --threads above 1 it
 * sums the threads, OpenMP's spinning included, so it is only comparable between equal thread counts. */
static double cpu_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

#define CHECK(context, expression) EXAMPLE_CHECK(context, expression)

typedef struct run {
  bpt_graph *graph;
  bpt_node *inputs[4]; /* q, k, v, target */
} run;

/* Attention from separate ops: (N, T, C) -> (N, H, T, D), scores, softmax, mix, back to (N, T, C). */
static bpt_node *composed(bpt_context *context, bpt_graph *graph, bpt_node *q, bpt_node *k, bpt_node *v, int64_t T,
                          int64_t heads, int64_t D) {
  const int64_t split[3] = {T, heads, D}, axes[4] = {0, 2, 1, 3}, merged[2] = {T, heads * D};
  bpt_node *parts[3] = {q, k, v}, *scale, *scores, *out;
  for (int i = 0; i < 3; i++) {
    CHECK(context, bpt_reshape(graph, NULL, parts[i], 3, split, &parts[i]));
    CHECK(context, bpt_permute(graph, NULL, parts[i], 4, axes, &parts[i]));
  }
  /* The 1 / sqrt(D) pass (its value, 1 here, does not change the time). */
  CHECK(context, bpt_graph_nontrainable_parameter(graph, "scale", 1, (const int64_t[]){1}, BPT_INIT_ONES, &scale));
  CHECK(context, bpt_matmul(graph, NULL, parts[0], parts[1], 0, 1, &scores));
  CHECK(context, bpt_mul(graph, NULL, scores, scale, &scores));
  CHECK(context, bpt_softmax(graph, NULL, scores, 1, &scores));
  CHECK(context, bpt_matmul(graph, NULL, scores, parts[2], 0, 0, &out));
  CHECK(context, bpt_permute(graph, NULL, out, 4, axes, &out));
  CHECK(context, bpt_reshape(graph, NULL, out, 2, merged, &out));
  return out;
}

static run build(bpt_context *context, bool fused, int64_t N, int64_t T, int64_t C, int64_t heads) {
  run r = {0};
  CHECK(context, bpt_graph_create(context, &r.graph));
  const char *names[4] = {"q", "k", "v", "target"};
  for (int i = 0; i < 4; i++)
    CHECK(context, bpt_graph_input_sequence(r.graph, names[i], BPT_DTYPE_F32, T, 1, &C, &r.inputs[i]));
  /* A differentiable stand-in for the linear layers that make q, k and v. */
  bpt_node *gain, *qkv[3], *out, *loss;
  CHECK(context, bpt_graph_parameter(r.graph, "gain", 1, &C, BPT_INIT_ONES, &gain));
  for (int i = 0; i < 3; i++)
    CHECK(context, bpt_mul(r.graph, NULL, r.inputs[i], gain, &qkv[i]));
  if (fused)
    CHECK(context,
          bpt_scaled_dot_product_attention(r.graph, "attention", qkv[0], qkv[1], qkv[2], heads, 1, 0.0f, &out));
  else
    out = composed(context, r.graph, qkv[0], qkv[1], qkv[2], T, heads, C / heads);
  CHECK(context, bpt_mse_loss(r.graph, "loss", out, r.inputs[3], &loss));
  CHECK(context, bpt_graph_compile(r.graph, loss, N));
  for (int i = 0; i < 4; i++) {
    bpt_tensor *x;
    CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){N, T, C}, &x));
    float *data = bpt_tensor_data(x);
    for (int64_t e = 0; e < N * T * C; e++)
      data[e] = (float)sin(0.37 * (double)e + i) * 1.5f;
    CHECK(context, bpt_graph_set_input(r.graph, r.inputs[i], x));
    bpt_tensor_destroy(x);
  }
  return r;
}

/* Seconds per forward + backward, fastest of repeats. */
static double time_run(bpt_context *context, run *r, int repeats) {
  double best = INFINITY;
  for (int i = 0; i <= repeats; i++) {
    const double start = cpu_seconds();
    CHECK(context, bpt_graph_forward(r->graph));
    CHECK(context, bpt_graph_backward(r->graph));
    const double seconds = cpu_seconds() - start;
    if (i > 0 && seconds < best) best = seconds; /* the first run warms the scratch buffers */
  }
  return best;
}

/* The textbook algorithm in plain loops, causal: S = Q K^T / sqrt(D) materialised (T x T per head), softmax,
 * O = P V; backward dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K, dK = dS^T Q, dV = P^T dO. */
static double naive_step(int64_t N, int64_t T, int64_t C, int64_t heads, const float *q, const float *k, const float *v,
                         const float *dout, float *out, float *dq, float *dk, float *dv, float *p, float *dp) {
  const int64_t D = C / heads;
  const float scale = (float)(1.0 / sqrt((double)D));
  const double start = cpu_seconds();
  memset(dq, 0, (size_t)(N * T * C) * sizeof *dq);
  memset(dk, 0, (size_t)(N * T * C) * sizeof *dk);
  memset(dv, 0, (size_t)(N * T * C) * sizeof *dv);
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < heads; h++) {
      const int64_t base = n * T * C + h * D;
      for (int64_t i = 0; i < T; i++) {
        float top = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j <= i; j++) {
          float s = 0.0f;
          for (int64_t d = 0; d < D; d++)
            s += q[base + i * C + d] * k[base + j * C + d];
          p[i * T + j] = s * scale;
          top = fmaxf(top, p[i * T + j]);
        }
        for (int64_t j = 0; j <= i; j++)
          sum += p[i * T + j] = expf(p[i * T + j] - top);
        for (int64_t j = 0; j <= i; j++)
          p[i * T + j] /= sum;
        for (int64_t d = 0; d < D; d++) {
          float o = 0.0f;
          for (int64_t j = 0; j <= i; j++)
            o += p[i * T + j] * v[base + j * C + d];
          out[base + i * C + d] = o;
        }
      }
      for (int64_t i = 0; i < T; i++) {
        float row = 0.0f;
        for (int64_t j = 0; j <= i; j++) {
          float g = 0.0f;
          for (int64_t d = 0; d < D; d++)
            g += dout[base + i * C + d] * v[base + j * C + d];
          dp[i * T + j] = g;
          row += g * p[i * T + j];
        }
        for (int64_t j = 0; j <= i; j++) {
          const float ds = p[i * T + j] * (dp[i * T + j] - row) * scale;
          for (int64_t d = 0; d < D; d++) {
            dq[base + i * C + d] += ds * k[base + j * C + d];
            dk[base + j * C + d] += ds * q[base + i * C + d];
            dv[base + j * C + d] += p[i * T + j] * dout[base + i * C + d];
          }
        }
      }
    }
  return cpu_seconds() - start;
}

int main(int argc, char **argv) {
  const char *valued[] = {"--threads", "--tokens", "--channels", "--heads", "--repeats", NULL};
  example_check_arguments(argc, argv, valued, NULL, "attention_bench");
  const int threads = example_option_int(argc, argv, "--threads", 1),
            repeats = example_option_int(argc, argv, "--repeats", 5);
  const int64_t tokens = example_option_long(argc, argv, "--tokens", 2048),
                C = example_option_long(argc, argv, "--channels", 128),
                heads = example_option_long(argc, argv, "--heads", 4);
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context;
  CHECK(NULL, bpt_context_create(&options, &context));
  printf("causal self-attention, forward + backward (CPU ms), %lld tokens a step, C %lld, %lld heads of %lld, %d "
         "thread%s\n",
         (long long)tokens, (long long)C, (long long)heads, (long long)(C / heads), threads, threads > 1 ? "s" : "");
  printf("%6s %6s %12s %12s %12s %9s %9s\n", "T", "batch", "fused ms", "composed ms", "naive ms", "x composed",
         "x naive");
  const int64_t lengths[] = {128, 512};
  for (int l = 0; l < 2; l++) {
    const int64_t T = lengths[l], N = tokens / T > 0 ? tokens / T : 1;
    run fused = build(context, true, N, T, C, heads), plain = build(context, false, N, T, C, heads);
    const double fused_s = time_run(context, &fused, repeats), composed_s = time_run(context, &plain, repeats);
    bpt_graph_destroy(fused.graph);
    bpt_graph_destroy(plain.graph);
    const size_t values = (size_t)(N * T * C);
    float *buffers = calloc(8 * values + 2 * (size_t)(T * T), sizeof *buffers);
    if (!buffers) return 1;
    for (size_t e = 0; e < 4 * values; e++)
      buffers[e] = (float)sin(0.37 * (double)e) * 1.5f;
    float *b = buffers;
    const double naive_s =
        naive_step(N, T, C, heads, b, b + values, b + 2 * values, b + 3 * values, b + 4 * values, b + 5 * values,
                   b + 6 * values, b + 7 * values, b + 8 * values, b + 8 * values + T * T);
    free(buffers);
    printf("%6lld %6lld %12.2f %12.2f %12.2f %9.2f %9.2f\n", (long long)T, (long long)N, 1e3 * fused_s,
           1e3 * composed_s, 1e3 * naive_s, composed_s / fused_s, naive_s / fused_s);
  }
  bpt_context_destroy(context);
  return 0;
}
