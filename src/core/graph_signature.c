/* The layout fingerprint of a graph and its comparison across ranks (see graph_signature.h). The text
 * description is both what is hashed and what names a difference, so the two can never disagree. */
#include "core/graph_signature.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/op.h"

typedef struct text {
  char *bytes;
  size_t length, capacity;
  bool failed;
} text;

static void append(text *t, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void append(text *t, const char *format, ...) {
  if (t->failed) return;
  for (;;) {
    va_list arguments;
    va_start(arguments, format);
    size_t room = t->capacity - t->length;
    int written = vsnprintf(t->bytes ? t->bytes + t->length : NULL, t->bytes ? room : 0, format, arguments);
    va_end(arguments);
    if (written < 0) {
      t->failed = true;
      return;
    }
    if (t->bytes && (size_t)written < room) {
      t->length += (size_t)written;
      return;
    }
    size_t wanted = t->length + (size_t)written + 1;
    size_t capacity = t->capacity ? t->capacity : 4096;
    while (capacity < wanted) capacity *= 2;
    char *grown = realloc(t->bytes, capacity);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->bytes = grown;
    t->capacity = capacity;
  }
}

static void append_shape(text *t, const bpt_node *node) {
  append(t, "shape (");
  for (int axis = 0; axis < node->rank; axis++) {
    if (axis == 0 && node->batched)
      append(t, "batch");
    else if (axis == 1 && node->sequence)
      append(t, ", sequence %lld", (long long)node->declared_dims[axis]);
    else
      append(t, "%s%lld", axis ? ", " : "", (long long)node->declared_dims[axis]);
  }
  append(t, ")");
}

/* The shortest of %g and %.9g that reads back as the same float: 0.01 stays 0.01, and two slopes that differ
 * in the last bit still describe (and hash) differently. */
static void append_float(text *t, const char *separator, float value) {
  char shortest[32];
  snprintf(shortest, sizeof shortest, "%g", (double)value);
  if (strtof(shortest, NULL) == value)
    append(t, "%s%s", separator, shortest);
  else
    append(t, "%s%.9g", separator, (double)value);
}

static void append_node(text *t, const bpt_node *node) {
  append(t, "node '%s': op %s; dtype %s; ", node->name, bpt_op_get(node->op)->name, bpt_dtype_name(node->dtype));
  append_shape(t, node);
  append(t, "; inputs (");
  for (int i = 0; i < node->input_count; i++)
    append(t, "%s'%s'", i ? ", " : "", node->inputs[i] ? node->inputs[i]->name : "");
  /* Unused attribute slots are zero on every rank: trailing zeros are left out so messages stay short. */
  int ints = BPT_MAX_INT_ATTRIBUTES, floats = BPT_MAX_FLOAT_ATTRIBUTES;
  while (ints > 0 && node->int_attributes[ints - 1] == 0) ints--;
  while (floats > 0 && node->float_attributes[floats - 1] == 0.0f) floats--;
  append(t, "); integer attributes (");
  for (int i = 0; i < ints; i++)
    append(t, "%s%lld", i ? ", " : "", (long long)node->int_attributes[i]);
  append(t, "); float attributes (");
  for (int i = 0; i < floats; i++)
    append_float(t, i ? ", " : "", node->float_attributes[i]);
  append(t, ")\n");
}

bpt_status bpt_graph_signature_describe(const bpt_graph *graph, char **out, size_t *length) {
  text t = {0};
  for (int i = 0; i < graph->parameter_count; i++) {
    const bpt_node *parameter = graph->parameters[i];
    append(&t, "parameter '%s': ", parameter->name);
    append_shape(&t, parameter);
    append(&t, "; offset %lld; dtype %s\n", (long long)parameter->param_offset, bpt_dtype_name(parameter->dtype));
  }
  for (int i = 0; i < graph->node_count; i++)
    append_node(&t, graph->nodes[i]);
  /* Last: any difference here already showed in a line above, which names more. */
  append(&t, "graph 'totals': parameters %d; parameter elements %lld; nodes %d\n", graph->parameter_count,
         (long long)graph->parameter_elements, graph->node_count);
  if (t.failed || !t.bytes) {
    free(t.bytes);
    return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "out of memory describing the graph's layout");
  }
  *out = t.bytes;
  *length = t.length;
  return BPT_OK;
}

uint64_t bpt_graph_signature_hash(const char *bytes, size_t length) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < length; i++) {
    hash ^= (unsigned char)bytes[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

static size_t span(const char *s, const char *stop) {
  const char *end = strstr(s, stop);
  const char *newline = strchr(s, '\n');
  if (!newline) newline = s + strlen(s);
  return end && end < newline ? (size_t)(end - s) : (size_t)(newline - s);
}

/* A field's name: up to " (" when it has a list ("float attributes (0.01)"), else its first word. */
static size_t field_key(const char *field) {
  size_t list = span(field, " ("), word = span(field, " "), end = span(field, "; ");
  return list < end ? list : word;
}

void bpt_graph_signature_first_difference(const char *here, const char *here_label, const char *there,
                                          const char *there_label, char *message, size_t size) {
  /* The first line that differs. */
  while (*here && *there) {
    size_t a = span(here, "\n"), b = span(there, "\n");
    if (a == b && memcmp(here, there, a) == 0) {
      here += a + (here[a] == '\n');
      there += b + (there[b] == '\n');
      continue;
    }
    break;
  }
  if (!*here && !*there) {
    snprintf(message, size, "nowhere (the descriptions are equal)");
    return;
  }
  if (!*here || !*there) {
    const char *extra = *here ? here : there;
    snprintf(message, size, "the end of the layout on %s: %s goes on with %.*s", *here ? there_label : here_label,
             *here ? here_label : there_label, (int)span(extra, "\n"), extra);
    return;
  }
  /* Both lines start "<kind> '<name>': ": name the item, then the first field that differs. */
  size_t head_here = span(here, ": "), head_there = span(there, ": ");
  if (head_here != head_there || memcmp(here, there, head_here) != 0) {
    snprintf(message, size, "%.*s on %s vs %.*s on %s", (int)head_here, here, here_label, (int)head_there, there,
             there_label);
    return;
  }
  const char *field_here = here + head_here + 2, *field_there = there + head_there + 2;
  for (;;) {
    size_t a = span(field_here, "; "), b = span(field_there, "; ");
    if (a != b || memcmp(field_here, field_there, a) != 0) {
      size_t key_here = field_key(field_here), key_there = field_key(field_there);
      if (key_here == key_there && memcmp(field_here, field_there, key_here) == 0 && key_here < a && key_here < b)
        snprintf(message, size, "%.*s: %.*s on %s vs %.*s on %s", (int)head_here, here, (int)a, field_here, here_label,
                 (int)(b - key_there - 1), field_there + key_there + 1, there_label);
      else
        snprintf(message, size, "%.*s: %.*s on %s vs %.*s on %s", (int)head_here, here, (int)a, field_here, here_label,
                 (int)b, field_there, there_label);
      return;
    }
    if (field_here[a] != ';' || field_there[b] != ';') break;
    field_here += a + 2;
    field_there += b + 2;
  }
  snprintf(message, size, "%.*s", (int)head_here, here);
}

/* Rank root's description on every rank (its length first, so receivers can size the buffer). */
static bpt_status share_description(bpt_comm *comm, bpt_context *context, int root, const char *own, size_t own_length,
                                    char **out) {
  uint64_t length = own_length;
  BPT_CHECK(bpt_comm_broadcast(comm, &length, sizeof length, root));
  if (length > ((uint64_t)64 << 20))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "rank %d describes its graph in %llu bytes (over 64 MiB)", root,
                     (unsigned long long)length);
  char *copy = bpt_calloc(context, (size_t)length + 1, 1, "a rank's graph description");
  if (!copy) return BPT_ERR_OUT_OF_MEMORY;
  if (bpt_comm_rank(comm) == root) memcpy(copy, own, (size_t)length);
  bpt_status status = bpt_comm_broadcast(comm, copy, (size_t)length, root);
  if (status != BPT_OK) {
    free(copy);
    return status;
  }
  *out = copy;
  return BPT_OK;
}

bpt_status bpt_graph_signature_check(const bpt_graph *graph, bpt_comm *comm, const char *where) {
  int size = bpt_comm_size(comm), rank = bpt_comm_rank(comm);
  if (size <= 1) return BPT_OK;
  bpt_context *context = graph->context;
  char *own = NULL, *first = NULL, *other = NULL;
  float *differs = NULL;
  size_t length = 0;
  bpt_status status = bpt_graph_signature_describe(graph, &own, &length);
  /* Hashes first (rank 0's against each rank's own); descriptions only when some rank differs. */
  uint64_t hash = status == BPT_OK ? bpt_graph_signature_hash(own, length) : 0, root_hash = hash;
  if (status == BPT_OK) status = bpt_comm_broadcast(comm, &root_hash, sizeof root_hash, 0);
  if (status == BPT_OK && !(differs = bpt_calloc(context, (size_t)size, sizeof *differs, "layout agreement flags")))
    status = BPT_ERR_OUT_OF_MEMORY;
  if (status == BPT_OK) {
    differs[rank] = hash != root_hash ? 1.0f : 0.0f;
    status = bpt_comm_allreduce(comm, differs, size, BPT_DTYPE_F32, BPT_REDUCE_SUM);
  }
  int odd = -1, count = 0;
  for (int r = 0; status == BPT_OK && r < size; r++)
    if (differs[r] != 0.0f) {
      if (odd < 0) odd = r;
      count++;
    }
  if (status == BPT_OK && odd > 0) status = share_description(comm, context, 0, own, length, &first);
  if (status == BPT_OK && odd > 0) status = share_description(comm, context, odd, own, length, &other);
  if (status == BPT_OK && odd > 0) {
    char difference[BPT_ERROR_MESSAGE_SIZE], label[32];
    snprintf(label, sizeof label, "rank %d", odd);
    bpt_graph_signature_first_difference(other, label, first, "rank 0", difference, sizeof difference);
    status = bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                       "%s: rank %d differs from rank 0 at %s (%d of %d ranks differ from rank 0); every rank must "
                       "build the same model",
                       where, odd, difference, count, size);
  }
  free(own);
  free(first);
  free(other);
  free(differs);
  return status;
}
