/* Schedule validation shared by schedule.c and the optimiser. */
#ifndef BPT_CORE_SCHEDULE_H
#define BPT_CORE_SCHEDULE_H

#include "bptrain/cnn.h"

/* Checks size and values; the message goes to the context (the thread's error slot when it is NULL). */
bpt_status bpt_schedule_validate(bpt_context *context, const bpt_schedule_options *schedule, const char *where);

#endif
