/* gcollCommShrink and gcollCommRevoke: NCCL's fault-tolerance calls
 * (ncclCommShrink, ncclCommRevoke).
 *
 * Shrink needs no gathering: every survivor (every rank not excluded; the
 * excluded ones, dead or alive, never call it) passes the same exclude
 * list, so each computes the new communicator itself: its size, its own new
 * rank (its rank minus the excluded ranks below it, so the parent's order
 * is kept) and the leader (the lowest surviving rank). The leader makes a
 * fresh unique id and puts it in the parent's bootstrap under a key naming
 * the parent's shrink count and the excluded set; the others get it; all
 * join with gcollCommInitRank, so the new communicator gets its plan as any
 * communicator from an id does (comm_members.c) and shares no connection
 * with its parent. Like every collective call, the survivors shrink one
 * parent in one order (a rank left out of one shrink of a parent takes no
 * part in later shrinks of it).
 *
 * The parent's bootstrap must still answer: its store lives in the process
 * that made the parent's id (or is gcollrun's under a launcher plan), so a
 * shrink that excludes that process because it died fails at the deadline
 * with the store's reason. A store that saw a rank vanish answers a get for
 * a key nobody put yet at once (kvs_server.c: it fails waiters rather than
 * let them wait for the dead), which is exactly the case shrink exists for:
 * the survivors keep asking for the leader's id while the store still takes
 * their own puts (it is alive, the leader has not put yet), until the
 * deadline. PMI2's store shows values only after a fence of every rank,
 * which excluded ranks never join: refused.
 *
 * GCOLL_SHRINK_ABORT (NCCL_SHRINK_ABORT) first stops the parent's calls in
 * progress on other threads, as gcollCommAbort does but without freeing it:
 * the abort word fails every wait, queued kernels are aborted and waited
 * for. NCCL clears its abort flag afterwards; gcoll leaves it set, since an
 * operation cut short leaves the FIFOs mid-protocol: the parent refuses
 * later operations and is destroyed by the user (it may still be shrunk
 * again: a shrink touches only the bootstrap). gcollCommRevoke is that
 * stop alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"

/* (shrink count, hash of the excluded set, leader's parent rank): the id. */
#define SHRINK_ID_KEY "shrink/%d/%08x/id/%d"
/* (shrink count, hash, this rank): a put that tells whether the store is alive. */
#define SHRINK_PROBE_KEY "shrink/%d/%08x/probe/%d"
#define SHRINK_POLL_MS 10

static int by_value(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return x < y ? -1 : x > y;
}

/* FNV-1a over the sorted excluded ranks: survivors that pass different
 * lists use different keys, so they fail instead of joining one id with
 * different sizes. */
static uint32_t set_hash(const int *sorted, int n) {
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++)
    for (int b = 0; b < 4; b++) {
      h ^= (uint32_t)(((unsigned)sorted[i] >> (8 * b)) & 0xffu);
      h *= 16777619u;
    }
  return h;
}

/* Calls on comm running in other threads fail and every later one too;
 * returns once none is inside gcoll. A peer's death recorded earlier
 * (gcollRemoteError) stays the reason. */
static void stop_calls(struct gcollComm *comm) {
  int expected = 0;
  atomic_compare_exchange_strong(&comm->abort_word, &expected, (int)gcollInvalidUsage);
  /* Collectives and sends run until their result is formed (the host
   * executor's waits poll the abort word). */
  gcoll_comm_wait_calls(comm);
  pthread_mutex_lock(&comm->busy);
  struct gcoll_exec *cuda = comm->exec[GCOLL_EXEC_CUDA].e;
  if (cuda != NULL) {
    /* Kernels queued on streams: told now (the proxy would tell them
     * within its period) and waited for; their error is this stop. */
    char err[512];
    const struct gcoll_exec_ops *ops = comm->exec[GCOLL_EXEC_CUDA].ops;
    ops->abort(cuda, (gcollResult_t)atomic_load(&comm->abort_word));
    (void)ops->wait(cuda, err, sizeof(err));
  }
  pthread_mutex_unlock(&comm->busy);
}

gcollResult_t gcollCommRevoke(gcollComm_t comm) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommRevoke: comm is NULL");
  stop_calls(comm);
  gcoll_log_info(comm, "revoked: calls on this communicator fail from now on");
  return gcollSuccess;
}

/* The leader's id, from the parent's bootstrap (see the top of the file
 * for why a failed get is retried while the store takes our puts). */
static gcollResult_t get_id(struct gcollComm *comm, int seq, uint32_t hash, int leader,
                            gcollUniqueId *id) {
  char key[96], probe[96], err[512], perr[256];
  snprintf(key, sizeof(key), SHRINK_ID_KEY, seq, hash, leader);
  snprintf(probe, sizeof(probe), SHRINK_PROBE_KEY, seq, hash, comm->rank);
  uint64_t deadline = gcoll_bootstrap_deadline(comm->bs);
  for (;;) {
    size_t len = 0;
    if (gcoll_bootstrap_get(comm->bs, key, id, sizeof(*id), &len, deadline, err, sizeof(err)) ==
        0) {
      if (len != sizeof(*id))
        return gcoll_fail(gcollRemoteError, "gcollCommShrink: malformed id from rank %d", leader);
      return gcollSuccess;
    }
    if (gcoll_bootstrap_now_ms() + SHRINK_POLL_MS >= deadline ||
        gcoll_bootstrap_put(comm->bs, probe, "1", 2, perr, sizeof(perr)) != 0)
      return gcoll_fail(gcollRemoteError, "gcollCommShrink: no id from rank %d, the lowest rank "
                                          "left (do all survivors exclude the same ranks?): %s",
                        leader, err);
    nanosleep(&(struct timespec){0, SHRINK_POLL_MS * 1000000L}, NULL);
  }
}

/* The leader: a fresh id for the new communicator. One that cannot make
 * an id still puts one (zeros), so the others fail at once in
 * gcollCommInitRank instead of at the deadline. */
static gcollResult_t put_id(struct gcollComm *comm, int seq, uint32_t hash, gcollUniqueId *id) {
  char key[96], err[512];
  snprintf(key, sizeof(key), SHRINK_ID_KEY, seq, hash, comm->rank);
  gcollResult_t rc = gcollGetUniqueId(id);
  if (rc != gcollSuccess) memset(id, 0, sizeof(*id));
  if (gcoll_bootstrap_put(comm->bs, key, id, sizeof(*id), err, sizeof(err)) != 0 &&
      rc == gcollSuccess)
    rc = gcoll_fail(gcollRemoteError, "gcollCommShrink: %s", err);
  return rc;
}

/* The excluded ranks, sorted, after checking them: in range, each once, and
 * not the caller. *out is NULL when n is 0. */
static gcollResult_t check_exclude(const struct gcollComm *comm, const int *exclude, int n,
                                   int **out) {
  *out = NULL;
  if (n < 0)
    return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: %d excluded ranks (a count >= 0)",
                      n);
  if (n >= comm->nranks)
    return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: %d ranks excluded of %d: no rank "
                                            "would remain", n, comm->nranks);
  if (n > 0 && exclude == NULL)
    return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: the exclude list is NULL with %d "
                                            "ranks", n);
  for (int i = 0; i < n; i++) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: excluded rank %d is not a rank "
                                              "of the communicator (0..%d)",
                        exclude[i], comm->nranks - 1);
    if (exclude[i] == comm->rank)
      return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: this rank (%d) is in the exclude "
                                              "list; excluded ranks do not call it",
                        comm->rank);
  }
  if (n == 0) return gcollSuccess;
  int *sorted = malloc((size_t)n * sizeof(int));
  if (sorted == NULL) return gcoll_fail(gcollSystemError, "gcollCommShrink: out of memory");
  memcpy(sorted, exclude, (size_t)n * sizeof(int));
  qsort(sorted, (size_t)n, sizeof(int), by_value);
  for (int i = 1; i < n; i++)
    if (sorted[i] == sorted[i - 1]) {
      int twice = sorted[i];
      free(sorted);
      return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: rank %d is excluded twice", twice);
    }
  *out = sorted;
  return gcollSuccess;
}

gcollResult_t gcollCommShrink(gcollComm_t comm, const int *exclude, int nexclude,
                              gcollComm_t *newcomm, int flags) {
  if (newcomm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: newcomm is NULL");
  *newcomm = NULL;
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: comm is NULL");
  if ((flags & ~GCOLL_SHRINK_ABORT) != 0)
    return gcoll_fail(gcollInvalidArgument, "gcollCommShrink: flags 0x%x (known: "
                                            "GCOLL_SHRINK_ABORT = 0x%x)", (unsigned)flags,
                      (unsigned)GCOLL_SHRINK_ABORT);
  int *sorted = NULL;
  gcollResult_t rc = check_exclude(comm, exclude, nexclude, &sorted);
  if (rc != gcollSuccess) return rc;
  if (strcmp(comm->bs->backend, "pmi2") == 0) {
    free(sorted);
    return gcoll_fail(gcollInvalidUsage, "gcollCommShrink: the communicator's bootstrap is PMI2, "
                                         "whose values are seen only after a fence of every "
                                         "rank, which excluded ranks never join (shrink "
                                         "communicators from gcollCommInitRank)");
  }
  if (flags & GCOLL_SHRINK_ABORT) stop_calls(comm);
  int below = 0, leader = 0;
  for (int i = 0; i < nexclude; i++) {
    if (sorted[i] < comm->rank) below++;
    if (sorted[i] == leader) leader++;   /* sorted: the first gap is the lowest survivor */
  }
  int size = comm->nranks - nexclude, new_rank = comm->rank - below;
  uint32_t hash = set_hash(sorted, nexclude);
  free(sorted);
  int seq = comm->nshrinks++;
  gcoll_log_info(comm, "shrink %d: rank %d of %d becomes %d of %d (%d excluded%s, leader %d)",
                 seq, comm->rank, comm->nranks, new_rank, size, nexclude,
                 (flags & GCOLL_SHRINK_ABORT) ? ", parent aborted" : "", leader);
  gcollUniqueId id;
  rc = comm->rank == leader ? put_id(comm, seq, hash, &id) : get_id(comm, seq, hash, leader, &id);
  if (rc != gcollSuccess) return rc;
  return gcollCommInitRank(newcomm, size, id, new_rank);
}
