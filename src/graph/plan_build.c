/* Computes the whole plan from the nodes' topologies: classes, one search
 * per class, the global ring, the double binary tree and tuning.
 *
 * A class is a (topology, local rank count) pair, so nodes may hold
 * different numbers of ranks (input node_ranks): each node's ranks stay
 * contiguous, the global ring visits nodes in order and runs each node's
 * class ring inside it, and the double binary tree over nodes hangs each
 * node's class chain (of that node's length) below the node's endpoint.
 *
 * Cost is O(nodes + classes x search): nodes sharing a gcoll_topo pointer
 * with a class are not rehashed, and nothing per node depends on the
 * channel count. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static int default_nlocal(const struct gcoll_topo *t) {
  if (t->ngpu > 0) return t->ngpu;
  long cores = 0;
  for (int s = 0; s < t->ncpu; s++) cores += t->dev[t->cpu[s]].u.cpu.cores;
  if (cores < 1) return 1;
  return cores > GCOLL_MAX_LOCAL_RANKS ? GCOLL_MAX_LOCAL_RANKS : (int)cores;
}

static int class_name_taken(const struct gcoll_plan *p, const char *name) {
  for (int k = 0; k < p->nclasses; k++)
    if (strcmp(p->classes[k].name, name) == 0) return 1;
  return 0;
}

/* Class names come from topology names; two different topologies that
 * share a name get "-2", "-3", ... so names stay unique in the file. */
static void unique_class_name(const struct gcoll_plan *p, const char *base, char *out) {
  /* The stem leaves room for "-" and up to 6 digits (GCOLL_MAX_CLASSES). */
  char stem[GCOLL_PLAN_NAME_MAX - 8];
  size_t len = strlen(base[0] ? base : "topology");
  if (len >= sizeof(stem)) len = sizeof(stem) - 1;
  memcpy(stem, base[0] ? base : "topology", len);
  stem[len] = '\0';
  memcpy(out, stem, len + 1);
  for (int i = 2; class_name_taken(p, out) && i <= GCOLL_MAX_CLASSES + 1; i++) {
    char suffix[8];
    snprintf(suffix, sizeof(suffix), "-%u", (unsigned)i % 1000000u);
    memcpy(out, stem, len);
    memcpy(out + len, suffix, strlen(suffix) + 1);
  }
}

struct class_src {
  const struct gcoll_topo *topo;   /* first node's topology: the one searched */
};

/* A class is one (topology hash, local rank count) pair: nodes of the same
 * topology with different rank counts need different intra-node rings and
 * chains, so they are different classes (named "<topology>", "<topology>-2",
 * ... by unique_class_name). */
static int add_class(struct gcoll_plan *p, struct class_src *src, const struct gcoll_topo *t,
                     uint32_t hash, int nlocal, int node, char *err, size_t errlen) {
  if (p->nclasses >= GCOLL_MAX_CLASSES) {
    snprintf(err, errlen, "more than %d distinct node classes (topology and ranks per node)",
             GCOLL_MAX_CLASSES);
    return -1;
  }
  if (t->incomplete) {
    char why[256];
    gcoll_topo_missing(t, why, sizeof(why));
    snprintf(err, errlen, "node %d: topology '%s' lacks what a plan needs: %s", node, t->name,
             why);
    return -1;
  }
  if (t->ngpu > 0 && nlocal > t->ngpu) {
    snprintf(err, errlen, "node %d: topology '%s': %d ranks per node but only %d GPUs", node,
             t->name, nlocal, t->ngpu);
    return -1;
  }
  if (nlocal < 1 || nlocal > GCOLL_MAX_LOCAL_RANKS) {
    snprintf(err, errlen, "node %d: %d ranks per node, must be 1 to %d", node, nlocal,
             GCOLL_MAX_LOCAL_RANKS);
    return -1;
  }
  struct gcoll_plan_class *k = &p->classes[p->nclasses];
  memset(k, 0, sizeof(*k));
  unique_class_name(p, t->name, k->name);
  k->hash = hash;
  k->nlocal = nlocal;
  k->intra_edge = t->ngpu > 0 ? GCOLL_EDGE_P2P : GCOLL_EDGE_SHM;
  k->has_gpu_busids = t->ngpu > 0;
  for (int i = 0; i < nlocal && k->has_gpu_busids; i++) {
    const char *b = t->dev[t->gpu[i]].busid;
    k->has_gpu_busids = b[0] != '\0';
    snprintf(k->gpu_busid[i], sizeof(k->gpu_busid[i]), "%s", b);
  }
  src[p->nclasses].topo = t;
  return p->nclasses++;
}

static int find_class(const struct gcoll_plan *p, uint32_t hash, int nlocal) {
  for (int k = 0; k < p->nclasses; k++)
    if (p->classes[k].hash == hash && p->classes[k].nlocal == nlocal) return k;
  return -1;
}

/* The topology's hash, without rehashing a gcoll_topo some class was made
 * from (jobs alternate a few shared topologies over thousands of nodes). */
static uint32_t topo_hash_cached(const struct gcoll_plan *p, const struct class_src *src,
                                 const struct gcoll_topo *t) {
  for (int k = 0; k < p->nclasses; k++)
    if (src[k].topo == t) return p->classes[k].hash;
  return gcoll_topo_hash(t);
}

static int node_nlocal(const struct gcoll_plan_input *in, int n, const struct gcoll_topo *t) {
  if (in->node_ranks != NULL) return in->node_ranks[n];
  return in->ranks_per_node > 0 ? in->ranks_per_node : default_nlocal(t);
}

static int assign_classes(struct gcoll_plan *p, const struct gcoll_plan_input *in,
                          struct class_src *src, char *err, size_t errlen) {
  const struct gcoll_topo *prev = NULL;
  int prev_class = -1, prev_nlocal = 0;
  long long rank = 0;
  for (int n = 0; n < in->nnodes; n++) {
    const struct gcoll_topo *t = in->node_topo[n];
    if (t == NULL) {
      snprintf(err, errlen, "node %d has no topology", n);
      return -1;
    }
    int nlocal = node_nlocal(in, n, t);
    if (nlocal < 1 || nlocal > GCOLL_MAX_LOCAL_RANKS) {
      snprintf(err, errlen, "node %d: %d ranks, must be 1 to %d", n, nlocal,
               GCOLL_MAX_LOCAL_RANKS);
      return -1;
    }
    int k = prev_class;
    if (t != prev || nlocal != prev_nlocal) {
      uint32_t h = topo_hash_cached(p, src, t);
      k = find_class(p, h, nlocal);
      if (k < 0) k = add_class(p, src, t, h, nlocal, n, err, errlen);
      if (k < 0) return -1;
      prev = t;
      prev_class = k;
      prev_nlocal = nlocal;
    }
    p->node_class[n] = k;
    p->node_first_rank[n] = (int)rank;
    rank += p->classes[k].nlocal;
    if (rank > GCOLL_MAX_RANKS) {
      snprintf(err, errlen, "more than %d ranks in the job", GCOLL_MAX_RANKS);
      return -1;
    }
  }
  p->nranks = (int)rank;
  return 0;
}

/* 1 when searched channel s of classes a and b enter, leave and hang
 * their chains on the same rails. */
static int same_rails(const struct gcoll_intra_channel *a, const struct gcoll_intra_channel *b) {
  return a->ring_rail_in == b->ring_rail_in && a->ring_rail_out == b->ring_rail_out &&
         a->chain_rail == b->chain_rail;
}

/* Nodes of different classes meet on one rail only if their classes give
 * each channel the same rails; each class searched alone picks its own
 * (a node using 4 of its GPUs may find no room on NIC 6 for channel 6 and
 * take NIC 2). The class with the fewest channels, which sets the plan's
 * count, is the reference; a class that differs from it is searched
 * again for the plan's channel count, entering each channel by the
 * reference's rail, and keeps that result if it has every rail, even at
 * a lower rate per channel (a spine crossing on every hop costs more). */
static void align_class_rails(struct gcoll_plan *p, const struct class_src *src, int S) {
  int ref = 0;
  for (int k = 1; k < p->nclasses; k++)
    if (p->classes[k].graph.nchannels < p->classes[ref].graph.nchannels) ref = k;
  int want[GCOLL_MAX_SEARCH_CHANNELS];
  for (int s = 0; s < S; s++) want[s] = p->classes[ref].graph.ch[s].ring_rail_in;
  struct gcoll_search_opts o = {0, want, S, S};
  struct gcoll_intra_graph *g = malloc(sizeof(*g));
  for (int k = 0; g != NULL && k < p->nclasses; k++) {
    struct gcoll_plan_class *c = &p->classes[k];
    int differs = 0;
    for (int s = 0; s < S; s++)
      differs |= !same_rails(&c->graph.ch[s], &p->classes[ref].graph.ch[s]);
    char why[256];
    if (!differs || src[k].topo->ngpu == 0 ||
        gcoll_search_intra_rails(src[k].topo, c->nlocal, 1, S, &o, g, why, sizeof(why)) != 0 ||
        g->nchannels < S)
      continue;
    int all = 1;
    for (int s = 0; s < S; s++) all &= same_rails(&g->ch[s], &p->classes[ref].graph.ch[s]);
    if (all) c->graph = *g;
  }
  free(g);
}

static int search_classes(struct gcoll_plan *p, const struct class_src *src, int max_channels,
                          int cross_rail, char *err, size_t errlen) {
  int S = GCOLL_MAX_SEARCH_CHANNELS;
  struct gcoll_search_opts o = {cross_rail, NULL, 0, 0};
  for (int k = 0; k < p->nclasses; k++) {
    struct gcoll_plan_class *c = &p->classes[k];
    char why[256];
    if (gcoll_search_intra_rails(src[k].topo, c->nlocal, p->nnodes > 1, max_channels, &o,
                                 &c->graph, why, sizeof(why)) != 0) {
      snprintf(err, errlen, "topology '%s': %s", c->name, why);
      return -1;
    }
    if (c->graph.nchannels < S) S = c->graph.nchannels;
  }
  if (p->nnodes > 1 && p->nclasses > 1 && !cross_rail) align_class_rails(p, src, S);
  /* Every rank runs every channel, so all classes use the smallest count. */
  for (int k = 0; k < p->nclasses; k++) p->classes[k].graph.nchannels = S;
  p->nchannels = 2 * S;
  return 0;
}

static int fill_hosts(struct gcoll_plan *p, const char **hosts, char *err, size_t errlen) {
  for (int n = 0; n < p->nnodes; n++) {
    char buf[GCOLL_PLAN_HOST_MAX];
    if (hosts != NULL && hosts[n] != NULL) {
      size_t len = strlen(hosts[n]);
      if (len == 0 || len >= GCOLL_PLAN_HOST_MAX) {
        snprintf(err, errlen, "node %d: host name must be 1 to %d characters", n,
                 GCOLL_PLAN_HOST_MAX - 1);
        return -1;
      }
      p->node_host[n] = strdup(hosts[n]);
    } else {
      snprintf(buf, sizeof(buf), "node%05d", n);
      p->node_host[n] = strdup(buf);
    }
    if (p->node_host[n] == NULL) {
      snprintf(err, errlen, "out of memory for host names");
      return -1;
    }
  }
  return 0;
}

int gcoll_plan_build_trees(struct gcoll_plan *p) {
  p->t2_construction = gcoll_dtree_construction(p->nnodes);
  return gcoll_plan_canonical_trees(p, p->t1_parent, p->t2_parent, &p->t1_root, &p->t2_root);
}

void gcoll_plan_stamp(struct gcoll_plan *p, int64_t job_id, int64_t step_id) {
  snprintf(p->generator, sizeof(p->generator), "gcoll %s", PACKAGE_VERSION);
  p->job.id = job_id >= 0 ? job_id : -1;
  p->job.step = step_id >= 0 ? step_id : -1;
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm) == NULL ||
      strftime(p->job.created, sizeof(p->job.created), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    p->job.created[0] = '\0';
}

/* The nodes' NVLink domains: given (generate --nvlink-domain), else what
 * each node's topology says (detection on the node, the plugin's files). */
static int set_domains(struct gcoll_plan *p, const struct gcoll_plan_input *in, char *err,
                       size_t errlen) {
  if (in->node_domain != NULL) return gcoll_plan_set_domains(p, in->node_domain, err, errlen);
  int none;
  int *v = gcoll_plan_domains_of_topos(in->node_topo, in->nnodes, &none);
  if (v == NULL && !none) {
    snprintf(err, errlen, "out of memory for the domains of %d nodes", in->nnodes);
    return -1;
  }
  /* NVML names no domain: Slurm's blocks may (topology/block is how sites
   * describe NVL72 racks). */
  if (v == NULL && in->block_domain != NULL)
    return gcoll_plan_set_domains(p, in->block_domain, err, errlen);
  int rc = gcoll_plan_set_domains(p, v, err, errlen);
  free(v);
  return rc;
}

/* Ranks on some of each node's GPUs: the plan of the whole nodes (every
 * GPU, so the search sees the real NVLink and PCIe neighbours), restricted
 * to the GPUs the ranks drive (gcoll_plan_subset), which keeps each GPU's
 * NIC and records the GPUs in the classes. Nodes come in the order of
 * their lowest rank: node order for block, cyclic and plane layouts. */
static struct gcoll_plan *build_on_gpus(const struct gcoll_plan_input *in, char *err,
                                        size_t errlen) {
  struct gcoll_plan_input whole = *in;
  whole.node_ranks = NULL;
  whole.ranks_per_node = 0;   /* a GPU node: one rank per GPU */
  whole.rank_of_slot = NULL;
  whole.node_gpus = NULL;
  long long nranks = 0;
  for (int n = 0; n < in->nnodes; n++) {
    const struct gcoll_topo *t = in->node_topo[n];
    if (t == NULL || t->ngpu < 1) {
      snprintf(err, errlen, "node %d: GPUs named for a node without GPUs", n);
      return NULL;
    }
    nranks += node_nlocal(in, n, t);
  }
  struct gcoll_plan *full = gcoll_plan_build(&whole, err, errlen), *plan = NULL;
  int *members = full != NULL ? malloc((size_t)nranks * sizeof(int)) : NULL;
  if (full != NULL && members == NULL) snprintf(err, errlen, "out of memory");
  for (int n = 0, slot = 0; members != NULL && n < in->nnodes; n++) {
    int count = node_nlocal(in, n, in->node_topo[n]);
    for (int k = 0; k < count; k++, slot++) {
      int gpu = in->node_gpus[slot], rank = in->rank_of_slot ? in->rank_of_slot[slot] : slot;
      int twice = 0;
      for (int j = 0; j < k; j++) twice |= in->node_gpus[slot - k + j] == gpu;
      if (gpu < 0 || gpu >= in->node_topo[n]->ngpu || rank < 0 || rank >= nranks || twice) {
        snprintf(err, errlen, "node %d: rank %d on GPU %d%s (the node has GPUs 0..%d)", n, rank,
                 gpu, twice ? ", which another rank of the node drives" : "",
                 in->node_topo[n]->ngpu - 1);
        goto out;
      }
      members[rank] = full->node_first_rank[n] + gpu;
    }
  }
  if (members != NULL && (plan = gcoll_plan_subset(full, members, (int)nranks, err, errlen)))
    for (int n = 0; n < plan->nnodes; n++)
      if (plan->nnodes != in->nnodes || strcmp(plan->node_host[n], full->node_host[n]) != 0) {
        snprintf(err, errlen, "node %d does not hold the lowest rank after node %d's: plans on "
                 "some of a node's GPUs need nodes in the order of their lowest rank", n, n - 1);
        gcoll_plan_free(plan);
        plan = NULL;
        break;
      }
out:
  free(members);
  gcoll_plan_free(full);
  return plan;
}

/* The ring's node order from a given one (a switch fabric's), each NVLink
 * domain's nodes still together, where the domain first comes, started at
 * node 0. */
static int ring_order_from(struct gcoll_plan *p, const int *base, char *err, size_t errlen) {
  int n = p->nnodes, at = 0;
  unsigned char *seen = calloc((size_t)n, 1);
  if (seen == NULL) {
    snprintf(err, errlen, "out of memory for the ring order of %d nodes", n);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (base[i] < 0 || base[i] >= n || seen[base[i]]++) {
      snprintf(err, errlen, "the node order is not a permutation of 0..%d (entry %d is %d)",
               n - 1, i, base[i]);
      free(seen);
      return -1;
    }
  memset(seen, 0, (size_t)n);
  /* Quadratic only in the domains met: a domain's nodes are gathered once,
   * when its first node comes. */
  for (int i = 0; i < n; i++) {
    int node = base[i];
    if (seen[node]) continue;
    int d = p->node_domain != NULL ? p->node_domain[node] : -1;
    if (d < 0) {
      seen[node] = 1;
      p->ring_node_order[at++] = node;
      continue;
    }
    for (int j = i; j < n; j++)
      if (!seen[base[j]] && p->node_domain[base[j]] == d) {
        seen[base[j]] = 1;
        p->ring_node_order[at++] = base[j];
      }
  }
  free(seen);
  /* A ring is a cycle: started at node 0 it crosses the same links, and
   * the first tree is rooted at node 0 as every plan's is. */
  int zero = 0;
  while (p->ring_node_order[zero] != 0) zero++;
  int *rotated = malloc((size_t)n * sizeof(int));
  if (rotated == NULL) {
    snprintf(err, errlen, "out of memory for the ring order of %d nodes", n);
    return -1;
  }
  for (int i = 0; i < n; i++) rotated[i] = p->ring_node_order[(zero + i) % n];
  memcpy(p->ring_node_order, rotated, (size_t)n * sizeof(int));
  free(rotated);
  return 0;
}

struct gcoll_plan *gcoll_plan_build(const struct gcoll_plan_input *in, char *err, size_t errlen) {
  if (in != NULL && in->node_topo != NULL && in->node_gpus != NULL && in->nnodes >= 1 &&
      in->nnodes <= GCOLL_MAX_NODES)
    return build_on_gpus(in, err, errlen);
  if (in == NULL || in->node_topo == NULL) {
    snprintf(err, errlen, "no nodes to plan");
    return NULL;
  }
  if (in->nnodes < 1 || in->nnodes > GCOLL_MAX_NODES) {
    snprintf(err, errlen, "%d nodes, must be 1 to %d", in->nnodes, GCOLL_MAX_NODES);
    return NULL;
  }
  if (in->ranks_per_node < 0 || in->ranks_per_node > GCOLL_MAX_LOCAL_RANKS) {
    snprintf(err, errlen, "ranks per node %d, must be 0 (auto) to %d", in->ranks_per_node,
             GCOLL_MAX_LOCAL_RANKS);
    return NULL;
  }
  if (in->max_channels < 0 || in->max_channels > GCOLL_MAX_SEARCH_CHANNELS) {
    snprintf(err, errlen, "channel limit %d, must be 0 (auto) to %d", in->max_channels,
             GCOLL_MAX_SEARCH_CHANNELS);
    return NULL;
  }
  struct gcoll_plan *p = gcoll_plan_new();
  struct class_src *src = calloc(GCOLL_MAX_CLASSES, sizeof(*src));
  if (p == NULL || src == NULL || gcoll_plan_alloc_nodes(p, in->nnodes) != 0) {
    snprintf(err, errlen, "out of memory for %d nodes", in->nnodes);
    goto fail;
  }
  if (assign_classes(p, in, src, err, errlen) ||
      search_classes(p, src, in->max_channels, in->cross_rail, err, errlen) ||
      fill_hosts(p, in->node_host, err, errlen) ||
      gcoll_plan_set_rank_order(p, in->rank_of_slot, err, errlen) ||
      set_domains(p, in, err, errlen))
    goto fail;
  if (in->node_order != NULL) {
    if (ring_order_from(p, in->node_order, err, errlen) != 0) goto fail;
  } else {
    gcoll_plan_domain_ring_order(p, p->ring_node_order);
  }
  if (gcoll_plan_build_trees(p) != 0) {
    snprintf(err, errlen, "out of memory for the trees of %d nodes", p->nnodes);
    goto fail;
  }
  gcoll_plan_stamp(p, in->job_id, in->step_id);
  gcoll_plan_tune(p);
  free(src);
  return p;
fail:
  free(src);
  gcoll_plan_free(p);
  return NULL;
}
