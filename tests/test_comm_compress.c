/* The comm layer's host-side pieces without MPI: 16-bit conversions against known bit patterns, the
 * reductions applied at each ring hop, codec round trips within their error bound, top-k selection
 * against a sort, error feedback keeping sent + residual equal to the gradients' sum, and the
 * communicator API's errors when an engine is missing or arguments are wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/compress.h"
#include "test_support.h"

static void f16_and_bf16_conversions(void **state) {
  (void)state;
  const struct {
    float value;
    uint16_t f16, bf16;
  } cases[] = {{0.0f, 0x0000, 0x0000},          {1.0f, 0x3c00, 0x3f80}, {-2.0f, 0xc000, 0xc000},
               {65504.0f, 0x7bff, 0x4780},      {1e6f, 0x7c00, 0x4974}, {5.9604645e-8f, 0x0001, 0x3380},
               {6.1035156e-5f, 0x0400, 0x3880}, {0.1f, 0x2e66, 0x3dcd}, {-INFINITY, 0xfc00, 0xff80}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(bpt_float_to_f16(cases[i].value), cases[i].f16);
    assert_int_equal(bpt_float_to_bf16(cases[i].value), cases[i].bf16);
  }
  /* Ties go to even: 1 + 2^-11 lies halfway between 1 and the next f16. */
  assert_int_equal(bpt_float_to_f16(1.0f + 0x1p-11f), 0x3c00);
  assert_int_equal(bpt_float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_true(isnan(bpt_f16_to_float(bpt_float_to_f16(NAN))));
  assert_true(isnan(bpt_bf16_to_float(bpt_float_to_bf16(NAN))));
  /* Every finite f16 survives the round trip through f32. */
  for (uint32_t bits = 0; bits < 0x10000; bits++) {
    if ((bits & 0x7c00) == 0x7c00) continue;
    assert_int_equal(bpt_float_to_f16(bpt_f16_to_float((uint16_t)bits)), bits);
  }
}

static void hop_reductions(void **state) {
  (void)state;
  float a[3] = {1.0f, -2.0f, 3.0f}, b[3] = {0.5f, 4.0f, -3.0f};
  bpt_comm_sum_into(BPT_DTYPE_F32, a, b, 3);
  assert_true(a[0] == 1.5f && a[1] == 2.0f && a[2] == 0.0f);
  bpt_comm_max_into(a, b, 3);
  assert_true(a[0] == 1.5f && a[1] == 4.0f && a[2] == 0.0f);
  uint16_t h[2] = {bpt_float_to_f16(1.5f), bpt_float_to_bf16(3.0f)},
           g[2] = {bpt_float_to_f16(2.25f), bpt_float_to_bf16(-1.0f)};
  bpt_comm_sum_into(BPT_DTYPE_F16, h, g, 1);
  bpt_comm_sum_into(BPT_DTYPE_BF16, h + 1, g + 1, 1);
  assert_true(bpt_f16_to_float(h[0]) == 3.75f && bpt_bf16_to_float(h[1]) == 2.0f);
  int8_t q[3] = {100, -100, 5}, r[3] = {100, -100, -7};
  bpt_comm_sum_into(BPT_DTYPE_U8, q, r, 3);
  assert_true(q[0] == 127 && q[1] == -128 && q[2] == -2);
  float scaled[2] = {2.0f, -4.0f};
  bpt_comm_scale(BPT_DTYPE_F32, scaled, 2, 0.25f);
  assert_true(scaled[0] == 0.5f && scaled[1] == -1.0f);
}

static void codec_round_trips(void **state) {
  (void)state;
  enum { n = 1001 };
  test_random random;
  test_random_seed(&random, 7);
  float values[n], decoded[n];
  test_random_fill(&random, values, n, -3.0f, 3.0f);
  uint16_t halves[n];
  bpt_comm_encode_f16(values, n, 0.5f, halves);
  bpt_comm_decode_f16(halves, n, 0.5f, decoded);
  for (int i = 0; i < n; i++)
    assert_true(fabsf(decoded[i] - values[i]) <= fabsf(values[i]) * 0x1p-11f + 1e-7f);
  int8_t bytes[n];
  float largest = bpt_comm_max_abs(values, n), step = largest / 63.0f;
  bpt_comm_encode_int8(values, n, step, 63, bytes);
  bpt_comm_decode_int8(bytes, n, step, decoded);
  for (int i = 0; i < n; i++) {
    assert_true(fabsf(decoded[i] - values[i]) <= 0.5f * step * 1.0001f);
    assert_true(bytes[i] >= -63 && bytes[i] <= 63);
  }
}

static int compare_descending_magnitude(const void *a, const void *b) {
  float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
  return x < y ? 1 : x > y ? -1 : 0;
}

static void top_k_selects_the_largest(void **state) {
  (void)state;
  enum { n = 777, k = 31 };
  test_random random;
  test_random_seed(&random, 11);
  float values[n], sorted[n], scratch[n];
  test_random_fill(&random, values, n, -1.0f, 1.0f);
  values[5] = values[6] = 2.0f; /* a tie at the top */
  memcpy(sorted, values, sizeof values);
  qsort(sorted, n, sizeof *sorted, compare_descending_magnitude);
  bpt_comm_sparse_entry entries[k];
  bpt_comm_select_top_k(values, n, k, scratch, entries);
  for (int i = 0; i < k; i++) {
    if (i > 0) assert_true(entries[i].index > entries[i - 1].index);
    assert_true(entries[i].value == values[entries[i].index]);
    assert_true(fabsf(entries[i].value) >= fabsf(sorted[k - 1]));
  }
  float dense[n];
  memset(dense, 0, sizeof dense);
  bpt_comm_scatter_add(entries, k, 0.5f, dense);
  assert_true(dense[5] == 1.0f && dense[6] == 1.0f);
  /* k equal to the count selects everything, in order. */
  bpt_comm_sparse_entry all[4];
  float few[4] = {0.0f, -1.0f, 0.0f, 2.0f}, few_scratch[4];
  bpt_comm_select_top_k(few, 4, 4, few_scratch, all);
  for (int i = 0; i < 4; i++)
    assert_int_equal(all[i].index, i);
}

/* Over many steps, what was sent plus what is still held back must equal everything that came in. */
static void error_feedback_keeps_the_sum(void **state) {
  (void)state;
  enum { n = 513, steps = 20 };
  const int kinds[] = {BPT_COMPRESSION_F16, BPT_COMPRESSION_INT8, BPT_COMPRESSION_TOPK};
  for (size_t kind = 0; kind < sizeof kinds / sizeof kinds[0]; kind++) {
    test_random random;
    test_random_seed(&random, 100 + kind);
    static float work[n], residual[n], scratch[n], decoded[n];
    static double sent[n], incoming[n];
    static unsigned char payload[n * sizeof(bpt_comm_sparse_entry)];
    memset(residual, 0, sizeof residual);
    memset(sent, 0, sizeof sent);
    memset(incoming, 0, sizeof incoming);
    bpt_comm_codec codec = {
        .kind = kinds[kind], .f16_scale = 0.5f, .int8_limit = 63, .top_k = 17, .top_k_scratch = scratch};
    double dropped = 0.0;
    for (int t = 0; t < steps; t++) {
      test_random_fill(&random, work, n, -1.0f, 1.0f);
      for (int i = 0; i < n; i++)
        incoming[i] += work[i];
      codec.int8_step = (bpt_comm_max_abs(work, n) + bpt_comm_max_abs(residual, n)) / 63.0f;
      bpt_comm_compress(&codec, work, n, residual, payload);
      bpt_comm_decompress_local(&codec, payload, n, decoded);
      for (int i = 0; i < n; i++)
        sent[i] += decoded[i];
    }
    for (int i = 0; i < n; i++) {
      assert_true(fabs(sent[i] + residual[i] - incoming[i]) <= 1e-4 * (1.0 + fabs(incoming[i])));
      dropped += fabs(residual[i]);
    }
    /* The codec is lossy (so the test means something), yet the carried error stays bounded. */
    assert_true(dropped > 0.0);
    for (int i = 0; i < n; i++)
      assert_true(fabsf(residual[i]) < (kinds[kind] == BPT_COMPRESSION_TOPK ? 20.0f : 1.0f));
  }
}

/* A non-finite gradient (f16 overflow under dynamic loss scaling, divergence) must reach the loss scaler as
 * non-finite, and must not stay behind in the residual to poison the steps after the one it drops. int8
 * quantises NaN without a float-to-int conversion of NaN (UBSan in the sanitizer stage). */
static void non_finite_gradients_are_not_carried(void **state) {
  (void)state;
  enum { n = 6 };
  const float values[n] = {0.5f, NAN, INFINITY, -INFINITY, -0.25f, 1e6f};
  int8_t bytes[n];
  float decoded[n];
  bpt_comm_encode_int8(values, n, NAN, 63, bytes); /* the step the ranks agree on when any value is not finite */
  bpt_comm_decode_int8(bytes, n, NAN, decoded);
  for (int i = 0; i < n; i++)
    assert_true(isnan(decoded[i]));
  bpt_comm_encode_int8(values, n, 0.25f, 63, bytes); /* a finite step: NaN quantises to 0, the rest clamp */
  const int8_t expected[n] = {2, 0, 63, -63, -1, 63};
  assert_memory_equal(bytes, expected, sizeof bytes);
  const float zero = 0.0f;
  bpt_comm_encode_int8(&zero, 1, 1e-40f, 63, bytes); /* 1 / step overflows: 0 x inf is NaN, still 0 */
  assert_int_equal(bytes[0], 0);
  const int kinds[] = {BPT_COMPRESSION_F16, BPT_COMPRESSION_INT8, BPT_COMPRESSION_TOPK};
  for (size_t kind = 0; kind < sizeof kinds / sizeof kinds[0]; kind++) {
    float work[n], residual[n], scratch[n];
    unsigned char payload[n * sizeof(bpt_comm_sparse_entry)];
    memcpy(work, values, sizeof work);
    for (int i = 0; i < n; i++)
      residual[i] = 0.125f; /* what earlier, applied steps left out */
    bpt_comm_codec codec = {.kind = kinds[kind], .f16_scale = 1.0f, .int8_step = NAN, .int8_limit = 63, .top_k = 2,
                            .top_k_scratch = scratch};
    bpt_comm_compress(&codec, work, n, residual, payload);
    bpt_comm_decompress_local(&codec, payload, n, decoded);
    assert_true(isnan(decoded[1])); /* top-k sends NaN first: it ranks as the largest magnitude */
    if (kinds[kind] != BPT_COMPRESSION_TOPK) assert_true(!isfinite(decoded[2]) && !isfinite(decoded[5]));
    for (int i = 0; i < n; i++) {
      assert_true(isfinite(residual[i]));
      /* int8's NaN step spoils the whole bucket, and the step is dropped: the residual stays as it was. */
      if (kinds[kind] == BPT_COMPRESSION_INT8) assert_true(residual[i] == 0.125f);
    }
  }
}

static void api_errors(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_comm *comm = (bpt_comm *)context;
  bpt_comm_options options = bpt_comm_options_default();
  assert_true(options.timeout_seconds == 300.0);
  options.timeout_seconds = -1.0;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "timeout_seconds", bpt_comm_create_mpi(context, 0, &options, &comm));
  assert_null(comm);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "rank", bpt_comm_create_nccl(context, NULL, 0, 1, 0, NULL, &comm));
  /* The device rule's first half, checked before any module loads: a negative device or a rank outside the
   * world is refused by name, and no communicator is left behind. */
  bpt_comm_unique_id id;
  memset(&id, 0, sizeof id);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "device (-1)", bpt_comm_create_nccl(context, &id, 0, 1, -1, NULL, &comm));
  assert_null(comm);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "rank (2)", bpt_comm_create_nccl(context, &id, 2, 2, 0, NULL, &comm));
  assert_null(comm);
  assert_fails(NULL, BPT_ERR_INVALID_ARGUMENT, "NULL",
               bpt_comm_allreduce(NULL, NULL, 0, BPT_DTYPE_F32, BPT_REDUCE_SUM));
  assert_int_equal(bpt_comm_rank(NULL), -1);
  assert_int_equal(bpt_comm_size(NULL), 0);
  assert_string_equal(bpt_comm_engine(NULL), "");
  bpt_comm_destroy(NULL);
  bpt_data_parallel_destroy(NULL);
  assert_int_equal(bpt_data_parallel_bucket_count(NULL), 0);
  bpt_data_parallel_options defaults = bpt_data_parallel_options_default();
  assert_int_equal(defaults.bucket_bytes, 25u << 20);
  assert_int_equal(defaults.first_bucket_bytes, 1u << 20);
  bpt_data_parallel *dp = NULL;
  assert_fails(NULL, BPT_ERR_INVALID_ARGUMENT, "NULL", bpt_data_parallel_create(NULL, NULL, NULL, &dp));
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f16_and_bf16_conversions),
      cmocka_unit_test(hop_reductions),
      cmocka_unit_test(codec_round_trips),
      cmocka_unit_test(top_k_selects_the_largest),
      cmocka_unit_test(error_feedback_keeps_the_sum),
      cmocka_unit_test(non_finite_gradients_are_not_carried),
      cmocka_unit_test(api_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
