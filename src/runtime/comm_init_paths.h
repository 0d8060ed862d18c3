/* The ways into a communicator besides gcollCommInitFromPlan's environment:
 * gcollCommInitAll (threads of one process, bootstrap "local") and
 * gcollCommInitRank (a gcollUniqueId naming a KVS this library hosts). All
 * of them end in gcoll_comm_init_with(), so a communicator is built the same
 * way whatever found the plan and the bootstrap. */
#ifndef GCOLL_RUNTIME_COMM_INIT_PATHS_H
#define GCOLL_RUNTIME_COMM_INIT_PATHS_H

#include <stddef.h>

#include "gcoll.h"
#include "runtime/bootstrap.h"

struct gcoll_comm_init_args {
  const char *plan_path;
  int rank;
  /* Open, and owned by the communicator from here on; NULL: opened from
   * the environment once the plan is loaded. */
  struct gcoll_bootstrap *bs;
  const char *job_key;          /* hex: names the job's shm segments; NULL:
                                 * $GCOLL_JOB_KEY */
  int check_host;               /* whether the plan must name this host */
  /* The GPU this rank drives when its plan edges can use GPU memory
   * (p2p); has_gpu == 0: the init thread's current GPU, looked up only
   * then. A thread other than the caller's needs it: gcollCommInitAll. */
  int has_gpu, gpu;
  const gcollConfig_t *config;  /* gcollCommInitRankConfig's, or NULL */
};

/* Loads the plan, connects its edges over bs, starts the executor.
 * Collective over all ranks of bs. bs is closed on failure. */
gcollResult_t gcoll_comm_init_with(gcollComm_t *comm, const struct gcoll_comm_init_args *args);

/* A plan for nranks ranks on nnodes virtual nodes of this host (nranks a
 * multiple of nnodes; one node uses this host's name, several get
 * "<host>-v<i>"), every node of topology `topo` (NULL: cpu-only; a name is
 * looked up like everywhere else: $GCOLL_TOPO_DIR, the installed directory,
 * the source tree), written to plan.yaml in a fresh private directory under
 * parent (NULL: $TMPDIR, else /tmp). Returns 0 with dir and path filled, or
 * -1 with one line in err. */
int gcoll_local_plan_write(int nranks, int nnodes, const char *topo, const char *parent,
                           char *dir, size_t dirlen, char *path, size_t pathlen, char *err,
                           size_t errlen);
/* The same for nnodes virtual nodes holding node_ranks[i] >= 1 ranks each
 * (node i holds the ranks after those of nodes 0..i-1), e.g. {2, 1} for 3
 * ranks block-distributed over 2 nodes; nodes with different counts get
 * different topology classes. gcoll_local_plan_write is this with nranks /
 * nnodes on every node. */
int gcoll_local_plan_write_nodes(int nnodes, const int *node_ranks, const char *topo,
                                 const char *parent, char *dir, size_t dirlen, char *path,
                                 size_t pathlen, char *err, size_t errlen);
struct gcoll_plan;
struct gcoll_topo;
/* This host's name up to its first dot ("localhost" when it has none). */
void gcoll_short_hostname(char *out, size_t len);
/* This process's node as plans name it: what Slurm calls it
 * (SLURMD_NODENAME: several slurmd may share a host, and NodeName need not
 * be the hostname; init checks plans against the same name), else the
 * short hostname, "-v<i>" appended on gcollrun's virtual node i. */
void gcoll_this_node_name(char *out, size_t len);
/* This host as detection sees it, merged with GCOLL_TOPO_FILE (or
 * NCCL_TOPO_FILE, environment or nccl.conf) when one is set: what the
 * plugin, gcoll-plan topo --detect and "auto" plans all mean by this node.
 * info says what was merged and where the file came from; err names that
 * place too. */
struct gcoll_topo *gcoll_detect_this_node(char *info, size_t infolen, char *err,
                                          size_t errlen);
/* This node's topology for a plan made here: `name` (a topology name or
 * file), else `fallback`; "auto" is this host as detection sees it,
 * merged with GCOLL_TOPO_FILE / NCCL_TOPO_FILE as the SPANK plugin does.
 * NULL with one line in err. */
struct gcoll_topo *gcoll_local_topology(const char *name, const char *fallback, char *err,
                                        size_t errlen);
/* No launcher plan: the ranks of bs plan the job themselves (one topology
 * per node, built at rank 0, read back by all; comm_plan_job.c) into a
 * private dir. node names this rank's node (NULL: gcoll_this_node_name);
 * ms gets what it cost. Collective over bs. */
gcollResult_t gcoll_job_plan(struct gcoll_bootstrap *bs, const char *node, char *dir,
                             size_t dirlen, char *path, size_t pathlen, double *ms);
/* Writes plan to plan.yaml in a fresh private directory under parent, as
 * gcoll_local_plan_write does with the plan it computes. */
int gcoll_local_plan_save(const struct gcoll_plan *plan, const char *parent, char *dir,
                          size_t dirlen, char *path, size_t pathlen, char *err, size_t errlen);
/* The same for any placement: rank_of_slot gives the job rank of each
 * slot, node by node (NULL: blocks), as -m cyclic places ranks. */
int gcoll_local_plan_write_layout(int nnodes, const int *node_ranks, const int *rank_of_slot,
                                  const char *topo, const char *parent, char *dir, size_t dirlen,
                                  char *path, size_t pathlen, char *err, size_t errlen);
/* Removes what gcoll_local_plan_write created. */
void gcoll_local_plan_remove(const char *dir);

/* count random bytes as 2 * count hex digits (+ NUL) in out. */
int gcoll_random_hex(char *out, size_t count, char *err, size_t errlen);

#endif
