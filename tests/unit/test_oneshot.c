/* The one-shot board (kernels/host_oneshot.h): forked ranks over one
 * MAP_SHARED board, as the runtime's shm segment is shared.
 *
 *   - Many calls in a row, with random sizes (0 and primes among them)
 *     and random pauses so that ranks drift apart: after each call every
 *     rank's area holds every rank's vector of that call, never a vector
 *     of the call before or after (which would show a reuse of an area
 *     while a peer still reads it).
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

/* The size of call k, the same on every rank: 0, 1, primes, up to SLOT. */
static size_t call_bytes(uint64_t k) {
  static const size_t sizes[] = {0, 1, 2, 3, 13, 31, 61, 127, 509, 1021, SLOT};
  return sizes[(k * 7) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static int run_rank(void *mem, int rank, int nranks, uint64_t calls) {
  struct gcoll_oneshot o;
  gcoll_oneshot_bind(&o, mem, rank);
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, 30 * NS);
  w.spins = GCOLL_WAIT_SHARED_SPINS; /* forked ranks outnumber the cores */
  unsigned char src[SLOT];
  srand((unsigned)rank * 7919u + 1u);
  for (uint64_t k = 1; k <= calls; k++) {
    size_t n = call_bytes(k);
    for (size_t i = 0; i < n; i++) src[i] = pattern(rank, k, i);
    if (rand() % 8 == 0) usleep((useconds_t)(rand() % 200));
    const char *area = NULL;
    int waited = -1;
    uint64_t call = 0;
    if (gcoll_oneshot_exchange(&o, &w, src, n, &area, &waited, &call) != gcollSuccess) return 1;
    if (call != k) return 2;
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < n; i++)
        if ((unsigned char)area[(size_t)r * SLOT + i] != pattern(r, k, i)) return 3;
  }
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

/* Rank 2 of 3 never comes: rank 0 waits for it and fails at its deadline,
 * naming it; with an abort word set instead, the wait returns its value. */
static void test_absent_rank(void **state) {
  (void)state;
  size_t bytes;
  void *mem = map_board(3, &bytes);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* rank 1 comes for its first call */
    struct gcoll_oneshot o;
    gcoll_oneshot_bind(&o, mem, 1);
    struct gcoll_wait w;
    gcoll_wait_init(&w, NULL, NULL, NS / 5);
    const char *area;
    int waited = -1;
    uint64_t call;
    gcollResult_t rc = gcoll_oneshot_exchange(&o, &w, "x", 1, &area, &waited, &call);
    _exit(rc == gcollSystemError && waited == 2 ? 0 : 1);
  }
  struct gcoll_oneshot o;
  gcoll_oneshot_bind(&o, mem, 0);
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, NS / 5);
  const char *area = NULL;
  int waited = -1;
  uint64_t call = 0;
  assert_int_equal(gcoll_oneshot_exchange(&o, &w, "y", 1, &area, &waited, &call),
                   gcollSystemError);
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
  assert_int_equal(gcoll_oneshot_exchange(&o, &w, "y", 1, &area, &waited, &call),
                   gcollRemoteError);
  assert_int_equal(w.reason, GCOLL_WAIT_ABORTED);
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
  assert_int_equal(gcoll_oneshot_bytes(2, 64), 64 + 2 * 64 + 2 * 2 * 64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exchange_2),
      cmocka_unit_test(test_exchange_3),
      cmocka_unit_test(test_exchange_5),
      cmocka_unit_test(test_absent_rank),
      cmocka_unit_test(test_layout_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
