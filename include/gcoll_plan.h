/* gcoll plan files: one rank's view of a job's communication plan.
 *
 * A plan (YAML, "gcoll-plan: 1") is computed once per job by the launcher
 * and read by every rank. This header is the part a runtime needs: load
 * the few facts about one rank without building the whole job in memory. */
#ifndef GCOLL_PLAN_H
#define GCOLL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GCOLL_PLAN_VERSION 1
#define GCOLL_MAX_CHANNELS 32     /* after duplication */
#define GCOLL_MAX_TREE_ARITY 3    /* two tree children across nodes + one chain */
#define GCOLL_MAX_NVLS_HEADS 16
#define GCOLL_MAX_TUNING 16       /* size ranges per collective */
#define GCOLL_PLAN_NAME_MAX 64
#define GCOLL_PLAN_HOST_MAX 256

/* How an edge of the plan is carried: chosen by the plan, mapped to a
 * transport by the runtime (shm/p2p inside a node, net between nodes). */
enum gcoll_edge {
  GCOLL_EDGE_NONE = 0,  /* no peer (-1) */
  GCOLL_EDGE_SELF,      /* single-rank job */
  GCOLL_EDGE_SHM,       /* same node, host memory */
  GCOLL_EDGE_P2P,       /* GPU to GPU over NVLink: same node, or nodes of
                         * one multi-node NVLink domain */
  GCOLL_EDGE_NET        /* different nodes */
};

enum gcoll_coll {
  GCOLL_COLL_ALLREDUCE = 0,
  GCOLL_COLL_BROADCAST,
  GCOLL_COLL_REDUCE,
  GCOLL_COLL_ALLGATHER,
  GCOLL_COLL_REDUCESCATTER,
  GCOLL_NCOLLS
};

enum gcoll_algo { GCOLL_ALGO_RING = 0, GCOLL_ALGO_TREE, GCOLL_ALGO_NVLS, GCOLL_NALGOS };
enum gcoll_proto { GCOLL_PROTO_SIMPLE = 0, GCOLL_PROTO_LL, GCOLL_PROTO_LL128, GCOLL_NPROTOS };

/* One row of the tuning table: use (algo, proto, nchannels) for messages of
 * at most max_bytes (UINT64_MAX for the last row). */
struct gcoll_tuning_entry {
  uint64_t max_bytes;
  enum gcoll_algo algo;
  enum gcoll_proto proto;
  int nchannels;
};

struct gcoll_ring_link {
  int prev, next;                 /* global ranks */
  enum gcoll_edge prev_edge, next_edge;
  char nic_in[32];                /* NIC the channel enters this node by, "" if none */
  char nic_out[32];
  /* Rails (leaf switches) of nic_in / nic_out, -1 when unnamed or the plan
   * predates rails (NICs of equal names then share a rail). */
  int rail_in, rail_out;
  /* PXN: the rank of this node whose GPU, next to nic_out, this rank's
   * data goes through over NVLink to reach nic_out; -1 when it sends
   * directly. A runtime without PXN may send directly through nic_out: the
   * edge stays the same edge. */
  int nic_out_via;
};

struct gcoll_tree_link {
  int tree;                       /* 1 or 2: which tree of the double binary tree */
  int parent;                     /* -1 at the root */
  int nchildren;
  int children[GCOLL_MAX_TREE_ARITY];
  enum gcoll_edge parent_edge;
  enum gcoll_edge child_edge[GCOLL_MAX_TREE_ARITY];
  char nic[32];
  int rail;                       /* nic's rail, -1 as for ring links */
};

/* Everything one rank needs from the plan. */
struct gcoll_rank_view {
  int rank, nranks;
  int node, nnodes;               /* node index in plan order */
  int local_rank, local_nranks;
  int node_ranks[256];            /* the job ranks of this node, by local
                                   * rank (consecutive unless the job's
                                   * layout is cyclic or the like) */
  int gpu;                        /* the node's GPU this rank drives (index in
                                   * its topology), -1 on CPU nodes */
  char gpu_busid[16];             /* that GPU's PCI bus id ("0000:1b:00.0"),
                                   * "" when the plan does not say */
  char host[GCOLL_PLAN_HOST_MAX];
  char topology[GCOLL_PLAN_NAME_MAX];  /* topology class name */
  uint32_t topology_hash;
  int64_t job_id, step_id;        /* -1 when the plan has none */
  int nchannels;
  struct gcoll_ring_link ring[GCOLL_MAX_CHANNELS];
  struct gcoll_tree_link tree[GCOLL_MAX_CHANNELS];
  int nvls_nheads;                /* 0 when the node has no NVLS */
  int nvls_heads[GCOLL_MAX_NVLS_HEADS]; /* global ranks of this node's heads */
  int ntuning[GCOLL_NCOLLS];
  struct gcoll_tuning_entry tuning[GCOLL_NCOLLS][GCOLL_MAX_TUNING];
  /* The multi-node NVLink domain of this rank's node (-1: none) and how
   * many nodes it holds (0 without a domain). Edges to ranks of other nodes of the domain are
   * GCOLL_EDGE_P2P, and nvls_heads then spans the domain's nodes. */
  int nvl_domain;
  int nvl_domain_nnodes;
};

/* Loads rank `rank`'s view from a plan file with a streaming parser.
 * Returns 0, or -1 with a one-line reason ("FILE:LINE: field 'x': ...") in
 * err. */
int gcoll_plan_load_rank_view(const char *path, int rank,
                              struct gcoll_rank_view *view,
                              char *err, size_t errlen);

/* Checks that a loaded view fits the running job: its rank count, this
 * rank's host (when host is not NULL; "n001" matches "n001.domain") and
 * this node's topology hash (when topology_hash is not NULL). Returns 0, or
 * -1 with which one differs ("plan is for 16 ranks, this job has 8"). */
int gcoll_rank_view_check_job(const struct gcoll_rank_view *view, int nranks,
                              const char *host, const uint32_t *topology_hash,
                              char *err, size_t errlen);

/* Picks the tuning row for a message of `bytes` bytes. */
const struct gcoll_tuning_entry *
gcoll_rank_view_tuning(const struct gcoll_rank_view *view, enum gcoll_coll coll,
                       uint64_t bytes);

const char *gcoll_edge_name(enum gcoll_edge e);    /* "net", "shm", ... */
const char *gcoll_coll_name(enum gcoll_coll c);    /* "allreduce", ... */
const char *gcoll_algo_name(enum gcoll_algo a);    /* "ring", "tree", "nvls" */
const char *gcoll_proto_name(enum gcoll_proto p);  /* "simple", "ll", "ll128" */
/* Reverse lookups; return -1 for an unknown name. */
int gcoll_coll_from_name(const char *s);
int gcoll_algo_from_name(const char *s);
int gcoll_proto_from_name(const char *s);
int gcoll_edge_from_name(const char *s);

#ifdef __cplusplus
}
#endif
#endif
