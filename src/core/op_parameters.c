/* Typed op parameters and run-time state (issue 24): the one validator of a node's parameters against its op's
 * declaration (src/core/ops/<op>.c), the by-name lookups checkpoints and exporters use, and the text graph
 * printing shows. The slots themselves stay the node's attribute arrays, which the kernels read. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/graph.h"

static int value_length(const bpt_param_decl *parameter) { return parameter->length > 0 ? parameter->length : 1; }

static bool is_float(bpt_op_value_type type) { return type == BPT_OP_VALUE_FLOAT; }

double bpt_node_parameter_value(const bpt_node *node, const bpt_param_decl *parameter, int element) {
  const int slot = parameter->slot + element;
  return is_float(parameter->type) ? (double)node->float_attributes[slot] : (double)node->int_attributes[slot];
}

double bpt_node_state_value(const bpt_node *node, const bpt_state_decl *state) {
  return is_float(state->type) ? (double)node->float_state[state->slot] : (double)node->int_state[state->slot];
}

void bpt_node_set_state_value(bpt_node *node, const bpt_state_decl *state, double value) {
  if (is_float(state->type))
    node->float_state[state->slot] = (float)value;
  else
    node->int_state[state->slot] = (int64_t)value;
}

const bpt_param_decl *bpt_node_find_parameter(const bpt_node *node, const char *name) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  for (int i = 0; i < definition->parameter_count; i++)
    if (strcmp(definition->parameters[i].name, name) == 0) return &definition->parameters[i];
  return NULL;
}

double bpt_node_float_parameter(const bpt_node *node, const char *name) {
  const bpt_param_decl *parameter = bpt_node_find_parameter(node, name);
  return parameter && is_float(parameter->type) ? (double)node->float_attributes[parameter->slot] : NAN;
}

int64_t bpt_node_int_parameter(const bpt_node *node, const char *name, int element) {
  const bpt_param_decl *parameter = bpt_node_find_parameter(node, name);
  if (!parameter || is_float(parameter->type) || element < 0 || element >= value_length(parameter)) return 0;
  return node->int_attributes[parameter->slot + element];
}

bpt_status bpt_node_set_parameter(bpt_node *node, const char *name, int64_t value) {
  const bpt_param_decl *parameter = bpt_node_find_parameter(node, name);
  if (!parameter || is_float(parameter->type))
    return bpt_node_error(node, BPT_ERR_INTERNAL, "op %s declares no integer parameter '%s'",
                          bpt_op_get(node->op)->name, name);
  node->int_attributes[parameter->slot] = value;
  return BPT_OK;
}

const bpt_state_decl *bpt_node_find_state(const bpt_node *node, const char *name) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  for (int i = 0; i < definition->state_count; i++)
    if (strcmp(definition->state[i].name, name) == 0) return &definition->state[i];
  return NULL;
}

/* "label smoothing" for label_smoothing: the wording the ops' messages always had. */
static void spoken_name(const char *name, char *buffer, size_t size) {
  snprintf(buffer, size, "%s", name);
  for (char *c = buffer; *c; c++)
    if (*c == '_') *c = ' ';
}

/* " (parameter 'label_smoothing')" when the spoken name differs from the declared one, else "". */
static const char *declared_name(const char *name, char *buffer, size_t size) {
  buffer[0] = 0;
  if (strchr(name, '_')) snprintf(buffer, size, " (parameter '%s')", name);
  return buffer;
}

static void format_bound(double bound, char *buffer, size_t size) {
  if (bound >= 2147483647.0 && bound == floor(bound) && bound < 2147483648.0)
    snprintf(buffer, size, "2^31 - 1");
  else
    snprintf(buffer, size, "%g", bound);
}

static bpt_status out_of_range(const bpt_node *node, const bpt_param_decl *parameter, int element, double value) {
  char name[BPT_NAME_SIZE + 8], low[32], high[32], where[16] = "", declared[BPT_NAME_SIZE + 24];
  spoken_name(parameter->name, name, sizeof name);
  declared_name(parameter->name, declared, sizeof declared);
  if (value_length(parameter) > 1) snprintf(where, sizeof where, "[%d]", element);
  const bool floating = is_float(parameter->type);
  format_bound(parameter->minimum, low, sizeof low);
  format_bound(parameter->maximum, high, sizeof high);
  char shown[48];
  /* Integers are printed from their slot: the double they are compared as may not convert back (INT64_MAX). */
  if (floating)
    snprintf(shown, sizeof shown, "%g", value);
  else
    snprintf(shown, sizeof shown, "%lld", (long long)node->int_attributes[parameter->slot + element]);
  /* One-sided and unbounded float ranges read as the ops' own checks always did. */
  if (floating && isinf(parameter->maximum) && isinf(parameter->minimum))
    return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT, "%s%s %s must be finite%s", name, where, shown, declared);
  if (floating && isinf(parameter->maximum))
    return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT, "%s%s %s must be finite and %s %s%s", name, where, shown,
                          parameter->minimum_open ? ">" : ">=", low, declared);
  const char *names = "";
  char listed[160] = "";
  if (parameter->type == BPT_OP_VALUE_ENUM && parameter->enum_names) {
    size_t used = (size_t)snprintf(listed, sizeof listed, " (");
    for (int i = 0; i <= (int)parameter->maximum && used < sizeof listed; i++)
      used +=
          (size_t)snprintf(listed + used, sizeof listed - used, "%s%d %s", i ? ", " : "", i, parameter->enum_names[i]);
    if (used < sizeof listed) snprintf(listed + used, sizeof listed - used, ")");
    names = listed;
  }
  return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT, "%s%s %s is outside %s%s, %s%s%s%s", name, where, shown,
                        floating && parameter->minimum_open ? "(" : "[", low, high,
                        floating && parameter->maximum_open ? ")" : "]", names, declared);
}

static bool in_range(const bpt_param_decl *parameter, double value) {
  if (is_float(parameter->type) && !isfinite(value)) return false;
  if (parameter->minimum_open ? !(value > parameter->minimum) : !(value >= parameter->minimum)) return false;
  if (parameter->maximum_open ? !(value < parameter->maximum) : !(value <= parameter->maximum)) return false;
  return true;
}

bpt_status bpt_node_check_parameters(const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  bool int_declared[BPT_MAX_INT_ATTRIBUTES] = {false}, float_declared[BPT_MAX_FLOAT_ATTRIBUTES] = {false};
  for (int i = 0; i < definition->parameter_count; i++) {
    const bpt_param_decl *parameter = &definition->parameters[i];
    for (int e = 0; e < value_length(parameter); e++) {
      if (is_float(parameter->type))
        float_declared[parameter->slot + e] = true;
      else
        int_declared[parameter->slot + e] = true;
      const double value = bpt_node_parameter_value(node, parameter, e);
      if (parameter->type == BPT_OP_VALUE_BOOL && value != 0.0 && value != 1.0) {
        char name[BPT_NAME_SIZE + 8], declared[BPT_NAME_SIZE + 24];
        spoken_name(parameter->name, name, sizeof name);
        return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT, "%s %lld must be 0 or 1%s", name,
                              (long long)node->int_attributes[parameter->slot + e],
                              declared_name(parameter->name, declared, sizeof declared));
      }
      if (!in_range(parameter, value)) return out_of_range(node, parameter, e, value);
    }
  }
  /* A builder writing a slot its op does not declare is a library bug: the value would be neither checked,
   * printed nor saved. */
  for (int a = 0; a < BPT_MAX_INT_ATTRIBUTES; a++)
    if (!int_declared[a] && node->int_attributes[a] != 0)
      return bpt_node_error(node, BPT_ERR_INTERNAL, "integer attribute slot %d is set but not a declared parameter", a);
  for (int a = 0; a < BPT_MAX_FLOAT_ATTRIBUTES; a++)
    if (!float_declared[a] && node->float_attributes[a] != 0.0f)
      return bpt_node_error(node, BPT_ERR_INTERNAL, "float attribute slot %d is set but not a declared parameter", a);
  return BPT_OK;
}

static size_t append_value(char *buffer, size_t size, size_t used, const bpt_param_decl *parameter, double value) {
  if (used >= size) return used;
  int written;
  if (is_float(parameter->type))
    written = snprintf(buffer + used, size - used, "%g", value);
  else if (parameter->type == BPT_OP_VALUE_BOOL)
    written = snprintf(buffer + used, size - used, "%s", value != 0.0 ? "true" : "false");
  else if (parameter->type == BPT_OP_VALUE_ENUM && parameter->enum_names && value >= 0.0 && value <= parameter->maximum)
    written = snprintf(buffer + used, size - used, "%s", parameter->enum_names[(int)value]);
  else
    written = snprintf(buffer + used, size - used, "%lld", (long long)value);
  return written > 0 ? used + (size_t)written : used;
}

const char *bpt_node_parameters_string(const bpt_node *node, char *buffer, size_t size) {
  if (!size) return buffer;
  buffer[0] = 0;
  const bpt_op_definition *definition = bpt_op_get(node->op);
  size_t used = 0;
  for (int i = 0; i < definition->parameter_count && used < size; i++) {
    const bpt_param_decl *parameter = &definition->parameters[i];
    int written = snprintf(buffer + used, size - used, "%s%s=", i ? ", " : "", parameter->name);
    if (written > 0) used += (size_t)written;
    const int length = value_length(parameter);
    if (length > 1 && used < size) {
      written = snprintf(buffer + used, size - used, "[");
      if (written > 0) used += (size_t)written;
    }
    for (int e = 0; e < length && used < size; e++) {
      if (e) {
        written = snprintf(buffer + used, size - used, ", ");
        if (written > 0) used += (size_t)written;
      }
      used = append_value(buffer, size, used, parameter, bpt_node_parameter_value(node, parameter, e));
    }
    if (length > 1 && used < size) {
      written = snprintf(buffer + used, size - used, "]");
      if (written > 0) used += (size_t)written;
    }
  }
  return buffer;
}
