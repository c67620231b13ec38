/* bpt_graph_export_onnx in a library built without protobuf-c (BPT_WITH_ONNX=OFF, or AUTO without
 * libprotobuf-c-dev and protoc-c): the call exists, so programs link either way, and says what is missing. */
#include <string.h>

#include "bptrain/onnx.h"
#include "core/graph.h"

bpt_onnx_export_options bpt_onnx_export_options_default(void) {
  bpt_onnx_export_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.opset = 17;
  options.input_std = 1.0f;
  return options;
}

bpt_status bpt_graph_export_onnx(bpt_graph *graph, const char *path, const bpt_onnx_export_options *options) {
  (void)path;
  (void)options;
  return bpt_error(graph ? graph->context : NULL, BPT_ERR_UNSUPPORTED,
                   "bpt_graph_export_onnx: this libbptrain was built without ONNX export (it needs protoc-c, "
                   "libprotobuf-c and onnx.proto: apt-get install protobuf-c-compiler libprotobuf-c-dev libonnx-dev, "
                   "then reconfigure with -DBPT_WITH_ONNX=ON)");
}
