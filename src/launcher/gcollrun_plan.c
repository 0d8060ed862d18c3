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
    p->local_of[r] = gcoll_plan_slot_of(plan, r) - plan->node_first_rank[node];
  }
  return 0;
}

void gcollrun_block_layout(int nranks, int nnodes, int *node_ranks) {
  for (int i = 0; i < nnodes; i++) node_ranks[i] = nranks / nnodes + (i < nranks % nnodes);
}

/* The library's plan for virtual nodes of this host (gcollCommInitRank
 * computes its GCOLL_NODES plans with the same function): ranks in blocks,
 * the remainder on the first nodes. */
static int computed_plan(struct gcollrun_plan *p, int nranks, int nnodes, int cyclic,
                         const char *topo, char *err, size_t errlen) {
  if (nnodes < 1 || nnodes > nranks) {
    snprintf(err, errlen, "%d nodes for %d ranks", nnodes, nranks);
    return -1;
  }
  int *node_ranks = malloc((size_t)nnodes * sizeof(*node_ranks));
  if (node_ranks == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", nnodes);
    return -1;
  }
  gcollrun_block_layout(nranks, nnodes, node_ranks);
  /* Cyclic, as srun -m cyclic: rank r on node r mod K (the same counts). */
  int *rank_of_slot = cyclic ? malloc((size_t)nranks * sizeof(int)) : NULL;
  for (int node = 0, slot = 0; rank_of_slot != NULL && node < nnodes; node++)
    for (int r = node; r < nranks; r += nnodes) rank_of_slot[slot++] = r;
  int wrc = cyclic && rank_of_slot == NULL
                ? (snprintf(err, errlen, "out of memory for %d ranks", nranks), -1)
                : gcoll_local_plan_write_layout(nnodes, node_ranks, rank_of_slot, topo, NULL,
                                                p->dir, sizeof(p->dir), p->path, sizeof(p->path),
                                                err, errlen);
  free(rank_of_slot);
  free(node_ranks);
  if (wrc != 0) return -1;
  struct gcoll_plan *plan = gcoll_plan_read_file(p->path, err, errlen);
  if (plan == NULL) return -1;
  int rc = fill_layout(p, plan, err, errlen);
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

int gcollrun_plan_prepare(struct gcollrun_plan *p, int nranks, int nnodes, int cyclic,
                          const char *topo, const char *plan_file, char *err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  int rc = plan_file ? given_plan(p, nranks, nnodes, plan_file, err, errlen)
                     : computed_plan(p, nranks, nnodes > 0 ? nnodes : 1, cyclic, topo, err,
                                     errlen);
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
