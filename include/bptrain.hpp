// libbptrain's C++17 API: header-only wrappers over the C ABI of bptrain.h, the way onnxruntime_cxx_api.h
// wraps ONNX Runtime's C API. Handles are move-only owners whose destructors call the matching destroy
// function; a failed call throws bpt::error carrying the status and the context's message. Nothing here is
// compiled into the library, so the ABI stays the C one; .get() hands any wrapper to a C call not wrapped here.
#ifndef BPTRAIN_HPP
#define BPTRAIN_HPP

#if __cplusplus < 201703L
#error "bptrain.hpp needs C++17 (-std=c++17); the C headers (bptrain.h) compile as C++11"
#endif

#include <bptrain.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bpt {

/** A failed libbptrain call: what() is "call: message (status name)"; status() is the C status code. */
class error : public std::runtime_error {
public:
  /** Builds the error of @p call that returned @p status, with @p message from the context; what() is
   *  "call: message (status)", the call written once when the message already begins with it. */
  error(bpt_status status, std::string_view call, std::string_view message)
      : std::runtime_error(describe(status, call, message)), status_(status), message_(message) {}
  /** The status the C call returned. */
  bpt_status status() const noexcept { return status_; }
  /** The context's last error message, as the library wrote it. */
  const std::string &message() const noexcept { return message_; }

private:
  static std::string describe(bpt_status status, std::string_view call, std::string_view message) {
    const std::string prefix = std::string(call) + ": ";
    const bool named = message.substr(0, prefix.size()) == prefix;
    return (named ? "" : prefix) + std::string(message) + " (" + bpt_status_string(status) + ")";
  }
  bpt_status status_;
  std::string message_;
};

/** Throws bpt::error when @p status is not BPT_OK; @p context (may be null) supplies the message. */
inline void check(const bpt_context *context, bpt_status status, std::string_view call) {
  if (status != BPT_OK) {
    const char *message = bpt_context_last_error(context);
    throw error(status, call, message ? message : "");
  }
}

/** A move-only owner of one C handle, released with @p Destroy; the base of every wrapper here. */
template <typename T, void (*Destroy)(T *)> class handle {
public:
  handle() noexcept = default;
  /** Takes ownership of @p raw (may be null). */
  explicit handle(T *raw) noexcept : raw_(raw) {}
  handle(const handle &) = delete;
  handle &operator=(const handle &) = delete;
  handle(handle &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
  handle &operator=(handle &&other) noexcept {
    if (this != &other) reset(std::exchange(other.raw_, nullptr));
    return *this;
  }
  ~handle() { reset(); }
  /** The C handle, still owned by this object. */
  T *get() const noexcept { return raw_; }
  /** Gives up ownership: the caller destroys the returned handle. */
  T *release() noexcept { return std::exchange(raw_, nullptr); }
  /** Destroys the owned handle (if any) and owns @p raw instead. */
  void reset(T *raw = nullptr) noexcept {
    T *old = std::exchange(raw_, raw);
    if (old) Destroy(old);
  }
  /** Whether a handle is owned. */
  explicit operator bool() const noexcept { return raw_ != nullptr; }

private:
  T *raw_ = nullptr;
};

/** A bpt_context: backend, threads, seed and the last error message. Outlives what is made from it. */
class context : public handle<bpt_context, bpt_context_destroy> {
public:
  /** The defaults of bpt_context_options_default(): CPU, all cores, seed 42. */
  context() : context(bpt_context_options_default()) {}
  /** A context with @p options (bpt_context_options_default() with fields changed). */
  explicit context(const bpt_context_options &options) {
    bpt_context *raw = nullptr;
    check(nullptr, bpt_context_create(&options, &raw), "bpt_context_create");
    reset(raw);
  }
};

/** A bpt_tensor owned by the caller: one batch in, or values read out. */
class tensor : public handle<bpt_tensor, bpt_tensor_destroy> {
public:
  tensor() noexcept = default;
  /** A tensor of @p dtype and shape @p dims in @p owner. */
  tensor(const context &owner, bpt_dtype dtype, std::initializer_list<int64_t> dims) {
    std::vector<int64_t> shape(dims);
    bpt_tensor *raw = nullptr;
    check(owner.get(), bpt_tensor_create(owner.get(), dtype, static_cast<int>(shape.size()), shape.data(), &raw),
          "bpt_tensor_create");
    reset(raw);
  }
  /** Extent of dimension @p axis. */
  int64_t dim(int axis) const { return bpt_tensor_dim(get(), axis); }
  /** The values, typed: T must match the dtype (float for f32, int32_t for i32). */
  template <typename T> T *data() const { return static_cast<T *>(bpt_tensor_data(get())); }
};

/** A bpt_dataset: images and labels in memory, shuffled and cut into batches. */
class dataset : public handle<bpt_dataset, bpt_dataset_destroy> {
public:
  dataset() noexcept = default;
  /** Loads the IDX files of @p split ("train", "t10k") from @p directory. */
  dataset(const context &owner, const std::string &directory, const std::string &split) : context_(owner.get()) {
    bpt_dataset *raw = nullptr;
    check(context_, bpt_dataset_load_idx_directory(context_, directory.c_str(), split.c_str(), &raw),
          "bpt_dataset_load_idx_directory");
    reset(raw);
  }
  /** Number of samples. */
  int64_t size() const { return bpt_dataset_size(get()); }
  /** Values per sample. */
  int64_t sample_size() const { return bpt_dataset_sample_size(get()); }
  /** Batches of @p batch_size per epoch, the last one partial. */
  int64_t batch_count(int64_t batch_size) const { return bpt_dataset_batch_count(get(), batch_size); }
  /** Reorders the samples from @p seed. */
  void shuffle(uint64_t seed) { check(context_, bpt_dataset_shuffle(get(), seed), "bpt_dataset_shuffle"); }
  /** Copies batch @p index into @p images and @p labels (resized to the batch's rows). */
  void batch(int64_t index, int64_t batch_size, tensor &images, tensor &labels) {
    check(context_, bpt_dataset_batch(get(), index, batch_size, images.get(), labels.get()), "bpt_dataset_batch");
  }
  /** The class count, checked against every label of this set and of @p test (0 @p requested: from the labels). */
  int check_classes(const dataset &test, int requested = 0) const {
    int classes = 0;
    check(context_, bpt_dataset_check_classes(get(), test.get(), requested, &classes), "bpt_dataset_check_classes");
    return classes;
  }

private:
  bpt_context *context_ = nullptr;
};

/** A bpt_graph: build it with the node functions, compile it, then run forward and backward per batch. The
 *  graph owns its nodes; bpt_node pointers stay valid while it lives. */
class graph : public handle<bpt_graph, bpt_graph_destroy> {
public:
  graph() noexcept = default;
  /** An empty graph in @p owner. */
  explicit graph(const context &owner) : context_(owner.get()) {
    bpt_graph *raw = nullptr;
    check(context_, bpt_graph_create(context_, &raw), "bpt_graph_create");
    reset(raw);
  }
  /** The context the graph was made in (for error messages of calls made through get()). */
  bpt_context *owner() const noexcept { return context_; }
  /** An input of @p dtype with per-sample shape @p sample_dims. */
  bpt_node *input(const std::string &name, bpt_dtype dtype, std::initializer_list<int64_t> sample_dims) {
    std::vector<int64_t> shape(sample_dims);
    bpt_node *node = nullptr;
    check(context_,
          bpt_graph_input(get(), name.c_str(), dtype, static_cast<int>(shape.size()),
                          shape.empty() ? nullptr : shape.data(), &node),
          "bpt_graph_input");
    return node;
  }
  /** A fully connected layer (weight and bias named after @p name). */
  bpt_node *linear(const std::string &name, bpt_node *x, int64_t units, bpt_initializer init = BPT_INIT_HE_UNIFORM) {
    bpt_node *node = nullptr;
    check(context_, bpt_layer_linear(get(), name.c_str(), x, units, init, &node), "bpt_layer_linear");
    return node;
  }
  /** max(x, 0). */
  bpt_node *relu(const std::string &name, bpt_node *x) {
    bpt_node *node = nullptr;
    check(context_, bpt_relu(get(), name.c_str(), x, &node), "bpt_relu");
    return node;
  }
  /** The mean softmax cross-entropy of @p logits against integer @p labels. */
  bpt_node *softmax_cross_entropy(const std::string &name, bpt_node *logits, bpt_node *labels) {
    bpt_node *node = nullptr;
    check(context_, bpt_softmax_cross_entropy(get(), name.c_str(), logits, labels, &node), "bpt_softmax_cross_entropy");
    return node;
  }
  /** Infers shapes, plans memory and picks kernels for batches up to @p max_batch. */
  void compile(bpt_node *loss, int64_t max_batch) {
    check(context_, bpt_graph_compile(get(), loss, max_batch), "bpt_graph_compile");
  }
  /** Feeds @p values to @p input for the next forward. */
  void set_input(bpt_node *input, const tensor &values) {
    check(context_, bpt_graph_set_input(get(), input, values.get()), "bpt_graph_set_input");
  }
  /** Runs the forward pass. */
  void forward() { check(context_, bpt_graph_forward(get()), "bpt_graph_forward"); }
  /** Runs the backward pass (gradients of the loss). */
  void backward() { check(context_, bpt_graph_backward(get()), "bpt_graph_backward"); }
  /** The loss of the last forward. */
  float loss() const {
    float value = 0.0f;
    check(context_, bpt_graph_loss(get(), &value), "bpt_graph_loss");
    return value;
  }
  /** Saves the parameters as a checkpoint at @p path. */
  void save(const std::string &path) {
    check(context_, bpt_checkpoint_save(get(), path.c_str(), nullptr), "bpt_checkpoint_save");
  }
  /** Loads parameters (matched by name and shape) from the checkpoint at @p path. */
  void load(const std::string &path, bool strict = true) {
    bpt_checkpoint_load_options options = bpt_checkpoint_load_options_default();
    options.strict = strict ? 1 : 0;
    check(context_, bpt_checkpoint_load_with_options(get(), path.c_str(), nullptr, &options, nullptr),
          "bpt_checkpoint_load_with_options");
  }
  /** Loss, accuracy and top-k of @p data in evaluation mode (bpt_evaluate). */
  bpt_eval_result evaluate(const dataset &data, const bpt_eval_options &options = bpt_eval_options_default()) {
    bpt_eval_result result{};
    result.size = sizeof result;
    check(context_, bpt_evaluate(get(), data.get(), &options, &result), "bpt_evaluate");
    return result;
  }

private:
  bpt_context *context_ = nullptr;
};

/** A bpt_optimizer over a compiled graph's parameters; destroy it before the graph. */
class optimizer : public handle<bpt_optimizer, bpt_optimizer_destroy> {
public:
  optimizer() noexcept = default;
  /** An optimiser for @p model with @p options (bpt_optimizer_options_default() with fields changed). */
  optimizer(graph &model, const bpt_optimizer_options &options) : context_(model.owner()) {
    bpt_optimizer *raw = nullptr;
    check(context_, bpt_optimizer_create(model.get(), &options, &raw), "bpt_optimizer_create");
    reset(raw);
  }
  /** One update from the gradients of the last backward. */
  void step() { check(context_, bpt_optimizer_step(get()), "bpt_optimizer_step"); }

private:
  bpt_context *context_ = nullptr;
};

} // namespace bpt

#endif // BPTRAIN_HPP
