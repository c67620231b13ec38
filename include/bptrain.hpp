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
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#endif

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

#if __cplusplus >= 202002L && defined(__cpp_lib_span)
/** A view of contiguous values: std::span under C++20. */
template <typename T> using span = std::span<T>;
#else
/** A view of contiguous values, for C++17: the part of C++20's std::span that the wrappers use (data, size,
 *  indexing, iteration), so code written against bpt::span compiles unchanged under either standard. */
template <typename T> class span {
public:
  constexpr span() noexcept = default;
  /** @p count values from @p data. */
  constexpr span(T *data, std::size_t count) noexcept : data_(data), size_(count) {}
  /** The first value. */
  constexpr T *data() const noexcept { return data_; }
  /** Number of values. */
  constexpr std::size_t size() const noexcept { return size_; }
  /** Whether there is no value. */
  constexpr bool empty() const noexcept { return size_ == 0; }
  /** Value @p index (unchecked, as std::span's). */
  constexpr T &operator[](std::size_t index) const noexcept { return data_[index]; }
  /** Iteration. */
  constexpr T *begin() const noexcept { return data_; }
  /** Iteration. */
  constexpr T *end() const noexcept { return data_ + size_; }

private:
  T *data_ = nullptr;
  std::size_t size_ = 0;
};
#endif

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
  tensor(const context &owner, bpt_dtype dtype, std::initializer_list<int64_t> dims)
      : tensor(owner, dtype, std::vector<int64_t>(dims)) {}
  /** A tensor of @p dtype and a shape known at run time. */
  tensor(const context &owner, bpt_dtype dtype, const std::vector<int64_t> &dims) {
    bpt_tensor *raw = nullptr;
    check(owner.get(),
          bpt_tensor_create(owner.get(), dtype, static_cast<int>(dims.size()), dims.empty() ? nullptr : dims.data(),
                            &raw),
          "bpt_tensor_create");
    reset(raw);
  }
  /** Extent of dimension @p axis. */
  int64_t dim(int axis) const { return bpt_tensor_dim(get(), axis); }
  /** Number of dimensions. */
  int rank() const { return bpt_tensor_rank(get()); }
  /** The shape. */
  std::vector<int64_t> dims() const {
    std::vector<int64_t> shape(static_cast<std::size_t>(rank() > 0 ? rank() : 0));
    for (std::size_t axis = 0; axis < shape.size(); axis++)
      shape[axis] = dim(static_cast<int>(axis));
    return shape;
  }
  /** The element type. */
  bpt_dtype dtype() const { return bpt_tensor_dtype(get()); }
  /** Number of elements (the product of the dims). */
  int64_t count() const { return bpt_tensor_element_count(get()); }
  /** The values, typed: T must match the dtype (float for f32, int32_t for i32). */
  template <typename T> T *data() const { return static_cast<T *>(bpt_tensor_data(get())); }
  /** The values as a span of T; throws bpt::error (BPT_ERR_INVALID_ARGUMENT) when T is not the dtype's type
   *  (float for f32, int32_t for i32), so a wrong type is an error, never a reinterpretation. */
  template <typename T> span<T> values() const {
    if (!get()) throw error(BPT_ERR_INVALID_ARGUMENT, "bpt::tensor::values", "the tensor is empty (moved from?)");
    const bpt_dtype wanted = std::is_same<std::remove_cv_t<T>, float>::value     ? BPT_DTYPE_F32
                             : std::is_same<std::remove_cv_t<T>, int32_t>::value ? BPT_DTYPE_I32
                                                                                 : bpt_dtype(-1);
    if (wanted != dtype())
      throw error(BPT_ERR_INVALID_ARGUMENT, "bpt::tensor::values",
                  std::string("the tensor holds ") + bpt_dtype_name(dtype()) +
                      " values; ask for float (f32) or int32_t (i32) accordingly");
    return span<T>(data<T>(), static_cast<std::size_t>(count()));
  }
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
  /** A sequence input: @p length tokens per sample, each of shape @p token_dims ({} for one id per token). */
  bpt_node *input_sequence(const std::string &name, bpt_dtype dtype, int64_t length,
                           std::initializer_list<int64_t> token_dims = {}) {
    std::vector<int64_t> shape(token_dims);
    bpt_node *node = nullptr;
    check(context_,
          bpt_graph_input_sequence(get(), name.c_str(), dtype, length, static_cast<int>(shape.size()),
                                   shape.empty() ? nullptr : shape.data(), &node),
          "bpt_graph_input_sequence");
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
  /** @p a + @p b with NumPy broadcasting. */
  bpt_node *add(const std::string &name, bpt_node *a, bpt_node *b) {
    bpt_node *node = nullptr;
    check(context_, bpt_add(get(), name.c_str(), a, b, &node), "bpt_add");
    return node;
  }
  /** GELU, tanh form (GPT-2's). */
  bpt_node *gelu_tanh(const std::string &name, bpt_node *x) {
    bpt_node *node = nullptr;
    check(context_, bpt_gelu_tanh(get(), name.c_str(), x, &node), "bpt_gelu_tanh");
    return node;
  }
  /** A token embedding: a (vocabulary, dim) table named "<name>.weight" looked up by i32 @p ids. */
  bpt_node *embedding(const std::string &name, bpt_node *ids, int64_t vocabulary, int64_t dim) {
    bpt_node *node = nullptr;
    check(context_, bpt_layer_embedding(get(), name.c_str(), ids, vocabulary, dim, &node), "bpt_layer_embedding");
    return node;
  }
  /** Layer normalisation over the last axis, with its gain and shift (PyTorch's nn.LayerNorm). */
  bpt_node *layer_norm(const std::string &name, bpt_node *x, float epsilon = 1e-5f) {
    bpt_node *node = nullptr;
    check(context_, bpt_layer_layer_norm(get(), name.c_str(), x, epsilon, &node), "bpt_layer_layer_norm");
    return node;
  }
  /** A pre-norm GPT block on (N, T, C) @p x (bpt_layer_transformer_block(); its defaults when not given). */
  bpt_node *transformer_block(const std::string &name, bpt_node *x,
                              const bpt_transformer_block_options &options = bpt_transformer_block_options_default()) {
    bpt_node *node = nullptr;
    check(context_, bpt_layer_transformer_block(get(), name.c_str(), x, &options, &node),
          "bpt_layer_transformer_block");
    return node;
  }
  /** The mean softmax cross-entropy of @p logits against integer @p labels. */
  bpt_node *softmax_cross_entropy(const std::string &name, bpt_node *logits, bpt_node *labels) {
    bpt_node *node = nullptr;
    check(context_, bpt_softmax_cross_entropy(get(), name.c_str(), logits, labels, &node), "bpt_softmax_cross_entropy");
    return node;
  }
  /** The precision policy (bpt_precision_options_default() with fields changed); call before compile(). */
  void set_precision(const bpt_precision_options &options) {
    check(context_, bpt_graph_set_precision(get(), &options), "bpt_graph_set_precision");
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
  /** @p node's value from the last forward, in a new tensor of the node's dtype and the run's batch
   *  (bpt_graph_read(): values that only forward needed may have been reused; that throws BPT_ERR_STATE). */
  tensor read(const bpt_node *node, bpt_dtype dtype = BPT_DTYPE_F32) {
    std::vector<int64_t> shape(static_cast<std::size_t>(bpt_node_rank(node) > 0 ? bpt_node_rank(node) : 0));
    for (std::size_t axis = 0; axis < shape.size(); axis++)
      shape[axis] = bpt_node_dim(node, static_cast<int>(axis));
    bpt_tensor *raw = nullptr;
    check(context_,
          bpt_tensor_create(context_, dtype, static_cast<int>(shape.size()), shape.empty() ? nullptr : shape.data(),
                            &raw),
          "bpt_tensor_create");
    tensor values;
    values.reset(raw);
    check(context_, bpt_graph_read(get(), node, values.get()), "bpt_graph_read");
    return values;
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
