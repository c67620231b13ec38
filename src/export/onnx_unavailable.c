/* bpt_graph_export_onnx in a library built without protobuf-c (BPT_WITH_ONNX=OFF, or AUTO without
 * libprotobuf-c-dev and protoc-c): the call exists, so programs link either way, and says what is missing. */
#include "bptrain/onnx.h"
#include "core/graph.h"

bpt_status bpt_graph_export_onnx(bpt_graph *graph, const char *path, const bpt_onnx_export_options *options) {
  (void)path;
  (void)options;
  return bpt_error(graph ? graph->context : NULL, BPT_ERR_UNSUPPORTED,
                   "bpt_graph_export_onnx: this libbptrain was built without ONNX export (it needs protoc-c, "
                   "libprotobuf-c and onnx.proto: apt-get install protobuf-c-compiler libprotobuf-c-dev libonnx-dev, "
                   "then reconfigure with -DBPT_WITH_ONNX=ON)");
}
