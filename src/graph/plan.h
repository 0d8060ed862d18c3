/* The whole-job plan in memory: topology classes with their intra-node
 * channels, nodes, the global ring order, the double binary tree over nodes
 * and the tuning table. Built by plan_build.c, written by plan_yaml_write.c,
 * read back whole by plan_yaml_read.c (verify/show/diff), and read one rank
 * at a time by plan_rank_view.c. */
#ifndef GCOLL_GRAPH_PLAN_H
#define GCOLL_GRAPH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll_plan.h"
#include "topo.h"

#define GCOLL_MAX_LOCAL_RANKS 256   /* ranks per node (cores on CPU nodes) */
#define GCOLL_MAX_SEARCH_CHANNELS (GCOLL_MAX_CHANNELS / 2)  /* before duplication */
#define GCOLL_MAX_CLASSES 64
#define GCOLL_MAX_GPU_INDEX 1023    /* largest GPU index a class's gpu map holds */
#define GCOLL_MAX_RANKS (1 << 24)
#define GCOLL_MAX_NODES (1 << 20)
#define GCOLL_MAX_LEFT_OUT 32       /* NICs a class lists as left out */

/* ---- intra-node search (search.c) ------------------------------------- */

/* One channel inside one node: the local-rank order of the ring and where
 * it enters/leaves the node, and the tree chain and its NIC. Local rank i
 * drives GPU i on GPU nodes. nic_* are NIC device indices in the topology
 * (gcoll_topo.nic[]) or -1 (no NIC / single node). */
struct gcoll_intra_channel {
  int ring[GCOLL_MAX_LOCAL_RANKS];
  int ring_nic_in, ring_nic_out;
  int chain[GCOLL_MAX_LOCAL_RANKS];   /* chain[0] is the node's tree endpoint */
  int chain_nic;
  /* NIC names ("" when none): what plan files carry, since a plan read from
   * a file has no gcoll_topo to resolve the indices above against. */
  char ring_nic_in_name[32], ring_nic_out_name[32], chain_nic_name[32];
  /* The NICs' rails (gcoll_topo_nic_rail; -1: no NIC, or a plan file
   * written before rails, where NIC names stand in for rails). */
  int ring_rail_in, ring_rail_out, chain_rail;
  /* PXN: the local rank whose GPU the ring's last rank sends through to
   * ring_nic_out over NVLink (that GPU is next to the NIC, the last one is
   * not); -1 when it sends directly. */
  int ring_pxn;
};

/* Result of the search for one topology class. */
struct gcoll_intra_graph {
  int nlocal;                  /* local ranks */
  int nchannels;               /* searched channels, before duplication */
  double ring_bw;              /* GB/s per channel the search achieved, intra */
  double net_bw;               /* GB/s per channel out of the node, 0 if none */
  enum gcoll_path_type ring_worst_path;  /* worst hop type used by rings */
  struct gcoll_intra_channel ch[GCOLL_MAX_SEARCH_CHANNELS];
  int nvls_nheads;             /* 0 when no NVSwitch multicast */
  int nvls_heads[GCOLL_MAX_NVLS_HEADS];  /* local ranks */
  /* NICs of the node the plan does not use: port down ("down") or below
   * its line rate ("slow") when the node's topology was taken. Multi-node
   * plans only; past GCOLL_MAX_LEFT_OUT only counted. */
  int nleft_out, left_out_more;
  struct { char nic[32]; char why[8]; } left_out[GCOLL_MAX_LEFT_OUT];
};

/* Searches channels for `nlocal` local ranks on `topo` (paths computed).
 * For GPU topologies nlocal must be <= ngpu (local rank i = GPU i). For
 * CPU-only topologies ranks are placed round-robin-free: in blocks over the
 * sockets, and the ring keeps each socket's ranks together. multi_node says
 * whether rings must enter and leave by NICs. max_channels caps the count. */
int gcoll_search_intra(const struct gcoll_topo *topo, int nlocal, int multi_node,
                       int max_channels, struct gcoll_intra_graph *out,
                       char *err, size_t errlen);
/* The same with rail options. Rings leave each node by the rail they
 * entered by (PXN where needed) whenever such rings exist. cross_rail
 * (fabrics without rails, gcoll-plan generate --allow-cross-rail) takes
 * rings that change rails instead when they carry more bandwidth.
 * want_rail[c] (nwant entries, -1: any), when set, is the rail channel c
 * must enter by: another class's rail for it, so that nodes of different
 * classes meet on one rail; channels that cannot are not found. */
struct gcoll_search_opts {
  int cross_rail;
  const int *want_rail;
  int nwant;
  int min_channels;   /* levels that find fewer channels are passed over */
};
int gcoll_search_intra_rails(const struct gcoll_topo *topo, int nlocal, int multi_node,
                             int max_channels, const struct gcoll_search_opts *opts,
                             struct gcoll_intra_graph *out, char *err, size_t errlen);

/* ---- trees (btree.c) --------------------------------------------------- */

/* Binary tree over n nodes with root 0 that alternates leaves and interior
 * nodes (seed 000's bit rules). -1 where absent. */
void gcoll_btree(int n, int node, int *parent, int *child0, int *child1);

enum gcoll_t2_construction { GCOLL_T2_MIRROR = 0, GCOLL_T2_SHIFT };
/* The construction the double binary tree uses for n nodes: mirror for even
 * n, shift for odd n (NCCL 2.7.8 had these swapped). */
enum gcoll_t2_construction gcoll_dtree_construction(int n);
/* Second tree of the double binary tree. */
void gcoll_dtree_t2(int n, int node, int *parent, int *child0, int *child1);

/* ---- the plan ---------------------------------------------------------- */

struct gcoll_plan_class {
  char name[GCOLL_PLAN_NAME_MAX];
  uint32_t hash;
  int nlocal;                  /* ranks per node of this class */
  enum gcoll_edge intra_edge;  /* SHM on CPU nodes, P2P on GPU nodes */
  struct gcoll_intra_graph graph;
  /* Which of the node's GPUs each local rank drives (index into the
   * topology's GPUs). A class made from part of a node (plan_subset.c: a
   * sub-communicator with GPUs 0, 2, 4, 6 of a DGX) has one; without it
   * local rank i drives GPU i, as the search assumes. P2P classes only. */
  int has_gpu_map;
  int gpu[GCOLL_MAX_LOCAL_RANKS];
  /* The PCI bus id of the GPU each local rank drives, from the topology:
   * what a rank compares with the driver's view of its device, since
   * device indices change with CUDA_VISIBLE_DEVICES and cgroups. P2P
   * classes whose topology names every GPU's bus id only. */
  int has_gpu_busids;
  char gpu_busid[GCOLL_MAX_LOCAL_RANKS][GCOLL_BUSID_MAX];
};

struct gcoll_plan_job {
  int64_t id, step;            /* -1 when unknown */
  char created[32];            /* RFC 3339 UTC */
};

struct gcoll_plan {
  int version;
  char generator[64];
  struct gcoll_plan_job job;
  int nranks;
  int nnodes;
  int nchannels;               /* after duplication: 2 * searched */
  int nclasses;
  struct gcoll_plan_class classes[GCOLL_MAX_CLASSES];
  /* Per node (nnodes entries each). Node n holds slots
   * [node_first_rank[n], node_first_rank[n] + classes[node_class[n]].nlocal):
   * slots number the ranks node by node. */
  char **node_host;
  int *node_class;
  int *node_first_rank;
  /* The job rank at each slot and back (nranks entries each), for layouts
   * that are not node-order blocks (Slurm's -m cyclic, plane, arbitrary;
   * a sub-communicator whose members interleave nodes). NULL, both, when
   * slot s is rank s. gcoll_plan_rank_at / gcoll_plan_slot_of read them. */
  int *rank_of_slot, *slot_of_rank;
  /* Multi-node NVLink domain of each node (plan_domain.c): 0.. in order of
   * first appearance, -1 for a node in none; NULL when no node is in one,
   * and then the plan is exactly what it was before domains existed.
   * Edges between nodes of one domain are p2p, the ring visits each
   * domain's nodes together, and the trees cross the network only between
   * domains. */
  int *node_domain;
  /* Global ring: order in which nodes are visited (same for all channels). */
  int *ring_node_order;
  /* Double binary tree over nodes: parent per node, -1 at the root. */
  int t1_root, t2_root;
  int *t1_parent, *t2_parent;
  enum gcoll_t2_construction t2_construction;
  int ntuning[GCOLL_NCOLLS];
  struct gcoll_tuning_entry tuning[GCOLL_NCOLLS][GCOLL_MAX_TUNING];
};

/* Inputs of gcoll_plan_build: per node its topology (several nodes may point
 * to the same gcoll_topo) and host name, and the ranks per node: the same
 * count on every node (ranks_per_node), or one count per node (node_ranks,
 * e.g. Slurm's block distribution of 3 tasks on 2 nodes: {2, 1}). Nodes of
 * one topology with different counts get one topology class per count.
 * node_ranks is last so that positional initializers of the older fields
 * keep working. */
struct gcoll_plan_input {
  int nnodes;
  const struct gcoll_topo **node_topo;   /* nnodes entries */
  const char **node_host;                /* nnodes entries, or NULL: node%05d */
  int ranks_per_node;                    /* 0: number of GPUs (GPU nodes);
                                          * ignored when node_ranks is set */
  int max_channels;                      /* 0: default */
  int64_t job_id, step_id;               /* -1 when unknown */
  const int *node_ranks;                 /* nnodes entries, each 1..
                                          * GCOLL_MAX_LOCAL_RANKS (and at most
                                          * the GPUs of a GPU node), or NULL:
                                          * ranks_per_node on every node */
  const int *rank_of_slot;               /* the job rank of each slot (node i's
                                          * ranks after node i-1's), or NULL:
                                          * ranks in node-order blocks */
  const int *node_gpus;                  /* per slot, the topology GPU its rank
                                          * drives (a step that owns GPUs 5
                                          * and 6 of a node), or NULL: local
                                          * rank i drives GPU i */
  const int *node_order;                 /* the order the global ring visits
                                          * the nodes in (a permutation of
                                          * 0..nnodes-1, e.g. a switch
                                          * fabric's: fabric.h), or NULL: node
                                          * order; domains still group */
  const int *block_domain;               /* per node its Slurm block (fabric.h),
                                          * used as its NVLink domain when
                                          * neither node_domain nor the
                                          * topologies name domains; NULL:
                                          * none */
  const int *node_domain;                /* per node its NVLink domain: equal
                                          * values >= 0 share one, -1 none
                                          * (gcoll-plan generate
                                          * --nvlink-domain), or NULL: from
                                          * each topology's nvl_domain */
  int cross_rail;                        /* 1: rings may change rails where
                                          * that carries more (fabrics
                                          * without rails); 0: rails kept
                                          * wherever a node allows */
};

struct gcoll_plan *gcoll_plan_new(void);
void gcoll_plan_free(struct gcoll_plan *plan);
/* Allocates the per-node arrays for nnodes nodes. */
int gcoll_plan_alloc_nodes(struct gcoll_plan *plan, int nnodes);

/* ---- NVLink domains across nodes (plan_domain.c) ------------------------ */

/* Sets plan->node_domain from per-node values (-1: none; others any ints,
 * renumbered 0.. in order of first appearance); NULL or all -1 clears it.
 * plan->nnodes must be set. 0, or -1 out of memory. */
int gcoll_plan_set_domains(struct gcoll_plan *plan, const int *node_domain, char *err,
                           size_t errlen);
/* Per-node domain values from the topologies' nvl_domain (equal domains get
 * equal values, -1 for none): a malloc'd array of nnodes, or NULL with
 * *none set when no topology names a domain (or out of memory: *none 0). */
int *gcoll_plan_domains_of_topos(const struct gcoll_topo *const *node_topo, int nnodes,
                                 int *none);
/* The node's domain, -1 when none. */
int gcoll_plan_node_domain(const struct gcoll_plan *plan, int node);
/* How an edge between a rank on node a and one on node b is carried: the
 * class's intra edge inside a node, p2p between GPU nodes of one domain,
 * net otherwise. */
enum gcoll_edge gcoll_plan_edge_between(const struct gcoll_plan *plan, int a, int b);
/* The ring's node order: node order, with each domain's nodes visited
 * together where the domain first appears, so a ring crosses the network
 * once per domain. */
void gcoll_plan_domain_ring_order(const struct gcoll_plan *plan, int *order);
/* The trees gcoll_plan_build_trees makes (with or without domains), into
 * the given arrays (nnodes entries each); 0, or -1 out of memory. */
int gcoll_plan_canonical_trees(const struct gcoll_plan *plan, int *t1_parent, int *t2_parent,
                               int *t1_root, int *t2_root);

/* Computes the whole plan (classes, search, ring, trees, tuning). */
struct gcoll_plan *gcoll_plan_build(const struct gcoll_plan_input *in,
                                    char *err, size_t errlen);

/* The parts of gcoll_plan_build that follow from the nodes alone, for
 * plans assembled elsewhere (plan_subset.c): the double binary tree over
 * nodes 0..nnodes-1 (over domains, then inside each, when node_domain is
 * set), and the generator, job and creation time. Returns 0, or -1 out of
 * memory. */
int gcoll_plan_build_trees(struct gcoll_plan *plan);
void gcoll_plan_stamp(struct gcoll_plan *plan, int64_t job_id, int64_t step_id);

/* A plan for some of a plan's ranks, as a sub-communicator needs:
 * members[i] is the parent rank that becomes rank i (n entries, distinct).
 * Derived from the parent alone, with no topology: each node keeps its
 * host and class, restricted to its members (rings and chains keep the
 * parent's order of the remaining local ranks, each ring or chain end keeps
 * the NIC the parent paired with that GPU, the GPUs driven are recorded in
 * the class's gpu map), nodes keep the parent's ring order, and the trees
 * and tuning are computed for the new node count as gcoll_plan_build
 * does. Nodes come in the order they first appear among the members;
 * members of one node need not be adjacent (the child then has a rank
 * order, as a cyclic job's plan does). */
struct gcoll_plan *gcoll_plan_subset(const struct gcoll_plan *parent, const int *members, int n,
                                     char *err, size_t errlen);

/* Rank lists as people and the runtime write them: "0-7,16,20-30:2"
 * (ranges, with an optional step), in order, duplicates allowed by the
 * syntax (callers decide). Parse fills a malloc'd array; format returns a
 * malloc'd string, or NULL when out of memory. */
int gcoll_ranklist_parse(const char *s, int max_rank, int **ranks, int *n, char *err,
                         size_t errlen);
char *gcoll_ranklist_format(const int *ranks, int n);

/* Tuning (tuning.c): fills plan->tuning from the latency/bandwidth model. */
void gcoll_plan_tune(struct gcoll_plan *plan);

/* Derived per-rank facts, computed from the in-memory plan. */
int gcoll_plan_node_of_rank(const struct gcoll_plan *plan, int rank);
/* The job rank at a slot, and the slot of a job rank (identity without a
 * rank order); -1 out of range. */
int gcoll_plan_rank_at(const struct gcoll_plan *plan, int slot);
int gcoll_plan_slot_of(const struct gcoll_plan *plan, int rank);
/* Sets the job rank of every slot (nranks entries, a permutation of
 * 0..nranks-1; NULL or the identity: none). 0, or -1 with the first
 * rank missing or twice. */
int gcoll_plan_set_rank_order(struct gcoll_plan *plan, const int *rank_of_slot, char *err,
                              size_t errlen);
/* The global ranks of ring channel `channel` in ring order (ranks has
 * nranks entries): what ring algorithms need to place each rank's block.
 * Returns 0, or -1 for a bad channel or an inconsistent plan. */
int gcoll_plan_ring_ranks(const struct gcoll_plan *plan, int channel, int *ranks);
/* What a rank of a job keeps from the plan file at path: its view and the
 * ring orders (*ring_ranks: nchannels x nranks ints, ring c's at
 * c * nranks, malloc'd; NULL on failure), read in the compact form that
 * gcoll_plan_load_rank_view uses (no per-host strings), the plan verified
 * and every ring order checked to be a permutation. 0, or -1 with one line
 * ("PATH: ...") in err. */
int gcoll_plan_load_rank(const char *path, int rank, struct gcoll_rank_view *view,
                         int **ring_ranks, char *err, size_t errlen);
/* Fills the same view gcoll_plan_load_rank_view() reads from a file. */
int gcoll_plan_rank_view(const struct gcoll_plan *plan, int rank,
                         struct gcoll_rank_view *view, char *err, size_t errlen);

/* YAML. Write is atomic (temp file + fsync + rename). */
int gcoll_plan_write_file(const struct gcoll_plan *plan, const char *path,
                          char *err, size_t errlen);
int gcoll_plan_write_stream(const struct gcoll_plan *plan, void *FILE_stream,
                            char *err, size_t errlen);
struct gcoll_plan *gcoll_plan_read_file(const char *path, char *err, size_t errlen);
struct gcoll_plan *gcoll_plan_read_mem(const char *buf, size_t len, const char *what,
                                       char *err, size_t errlen);

/* Checks every invariant; returns 0 or -1 with the first broken one. */
int gcoll_plan_verify(const struct gcoll_plan *plan, char *err, size_t errlen);

/* Rails (plan_rails.c). Inter-node (net) edges of the searched channels'
 * rings and of both trees, and how many change rails: on a rail-optimised
 * fabric each such edge crosses the spine. */
struct gcoll_rail_counts {
  int ring_edges, ring_cross;
  int tree_edges, tree_cross;
};
void gcoll_plan_rail_counts(const struct gcoll_plan *plan, struct gcoll_rail_counts *out);
/* 0 when every inter-node edge stays on one rail; else -1 naming the first
 * edge that does not, its nodes, NICs and rails. */
int gcoll_plan_verify_rails(const struct gcoll_plan *plan, char *err, size_t errlen);

/* Slurm-style host lists (hostlist.c): "n[001-004],gpu7" <-> names. */
int gcoll_hostlist_expand(const char *list, char ***hosts, int *nhosts,
                          char *err, size_t errlen);
void gcoll_hostlist_free(char **hosts, int nhosts);
/* Compresses hosts[0..n) into a Slurm host list string (malloc'd) that
 * expands back to exactly that sequence; NULL when n <= 0, out of memory, or
 * a name cannot appear in a host list (empty, or has ',', '[', ']', spaces). */
char *gcoll_hostlist_compress(char *const *hosts, int n);
/* Number of hosts a list expands to, without expanding it. */
int gcoll_hostlist_count(const char *list, int *nhosts, char *err, size_t errlen);
/* The idx-th host of a list, without expanding the others. */
int gcoll_hostlist_nth(const char *list, int idx, char *out, size_t outlen,
                       char *err, size_t errlen);
/* Longest m <= n such that hosts[0..m) compress into ONE host expression
 * (no top-level comma) of at most maxlen characters; 0 if hosts[0] cannot. */
int gcoll_hostlist_single_run(char *const *hosts, int n, size_t maxlen);

/* Reader internals shared by plan_yaml_read.c and plan_rank_view.c. With
 * host_rank < 0 every node's host is expanded into node_host; otherwise host
 * lists stay compressed and node_host[] is NULL for every node except the
 * one holding host_rank (so gcoll_plan_free and gcoll_plan_rank_view work
 * unchanged), whose name is also written to host_out. */
struct ydoc;
struct gcoll_plan *gcoll_plan_from_ydoc(const struct ydoc *doc, int host_rank,
                                        char *host_out, size_t host_outlen,
                                        char *err, size_t errlen);

#endif
