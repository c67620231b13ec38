/* Process limits (issue 18, classes 3 and 4): a training run in a child process under a thread limit
 * (RLIMIT_NPROC as an unprivileged user), a huge OpenMP stack size or an address-space limit (RLIMIT_AS)
 * must end in a status or a success, in bounded time: never libgomp's exit(1) on "Thread creation
 * failed", never OpenBLAS's endless retry of a buffer it cannot map.
 *
 * Each case re-executes this program in a fresh child (so that libgomp reads the child's environment)
 * with "--case" arguments; the child trains a small MLP and a convolution for two steps and prints one
 * "result" line. The parent kills a child still running after 20 s and fails the test. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif

enum { CHILD_SECONDS = 20 };

/* ---- The child: one training run, reported on stdout ------------------------------------------------ */

static long child_vm_size_kib(void) {
  FILE *file = fopen("/proc/self/status", "r");
  if (!file) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, file))
    if (strncmp(line, "VmSize:", 7) == 0) kib = atol(line + 7);
  fclose(file);
  return kib;
}

/* Builds x (3, 16, 16) -> conv 8 3x3 -> relu -> flatten -> fc 256 -> relu -> fc 10 -> cross-entropy and runs
 * forward, backward and an Adam step twice. Returns the first failing status. */
static bpt_status child_train(bpt_context *context, const char **stage) {
  bpt_graph *graph = NULL;
  bpt_optimizer *optimizer = NULL;
  bpt_tensor *images = NULL, *labels = NULL;
  bpt_node *x, *y, *h, *loss;
  int64_t image_dims[3] = {3, 16, 16}, batch_image_dims[4] = {64, 3, 16, 16}, label_dims[1] = {64};
  bpt_status status;
#define CHILD_STEP(what, call)                                                                                         \
  do {                                                                                                                 \
    *stage = what;                                                                                                     \
    if ((status = (call)) != BPT_OK) goto done;                                                                        \
  } while (0)
  CHILD_STEP("graph", bpt_graph_create(context, &graph));
  CHILD_STEP("graph", bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image_dims, &x));
  CHILD_STEP("graph", bpt_graph_input(graph, "y", BPT_DTYPE_I32, 0, NULL, &y));
  CHILD_STEP("graph", bpt_layer_conv2d(graph, "conv", x, 8, 3, 1, 1, 1, &h));
  CHILD_STEP("graph", bpt_relu(graph, "conv.relu", h, &h));
  CHILD_STEP("graph", bpt_flatten(graph, "flatten", h, &h));
  CHILD_STEP("graph", bpt_layer_linear(graph, "fc1", h, 256, BPT_INIT_HE_NORMAL, &h));
  CHILD_STEP("graph", bpt_relu(graph, "fc1.relu", h, &h));
  CHILD_STEP("graph", bpt_layer_linear(graph, "fc2", h, 10, BPT_INIT_XAVIER_NORMAL, &h));
  CHILD_STEP("graph", bpt_softmax_cross_entropy(graph, "loss", h, y, &loss));
  CHILD_STEP("compile", bpt_graph_compile(graph, loss, 64));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_ADAM;
  CHILD_STEP("optimizer", bpt_optimizer_create(graph, &options, &optimizer));
  CHILD_STEP("tensors", bpt_tensor_create(context, BPT_DTYPE_F32, 4, batch_image_dims, &images));
  CHILD_STEP("tensors", bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &labels));
  test_random random;
  test_random_seed(&random, 5);
  test_random_fill(&random, bpt_tensor_data(images), bpt_tensor_element_count(images), -1.0f, 1.0f);
  for (int n = 0; n < 64; n++)
    ((int32_t *)bpt_tensor_data(labels))[n] = n % 10;
  for (int step = 0; step < 2; step++) {
    CHILD_STEP("set_input", bpt_graph_set_input(graph, x, images));
    CHILD_STEP("set_input", bpt_graph_set_input(graph, y, labels));
    CHILD_STEP("forward", bpt_graph_forward(graph));
    CHILD_STEP("backward", bpt_graph_backward(graph));
    CHILD_STEP("step", bpt_optimizer_step(optimizer));
  }
  *stage = "done";
#undef CHILD_STEP
done:
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  return status;
}

typedef struct child_training {
  bpt_context *context;
  const char *stage;
  bpt_status status;
} child_training;

static void *child_train_thread(void *argument) {
  child_training *training = argument;
  training->status = child_train(training->context, &training->stage);
  return NULL;
}

/* argv: --case THREADS AS_EXTRA_MIB [thread]: AS_EXTRA_MIB negative sets no address-space limit; "thread"
 * trains on a second host thread, which has no OpenMP pool of its own yet. */
static int child_main(int argc, char **argv) {
  if (argc != 4 && argc != 5) return 2;
  const int threads = atoi(argv[2]);
  const long extra_mib = atol(argv[3]);
  if (extra_mib >= 0) {
    const long vm = child_vm_size_kib();
    if (vm < 0) return 3;
    const rlim_t bytes = ((rlim_t)vm << 10) + ((rlim_t)extra_mib << 20);
    struct rlimit limit = {bytes, bytes};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return 4;
  }
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  bpt_status status = bpt_context_create(&options, &context);
  if (status != BPT_OK) {
    printf("result create=%s threads=0 stage=create message=%s\n", bpt_status_string(status),
           bpt_context_last_error(NULL));
    return 0;
  }
  child_training training = {context, "graph", BPT_OK};
  if (argc == 5) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, child_train_thread, &training) != 0) return 5;
    pthread_join(thread, NULL);
  } else {
    child_train_thread(&training);
  }
  const char *stage = training.stage;
  status = training.status;
  printf("result create=%s threads=%d stage=%s train=%s message=%s\n", bpt_status_string(BPT_OK),
         bpt_context_num_threads(context), stage, bpt_status_string(status),
         status == BPT_OK ? "" : bpt_context_last_error(context));
  bpt_context_destroy(context);
  return 0;
}

/* ---- The parent: run a child, bound it, read what it says ------------------------------------------- */

typedef struct child_case {
  const char *name;
  int as_nobody;        /* setuid to "nobody" before the exec: root ignores RLIMIT_NPROC */
  rlim_t nproc;         /* RLIMIT_NPROC when as_nobody */
  const char *env_name; /* an environment variable set for the child, or NULL */
  const char *env_value;
  int threads;      /* num_threads */
  long extra_mib;   /* RLIMIT_AS above the child's VmSize, or -1 */
  int other_thread; /* train on a second host thread */
} child_case;

typedef struct child_report {
  char output[8192];
  int exited, exit_code, signal, timed_out;
} child_report;

static const char *self_path; /* this program, re-executed as the child */

static void child_exec(const child_case *c) {
  if (c->as_nobody) {
    const struct passwd *nobody = getpwnam("nobody");
    if (!nobody || setgroups(0, NULL) != 0 || setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(77);
    struct rlimit limit = {c->nproc, c->nproc};
    if (setrlimit(RLIMIT_NPROC, &limit) != 0) _exit(78);
  }
  if (c->env_name) setenv(c->env_name, c->env_value, 1);
  setenv("OMP_WAIT_POLICY", "passive", 1);
#ifdef TEST_UNDER_ASAN
  /* LeakSanitizer's exit-time check starts a thread, which a thread limit refuses. */
  setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
#endif
  char threads[16], extra[32];
  snprintf(threads, sizeof threads, "%d", c->threads);
  snprintf(extra, sizeof extra, "%ld", c->extra_mib);
  char *arguments[] = {(char *)self_path, "--case", threads, extra, c->other_thread ? "thread" : NULL, NULL};
  execv(self_path, arguments);
  _exit(79);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void run_child(const child_case *c, child_report *report) {
  memset(report, 0, sizeof *report);
  int pipe_fds[2];
  assert_int_equal(pipe(pipe_fds), 0);
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    child_exec(c);
  }
  close(pipe_fds[1]);
  size_t used = 0;
  const double deadline = now_seconds() + CHILD_SECONDS;
  for (;;) {
    const double left = deadline - now_seconds();
    if (left <= 0) {
      report->timed_out = 1;
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd poll_fd = {.fd = pipe_fds[0], .events = POLLIN};
    const int ready = poll(&poll_fd, 1, (int)(left * 1000) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[1024];
    const ssize_t got = read(pipe_fds[0], buffer, sizeof buffer);
    if (got <= 0) break;
    const size_t room = sizeof report->output - 1 - used, take = (size_t)got < room ? (size_t)got : room;
    memcpy(report->output + used, buffer, take);
    used += take;
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) test_forget_killed_process(pid);
  report->exited = WIFEXITED(status);
  report->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  report->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

/* Runs a case and checks the things every case promises: it ended on its own within the bound, it returned
 * from main (no exit(1) from the OpenMP runtime, no abort), and it printed a result. Returns the result line,
 * or NULL when the case could not be set up here (the caller skips). */
static const char *run_case(const child_case *c, child_report *report) {
  run_child(c, report);
  print_message("[%s] %s", c->name, report->output);
  if (report->exited && report->exit_code >= 77 && report->exit_code <= 79) return NULL;
  if (report->timed_out) fail_msg("%s: still running after %d s (hung)", c->name, CHILD_SECONDS);
  assert_null(strstr(report->output, "Thread creation failed"));
  assert_null(strstr(report->output, "OMP: Error"));
  if (!report->exited || report->exit_code != 0)
    fail_msg("%s: child ended with exit code %d, signal %d, output:\n%s", c->name, report->exit_code, report->signal,
             report->output);
  const char *result = strstr(report->output, "result ");
  if (!result) fail_msg("%s: no result line in:\n%s", c->name, report->output);
  return result;
}

static int has(const char *result, const char *fragment) { return strstr(result, fragment) != NULL; }

/* ---- Thread limits (class 3) ------------------------------------------------------------------------ */

static void skip_unless_nobody_works(const child_case *c, const char *result) {
  if (!result && c->as_nobody) {
    print_message("cannot switch to user nobody here (setuid or RLIMIT_NPROC refused): skipping %s\n", c->name);
    skip();
  }
}

/* RLIMIT_NPROC 1 as nobody: no thread can be created at all. The automatic thread count runs on the calling
 * thread alone and trains; an explicit 4 is refused with a status that names the limit. */
static void no_thread_can_start(void **state) {
  (void)state;
  child_report report;
  const child_case automatic = {"nproc=1 num_threads=0", 1, 1, NULL, NULL, 0, -1, 0};
  const char *result = run_case(&automatic, &report);
  skip_unless_nobody_works(&automatic, result);
  assert_true(has(result, "create=ok threads=1 stage=done train=ok"));
  const child_case four = {"nproc=1 num_threads=4", 1, 1, NULL, NULL, 4, -1, 0};
  result = run_case(&four, &report);
  skip_unless_nobody_works(&four, result);
  assert_true(has(result, "create=out of memory"));
  assert_true(has(result, "thread"));
  assert_true(has(result, "RLIMIT_NPROC"));
}

/* A few threads allowed: the automatic count fits under the limit and trains. */
static void few_threads_can_start(void **state) {
  (void)state;
  child_report report;
  const child_case c = {"nproc=3 num_threads=0", 1, 3, NULL, NULL, 0, -1, 0};
  const char *result = run_case(&c, &report);
  skip_unless_nobody_works(&c, result);
  assert_true(has(result, "create=ok"));
  assert_true(has(result, "stage=done train=ok"));
}

/* A second host thread starts a pool of its own: with room for the first thread's team only, its forward
 * pass must fail with a status (or, where the limit leaves room, train), not exit. */
static void second_host_thread_under_limit(void **state) {
  (void)state;
  child_report report;
  /* OMP_NUM_THREADS=4: the second thread's default team is larger than the context's 2. */
  const child_case c = {
      "nproc=3 num_threads=2 OMP_NUM_THREADS=4 on a second thread", 1, 3, "OMP_NUM_THREADS", "4", 2, -1, 1};
  const char *result = run_case(&c, &report);
  skip_unless_nobody_works(&c, result);
  assert_true(has(result, "create=ok threads=2"));
  assert_true(has(result, "stage=done train=ok") || has(result, "stage=forward train=out of memory"));
}

/* A count no machine runs is refused before any thread is started for it (in this process: nothing starts). */
static void absurd_thread_count_is_refused(void **state) {
  (void)state;
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 1000000;
  bpt_context *context = NULL;
  assert_int_equal(bpt_context_create(&options, &context), BPT_ERR_INVALID_ARGUMENT);
  assert_null(context);
  assert_non_null(strstr(bpt_context_last_error(NULL), "at most 1024"));
}

/* A stack size beyond the address space: no OpenMP thread can be created with it (libgomp reads
 * OMP_STACKSIZE, then GOMP_STACKSIZE; units B/K/M/G, default K). */
static void huge_openmp_stack_size(void **state) {
  (void)state;
  child_report report;
  const child_case automatic = {"OMP_STACKSIZE=1000000G num_threads=0", 0, 0, "OMP_STACKSIZE", "1000000G", 0, -1, 0};
  assert_true(has(run_case(&automatic, &report), "create=ok threads=1 stage=done train=ok"));
  const child_case two = {"GOMP_STACKSIZE=1000000G num_threads=2", 0, 0, "GOMP_STACKSIZE", "1000000 g", 2, -1, 0};
  const char *result = run_case(&two, &report);
  assert_true(has(result, "create=out of memory"));
  assert_true(has(result, "GOMP_STACKSIZE"));
  const child_case kib = {
      "OMP_STACKSIZE=4000000000000 (KiB) num_threads=2", 0, 0, "OMP_STACKSIZE", "4000000000000", 2, -1, 0};
  assert_true(has(run_case(&kib, &report), "create=out of memory"));
  /* 100G may or may not be mappable here (overcommit, RAM): either way a result, never an exit. */
  const child_case hundred = {"OMP_STACKSIZE=100G num_threads=2", 0, 0, "OMP_STACKSIZE", "100G", 2, -1, 0};
  result = run_case(&hundred, &report);
  assert_true(has(result, "stage=done train=ok") || has(result, "create=out of memory"));
}

/* ---- OpenMP's own limits (issue 30, class 1) --------------------------------------------------------- */

/* Settings that make OpenMP give a region fewer threads than it asks for. OpenBLAS's threaded GEMM waits,
 * spinning, for every thread it asked for: each case must train (with the team OpenMP really gives) within
 * the bound. The dynamic case asks for more threads than there are processors, which dynamic adjustment
 * never grants, so it would hang on any machine, busy or idle. */
static void openmp_limits_never_hang(void **state) {
  (void)state;
  long processors = sysconf(_SC_NPROCESSORS_ONLN);
  if (processors < 1) processors = 1;
  const int beyond = (int)processors + 2;
  const child_case cases[] = {
      {"OMP_THREAD_LIMIT=1 num_threads=0", 0, 0, "OMP_THREAD_LIMIT", "1", 0, -1, 0},
      {"OMP_THREAD_LIMIT=2 num_threads=4", 0, 0, "OMP_THREAD_LIMIT", "2", 4, -1, 0},
      {"OMP_THREAD_LIMIT=1 num_threads=4 on a second thread", 0, 0, "OMP_THREAD_LIMIT", "1", 4, -1, 1},
      {"OMP_DYNAMIC=true num_threads=processors+2", 0, 0, "OMP_DYNAMIC", "true", beyond, -1, 0},
      {"OMP_DYNAMIC=true num_threads=processors+2 on a second thread", 0, 0, "OMP_DYNAMIC", "true", beyond, -1, 1},
      {"OMP_MAX_ACTIVE_LEVELS=0 num_threads=0", 0, 0, "OMP_MAX_ACTIVE_LEVELS", "0", 0, -1, 0},
      {"OMP_MAX_ACTIVE_LEVELS=0 num_threads=4", 0, 0, "OMP_MAX_ACTIVE_LEVELS", "0", 4, -1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    child_report report;
    const char *result = run_case(&cases[i], &report);
    if (!has(result, "create=ok") || !has(result, "stage=done train=ok"))
      fail_msg("%s: did not train: %s", cases[i].name, result);
  }
  /* The context reports the team it really has. */
  const child_case two = {"OMP_THREAD_LIMIT=2 num_threads=4", 0, 0, "OMP_THREAD_LIMIT", "2", 4, -1, 0};
  child_report report;
  assert_true(has(run_case(&two, &report), "threads=2 "));
}

/* ---- Address-space limits (class 4) ----------------------------------------------------------------- */

/* A sweep of RLIMIT_AS just above what the child has mapped: each run trains or fails with out of memory,
 * within the bound (OpenBLAS retries a buffer it cannot map forever unless the library checks first). */
static void address_space_sweep(void **state) {
  (void)state;
#ifdef TEST_UNDER_ASAN
  print_message("AddressSanitizer reserves terabytes of shadow memory: RLIMIT_AS cannot be tested\n");
  skip();
#endif
  const long extras[] = {0, 16, 64, 256, 1024};
  const int thread_counts[] = {0, 4};
  int successes = 0, failures = 0;
  for (size_t t = 0; t < sizeof thread_counts / sizeof *thread_counts; t++)
    for (size_t e = 0; e < sizeof extras / sizeof *extras; e++) {
      char name[64];
      snprintf(name, sizeof name, "RLIMIT_AS=VmSize+%ldMiB num_threads=%d", extras[e], thread_counts[t]);
      const child_case c = {name, 0, 0, NULL, NULL, thread_counts[t], extras[e], 0};
      child_report report;
      const char *result = run_case(&c, &report);
      if (has(result, "stage=done train=ok")) {
        successes++;
      } else {
        if (!has(result, "=out of memory")) fail_msg("%s: neither success nor out of memory: %s", name, result);
        failures++;
      }
    }
  /* The sweep spans both outcomes: the smallest limits fail and the largest succeed. */
  assert_true(successes > 0);
  assert_true(failures > 0);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--case") == 0) return child_main(argc, argv);
  self_path = test_self_executable();
  if (!self_path) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(no_thread_can_start),
      cmocka_unit_test(few_threads_can_start),
      cmocka_unit_test(second_host_thread_under_limit),
      cmocka_unit_test(absurd_thread_count_is_refused),
      cmocka_unit_test(huge_openmp_stack_size),
      cmocka_unit_test(openmp_limits_never_hang),
      cmocka_unit_test(address_space_sweep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
