/* Futex wake-ups of the host waits (wait.h, fifo.h): a waiter that went to
 * sleep on a FIFO counter is woken by the publish, not by its timeout.
 *
 * The FIFO lives in MAP_SHARED memory and the peer is a forked process, as
 * with the shm transport, so the futex must be a shared one. Each wait's
 * futex timeout is set to WAKE_TIMEOUT_S and the peer acts only after
 * PEER_DELAY_MS, long after the waiter reached its sleeps (the yield window
 * is 200 us): a waiter that is not woken returns ~WAKE_TIMEOUT_S after the
 * publish, a woken one within microseconds. The bound asserted, WOKEN_S, is
 * far from both, so a loaded machine cannot fail it and a missing wake-up
 * cannot pass it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gcoll.h"
#include "kernels/fifo.h"
#include "kernels/prims.h"
#include "kernels/wait.h"

#define SLOT 256
#define WAKE_TIMEOUT_S 5
#define WOKEN_S 1.0
#define PEER_DELAY_MS 200
#define NS 1000000000ull

/* The FIFO and what the peer tells the waiter, in one shared mapping. */
struct shared {
  _Atomic uint64_t acted_ns; /* when the peer published / freed a slot */
  char pad[64 - sizeof(uint64_t)];
};

static size_t g_map_bytes;

static struct shared *map_shared(struct gcoll_fifo **f) {
  g_map_bytes = 4096 + gcoll_fifo_bytes(SLOT);
  void *m = mmap(NULL, g_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  struct shared *sh = m;
  atomic_init(&sh->acted_ns, 0);
  *f = gcoll_fifo_init((char *)m + 4096, SLOT);
  assert_non_null(*f);
  return sh;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A wait that reaches its sleeps at once and sleeps WAKE_TIMEOUT_S a round
 * unless woken. */
static void long_sleep_wait(struct gcoll_wait *w, _Atomic int *abort_word, uint64_t timeout_ns) {
  gcoll_wait_init(w, abort_word, NULL, timeout_ns);
  w->spins = GCOLL_WAIT_SHARED_SPINS;
  w->wake_timeout_ns = WAKE_TIMEOUT_S * NS;
}

struct end {
  struct gcoll_prims p;
  struct gcoll_wait w;
  void *scratch[GCOLL_PRIMS_SCRATCH];
  char scratch_mem[GCOLL_PRIMS_SCRATCH][SLOT];
};

static void end_setup(struct end *e, struct gcoll_fifo *f, int is_recv, enum gcoll_proto proto,
                      _Atomic int *abort_word, uint64_t timeout_ns) {
  long_sleep_wait(&e->w, abort_word, timeout_ns);
  for (int i = 0; i < GCOLL_PRIMS_SCRATCH; i++) e->scratch[i] = e->scratch_mem[i];
  struct gcoll_fifo *const fl[1] = {f};
  gcollResult_t r = gcoll_prims_setup(&e->p, fl, is_recv ? 1 : 0, fl, is_recv ? 0 : 1, proto,
                                      gcollInt32, gcollSum, &e->w, e->scratch, SLOT);
  assert_int_equal(r, gcollSuccess);
}

static void fill(int32_t *v, size_t n, int32_t base) {
  for (size_t i = 0; i < n; i++) v[i] = base + (int32_t)i;
}

static void reap(pid_t pid) {
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* The consumer asleep on tail (SIMPLE: the counter; LL: the lines, with
 * tail bumped after them) returns as soon as the producer publishes. */
static void consumer_woken(enum gcoll_proto proto) {
  struct gcoll_fifo *f;
  struct shared *sh = map_shared(&f);
  size_t n = (proto == GCOLL_PROTO_LL ? SLOT / 4 : SLOT) / sizeof(int32_t);
  struct gcoll_wait_stats before, after;
  gcoll_wait_get_stats(&before);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    static struct end e;
    int32_t v[SLOT / 4];
    end_setup(&e, f, 0, proto, NULL, 30 * NS);
    fill(v, n, 1000);
    gcoll_prims_bind(&e.p, v, NULL);
    sleep_ms(PEER_DELAY_MS);
    atomic_store(&sh->acted_ns, gcoll_wait_now_ns());
    _exit(gcoll_prim_send(&e.p, 0, n) == gcollSuccess ? 0 : 1);
  }
  static struct end e;
  int32_t got[SLOT / 4] = {0}, want[SLOT / 4];
  end_setup(&e, f, 1, proto, NULL, 30 * NS);
  gcoll_prims_bind(&e.p, NULL, got);
  assert_int_equal(gcoll_prim_recv(&e.p, 0, n), gcollSuccess);
  uint64_t done = gcoll_wait_now_ns();
  reap(pid);
  fill(want, n, 1000);
  assert_memory_equal(got, want, n * sizeof(int32_t));
  assert_true(e.w.futex_sleeps >= 1); /* it really slept on the futex */
  uint64_t acted = atomic_load(&sh->acted_ns);
  assert_true(acted > 0);
  assert_true((double)(done > acted ? done - acted : 0) / NS < WOKEN_S);
  gcoll_wait_get_stats(&after);
  assert_int_equal(after.futex_timeouts, before.futex_timeouts);
  munmap(sh, g_map_bytes);
}

static void test_consumer_woken_simple(void **state) {
  (void)state;
  consumer_woken(GCOLL_PROTO_SIMPLE);
}

static void test_consumer_woken_ll(void **state) {
  (void)state;
  consumer_woken(GCOLL_PROTO_LL);
}

/* The producer asleep on head (a full FIFO) returns as soon as the
 * consumer frees a slot. */
static void test_producer_woken(void **state) {
  (void)state;
  struct gcoll_fifo *f;
  struct shared *sh = map_shared(&f);
  size_t n = SLOT / sizeof(int32_t), steps = GCOLL_STEPS + 1;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    static struct end e;
    static int32_t got[(GCOLL_STEPS + 1) * SLOT / 4];
    end_setup(&e, f, 1, GCOLL_PROTO_SIMPLE, NULL, 30 * NS);
    gcoll_prims_bind(&e.p, NULL, got);
    sleep_ms(PEER_DELAY_MS);
    atomic_store(&sh->acted_ns, gcoll_wait_now_ns());
    if (gcoll_prim_recv(&e.p, 0, steps * n) != gcollSuccess) _exit(1);
    for (size_t i = 0; i < steps * n; i++)
      if (got[i] != (int32_t)i) _exit(2);
    _exit(0);
  }
  static struct end e;
  static int32_t v[(GCOLL_STEPS + 1) * SLOT / 4];
  fill(v, steps * n, 0);
  end_setup(&e, f, 0, GCOLL_PROTO_SIMPLE, NULL, 30 * NS);
  gcoll_prims_bind(&e.p, v, NULL);
  /* GCOLL_STEPS steps fill the FIFO; the last one waits for a free slot. */
  assert_int_equal(gcoll_prim_send(&e.p, 0, steps * n), gcollSuccess);
  uint64_t done = gcoll_wait_now_ns();
  assert_true(e.w.futex_sleeps >= 1);
  uint64_t acted = atomic_load(&sh->acted_ns);
  assert_true(acted > 0);
  assert_true((double)(done > acted ? done - acted : 0) / NS < WOKEN_S);
  reap(pid);
  munmap(sh, g_map_bytes);
}

/* With no producer at all, a futex sleep longer than the deadline still
 * ends at the deadline. */
static void test_deadline_bounds_sleep(void **state) {
  (void)state;
  struct gcoll_fifo *f;
  struct shared *sh = map_shared(&f);
  static struct end e;
  int32_t got[SLOT / 4];
  uint64_t t0 = gcoll_wait_now_ns();
  end_setup(&e, f, 1, GCOLL_PROTO_SIMPLE, NULL, 100 * 1000000ull);
  gcoll_prims_bind(&e.p, NULL, got);
  assert_int_equal(gcoll_prim_recv(&e.p, 0, 1), gcollSystemError);
  assert_int_equal(e.w.reason, GCOLL_WAIT_DEADLINE);
  assert_true(e.w.futex_sleeps >= 1);
  double waited = (double)(gcoll_wait_now_ns() - t0) / NS;
  assert_true(waited >= 0.0999 && waited < WOKEN_S);
  munmap(sh, g_map_bytes);
}

struct aborter {
  _Atomic int *word;
  _Atomic uint64_t at_ns;
};

static void *abort_later(void *arg) {
  struct aborter *a = arg;
  sleep_ms(PEER_DELAY_MS);
  atomic_store(&a->at_ns, gcoll_wait_now_ns());
  atomic_store(a->word, gcollRemoteError);
  return NULL;
}

/* An abort word set while the waiter sleeps (nobody wakes the futex for
 * it) is seen within one futex timeout. */
static void test_abort_bounds_sleep(void **state) {
  (void)state;
  struct gcoll_fifo *f;
  struct shared *sh = map_shared(&f);
  static struct end e;
  _Atomic int word;
  atomic_init(&word, 0);
  struct aborter a = {.word = &word};
  atomic_init(&a.at_ns, 0);
  int32_t got[SLOT / 4];
  end_setup(&e, f, 1, GCOLL_PROTO_LL, &word, 30 * NS);
  e.w.wake_timeout_ns = 20 * 1000000ull;
  gcoll_prims_bind(&e.p, NULL, got);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_later, &a), 0);
  assert_int_equal(gcoll_prim_recv(&e.p, 0, 1), gcollRemoteError);
  uint64_t done = gcoll_wait_now_ns();
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(e.w.reason, GCOLL_WAIT_ABORTED);
  assert_true(e.w.futex_sleeps >= 1);
  assert_true((double)(done - atomic_load(&a.at_ns)) / NS < WOKEN_S);
  munmap(sh, g_map_bytes);
}

/* Publishing with nobody asleep makes no system call (the fast path), and
 * the sleeper words sit in the counters' padding. */
static void test_no_sleeper_no_wake(void **state) {
  (void)state;
  struct gcoll_fifo *f;
  struct shared *sh = map_shared(&f);
  struct gcoll_wait_stats before, after;
  gcoll_wait_get_stats(&before);
  for (uint64_t s = 1; s <= GCOLL_STEPS; s++) {
    gcoll_fifo_set_tail(f, s);
    gcoll_fifo_set_head(f, s);
  }
  gcoll_wait_get_stats(&after);
  assert_int_equal(after.futex_wakes, before.futex_wakes);
  assert_int_equal(atomic_load(&f->tail), GCOLL_STEPS);
  assert_int_equal(atomic_load(&f->head), GCOLL_STEPS);
  assert_int_equal(f->slot_bytes, SLOT);
  /* A raised flag (as if the consumer slept) makes the publish wake, once:
   * the producer takes the flag down. */
  atomic_store(&f->tail_asleep, 1);
  gcoll_fifo_set_tail(f, GCOLL_STEPS + 1);
  gcoll_fifo_set_tail(f, GCOLL_STEPS + 2);
  gcoll_wait_get_stats(&after);
  assert_int_equal(after.futex_wakes, before.futex_wakes + 1);
  assert_int_equal(atomic_load(&f->tail_asleep), 0);
  munmap(sh, g_map_bytes);
}

/* A long spin (an executor whose ranks each count on a core) gives the
 * core away every GCOLL_WAIT_SPIN_YIELD_ROUNDS rounds, in case its peer
 * was put on the same core: this executable's sched_yield stands in for
 * libc's (wait.o calls it through the dynamic linker, which finds this
 * one first), still yields, and publishes the counter at the third call,
 * as a peer that got the core would. A spin that never yields reaches the
 * third call only in its yield phase, after GCOLL_WAIT_DEDICATED_SPINS
 * rounds. */
static _Atomic uint64_t *g_publish_at_yield;
static int g_yields;

int sched_yield(void) {
  if (g_publish_at_yield != NULL && ++g_yields == 3)
    atomic_store_explicit(g_publish_at_yield, 1, memory_order_release);
  return (int)syscall(SYS_sched_yield);
}

static void test_long_spin_yields(void **state) {
  (void)state;
  _Atomic uint64_t ctr = 0;
  _Atomic uint32_t asleep = 0;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, 10 * NS);
  w.spins = GCOLL_WAIT_DEDICATED_SPINS;
  g_yields = 0;
  g_publish_at_yield = &ctr;
  gcollResult_t r = gcoll_wait_counter(&w, &ctr, 1, &asleep);
  g_publish_at_yield = NULL;
  assert_int_equal(r, gcollSuccess);
  assert_int_equal(g_yields, 3);
  /* Ended inside the spin, on the third of its yields. */
  assert_true(w.round <= 3 * GCOLL_WAIT_SPIN_YIELD_ROUNDS);
  assert_true(w.round < GCOLL_WAIT_DEDICATED_SPINS);
}

/* The process registered for membarrier when the library was loaded,
 * before any wait and while it had one thread (free then; 20 ms with a
 * second thread here). Read before cmocka or any test starts a thread. */
static int g_fast_at_start;

static void test_registered_at_load(void **state) {
  (void)state;
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0);
  long need = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  if (cmds < 0 || (cmds & need) != need) skip();
  assert_int_equal(g_fast_at_start, 1);
}

int main(void) {
  g_fast_at_start = atomic_load(&gcoll_wait_fast);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registered_at_load),
      cmocka_unit_test(test_long_spin_yields),
      cmocka_unit_test(test_no_sleeper_no_wake),
      cmocka_unit_test(test_consumer_woken_simple),
      cmocka_unit_test(test_consumer_woken_ll),
      cmocka_unit_test(test_producer_woken),
      cmocka_unit_test(test_deadline_bounds_sleep),
      cmocka_unit_test(test_abort_bounds_sleep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
