/* Checks every invariant of docs/plan-format.md on an in-memory plan.
 *
 * Deliberately independent of plan.c: rings are rebuilt here as a global
 * next[] over ranks and walked, trees are walked for cycles and compared
 * with the canonical double binary tree from btree.c, so a bug in the
 * builder or in gcoll_plan_rank_view cannot hide behind shared code. Each
 * message names the invariant that is broken. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int check_sizes(const struct gcoll_plan *p, char *err, size_t errlen) {
  if (p->nranks < 1 || p->nranks > GCOLL_MAX_RANKS)
    return bad(err, errlen, "plan has %d ranks (expected 1..%d)", p->nranks, GCOLL_MAX_RANKS);
  if (p->nnodes < 1 || p->nnodes > GCOLL_MAX_NODES || p->nnodes > p->nranks)
    return bad(err, errlen, "plan has %d nodes for %d ranks", p->nnodes, p->nranks);
  if (p->nchannels < 2 || p->nchannels > GCOLL_MAX_CHANNELS || p->nchannels % 2)
    return bad(err, errlen, "plan has %d channels (expected an even count in 2..%d)",
               p->nchannels, GCOLL_MAX_CHANNELS);
  if (p->nclasses < 1 || p->nclasses > GCOLL_MAX_CLASSES)
    return bad(err, errlen, "plan has %d topology classes (expected 1..%d)", p->nclasses,
               GCOLL_MAX_CLASSES);
  if (!p->node_class || !p->node_first_rank || !p->ring_node_order || !p->t1_parent ||
      !p->t2_parent)
    return bad(err, errlen, "plan has no node arrays");
  for (int n = 0; p->node_domain != NULL && n < p->nnodes; n++)
    if (p->node_domain[n] < -1 || p->node_domain[n] >= p->nnodes)
      return bad(err, errlen, "node %d is in NVLink domain %d, outside -1..%d", n,
                 p->node_domain[n], p->nnodes - 1);
  return 0;
}

/* Returns the first value that breaks "v[0..n) is a permutation of 0..n-1"
 * through *what (0: out of range, 1: repeated), or -1 when it is one. */
static int perm_problem(const int *v, int n, int *what) {
  unsigned char seen[GCOLL_MAX_LOCAL_RANKS] = {0};
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= n) {
      *what = 0;
      return i;
    }
    if (seen[v[i]]) {
      *what = 1;
      return i;
    }
    seen[v[i]] = 1;
  }
  return -1;
}

static int check_perm(const char *cls, const char *kind, int s, const int *v, int n, char *err,
                      size_t errlen) {
  int what, i = perm_problem(v, n, &what);
  if (i < 0) return 0;
  return bad(err, errlen, "class '%s' %s %d is not a permutation of the local ranks: %d %s",
             cls, kind, s, v[i], what ? "appears twice" : "is out of range");
}

static int check_gpu_map(const struct gcoll_plan_class *c, char *err, size_t errlen) {
  if (c->intra_edge != GCOLL_EDGE_P2P)
    return bad(err, errlen, "class '%s' has a GPU map but is not a GPU class (intra %s)", c->name,
               gcoll_edge_name(c->intra_edge));
  for (int i = 0; i < c->nlocal; i++) {
    if (c->gpu[i] < 0 || c->gpu[i] > GCOLL_MAX_GPU_INDEX)
      return bad(err, errlen, "class '%s' local rank %d drives GPU %d, outside 0..%d", c->name, i,
                 c->gpu[i], GCOLL_MAX_GPU_INDEX);
    for (int j = 0; j < i; j++)
      if (c->gpu[j] == c->gpu[i])
        return bad(err, errlen, "class '%s' drives GPU %d from local ranks %d and %d", c->name,
                   c->gpu[i], j, i);
  }
  return 0;
}

static int check_gpu_busids(const struct gcoll_plan_class *c, char *err, size_t errlen) {
  if (c->intra_edge != GCOLL_EDGE_P2P)
    return bad(err, errlen, "class '%s' has GPU bus ids but is not a GPU class", c->name);
  for (int i = 0; i < c->nlocal; i++) {
    char norm[GCOLL_BUSID_MAX];
    if (memchr(c->gpu_busid[i], '\0', sizeof(c->gpu_busid[i])) == NULL ||
        gcoll_busid_normalize(c->gpu_busid[i], norm, sizeof(norm)) != 0 ||
        strcmp(norm, c->gpu_busid[i]) != 0)
      return bad(err, errlen, "class '%s' local rank %d: '%.16s' is not a normalised PCI bus id",
                 c->name, i, c->gpu_busid[i]);
    for (int j = 0; j < i; j++)
      if (strcmp(c->gpu_busid[j], c->gpu_busid[i]) == 0)
        return bad(err, errlen, "class '%s' drives GPU %s from local ranks %d and %d", c->name,
                   c->gpu_busid[i], j, i);
  }
  return 0;
}

static int check_class(const struct gcoll_plan *p, int k, char *err, size_t errlen) {
  const struct gcoll_plan_class *c = &p->classes[k];
  const struct gcoll_intra_graph *g = &c->graph;
  if (c->name[0] == '\0' || memchr(c->name, '\0', sizeof(c->name)) == NULL)
    return bad(err, errlen, "class %d has no name", k);
  for (int j = 0; j < k; j++)
    if (strcmp(p->classes[j].name, c->name) == 0)
      return bad(err, errlen, "class name '%s' is used twice", c->name);
  if (c->nlocal < 1 || c->nlocal > GCOLL_MAX_LOCAL_RANKS)
    return bad(err, errlen, "class '%s' has %d local ranks (expected 1..%d)", c->name, c->nlocal,
               GCOLL_MAX_LOCAL_RANKS);
  if (c->intra_edge != GCOLL_EDGE_SHM && c->intra_edge != GCOLL_EDGE_P2P)
    return bad(err, errlen, "class '%s' intra edge is %s (expected shm or p2p)", c->name,
               gcoll_edge_name(c->intra_edge));
  /* The reader refuses these, so a plan that passes here must not be one
   * that cannot be read back once written. */
  if (!(g->ring_bw >= 0 && g->ring_bw <= 1e9) || !(g->net_bw >= 0 && g->net_bw <= 1e9))
    return bad(err, errlen, "class '%s' bandwidth ring %g, net %g GB/s (expected 0..1e9)",
               c->name, g->ring_bw, g->net_bw);
  if (g->nchannels != p->nchannels / 2)
    return bad(err, errlen, "class '%s' has %d searched channels, the plan's %d channels need %d",
               c->name, g->nchannels, p->nchannels, p->nchannels / 2);
  for (int s = 0; s < g->nchannels; s++) {
    if (check_perm(c->name, "ring order", s, g->ch[s].ring, c->nlocal, err, errlen) ||
        check_perm(c->name, "tree chain", s, g->ch[s].chain, c->nlocal, err, errlen))
      return -1;
  }
  if (c->has_gpu_map && check_gpu_map(c, err, errlen)) return -1;
  if (c->has_gpu_busids && check_gpu_busids(c, err, errlen)) return -1;
  if (g->nvls_nheads < 0 || g->nvls_nheads > GCOLL_MAX_NVLS_HEADS || g->nvls_nheads > c->nlocal)
    return bad(err, errlen, "class '%s' has %d NVLS heads (expected 0..%d)", c->name,
               g->nvls_nheads, c->nlocal < GCOLL_MAX_NVLS_HEADS ? c->nlocal : GCOLL_MAX_NVLS_HEADS);
  for (int h = 0; h < g->nvls_nheads; h++) {
    if (g->nvls_heads[h] < 0 || g->nvls_heads[h] >= c->nlocal)
      return bad(err, errlen, "class '%s' NVLS head %d is local rank %d, outside 0..%d", c->name,
                 h, g->nvls_heads[h], c->nlocal - 1);
    for (int j = 0; j < h; j++)
      if (g->nvls_heads[j] == g->nvls_heads[h])
        return bad(err, errlen, "class '%s' NVLS head local rank %d appears twice", c->name,
                   g->nvls_heads[h]);
  }
  return 0;
}

/* Every rank in 0..nranks-1 belongs to exactly one node, nodes in order. */
static int check_nodes(const struct gcoll_plan *p, char *err, size_t errlen) {
  unsigned char *seen = calloc((size_t)p->nranks, 1);
  int rc = 0;
  if (seen == NULL) return bad(err, errlen, "out of memory");
  for (int n = 0; n < p->nnodes && rc == 0; n++) {
    int k = p->node_class[n];
    if (k < 0 || k >= p->nclasses) {
      rc = bad(err, errlen, "node %d has class %d, the plan has %d classes", n, k, p->nclasses);
      break;
    }
    for (int i = 0; i < p->classes[k].nlocal && rc == 0; i++) {
      int64_t r = (int64_t)p->node_first_rank[n] + i;
      if (r < 0 || r >= p->nranks)
        rc = bad(err, errlen, "node %d holds rank %lld, outside 0..%d", n, (long long)r,
                 p->nranks - 1);
      else if (seen[r]++)
        rc = bad(err, errlen, "duplicate rank %lld in node %d", (long long)r, n);
    }
  }
  for (int r = 0; r < p->nranks && rc == 0; r++)
    if (!seen[r]) rc = bad(err, errlen, "rank %d belongs to no node", r);
  for (int n = 1; n < p->nnodes && rc == 0; n++) {
    int expect = p->node_first_rank[n - 1] + p->classes[p->node_class[n - 1]].nlocal;
    if (p->node_first_rank[n] != expect)
      rc = bad(err, errlen, "node %d starts at rank %d, expected %d (node ranks must follow "
               "node order)", n, p->node_first_rank[n], expect);
  }
  free(seen);
  return rc;
}

static int check_node_order(const struct gcoll_plan *p, char *err, size_t errlen) {
  unsigned char *seen = calloc((size_t)p->nnodes, 1);
  int rc = 0;
  if (seen == NULL) return bad(err, errlen, "out of memory");
  for (int i = 0; i < p->nnodes && rc == 0; i++) {
    int n = p->ring_node_order[i];
    if (n < 0 || n >= p->nnodes)
      rc = bad(err, errlen, "ring node_order entry %d is node %d, outside 0..%d", i, n,
               p->nnodes - 1);
    else if (seen[n]++)
      rc = bad(err, errlen, "ring node_order is not a permutation: node %d appears twice", n);
  }
  free(seen);
  return rc;
}

/* Builds channel c's global next[] from the classes and the node order, as
 * the format defines it, and walks it from rank 0. */
static int check_ring(const struct gcoll_plan *p, int c, int *next, unsigned char *seen,
                      char *err, size_t errlen) {
  int s = c % (p->nchannels / 2);
  for (int i = 0; i < p->nnodes; i++) {
    int n = p->ring_node_order[i], m = p->ring_node_order[(i + 1) % p->nnodes];
    const struct gcoll_plan_class *cn = &p->classes[p->node_class[n]];
    const struct gcoll_plan_class *cm = &p->classes[p->node_class[m]];
    const int *ord = cn->graph.ch[s].ring;
    int f = p->node_first_rank[n];
    for (int j = 0; j + 1 < cn->nlocal; j++) next[f + ord[j]] = f + ord[j + 1];
    next[f + ord[cn->nlocal - 1]] = p->node_first_rank[m] + cm->graph.ch[s].ring[0];
  }
  memset(seen, 0, (size_t)p->nranks);
  int cur = 0, steps = 0;
  do {
    seen[cur] = 1;
    cur = next[cur];
    steps++;
  } while (cur != 0 && !seen[cur]);
  if (cur != 0)
    return bad(err, errlen, "ring channel %d is not one cycle: rank %d is reached twice from "
               "rank 0", c, cur);
  for (int r = 0; r < p->nranks; r++)
    if (!seen[r])
      return bad(err, errlen, "ring channel %d is not one cycle: rank %d is not reached from "
                 "rank 0", c, r);
  return steps == p->nranks ? 0 : bad(err, errlen, "ring channel %d has %d hops for %d ranks",
                                      c, steps, p->nranks);
}

static int check_rings(const struct gcoll_plan *p, char *err, size_t errlen) {
  int *next = malloc((size_t)p->nranks * sizeof(*next));
  unsigned char *seen = malloc((size_t)p->nranks);
  int rc = 0;
  if (next == NULL || seen == NULL) rc = bad(err, errlen, "out of memory");
  for (int c = 0; c < p->nchannels && rc == 0; c++) rc = check_ring(p, c, next, seen, err, errlen);
  free(next);
  free(seen);
  return rc;
}

/* Parents in range, exactly one root equal to `root`, no cycles, and at most
 * GCOLL_MAX_TREE_ARITY children per rank once the node's chain is hung below
 * its endpoint. children[] receives the node-tree child counts. */
static int check_tree_shape(const struct gcoll_plan *p, const char *name, const int *parent,
                            int root, int *children, unsigned char *state, char *err,
                            size_t errlen) {
  int nroots = 0, first_root = -1;
  memset(children, 0, (size_t)p->nnodes * sizeof(*children));
  for (int n = 0; n < p->nnodes; n++) {
    if (parent[n] < -1 || parent[n] >= p->nnodes)
      return bad(err, errlen, "tree %s: parent of node %d is %d, outside -1..%d", name, n,
                 parent[n], p->nnodes - 1);
    if (parent[n] == n) return bad(err, errlen, "tree %s: node %d is its own parent", name, n);
    if (parent[n] < 0 && nroots++ == 0) first_root = n;
    if (parent[n] >= 0) children[parent[n]]++;
  }
  if (nroots != 1)
    return bad(err, errlen, "tree %s has %d roots (nodes without a parent), expected 1", name,
               nroots);
  if (first_root != root)
    return bad(err, errlen, "tree %s: root is node %d but node %d has no parent", name, root,
               first_root);
  for (int n = 0; n < p->nnodes; n++) {
    int chain_child = p->classes[p->node_class[n]].nlocal > 1;
    if (children[n] + chain_child > GCOLL_MAX_TREE_ARITY)
      return bad(err, errlen, "tree %s: node %d has %d children, its endpoint rank would have "
                 "more than %d", name, n, children[n], GCOLL_MAX_TREE_ARITY);
  }
  /* state: 0 unknown, 1 on the current walk, 2 known to reach the root. */
  memset(state, 0, (size_t)p->nnodes);
  for (int n = 0; n < p->nnodes; n++) {
    int v = n;
    while (v >= 0 && state[v] == 0) {
      state[v] = 1;
      v = parent[v];
    }
    if (v >= 0 && state[v] == 1)
      return bad(err, errlen, "tree %s: node %d has no path to the root (cycle)", name, n);
    for (v = n; v >= 0 && state[v] == 1; v = parent[v]) state[v] = 2;
  }
  return 0;
}

/* The trees are compared with the construction (plan_domain.c: btree.c's
 * double binary tree over the nodes, or over domains and inside each), so
 * a file cannot carry trees the runtime's assumptions were not made for. */
static int check_trees(const struct gcoll_plan *p, char *err, size_t errlen) {
  int n = p->nnodes, rc = -1, root1, root2;
  int *ch1 = malloc((size_t)n * sizeof(int)), *ch2 = malloc((size_t)n * sizeof(int));
  int *want1 = malloc((size_t)n * sizeof(int)), *want2 = malloc((size_t)n * sizeof(int));
  int *in1 = calloc((size_t)n, sizeof(int)), *in2 = calloc((size_t)n, sizeof(int));
  unsigned char *state = malloc((size_t)n);
  if (!ch1 || !ch2 || !want1 || !want2 || !in1 || !in2 || !state ||
      gcoll_plan_canonical_trees(p, want1, want2, &root1, &root2) != 0) {
    bad(err, errlen, "out of memory");
    goto out;
  }
  if (p->t1_root != 0) {
    bad(err, errlen, "tree t1 is rooted at node %d, it must be rooted at node 0", p->t1_root);
    goto out;
  }
  if (check_tree_shape(p, "t1", p->t1_parent, p->t1_root, ch1, state, err, errlen) ||
      check_tree_shape(p, "t2", p->t2_parent, p->t2_root, ch2, state, err, errlen))
    goto out;
  if (n >= 2 && p->t2_construction != gcoll_dtree_construction(n)) {
    bad(err, errlen, "tree t2: construction is %s, %d nodes need %s",
        p->t2_construction == GCOLL_T2_SHIFT ? "shift" : "mirror", n,
        gcoll_dtree_construction(n) == GCOLL_T2_SHIFT ? "shift" : "mirror");
    goto out;
  }
  for (int v = 0; v < n; v++) {
    if (want1[v] >= 0) in1[want1[v]] = 1;
    if (want2[v] >= 0) in2[want2[v]] = 1;
  }
  /* Interior in both trees halves a node's send bandwidth; only the nodes
   * where the construction itself cannot avoid it may be. */
  for (int v = 0; v < n && n >= 2; v++)
    if (ch1[v] && ch2[v] && !(in1[v] && in2[v])) {
      bad(err, errlen, "node %d is interior in both trees (the double binary tree avoids it)", v);
      goto out;
    }
  for (int which = 1; which <= 2; which++) {
    const int *parent = which == 1 ? p->t1_parent : p->t2_parent;
    const int *want = which == 1 ? want1 : want2;
    for (int v = 0; v < n; v++)
      if (parent[v] != want[v]) {
        bad(err, errlen, "tree t%d: parent of node %d is %d, the double binary tree over %d "
            "nodes%s gives %d", which, v, parent[v], n,
            p->node_domain != NULL ? " and their NVLink domains" : "", want[v]);
        goto out;
      }
  }
  rc = 0;
out:
  free(ch1);
  free(ch2);
  free(want1);
  free(want2);
  free(in1);
  free(in2);
  free(state);
  return rc;
}

static int check_tuning(const struct gcoll_plan *p, char *err, size_t errlen) {
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    const char *cn = gcoll_coll_name((enum gcoll_coll)c);
    int nt = p->ntuning[c];
    if (nt < 1 || nt > GCOLL_MAX_TUNING)
      return bad(err, errlen, "tuning %s has %d rows (expected 1..%d)", cn, nt, GCOLL_MAX_TUNING);
    for (int i = 0; i < nt; i++) {
      const struct gcoll_tuning_entry *t = &p->tuning[c][i];
      if (i > 0 && t->max_bytes <= p->tuning[c][i - 1].max_bytes)
        return bad(err, errlen, "tuning %s row %d: max_bytes %llu does not increase", cn, i,
                   (unsigned long long)t->max_bytes);
      if ((i + 1 == nt) != (t->max_bytes == UINT64_MAX))
        return bad(err, errlen, "tuning %s: %s", cn,
                   i + 1 == nt ? "the last row must have no limit"
                               : "only the last row may have no limit");
      if ((unsigned)t->algo >= GCOLL_NALGOS || (unsigned)t->proto >= GCOLL_NPROTOS)
        return bad(err, errlen, "tuning %s row %d: unknown algorithm or protocol", cn, i);
      /* The runtime implements tree and NVLS only as allreduce algorithms. */
      if (t->algo != GCOLL_ALGO_RING && c != GCOLL_COLL_ALLREDUCE)
        return bad(err, errlen, "tuning %s row %d uses %s, which only allreduce supports", cn, i,
                   gcoll_algo_name(t->algo));
      if (t->nchannels < 1 || t->nchannels > p->nchannels)
        return bad(err, errlen, "tuning %s row %d: %d channels, expected 1..%d", cn, i,
                   t->nchannels, p->nchannels);
      for (int k = 0; k < p->nclasses && t->algo == GCOLL_ALGO_NVLS; k++)
        if (p->classes[k].graph.nvls_nheads == 0)
          return bad(err, errlen, "tuning %s row %d uses nvls, but class '%s' has no NVLS heads",
                     cn, i, p->classes[k].name);
    }
  }
  return 0;
}

/* The rank order, when there is one: a permutation and its inverse. */
static int check_rank_order(const struct gcoll_plan *p, char *err, size_t errlen) {
  if ((p->rank_of_slot == NULL) != (p->slot_of_rank == NULL))
    return bad(err, errlen, "rank order without its inverse");
  for (int s = 0; p->rank_of_slot != NULL && s < p->nranks; s++) {
    int r = p->rank_of_slot[s];
    if (r < 0 || r >= p->nranks || p->slot_of_rank[r] != s)
      return bad(err, errlen, "rank order: slot %d holds rank %d, which is not a rank of the plan "
                 "or is placed twice", s, r);
  }
  return 0;
}

int gcoll_plan_verify(const struct gcoll_plan *p, char *err, size_t errlen) {
  if (check_sizes(p, err, errlen) || check_rank_order(p, err, errlen)) return -1;
  for (int k = 0; k < p->nclasses; k++)
    if (check_class(p, k, err, errlen)) return -1;
  if (check_nodes(p, err, errlen) || check_node_order(p, err, errlen) ||
      check_rings(p, err, errlen) || check_trees(p, err, errlen) ||
      check_tuning(p, err, errlen))
    return -1;
  return 0;
}
