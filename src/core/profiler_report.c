/* The profiler's two outputs: a text summary sorted by time and a Chrome trace event file
 * (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU, "X" complete events). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_io.h"
#include "core/profiler_state.h"

static const char *const phase_names[BPT_PROFILE_PHASE_COUNT] = {"forward", "backward", "optimizer", "comm"};

/* snprintf that appends and keeps counting past the end, so the caller learns the full length. */
typedef struct text {
  char *buffer;
  size_t size, length;
} text;

__attribute__((format(printf, 2, 3))) static void append(text *out, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  size_t room = out->length < out->size ? out->size - out->length : 0;
  int written = vsnprintf(room ? out->buffer + out->length : NULL, room, format, arguments);
  va_end(arguments);
  if (written > 0) out->length += (size_t)written;
}

static int by_total_time(const void *a, const void *b) {
  const profile_statistic *x = *(const profile_statistic *const *)a, *y = *(const profile_statistic *const *)b;
  return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : strcmp(x->name, y->name);
}

size_t bpt_profiler_summary(const bpt_context *context, char *buffer, size_t size) {
  text out = {.buffer = buffer, .size = buffer ? size : 0};
  if (out.size) buffer[0] = 0;
  bpt_profiler *profiler = context ? context->profiler : NULL;
  if (!profiler || profiler->statistic_count == 0) {
    append(&out, "profile: nothing recorded (enable it with bpt_profiler_enable)\n");
    return out.length;
  }
  pthread_mutex_lock(&profiler->lock);
  size_t count = profiler->statistic_count;
  const profile_statistic **sorted = malloc(count * sizeof *sorted);
  if (!sorted) {
    pthread_mutex_unlock(&profiler->lock);
    append(&out, "profile: out of memory sorting %zu rows\n", count);
    return out.length;
  }
  double phase_ns[BPT_PROFILE_PHASE_COUNT] = {0}, total_ns = 0.0;
  for (size_t i = 0; i < count; i++) {
    sorted[i] = &profiler->statistics[i];
    phase_ns[sorted[i]->phase] += (double)sorted[i]->total_ns;
    total_ns += (double)sorted[i]->total_ns;
  }
  qsort(sorted, count, sizeof *sorted, by_total_time);

  uint32_t steps = profiler->step;
  if (steps) {
    append(&out, "profile: %u steps, %.3f ms per step:", steps, total_ns / steps / 1e6);
    for (int p = 0; p < BPT_PROFILE_PHASE_COUNT; p++)
      append(&out, " %s %.3f", phase_names[p], phase_ns[p] / steps / 1e6);
    append(&out, " ms (forward includes evaluation passes)\n");
  } else {
    append(&out, "profile: no optimiser step yet, %.3f ms recorded\n", total_ns / 1e6);
  }
  append(&out, "%-9s  %-22s  %-24s  %8s  %10s  %10s  %6s  %9s  %8s\n", "phase", "op", "node", "calls", "total ms",
         "mean us", "%", "GFLOP/s", "GB/s");
  for (size_t i = 0; i < count; i++) {
    const profile_statistic *row = sorted[i];
    double seconds = (double)row->total_ns / 1e9;
    append(&out, "%-9s  %-22.22s  %-24.24s  %8llu  %10.3f  %10.1f  %6.2f  ", phase_names[row->phase], row->kind,
           row->name, (unsigned long long)row->calls, (double)row->total_ns / 1e6,
           (double)row->total_ns / 1e3 / (double)row->calls,
           total_ns > 0 ? 100.0 * (double)row->total_ns / total_ns : 0.0);
    if (row->flops > 0 && seconds > 0)
      append(&out, "%9.2f  ", row->flops / seconds / 1e9);
    else
      append(&out, "%9s  ", "-");
    if (row->bytes > 0 && seconds > 0)
      append(&out, "%8.2f\n", row->bytes / seconds / 1e9);
    else
      append(&out, "%8s\n", "-");
  }
  if (profiler->dropped_events)
    append(&out, "(trace holds the first %zu events; %llu later ones are only in this table)\n", profiler->event_count,
           (unsigned long long)profiler->dropped_events);
  pthread_mutex_unlock(&profiler->lock);
  free(sorted);
  return out.length;
}

static void write_json_string(FILE *file, const char *value) {
  fputc('"', file);
  for (const unsigned char *c = (const unsigned char *)value; *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(file, "\\%c", *c);
    else if (*c < 0x20)
      fprintf(file, "\\u%04x", *c);
    else
      fputc(*c, file);
  }
  fputc('"', file);
}

/* Chrome's "ts" and "dur" are microseconds; fractions keep nanosecond resolution. */
static void write_events(FILE *file, const bpt_profiler *profiler) {
  fprintf(file, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  fprintf(file, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"libbptrain\"}}");
  fprintf(file, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"steps\"}}");
  for (int p = 0; p < BPT_PROFILE_PHASE_COUNT; p++)
    fprintf(file, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", p + 1,
            phase_names[p]);
  /* One "step N" span per step, from its first event's start to its last event's end. */
  size_t first = 0;
  while (first < profiler->event_count) {
    uint32_t step = profiler->events[first].step;
    uint64_t begin = profiler->events[first].start_ns, end = begin;
    size_t last = first;
    for (; last < profiler->event_count && profiler->events[last].step == step; last++) {
      const profile_event *event = &profiler->events[last];
      if (event->start_ns < begin) begin = event->start_ns;
      if (event->start_ns + event->duration_ns > end) end = event->start_ns + event->duration_ns;
    }
    fprintf(file,
            ",\n{\"name\":\"step %u\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f}",
            step, (double)begin / 1e3, (double)(end - begin) / 1e3);
    first = last;
  }
  for (size_t i = 0; i < profiler->event_count; i++) {
    const profile_event *event = &profiler->events[i];
    const profile_statistic *statistic = &profiler->statistics[event->statistic];
    fprintf(file, ",\n{\"name\":");
    write_json_string(file, statistic->name);
    fprintf(file, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":",
            phase_names[statistic->phase], (int)statistic->phase + 1, (double)event->start_ns / 1e3,
            (double)event->duration_ns / 1e3);
    write_json_string(file, statistic->kind);
    fprintf(file, ",\"step\":%u,\"bytes\":%.0f,\"flops\":%.0f}}", event->step, event->bytes, event->flops);
  }
  fprintf(file, "\n]}\n");
}

bpt_status bpt_profiler_write_trace(bpt_context *context, const char *path) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_profiler_write_trace: context is NULL");
  if (!path || !path[0])
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_profiler_write_trace: path is NULL or empty");
  bpt_profiler *profiler = context->profiler;
  if (!profiler)
    return bpt_error(context, BPT_ERR_STATE,
                     "bpt_profiler_write_trace: nothing recorded; call bpt_profiler_enable first");
  /* Not fopen: a FIFO at path would block it forever; this refuses anything but a regular file. */
  int descriptor;
  BPT_CHECK(bpt_file_open_for_writing(context, path, "bpt_profiler_write_trace: trace file", &descriptor));
  FILE *file = fdopen(descriptor, "w");
  if (!file) {
    close(descriptor);
    return bpt_error(context, BPT_ERR_IO, "bpt_profiler_write_trace: cannot open '%s' for writing", path);
  }
  pthread_mutex_lock(&profiler->lock);
  write_events(file, profiler);
  pthread_mutex_unlock(&profiler->lock);
  bool failed = ferror(file) != 0;
  failed |= fclose(file) != 0;
  if (failed) return bpt_error(context, BPT_ERR_IO, "bpt_profiler_write_trace: writing '%s' failed", path);
  return BPT_OK;
}
