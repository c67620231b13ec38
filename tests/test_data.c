/* The IDX reader on good and bad files (status and message, never a crash or a leak), and the data set's
 * batching, normalisation and seeded shuffling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/data/idx.h"
#include "test_support.h"

/* An IDX header: 00 00 <dtype> <rank> then big-endian dimensions. */
static size_t idx_header(unsigned char *out, unsigned char dtype, int rank, const uint32_t *dims) {
  out[0] = 0;
  out[1] = 0;
  out[2] = dtype;
  out[3] = (unsigned char)rank;
  for (int i = 0; i < rank; i++) {
    out[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
    out[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
    out[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
    out[7 + 4 * i] = (unsigned char)dims[i];
  }
  return 4 + 4 * (size_t)rank;
}

/* 5 images of 2x3 with bytes 0..29, labels 0..4 (class 4 present). */
static const char *write_images(const char *name, int gzip) {
  unsigned char bytes[64];
  uint32_t dims[3] = {5, 2, 3};
  size_t size = idx_header(bytes, 0x08, 3, dims);
  for (int i = 0; i < 30; i++) bytes[size + i] = (unsigned char)(i * 8);
  size += 30;
  return gzip ? test_write_gzip_file(name, bytes, size) : test_write_file(name, bytes, size);
}

static const char *write_labels(const char *name, uint32_t count) {
  unsigned char bytes[64];
  size_t size = idx_header(bytes, 0x08, 1, &count);
  for (uint32_t i = 0; i < count; i++) bytes[size + i] = (unsigned char)(i % 5);
  return test_write_file(name, bytes, size + count);
}

static void expect_bad_images(bpt_context *context, const void *bytes, size_t size, bpt_status status,
                              const char *fragment) {
  const char *path = test_write_file("bad-images", bytes, size);
  bpt_dataset *dataset = (bpt_dataset *)&dataset; /* poisoned: the call must reset it to NULL */
  assert_fails(context, status, fragment, bpt_dataset_load_idx(context, path, NULL, &dataset));
  assert_null(dataset);
  assert_non_null(strstr(bpt_context_last_error(context), "bad-images"));
}

static void bad_files_are_refused_with_messages(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  unsigned char bytes[64];
  uint32_t dims[3] = {5, 2, 3};
  size_t header = idx_header(bytes, 0x08, 3, dims);
  memset(bytes + header, 7, sizeof bytes - header);

  expect_bad_images(context, bytes, 0, BPT_ERR_FORMAT, "empty");
  expect_bad_images(context, bytes, 3, BPT_ERR_FORMAT, "truncated header");
  expect_bad_images(context, bytes, 10, BPT_ERR_FORMAT, "truncated header");
  expect_bad_images(context, bytes, header + 29, BPT_ERR_FORMAT, "truncated");
  expect_bad_images(context, bytes, header + 31, BPT_ERR_FORMAT, "wrong size");

  unsigned char magic[64];
  memcpy(magic, bytes, sizeof magic);
  magic[0] = 0x1f;
  expect_bad_images(context, magic, header + 30, BPT_ERR_FORMAT, "bad magic");
  magic[0] = 0;
  magic[2] = 0x0D;
  expect_bad_images(context, magic, header + 30, BPT_ERR_FORMAT, "float32");
  magic[2] = 0x08;
  magic[3] = 0;
  expect_bad_images(context, magic, header + 30, BPT_ERR_FORMAT, "rank 0");
  magic[3] = 9;
  expect_bad_images(context, magic, header + 30, BPT_ERR_FORMAT, "rank 9");

  /* 65536^3 bytes overflows the size limit: refused before any allocation. */
  uint32_t huge[3] = {65536, 65536, 65536};
  size_t huge_size = idx_header(magic, 0x08, 3, huge);
  expect_bad_images(context, magic, huge_size + 4, BPT_ERR_FORMAT, "overflow");
  uint32_t zero[2] = {5, 0};
  size_t zero_size = idx_header(magic, 0x08, 2, zero);
  expect_bad_images(context, magic, zero_size, BPT_ERR_FORMAT, "dimension 1 is zero");

  /* A gzip stream cut in the middle: a corrupt-data or truncation error, not a crash. */
  const char *good = write_images("good.gz", 1);
  FILE *file = fopen(good, "rb");
  unsigned char compressed[256];
  size_t compressed_size = fread(compressed, 1, sizeof compressed, file);
  fclose(file);
  expect_bad_images(context, compressed, compressed_size / 2, BPT_ERR_FORMAT, NULL);

  bpt_dataset *dataset = NULL;
  assert_fails(context, BPT_ERR_IO, "cannot open", bpt_dataset_load_idx(context, "/nonexistent/x.idx", NULL, &dataset));
  assert_fails(context, BPT_ERR_IO, "IDX directory '/nonexistent': cannot open: No such file or directory",
               bpt_dataset_load_idx_directory(context, "/nonexistent", "train", &dataset));
  assert_fails(context, BPT_ERR_IO, "'/dev/null' is not a directory",
               bpt_dataset_load_idx_directory(context, "/dev/null", "train", &dataset));
  assert_fails(context, BPT_ERR_IO, "neither", bpt_dataset_load_idx_directory(context, "/", "train", &dataset));
  assert_fails(context, BPT_ERR_FORMAT, "5 images but 4 labels",
               bpt_dataset_load_idx(context, write_images("images", 0), write_labels("labels", 4), &dataset));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "NULL", bpt_dataset_load_idx(context, NULL, NULL, &dataset));
  bpt_context_destroy(context);
}

/* One complete gzip member of bytes into out (capacity bytes); returns its size. */
static size_t gzip_member(const unsigned char *bytes, size_t size, unsigned char *out, size_t capacity) {
  z_stream stream;
  memset(&stream, 0, sizeof stream);
  assert_int_equal(deflateInit2(&stream, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  stream.next_in = (Bytef *)bytes;
  stream.avail_in = (uInt)size;
  stream.next_out = out;
  stream.avail_out = (uInt)capacity;
  assert_int_equal(deflate(&stream, Z_FINISH), Z_STREAM_END);
  size_t written = capacity - stream.avail_out;
  deflateEnd(&stream);
  return written;
}

static void expect_gzip_refusal(bpt_context *context, const unsigned char *bytes, size_t size, const char *fragment) {
  const char *path = test_write_file("bad-images.gz", bytes, size);
  bpt_idx idx;
  assert_fails(context, BPT_ERR_FORMAT, fragment, bpt_idx_read(context, path, &idx));
  assert_null(idx.data);
}

/* A gzip IDX file counts only as complete members whose CRC32/ISIZE trailers match, followed by nothing (or by
 * further complete members, as `cat a.gz b.gz` makes): the same trailing bytes a raw file is refused for are
 * refused after a gzip member too, and decompression stops one byte past what the header promises. */
static void gzip_streams_must_be_complete(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  unsigned char plain[64], member[256], bytes[512];
  uint32_t dims[3] = {5, 2, 3};
  size_t plain_size = idx_header(plain, 0x08, 3, dims);
  for (int i = 0; i < 30; i++) plain[plain_size + i] = (unsigned char)(i * 8);
  plain_size += 30;
  size_t size = gzip_member(plain, plain_size, member, sizeof member);
  bpt_idx idx;
  assert_ok(context, bpt_idx_read(context, test_write_file("good-images.gz", member, size), &idx));
  assert_int_equal(idx.count, 30);
  assert_memory_equal(idx.data, plain + plain_size - 30, 30);
  bpt_idx_free(&idx);

  /* The trailer (CRC32, then ISIZE) cut short by 1 to 8 bytes, or with one of its bytes changed. */
  for (size_t cut = 1; cut <= 8; cut++)
    expect_gzip_refusal(context, member, size - cut, "truncated gzip stream");
  memcpy(bytes, member, size);
  bytes[size - 8] ^= 1;
  expect_gzip_refusal(context, bytes, size, "incorrect data check");
  memcpy(bytes, member, size);
  bytes[size - 1] ^= 1;
  expect_gzip_refusal(context, bytes, size, "incorrect length check");

  /* Garbage after the member: one zero byte, text, a lone gzip magic (a second member cut off). */
  const char *tails[] = {"\0", "garbage", "\x1f", "\x1f\x8b"};
  const size_t tail_sizes[] = {1, 7, 1, 2};
  for (int t = 0; t < 4; t++) {
    memcpy(bytes, member, size);
    memcpy(bytes + size, tails[t], tail_sizes[t]);
    expect_gzip_refusal(context, bytes, size + tail_sizes[t], t < 2 ? "unexpected data after" : "truncated gzip");
  }
  /* The same trailing bytes in a raw file. */
  memcpy(bytes, plain, plain_size);
  memcpy(bytes + plain_size, "garbage", 7);
  assert_fails(context, BPT_ERR_FORMAT, "wrong size",
               bpt_idx_read(context, test_write_file("bad-images", bytes, plain_size + 7), &idx));

  /* Two complete members (split inside the header and inside the data) read as their concatenation. */
  for (size_t split = 3; split < plain_size; split += 17) {
    size_t first = gzip_member(plain, split, bytes, sizeof bytes);
    size_t second = gzip_member(plain + split, plain_size - split, bytes + first, sizeof bytes - first);
    assert_ok(context, bpt_idx_read(context, test_write_file("two-members.gz", bytes, first + second), &idx));
    assert_memory_equal(idx.data, plain + plain_size - 30, 30);
    bpt_idx_free(&idx);
  }
  bpt_context_destroy(context);
}

/* A small gzip file that inflates to far more than its header promises (30 data bytes, then 4 MiB of zeros)
 * is refused as soon as one byte too many comes out. Its trailer CRC is wrong on purpose: a reader that
 * decompressed the whole member would report that instead, so the message shows where decompression stopped. */
static void gzip_bombs_are_bounded_by_the_header(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  const size_t extra = (size_t)4 << 20;
  unsigned char *plain = calloc(64 + extra, 1);
  uint32_t dims[3] = {5, 2, 3};
  size_t plain_size = idx_header(plain, 0x08, 3, dims) + 30 + extra;
  size_t capacity = 64 << 10;
  unsigned char *member = malloc(capacity);
  size_t size = gzip_member(plain, plain_size, member, capacity);
  print_message("%zu bytes inflate to %zu\n", size, plain_size);
  member[size - 8] ^= 1;
  expect_gzip_refusal(context, member, size, "data continues past the 30 bytes");
  free(member);
  free(plain);
  bpt_context_destroy(context);
}

static void batches_normalise_and_shuffle(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  for (int gzip = 0; gzip < 2; gzip++) {
    bpt_dataset *dataset;
    assert_ok(context, bpt_dataset_load_idx(context, write_images(gzip ? "i.gz" : "i", gzip), write_labels("l", 5),
                                            &dataset));
    assert_int_equal(bpt_dataset_size(dataset), 5);
    assert_int_equal(bpt_dataset_sample_size(dataset), 6);
    assert_int_equal(bpt_dataset_class_count(dataset), 5);
    int64_t shape[BPT_MAX_RANK];
    assert_int_equal(bpt_dataset_sample_shape(dataset, shape), 2);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    assert_int_equal(bpt_dataset_batch_count(dataset, 2), 3);

    int64_t dims[3] = {2, 2, 3};
    bpt_tensor *images, *labels;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &images));
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &labels));
    assert_ok(context, bpt_dataset_set_normalization(dataset, 0.5f, 0.25f));
    assert_ok(context, bpt_dataset_batch(dataset, 2, 2, images, labels));
    assert_int_equal(bpt_tensor_dim(images, 0), 1); /* short last batch */
    const float *x = bpt_tensor_data(images);
    for (int i = 0; i < 6; i++) assert_float_equal(x[i], ((24 + i) * 8 / 255.0f - 0.5f) / 0.25f, 1e-5);
    assert_int_equal(((int32_t *)bpt_tensor_data(labels))[0], 4);
    assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "outside", bpt_dataset_batch(dataset, 3, 2, images, labels));

    /* Equal seeds give equal orders; labels follow their images. */
    int32_t first[5], second[5];
    for (int round = 0; round < 2; round++) {
      assert_ok(context, bpt_dataset_reset_order(dataset));
      assert_ok(context, bpt_dataset_shuffle(dataset, 99));
      int64_t all[3] = {5, 2, 3};
      bpt_tensor *all_images, *all_labels;
      assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, all, &all_images));
      assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, all, &all_labels));
      assert_ok(context, bpt_dataset_set_normalization(dataset, 0.0f, 1.0f));
      assert_ok(context, bpt_dataset_batch(dataset, 0, 5, all_images, all_labels));
      const float *pixels = bpt_tensor_data(all_images);
      int32_t *ys = bpt_tensor_data(all_labels);
      for (int n = 0; n < 5; n++) assert_float_equal(pixels[n * 6], ys[n] * 6 * 8 / 255.0f, 1e-6);
      memcpy(round ? second : first, ys, sizeof first);
      bpt_tensor_destroy(all_images);
      bpt_tensor_destroy(all_labels);
    }
    assert_memory_equal(first, second, sizeof first);
    bpt_tensor_destroy(images);
    bpt_tensor_destroy(labels);
    bpt_dataset_destroy(dataset);
  }
  bpt_context_destroy(context);
}

static void fashion_mnist_loads_when_installed(void **state) {
  (void)state;
  const char *directory = test_fashion_mnist_directory();
  if (!directory) skip();
  bpt_context *context = test_context(1);
  bpt_dataset *dataset;
  assert_ok(context, bpt_dataset_load_idx_directory(context, directory, "t10k", &dataset));
  assert_int_equal(bpt_dataset_size(dataset), 10000);
  assert_int_equal(bpt_dataset_sample_size(dataset), 784);
  assert_int_equal(bpt_dataset_class_count(dataset), 10);
  bpt_dataset_destroy(dataset);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_files_are_refused_with_messages),
      cmocka_unit_test(gzip_streams_must_be_complete),
      cmocka_unit_test(gzip_bombs_are_bounded_by_the_header),
      cmocka_unit_test(batches_normalise_and_shuffle),
      cmocka_unit_test(fashion_mnist_loads_when_installed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
