/* Rails across nodes: which inter-node edges of a plan stay on one rail.
 *
 * On a rail-optimised fabric NIC k of every node is cabled to leaf switch
 * k, so an edge from a NIC on rail a to one on rail b != a goes up to the
 * spine and back. An edge's rails are the plan's rail fields; a plan
 * written before rails existed names none, and then NICs of equal names
 * are taken to share a rail (mlx5_0 of every node on one leaf), which is
 * how such fabrics are cabled. Only `net` edges count: p2p edges between
 * trays of an NVLink domain use no NIC. */
#include <stdio.h>
#include <string.h>

#include "graph/plan.h"

static const struct gcoll_intra_channel *chan(const struct gcoll_plan *p, int node, int s) {
  return &p->classes[p->node_class[node]].graph.ch[s];
}

static int same_rail(const char *na, int ra, const char *nb, int rb) {
  if (ra >= 0 && rb >= 0) return ra == rb;
  return strcmp(na, nb) == 0;
}

static void describe(char *out, size_t len, const char *nic, int rail) {
  if (rail >= 0)
    snprintf(out, len, "%s (rail %d)", nic[0] ? nic : "no NIC", rail);
  else
    snprintf(out, len, "%s", nic[0] ? nic : "no NIC");
}

/* Calls `edge` for every net edge of searched channel s's ring and of both
 * trees (as the channels c = s and c = s + S use them), stopping at the
 * first non-zero return. */
typedef int (*edge_fn)(void *ctx, int is_tree, int s, int from, int to, const char *nic_from,
                       int rail_from, const char *nic_to, int rail_to);

static int walk(const struct gcoll_plan *p, edge_fn edge, void *ctx) {
  int S = p->nchannels / 2, rc = 0;
  if (p->nnodes < 2) return 0;
  for (int s = 0; s < S && rc == 0; s++) {
    for (int i = 0; i < p->nnodes && rc == 0; i++) {
      int n = p->ring_node_order[i], m = p->ring_node_order[(i + 1) % p->nnodes];
      if (n == m || gcoll_plan_edge_between(p, n, m) != GCOLL_EDGE_NET) continue;
      const struct gcoll_intra_channel *a = chan(p, n, s), *b = chan(p, m, s);
      rc = edge(ctx, 0, s, n, m, a->ring_nic_out_name, a->ring_rail_out, b->ring_nic_in_name,
                b->ring_rail_in);
    }
    for (int which = 1; which <= 2 && rc == 0; which++) {
      const int *parent = which == 1 ? p->t1_parent : p->t2_parent;
      for (int n = 0; n < p->nnodes && rc == 0; n++) {
        int m = parent[n];
        if (m < 0 || gcoll_plan_edge_between(p, n, m) != GCOLL_EDGE_NET) continue;
        const struct gcoll_intra_channel *a = chan(p, n, s), *b = chan(p, m, s);
        rc = edge(ctx, which, s, n, m, a->chain_nic_name, a->chain_rail, b->chain_nic_name,
                  b->chain_rail);
      }
    }
  }
  return rc;
}

static int count_edge(void *ctx, int is_tree, int s, int from, int to, const char *nic_from,
                      int rail_from, const char *nic_to, int rail_to) {
  struct gcoll_rail_counts *c = ctx;
  int cross = !same_rail(nic_from, rail_from, nic_to, rail_to);
  (void)s;
  (void)from;
  (void)to;
  if (is_tree) {
    c->tree_edges++;
    c->tree_cross += cross;
  } else {
    c->ring_edges++;
    c->ring_cross += cross;
  }
  return 0;
}

void gcoll_plan_rail_counts(const struct gcoll_plan *p, struct gcoll_rail_counts *out) {
  memset(out, 0, sizeof(*out));
  walk(p, count_edge, out);
}

struct first_cross {
  const struct gcoll_plan *p;
  char *err;
  size_t errlen;
};

static int report_edge(void *ctx, int is_tree, int s, int from, int to, const char *nic_from,
                       int rail_from, const char *nic_to, int rail_to) {
  struct first_cross *f = ctx;
  char a[64], b[64];
  if (same_rail(nic_from, rail_from, nic_to, rail_to)) return 0;
  describe(a, sizeof(a), nic_from, rail_from);
  describe(b, sizeof(b), nic_to, rail_to);
  if (is_tree)
    snprintf(f->err, f->errlen, "tree t%d channel %d: node %d's endpoint uses %s, its parent "
             "node %d's %s: cross-rail", is_tree, s + (is_tree - 1) * (f->p->nchannels / 2),
             from, a, to, b);
  else
    snprintf(f->err, f->errlen, "ring channel %d: node %d leaves by %s, node %d enters by %s: "
             "cross-rail", s, from, a, to, b);
  return -1;
}

int gcoll_plan_verify_rails(const struct gcoll_plan *p, char *err, size_t errlen) {
  struct first_cross f = {p, err, errlen};
  return walk(p, report_edge, &f);
}
