/* The profiler's private state, shared by profiler.c (recording) and profiler_report.c (summary, trace). */
#ifndef BPT_CORE_PROFILER_STATE_H
#define BPT_CORE_PROFILER_STATE_H

#include <pthread.h>
#include <stdbool.h>

#include "core/profiler.h"

#define PROFILER_NAME_SIZE 64
#define PROFILER_MAX_EVENTS (1u << 21) /* 80 MiB of events; statistics keep counting after that */

typedef struct profile_statistic {
  bpt_profile_phase phase;
  char name[PROFILER_NAME_SIZE];
  char kind[PROFILER_NAME_SIZE];
  uint64_t calls, total_ns, min_ns, max_ns;
  double bytes, flops;
} profile_statistic;

typedef struct profile_event {
  uint32_t statistic;
  uint32_t step;
  uint64_t start_ns, duration_ns;
  double bytes, flops;
} profile_event;

struct bpt_profiler {
  _Atomic bool enabled; /* read without the lock by the hooks, possibly from the comm thread */
  pthread_mutex_t lock;
  uint64_t origin_ns;
  uint32_t step;
  profile_statistic *statistics;
  size_t statistic_count, statistic_capacity;
  uint32_t *slots; /* open addressing: statistic index + 1, 0 for empty; capacity is a power of two */
  size_t slot_capacity;
  profile_event *events;
  size_t event_count, event_capacity;
  uint64_t dropped_events;
};

#endif
