/* The class count of a classifier, checked against its training and test labels (robustness, issue 18
 * class 9): sizing the output layer from the largest label lets one corrupt label (200 in Fashion-MNIST) make a
 * 201-class model that trains "successfully" to 10% accuracy. Here the count must cover every label of both
 * sets and every class in it must have training samples, or the call fails naming the label file. */
#include <stdio.h>
#include <string.h>

#include "bptrain/data.h"
#include "core/context.h"
#include "core/data/dataset_labels.h"

enum { LABEL_VALUES = 256 }; /* IDX labels are uint8 */

/* Fails when a label of the set is not below classes, naming the file, the sample and the label. */
static bpt_status check_range(const bpt_dataset *dataset, const char *role, int64_t classes) {
  bpt_context *context;
  const char *path;
  const uint8_t *labels = bpt_dataset_labels_view(dataset, &context, &path);
  const int64_t size = bpt_dataset_size(dataset);
  int64_t outside = 0, first = -1;
  for (int64_t i = 0; i < size; i++)
    if (labels[i] >= classes) {
      if (first < 0) first = i;
      outside++;
    }
  if (!outside) return BPT_OK;
  return bpt_error(context, BPT_ERR_FORMAT,
                   "IDX label file '%s' (%s set): label %d of sample %lld is outside the %lld classes [0, %lld) "
                   "(%lld such labels); is the file corrupt, or is the class count wrong?",
                   path, role, labels[first], (long long)first, (long long)classes, (long long)classes,
                   (long long)outside);
}

/* Fails when classes in [0, classes) have no training sample, listing the first few ranges of them. */
static bpt_status check_no_empty_class(const bpt_dataset *train, int64_t classes) {
  bpt_context *context;
  const char *path;
  const uint8_t *labels = bpt_dataset_labels_view(train, &context, &path);
  int64_t counts[LABEL_VALUES] = {0};
  int largest = 0;
  for (int64_t i = 0; i < bpt_dataset_size(train); i++) {
    counts[labels[i]]++;
    if (labels[i] > largest) largest = labels[i];
  }
  char list[160] = "";
  size_t used = 0;
  int64_t empty = 0, ranges = 0;
  for (int64_t c = 0; c < classes; c++) {
    if (c < LABEL_VALUES && counts[c]) continue;
    int64_t last = c;
    while (last + 1 < classes && (last + 1 >= LABEL_VALUES || !counts[last + 1])) last++;
    empty += last - c + 1;
    if (++ranges <= 4 && used < sizeof list) {
      int written = last == c ? snprintf(list + used, sizeof list - used, "%s%lld", used ? ", " : "", (long long)c)
                              : snprintf(list + used, sizeof list - used, "%s%lld-%lld", used ? ", " : "",
                                         (long long)c, (long long)last);
      if (written > 0) used += (size_t)written;
    }
    c = last;
  }
  if (!empty) return BPT_OK;
  return bpt_error(context, BPT_ERR_FORMAT,
                   "IDX label file '%s' (training set): %lld of the %lld classes have no samples: %s%s (the largest "
                   "label is %d); is a label corrupt? If not, pass the class count",
                   path, (long long)empty, (long long)classes, list, ranges > 4 ? ", ..." : "", largest);
}

bpt_status bpt_dataset_check_classes(const bpt_dataset *train, const bpt_dataset *test, int requested, int *classes) {
  const char *where = "bpt_dataset_check_classes";
  if (classes) *classes = 0;
  if (!train || !classes) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: train and classes must be non-NULL", where);
  bpt_context *context;
  const char *path;
  const uint8_t *train_labels = bpt_dataset_labels_view(train, &context, &path);
  if (requested < 0)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: requested class count %d is negative", where, requested);
  if (!train_labels) return bpt_error(context, BPT_ERR_STATE, "%s: the training set has no labels", where);
  if (bpt_dataset_size(train) == 0) return bpt_error(context, BPT_ERR_FORMAT, "%s: the training set is empty", where);
  const int64_t count = requested > 0 ? requested : bpt_dataset_class_count(train);
  if (count < 2)
    return bpt_error(context, BPT_ERR_FORMAT, "IDX label file '%s': %lld class; a classifier needs at least 2", path,
                     (long long)count);
  BPT_CHECK(check_range(train, "training", count));
  if (test && bpt_dataset_labels_view(test, &context, &path)) BPT_CHECK(check_range(test, "test", count));
  BPT_CHECK(check_no_empty_class(train, count));
  *classes = (int)count;
  return BPT_OK;
}
