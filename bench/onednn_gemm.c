/* Issue 26.1's candidate measured before choosing: oneDNN's matmul (Debian's libdnnl 2.6, OpenMP-threaded like
 * this library) beside the CPU backend's own products, on the shapes the bf16 policy runs: the MLP's
 * (784-512-256-10 at --batch), char_gpt's default model (32 x 128 tokens, dim 128, MLP 512, vocabulary 256)
 * and a GPT-2-small layer (4 x 64 tokens, dim 768). Five columns, each the fastest of --rounds alternating
 * rounds of --repeats calls in one process: OpenBLAS f32 (the backend's f32 gemm), the bf16 policy as it runs
 * today (f32 buffers holding bf16 values, the vdpbf16ps kernel packing them), the same kernel on bf16
 * operands (what real bf16 storage hands it), and oneDNN's f32 and bf16 (bf16 operands, f32 result) matmuls,
 * whose primitives are created once outside the timing, as a library that adopted it would cache them.
 *
 * oneDNN is opened at run time (dlopen), so the bench builds without it and says so when it is missing:
 *   apt-get install -y libdnnl-dev          # Debian 12: oneDNN 2.6 (the headers; the .so is libdnnl2)
 *   onednn_gemm_bench [--batch 128] [--threads 2] [--rounds 5] [--repeats 20]
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "example_util.h"

#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define HAVE_DNNL_HEADERS 1
#endif
#endif

typedef struct product {
  const char *name;
  int transpose_a, transpose_b;
  int64_t m, n, k;
} product;

/* A bf16 value (as the policy stores operands), from a small deterministic pattern. */
static float bf16_valued(long i, int modulus, float step) {
  float value = (float)(i % modulus) * step - step * (float)(modulus / 2);
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits &= 0xffff0000u;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static uint16_t bf16_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (uint16_t)(bits >> 16); /* exact: the values are bf16 already */
}

/* One way of running a product, timed as a unit. */
typedef struct runner {
  bool (*run)(void *state);
  void *state;
} runner;

static double time_runner(const runner *r, long repeats) {
  const double start = example_seconds();
  for (long i = 0; i < repeats; i++)
    if (!r->run(r->state)) return NAN;
  return (example_seconds() - start) / (double)repeats;
}

typedef struct backend_call {
  bpt_backend *backend;
  bpt_gemm_args args;
} backend_call;

static bool run_backend(void *state) {
  backend_call *call = state;
  if (call->backend->vtable->gemm(call->backend, &call->args) == BPT_OK) return true;
  fprintf(stderr, "gemm failed: %s\n", call->backend->error_message);
  return false;
}

#ifdef HAVE_DNNL_HEADERS
/* The entry points used, looked up in libdnnl.so.2 (the oneDNN 2.x C API). */
typedef struct dnnl_api {
  __typeof__(dnnl_engine_create) *engine_create;
  __typeof__(dnnl_stream_create) *stream_create;
  __typeof__(dnnl_memory_desc_init_by_strides) *memory_desc_init_by_strides;
  __typeof__(dnnl_matmul_desc_init) *matmul_desc_init;
  __typeof__(dnnl_primitive_desc_create) *primitive_desc_create;
  __typeof__(dnnl_primitive_desc_query) *primitive_desc_query;
  __typeof__(dnnl_primitive_desc_destroy) *primitive_desc_destroy;
  __typeof__(dnnl_primitive_create) *primitive_create;
  __typeof__(dnnl_primitive_destroy) *primitive_destroy;
  __typeof__(dnnl_memory_create) *memory_create;
  __typeof__(dnnl_memory_destroy) *memory_destroy;
  __typeof__(dnnl_primitive_execute) *primitive_execute;
  __typeof__(dnnl_stream_wait) *stream_wait;
  __typeof__(dnnl_version) *version;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
} dnnl_api;

static bool dnnl_open(dnnl_api *api, const char **why) {
  void *library = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    *why = "libdnnl.so.2 not found (Debian: apt-get install -y libdnnl-dev)";
    return false;
  }
#define LOOK_UP(field, symbol)                                                                                       \
  if (!(api->field = (__typeof__(api->field))dlsym(library, #symbol))) {                                             \
    *why = "libdnnl.so.2 lacks " #symbol " (not the oneDNN 2.x C API)";                                               \
    return false;                                                                                                    \
  }
  LOOK_UP(engine_create, dnnl_engine_create)
  LOOK_UP(stream_create, dnnl_stream_create)
  LOOK_UP(memory_desc_init_by_strides, dnnl_memory_desc_init_by_strides)
  LOOK_UP(matmul_desc_init, dnnl_matmul_desc_init)
  LOOK_UP(primitive_desc_create, dnnl_primitive_desc_create)
  LOOK_UP(primitive_desc_query, dnnl_primitive_desc_query)
  LOOK_UP(primitive_desc_destroy, dnnl_primitive_desc_destroy)
  LOOK_UP(primitive_create, dnnl_primitive_create)
  LOOK_UP(primitive_destroy, dnnl_primitive_destroy)
  LOOK_UP(memory_create, dnnl_memory_create)
  LOOK_UP(memory_destroy, dnnl_memory_destroy)
  LOOK_UP(primitive_execute, dnnl_primitive_execute)
  LOOK_UP(stream_wait, dnnl_stream_wait)
  LOOK_UP(version, dnnl_version)
#undef LOOK_UP
  if (api->engine_create(&api->engine, dnnl_cpu, 0) != dnnl_success ||
      api->stream_create(&api->stream, api->engine, dnnl_stream_default_flags) != dnnl_success) {
    *why = "oneDNN: no CPU engine";
    return false;
  }
  return true;
}

/* C (m x n, f32) = op(A) op(B), A and B as laid out for the backend's gemm, in dtype (f32 or bf16). */
typedef struct dnnl_call {
  dnnl_api *api;
  dnnl_primitive_t primitive;
  dnnl_memory_t a, b, c;
  char impl[64];
} dnnl_call;

static bool dnnl_call_create(dnnl_call *call, dnnl_api *api, const product *q, dnnl_data_type_t dtype, void *a,
                             void *b, float *c) {
  memset(call, 0, sizeof *call);
  call->api = api;
  const dnnl_dims_t a_dims = {q->m, q->k}, b_dims = {q->k, q->n}, c_dims = {q->m, q->n};
  const dnnl_dims_t a_strides = {q->transpose_a ? 1 : q->k, q->transpose_a ? q->m : 1};
  const dnnl_dims_t b_strides = {q->transpose_b ? 1 : q->n, q->transpose_b ? q->k : 1};
  const dnnl_dims_t c_strides = {q->n, 1};
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  if (api->memory_desc_init_by_strides(&a_md, 2, a_dims, dtype, a_strides) != dnnl_success ||
      api->memory_desc_init_by_strides(&b_md, 2, b_dims, dtype, b_strides) != dnnl_success ||
      api->memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides) != dnnl_success ||
      api->matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md) != dnnl_success ||
      api->primitive_desc_create(&pd, &desc, NULL, api->engine, NULL) != dnnl_success)
    return false;
  const char *impl = NULL;
  if (api->primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    snprintf(call->impl, sizeof call->impl, "%s", impl);
  const bool ok = api->primitive_create(&call->primitive, pd) == dnnl_success &&
                  api->memory_create(&call->a, &a_md, api->engine, a) == dnnl_success &&
                  api->memory_create(&call->b, &b_md, api->engine, b) == dnnl_success &&
                  api->memory_create(&call->c, &c_md, api->engine, c) == dnnl_success;
  api->primitive_desc_destroy(pd);
  return ok;
}

static bool run_dnnl(void *state) {
  dnnl_call *call = state;
  const dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, call->a}, {DNNL_ARG_WEIGHTS, call->b}, {DNNL_ARG_DST, call->c}};
  return call->api->primitive_execute(call->primitive, call->api->stream, 3, args) == dnnl_success &&
         call->api->stream_wait(call->api->stream) == dnnl_success;
}

static void dnnl_call_destroy(dnnl_call *call) {
  if (!call->api) return;
  if (call->primitive) call->api->primitive_destroy(call->primitive);
  if (call->a) call->api->memory_destroy(call->a);
  if (call->b) call->api->memory_destroy(call->b);
  if (call->c) call->api->memory_destroy(call->c);
}
#endif

enum { COLUMNS = 5 };

int main(int argc, char **argv) {
  static const char *const valued[] = {"--batch", "--threads", "--rounds", "--repeats", NULL};
  example_check_arguments(argc, argv, valued, NULL,
                          "usage: onednn_gemm_bench [--batch N] [--threads N] [--rounds N] [--repeats N]\n");
  const int64_t batch = example_option_long(argc, argv, "--batch", 128);
  const int threads = (int)example_option_long(argc, argv, "--threads", 2);
  const long rounds = example_option_long(argc, argv, "--rounds", 5);
  const long repeats = example_option_long(argc, argv, "--repeats", 20);
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) return 1;
  bpt_backend *backend = &context->backend;
  /* oneDNN's OpenMP regions take the process's OpenMP thread count (the library sets its own per region). */
  void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  if (set_threads) set_threads(threads);

  bool have_dnnl = false;
  const char *why = "built without oneDNN's headers (Debian: apt-get install -y libdnnl-dev)";
#ifdef HAVE_DNNL_HEADERS
  dnnl_api api;
  memset(&api, 0, sizeof api);
  have_dnnl = dnnl_open(&api, &why);
  if (have_dnnl) {
    const dnnl_version_t *v = api.version();
    printf("oneDNN %d.%d.%d (%s)\n", v->major, v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
  }
#endif
  if (!have_dnnl) printf("oneDNN columns skipped: %s\n", why);

  const int64_t tokens = 32 * 128, gpt2 = 4 * 64;
  const product products[] = {
      {"MLP fc1 forward x W^T", 0, 1, batch, 512, 784},
      {"MLP fc2 forward", 0, 1, batch, 256, 512},
      {"MLP fc1 dW = dy^T x", 1, 0, 512, 784, batch},
      {"MLP fc2 dx = dy W", 0, 0, batch, 512, 256},
      {"char_gpt qkv forward", 0, 1, tokens, 384, 128},
      {"char_gpt fc forward", 0, 1, tokens, 512, 128},
      {"char_gpt proj forward", 0, 1, tokens, 128, 512},
      {"char_gpt fc dW", 1, 0, 512, 128, tokens},
      {"char_gpt proj dx", 0, 0, tokens, 512, 128},
      {"GPT-2 small qkv forward", 0, 1, gpt2, 2304, 768},
      {"GPT-2 small fc forward", 0, 1, gpt2, 3072, 768},
      {"GPT-2 small fc dW", 1, 0, 3072, 768, gpt2},
      {"GPT-2 small proj dx", 0, 0, gpt2, 3072, 768},
  };
  static const char *const column_names[COLUMNS] = {"OpenBLAS f32", "ours bf16 policy (f32 buffers)",
                                                    "ours bf16 operands", "oneDNN f32", "oneDNN bf16"};
  const int count = (int)(sizeof products / sizeof products[0]);
  printf("matrix products in GFLOP/s, %d thread(s), fastest of %ld alternating rounds of %ld calls; bf16 GEMM: ",
         threads, rounds, repeats);
  bpt_compute_info info = {.size = sizeof info};
  if (bpt_cpu_compute_info(&info) != BPT_OK) return 1;
  printf("%s\n\n| product | m x n x k |", info.bf16_gemm);
  for (int c = 0; c < COLUMNS; c++) printf(" %s |", column_names[c]);
  printf(" best bf16 / OpenBLAS f32 |\n|---|---|");
  for (int c = 0; c <= COLUMNS; c++) printf("---|");
  printf("\n");
  double totals[COLUMNS] = {0};
  char impl_f32[64] = "", impl_bf16[64] = "";
  for (int p = 0; p < count; p++) {
    const product *q = &products[p];
    const int64_t a_count = q->m * q->k, b_count = q->k * q->n, c_count = q->m * q->n;
    float *a = malloc(sizeof(float) * (size_t)a_count), *b = malloc(sizeof(float) * (size_t)b_count);
    uint16_t *a16 = malloc(sizeof(uint16_t) * (size_t)a_count), *b16 = malloc(sizeof(uint16_t) * (size_t)b_count);
    float *c = calloc((size_t)c_count, sizeof(float));
    if (!a || !b || !a16 || !b16 || !c) return 1;
    for (long i = 0; i < a_count; i++) a16[i] = bf16_bits(a[i] = bf16_valued(i, 13, 0.01f));
    for (long i = 0; i < b_count; i++) b16[i] = bf16_bits(b[i] = bf16_valued(i, 7, 0.01f));
    backend_call f32 = {backend, {.transpose_a = q->transpose_a, .transpose_b = q->transpose_b, .m = q->m,
                                  .n = q->n, .k = q->k, .alpha = 1.0f, .a = a, .lda = q->transpose_a ? q->m : q->k,
                                  .b = b, .ldb = q->transpose_b ? q->k : q->n, .beta = 0.0f, .c = c, .ldc = q->n}};
    backend_call policy = f32, narrow = f32;
    policy.args.bf16_products = true;
    narrow.args.bf16_products = true;
    narrow.args.a = (const float *)(const void *)a16, narrow.args.a_dtype = BPT_DTYPE_BF16;
    narrow.args.b = (const float *)(const void *)b16, narrow.args.b_dtype = BPT_DTYPE_BF16;
    runner runners[COLUMNS] = {{run_backend, &f32}, {run_backend, &policy}, {run_backend, &narrow}, {0}, {0}};
#ifdef HAVE_DNNL_HEADERS
    dnnl_call d32, d16;
    memset(&d32, 0, sizeof d32), memset(&d16, 0, sizeof d16);
    if (have_dnnl) {
      if (dnnl_call_create(&d32, &api, q, dnnl_f32, a, b, c)) runners[3] = (runner){run_dnnl, &d32};
      if (dnnl_call_create(&d16, &api, q, dnnl_bf16, a16, b16, c)) runners[4] = (runner){run_dnnl, &d16};
      snprintf(impl_f32, sizeof impl_f32, "%s", d32.impl);
      snprintf(impl_bf16, sizeof impl_bf16, "%s", d16.impl);
    }
#endif
    double best[COLUMNS];
    for (int k = 0; k < COLUMNS; k++) best[k] = INFINITY;
    for (int k = 0; k < COLUMNS; k++)
      if (runners[k].run) time_runner(&runners[k], 1); /* first-call costs (packing buffers, JIT) untimed */
    for (long r = 0; r < rounds; r++)
      for (int k = 0; k < COLUMNS; k++) {
        if (!runners[k].run) continue;
        const double t = time_runner(&runners[k], repeats);
        if (t < best[k]) best[k] = t;
      }
    const double flops = 2.0 * (double)q->m * (double)q->n * (double)q->k;
    printf("| %s | %lld x %lld x %lld |", q->name, (long long)q->m, (long long)q->n, (long long)q->k);
    double best_bf16 = INFINITY;
    for (int k = 0; k < COLUMNS; k++) {
      if (isfinite(best[k])) {
        printf(" %.1f |", flops / best[k] / 1e9);
        totals[k] += best[k];
      } else {
        printf(" - |");
      }
      if (k == 2 || k == 4) best_bf16 = best[k] < best_bf16 ? best[k] : best_bf16;
    }
    printf(" %.2fx |\n", best[0] / best_bf16);
#ifdef HAVE_DNNL_HEADERS
    dnnl_call_destroy(&d32);
    dnnl_call_destroy(&d16);
#endif
    free(a), free(b), free(a16), free(b16), free(c);
  }
  printf("\nall products, ms:");
  for (int k = 0; k < COLUMNS; k++)
    if (totals[k] > 0.0) printf(" %s %.3f;", column_names[k], totals[k] * 1e3);
  printf("\noneDNN implementations (last shape): f32 '%s', bf16 '%s'\n", impl_f32, impl_bf16);
  bpt_context_destroy(context);
  return 0;
}
