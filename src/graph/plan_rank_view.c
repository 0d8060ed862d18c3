/* One rank's part of a plan file, without building the whole job: its
 * view (gcoll-plan show --rank, derived plans) and, for the runtime, its
 * view and the ring orders (gcoll_plan_load_rank).
 *
 * Every rank of a 100,000-rank job loads the plan at start, so this must not
 * cost O(ranks) or allocate a string per host: the reader runs in its
 * compact mode (host lists stay compressed; only this rank's host name is
 * produced), which leaves per-node integer arrays and the classes. The view
 * itself is then computed by gcoll_plan_rank_view, the one implementation of
 * the "Meaning" rules of docs/plan-format.md, so a file and an in-memory
 * plan can never disagree about what a rank does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"
#include "graph/yaml_doc.h"

#define PLAN_FILE_MAX ((size_t)64 << 20)

/* The plan file read for one rank: the compact form (host lists stay
 * compressed, only `rank`'s host name is produced into host). NULL with a
 * reason in err. */
static struct gcoll_plan *read_for_rank(const char *path, int rank, char *host, size_t hostlen,
                                        char *err, size_t errlen) {
  char *buf;
  size_t len;
  struct ydoc doc;
  if (rank < 0) {
    snprintf(err, errlen, "%s: rank %d is negative", path, rank);
    return NULL;
  }
  if (gcoll_read_file(path, PLAN_FILE_MAX, &buf, &len, err, errlen)) return NULL;
  if (gcoll_ydoc_parse(&doc, buf, len, path, err, errlen)) {
    free(buf);
    return NULL;
  }
  free(buf);
  struct gcoll_plan *plan = gcoll_plan_from_ydoc(&doc, rank, host, hostlen, err, errlen);
  gcoll_ydoc_free(&doc);
  if (plan != NULL && rank >= plan->nranks) {
    snprintf(err, errlen, "%s: rank %d is not in the plan (it has %d ranks)", path, rank,
             plan->nranks);
    gcoll_plan_free(plan);
    return NULL;
  }
  return plan;
}

int gcoll_plan_load_rank_view(const char *path, int rank, struct gcoll_rank_view *view,
                              char *err, size_t errlen) {
  char host[GCOLL_PLAN_HOST_MAX];
  struct gcoll_plan *plan = read_for_rank(path, rank, host, sizeof(host), err, errlen);
  if (plan == NULL) return -1;
  int rc = gcoll_plan_rank_view(plan, rank, view, err, errlen);
  if (rc == 0) snprintf(view->host, sizeof(view->host), "%s", host);
  gcoll_plan_free(plan);
  return rc;
}

/* Every ring order a permutation of the ranks: the algorithms index
 * blocks by it, so a damaged order would put data in the wrong place
 * rather than fail. */
static int rings_are_permutations(const int *ring_ranks, int nchannels, int nranks,
                                  const char *path, char *err, size_t errlen) {
  unsigned char *seen = malloc((size_t)nranks);
  if (seen == NULL) {
    snprintf(err, errlen, "%s: out of memory for %d ranks", path, nranks);
    return -1;
  }
  int rc = 0;
  for (int c = 0; c < nchannels && rc == 0; c++) {
    memset(seen, 0, (size_t)nranks);
    const int *r = ring_ranks + (size_t)c * (size_t)nranks;
    for (int i = 0; i < nranks; i++) {
      if (r[i] < 0 || r[i] >= nranks || seen[r[i]]) {
        snprintf(err, errlen, "%s: ring of channel %d is not a permutation of the ranks", path, c);
        rc = -1;
        break;
      }
      seen[r[i]] = 1;
    }
  }
  free(seen);
  return rc;
}

int gcoll_plan_load_rank(const char *path, int rank, struct gcoll_rank_view *view,
                         int **ring_ranks, char *err, size_t errlen) {
  char host[GCOLL_PLAN_HOST_MAX];
  *ring_ranks = NULL;
  struct gcoll_plan *plan = read_for_rank(path, rank, host, sizeof(host), err, errlen);
  if (plan == NULL) return -1;
  char why[384];
  int rc = -1;
  int *rings = NULL;
  if (gcoll_plan_verify(plan, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%s: invalid plan: %s", path, why);
    goto out;
  }
  if (gcoll_plan_rank_view(plan, rank, view, err, errlen) != 0) goto out;
  snprintf(view->host, sizeof(view->host), "%s", host);
  rings = calloc((size_t)plan->nchannels * (size_t)plan->nranks, sizeof(int));
  if (rings == NULL) {
    snprintf(err, errlen, "%s: out of memory for the rings of %d ranks", path, plan->nranks);
    goto out;
  }
  for (int c = 0; c < plan->nchannels; c++)
    if (gcoll_plan_ring_ranks(plan, c, rings + (size_t)c * (size_t)plan->nranks) != 0) {
      snprintf(err, errlen, "%s: ring of channel %d is inconsistent", path, c);
      goto out;
    }
  if (rings_are_permutations(rings, plan->nchannels, plan->nranks, path, err, errlen) != 0)
    goto out;
  *ring_ranks = rings;
  rings = NULL;
  rc = 0;
out:
  free(rings);
  gcoll_plan_free(plan);
  return rc;
}

/* Host names match when equal, or when one is the other's short form
 * ("n001" and "n001.cluster"): Slurm and hostname(1) disagree on domains. */
static int same_host(const char *a, const char *b) {
  size_t la = strcspn(a, "."), lb = strcspn(b, ".");
  if (strcmp(a, b) == 0) return 1;
  if ((a[la] == '\0') == (b[lb] == '\0')) return 0;
  return la == lb && strncmp(a, b, la) == 0;
}

int gcoll_rank_view_check_job(const struct gcoll_rank_view *view, int nranks, const char *host,
                              const uint32_t *topology_hash, char *err, size_t errlen) {
  if (view->nranks != nranks) {
    snprintf(err, errlen, "plan is for %d ranks, this job has %d", view->nranks, nranks);
    return -1;
  }
  if (host && !same_host(view->host, host)) {
    snprintf(err, errlen, "plan puts rank %d on host '%s', it runs on '%s'", view->rank,
             view->host, host);
    return -1;
  }
  if (topology_hash && *topology_hash != view->topology_hash) {
    snprintf(err, errlen,
             "plan expects topology '%s' (hash %08x) on host '%s', this node's hash is %08x",
             view->topology, (unsigned)view->topology_hash, view->host,
             (unsigned)*topology_hash);
    return -1;
  }
  return 0;
}
