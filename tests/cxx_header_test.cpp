// The public headers must compile as C++ (-std=c++11 -pedantic -Werror) and link from a C++ program.
#include "bptrain.h"

#include <cstdio>
#include <cstring>

#if !BPT_VERSION_AT_LEAST(0, 1, 0)
#error "BPT_VERSION_AT_LEAST must work in the C++ preprocessor"
#endif
static_assert(BPT_VERSION_NUMBER >= 100, "BPT_VERSION_NUMBER is a constant expression in C++");

int main() {
  bpt_context *context = nullptr;
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 1;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    std::printf("context: %s\n", bpt_context_last_error(nullptr));
    return 1;
  }
  bpt_graph *graph = nullptr;
  bpt_node *x = nullptr;
  const int64_t features = 3;
  bool ok = bpt_graph_create(context, &graph) == BPT_OK &&
            bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x) == BPT_OK &&
            std::strcmp(bpt_node_name(x), "x") == 0 && std::strcmp(bpt_version(), "0.1.0") == 0 && bpt_version_number() == BPT_VERSION_NUMBER;
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  std::printf("%s\n", ok ? "C++ consumer ok" : "C++ consumer failed");
  return ok ? 0 : 1;
}
