/* The export options' defaults, in every build: with ONNX export and without it (onnx_unavailable.c), so a
 * program sees the same defaults either way. */
#include <string.h>

#include "bptrain/onnx.h"

bpt_onnx_export_options bpt_onnx_export_options_default(void) {
  bpt_onnx_export_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.opset = 17;
  options.input_std = 1.0f;
  return options;
}
