/* The CPU backend's state: per-thread scratch buffers that grow to the largest request and are then reused,
 * so convolutions allocate nothing in the steady state of training. */
#include <stdlib.h>

#include <omp.h>

#include "backends/cpu/cpu.h"

bpt_status bpt_cpu_state_create(bpt_backend *backend) {
  bpt_cpu_state *state = calloc(1, sizeof *state);
  int slots = backend->num_threads > 0 ? backend->num_threads : 1;
  if (state) {
    state->slots = slots;
    state->loop_limit = BPT_CPU_LOOPS_AVX512;
    state->scratch = calloc((size_t)slots, sizeof *state->scratch);
    state->scratch_floats = calloc((size_t)slots, sizeof *state->scratch_floats);
  }
  backend->state = state;
  if (!state || !state->scratch || !state->scratch_floats) {
    bpt_cpu_state_destroy(backend);
    return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate the CPU backend state");
  }
  return BPT_OK;
}

void bpt_cpu_state_destroy(bpt_backend *backend) {
  bpt_cpu_state *state = backend->state;
  if (!state) return;
  for (int i = 0; state->scratch && i < state->slots; i++)
    free(state->scratch[i]);
  free(state->scratch);
  free(state->scratch_floats);
  free(state);
  backend->state = NULL;
}

bpt_status bpt_cpu_scratch_reserve(bpt_backend *backend, int slots, size_t floats) {
  bpt_cpu_state *state = backend->state;
  if (slots > state->slots)
    return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "scratch: %d slots requested, %d exist", slots, state->slots);
  for (int i = 0; i < slots; i++) {
    if (state->scratch_floats[i] >= floats) continue;
    free(state->scratch[i]);
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    state->scratch[i] = aligned_alloc(64, bytes);
    state->scratch_floats[i] = state->scratch[i] ? floats : 0;
    if (!state->scratch[i])
      return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of scratch memory", bytes);
  }
  return BPT_OK;
}

float *bpt_cpu_scratch(bpt_backend *backend, int slot) { return ((bpt_cpu_state *)backend->state)->scratch[slot]; }

bpt_status bpt_cpu_row_staging_reserve(bpt_backend *backend, bool staged, size_t shared, size_t per_thread) {
  return bpt_cpu_scratch_reserve(backend, staged ? bpt_cpu_threads(backend) : 1, shared + (staged ? per_thread : 0));
}

float *bpt_cpu_row_staging(bpt_backend *backend, bool staged, size_t shared) {
  return staged ? bpt_cpu_scratch(backend, omp_get_thread_num()) + shared : NULL;
}

bpt_cpu_loops bpt_cpu_loops_supported(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  /* __builtin_cpu_supports counts AVX features only where the OS saves their registers (XGETBV), as
   * bpt_cpu_features_read does; valgrind, for one, reports AVX2 but not AVX-512F. */
#if defined(BPT_AVX512_EMULATION)
  /* The test build that emulates AVX-512 (avx512_target.h) compiles those loops for AVX2 + FMA. */
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BPT_CPU_LOOPS_AVX512;
#endif
  if (__builtin_cpu_supports("avx512f")) return BPT_CPU_LOOPS_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BPT_CPU_LOOPS_AVX2;
#endif
  return BPT_CPU_LOOPS_PORTABLE;
}

bpt_cpu_loops bpt_cpu_vector_loops(bpt_backend *backend) {
  const bpt_cpu_loops supported = bpt_cpu_loops_supported(), limit = ((bpt_cpu_state *)backend->state)->loop_limit;
  return supported < limit ? supported : limit;
}
