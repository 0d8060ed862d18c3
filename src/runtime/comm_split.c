/* gcollCommSplit: sub-communicators of a communicator, as ncclCommSplit.
 *
 * The colours meet through the parent's bootstrap, not through a
 * collective on its connections (a parent whose FIFOs are in GPU memory
 * runs no host-buffer collective): every rank puts its (colour, key), rank
 * 0 reads them all, orders each colour's members by key (ties by parent
 * rank, as NCCL) and tells every rank its new rank, its group's size and
 * its group's leader (new rank 0). Each leader makes a fresh unique id and
 * puts it; the members read it and join with gcollCommInitRank, so a child
 * gets its plan as every communicator from an id does (comm_members.c):
 * the launcher's when the child is the launcher's job in order, else one
 * computed for its members. Rank 0 reads and writes O(nranks) keys, every
 * other rank O(1). Keys carry the parent's split count, so splits of one
 * parent never mix; like every collective, all ranks split in one order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

#define SPLIT_MEMBER_KEY "split/%d/m/%d"  /* (seq, parent rank): "colour key" */
#define SPLIT_ANSWER_KEY "split/%d/a/%d"  /* (seq, parent rank): "rank size leader" or "-" */
#define SPLIT_ID_KEY "split/%d/id/%d"     /* (seq, leader's parent rank): the unique id */

struct split_member {
  int color, key, rank;
};

static int by_color_key_rank(const void *a, const void *b) {
  const struct split_member *x = a, *y = b;
  if (x->color != y->color) return x->color < y->color ? -1 : 1;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static gcollResult_t put_text(struct gcollComm *comm, const char *key, const char *value) {
  char err[512];
  if (gcoll_bootstrap_put(comm->bs, key, value, strlen(value) + 1, err, sizeof(err)) != 0)
    return gcoll_fail(gcollSystemError, "gcollCommSplit: %s", err);
  return gcollSuccess;
}

static gcollResult_t get_value(struct gcollComm *comm, const char *key, void *buf, size_t cap,
                               size_t *len) {
  char err[512];
  if (gcoll_bootstrap_get(comm->bs, key, buf, cap, len, gcoll_bootstrap_deadline(comm->bs), err,
                          sizeof(err)) != 0)
    return gcoll_fail(gcollRemoteError, "gcollCommSplit: %s", err);
  return gcollSuccess;
}

/* Rank 0: reads every rank's colour and key, answers each. */
static gcollResult_t assign(struct gcollComm *comm, int seq) {
  int n = comm->nranks;
  struct split_member *m = calloc((size_t)n, sizeof(*m));
  if (m == NULL) return gcoll_fail(gcollSystemError, "gcollCommSplit: out of memory");
  gcollResult_t rc = gcollSuccess;
  char key[64], value[64];
  for (int r = 0; r < n && rc == gcollSuccess; r++) {
    size_t len = 0;
    snprintf(key, sizeof(key), SPLIT_MEMBER_KEY, seq, r);
    rc = get_value(comm, key, value, sizeof(value), &len);
    if (rc == gcollSuccess && (len == 0 || value[len - 1] != '\0' ||
                               sscanf(value, "%d %d", &m[r].color, &m[r].key) != 2))
      rc = gcoll_fail(gcollRemoteError, "gcollCommSplit: rank %d sent a malformed colour", r);
    m[r].rank = r;
  }
  if (rc == gcollSuccess) qsort(m, (size_t)n, sizeof(*m), by_color_key_rank);
  for (int i = 0; i < n && rc == gcollSuccess;) {
    int j = i;
    while (j < n && m[j].color == m[i].color) j++;
    for (int k = i; k < j && rc == gcollSuccess; k++) {
      snprintf(key, sizeof(key), SPLIT_ANSWER_KEY, seq, m[k].rank);
      if (m[i].color < 0)
        snprintf(value, sizeof(value), "-");
      else
        snprintf(value, sizeof(value), "%d %d %d", k - i, j - i, m[i].rank);
      rc = put_text(comm, key, value);
    }
    i = j;
  }
  free(m);
  return rc;
}

gcollResult_t gcollCommSplit(gcollComm_t comm, int color, int key, gcollComm_t *newcomm) {
  if (newcomm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommSplit: newcomm is NULL");
  *newcomm = NULL;
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "gcollCommSplit: comm is NULL");
  if (color < 0 && color != GCOLL_SPLIT_NOCOLOR)
    return gcoll_fail(gcollInvalidArgument, "gcollCommSplit: colour %d (a colour is >= 0, or "
                                            "GCOLL_SPLIT_NOCOLOR)", color);
  int aborted = atomic_load(&comm->abort_word);
  if (aborted != 0)
    return gcoll_fail((gcollResult_t)aborted, "gcollCommSplit: the communicator failed or was "
                                              "aborted");
  int seq = comm->nsplits++;
  char k[64], value[64];
  snprintf(k, sizeof(k), SPLIT_MEMBER_KEY, seq, comm->rank);
  snprintf(value, sizeof(value), "%d %d", color < 0 ? -1 : color, key);
  gcollResult_t rc = put_text(comm, k, value);
  if (rc == gcollSuccess && comm->rank == 0) rc = assign(comm, seq);
  size_t len = 0;
  if (rc == gcollSuccess) {
    snprintf(k, sizeof(k), SPLIT_ANSWER_KEY, seq, comm->rank);
    rc = get_value(comm, k, value, sizeof(value), &len);
  }
  if (rc != gcollSuccess) return rc;
  int new_rank, size, leader;
  if (len == 0 || value[len - 1] != '\0')
    return gcoll_fail(gcollRemoteError, "gcollCommSplit: malformed answer");
  if (strcmp(value, "-") == 0) return gcollSuccess; /* not in any group */
  if (sscanf(value, "%d %d %d", &new_rank, &size, &leader) != 3 || size < 1 || new_rank < 0 ||
      new_rank >= size || leader < 0 || leader >= comm->nranks)
    return gcoll_fail(gcollRemoteError, "gcollCommSplit: malformed answer from rank 0");
  gcollUniqueId id;
  snprintf(k, sizeof(k), SPLIT_ID_KEY, seq, leader);
  if (new_rank == 0) {
    rc = gcollGetUniqueId(&id);
    /* A leader that cannot make an id still answers, so its members fail
     * at once instead of at the deadline. */
    if (rc != gcollSuccess) memset(&id, 0, sizeof(id));
    char err[512];
    if (gcoll_bootstrap_put(comm->bs, k, &id, sizeof(id), err, sizeof(err)) != 0 &&
        rc == gcollSuccess)
      rc = gcoll_fail(gcollSystemError, "gcollCommSplit: %s", err);
  } else {
    rc = get_value(comm, k, &id, sizeof(id), &len);
    if (rc == gcollSuccess && len != sizeof(id))
      rc = gcoll_fail(gcollRemoteError, "gcollCommSplit: malformed id from rank %d", leader);
  }
  if (rc != gcollSuccess) return rc;
  return gcollCommInitRank(newcomm, size, id, new_rank);
}
