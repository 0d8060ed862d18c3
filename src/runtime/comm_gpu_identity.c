/* Which launcher rank's GPU this process drives.
 *
 * A plan places local rank i of a node on a GPU the plan names by PCI bus
 * id. What a process actually drives is whatever device its CUDA context
 * is on, and the device index says nothing: Slurm's cgroups and
 * --gpus-per-task show every task its GPU as device 0, CUDA_VISIBLE_DEVICES
 * reorders devices, and a partial-node job owns some of the GPUs. The bus
 * id the driver reports does not change, so that is what is compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "runtime/comm.h"
#include "runtime/comm_members.h"
#include "runtime/fifo_devmem.h"

/* The rank of node `node` whose GPU is `busid`, or -1. */
static int rank_of_gpu(const struct gcoll_plan *plan, int node, const char *busid) {
  if (node < 0 || node >= plan->nnodes) return -1;
  const struct gcoll_plan_class *k = &plan->classes[plan->node_class[node]];
  for (int i = 0; k->has_gpu_busids && i < k->nlocal; i++)
    if (strcmp(k->gpu_busid[i], busid) == 0)
      return gcoll_plan_rank_at(plan, plan->node_first_rank[node] + i);
  return -1;
}

int gcoll_gpu_plan_rank(const char *plan_path, const struct gcoll_rank_view *view) {
  char raw[64], mine[GCOLL_BUSID_MAX], err[512];
  /* No bus id in the plan, or no GPU current (a host-only process): the
   * launcher's numbering is all there is. */
  if (view->gpu_busid[0] == '\0' ||
      gcoll_devmem_current_busid(raw, sizeof(raw), err, sizeof(err)) != 0 ||
      gcoll_busid_normalize(raw, mine, sizeof(mine)) != 0 || strcmp(mine, view->gpu_busid) == 0)
    return view->rank;
  struct gcoll_plan *plan = gcoll_plan_read_file(plan_path, err, sizeof(err));
  int rank = plan != NULL ? rank_of_gpu(plan, view->node, mine) : -1;
  if (rank >= 0)
    gcoll_log_info(NULL, "launcher rank %d drives GPU %s, which the plan gives rank %d of %s: "
                   "it takes that rank's place in communicators of the job's ranks",
                   view->rank, mine, rank, view->host);
  else
    gcoll_log_info(NULL, "launcher rank %d drives GPU %s, which the plan does not place on %s "
                   "(it planned GPU %s there%s%s): the plan's NIC pairing is for that GPU",
                   view->rank, mine, view->host, view->gpu_busid, plan ? "" : "; ",
                   plan ? "" : err);
  gcoll_plan_free(plan);
  return rank >= 0 ? rank : view->rank;
}
