/* The wait/back-off rule (see wait.h for why it looks like this). */
#include "kernels/wait.h"

#include <sched.h>
#include <time.h>

#include "common/clock.h"

uint64_t gcoll_wait_now_ns(void) {
  return gcoll_clock_ns();
}

void gcoll_wait_init(struct gcoll_wait *w, _Atomic int *abort_word,
                     _Atomic int *local_abort, uint64_t timeout_ns) {
  uint64_t now = gcoll_wait_now_ns();
  w->deadline_ns = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
  w->abort_word = abort_word;
  w->local_abort = local_abort;
  gcoll_wait_begin(w);
  w->spins = GCOLL_WAIT_SPINS;
  w->reason = GCOLL_WAIT_NONE;
  w->poll = NULL;
  w->poll_arg = NULL;
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
  } else if (w->sleeps == 0) {
    sched_yield();
    yielding = 1;
  } else {
    uint32_t k = w->sleeps - 1;
    uint64_t ns = k >= 6 ? GCOLL_WAIT_MAX_SLEEP_NS : 1000ull << k;
    sleep_ns(ns > GCOLL_WAIT_MAX_SLEEP_NS ? GCOLL_WAIT_MAX_SLEEP_NS : ns);
    if (w->sleeps < UINT32_MAX) w->sleeps++;
  }
  uint64_t now = gcoll_wait_now_ns();
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

gcollResult_t gcoll_wait_counter(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                 uint64_t target) {
  if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return gcollSuccess;
  gcoll_wait_begin(w);
  for (;;) {
    gcollResult_t r = gcoll_wait_round(w);
    if (r != gcollSuccess) return r;
    if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return gcollSuccess;
  }
}
