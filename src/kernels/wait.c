/* The wait/back-off rule (see wait.h for why it looks like this). */
#define _GNU_SOURCE
#include "kernels/wait.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

uint64_t gcoll_wait_now_ns(void) {
  return gcoll_clock_ns();
}

_Atomic int gcoll_wait_fast;

/* Whether this kernel has membarrier's global expedited command: a waiter
 * may then sleep on a futex whose producer does not fence (wait.h). */
static int g_membarrier_ok;
static pthread_once_t g_register_once = PTHREAD_ONCE_INIT;

static void register_self(void) {
  int ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0) == 0;
  atomic_store_explicit(&gcoll_wait_fast, ok, memory_order_relaxed);
}

static void register_membarrier(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0);
  long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  if (cmds < 0 || (cmds & need) != need) return;
  g_membarrier_ok = 1;
  register_self();
  /* A forked child inherits gcoll_wait_fast but need not inherit the
   * registration: it registers itself (or fences). */
  pthread_atfork(NULL, NULL, register_self);
}

/* Set once registered (or found unable to): gcoll_wait_init runs per
 * call, and pthread_once is a call through the PLT each time. */
static _Atomic int g_setup_done;

void gcoll_wait_setup(void) {
  if (atomic_load_explicit(&g_setup_done, memory_order_acquire)) return;
  pthread_once(&g_register_once, register_membarrier);
  atomic_store_explicit(&g_setup_done, 1, memory_order_release);
}

/* At load, while a program that links gcoll still has one thread, the
 * registration is free: the kernel waits for an RCU grace period only
 * when the process has more than one thread (wait.h). */
__attribute__((constructor)) static void register_at_load(void) {
  gcoll_wait_setup();
}

void gcoll_wait_init(struct gcoll_wait *w, _Atomic int *abort_word,
                     _Atomic int *local_abort, uint64_t timeout_ns) {
  /* Before this process's first publish through a wait's executor; a
   * no-op once an executor's creation did it (gcoll_wait_setup). */
  gcoll_wait_setup();
  /* The clock is read when a wait first looks at it (wait.h). */
  w->deadline_ns = 0;
  w->timeout_ns = timeout_ns;
  w->abort_word = abort_word;
  w->local_abort = local_abort;
  gcoll_wait_begin(w);
  w->spins = GCOLL_WAIT_SPINS;
  w->reason = GCOLL_WAIT_NONE;
  w->poll = NULL;
  w->poll_arg = NULL;
  w->asleep = NULL;
  w->sleep_target = 0;
  w->wake_timeout_ns = GCOLL_WAIT_WAKE_TIMEOUT_NS;
  w->futex_sleeps = 0;
}

static _Atomic uint64_t g_futex_sleeps, g_futex_timeouts, g_futex_wakes;

void gcoll_wait_get_stats(struct gcoll_wait_stats *s) {
  s->futex_sleeps = atomic_load_explicit(&g_futex_sleeps, memory_order_relaxed);
  s->futex_timeouts = atomic_load_explicit(&g_futex_timeouts, memory_order_relaxed);
  s->futex_wakes = atomic_load_explicit(&g_futex_wakes, memory_order_relaxed);
}

/* The futex word of a 64-bit counter: its low 32 bits, which change with
 * every step (a wake-up lost to them repeating needs 2^32 steps inside one
 * sleep). The kernel reads the word; user code reads the whole counter. */
static uint32_t *futex_word(_Atomic uint64_t *ctr) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return (uint32_t *)(void *)ctr + 1;
#else
  return (uint32_t *)(void *)ctr;
#endif
}

/* Not FUTEX_PRIVATE: the counter is in memory shared between processes
 * (shm FIFOs); in a process's own memory (a net proxy's FIFO) a shared
 * futex works too. */
void gcoll_wait_wake(_Atomic uint64_t *ctr) {
  atomic_fetch_add_explicit(&g_futex_wakes, 1, memory_order_relaxed);
  (void)syscall(SYS_futex, futex_word(ctr), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

static int aborted(struct gcoll_wait *w) {
  int a = w->abort_word ? atomic_load_explicit(w->abort_word, memory_order_acquire) : 0;
  if (a == 0 && w->local_abort)
    a = atomic_load_explicit(w->local_abort, memory_order_acquire);
  return a;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ns};
  nanosleep(&ts, NULL);
}

void gcoll_wait_remote_fence(void) {
  atomic_thread_fence(memory_order_seq_cst);
  if (g_membarrier_ok && syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) == 0) return;
  /* Registered, yet the command failed: no barrier reaches the other
   * threads, but a store leaves a store buffer within microseconds. */
  if (atomic_load_explicit(&gcoll_wait_fast, memory_order_relaxed)) sleep_ns(1000000);
}

/* One sleep on the counter's futex, at most ns (wait.h: the ordering).
 * 0, or -1 when the futex call failed for good (then the wait nanosleeps
 * from now on). */
static int futex_sleep(struct gcoll_wait *w, uint64_t ns) {
  atomic_store_explicit(w->asleep, 1, memory_order_seq_cst);
  /* The producers' half of their fence (wait.h); without it, no sleep. */
  if (!g_membarrier_ok || syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) != 0) {
    if (!w->flag_shared) atomic_store_explicit(w->asleep, 0, memory_order_relaxed);
    return -1;
  }
  uint64_t v = atomic_load_explicit(w->sleep_ctr, memory_order_seq_cst);
  int rc = 0;
  if (v < w->sleep_target) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    long r = syscall(SYS_futex, futex_word(w->sleep_ctr), FUTEX_WAIT, (uint32_t)v, &ts,
                     NULL, 0);
    w->futex_sleeps++;
    atomic_fetch_add_explicit(&g_futex_sleeps, 1, memory_order_relaxed);
    if (r != 0 && errno == ETIMEDOUT)
      atomic_fetch_add_explicit(&g_futex_timeouts, 1, memory_order_relaxed);
    else if (r != 0 && errno != EAGAIN && errno != EINTR)
      rc = -1;
  }
  /* Down again if no producer took it (a timeout, EAGAIN); relaxed: a
   * producer that still sees it only makes one needless wake-up. A flag
   * other waiters share stays up (gcoll_wait_counter_shared). */
  if (!w->flag_shared) atomic_store_explicit(w->asleep, 0, memory_order_relaxed);
  return rc;
}

/* A sleeping round: until the counter moves (futex) or the next back-off
 * step (nanosleep). Neither sleeps past the deadline by more than a tick. */
static void sleep_round(struct gcoll_wait *w) {
  if (w->sleep_ctr != NULL && w->poll == NULL) {
    uint64_t now = gcoll_wait_now_ns();
    uint64_t left = w->deadline_ns > now ? w->deadline_ns - now : 0;
    if (left == 0) return;
    if (futex_sleep(w, left < w->wake_timeout_ns ? left : w->wake_timeout_ns) == 0) return;
    w->sleep_ctr = NULL;
  }
  uint32_t k = w->sleeps - 1;
  uint64_t ns = k >= 6 ? GCOLL_WAIT_MAX_SLEEP_NS : 1000ull << k;
  sleep_ns(ns > GCOLL_WAIT_MAX_SLEEP_NS ? GCOLL_WAIT_MAX_SLEEP_NS : ns);
}

gcollResult_t gcoll_wait_round(struct gcoll_wait *w) {
  uint32_t r = w->round;
  if (w->round < UINT32_MAX) w->round++;
  int a = aborted(w);
  if (a != 0) {
    w->reason = GCOLL_WAIT_ABORTED;
    return (gcollResult_t)a;
  }
  int yielding = 0;
  if (w->poll != NULL && w->poll(w->poll_arg)) {
    /* Progress: no back-off; the clock as often as while spinning. */
    if (r % 32 != 31) return gcollSuccess;
  } else if (r < w->spins) {
    cpu_pause();
    if (r % 32 != 31) return gcollSuccess;
    /* A long spin gives the core away now and then (wait.h). */
    if (r % GCOLL_WAIT_SPIN_YIELD_ROUNDS == GCOLL_WAIT_SPIN_YIELD_ROUNDS - 1) sched_yield();
  } else if (w->sleeps == 0) {
    sched_yield();
    yielding = 1;
  } else {
    sleep_round(w);
    if (w->sleeps < UINT32_MAX) w->sleeps++;
  }
  uint64_t now = gcoll_wait_now_ns();
  if (w->deadline_ns == 0)
    w->deadline_ns = w->timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + w->timeout_ns;
  if (yielding) {
    /* The window opens at the first yield; the round after it closes
     * is the first sleep. */
    if (w->yield_end_ns == 0)
      w->yield_end_ns =
          now > UINT64_MAX - GCOLL_WAIT_YIELD_NS ? UINT64_MAX : now + GCOLL_WAIT_YIELD_NS;
    else if (now >= w->yield_end_ns)
      w->sleeps = 1;
  }
  if (now >= w->deadline_ns) {
    w->reason = GCOLL_WAIT_DEADLINE;
    return gcollSystemError;
  }
  return gcollSuccess;
}

static gcollResult_t wait_counter(struct gcoll_wait *w, _Atomic uint64_t *ctr, uint64_t target,
                                  _Atomic uint32_t *asleep, int shared) {
  if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return gcollSuccess;
  gcoll_wait_begin_on(w, ctr, target, asleep);
  w->flag_shared = shared;
  for (;;) {
    gcollResult_t r = gcoll_wait_round(w);
    if (r != gcollSuccess) return r;
    if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return gcollSuccess;
  }
}

gcollResult_t gcoll_wait_counter(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                 uint64_t target, _Atomic uint32_t *asleep) {
  return wait_counter(w, ctr, target, asleep, 0);
}

gcollResult_t gcoll_wait_counter_shared(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                        uint64_t target, _Atomic uint32_t *asleep) {
  return wait_counter(w, ctr, target, asleep, 1);
}
