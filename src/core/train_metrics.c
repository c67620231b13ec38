/* The metrics CSV the training helper writes: one "step" row per optimiser step and one "epoch" row per epoch,
 * in the column layout the examples' plot and the Python binding read. Unknown values (NaN) stay empty, which
 * gnuplot and CSV readers take as missing. */
#include <math.h>

#include "bptrain/train.h"

static int write_value(FILE *file, double value) {
  if (!isnan(value) && fprintf(file, "%.6g", value) < 0) return -1;
  return fputc(',', file) == EOF ? -1 : 0;
}

bpt_status bpt_train_write_metrics_header(FILE *file) {
  if (!file) return BPT_ERR_INVALID_ARGUMENT;
  return fputs("kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,learning_rate,seconds\n", file) < 0
             ? BPT_ERR_IO
             : BPT_OK;
}

bpt_status bpt_train_write_metrics_step(FILE *file, const bpt_train_progress *progress, double seconds) {
  if (!file || !progress) return BPT_ERR_INVALID_ARGUMENT;
  int failed = fprintf(file, "step,%lld,%lld,", (long long)progress->epoch, (long long)progress->step) < 0;
  failed |= write_value(file, progress->loss) != 0;
  failed |= fputs(",,,", file) < 0;
  failed |= write_value(file, progress->learning_rate) != 0;
  failed |= fprintf(file, "%.3f\n", seconds) < 0;
  return failed ? BPT_ERR_IO : BPT_OK;
}

bpt_status bpt_train_write_metrics_epoch(FILE *file, const bpt_train_epoch *epoch) {
  if (!file || !epoch) return BPT_ERR_INVALID_ARGUMENT;
  int failed = fprintf(file, "epoch,%lld,%lld,", (long long)epoch->epoch, (long long)epoch->step) < 0;
  failed |= write_value(file, epoch->train_loss) != 0;
  failed |= write_value(file, NAN) != 0;
  failed |= write_value(file, epoch->validation_loss) != 0;
  failed |= write_value(file, epoch->validation_accuracy) != 0;
  failed |= write_value(file, epoch->learning_rate) != 0;
  failed |= fprintf(file, "%.3f\n", epoch->seconds) < 0;
  failed |= fflush(file) != 0;
  return failed ? BPT_ERR_IO : BPT_OK;
}
