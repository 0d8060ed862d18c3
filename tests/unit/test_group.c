/* Collectives inside gcollGroupStart/gcollGroupEnd, with the ranks as
 * communicators of one process (gcollCommInitAll) driven by ONE thread:
 * the NCCL pattern of a process owning several devices. Without grouping
 * the first collective would wait for ranks whose calls never come, so
 * these tests can only pass if the group runs the communicators at once.
 *
 * Inputs are small integers from (seed, rank, index), so every expected
 * value is computed serially here and compared exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gcoll.h"
#include "testutil.h"

#define MAXR 4

static const size_t counts[] = {0, 1, 7, 1023, 4097, 100003};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

struct job {
  int n;
  gcollComm_t comms[MAXR];
};

static void job_init(struct job *j, int n) {
  j->n = n;
  if (gcollCommInitAll(j->comms, n, NULL) != gcollSuccess)
    fail_msg("InitAll(%d): %s", n, gcollGetLastError(NULL));
}

static void job_free(struct job *j) {
  for (int i = 0; i < j->n; i++) assert_int_equal(gcollCommDestroy(j->comms[i]), gcollSuccess);
}

static int64_t *xalloc(size_t n) {
  int64_t *p = malloc((n ? n : 1) * sizeof(int64_t));
  assert_non_null(p);
  return p;
}

/* Allreduce (int64 sum, out of place) on every communicator in one group,
 * for every count; then a second group with several collectives per
 * communicator: allreduce max in place, allgather, broadcast from a root
 * that moves, all on separate buffers. */
static void run_groups(int n, uint64_t seed) {
  struct job j;
  job_init(&j, n);
  size_t maxc = counts[NCOUNTS - 1];
  int64_t *send[MAXR], *recv[MAXR], *inpl[MAXR], *gath[MAXR], *bc[MAXR];
  for (int r = 0; r < n; r++) {
    send[r] = xalloc(maxc);
    recv[r] = xalloc(maxc);
    inpl[r] = xalloc(maxc);
    gath[r] = xalloc(maxc * (size_t)n);
    bc[r] = xalloc(maxc);
  }
  for (size_t k = 0; k < NCOUNTS; k++) {
    size_t c = counts[k];
    uint64_t s = seed + 10 * k;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < c; i++) send[r][i] = test_rank_input(s, r, i, 1000000);
    assert_int_equal(gcollGroupStart(), gcollSuccess);
    for (int r = 0; r < n; r++)
      assert_int_equal(gcollAllReduce(send[r], recv[r], c, gcollInt64, gcollSum, j.comms[r], NULL),
                       gcollSuccess);
    if (gcollGroupEnd() != gcollSuccess) fail_msg("group of %d: %s", n, gcollGetLastError(NULL));
    for (size_t i = 0; i < c; i++) {
      int64_t want = 0;
      for (int q = 0; q < n; q++) want += test_rank_input(s, q, i, 1000000);
      for (int r = 0; r < n; r++)
        if (recv[r][i] != want) fail_msg("n=%d count=%zu rank %d [%zu]: %lld, want %lld", n, c, r,
                                          i, (long long)recv[r][i], (long long)want);
    }

    int root = (int)(k % (size_t)n);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < c; i++) {
        inpl[r][i] = test_rank_input(s + 1, r, i, 50);
        send[r][i] = test_rank_input(s + 2, r, i, 1 << 30);
        bc[r][i] = r == root ? test_rank_input(s + 3, root, i, 1 << 30) : -1;
      }
    assert_int_equal(gcollGroupStart(), gcollSuccess);
    for (int r = 0; r < n; r++) {
      gcollComm_t cm = j.comms[r];
      assert_int_equal(gcollAllReduce(inpl[r], inpl[r], c, gcollInt64, gcollMax, cm, NULL),
                       gcollSuccess);
      assert_int_equal(gcollAllGather(send[r], gath[r], c, gcollInt64, cm, NULL), gcollSuccess);
      assert_int_equal(gcollBroadcast(bc[r], bc[r], c, gcollInt64, root, cm, NULL), gcollSuccess);
    }
    if (gcollGroupEnd() != gcollSuccess) fail_msg("group of 3x%d: %s", n, gcollGetLastError(NULL));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < c; i++) {
        int64_t mx = INT64_MIN;
        for (int q = 0; q < n; q++)
          if (test_rank_input(s + 1, q, i, 50) > mx) mx = test_rank_input(s + 1, q, i, 50);
        assert_true(inpl[r][i] == mx);
        for (int q = 0; q < n; q++)
          assert_true(gath[r][(size_t)q * c + i] == test_rank_input(s + 2, q, i, 1 << 30));
        assert_true(bc[r][i] == test_rank_input(s + 3, root, i, 1 << 30));
      }
  }
  for (int r = 0; r < n; r++) {
    free(send[r]);
    free(recv[r]);
    free(inpl[r]);
    free(gath[r]);
    free(bc[r]);
  }
  job_free(&j);
}

static void test_group_1(void **state) { (void)state; run_groups(1, 11); }
static void test_group_2(void **state) { (void)state; run_groups(2, 22); }
static void test_group_3(void **state) { (void)state; run_groups(3, 33); }
static void test_group_4(void **state) { (void)state; run_groups(4, 44); }

/* Sends, receives and collectives in one group, one thread: each rank
 * sends its block to the next, receives the previous one's, and joins a
 * reducescatter. */
static void test_group_mixed(void **state) {
  (void)state;
  const int n = 3;
  const size_t c = 4097;
  struct job j;
  job_init(&j, n);
  int64_t *send[MAXR], *got[MAXR], *rsin[MAXR], *rsout[MAXR];
  for (int r = 0; r < n; r++) {
    send[r] = xalloc(c);
    got[r] = xalloc(c);
    rsin[r] = xalloc(c * (size_t)n);
    rsout[r] = xalloc(c);
    for (size_t i = 0; i < c; i++) send[r][i] = test_rank_input(5, r, i, 1 << 20);
    for (size_t i = 0; i < c * (size_t)n; i++) rsin[r][i] = test_rank_input(6, r, i, 1000);
  }
  assert_int_equal(gcollGroupStart(), gcollSuccess);
  for (int r = 0; r < n; r++) {
    assert_int_equal(gcollReduceScatter(rsin[r], rsout[r], c, gcollInt64, gcollSum, j.comms[r],
                                        NULL), gcollSuccess);
    assert_int_equal(gcollSend(send[r], c, gcollInt64, (r + 1) % n, j.comms[r], NULL),
                     gcollSuccess);
    assert_int_equal(gcollRecv(got[r], c, gcollInt64, (r + n - 1) % n, j.comms[r], NULL),
                     gcollSuccess);
  }
  if (gcollGroupEnd() != gcollSuccess) fail_msg("mixed group: %s", gcollGetLastError(NULL));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) {
      assert_true(got[r][i] == test_rank_input(5, (r + n - 1) % n, i, 1 << 20));
      int64_t want = 0;
      for (int q = 0; q < n; q++) want += test_rank_input(6, q, (size_t)r * c + i, 1000);
      assert_true(rsout[r][i] == want);
    }
  for (int r = 0; r < n; r++) {
    free(send[r]);
    free(got[r]);
    free(rsin[r]);
    free(rsout[r]);
  }
  job_free(&j);
}

/* Nothing runs before the outermost gcollGroupEnd; a refused call poisons
 * the group (nothing of it runs, its error comes back) and the
 * communicators stay usable for the next group. */
static void test_group_nesting_and_poison(void **state) {
  (void)state;
  const int n = 2;
  const size_t c = 1000;
  struct job j;
  job_init(&j, n);
  int64_t buf[MAXR][1000];
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) buf[r][i] = test_rank_input(9, r, i, 100);

  assert_int_equal(gcollGroupStart(), gcollSuccess);
  assert_int_equal(gcollGroupStart(), gcollSuccess);
  for (int r = 0; r < n; r++)
    assert_int_equal(gcollAllReduce(buf[r], buf[r], c, gcollInt64, gcollSum, j.comms[r], NULL),
                     gcollSuccess);
  assert_int_equal(gcollGroupEnd(), gcollSuccess);
  for (int r = 0; r < n; r++) assert_true(buf[r][0] == test_rank_input(9, r, 0, 100));
  assert_int_equal(gcollGroupEnd(), gcollSuccess);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++)
      assert_true(buf[r][i] == test_rank_input(9, 0, i, 100) + test_rank_input(9, 1, i, 100));

  /* Root 5 of 2 ranks is refused at the call, and then by the group. */
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) buf[r][i] = -7;
  assert_int_equal(gcollGroupStart(), gcollSuccess);
  assert_int_equal(gcollAllReduce(buf[0], buf[0], c, gcollInt64, gcollSum, j.comms[0], NULL),
                   gcollSuccess);
  assert_int_equal(gcollBroadcast(buf[1], buf[1], c, gcollInt64, 5, j.comms[1], NULL),
                   gcollInvalidArgument);
  assert_int_equal(gcollGroupEnd(), gcollInvalidArgument);
  assert_non_null(strstr(gcollGetLastError(NULL), "root"));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) assert_true(buf[r][i] == -7);

  assert_int_equal(gcollGroupStart(), gcollSuccess);
  for (int r = 0; r < n; r++)
    assert_int_equal(gcollAllReduce(buf[r], buf[r], c, gcollInt64, gcollSum, j.comms[r], NULL),
                     gcollSuccess);
  assert_int_equal(gcollGroupEnd(), gcollSuccess);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) assert_true(buf[r][i] == -14);
  job_free(&j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_1),     cmocka_unit_test(test_group_2),
      cmocka_unit_test(test_group_3),     cmocka_unit_test(test_group_4),
      cmocka_unit_test(test_group_mixed), cmocka_unit_test(test_group_nesting_and_poison),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
