/* The bf16 policy's products on oneDNN's matmul (onednn.h says when and why). Primitives are created once per
 * product shape and kept for the process (oneDNN's primitives are immutable and may run from several threads
 * at once); memory objects and the stream are made per call, which costs microseconds beside products of tens
 * of microseconds and more. f32 operands (buffers holding bf16 values under the rounding path) are converted
 * to bf16 first, rounded as gemm_bf16.c rounds them, so both routes multiply the same values. A bf16 C (bf16
 * storage) gets alpha sum + beta C rounded once to nearest even, as the own kernel stores it, except that
 * oneDNN's conversion flushes subnormal results to zero where bpt_bf16_narrow keeps them. */
#include "backends/cpu/onednn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm_bf16.h"

#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
/* The 2.x C API (matmul_desc_init); oneDNN 3 changed it, and Debian 12 ships 2.6. */
#if DNNL_VERSION_MAJOR == 2
#define BPT_HAVE_ONEDNN 1
#endif
#endif
#endif

#ifndef BPT_HAVE_ONEDNN
bpt_status bpt_cpu_onednn_gemm(bpt_backend *backend, const bpt_gemm_args *args, bool *handled) {
  (void)backend, (void)args;
  *handled = false;
  return BPT_OK;
}
const char *bpt_cpu_onednn_mode(void) { return NULL; }
const char *bpt_cpu_onednn_absent_reason(void) {
  return "built without oneDNN 2.x headers (Debian: libdnnl-dev)";
}
#else

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BPT_ONEDNN_AVX512_CONVERT 1
#endif

typedef struct onednn_api {
  __typeof__(dnnl_engine_create) *engine_create;
  __typeof__(dnnl_stream_create) *stream_create;
  __typeof__(dnnl_stream_destroy) *stream_destroy;
  __typeof__(dnnl_stream_wait) *stream_wait;
  __typeof__(dnnl_memory_desc_init_by_strides) *memory_desc_init_by_strides;
  __typeof__(dnnl_matmul_desc_init) *matmul_desc_init;
  __typeof__(dnnl_primitive_attr_create) *attr_create;
  __typeof__(dnnl_primitive_attr_destroy) *attr_destroy;
  __typeof__(dnnl_primitive_attr_set_output_scales) *attr_set_output_scales;
  __typeof__(dnnl_primitive_attr_set_post_ops) *attr_set_post_ops;
  __typeof__(dnnl_post_ops_create) *post_ops_create;
  __typeof__(dnnl_post_ops_destroy) *post_ops_destroy;
  __typeof__(dnnl_post_ops_append_sum) *post_ops_append_sum;
  __typeof__(dnnl_primitive_desc_create) *primitive_desc_create;
  __typeof__(dnnl_primitive_desc_query) *primitive_desc_query;
  __typeof__(dnnl_primitive_desc_destroy) *primitive_desc_destroy;
  __typeof__(dnnl_primitive_create) *primitive_create;
  __typeof__(dnnl_primitive_destroy) *primitive_destroy;
  __typeof__(dnnl_primitive_execute) *primitive_execute;
  __typeof__(dnnl_memory_create) *memory_create;
  __typeof__(dnnl_memory_destroy) *memory_destroy;
  __typeof__(dnnl_version) *version;
  dnnl_engine_t engine;
} onednn_api;

/* A product shape with its primitive. Operands are as the primitive reads them (bf16, leading dimensions
 * after any conversion). */
typedef struct onednn_entry {
  bool transpose_a, transpose_b, c_bf16;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  dnnl_primitive_t primitive;
  dnnl_memory_desc_t a, b, c;
} onednn_entry;

enum { CACHE_CAPACITY = 256 };

static struct {
  pthread_once_t once;
  bool usable;
  char mode[128];
  char reason[160];
  onednn_api api;
  pthread_mutex_t lock;
  int count;
  onednn_entry entries[CACHE_CAPACITY];
} onednn = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static bool look_up(void *library) {
  onednn_api *api = &onednn.api;
#define LOOK_UP(field, symbol)                                                                                       \
  if (!(api->field = (__typeof__(api->field))dlsym(library, #symbol))) {                                             \
    snprintf(onednn.reason, sizeof onednn.reason, "libdnnl.so.2 lacks %s (not oneDNN's 2.x C API)", #symbol);       \
    return false;                                                                                                    \
  }
  LOOK_UP(engine_create, dnnl_engine_create)
  LOOK_UP(stream_create, dnnl_stream_create)
  LOOK_UP(stream_destroy, dnnl_stream_destroy)
  LOOK_UP(stream_wait, dnnl_stream_wait)
  LOOK_UP(memory_desc_init_by_strides, dnnl_memory_desc_init_by_strides)
  LOOK_UP(matmul_desc_init, dnnl_matmul_desc_init)
  LOOK_UP(attr_create, dnnl_primitive_attr_create)
  LOOK_UP(attr_destroy, dnnl_primitive_attr_destroy)
  LOOK_UP(attr_set_output_scales, dnnl_primitive_attr_set_output_scales)
  LOOK_UP(attr_set_post_ops, dnnl_primitive_attr_set_post_ops)
  LOOK_UP(post_ops_create, dnnl_post_ops_create)
  LOOK_UP(post_ops_destroy, dnnl_post_ops_destroy)
  LOOK_UP(post_ops_append_sum, dnnl_post_ops_append_sum)
  LOOK_UP(primitive_desc_create, dnnl_primitive_desc_create)
  LOOK_UP(primitive_desc_query, dnnl_primitive_desc_query)
  LOOK_UP(primitive_desc_destroy, dnnl_primitive_desc_destroy)
  LOOK_UP(primitive_create, dnnl_primitive_create)
  LOOK_UP(primitive_destroy, dnnl_primitive_destroy)
  LOOK_UP(primitive_execute, dnnl_primitive_execute)
  LOOK_UP(memory_create, dnnl_memory_create)
  LOOK_UP(memory_destroy, dnnl_memory_destroy)
  LOOK_UP(version, dnnl_version)
#undef LOOK_UP
  return true;
}

/* The primitive descriptor of entry's product (its memory descriptors filled in), NULL if oneDNN has none. */
static dnnl_primitive_desc_t describe(onednn_entry *e) {
  const onednn_api *api = &onednn.api;
  const dnnl_dims_t a_dims = {e->m, e->k}, b_dims = {e->k, e->n}, c_dims = {e->m, e->n};
  const dnnl_dims_t a_strides = {e->transpose_a ? 1 : e->lda, e->transpose_a ? e->lda : 1};
  const dnnl_dims_t b_strides = {e->transpose_b ? 1 : e->ldb, e->transpose_b ? e->ldb : 1};
  const dnnl_dims_t c_strides = {e->ldc, 1};
  dnnl_matmul_desc_t desc;
  if (api->memory_desc_init_by_strides(&e->a, 2, a_dims, dnnl_bf16, a_strides) != dnnl_success ||
      api->memory_desc_init_by_strides(&e->b, 2, b_dims, dnnl_bf16, b_strides) != dnnl_success ||
      api->memory_desc_init_by_strides(&e->c, 2, c_dims, e->c_bf16 ? dnnl_bf16 : dnnl_f32, c_strides) != dnnl_success ||
      api->matmul_desc_init(&desc, &e->a, &e->b, NULL, &e->c) != dnnl_success)
    return NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  bool ok = api->attr_create(&attr) == dnnl_success;
  if (ok && e->alpha != 1.0f) ok = api->attr_set_output_scales(attr, 1, 0, &e->alpha) == dnnl_success;
  if (ok && e->beta != 0.0f)
    ok = api->post_ops_create(&post_ops) == dnnl_success && api->post_ops_append_sum(post_ops, e->beta) == dnnl_success &&
         api->attr_set_post_ops(attr, post_ops) == dnnl_success;
  dnnl_primitive_desc_t pd = NULL;
  if (ok && api->primitive_desc_create(&pd, &desc, attr, api->engine, NULL) != dnnl_success) pd = NULL;
  if (post_ops) api->post_ops_destroy(post_ops);
  if (attr) api->attr_destroy(attr);
  return pd;
}

static const char *implementation(dnnl_primitive_desc_t pd) {
  const char *name = NULL;
  if (onednn.api.primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name) return "";
  return name;
}

static void load(void) {
#if defined(BPT_AVX512_EMULATION)
  snprintf(onednn.reason, sizeof onednn.reason, "a build that emulates AVX-512 tests the own kernels");
  return;
#endif
  if (getenv("BPT_BF16_GEMM") && strcmp(getenv("BPT_BF16_GEMM"), "own") == 0) {
    snprintf(onednn.reason, sizeof onednn.reason, "switched off (BPT_BF16_GEMM=own)");
    return;
  }
  if (!bpt_cpu_has_avx512_bf16()) {
    snprintf(onednn.reason, sizeof onednn.reason, "this CPU has no AVX512_BF16");
    return;
  }
  void *library = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    snprintf(onednn.reason, sizeof onednn.reason, "libdnnl.so.2 not found (Debian: libdnnl2)");
    return;
  }
  if (!look_up(library)) return; /* library stays open: dlclose of a loaded oneDNN saves nothing */
  if (onednn.api.engine_create(&onednn.api.engine, dnnl_cpu, 0) != dnnl_success) {
    snprintf(onednn.reason, sizeof onednn.reason, "oneDNN made no CPU engine");
    return;
  }
  /* A probe product: oneDNN must have a kernel on a bf16 unit for it, not its reference loops. */
  onednn_entry probe = {.m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .alpha = 1.0f};
  dnnl_primitive_desc_t pd = describe(&probe);
  if (!pd) {
    snprintf(onednn.reason, sizeof onednn.reason, "oneDNN has no bf16 matmul here");
    return;
  }
  const char *name = implementation(pd);
  const bool unit = strstr(name, "bf16") != NULL || strstr(name, "amx") != NULL;
  const dnnl_version_t *v = onednn.api.version();
  if (unit)
    snprintf(onednn.mode, sizeof onednn.mode, "oneDNN %d.%d.%d matmul (%s)", v->major, v->minor, v->patch, name);
  else
    snprintf(onednn.reason, sizeof onednn.reason, "oneDNN %d.%d.%d's bf16 matmul here is '%s', not a bf16 unit",
             v->major, v->minor, v->patch, name);
  onednn.api.primitive_desc_destroy(pd);
  onednn.usable = unit;
}

static bool usable(void) {
  pthread_once(&onednn.once, load);
  return onednn.usable;
}

const char *bpt_cpu_onednn_mode(void) { return usable() ? onednn.mode : NULL; }

const char *bpt_cpu_onednn_absent_reason(void) { return usable() ? NULL : onednn.reason; }

static bool same_shape(const onednn_entry *a, const onednn_entry *b) {
  return a->transpose_a == b->transpose_a && a->transpose_b == b->transpose_b && a->c_bf16 == b->c_bf16 &&
         a->m == b->m && a->n == b->n &&
         a->k == b->k && a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->alpha == b->alpha &&
         a->beta == b->beta;
}

/* The cached entry for key, created if new; NULL when oneDNN has no primitive for it. *owned: the caller must
 * destroy the primitive after use (the cache is full). */
static const onednn_entry *entry_for(onednn_entry *key, bool *owned) {
  *owned = false;
  pthread_mutex_lock(&onednn.lock);
  for (int i = 0; i < onednn.count; i++)
    if (same_shape(&onednn.entries[i], key)) {
      pthread_mutex_unlock(&onednn.lock);
      return &onednn.entries[i]; /* entries are never changed once counted */
    }
  dnnl_primitive_desc_t pd = describe(key);
  bool ok = pd && onednn.api.primitive_create(&key->primitive, pd) == dnnl_success;
  if (pd) onednn.api.primitive_desc_destroy(pd);
  const onednn_entry *found = NULL;
  if (ok && onednn.count < CACHE_CAPACITY) {
    onednn.entries[onednn.count] = *key;
    found = &onednn.entries[onednn.count++];
  } else if (ok) {
    *owned = true;
    found = key;
  }
  pthread_mutex_unlock(&onednn.lock);
  return found;
}

#ifdef BPT_ONEDNN_AVX512_CONVERT
/* Sixteen f32 to bf16, round to nearest even: the same bits as bpt_bf16_from_f32_bits wherever vdpbf16ps reads
 * them (it takes bf16 subnormals, which that function flushes, as zero). Runs only where oneDNN is usable,
 * i.e. on CPUs with AVX512_BF16. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void narrow_row(const float *from,
                                                                                        uint16_t *to, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256bh narrow = _mm512_cvtneps_pbh(_mm512_loadu_ps(from + i));
    _mm256_storeu_si256((__m256i *)(void *)(to + i), (__m256i)narrow);
  }
  for (; i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &from[i], sizeof bits);
    to[i] = bpt_bf16_from_f32_bits(bits);
  }
}
#else
static void narrow_row(const float *from, uint16_t *to, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &from[i], sizeof bits);
    to[i] = bpt_bf16_from_f32_bits(bits);
  }
}
#endif

/* An f32 operand of rows x cols (row stride ld) as a dense bf16 copy (row stride cols), or NULL. */
static uint16_t *narrowed(const float *values, int64_t rows, int64_t cols, int64_t ld) {
  uint16_t *copy = malloc((size_t)(rows * cols) * sizeof *copy);
  if (!copy) return NULL;
#pragma omp parallel for if (rows * cols > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) narrow_row(values + r * ld, copy + r * cols, cols);
  return copy;
}

bpt_status bpt_cpu_onednn_gemm(bpt_backend *backend, const bpt_gemm_args *args, bool *handled) {
  *handled = false;
  if (!args->bf16_products || (args->c_dtype != BPT_DTYPE_F32 && args->c_dtype != BPT_DTYPE_BF16) || args->k == 0 ||
      !usable())
    return BPT_OK;
  if ((args->a_dtype != BPT_DTYPE_F32 && args->a_dtype != BPT_DTYPE_BF16) ||
      (args->b_dtype != BPT_DTYPE_F32 && args->b_dtype != BPT_DTYPE_BF16))
    return BPT_OK;
  /* Stored shapes: op(A) is m x k, so A is k x m when transposed; likewise B. */
  const int64_t a_rows = args->transpose_a ? args->k : args->m, a_cols = args->transpose_a ? args->m : args->k;
  const int64_t b_rows = args->transpose_b ? args->n : args->k, b_cols = args->transpose_b ? args->k : args->n;
  uint16_t *a16 = NULL, *b16 = NULL;
  const void *a = args->a, *b = args->b;
  int64_t lda = args->lda, ldb = args->ldb;
  if (args->a_dtype == BPT_DTYPE_F32) {
    if (!(a16 = narrowed(args->a, a_rows, a_cols, args->lda))) goto out_of_memory;
    a = a16, lda = a_cols;
  }
  if (args->b_dtype == BPT_DTYPE_F32) {
    if (!(b16 = narrowed(args->b, b_rows, b_cols, args->ldb))) goto out_of_memory;
    b = b16, ldb = b_cols;
  }
  onednn_entry key = {.transpose_a = args->transpose_a, .transpose_b = args->transpose_b,
                      .c_bf16 = args->c_dtype == BPT_DTYPE_BF16, .m = args->m,
                      .n = args->n, .k = args->k, .lda = lda, .ldb = ldb, .ldc = args->ldc, .alpha = args->alpha,
                      .beta = args->beta};
  bool owned = false;
  const onednn_entry *entry = entry_for(&key, &owned);
  if (entry) {
    const onednn_api *api = &onednn.api;
    dnnl_memory_t a_memory = NULL, b_memory = NULL, c_memory = NULL;
    dnnl_stream_t stream = NULL;
    const bool ok = api->memory_create(&a_memory, &entry->a, api->engine, (void *)a) == dnnl_success &&
                    api->memory_create(&b_memory, &entry->b, api->engine, (void *)b) == dnnl_success &&
                    api->memory_create(&c_memory, &entry->c, api->engine, args->c) == dnnl_success &&
                    api->stream_create(&stream, api->engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
      const dnnl_exec_arg_t exec[3] = {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, c_memory}};
      /* A failed execute leaves C unknown, so it must not fall back silently: report it. */
      *handled = true;
      if (api->primitive_execute(entry->primitive, stream, 3, exec) != dnnl_success ||
          api->stream_wait(stream) != dnnl_success) {
        if (stream) api->stream_destroy(stream);
        api->memory_destroy(a_memory), api->memory_destroy(b_memory), api->memory_destroy(c_memory);
        if (owned) api->primitive_destroy(key.primitive);
        free(a16), free(b16);
        return bpt_backend_fail(backend, BPT_ERR_DEVICE, "bf16 gemm %lld x %lld x %lld: oneDNN's matmul failed",
                                (long long)args->m, (long long)args->n, (long long)args->k);
      }
    }
    if (stream) api->stream_destroy(stream);
    if (a_memory) api->memory_destroy(a_memory);
    if (b_memory) api->memory_destroy(b_memory);
    if (c_memory) api->memory_destroy(c_memory);
    if (owned) api->primitive_destroy(key.primitive);
  }
  free(a16), free(b16);
  return BPT_OK;
out_of_memory:
  free(a16), free(b16);
  return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "bf16 gemm: no memory to narrow a %lld x %lld operand",
                          (long long)(a16 ? b_rows : a_rows), (long long)(a16 ? b_cols : a_cols));
}
#endif
