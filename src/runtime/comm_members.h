/* The plan of a communicator made from a unique id (comm_members.c): the
 * launcher's when its members are the launcher's ranks in order, derived
 * from it when they are some of its ranks, else one computed for them. */
#ifndef GCOLL_RUNTIME_COMM_MEMBERS_H
#define GCOLL_RUNTIME_COMM_MEMBERS_H

#include "gcoll.h"
#include "runtime/bootstrap.h"

struct gcoll_members_plan {
  char path[4200];     /* the plan file to load */
  char dir[4096];      /* a private directory to remove after init, or "" */
  int from_launcher;   /* path is GCOLL_PLAN */
  int real_hosts;      /* the plan's hosts are the launcher's: check them */
  char origin[400];    /* where the plan came from, for the INFO line */
};

struct gcoll_rank_view;
/* The launcher rank the plan at plan_path places on the GPU this process
 * drives (its current CUDA context's, matched by PCI bus id): view's own
 * rank when no GPU is current, the plan names no bus ids or they agree;
 * the rank of the same node planned on that GPU otherwise; view's rank,
 * with an INFO line, when the node's plan has no such GPU. */
int gcoll_gpu_plan_rank(const char *plan_path, const struct gcoll_rank_view *view);

/* Collective over the members of bs (the id's store): each says where it
 * runs, rank 0 chooses, every member gets the plan in out. On failure
 * every member fails with the same line where rank 0 could tell. */
gcollResult_t gcoll_members_plan(struct gcoll_bootstrap *bs, int rank, int nranks,
                                 struct gcoll_members_plan *out);

#endif
