/* Schedule validation shared by schedule.c and the optimiser. */
#ifndef BPT_CORE_SCHEDULE_H
#define BPT_CORE_SCHEDULE_H

#include "bptrain/cnn.h"

/* Checks size and values; the message goes to the thread's error slot (no context here). */
bpt_status bpt_schedule_validate(const bpt_schedule_options *schedule, const char *where);

#endif
