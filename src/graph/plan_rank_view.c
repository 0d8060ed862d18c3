/* One rank's view of a plan file, without building the whole job.
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

int gcoll_plan_load_rank_view(const char *path, int rank, struct gcoll_rank_view *view,
                              char *err, size_t errlen) {
  char *buf, host[GCOLL_PLAN_HOST_MAX];
  size_t len;
  struct ydoc doc;
  int rc = -1;
  if (rank < 0) {
    snprintf(err, errlen, "%s: rank %d is negative", path, rank);
    return -1;
  }
  if (gcoll_read_file(path, PLAN_FILE_MAX, &buf, &len, err, errlen)) return -1;
  if (ydoc_parse(&doc, buf, len, path, err, errlen)) {
    free(buf);
    return -1;
  }
  free(buf);
  struct gcoll_plan *plan = gcoll_plan_from_ydoc(&doc, rank, host, sizeof(host), err, errlen);
  ydoc_free(&doc);
  if (plan == NULL) return -1;
  if (rank >= plan->nranks) {
    snprintf(err, errlen, "%s: rank %d is not in this plan (it has ranks 0..%d)", path, rank,
             plan->nranks - 1);
  } else if (gcoll_plan_rank_view(plan, rank, view, err, errlen) == 0) {
    snprintf(view->host, sizeof(view->host), "%s", host);
    rc = 0;
  }
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
