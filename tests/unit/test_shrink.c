/* gcollCommShrink and gcollCommRevoke on communicators of gcollCommInitAll
 * (ranks as threads of this process, bootstrap "local").
 *
 * The excluded rank's thread destroys its communicator at once: the local
 * store then answers a get for a key not yet put with "rank left" at once,
 * as the TCP store does after a rank died, so the survivors' wait for the
 * leader's id is the path a real death takes. The survivors' new
 * communicator (parent order, gap closed) runs an allreduce checked
 * against the serial sum; then it is revoked, refuses an allreduce, and is
 * destroyed. The argument checks are tested on one rank alone (they are
 * local and consume no shrink count). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gcoll.h"

#define NRANKS 4
#define COUNT 40009

struct job {
  gcollComm_t comm;
  int rank;
  const int *exclude;
  int nexclude;
  int flags;
  /* results */
  gcollResult_t shrink_rc, revoked_rc;
  int new_rank, new_size;
  long wrong;
  char why[512];
};

static int32_t value(int parent_rank, size_t i) { return (int32_t)((parent_rank + 1) * 7 + (int)(i % 13)); }

static void *survivor(void *arg) {
  struct job *j = arg;
  gcollComm_t c = NULL;
  j->shrink_rc = gcollCommShrink(j->comm, j->exclude, j->nexclude, &c, j->flags);
  if (j->shrink_rc != gcollSuccess) {
    strncpy(j->why, gcollGetLastError(NULL), sizeof(j->why) - 1);
    return NULL;
  }
  gcollCommUserRank(c, &j->new_rank);
  gcollCommCount(c, &j->new_size);
  int32_t *buf = malloc(COUNT * sizeof(int32_t));
  if (buf == NULL) {
    j->wrong = 1;
    return NULL;
  }
  for (size_t i = 0; i < COUNT; i++) buf[i] = value(j->rank, i);
  if (gcollAllReduce(buf, buf, COUNT, gcollInt32, gcollSum, c, NULL) != gcollSuccess) j->wrong++;
  for (size_t i = 0; i < COUNT && j->wrong == 0; i++) {
    int32_t want = 0;
    for (int r = 0; r < NRANKS; r++) {
      int excluded = 0;
      for (int k = 0; k < j->nexclude; k++) excluded |= j->exclude[k] == r;
      if (!excluded) want += value(r, i);
    }
    j->wrong += buf[i] != want;
  }
  gcollCommRevoke(c);
  j->revoked_rc = gcollAllReduce(buf, buf, COUNT, gcollInt32, gcollSum, c, NULL);
  free(buf);
  gcollCommDestroy(c);
  return NULL;
}

static void shrink_run(const int *exclude, int nexclude, int flags) {
  gcollComm_t comms[NRANKS];
  assert_int_equal(gcollCommInitAll(comms, NRANKS, NULL), gcollSuccess);
  struct job jobs[NRANKS];
  pthread_t th[NRANKS];
  int started[NRANKS] = {0};
  for (int r = 0; r < NRANKS; r++) {
    jobs[r] = (struct job){.comm = comms[r], .rank = r, .exclude = exclude,
                           .nexclude = nexclude, .flags = flags};
    int excluded = 0;
    for (int k = 0; k < nexclude; k++) excluded |= exclude[k] == r;
    if (excluded) {
      /* Gone before the others shrink: it never calls. */
      gcollCommDestroy(comms[r]);
      comms[r] = NULL;
      continue;
    }
    assert_int_equal(pthread_create(&th[r], NULL, survivor, &jobs[r]), 0);
    started[r] = 1;
  }
  int below = 0;
  for (int r = 0; r < NRANKS; r++) {
    if (!started[r]) {
      below++;
      continue;
    }
    pthread_join(th[r], NULL);
    if (jobs[r].shrink_rc != gcollSuccess) print_error("rank %d: %s\n", r, jobs[r].why);
    assert_int_equal(jobs[r].shrink_rc, gcollSuccess);
    assert_int_equal(jobs[r].new_rank, r - below);
    assert_int_equal(jobs[r].new_size, NRANKS - nexclude);
    assert_int_equal(jobs[r].wrong, 0);
    assert_int_equal(jobs[r].revoked_rc, gcollInvalidUsage);
  }
  for (int r = 0; r < NRANKS; r++)
    if (comms[r] != NULL) assert_int_equal(gcollCommDestroy(comms[r]), gcollSuccess);
}

static void test_shrink_middle_rank_left(void **state) {
  (void)state;
  const int ex[] = {1};
  shrink_run(ex, 1, GCOLL_SHRINK_ABORT);
}

static void test_shrink_rank0_and_3_left(void **state) {
  (void)state;
  const int ex[] = {3, 0};   /* unsorted: the leader is rank 1 */
  shrink_run(ex, 2, GCOLL_SHRINK_DEFAULT);
}

static void test_shrink_refusals(void **state) {
  (void)state;
  gcollComm_t comms[3];
  assert_int_equal(gcollCommInitAll(comms, 3, NULL), gcollSuccess);
  gcollComm_t c = (gcollComm_t)1;
  const int self[] = {0}, range[] = {3}, negative[] = {-1}, dup[] = {1, 1}, all[] = {1, 2, 0};
  assert_int_equal(gcollCommShrink(comms[0], self, 1, &c, 0), gcollInvalidArgument);
  assert_null(c);
  assert_non_null(strstr(gcollGetLastError(NULL), "exclude list"));
  assert_int_equal(gcollCommShrink(comms[0], range, 1, &c, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(comms[0], negative, 1, &c, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(comms[0], dup, 2, &c, 0), gcollInvalidArgument);
  assert_non_null(strstr(gcollGetLastError(NULL), "twice"));
  assert_int_equal(gcollCommShrink(comms[0], all, 3, &c, 0), gcollInvalidArgument);
  assert_non_null(strstr(gcollGetLastError(NULL), "no rank would remain"));
  assert_int_equal(gcollCommShrink(comms[0], NULL, 1, &c, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(comms[0], range, -1, &c, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(comms[0], range, 1, &c, 4), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(comms[0], range, 1, NULL, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommShrink(NULL, range, 1, &c, 0), gcollInvalidArgument);
  assert_int_equal(gcollCommRevoke(NULL), gcollInvalidArgument);
  for (int r = 0; r < 3; r++) assert_int_equal(gcollCommDestroy(comms[r]), gcollSuccess);
}

int main(void) {
  setenv("GCOLL_TIMEOUT", "20", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shrink_middle_rank_left),
      cmocka_unit_test(test_shrink_rank0_and_3_left),
      cmocka_unit_test(test_shrink_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
