/* gcollGroupStart/gcollGroupEnd: a per-thread nesting depth and the queue of
 * operations made inside it, run by the outermost gcollGroupEnd.
 *
 * Order of a group. All its sends and receives run first, together
 * (comm_p2p.c): that is what lets a rank send to one peer and receive from
 * another without either waiting for the other. Then its collectives run,
 * in call order on each communicator and on all communicators at once, one
 * thread each: one thread driving several communicators of one job (the
 * gcollCommInitAll pattern) would otherwise wait in the first collective
 * for ranks whose turn never comes. Every rank of a communicator queues
 * the same collectives in the same order, so every rank runs them in the
 * same order. Unlike NCCL, a send of a group does not progress alongside
 * the group's collectives: a peer that enters a collective before posting
 * the matching receive makes the send wait for GCOLL_TIMEOUT.
 *
 * A call refused inside a group (bad argument) poisons the group, as in
 * NCCL: its gcollGroupEnd runs nothing and returns that error, since
 * running the rest would leave the refused call's peers waiting for a
 * partner that never comes. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/comm_p2p.h"

struct group {
  int depth;
  struct gcoll_p2p_op *ops;
  int nops, cap;
  struct gcoll_coll_op *colls;
  int ncolls, coll_cap;
  gcollResult_t error;         /* first refused call, gcollSuccess if none */
  char reason[512];
};

static _Thread_local struct group group;
/* Threads whose group is open. A library's thread-local variable costs a
 * call to __tls_get_addr (3% of a small call), and almost every call is
 * made with no group open anywhere: a thread sees its own increment, so
 * while this reads 0 its own depth is 0 too. */
static _Atomic int g_open_groups;

int gcoll_group_depth(void) {
  if (atomic_load_explicit(&g_open_groups, memory_order_relaxed) == 0) return 0;
  return group.depth;
}

gcollResult_t gcoll_group_note(gcollResult_t rc) {
  if (group.depth > 0 && rc != gcollSuccess && group.error == gcollSuccess) {
    group.error = rc;
    snprintf(group.reason, sizeof(group.reason), "%s", gcollGetLastError(NULL));
  }
  return rc;
}

/* Makes room for one more element in a queue of *n of *cap. */
static gcollResult_t grow(void **items, int n, int *cap, size_t size) {
  if (n < *cap) return gcollSuccess;
  int want = *cap ? *cap * 2 : 16;
  void *more = *cap > INT_MAX / 2 ? NULL : realloc(*items, (size_t)want * size);
  if (more == NULL)
    return gcoll_group_note(
        gcoll_fail(gcollSystemError, "out of memory for %d grouped operations", n + 1));
  *items = more;
  *cap = want;
  return gcollSuccess;
}

gcollResult_t gcoll_group_enqueue(const struct gcoll_p2p_op *op) {
  gcollResult_t rc = grow((void **)&group.ops, group.nops, &group.cap, sizeof(*op));
  if (rc == gcollSuccess) group.ops[group.nops++] = *op;
  return rc;
}

gcollResult_t gcoll_group_enqueue_coll(const struct gcoll_coll_op *op) {
  gcollResult_t rc = grow((void **)&group.colls, group.ncolls, &group.coll_cap, sizeof(*op));
  if (rc == gcollSuccess) group.colls[group.ncolls++] = *op;
  return rc;
}

static void group_reset(void) {
  free(group.ops);
  free(group.colls);
  group.ops = NULL;
  group.colls = NULL;
  group.nops = group.cap = group.ncolls = group.coll_cap = 0;
  group.error = gcollSuccess;
  group.reason[0] = '\0';
}

/* One communicator's share of the group's collectives, run in call order
 * on one thread; the first failure ends that communicator's share. */
struct comm_run {
  const struct gcoll_coll_op *colls;
  int ncolls;
  struct gcollComm *comm;
  pthread_t thread;
  int started;
  gcollResult_t rc;
  int failed_at;               /* index into colls of the failed call */
  char reason[512];            /* its line: last errors are per thread */
};

static void *comm_run_main(void *arg) {
  struct comm_run *r = arg;
  r->rc = gcollSuccess;
  for (int i = 0; i < r->ncolls; i++) {
    if (r->colls[i].comm != r->comm) continue;
    r->rc = gcoll_coll_run_op(&r->colls[i]);
    if (r->rc != gcollSuccess) {
      r->failed_at = i;
      snprintf(r->reason, sizeof(r->reason), "%s", gcollGetLastError(NULL));
      break;
    }
  }
  return NULL;
}

static gcollResult_t run_collectives(const struct gcoll_coll_op *colls, int n) {
  struct comm_run *runs = calloc((size_t)n, sizeof(*runs));
  if (runs == NULL)
    return gcoll_fail(gcollSystemError, "gcollGroupEnd: out of memory for %d collectives", n);
  int nruns = 0;
  for (int i = 0; i < n; i++) {
    int k = 0;
    while (k < nruns && runs[k].comm != colls[i].comm) k++;
    if (k == nruns)
      runs[nruns++] = (struct comm_run){.colls = colls, .ncolls = n, .comm = colls[i].comm};
  }
  /* The caller's thread takes the first communicator's share. */
  gcollResult_t rc = gcollSuccess;
  for (int k = 1; k < nruns; k++) {
    int e = pthread_create(&runs[k].thread, NULL, comm_run_main, &runs[k]);
    if (e != 0) {
      /* Those started cannot be recalled; they end by themselves, with
       * the peers or at GCOLL_TIMEOUT, and are joined below. */
      rc = gcoll_fail(gcollSystemError, "gcollGroupEnd: cannot start a thread for %d "
                      "communicators: %s", nruns, strerror(e));
      break;
    }
    runs[k].started = 1;
  }
  comm_run_main(&runs[0]);
  for (int k = 1; k < nruns; k++)
    if (runs[k].started) pthread_join(runs[k].thread, NULL);
  if (rc == gcollSuccess) {
    /* Of several failures, the one called first is reported. */
    const struct comm_run *first = NULL;
    for (int k = 0; k < nruns; k++)
      if (runs[k].rc != gcollSuccess && (first == NULL || runs[k].failed_at < first->failed_at))
        first = &runs[k];
    if (first != NULL) rc = gcoll_fail(first->rc, "%s", first->reason);
  }
  free(runs);
  return rc;
}

gcollResult_t gcollGroupStart(void) {
  if (group.depth == INT_MAX)
    return gcoll_fail(gcollInvalidUsage, "gcollGroupStart: groups nested too deeply");
  if (group.depth++ == 0) atomic_fetch_add_explicit(&g_open_groups, 1, memory_order_relaxed);
  return gcollSuccess;
}

gcollResult_t gcollGroupEnd(void) {
  if (group.depth == 0)
    return gcoll_fail(gcollInvalidUsage, "gcollGroupEnd without a matching gcollGroupStart");
  if (--group.depth > 0) return gcollSuccess;
  atomic_fetch_sub_explicit(&g_open_groups, 1, memory_order_relaxed);
  gcollResult_t rc = gcollSuccess;
  if (group.error != gcollSuccess)
    rc = gcoll_fail(group.error, "gcollGroupEnd: the group was not run, a call in it failed: %s",
                    group.reason);
  if (rc == gcollSuccess && group.nops > 0)
    rc = gcoll_p2p_run(group.ops, group.nops, "gcollGroupEnd");
  if (rc == gcollSuccess && group.ncolls > 0) rc = run_collectives(group.colls, group.ncolls);
  group_reset();
  return rc;
}

/* ncclGroupSimulateEnd: the group closes as with gcollGroupEnd, but its
 * operations are dropped, not run (a refused call's error is still the
 * result, as NCCL reports the group's error before simulating). */
gcollResult_t gcoll_group_end_unrun(void) {
  if (group.depth == 0)
    return gcoll_fail(gcollInvalidUsage, "group end without a matching group start");
  if (--group.depth > 0) return gcollSuccess;
  atomic_fetch_sub_explicit(&g_open_groups, 1, memory_order_relaxed);
  gcollResult_t rc = gcollSuccess;
  if (group.error != gcollSuccess)
    rc = gcoll_fail(group.error, "ncclGroupSimulateEnd: the group was dropped, a call in it "
                    "failed: %s", group.reason);
  group_reset();
  return rc;
}
