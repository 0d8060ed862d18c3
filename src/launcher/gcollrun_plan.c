/* gcollrun's plan: computed for virtual nodes on this host, or taken from
 * --plan FILE, and the rank -> (node, local rank) tables both give. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/plan.h"
#include "launcher/gcollrun.h"
#include "runtime/comm_init_paths.h"
#include "graph/topo_lookup.h"

#define DEFAULT_TOPO "cpu-only"

/* "<hostname>-v<i>": one name per virtual node, so the plan reads like a
 * real multi-node job and host lists stay compact. */
static char **virtual_hosts(int nnodes) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char **names = calloc((size_t)nnodes, sizeof(*names));
  if (names == NULL) return NULL;
  for (int i = 0; i < nnodes; i++) {
    if (asprintf(&names[i], "%.200s-v%d", host, i) < 0) {
      names[i] = NULL;
      gcoll_hostlist_free(names, nnodes);
      return NULL;
    }
  }
  return names;
}

static int fill_layout(struct gcollrun_plan *p, const struct gcoll_plan *plan, char *err,
                       size_t errlen) {
  p->nranks = plan->nranks;
  p->nnodes = plan->nnodes;
  p->node_of = calloc((size_t)plan->nranks, sizeof(int));
  p->local_of = calloc((size_t)plan->nranks, sizeof(int));
  if (p->node_of == NULL || p->local_of == NULL) {
    snprintf(err, errlen, "out of memory for %d ranks", plan->nranks);
    return -1;
  }
  for (int r = 0; r < plan->nranks; r++) {
    int node = gcoll_plan_node_of_rank(plan, r);
    if (node < 0) {
      snprintf(err, errlen, "%s: rank %d is on no node", p->path, r);
      return -1;
    }
    p->node_of[r] = node;
    p->local_of[r] = r - plan->node_first_rank[node];
  }
  return 0;
}

static struct gcoll_plan *build_plan(int nranks, int nnodes, const char *topo_name, char *err,
                                     size_t errlen) {
  struct gcoll_topo *topo = gcoll_topo_load_name(topo_name ? topo_name : DEFAULT_TOPO, err, errlen);
  if (topo == NULL) return NULL;
  struct gcoll_plan *plan = NULL;
  const struct gcoll_topo **node_topo = calloc((size_t)nnodes, sizeof(*node_topo));
  char **hosts = virtual_hosts(nnodes);
  if (node_topo == NULL || hosts == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", nnodes);
    goto out;
  }
  for (int i = 0; i < nnodes; i++) node_topo[i] = topo;
  /* ranks_per_node is explicit even on CPU-only nodes with fewer cores: the
   * user asked for N ranks, oversubscription is theirs to choose. */
  struct gcoll_plan_input in = {.nnodes = nnodes, .node_topo = node_topo,
                                .node_host = (const char **)hosts,
                                .ranks_per_node = nranks / nnodes,
                                .job_id = -1, .step_id = -1};
  plan = gcoll_plan_build(&in, err, errlen);
out:
  if (hosts) gcoll_hostlist_free(hosts, nnodes);
  free(node_topo);
  gcoll_topo_free(topo);
  return plan;
}

static int make_private_dir(struct gcollrun_plan *p, char *err, size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || *tmp == '\0') tmp = "/tmp";
  int n = snprintf(p->dir, sizeof(p->dir), "%s/gcollrun.XXXXXX", tmp);
  if (n < 0 || (size_t)n >= sizeof(p->dir) || mkdtemp(p->dir) == NULL) {
    snprintf(err, errlen, "cannot create a temp directory in %.256s: %s", tmp,
             n < 0 || (size_t)n >= sizeof(p->dir) ? "path too long" : strerror(errno));
    p->dir[0] = '\0';
    return -1;
  }
  snprintf(p->path, sizeof(p->path), "%.*s/plan.yaml", (int)sizeof(p->path) - 16, p->dir);
  return 0;
}

static int computed_plan(struct gcollrun_plan *p, int nranks, int nnodes, const char *topo,
                         char *err, size_t errlen) {
  struct gcoll_plan *plan = build_plan(nranks, nnodes, topo, err, errlen);
  if (plan == NULL) return -1;
  int rc = -1;
  if (make_private_dir(p, err, errlen) == 0 &&
      gcoll_plan_write_file(plan, p->path, err, errlen) == 0)
    rc = fill_layout(p, plan, err, errlen);
  gcoll_plan_free(plan);
  return rc;
}

static int given_plan(struct gcollrun_plan *p, int nranks, int nnodes, const char *file,
                      char *err, size_t errlen) {
  /* Absolute, so that ranks which change directory still find it. */
  if (realpath(file, p->path) == NULL) {
    snprintf(err, errlen, "--plan %.512s: %s", file, strerror(errno));
    return -1;
  }
  struct gcoll_plan *plan = gcoll_plan_read_file(p->path, err, errlen);
  if (plan == NULL) return -1;
  int rc = -1;
  if (plan->nranks != nranks)
    snprintf(err, errlen, "--plan %.512s is for %d rank%s, not -n %d", file, plan->nranks,
             plan->nranks == 1 ? "" : "s", nranks);
  else if (nnodes > 0 && plan->nnodes != nnodes)
    snprintf(err, errlen, "--plan %.512s has %d node%s, not --nodes %d", file, plan->nnodes,
             plan->nnodes == 1 ? "" : "s", nnodes);
  else
    rc = fill_layout(p, plan, err, errlen);
  gcoll_plan_free(plan);
  return rc;
}

int gcollrun_plan_prepare(struct gcollrun_plan *p, int nranks, int nnodes, const char *topo,
                          const char *plan_file, char *err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  int rc = plan_file ? given_plan(p, nranks, nnodes, plan_file, err, errlen)
                     : computed_plan(p, nranks, nnodes > 0 ? nnodes : 1, topo, err, errlen);
  if (rc != 0) gcollrun_plan_cleanup(p);
  return rc;
}

void gcollrun_plan_cleanup(struct gcollrun_plan *p) {
  gcoll_local_plan_remove(p->dir);
  p->dir[0] = '\0';
  free(p->node_of);
  free(p->local_of);
  p->node_of = p->local_of = NULL;
}
