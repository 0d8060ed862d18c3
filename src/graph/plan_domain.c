/* Multi-node NVLink domains in the plan (GB200/GB300 NVL72: 18 trays of 4
 * GPUs on one NVLink fabric).
 *
 * Inside a domain a tray reaches the others' GPUs over NVLink at many
 * times its NICs' rate, so the plan treats the edges between its nodes as
 * p2p and keeps the network for traffic between domains:
 *  - the ring visits each domain's nodes together, so it crosses the
 *    network once per domain (twice in all for two domains: once each way);
 *  - each tree of the double binary tree is built over domains, with the
 *    same construction inside each domain: a domain's nodes form the tree
 *    btree.c builds for their count (T1; T2 mirrored or shifted), entered at
 *    that tree's root, and the domains below hang from one of its leaves.
 *    A leaf has no children inside the domain, so its two children across
 *    domains keep every node within the arity limit. Per tree, exactly
 *    (domains - 1) edges cross the network.
 * A node in no domain is a domain of its own, so a plan without domains
 * gets exactly btree.c's trees over its nodes. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gcoll_plan_set_domains(struct gcoll_plan *p, const int *node_domain, char *err,
                           size_t errlen) {
  free(p->node_domain);
  p->node_domain = NULL;
  int any = 0;
  for (int n = 0; node_domain != NULL && n < p->nnodes && !any; n++) any = node_domain[n] >= 0;
  if (!any) return 0;
  int *out = malloc((size_t)p->nnodes * sizeof(int));
  int *first = malloc((size_t)p->nnodes * sizeof(int));   /* renumbered value -> its input */
  if (out == NULL || first == NULL) {
    free(out);
    free(first);
    snprintf(err, errlen, "out of memory for the domains of %d nodes", p->nnodes);
    return -1;
  }
  /* Renumbering by first appearance makes equal inputs write equal plans;
   * the search is linear in the domains seen so far, and a job has few
   * (72-GPU domains: nodes / 18). A node's own value usually equals its
   * predecessor's, which is checked first. */
  int ndom = 0;
  for (int n = 0; n < p->nnodes; n++) {
    int v = node_domain[n], k = -1;
    if (v < 0) {
      out[n] = -1;
      continue;
    }
    if (n > 0 && node_domain[n - 1] == v) k = out[n - 1];
    for (int j = ndom - 1; k < 0 && j >= 0; j--)
      if (first[j] == v) k = j;
    if (k < 0) {
      first[ndom] = v;
      k = ndom++;
    }
    out[n] = k;
  }
  free(first);
  p->node_domain = out;
  return 0;
}

int *gcoll_plan_domains_of_topos(const struct gcoll_topo *const *node_topo, int nnodes,
                                 int *none) {
  int any = 0;
  *none = 0;
  for (int n = 0; n < nnodes && !any; n++)
    any = node_topo[n] != NULL && node_topo[n]->nvl_domain.set;
  if (!any) {
    *none = 1;
    return NULL;
  }
  int *v = malloc((size_t)nnodes * sizeof(int));
  if (v == NULL) return NULL;
  /* The value is the first node of the same domain: equal domains get
   * equal values, and gcoll_plan_set_domains renumbers them. Trays of one
   * rack are usually adjacent, so the previous node's domain is tried
   * before the scan. */
  int *firsts = malloc((size_t)nnodes * sizeof(int)), nfirst = 0;
  if (firsts == NULL) {
    free(v);
    return NULL;
  }
  for (int n = 0; n < nnodes; n++) {
    const struct gcoll_nvl_domain *d = node_topo[n] ? &node_topo[n]->nvl_domain : NULL;
    v[n] = -1;
    if (d == NULL || !d->set) continue;
    if (n > 0 && v[n - 1] >= 0 && gcoll_nvl_domain_equal(d, &node_topo[n - 1]->nvl_domain)) {
      v[n] = v[n - 1];
      continue;
    }
    for (int j = nfirst - 1; j >= 0 && v[n] < 0; j--)
      if (gcoll_nvl_domain_equal(d, &node_topo[firsts[j]]->nvl_domain)) v[n] = firsts[j];
    if (v[n] < 0) v[n] = firsts[nfirst++] = n;
  }
  free(firsts);
  return v;
}

int gcoll_plan_node_domain(const struct gcoll_plan *p, int node) {
  if (p->node_domain == NULL || node < 0 || node >= p->nnodes) return -1;
  return p->node_domain[node];
}

enum gcoll_edge gcoll_plan_edge_between(const struct gcoll_plan *p, int a, int b) {
  const struct gcoll_plan_class *ka = &p->classes[p->node_class[a]];
  const struct gcoll_plan_class *kb = &p->classes[p->node_class[b]];
  if (a == b) return ka->intra_edge;
  int da = gcoll_plan_node_domain(p, a);
  if (da >= 0 && da == gcoll_plan_node_domain(p, b) && ka->intra_edge == GCOLL_EDGE_P2P &&
      kb->intra_edge == GCOLL_EDGE_P2P)
    return GCOLL_EDGE_P2P;
  return GCOLL_EDGE_NET;
}

/* Domain groups: a node in no domain is a group of its own. Groups are
 * numbered in order of first appearance, members kept in node order:
 * start[g]..start[g+1] in members[]. */
struct groups {
  int n;
  int *group_of, *start, *members;
};

static void groups_free(struct groups *g) {
  free(g->group_of);
  free(g->start);
  free(g->members);
}

static int groups_make(const struct gcoll_plan *p, struct groups *g) {
  int N = p->nnodes, ndom = 0;
  memset(g, 0, sizeof(*g));
  for (int n = 0; n < N; n++)
    if (p->node_domain != NULL && p->node_domain[n] >= ndom) ndom = p->node_domain[n] + 1;
  int *dom_group = malloc(((size_t)ndom + 1) * sizeof(int));
  int *count = calloc((size_t)N + 1, sizeof(int));
  g->group_of = malloc((size_t)N * sizeof(int));
  g->start = malloc(((size_t)N + 1) * sizeof(int));
  g->members = malloc((size_t)N * sizeof(int));
  if (!dom_group || !count || !g->group_of || !g->start || !g->members) {
    free(dom_group);
    free(count);
    groups_free(g);
    return -1;
  }
  for (int d = 0; d < ndom; d++) dom_group[d] = -1;
  for (int n = 0; n < N; n++) {
    int d = gcoll_plan_node_domain(p, n);
    int k = d >= 0 ? dom_group[d] : -1;
    if (k < 0) {
      k = g->n++;
      if (d >= 0) dom_group[d] = k;
    }
    g->group_of[n] = k;
    count[k]++;
  }
  g->start[0] = 0;
  for (int k = 0; k < g->n; k++) g->start[k + 1] = g->start[k] + count[k];
  for (int k = 0; k < g->n; k++) count[k] = g->start[k];
  for (int n = 0; n < N; n++) g->members[count[g->group_of[n]]++] = n;
  free(dom_group);
  free(count);
  return 0;
}

void gcoll_plan_domain_ring_order(const struct gcoll_plan *p, int *order) {
  struct groups g;
  if (p->node_domain == NULL || groups_make(p, &g) != 0) {
    for (int n = 0; n < p->nnodes; n++) order[n] = n;
    return;
  }
  /* Groups are numbered by their first node, so group order is node order
   * of each group's first node. */
  int at = 0;
  for (int k = 0; k < g.n; k++)
    for (int i = g.start[k]; i < g.start[k + 1]; i++) order[at++] = g.members[i];
  groups_free(&g);
}

/* One tree (which: 1 or 2) of btree.c's construction for n items. */
static void tree_of(int which, int n, int i, int *parent, int *kids) {
  int c0, c1;
  if (which == 1) gcoll_btree(n, i, parent, &c0, &c1);
  else gcoll_dtree_t2(n, i, parent, &c0, &c1);
  *kids = (c0 >= 0) + (c1 >= 0);
}

/* Builds tree `which` over the groups; exit[k] receives the local index
 * where group k's children domains hang, entry[k] its root. For T2 the exit
 * avoids T1's exit and T1's interior nodes where it can, so few nodes are
 * interior in both trees. */
static void build_tree(const struct groups *g, int which, const int *t1_exit, int *parent,
                       int *entry, int *exit_, int *root) {
  for (int k = 0; k < g->n; k++) {
    int m = g->start[k + 1] - g->start[k], best = -1, best_score = -1;
    const int *mem = g->members + g->start[k];
    for (int i = 0; i < m; i++) {
      int par, kids;
      tree_of(which, m, i, &par, &kids);
      parent[mem[i]] = par >= 0 ? mem[par] : -1;
      if (par < 0) entry[k] = i;
      /* A leaf (or the single node) can take two children across domains. */
      if (kids > 0 && m > 1) continue;
      int score = 0;
      if (which == 2 && t1_exit != NULL) {
        int p1, k1;
        tree_of(1, m, i, &p1, &k1);
        score = (i != t1_exit[k]) * 2 + (k1 == 0);
      }
      if (score > best_score || (score == best_score && i > best)) {
        best = i;
        best_score = score;
      }
    }
    exit_[k] = best;
  }
  for (int k = 0; k < g->n; k++) {
    int pk, kids;
    tree_of(which, g->n, k, &pk, &kids);
    int e = g->members[g->start[k] + entry[k]];
    if (pk >= 0) parent[e] = g->members[g->start[pk] + exit_[pk]];
    else *root = e;
  }
}

int gcoll_plan_canonical_trees(const struct gcoll_plan *p, int *t1_parent, int *t2_parent,
                               int *t1_root, int *t2_root) {
  int n = p->nnodes, c0, c1;
  if (p->node_domain == NULL) {
    /* Over ring positions, counted from node 0's (so node 0 is T1's root,
     * as in every plan): btree.c keeps neighbouring positions close in the
     * tree, so where the ring follows a switch fabric the trees do too (in
     * node order, the positions are the nodes). */
    const int *ring = p->ring_node_order;
    int zero = 0;
    while (zero < n - 1 && ring[zero] != 0) zero++;
    for (int i = 0; i < n; i++) {
      int p1, p2, v = ring[(zero + i) % n];
      gcoll_btree(n, i, &p1, &c0, &c1);
      gcoll_dtree_t2(n, i, &p2, &c0, &c1);
      t1_parent[v] = p1 >= 0 ? ring[(zero + p1) % n] : -1;
      t2_parent[v] = p2 >= 0 ? ring[(zero + p2) % n] : -1;
      if (p1 < 0) *t1_root = v;
      if (p2 < 0) *t2_root = v;
    }
    return 0;
  }
  struct groups g;
  if (groups_make(p, &g) != 0) return -1;
  int *entry = malloc((size_t)g.n * sizeof(int)), *exit1 = malloc((size_t)g.n * sizeof(int));
  int *exit2 = malloc((size_t)g.n * sizeof(int));
  int rc = -1;
  if (entry && exit1 && exit2) {
    build_tree(&g, 1, NULL, t1_parent, entry, exit1, t1_root);
    build_tree(&g, 2, exit1, t2_parent, entry, exit2, t2_root);
    rc = 0;
  }
  free(entry);
  free(exit1);
  free(exit2);
  groups_free(&g);
  return rc;
}
