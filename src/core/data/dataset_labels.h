/* A data set's labels and the file they came from, for the class-count checks (class_count.c); the data set
 * itself stays private to dataset.c. */
#ifndef BPT_DATA_DATASET_LABELS_H
#define BPT_DATA_DATASET_LABELS_H

#include <stdint.h>

#include "bptrain/data.h"

/* The bpt_dataset_size() labels (NULL without labels); *context is the data set's context and *path the label
 * file's name ("" without labels). */
const uint8_t *bpt_dataset_labels_view(const bpt_dataset *dataset, bpt_context **context, const char **path);

#endif
