/* The data set's sample order, for checkpoints: successive shuffles compose, so resuming mid-training needs
 * the order itself, not just the last seed. */
#ifndef BPT_DATA_DATASET_ORDER_H
#define BPT_DATA_DATASET_ORDER_H

#include "bptrain/data.h"

/* The permutation (size entries, each in [0, size)) that bpt_dataset_batch reads samples through. */
int64_t *bpt_dataset_order_view(bpt_dataset *dataset, int64_t *size);

#endif
