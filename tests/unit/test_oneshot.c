/* The one-shot board (kernels/host_oneshot.h): forked ranks over one
 * MAP_SHARED board, as the runtime's shm segment is shared.
 *
 *   - Many calls in a row, of every shape the executor makes (everyone
 *     writes and reads everyone; a broadcast's root writes and the others
 *     read it; a reduce's ranks write and its root reads), roots rotating,
 *     random sizes (0 and primes among them) and random pauses so that
 *     ranks drift apart and roots run ahead: after each call every slot a
 *     rank reads holds that call's vector, never one of the call before or
 *     after (which would show an area reused while a peer still reads it).
 *   - A rank that waits for nobody runs exactly as many calls ahead of
 *     ranks that have not come as its size has areas, then waits for them;
 *     once it had to wait, it runs on as far as what it waited for
 *     allows (half the areas more than it needed), not one call further.
 *   - A rank that does not come: the others fail at their deadline naming
 *     it, and an abort word ends a wait with its value.
 *   - The layout checks refuse a board of another rank count, size or
 *     version, and sizes that overflow. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gcoll.h"
#include "kernels/host_oneshot.h"
#include "kernels/wait.h"

#define SLOT 1024
#define NS 1000000000ull

static void *map_board(int nranks, size_t *bytes) {
  *bytes = gcoll_oneshot_bytes(nranks, SLOT);
  assert_true(*bytes > 0);
  void *m = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(m != MAP_FAILED);
  gcoll_oneshot_format(m, nranks, SLOT);
  return m;
}

/* The byte rank r writes at position i of call k's vector. */
static unsigned char pattern(int r, uint64_t k, size_t i) {
  return (unsigned char)(r * 71 + k * 13 + i * 7 + 1);
}

/* The size of call k, the same on every rank: 0, 1, primes, a tiny line's
 * input and one byte more, up to SLOT. */
static size_t call_bytes(uint64_t k) {
  static const size_t sizes[] = {0, 1, 2, 3, 13, 31, 56, 57, 61, 127, 509, 1021, SLOT};
  return sizes[(k * 7) % (sizeof(sizes) / sizeof(sizes[0]))];
}

enum shape { EVERYONE, BROADCAST, REDUCE };

/* Calls in a row of one shape and root (set before forking): 1 mixes
 * them call by call, so every rank waits for everyone every third call;
 * long runs let roots and leaves run ahead into the reuse guard, where
 * they wait on a peer's tiny line or counter. */
static uint64_t g_run_length = 1;

/* Call k's shape and root, the same on every rank. */
static enum shape call_shape(uint64_t k, int nranks, int *root) {
  uint64_t run = k / g_run_length;
  *root = (int)((run / 3) % (uint64_t)nranks);
  return (enum shape)(run % 3);
}

static int run_rank(void *mem, int rank, int nranks, uint64_t calls) {
  struct gcoll_oneshot o;
  if (gcoll_oneshot_bind(&o, mem, rank) != 0) return 9;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, 30 * NS);
  w.spins = GCOLL_WAIT_SHARED_SPINS; /* forked ranks outnumber the cores */
  unsigned char src[SLOT];
  srand((unsigned)rank * 7919u + 1u);
  for (uint64_t k = 1; k <= calls; k++) {
    size_t n = call_bytes(k);
    int root;
    enum shape shape = call_shape(k, nranks, &root);
    for (size_t i = 0; i < n; i++) src[i] = pattern(rank, k, i);
    if (rand() % 8 == 0) usleep((useconds_t)(rand() % 200));
    struct gcoll_oneshot_part part = {
        .src = src, .nbytes = n, .sources = GCOLL_ONESHOT_ALL, .need = n};
    if (shape == BROADCAST) {
      part.nbytes = rank == root ? n : 0;
      part.sources = rank == root ? GCOLL_ONESHOT_NONE : root;
    } else if (shape == REDUCE) {
      part.sources = rank == root ? GCOLL_ONESHOT_ALL : GCOLL_ONESHOT_NONE;
    }
    const char *area = NULL;
    size_t stride = 0;
    int waited = -1;
    uint64_t call = 0;
    if (gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call) != gcollSuccess)
      return 1;
    if (call != k) return 2;
    if (stride != (n <= GCOLL_ONESHOT_TINY_BYTES   ? sizeof(struct gcoll_oneshot_tiny)
                   : n <= GCOLL_ONESHOT_SMALL_SLOT ? GCOLL_ONESHOT_SMALL_SLOT
                                                   : SLOT))
      return 4;
    for (int r = 0; r < nranks; r++) {
      int reads = part.sources == GCOLL_ONESHOT_ALL || part.sources == r;
      for (size_t i = 0; reads && i < n; i++)
        if ((unsigned char)area[(size_t)r * stride + i] != pattern(r, k, i)) return 3;
    }
  }
  gcoll_oneshot_unbind(&o);
  return 0;
}

static void exchange_ranks(int nranks) {
  size_t bytes;
  void *mem = map_board(nranks, &bytes);
  assert_int_equal(gcoll_oneshot_check(mem, bytes, nranks, NULL, 0), 0);
  pid_t pids[8];
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) _exit(run_rank(mem, r, nranks, 3000));
  }
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  munmap(mem, bytes);
}

static void test_exchange_2(void **state) { (void)state; exchange_ranks(2); }
static void test_exchange_3(void **state) { (void)state; exchange_ranks(3); }
static void test_exchange_5(void **state) { (void)state; exchange_ranks(5); }

static void test_exchange_runs(void **state) {
  (void)state;
  g_run_length = 150;
  exchange_ranks(2);
  exchange_ranks(3);
  g_run_length = 1;
}

/* A broadcast's root waits for nobody. Its readers inside call c (arrived
 * there, and in tiny calls their tiny lines written up to it, as the
 * executor's ranks write them); with c = 1 (still reading call 1) the
 * root runs exactly as many calls as the areas of its size (small calls
 * have more), and the next one waits for them: it would overwrite call
 * 1's area. Further on:
 * the root's first wait, at call depth + 1, asks for call depth / 2 + 1
 * (host_oneshot.c: half the areas more than the area's reuse needs) and
 * learns from a tiny line that much, from a counter all of c. So it
 * completes exactly `expect` calls and waits at the next, naming a
 * reader; a guard off by one, or a tiny line taken for a later call than
 * it holds, completes another. */
static void root_runs_on_after_wait(int nranks, size_t need, uint64_t c, uint64_t expect) {
  size_t bytes;
  void *mem = map_board(nranks, &bytes);
  struct gcoll_oneshot o;
  assert_int_equal(gcoll_oneshot_bind(&o, mem, 0), 0);
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, NS / 5);
  const uint64_t areas = gcoll_oneshot_small_areas(nranks);
  for (int r = 1; r < nranks; r++) {
    atomic_store(&o.lines[r].arrived, c);
    for (uint64_t k = 1; need <= GCOLL_ONESHOT_TINY_BYTES && k <= c; k++)
      atomic_store(&o.tiny[(k % areas) * (uint64_t)nranks + (uint64_t)r].call, k);
  }
  static char input[SLOT];
  struct gcoll_oneshot_part part = {
      .src = input, .nbytes = need, .sources = GCOLL_ONESHOT_NONE, .need = need};
  const char *area = NULL;
  size_t stride = 0;
  int waited = -1;
  uint64_t call = 0;
  for (uint64_t k = 1; k <= expect; k++)
    assert_int_equal(gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call), gcollSuccess);
  assert_int_equal(gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call), gcollSystemError);
  assert_int_equal(call, expect + 1);
  assert_true(waited >= 1 && waited < nranks);
  gcoll_oneshot_unbind(&o);
  munmap(mem, bytes);
}

static void test_root_runs_ahead(void **state) {
  (void)state;
  root_runs_on_after_wait(3, 1, 1, GCOLL_ONESHOT_SMALL_AREAS);
  root_runs_on_after_wait(3, GCOLL_ONESHOT_TINY_BYTES + 1, 1, GCOLL_ONESHOT_SMALL_AREAS);
  root_runs_on_after_wait(3, GCOLL_ONESHOT_SMALL_SLOT, 1, GCOLL_ONESHOT_SMALL_AREAS);
  root_runs_on_after_wait(3, GCOLL_ONESHOT_SMALL_SLOT + 1, 1, GCOLL_ONESHOT_AREAS);
  root_runs_on_after_wait(2, 1, 1, GCOLL_ONESHOT_AREAS); /* pairs keep 16 */
  /* Tiny: it learns call depth / 2 + 1 and stops at 3 * depth / 2. */
  root_runs_on_after_wait(2, 1, GCOLL_ONESHOT_AREAS / 2 + 3, 3 * GCOLL_ONESHOT_AREAS / 2);
  root_runs_on_after_wait(3, 8, GCOLL_ONESHOT_SMALL_AREAS / 2 + 8,
                          3 * GCOLL_ONESHOT_SMALL_AREAS / 2);
  /* Not tiny: it learns c from the counter and stops at c + depth - 1. */
  root_runs_on_after_wait(3, GCOLL_ONESHOT_TINY_BYTES + 1, GCOLL_ONESHOT_SMALL_AREAS / 2 + 8,
                          3 * GCOLL_ONESHOT_SMALL_AREAS / 2 + 7);
  root_runs_on_after_wait(2, GCOLL_ONESHOT_SMALL_SLOT + 1, GCOLL_ONESHOT_AREAS / 2 + 3,
                          3 * GCOLL_ONESHOT_AREAS / 2 + 2);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A broadcast reader that sleeps on the root's counter and reports how
 * long after the root's publish (published_at, shared) it woke. */
static int sleeping_reader(void *mem, int rank, uint64_t wake_timeout_ns, uint64_t timeout_ns,
                           _Atomic uint64_t *published_ns) {
  struct gcoll_oneshot o;
  if (gcoll_oneshot_bind(&o, mem, rank) != 0) return 9;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, timeout_ns);
  w.spins = GCOLL_WAIT_SHARED_SPINS;
  w.wake_timeout_ns = wake_timeout_ns;
  struct gcoll_oneshot_part part = {.src = NULL, .nbytes = 0, .sources = 0, .need = 1};
  const char *area;
  size_t stride;
  int waited;
  uint64_t call;
  gcollResult_t rc = gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call);
  if (rc != gcollSuccess) return 1;
  double late = now_s() - (double)atomic_load(published_ns) / 1e9;
  return late < 1.0 ? 0 : 2;
}

/* Several ranks sleep on one arrival counter with one flag. Rank 2's
 * sleeps end by their 1 ms timeout until its deadline (50 ms) ends its
 * wait; rank 1 sleeps 5 s a round. The root publishes after 300 ms and
 * rank 1 must wake then, not 5 s later: a waiter whose sleep timed out
 * must not take down the flag the other one raised. */
static void test_two_sleepers(void **state) {
  (void)state;
  size_t bytes;
  void *mem = map_board(3, &bytes);
  _Atomic uint64_t *published_ns =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(published_ns != MAP_FAILED);
  atomic_store(published_ns, 0);
  pid_t patient = fork();
  assert_true(patient >= 0);
  if (patient == 0) _exit(sleeping_reader(mem, 1, 5 * NS, 30 * NS, published_ns));
  pid_t hasty = fork();
  assert_true(hasty >= 0);
  if (hasty == 0) _exit(sleeping_reader(mem, 2, NS / 1000, NS / 20, published_ns) == 1 ? 0 : 3);
  int status = 0;
  assert_int_equal(waitpid(hasty, &status, 0), hasty);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0); /* its deadline ended its wait */
  usleep(250000);
  struct gcoll_oneshot o;
  assert_int_equal(gcoll_oneshot_bind(&o, mem, 0), 0);
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, 30 * NS);
  struct gcoll_oneshot_part part = {
      .src = "b", .nbytes = 1, .sources = GCOLL_ONESHOT_NONE, .need = 1};
  const char *area;
  size_t stride;
  int waited;
  uint64_t call;
  atomic_store(published_ns, (uint64_t)(now_s() * 1e9));
  assert_int_equal(gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call),
                   gcollSuccess);
  assert_int_equal(waitpid(patient, &status, 0), patient);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0); /* woken by the publish */
  gcoll_oneshot_unbind(&o);
  munmap(published_ns, 4096);
  munmap(mem, bytes);
}

/* Rank 2 of 3 never comes: rank 0 waits for it and fails at its deadline,
 * naming it; with an abort word set instead, the wait returns its value. */
static void test_absent_rank(void **state) {
  (void)state;
  size_t bytes;
  void *mem = map_board(3, &bytes);
  struct gcoll_oneshot_part part = {
      .src = "x", .nbytes = 1, .sources = GCOLL_ONESHOT_ALL, .need = 1};
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* rank 1 comes for its first call */
    struct gcoll_oneshot o;
    if (gcoll_oneshot_bind(&o, mem, 1) != 0) _exit(2);
    struct gcoll_wait w;
    gcoll_wait_init(&w, NULL, NULL, NS / 5);
    const char *area;
    size_t stride;
    int waited = -1;
    uint64_t call;
    gcollResult_t rc = gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call);
    _exit(rc == gcollSystemError && waited == 2 ? 0 : 1);
  }
  struct gcoll_oneshot o;
  assert_int_equal(gcoll_oneshot_bind(&o, mem, 0), 0);
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, NS / 5);
  const char *area = NULL;
  size_t stride = 0;
  int waited = -1;
  uint64_t call = 0;
  assert_int_equal(gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call), gcollSystemError);
  assert_int_equal(w.reason, GCOLL_WAIT_DEADLINE);
  assert_int_equal(call, 1);
  /* Rank 1 arrived, so the one rank 0 was left waiting for is rank 2. */
  assert_int_equal(waited, 2);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);

  _Atomic int abort_word = (int)gcollRemoteError;
  gcoll_wait_init(&w, &abort_word, NULL, 30 * NS);
  assert_int_equal(gcoll_oneshot_run(&o, &w, &part, &area, &stride, &waited, &call), gcollRemoteError);
  assert_int_equal(w.reason, GCOLL_WAIT_ABORTED);
  gcoll_oneshot_unbind(&o);
  munmap(mem, bytes);
}

static void test_layout_checks(void **state) {
  (void)state;
  size_t bytes;
  void *mem = map_board(4, &bytes);
  char err[256];
  assert_int_equal(gcoll_oneshot_check(mem, bytes, 4, err, sizeof(err)), 0);
  assert_int_equal(gcoll_oneshot_check(mem, bytes, 3, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "expected 3 ranks"));
  assert_int_equal(gcoll_oneshot_check(mem, bytes - 64, 4, err, sizeof(err)), -1);
  assert_int_equal(gcoll_oneshot_check(mem, 16, 4, err, sizeof(err)), -1);
  ((struct gcoll_oneshot_header *)mem)->version = GCOLL_ONESHOT_VERSION + 1;
  assert_int_equal(gcoll_oneshot_check(mem, bytes, 4, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "not a gcoll one-shot board"));
  munmap(mem, bytes);

  assert_int_equal(gcoll_oneshot_bytes(0, SLOT), 0);
  assert_int_equal(gcoll_oneshot_bytes(GCOLL_ONESHOT_MAX_RANKS + 1, SLOT), 0);
  assert_int_equal(gcoll_oneshot_bytes(4, 100), 0); /* not a multiple of 64 */
  assert_int_equal(gcoll_oneshot_bytes(4, 0), 0);
  assert_int_equal(gcoll_oneshot_bytes(4, (uint64_t)1 << 41), 0);
  assert_int_equal(gcoll_oneshot_bytes(2, 64),
                   64 + 2 * 64 + GCOLL_ONESHOT_AREAS * 2 * (64 + GCOLL_ONESHOT_SMALL_SLOT + 64));
  assert_int_equal(gcoll_oneshot_bytes(3, 64),
                   64 + 3 * 64 + GCOLL_ONESHOT_SMALL_AREAS * 3 * (64 + GCOLL_ONESHOT_SMALL_SLOT) +
                       GCOLL_ONESHOT_AREAS * 3 * 64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exchange_2),
      cmocka_unit_test(test_exchange_3),
      cmocka_unit_test(test_exchange_5),
      cmocka_unit_test(test_exchange_runs),
      cmocka_unit_test(test_root_runs_ahead),
      cmocka_unit_test(test_two_sleepers),
      cmocka_unit_test(test_absent_rank),
      cmocka_unit_test(test_layout_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
