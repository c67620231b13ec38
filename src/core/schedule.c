/* Learning-rate schedules as pure functions of the step: linear warm-up, then constant, step decay or
 * cosine annealing (Loshchilov and Hutter 2017, without restarts). The optimiser calls this before each
 * update when a schedule is set, so resuming at step k gives exactly the rate of an unbroken run. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "bptrain/cnn.h"
#include "core/context.h"
#include "core/schedule.h"

bpt_schedule_options bpt_schedule_options_default(void) {
  bpt_schedule_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.kind = BPT_SCHEDULE_CONSTANT;
  options.base_learning_rate = 0.1f;
  options.step_size = 1;
  options.gamma = 0.1f;
  return options;
}

static bpt_status validate(bpt_context *context, const bpt_schedule_options *s, const char *where) {
  if ((unsigned)s->kind > (unsigned)BPT_SCHEDULE_COSINE)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown schedule kind %d", where, (int)s->kind);
  if (!(s->base_learning_rate >= 0.0f) || !isfinite(s->base_learning_rate) || s->warmup_steps < 0 ||
      !(s->warmup_start_factor >= 0.0f && s->warmup_start_factor <= 1.0f))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: base rate %g must be finite and >= 0, warm-up steps %lld >= 0, start factor %g in [0, 1]",
                     where, (double)s->base_learning_rate, (long long)s->warmup_steps, (double)s->warmup_start_factor);
  if (s->kind == BPT_SCHEDULE_STEP && (s->step_size < 1 || !(s->gamma > 0.0f) || !isfinite(s->gamma)))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: step schedule needs step_size >= 1 (%lld) and a finite gamma > 0 (%g)",
                     where, (long long)s->step_size, (double)s->gamma);
  if (s->kind == BPT_SCHEDULE_COSINE &&
      (s->total_steps < 1 || !(s->minimum_learning_rate >= 0.0f) || s->minimum_learning_rate > s->base_learning_rate))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: cosine schedule needs total_steps >= 1 (%lld) and 0 <= minimum (%g) <= base (%g)", where,
                     (long long)s->total_steps, (double)s->minimum_learning_rate, (double)s->base_learning_rate);
  return BPT_OK;
}

/* With a NULL context the message goes to the thread's error slot (bpt_context_last_error(NULL)). */
bpt_status bpt_schedule_validate(bpt_context *context, const bpt_schedule_options *schedule, const char *where) {
  if (!schedule) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: schedule is NULL", where);
  if (schedule->size < offsetof(bpt_schedule_options, minimum_learning_rate) + sizeof(float))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: size field is %zu; initialise options with bpt_schedule_options_default()", where,
                     schedule->size);
  return validate(context, schedule, where);
}

bpt_status bpt_schedule_learning_rate(bpt_context *context, const bpt_schedule_options *s, int64_t step,
                                      float *learning_rate) {
  const char *where = "bpt_schedule_learning_rate";
  BPT_CHECK(bpt_schedule_validate(context, s, where));
  if (step < 0 || !learning_rate)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: step %lld must be >= 0 and the result non-NULL", where,
                     (long long)step);
  const double base = s->base_learning_rate;
  if (step < s->warmup_steps) {
    const double start = base * s->warmup_start_factor;
    *learning_rate = (float)(start + (base - start) * (double)step / (double)s->warmup_steps);
    return BPT_OK;
  }
  const int64_t t = step - s->warmup_steps;
  double rate = base;
  if (s->kind == BPT_SCHEDULE_STEP) {
    const int64_t decays = t / s->step_size;
    rate = base == 0.0 ? 0.0 : base * pow(s->gamma, (double)decays);
    /* gamma > 1 (a growing rate) is allowed, but not past float: the conversion below would be undefined. */
    if (!(rate <= FLT_MAX))
      return bpt_error(context, BPT_ERR_NUMERIC,
                       "%s: step schedule at step %lld: base rate %g x gamma %g ^ %lld exceeds the float range", where,
                       (long long)step, base, (double)s->gamma, (long long)decays);
  } else if (s->kind == BPT_SCHEDULE_COSINE) {
    const double minimum = s->minimum_learning_rate;
    const double progress = t >= s->total_steps ? 1.0 : (double)t / (double)s->total_steps;
    rate = minimum + (base - minimum) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
  }
  *learning_rate = (float)rate;
  return BPT_OK;
}
