/* The fork-join pool SimpleTVM's compiled kernels run their parallel loops on.
 *
 * A kernel compiled by TVM forks each parallel loop through the function pointer
 * __TVMBackendParallelLaunch in its own library. TVM's runtime pool waits for work, and
 * for the workers to finish, by calling sched_yield: a system call per turn, about a
 * microsecond per parallel loop where the cores trade a cache line in a tenth of that. A
 * model of 55 microsecond kernels pays that 55 times a call. This pool's threads wait
 * with the CPU's pause instruction first, and yield or sleep only after a while.
 * simpletvm_install() points every loaded TVM library's launcher here.
 *
 * A launch publishes its tasks; worker i claims task i, and the caller, once its own
 * task is done, claims and runs every task no worker has claimed yet. So a launch never
 * waits for a worker that is not running: one the system descheduled, or one sharing
 * the caller's CPU because another process holds the other (a caller that only waited
 * would lose 0.1-1 ms a launch to such a wait).
 *
 * One launch at a time: a launch that finds the pool busy (another thread's, or a
 * parallel loop nested in a task) runs its tasks one after another on its own thread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

#define MAX_THREADS 512
/* An idle worker pauses for about 0.1 ms (the gaps between the kernels of one inference,
 * and between inferences in a loop, are microseconds), then yields to the system for a
 * few milliseconds more, then sleeps until the next launch. */
#define PAUSE_TURNS (1 << 8)
#define YIELD_TURNS (1 << 13)
/* The caller waits for claimed tasks to finish with fewer pauses (about 10 us) before it
 * yields: a worker the system put on the caller's CPU runs only when the caller yields. */
#define JOIN_PAUSE_TURNS (1 << 8)
#define CLAIMED (1ULL << 63)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

/* One turn of waiting: a pause at first, a yield to the system after `pauses` turns. */
static inline void wait_turn(long turn, long pauses) {
  if (turn < pauses)
    cpu_relax();
  else
    sched_yield();
}

static int threads_wanted = 1;   /* tasks per launch, the caller's included */
static int workers_started = 0;  /* worker i claims task i (1-based) */
static pthread_t worker_threads[MAX_THREADS];
static atomic_int busy;          /* a launch or a resize holds the pool */
static atomic_ullong generation; /* bumped to start a launch (or to stop workers) */
/* task i of launch G is open while task_open[i] == G, claimed once it is G | CLAIMED */
static atomic_ullong task_open[MAX_THREADS];
static atomic_int tasks_left;    /* claimable tasks of this launch not finished yet */
static atomic_int failed;
/* the error the first failing task on a worker thread raised, for the caller's thread */
static _Atomic(void*) worker_error;
static atomic_int sleepers;
static int stop_from = MAX_THREADS; /* workers of this index and above exit */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static _Thread_local int in_worker;
static unsigned long long generation_at_start[MAX_THREADS];

/* the launch's job: written before its tasks open, read after a claim succeeds, and
 * rewritten only once every task is finished */
static FTVMParallelLambda job_lambda;
static void* job_data;
static TVMParallelGroupEnv job_env;

static unsigned long long wait_for_new(unsigned long long seen) {
  unsigned long long now;
  for (long turn = 0; (now = atomic_load(&generation)) == seen; ++turn) {
    if (turn < PAUSE_TURNS + YIELD_TURNS) {
      wait_turn(turn, PAUSE_TURNS);
      continue;
    }
    pthread_mutex_lock(&sleep_lock);
    atomic_fetch_add(&sleepers, 1);
    while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &sleep_lock);
    atomic_fetch_sub(&sleepers, 1);
    pthread_mutex_unlock(&sleep_lock);
    turn = 0;
  }
  return now;
}

/* A failing kernel raises its error in TVM's per-thread slot, and the caller of the
 * launch reports the slot of its own thread: an error raised on a worker thread is
 * moved there (TVM's pool does the same). TVM's functions are found in the process at
 * the first failure, as the kernels find them; without them a launch still fails. */
typedef void (*FMoveFromRaised)(void** error);
typedef void (*FSetRaised)(void* error);
typedef int (*FDecRef)(void* object);
static FMoveFromRaised move_from_raised;
static FSetRaised set_raised;
static FDecRef release;
static pthread_once_t error_functions_found = PTHREAD_ONCE_INIT;

static void find_error_functions(void) {
  set_raised = (FSetRaised)dlsym(RTLD_DEFAULT, "TVMFFIErrorSetRaised");
  release = (FDecRef)dlsym(RTLD_DEFAULT, "TVMFFIObjectDecRef");
  if (set_raised != NULL && release != NULL)
    move_from_raised = (FMoveFromRaised)dlsym(RTLD_DEFAULT, "TVMFFIErrorMoveFromRaised");
}

static void keep_worker_error(void) {
  void* error = NULL;
  void* none = NULL;
  pthread_once(&error_functions_found, find_error_functions);
  if (move_from_raised == NULL) return;
  move_from_raised(&error);
  if (error != NULL && !atomic_compare_exchange_strong(&worker_error, &none, error))
    release(error); /* another task's error came first */
}

/* Raise the kept worker error on this thread unless `raise` is 0; forget it either way. */
static void pass_on_worker_error(int raise) {
  void* error = atomic_exchange(&worker_error, NULL);
  if (error == NULL) return;
  if (raise) set_raised(error);
  release(error);
}

/* Run task `index` of launch `launch` if nobody has claimed it. */
static void run_if_unclaimed(int index, unsigned long long launch) {
  unsigned long long open = launch;
  if (!atomic_compare_exchange_strong(&task_open[index], &open, launch | CLAIMED)) return;
  if (job_lambda(index, &job_env, job_data) != 0) {
    if (in_worker) keep_worker_error();
    atomic_store(&failed, 1);
  }
  atomic_fetch_sub(&tasks_left, 1);
}

static void* worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  unsigned long long seen = generation_at_start[index]; /* a launch may start before us */
  in_worker = 1;
  for (;;) {
    seen = wait_for_new(seen);
    if (index >= stop_from) return NULL;
    run_if_unclaimed(index, seen);
  }
}

static void start_next_generation(unsigned long long next) {
  atomic_store(&generation, next);
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&sleep_lock);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&sleep_lock);
  }
}

static void hold_pool(void) {
  int expected = 0;
  while (!atomic_compare_exchange_weak(&busy, &expected, 1)) {
    expected = 0;
    cpu_relax();
  }
}

/* Worker i runs on the i-th CPU this process may use (wrapping round), as TVM's pool
 * binds its workers; -1: not bound (the process may use one CPU only). */
static int worker_cpu[MAX_THREADS];
static cpu_set_t allowed_cpus; /* the CPUs the caller may use, when the workers started */

static int nth_allowed_cpu(int index) {
  int count = CPU_COUNT(&allowed_cpus);
  if (count < 2) return -1;
  int wanted = index % count;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed_cpus) && wanted-- == 0) return cpu;
  return -1;
}

static void bind_to_cpu(pthread_attr_t* attributes, int index) {
  cpu_set_t chosen;
  if (index == 1 && sched_getaffinity(0, sizeof(allowed_cpus), &allowed_cpus) != 0)
    CPU_ZERO(&allowed_cpus);
  worker_cpu[index] = nth_allowed_cpu(index);
  if (worker_cpu[index] < 0) return;
  CPU_ZERO(&chosen);
  CPU_SET(worker_cpu[index], &chosen);
  pthread_attr_setaffinity_np(attributes, sizeof(chosen), &chosen);
}

/* The system may run the caller on a CPU a worker is bound to, and keep it there while
 * the worker sleeps (nothing pulls a lone running thread away): the caller then runs
 * every task itself, and a launch on 2 threads takes what it takes on 1 (BENCHMARKS.md).
 * Such a worker moves to a CPU no thread of the launch uses. A check per launch
 * (sched_getcpu reads the kernel's per-thread record). */
static void keep_caller_cpu_free(int workers) {
  int here = sched_getcpu();
  if (here < 0) return;
  for (int index = 1; index <= workers; ++index) {
    if (worker_cpu[index] != here) continue;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed_cpus) || cpu == here) continue;
      int taken = 0;
      for (int other = 1; other <= workers; ++other) taken |= worker_cpu[other] == cpu;
      if (taken) continue;
      cpu_set_t chosen;
      CPU_ZERO(&chosen);
      CPU_SET(cpu, &chosen);
      if (pthread_setaffinity_np(worker_threads[index], sizeof(chosen), &chosen) == 0)
        worker_cpu[index] = cpu;
      return;
    }
    return; /* every CPU is taken: more threads than CPUs */
  }
}

/* Start workers up to index `last` (the pool is held). False if a thread failed to start. */
static int start_workers(int last) {
  while (workers_started < last) {
    int index = workers_started + 1;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    bind_to_cpu(&attributes, index);
    generation_at_start[index] = atomic_load(&generation);
    int failed_to_start =
        pthread_create(&worker_threads[index], &attributes, worker_main,
                       (void*)(intptr_t)index);
    pthread_attr_destroy(&attributes);
    if (failed_to_start) return 0;
    workers_started = index;
  }
  return 1;
}

/* Resize to `count` threads (the caller's included): surplus workers exit, missing ones
 * start now rather than inside the first timed launch. */
void simpletvm_set_threads(int count) {
  if (count < 1) count = 1;
  if (count > MAX_THREADS) count = MAX_THREADS;
  hold_pool();
  threads_wanted = count;
  if (workers_started > count - 1) {
    stop_from = count; /* the others find no open task in this generation */
    start_next_generation(atomic_load(&generation) + 1);
    for (int i = count; i <= workers_started; ++i) pthread_join(worker_threads[i], NULL);
    workers_started = count - 1;
    stop_from = MAX_THREADS;
  }
  start_workers(count - 1); /* on failure the launches start them, or run serially */
  atomic_store(&busy, 0);
}

int simpletvm_threads(void) { return threads_wanted; }

static int run_serially(FTVMParallelLambda lambda, void* data, int num_task) {
  TVMParallelGroupEnv env = {NULL, num_task};
  for (int task = 0; task < num_task; ++task)
    if (lambda(task, &env, data) != 0) return -1;
  return 0;
}

static int launch(FTVMParallelLambda lambda, void* data, int num_task) {
  int expected = 0;
  if (num_task <= 0 || num_task > threads_wanted) num_task = threads_wanted;
  if (num_task == 1 || in_worker || !atomic_compare_exchange_strong(&busy, &expected, 1))
    return run_serially(lambda, data, num_task);
  start_workers(num_task - 1); /* tasks of workers that failed to start run here */
  keep_caller_cpu_free(num_task - 1 < workers_started ? num_task - 1 : workers_started);
  unsigned long long launch = atomic_load(&generation) + 1;
  job_lambda = lambda;
  job_data = data;
  job_env.sync_handle = NULL;
  job_env.num_task = num_task;
  atomic_store(&failed, 0);
  atomic_store(&tasks_left, num_task - 1);
  for (int task = 1; task < num_task; ++task) atomic_store(&task_open[task], launch);
  start_next_generation(launch);
  int own_failure = lambda(0, &job_env, data) != 0;
  for (int task = 1; task < num_task; ++task) run_if_unclaimed(task, launch);
  for (long turn = 0; atomic_load(&tasks_left) > 0; ++turn) wait_turn(turn, JOIN_PAUSE_TURNS);
  int status = own_failure | atomic_load(&failed);
  /* a task of the caller's own that failed has its error on this thread already */
  if (status) pass_on_worker_error(!own_failure);
  atomic_store(&busy, 0);
  return status ? -1 : 0;
}

#ifdef SIMPLETVM_POOL_TIMING
/* A build for profiling kernels inside a model: while a buffer is set, every launch from
 * a thread outside the pool is recorded, which parallel lambda (the kernel's loop) and
 * when it started and ended (CLOCK_MONOTONIC), two clock reads a launch. */
#include <time.h>
typedef struct {
  void* lambda;
  double start;
  double end;
} LaunchTime;
static LaunchTime* launch_times;
static long launch_capacity;
static atomic_long launches_recorded;

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/* Record the launches from now on into `buffer` (NULL: stop); returns how many the
 * previous buffer received. Called from the thread that runs the kernels. */
long simpletvm_record_launches(LaunchTime* buffer, long capacity) {
  long previous_capacity = launch_capacity;
  long recorded = atomic_exchange(&launches_recorded, 0);
  launch_times = buffer;
  launch_capacity = buffer == NULL ? 0 : capacity;
  return recorded < previous_capacity ? recorded : previous_capacity;
}

int simpletvm_parallel_launch(FTVMParallelLambda lambda, void* data, int num_task) {
  LaunchTime* times = launch_times;
  if (times == NULL || in_worker) return launch(lambda, data, num_task);
  double start = seconds_now();
  int status = launch(lambda, data, num_task);
  long slot = atomic_fetch_add(&launches_recorded, 1);
  if (slot < launch_capacity) times[slot] = (LaunchTime){(void*)lambda, start, seconds_now()};
  return status;
}
#else
int simpletvm_parallel_launch(FTVMParallelLambda lambda, void* data, int num_task) {
  return launch(lambda, data, num_task);
}
#endif

/* A forked child has none of the parent's workers: start afresh. */
static void forget_workers_in_child(void) {
  workers_started = 0;
  atomic_store(&busy, 0);
  atomic_store(&sleepers, 0);
  pthread_mutex_init(&sleep_lock, NULL);
  pthread_cond_init(&wake, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void) {
  pthread_atfork(NULL, NULL, forget_workers_in_child);
}

/* Point the parallel launcher of every loaded TVM library at this pool; returns how many
 * now use it. Libraries whose kernels synchronize inside a parallel loop (they link
 * __TVMBackendParallelBarrier) keep TVM's pool, which implements the barrier. */
static int install_one(struct dl_phdr_info* info, size_t size, void* count) {
  (void)size;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') return 0;
  void* library = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (library == NULL) return 0;
  void** launcher = (void**)dlsym(library, "__TVMBackendParallelLaunch");
  if (launcher != NULL && dlsym(library, "__TVMBackendParallelBarrier") == NULL) {
    *launcher = (void*)&simpletvm_parallel_launch;
    ++*(int*)count;
  }
  dlclose(library);
  return 0;
}

int simpletvm_install(void) {
  int count = 0;
  dl_iterate_phdr(install_one, &count);
  return count;
}
