/* Properties of whole-job plans (plan_build.c, plan.c) over many job shapes:
 * node counts 1..1000, several ranks-per-node settings, every reference
 * topology and mixed-class jobs, and nodes holding different rank counts
 * (node_ranks: block placement such as 2+1). For each plan the views of all
 * ranks are assembled into global rings and trees and checked
 * independently of gcoll_plan_verify: rings are single cycles that keep
 * each node's ranks together, trees are consistent rooted spanning trees
 * that enter each node once, edge kinds follow node membership, NIC names
 * exist in the node's topology; plans with uneven nodes survive a YAML
 * round trip field for field and rank view for rank view; and bad inputs
 * are refused with a message. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/plan.h"
#include "testutil.h"

#define NREF TEST_NREF
#define ref test_ref
#define ref_names test_ref_names

static const struct gcoll_topo *ref_topo(const char *name) {
  for (int i = 0; i < NREF; i++)
    if (strcmp(ref_names[i], name) == 0) return ref[i];
  fail_msg("no reference topology %s", name);
  return NULL;
}

/* Ranks a node of topology t gets: the plan's documented default is one per
 * GPU, or one per core on CPU-only nodes. */
static int expected_nlocal(const struct gcoll_topo *t, int ranks_per_node) {
  if (ranks_per_node > 0) return ranks_per_node;
  if (t->ngpu > 0) return t->ngpu;
  long cores = 0;
  for (int s = 0; s < t->ncpu; s++) cores += t->dev[t->cpu[s]].u.cpu.cores;
  return cores < 1 ? 1 : cores > GCOLL_MAX_LOCAL_RANKS ? GCOLL_MAX_LOCAL_RANKS : (int)cores;
}

static int topo_has_nic(const struct gcoll_topo *t, const char *name) {
  for (int k = 0; k < t->nnic; k++)
    if (strcmp(t->dev[t->nic[k]].name, name) == 0) return 1;
  return 0;
}

static enum gcoll_edge intra_edge_of(const struct gcoll_topo *t) {
  return t->ngpu > 0 ? GCOLL_EDGE_P2P : GCOLL_EDGE_SHM;
}

/* ---- a job and what the plan must say about it ---------------------------- */

struct job {
  int nnodes, ranks_per_node, max_channels;
  const int *node_ranks;           /* per node, or NULL: ranks_per_node */
  const struct gcoll_topo **topo;  /* per node */
  const char **hosts;              /* per node, or NULL */
  char **host_store;
};

static void job_init(struct job *j, int nnodes, int rpn, const struct gcoll_topo *a,
                     const struct gcoll_topo *b, int named_hosts) {
  memset(j, 0, sizeof(*j));
  j->nnodes = nnodes;
  j->ranks_per_node = rpn;
  j->topo = calloc((size_t)nnodes, sizeof(*j->topo));
  assert_non_null(j->topo);
  for (int n = 0; n < nnodes; n++) j->topo[n] = (n % 2 == 1 && b != NULL) ? b : a;
  if (named_hosts) {
    j->hosts = calloc((size_t)nnodes, sizeof(*j->hosts));
    j->host_store = calloc((size_t)nnodes, sizeof(*j->host_store));
    assert_non_null(j->hosts);
    assert_non_null(j->host_store);
    for (int n = 0; n < nnodes; n++) {
      j->host_store[n] = malloc(32);
      assert_non_null(j->host_store[n]);
      snprintf(j->host_store[n], 32, "gpu-%d.cluster", 7 * n + 3);
      j->hosts[n] = j->host_store[n];
    }
  }
}

static void job_free(struct job *j) {
  if (j->host_store != NULL)
    for (int n = 0; n < j->nnodes; n++) free(j->host_store[n]);
  free(j->host_store);
  free(j->hosts);
  free(j->topo);
}

static struct gcoll_plan_input job_input(const struct job *j) {
  struct gcoll_plan_input in = {.nnodes = j->nnodes, .node_topo = j->topo, .node_host = j->hosts,
                                .ranks_per_node = j->ranks_per_node,
                                .max_channels = j->max_channels, .job_id = -1, .step_id = -1,
                                .node_ranks = j->node_ranks};
  return in;
}

/* Ranks node n of the job must get. */
static int node_nlocal(const struct job *j, int n) {
  if (j->node_ranks != NULL) return j->node_ranks[n];
  return expected_nlocal(j->topo[n], j->ranks_per_node);
}

/* The build must refuse a GPU node asked for more ranks than it has GPUs. */
static int job_feasible(const struct job *j) {
  for (int n = 0; n < j->nnodes; n++)
    if (j->topo[n]->ngpu > 0 && node_nlocal(j, n) > j->topo[n]->ngpu) return 0;
  return 1;
}

/* Searched channels the plan must use: every class searched on its own,
 * then the smallest count, since every rank runs every channel. */
static int expected_searched_channels(const struct job *j) {
  struct gcoll_intra_graph *g = malloc(sizeof(*g));
  assert_non_null(g);
  int S = GCOLL_MAX_SEARCH_CHANNELS;
  char err[256];
  const struct gcoll_topo *done[GCOLL_MAX_CLASSES];
  int done_nlocal[GCOLL_MAX_CLASSES];
  int ndone = 0;
  for (int n = 0; n < j->nnodes; n++) {
    const struct gcoll_topo *t = j->topo[n];
    int again = 0, nlocal = node_nlocal(j, n);
    for (int d = 0; d < ndone; d++) again |= done[d] == t && done_nlocal[d] == nlocal;
    if (again) continue;
    assert_true(ndone < GCOLL_MAX_CLASSES);
    done_nlocal[ndone] = nlocal;
    done[ndone++] = t;
    if (gcoll_search_intra(t, nlocal, j->nnodes > 1, j->max_channels, g, err, sizeof(err)) != 0)
      fail_msg("search %s: %s", t->name, err);
    if (g->nchannels < S) S = g->nchannels;
  }
  free(g);
  return S;
}

/* ---- checks -------------------------------------------------------------- */

static void check_nodes(const struct gcoll_plan *p, const struct job *j) {
  assert_int_equal(p->nnodes, j->nnodes);
  long long total = 0;
  for (int n = 0; n < p->nnodes; n++) {
    assert_true(p->node_class[n] >= 0 && p->node_class[n] < p->nclasses);
    const struct gcoll_plan_class *k = &p->classes[p->node_class[n]];
    assert_int_equal(k->nlocal, node_nlocal(j, n));
    assert_int_equal(k->hash, gcoll_topo_hash(j->topo[n]));
    assert_int_equal(k->intra_edge, intra_edge_of(j->topo[n]));
    assert_int_equal(p->node_first_rank[n], total);
    total += k->nlocal;
    if (j->hosts != NULL) {
      assert_string_equal(p->node_host[n], j->hosts[n]);
    } else {
      assert_non_null(p->node_host[n]);
      assert_true(strlen(p->node_host[n]) > 0);
    }
  }
  assert_int_equal(p->nranks, total);
  for (int k = 0; k < p->nclasses; k++)
    for (int m = 0; m < k; m++) assert_string_not_equal(p->classes[k].name, p->classes[m].name);
  /* One class per (topology, rank count): nodes share a class exactly when
   * both agree, and every class is used. */
  int *used = calloc((size_t)p->nclasses, sizeof(int));
  assert_non_null(used);
  for (int n = 0; n < p->nnodes; n++) used[p->node_class[n]] = 1;
  for (int k = 0; k < p->nclasses; k++) assert_true(used[k]);
  free(used);
  for (int n = 1; n < p->nnodes; n++)
    for (int m = n - 1; m >= 0 && m >= n - 8; m--) {
      int same = gcoll_topo_hash(j->topo[n]) == gcoll_topo_hash(j->topo[m]) &&
                 node_nlocal(j, n) == node_nlocal(j, m);
      assert_int_equal(p->node_class[n] == p->node_class[m], same);
    }
  /* node_of_rank agrees with the node_first_rank ranges. */
  for (int n = 0; n < p->nnodes; n++) {
    int F = p->node_first_rank[n], L = p->classes[p->node_class[n]].nlocal;
    for (int r = F; r < F + L; r++) assert_int_equal(gcoll_plan_node_of_rank(p, r), n);
  }
  assert_int_equal(gcoll_plan_node_of_rank(p, -1), -1);
  assert_int_equal(gcoll_plan_node_of_rank(p, p->nranks), -1);
  assert_int_equal(gcoll_plan_node_of_rank(p, INT_MAX), -1);
  assert_int_equal(gcoll_plan_node_of_rank(p, INT_MIN), -1);
}

static void check_node_trees(const struct gcoll_plan *p) {
  int n = p->nnodes;
  assert_int_equal(p->t2_construction, n % 2 == 0 ? GCOLL_T2_MIRROR : GCOLL_T2_SHIFT);
  assert_int_equal(p->t1_root, 0);
  assert_int_equal(p->t1_parent[0], -1);
  assert_true(p->t2_root >= 0 && p->t2_root < n);
  assert_int_equal(p->t2_parent[p->t2_root], -1);
  for (int i = 0; i < n; i++) {
    int par, c0, c1;
    gcoll_btree(n, i, &par, &c0, &c1);
    assert_int_equal(p->t1_parent[i], par);
    gcoll_dtree_t2(n, i, &par, &c0, &c1);
    assert_int_equal(p->t2_parent[i], par);
  }
  int *order_seen = calloc((size_t)(unsigned)n, sizeof(int));
  assert_non_null(order_seen);
  for (int i = 0; i < n; i++) {
    assert_true(p->ring_node_order[i] >= 0 && p->ring_node_order[i] < n);
    assert_int_equal(order_seen[p->ring_node_order[i]]++, 0);
  }
  free(order_seen);
}

/* Per rank, per channel: what the views say. */
struct links {
  int nranks, nch;
  int *next, *prev, *parent, *nkids, *kids;  /* [rank * nch + c], kids x3 */
};

static int at(const struct links *l, int r, int c) { return r * l->nch + c; }

static void links_alloc(struct links *l, int nranks, int nch) {
  l->nranks = nranks;
  l->nch = nch;
  size_t m = (size_t)nranks * (size_t)nch;
  l->next = malloc(m * sizeof(int));
  l->prev = malloc(m * sizeof(int));
  l->parent = malloc(m * sizeof(int));
  l->nkids = malloc(m * sizeof(int));
  l->kids = malloc(3 * m * sizeof(int));
  assert_true(l->next && l->prev && l->parent && l->nkids && l->kids);
}

static void links_free(struct links *l) {
  free(l->next);
  free(l->prev);
  free(l->parent);
  free(l->nkids);
  free(l->kids);
}

static enum gcoll_edge expected_edge(const struct gcoll_plan *p, const struct job *j, int r, int peer) {
  int a = gcoll_plan_node_of_rank(p, r), b = gcoll_plan_node_of_rank(p, peer);
  assert_true(a >= 0 && b >= 0);
  return a == b ? intra_edge_of(j->topo[a]) : GCOLL_EDGE_NET;
}

static void assert_nic_name(const struct gcoll_topo *t, const char *name) {
  if (!topo_has_nic(t, name)) fail_msg("NIC '%s' is not in topology %s", name, t->name);
}

/* One rank's view, checked on its own and recorded into l. */
static void check_view(const struct gcoll_plan *p, const struct job *j, int r,
                       struct gcoll_rank_view *v, struct links *l) {
  char err[256];
  if (gcoll_plan_rank_view(p, r, v, err, sizeof(err)) != 0) fail_msg("rank %d: %s", r, err);
  int node = gcoll_plan_node_of_rank(p, r);
  const struct gcoll_topo *t = j->topo[node];
  const struct gcoll_plan_class *k = &p->classes[p->node_class[node]];
  int S = p->nchannels / 2;
  assert_int_equal(v->rank, r);
  assert_int_equal(v->nranks, p->nranks);
  assert_int_equal(v->node, node);
  assert_int_equal(v->nnodes, p->nnodes);
  assert_int_equal(v->local_rank, r - p->node_first_rank[node]);
  assert_int_equal(v->local_nranks, k->nlocal);
  assert_string_equal(v->host, p->node_host[node]);
  assert_string_equal(v->topology, k->name);
  assert_int_equal(v->topology_hash, gcoll_topo_hash(t));
  assert_int_equal(v->nchannels, p->nchannels);
  for (int c = 0; c < v->nchannels; c++) {
    const struct gcoll_ring_link *rl = &v->ring[c];
    assert_true(rl->prev >= 0 && rl->prev < p->nranks);
    assert_true(rl->next >= 0 && rl->next < p->nranks);
    if (p->nranks == 1) {
      assert_int_equal(rl->prev, r);
      assert_int_equal(rl->next, r);
      assert_int_equal(rl->prev_edge, GCOLL_EDGE_SELF);
      assert_int_equal(rl->next_edge, GCOLL_EDGE_SELF);
    } else {
      assert_int_not_equal(rl->prev, r);
      assert_int_not_equal(rl->next, r);
      assert_int_equal(rl->prev_edge, expected_edge(p, j, r, rl->prev));
      assert_int_equal(rl->next_edge, expected_edge(p, j, r, rl->next));
    }
    if (p->nnodes == 1) {
      assert_string_equal(rl->nic_in, "");
      assert_string_equal(rl->nic_out, "");
    }
    if (rl->nic_in[0]) assert_nic_name(t, rl->nic_in);
    if (rl->nic_out[0]) assert_nic_name(t, rl->nic_out);
    if (rl->prev_edge == GCOLL_EDGE_NET && t->nnic > 0) assert_nic_name(t, rl->nic_in);
    if (rl->next_edge == GCOLL_EDGE_NET && t->nnic > 0) assert_nic_name(t, rl->nic_out);
    l->next[at(l, r, c)] = rl->next;
    l->prev[at(l, r, c)] = rl->prev;

    const struct gcoll_tree_link *tl = &v->tree[c];
    assert_int_equal(tl->tree, c < S ? 1 : 2);
    assert_true(tl->parent >= -1 && tl->parent < p->nranks);
    assert_true(tl->nchildren >= 0 && tl->nchildren <= GCOLL_MAX_TREE_ARITY);
    int net = 0;
    if (tl->parent >= 0) {
      assert_int_not_equal(tl->parent, r);
      assert_int_equal(tl->parent_edge, expected_edge(p, j, r, tl->parent));
      net |= tl->parent_edge == GCOLL_EDGE_NET;
    }
    for (int i = 0; i < tl->nchildren; i++) {
      int ch = tl->children[i];
      assert_true(ch >= 0 && ch < p->nranks && ch != r);
      for (int m = 0; m < i; m++) assert_int_not_equal(tl->children[m], ch);
      assert_int_equal(tl->child_edge[i], expected_edge(p, j, r, ch));
      net |= tl->child_edge[i] == GCOLL_EDGE_NET;
      l->kids[3 * at(l, r, c) + i] = ch;
    }
    if (tl->nic[0]) assert_nic_name(t, tl->nic);
    if (net && t->nnic > 0) assert_nic_name(t, tl->nic);
    l->parent[at(l, r, c)] = tl->parent;
    l->nkids[at(l, r, c)] = tl->nchildren;
  }
}

/* Each channel's ring keeps every node's ranks in one run, and the runs
 * follow ring.node_order (cyclically): walking the ring from rank 0, the
 * node changes exactly nnodes times (once per node, when there are several),
 * each time to the node after it in node_order. */
static void check_ring_node_runs(const struct gcoll_plan *p, const struct links *l) {
  int *pos = malloc((size_t)p->nnodes * sizeof(int));
  assert_non_null(pos);
  for (int i = 0; i < p->nnodes; i++) pos[p->ring_node_order[i]] = i;
  for (int c = 0; c < l->nch; c++) {
    int r = 0, changes = 0;
    for (int step = 0; step < l->nranks; step++) {
      int nx = l->next[at(l, r, c)];
      int a = gcoll_plan_node_of_rank(p, r), b = gcoll_plan_node_of_rank(p, nx);
      if (a != b) {
        changes++;
        if (pos[b] != (pos[a] + 1) % p->nnodes)
          fail_msg("channel %d: ring goes from node %d to node %d, not the next in node_order", c,
                   a, b);
      }
      r = nx;
    }
    if (changes != (p->nnodes > 1 ? p->nnodes : 0))
      fail_msg("channel %d: ring changes node %d times over %d nodes: some node's ranks are "
               "split", c, changes, p->nnodes);
  }
  free(pos);
}

/* Each channel's tree enters every node once: exactly one rank of each node
 * has its parent outside the node (or is the root), so the node's ranks
 * hang below it as one chain of the node's own length. */
static void check_tree_node_entries(const struct gcoll_plan *p, const struct links *l) {
  int *entries = malloc((size_t)p->nnodes * sizeof(int));
  assert_non_null(entries);
  for (int c = 0; c < l->nch; c++) {
    memset(entries, 0, (size_t)p->nnodes * sizeof(int));
    for (int r = 0; r < l->nranks; r++) {
      int par = l->parent[at(l, r, c)], node = gcoll_plan_node_of_rank(p, r);
      if (par < 0 || gcoll_plan_node_of_rank(p, par) != node) entries[node]++;
      /* Inside a node the tree is a chain: at most one child there. */
      int inside = 0;
      for (int i = 0; i < l->nkids[at(l, r, c)]; i++)
        inside += gcoll_plan_node_of_rank(p, l->kids[3 * at(l, r, c) + i]) == node;
      assert_true(inside <= 1);
    }
    for (int n = 0; n < p->nnodes; n++)
      if (entries[n] != 1) fail_msg("channel %d: the tree enters node %d %d times", c, n, entries[n]);
  }
  free(entries);
}

/* Over all ranks, each channel's ring is one cycle through every rank. */
static void check_global_rings(const struct links *l) {
  size_t nr = (unsigned)l->nranks;
  unsigned char *seen = malloc(nr);
  assert_non_null(seen);
  for (int c = 0; c < l->nch; c++) {
    for (int r = 0; r < l->nranks; r++) {
      assert_int_equal(l->prev[at(l, l->next[at(l, r, c)], c)], r);
      assert_int_equal(l->next[at(l, l->prev[at(l, r, c)], c)], r);
    }
    memset(seen, 0, nr);
    int r = 0;
    for (int step = 0; step < l->nranks; step++) {
      assert_false(seen[r]);
      seen[r] = 1;
      r = l->next[at(l, r, c)];
    }
    assert_int_equal(r, 0);
  }
  free(seen);
}

/* Over all ranks, each channel's tree: children lists match parent
 * pointers, one root, every rank reaches it; the root sits on the node the
 * channel's node tree is rooted at. */
static void check_global_trees(const struct gcoll_plan *p, const struct links *l) {
  int n = l->nranks, S = l->nch / 2;
  int *count = malloc((size_t)n * sizeof(int)), *state = malloc((size_t)n * sizeof(int));
  int *stack = malloc((size_t)n * sizeof(int));
  assert_true(count && state && stack);
  for (int c = 0; c < l->nch; c++) {
    memset(count, 0, (size_t)n * sizeof(int));
    int root = -1;
    for (int r = 0; r < n; r++) {
      int par = l->parent[at(l, r, c)];
      if (par < 0) {
        assert_int_equal(root, -1);
        root = r;
      } else {
        count[par]++;
        int listed = 0;
        for (int i = 0; i < l->nkids[at(l, par, c)]; i++) listed |= l->kids[3 * at(l, par, c) + i] == r;
        assert_true(listed);
      }
      for (int i = 0; i < l->nkids[at(l, r, c)]; i++)
        assert_int_equal(l->parent[at(l, l->kids[3 * at(l, r, c) + i], c)], r);
    }
    assert_true(root >= 0);
    assert_int_equal(gcoll_plan_node_of_rank(p, root), c < S ? p->t1_root : p->t2_root);
    for (int r = 0; r < n; r++) assert_int_equal(count[r], l->nkids[at(l, r, c)]);
    /* Reachability without cycles: 0 unknown, 1 on the current walk, 2 reaches the root. */
    memset(state, 0, (size_t)n * sizeof(int));
    state[root] = 2;
    for (int r = 0; r < n; r++) {
      int top = 0, x = r;
      while (state[x] == 0) {
        state[x] = 1;
        stack[top++] = x;
        x = l->parent[at(l, x, c)];
        assert_true(x >= 0); /* only the root has no parent */
      }
      assert_int_equal(state[x], 2); /* 1 would be a cycle */
      while (top > 0) state[stack[--top]] = 2;
    }
  }
  free(count);
  free(state);
  free(stack);
}

static void check_plan(const struct gcoll_plan *p, const struct job *j) {
  char err[512];
  if (gcoll_plan_verify(p, err, sizeof(err)) != 0) fail_msg("verify: %s", err);
  check_nodes(p, j);
  check_node_trees(p);
  int S = expected_searched_channels(j);
  assert_int_equal(p->nchannels, 2 * S);
  for (int k = 0; k < p->nclasses; k++) assert_int_equal(p->classes[k].graph.nchannels, S);
  struct links l;
  links_alloc(&l, p->nranks, p->nchannels);
  struct gcoll_rank_view *v = malloc(sizeof(*v));
  assert_non_null(v);
  for (int r = 0; r < p->nranks; r++) check_view(p, j, r, v, &l);
  free(v);
  check_global_rings(&l);
  check_ring_node_runs(p, &l);
  check_global_trees(p, &l);
  check_tree_node_entries(p, &l);
  links_free(&l);
}

/* ---- YAML round trip ------------------------------------------------------ */

static void assert_same_plan(const struct gcoll_plan *a, const struct gcoll_plan *b) {
  assert_int_equal(a->nranks, b->nranks);
  assert_int_equal(a->nnodes, b->nnodes);
  assert_int_equal(a->nchannels, b->nchannels);
  assert_int_equal(a->nclasses, b->nclasses);
  int S = a->nchannels / 2;
  for (int k = 0; k < a->nclasses; k++) {
    const struct gcoll_plan_class *x = &a->classes[k], *y = &b->classes[k];
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->hash, y->hash);
    assert_int_equal(x->nlocal, y->nlocal);
    assert_int_equal(x->intra_edge, y->intra_edge);
    assert_int_equal(x->graph.nchannels, y->graph.nchannels);
    assert_int_equal(x->graph.nvls_nheads, y->graph.nvls_nheads);
    for (int h = 0; h < x->graph.nvls_nheads; h++)
      assert_int_equal(x->graph.nvls_heads[h], y->graph.nvls_heads[h]);
    for (int s = 0; s < S; s++) {
      const struct gcoll_intra_channel *cx = &x->graph.ch[s], *cy = &y->graph.ch[s];
      assert_memory_equal(cx->ring, cy->ring, (size_t)x->nlocal * sizeof(int));
      assert_memory_equal(cx->chain, cy->chain, (size_t)x->nlocal * sizeof(int));
      assert_string_equal(cx->ring_nic_in_name, cy->ring_nic_in_name);
      assert_string_equal(cx->ring_nic_out_name, cy->ring_nic_out_name);
      assert_string_equal(cx->chain_nic_name, cy->chain_nic_name);
    }
  }
  size_t nb = (size_t)a->nnodes * sizeof(int);
  assert_memory_equal(a->node_class, b->node_class, nb);
  assert_memory_equal(a->node_first_rank, b->node_first_rank, nb);
  assert_memory_equal(a->ring_node_order, b->ring_node_order, nb);
  assert_memory_equal(a->t1_parent, b->t1_parent, nb);
  assert_memory_equal(a->t2_parent, b->t2_parent, nb);
  assert_int_equal(a->t1_root, b->t1_root);
  assert_int_equal(a->t2_root, b->t2_root);
  assert_int_equal(a->t2_construction, b->t2_construction);
  for (int n = 0; n < a->nnodes; n++) assert_string_equal(a->node_host[n], b->node_host[n]);
  assert_memory_equal(a->ntuning, b->ntuning, sizeof(a->ntuning));
  for (int c = 0; c < GCOLL_NCOLLS; c++)
    for (int i = 0; i < a->ntuning[c]; i++) {
      assert_int_equal(a->tuning[c][i].max_bytes, b->tuning[c][i].max_bytes);
      assert_int_equal(a->tuning[c][i].algo, b->tuning[c][i].algo);
      assert_int_equal(a->tuning[c][i].proto, b->tuning[c][i].proto);
      assert_int_equal(a->tuning[c][i].nchannels, b->tuning[c][i].nchannels);
    }
}

static void assert_same_view(const struct gcoll_rank_view *x, const struct gcoll_rank_view *y) {
  assert_int_equal(x->rank, y->rank);
  assert_int_equal(x->node, y->node);
  assert_int_equal(x->local_rank, y->local_rank);
  assert_int_equal(x->local_nranks, y->local_nranks);
  assert_string_equal(x->host, y->host);
  assert_string_equal(x->topology, y->topology);
  assert_int_equal(x->nchannels, y->nchannels);
  for (int c = 0; c < x->nchannels; c++) {
    assert_int_equal(x->ring[c].prev, y->ring[c].prev);
    assert_int_equal(x->ring[c].next, y->ring[c].next);
    assert_int_equal(x->ring[c].prev_edge, y->ring[c].prev_edge);
    assert_int_equal(x->ring[c].next_edge, y->ring[c].next_edge);
    assert_int_equal(x->tree[c].parent, y->tree[c].parent);
    assert_int_equal(x->tree[c].nchildren, y->tree[c].nchildren);
    for (int i = 0; i < x->tree[c].nchildren; i++)
      assert_int_equal(x->tree[c].children[i], y->tree[c].children[i]);
  }
}

/* Written and read back (in memory, and one rank at a time from a file as
 * every rank loads it), the plan is the same plan. */
static void check_round_trip(const struct gcoll_plan *p) {
  char err[512] = "", *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  if (gcoll_plan_write_stream(p, f, err, sizeof(err)) != 0) fail_msg("write: %s", err);
  assert_int_equal(fclose(f), 0);
  struct gcoll_plan *q = gcoll_plan_read_mem(buf, len, "plan.yaml", err, sizeof(err));
  if (q == NULL) fail_msg("read back: %s", err);
  if (gcoll_plan_verify(q, err, sizeof(err)) != 0) fail_msg("verify after read: %s", err);
  assert_same_plan(p, q);

  char path[] = "/tmp/test_plan.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, len), (ssize_t)len);
  assert_int_equal(close(fd), 0);
  struct gcoll_rank_view *v = malloc(sizeof(*v)), *w = malloc(sizeof(*w));
  assert_true(v && w);
  /* Every rank of small plans; the first and last of each node otherwise. */
  for (int n = 0; n < p->nnodes; n++) {
    int F = p->node_first_rank[n], L = p->classes[p->node_class[n]].nlocal;
    for (int r = F; r < F + L; r += (p->nranks <= 64 || r + 1 == F + L) ? 1 : L - 1) {
      if (gcoll_plan_rank_view(q, r, v, err, sizeof(err)) != 0) fail_msg("rank %d: %s", r, err);
      if (gcoll_plan_load_rank_view(path, r, w, err, sizeof(err)) != 0)
        fail_msg("file view of rank %d: %s", r, err);
      assert_same_view(v, w);
      if (gcoll_plan_rank_view(p, r, w, err, sizeof(err)) != 0) fail_msg("rank %d: %s", r, err);
      assert_same_view(v, w);
    }
    if (p->nnodes > 64 && n == 8) n = p->nnodes - 9;  /* the ends of long jobs */
  }
  unlink(path);
  free(v);
  free(w);
  gcoll_plan_free(q);
  free(buf);
}

/* Builds the job and checks it, or checks that it is refused when a GPU
 * node is asked for more ranks than GPUs. */
static void build_and_check(struct job *j) {
  char err[512] = "";
  struct gcoll_plan_input in = job_input(j);
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (!job_feasible(j)) {
    assert_null(p);
    assert_true(strlen(err) > 0);
    return;
  }
  if (p == NULL) fail_msg("%d nodes of %s, %d ranks/node: %s", j->nnodes, j->topo[0]->name,
                          j->ranks_per_node, err);
  check_plan(p, j);
  if (j->node_ranks != NULL) check_round_trip(p);
  gcoll_plan_free(p);
}

/* ---- tests -------------------------------------------------------------- */

static const int node_counts[] = {1, 2, 3, 5, 8, 13, 64, 1000};
static const int rpns[] = {0, 1, 3, 8};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void run_shapes(const char *a, const char *b) {
  for (int i = 0; i < NELEM(node_counts); i++)
    for (int k = 0; k < NELEM(rpns); k++) {
      struct job j;
      job_init(&j, node_counts[i], rpns[k], ref_topo(a), b ? ref_topo(b) : NULL, (i + k) % 2);
      build_and_check(&j);
      job_free(&j);
    }
}

static void test_dgx_h100(void **state) { (void)state; run_shapes("dgx-h100", NULL); }
static void test_dgx_a100(void **state) { (void)state; run_shapes("dgx-a100", NULL); }
static void test_pcie(void **state) { (void)state; run_shapes("pcie-2s-4gpu", NULL); }
static void test_cpu_only(void **state) { (void)state; run_shapes("cpu-only", NULL); }
static void test_mixed_h100_a100(void **state) { (void)state; run_shapes("dgx-h100", "dgx-a100"); }
static void test_mixed_h100_pcie(void **state) { (void)state; run_shapes("dgx-h100", "pcie-2s-4gpu"); }
static void test_mixed_pcie_cpu(void **state) { (void)state; run_shapes("pcie-2s-4gpu", "cpu-only"); }
static void test_mixed_cpu_a100(void **state) { (void)state; run_shapes("cpu-only", "dgx-a100"); }

static void test_channel_limits(void **state) {
  (void)state;
  static const int limits[] = {1, 2, 3, GCOLL_MAX_SEARCH_CHANNELS};
  for (int t = 0; t < NREF; t++)
    for (int i = 0; i < NELEM(limits); i++)
      for (int nn = 1; nn <= 3; nn++) {
        struct job j;
        job_init(&j, nn, 0, ref[t], ref[(t + 1) % NREF], 0);
        j.max_channels = limits[i];
        build_and_check(&j);
        job_free(&j);
      }
}

/* Nodes whose topologies share a name but differ in content are distinct
 * classes with distinct names; one more than the class limit is refused. */
static void test_many_classes(void **state) {
  (void)state;
  struct gcoll_topo *topos[GCOLL_MAX_CLASSES + 1];
  char err[512];
  for (int i = 0; i <= GCOLL_MAX_CLASSES; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/cpu-only.yaml", test_topo_dir());
    topos[i] = gcoll_topo_read_file(path, err, sizeof(err));
    assert_non_null(topos[i]);
    topos[i]->dev[topos[i]->cpu[0]].u.cpu.cores = 1 + i % 5;
    topos[i]->dev[topos[i]->nic[0]].u.nic.gbps = 10.0 * (1 + i);
    assert_int_equal(gcoll_topo_compute_paths(topos[i], err, sizeof(err)), 0);
  }
  struct job j;
  job_init(&j, GCOLL_MAX_CLASSES, 0, topos[0], NULL, 0);
  for (int n = 0; n < GCOLL_MAX_CLASSES; n++) j.topo[n] = topos[n];
  struct gcoll_plan_input in = job_input(&j);
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  assert_int_equal(p->nclasses, GCOLL_MAX_CLASSES);
  check_plan(p, &j);
  gcoll_plan_free(p);
  job_free(&j);

  job_init(&j, GCOLL_MAX_CLASSES + 1, 0, topos[0], NULL, 0);
  for (int n = 0; n <= GCOLL_MAX_CLASSES; n++) j.topo[n] = topos[n];
  in = job_input(&j);
  err[0] = '\0';
  assert_null(gcoll_plan_build(&in, err, sizeof(err)));
  assert_true(strlen(err) > 0);
  job_free(&j);
  for (int i = 0; i <= GCOLL_MAX_CLASSES; i++) gcoll_topo_free(topos[i]);
}

static void expect_refused(const struct gcoll_plan_input *in) {
  char err[512] = "";
  struct gcoll_plan *p = gcoll_plan_build(in, err, sizeof(err));
  if (p != NULL) {
    gcoll_plan_free(p);
    fail_msg("bad input accepted");
  }
  assert_true(strlen(err) > 0);
  assert_null(strchr(err, '\n'));
}

static void test_bad_inputs(void **state) {
  (void)state;
  struct job j;
  job_init(&j, 4, 0, ref_topo("dgx-h100"), ref_topo("cpu-only"), 1);
  struct gcoll_plan_input in;

  expect_refused(NULL);
  in = job_input(&j);
  in.node_topo = NULL;
  expect_refused(&in);
  static const int bad_nodes[] = {0, -1, INT_MIN, GCOLL_MAX_NODES + 1};
  for (int i = 0; i < NELEM(bad_nodes); i++) {
    in = job_input(&j);
    in.nnodes = bad_nodes[i];
    expect_refused(&in);
  }
  static const int bad_rpn[] = {-1, INT_MIN, GCOLL_MAX_LOCAL_RANKS + 1, INT_MAX};
  for (int i = 0; i < NELEM(bad_rpn); i++) {
    in = job_input(&j);
    in.ranks_per_node = bad_rpn[i];
    expect_refused(&in);
  }
  in = job_input(&j);
  in.ranks_per_node = ref_topo("dgx-h100")->ngpu + 1; /* more ranks than GPUs */
  expect_refused(&in);
  static const int bad_ch[] = {-1, GCOLL_MAX_SEARCH_CHANNELS + 1, INT_MAX};
  for (int i = 0; i < NELEM(bad_ch); i++) {
    in = job_input(&j);
    in.max_channels = bad_ch[i];
    expect_refused(&in);
  }
  /* A node without a topology. */
  const struct gcoll_topo *saved = j.topo[2];
  j.topo[2] = NULL;
  in = job_input(&j);
  expect_refused(&in);
  j.topo[2] = saved;
  /* Host names: empty and too long. */
  const char *saved_host = j.hosts[1];
  j.hosts[1] = "";
  in = job_input(&j);
  expect_refused(&in);
  char *long_host = malloc(GCOLL_PLAN_HOST_MAX + 10);
  assert_non_null(long_host);
  memset(long_host, 'h', GCOLL_PLAN_HOST_MAX + 9);
  long_host[GCOLL_PLAN_HOST_MAX + 9] = '\0';
  j.hosts[1] = long_host;
  in = job_input(&j);
  expect_refused(&in);
  j.hosts[1] = saved_host;
  free(long_host);
  /* Still buildable once repaired. */
  build_and_check(&j);
  job_free(&j);
}

/* ---- nodes with different rank counts ------------------------------------ */

/* Slurm's block distribution, as gcollrun --nodes uses: the first
 * nranks mod nnodes nodes hold one rank more. */
static void block_layout(int nranks, int nnodes, int *out) {
  for (int i = 0; i < nnodes; i++) out[i] = nranks / nnodes + (i < nranks % nnodes);
}

static void run_layout(const struct gcoll_topo *a, const struct gcoll_topo *b, const int *counts,
                       int nnodes, int named_hosts) {
  struct job j;
  job_init(&j, nnodes, 0, a, b, named_hosts);
  j.node_ranks = counts;
  build_and_check(&j);
  job_free(&j);
}

static void test_uneven_cpu(void **state) {
  (void)state;
  static const int l21[] = {2, 1}, l312[] = {3, 1, 2}, l114[] = {1, 1, 4}, l5[] = {5}, l1[] = {1},
                   l12[] = {1, 2}, l212121[] = {2, 1, 2, 1, 2, 1}, l1413[] = {1, 4, 1, 3};
  static const struct { const int *v; int n; } layouts[] = {
      {l21, 2}, {l312, 3}, {l114, 3}, {l5, 1}, {l1, 1}, {l12, 2}, {l212121, 6}, {l1413, 4}};
  const struct gcoll_topo *cpu = ref_topo("cpu-only");
  for (int i = 0; i < NELEM(layouts); i++) {
    run_layout(cpu, NULL, layouts[i].v, layouts[i].n, i % 2);
    for (int c = 1; c <= 2; c++) {  /* channel limits change the searched count */
      struct job j;
      job_init(&j, layouts[i].n, 0, cpu, NULL, 0);
      j.node_ranks = layouts[i].v;
      j.max_channels = c;
      build_and_check(&j);
      job_free(&j);
    }
  }
  /* Every block split gcollrun can make of up to 12 ranks. */
  int counts[12];
  for (int n = 1; n <= 12; n++)
    for (int k = 1; k <= n; k++) {
      block_layout(n, k, counts);
      run_layout(cpu, NULL, counts, k, 0);
    }
}

/* Many nodes, counts varying irregularly (five classes of one topology),
 * and long runs of equal counts between changes. */
static void test_uneven_many_nodes(void **state) {
  (void)state;
  static const int sizes[] = {7, 64, 333, 1000};
  const struct gcoll_topo *cpu = ref_topo("cpu-only");
  for (int i = 0; i < NELEM(sizes); i++) {
    int n = sizes[i];
    int *counts = malloc((size_t)n * sizeof(int));
    assert_non_null(counts);
    for (int m = 0; m < n; m++) counts[m] = 1 + (m * 7 + m / 3) % 5;
    run_layout(cpu, NULL, counts, n, i % 2);
    for (int m = 0; m < n; m++) counts[m] = m < n / 3 ? 4 : m < n / 2 ? 1 : 2;
    run_layout(cpu, NULL, counts, n, 0);
    block_layout(3 * n + n / 2 + 1, n, counts);
    run_layout(cpu, ref_topo("pcie-2s-4gpu"), counts, n, 1);
    free(counts);
  }
}

/* GPU nodes with fewer ranks than GPUs, mixed with other topologies; more
 * ranks than a node's GPUs is refused even when only that node has them. */
static void test_uneven_gpu(void **state) {
  (void)state;
  static const int h[] = {8, 3, 1, 8, 5, 2}, pc[] = {4, 2, 3, 1, 4}, mixed[] = {8, 2, 4, 3, 1, 6},
                   a[] = {7, 8}, too_many[] = {8, 9}, too_many_pcie[] = {4, 4, 4, 5};
  run_layout(ref_topo("dgx-h100"), NULL, h, 6, 1);
  run_layout(ref_topo("pcie-2s-4gpu"), NULL, pc, 5, 0);
  run_layout(ref_topo("dgx-h100"), ref_topo("cpu-only"), mixed, 6, 0);
  run_layout(ref_topo("dgx-a100"), ref_topo("dgx-h100"), mixed, 6, 1);
  run_layout(ref_topo("dgx-a100"), NULL, a, 2, 0);
  run_layout(ref_topo("dgx-h100"), NULL, too_many, 2, 0);        /* refused */
  run_layout(ref_topo("pcie-2s-4gpu"), NULL, too_many_pcie, 4, 0); /* refused */
}

/* The classes of a few layouts, spelled out. */
static void test_uneven_classes(void **state) {
  (void)state;
  char err[512] = "";
  const struct gcoll_topo *cpu = ref_topo("cpu-only");
  struct job j;
  static const int alt[] = {2, 1, 2, 1};
  job_init(&j, 4, 0, cpu, NULL, 0);
  j.node_ranks = alt;
  struct gcoll_plan_input in = job_input(&j);
  struct gcoll_plan *p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  assert_int_equal(p->nranks, 6);
  assert_int_equal(p->nclasses, 2);
  assert_string_equal(p->classes[0].name, "cpu-only");
  assert_string_equal(p->classes[1].name, "cpu-only-2");
  assert_int_equal(p->classes[0].nlocal, 2);
  assert_int_equal(p->classes[1].nlocal, 1);
  assert_int_equal(p->classes[0].hash, p->classes[1].hash);
  static const int want_class[] = {0, 1, 0, 1}, want_first[] = {0, 2, 3, 5};
  assert_memory_equal(p->node_class, want_class, sizeof(want_class));
  assert_memory_equal(p->node_first_rank, want_first, sizeof(want_first));
  int ring[6];
  assert_int_equal(gcoll_plan_ring_ranks(p, 0, ring), 0);
  static const int want_ring[] = {0, 1, 2, 3, 4, 5};
  assert_memory_equal(ring, want_ring, sizeof(want_ring));
  gcoll_plan_free(p);
  job_free(&j);

  /* node_ranks overrides ranks_per_node. */
  static const int one_two[] = {1, 2};
  job_init(&j, 2, 4, cpu, NULL, 0);
  j.node_ranks = one_two;
  build_and_check(&j);
  in = job_input(&j);
  p = gcoll_plan_build(&in, err, sizeof(err));
  assert_non_null(p);
  assert_int_equal(p->nranks, 3);
  gcoll_plan_free(p);
  job_free(&j);

  /* 64 distinct counts are 64 classes; a 65th is refused. */
  int counts[GCOLL_MAX_CLASSES + 1];
  for (int i = 0; i <= GCOLL_MAX_CLASSES; i++) counts[i] = 1 + (i * 37) % (GCOLL_MAX_CLASSES + 1);
  job_init(&j, GCOLL_MAX_CLASSES, 0, cpu, NULL, 0);
  j.node_ranks = counts;
  in = job_input(&j);
  p = gcoll_plan_build(&in, err, sizeof(err));
  if (p == NULL) fail_msg("%s", err);
  assert_int_equal(p->nclasses, GCOLL_MAX_CLASSES);
  check_plan(p, &j);
  gcoll_plan_free(p);
  job_free(&j);
  job_init(&j, GCOLL_MAX_CLASSES + 1, 0, cpu, NULL, 0);
  j.node_ranks = counts;
  in = job_input(&j);
  expect_refused(&in);
  job_free(&j);
}

static void test_uneven_bad_inputs(void **state) {
  (void)state;
  struct job j;
  int counts[4] = {2, 1, 3, 1};
  job_init(&j, 4, 0, ref_topo("dgx-h100"), ref_topo("cpu-only"), 1);
  j.node_ranks = counts;
  struct gcoll_plan_input in;
  static const int bad[] = {0, -1, INT_MIN, GCOLL_MAX_LOCAL_RANKS + 1, INT_MAX};
  for (int i = 0; i < NELEM(bad); i++) {
    counts[2] = bad[i];
    in = job_input(&j);
    char err[512] = "";
    assert_null(gcoll_plan_build(&in, err, sizeof(err)));
    if (strstr(err, "node 2") == NULL) fail_msg("count %d: message does not name node 2: %s",
                                                bad[i], err);
  }
  counts[2] = 9;  /* node 2 is a dgx-h100: 8 GPUs */
  in = job_input(&j);
  char err[512] = "";
  assert_null(gcoll_plan_build(&in, err, sizeof(err)));
  if (strstr(err, "node 2") == NULL || strstr(err, "GPUs") == NULL)
    fail_msg("9 ranks on 8 GPUs: %s", err);
  counts[2] = 8;
  counts[1] = GCOLL_MAX_LOCAL_RANKS;  /* a CPU node may take the most */
  build_and_check(&j);
  job_free(&j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dgx_h100),
      cmocka_unit_test(test_dgx_a100),
      cmocka_unit_test(test_pcie),
      cmocka_unit_test(test_cpu_only),
      cmocka_unit_test(test_mixed_h100_a100),
      cmocka_unit_test(test_mixed_h100_pcie),
      cmocka_unit_test(test_mixed_pcie_cpu),
      cmocka_unit_test(test_mixed_cpu_a100),
      cmocka_unit_test(test_channel_limits),
      cmocka_unit_test(test_many_classes),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_uneven_cpu),
      cmocka_unit_test(test_uneven_many_nodes),
      cmocka_unit_test(test_uneven_gpu),
      cmocka_unit_test(test_uneven_classes),
      cmocka_unit_test(test_uneven_bad_inputs),
  };
  return cmocka_run_group_tests(tests, test_ref_load, test_ref_free);
}
