/* The in-memory plan: lifetime, name tables, and each rank's view of it.
 *
 * gcoll_plan_rank_view implements the "Meaning" section of
 * docs/plan-format.md; the streaming file reader implements the same
 * contract independently, and tests compare the two. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"

/* ---- lifetime ----------------------------------------------------------- */

struct gcoll_plan *gcoll_plan_new(void) {
  struct gcoll_plan *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->version = GCOLL_PLAN_VERSION;
  p->job.id = p->job.step = -1;
  p->t2_root = -1;
  return p;
}

static void free_nodes(struct gcoll_plan *p) {
  if (p->node_host != NULL)
    for (int n = 0; n < p->nnodes; n++) free(p->node_host[n]);
  free(p->node_host);
  free(p->node_class);
  free(p->node_first_rank);
  free(p->ring_node_order);
  free(p->node_domain);
  free(p->t1_parent);
  free(p->t2_parent);
  p->node_host = NULL;
  p->node_class = p->node_first_rank = p->ring_node_order = p->node_domain = NULL;
  p->t1_parent = p->t2_parent = NULL;
  p->nnodes = 0;
}

void gcoll_plan_free(struct gcoll_plan *plan) {
  if (plan == NULL) return;
  free_nodes(plan);
  free(plan->rank_of_slot);
  free(plan->slot_of_rank);
  free(plan);
}

_Static_assert(sizeof(((struct gcoll_rank_view *)0)->node_ranks) ==
                   GCOLL_MAX_LOCAL_RANKS * sizeof(int),
               "a rank view holds every rank of its node");

int gcoll_plan_rank_at(const struct gcoll_plan *plan, int slot) {
  if (slot < 0 || slot >= plan->nranks) return -1;
  return plan->rank_of_slot != NULL ? plan->rank_of_slot[slot] : slot;
}

int gcoll_plan_slot_of(const struct gcoll_plan *plan, int rank) {
  if (rank < 0 || rank >= plan->nranks) return -1;
  return plan->slot_of_rank != NULL ? plan->slot_of_rank[rank] : rank;
}

int gcoll_plan_set_rank_order(struct gcoll_plan *plan, const int *rank_of_slot, char *err,
                              size_t errlen) {
  free(plan->rank_of_slot);
  free(plan->slot_of_rank);
  plan->rank_of_slot = plan->slot_of_rank = NULL;
  int n = plan->nranks, identity = 1;
  for (int s = 0; rank_of_slot != NULL && s < n && identity; s++) identity = rank_of_slot[s] == s;
  if (rank_of_slot == NULL || identity) return 0;
  int *at = malloc((size_t)n * sizeof(int)), *of = malloc((size_t)n * sizeof(int));
  if (at == NULL || of == NULL) {
    free(at);
    free(of);
    snprintf(err, errlen, "out of memory for the rank order of %d ranks", n);
    return -1;
  }
  for (int r = 0; r < n; r++) of[r] = -1;
  for (int s = 0; s < n; s++) {
    int r = rank_of_slot[s];
    if (r < 0 || r >= n || of[r] >= 0) {
      snprintf(err, errlen, "rank %d is %s", r,
               r < 0 || r >= n ? "outside the job" : "placed twice");
      free(at);
      free(of);
      return -1;
    }
    at[s] = r;
    of[r] = s;
  }
  plan->rank_of_slot = at;
  plan->slot_of_rank = of;
  return 0;
}

int gcoll_plan_alloc_nodes(struct gcoll_plan *plan, int nnodes) {
  if (plan == NULL || nnodes < 1 || nnodes > GCOLL_MAX_NODES) return -1;
  free_nodes(plan);
  size_t n = (size_t)nnodes;
  plan->node_host = calloc(n, sizeof(char *));
  plan->node_class = calloc(n, sizeof(int));
  plan->node_first_rank = calloc(n, sizeof(int));
  plan->ring_node_order = calloc(n, sizeof(int));
  plan->t1_parent = calloc(n, sizeof(int));
  plan->t2_parent = calloc(n, sizeof(int));
  if (!plan->node_host || !plan->node_class || !plan->node_first_rank || !plan->ring_node_order ||
      !plan->t1_parent || !plan->t2_parent) {
    free_nodes(plan);
    return -1;
  }
  plan->nnodes = nnodes;
  return 0;
}

/* ---- name tables -------------------------------------------------------- */

static const char *const edge_names[] = {"none", "self", "shm", "p2p", "net"};
/* Collective, algorithm and protocol names: src/common/coll_names.c. */

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *gcoll_edge_name(enum gcoll_edge e) {
  return gcoll_name_at(edge_names, NELEM(edge_names), (int)e);
}
int gcoll_edge_from_name(const char *s) {
  return gcoll_name_index(edge_names, NELEM(edge_names), s);
}

const struct gcoll_tuning_entry *gcoll_rank_view_tuning(const struct gcoll_rank_view *view,
                                                        enum gcoll_coll coll, uint64_t bytes) {
  if (view == NULL || (unsigned)coll >= GCOLL_NCOLLS) return NULL;
  int n = view->ntuning[coll];
  if (n <= 0 || n > GCOLL_MAX_TUNING) return NULL;
  for (int i = 0; i < n; i++)
    if (bytes <= view->tuning[coll][i].max_bytes) return &view->tuning[coll][i];
  return &view->tuning[coll][n - 1];
}

/* ---- rank view ---------------------------------------------------------- */

int gcoll_plan_node_of_rank(const struct gcoll_plan *plan, int rank) {
  if (plan == NULL || plan->nnodes < 1 || rank < 0 || rank >= plan->nranks) return -1;
  rank = gcoll_plan_slot_of(plan, rank);
  int lo = 0, hi = plan->nnodes - 1;
  while (lo < hi) {  /* last node whose first rank is <= rank */
    int mid = lo + (hi - lo + 1) / 2;
    if (plan->node_first_rank[mid] <= rank) lo = mid;
    else hi = mid - 1;
  }
  int k = plan->node_class[lo];
  if (k < 0 || k >= plan->nclasses || rank < plan->node_first_rank[lo] ||
      rank >= plan->node_first_rank[lo] + plan->classes[k].nlocal)
    return -1;
  return lo;
}

static const struct gcoll_plan_class *class_of(const struct gcoll_plan *p, int node) {
  return &p->classes[p->node_class[node]];
}

static int position_in(const int *perm, int n, int v) {
  for (int i = 0; i < n; i++)
    if (perm[i] == v) return i;
  return -1;
}

/* Checks what the view relies on, so a damaged plan gives an error rather
 * than an out-of-bounds read. */
static int check_node(const struct gcoll_plan *p, int node, char *err, size_t errlen) {
  if (node < 0 || node >= p->nnodes || p->node_class[node] < 0 ||
      p->node_class[node] >= p->nclasses) {
    snprintf(err, errlen, "plan: node %d has no valid topology class", node);
    return -1;
  }
  int L = class_of(p, node)->nlocal;
  if (L < 1 || L > GCOLL_MAX_LOCAL_RANKS) {
    snprintf(err, errlen, "plan: node %d has %d local ranks", node, L);
    return -1;
  }
  return 0;
}

static void fill_ring(const struct gcoll_plan *p, int node, int ring_pos, int s, int c,
                      struct gcoll_rank_view *v) {
  const struct gcoll_plan_class *k = class_of(p, node);
  const struct gcoll_intra_channel *ch = &k->graph.ch[s];
  int L = k->nlocal, F = p->node_first_rank[node], n = p->nnodes;
  struct gcoll_ring_link *r = &v->ring[c];
  int i = position_in(ch->ring, L, v->local_rank);
  /* The ring enters (leaves) a node of an NVLink domain from (to) another
   * tray over NVLink: no NIC is involved then. */
  int cross_p2p_in = 0, cross_p2p_out = 0;
  memset(r, 0, sizeof(*r));
  r->rail_in = r->rail_out = r->nic_out_via = -1;
  if (p->nranks == 1) {
    r->prev = r->next = v->rank;
    r->prev_edge = r->next_edge = GCOLL_EDGE_SELF;
  } else {
    if (i > 0) {
      r->prev = gcoll_plan_rank_at(p, F + ch->ring[i - 1]);
      r->prev_edge = k->intra_edge;
    } else {
      int pn = p->ring_node_order[(ring_pos - 1 + n) % n];
      const struct gcoll_plan_class *pk = class_of(p, pn);
      r->prev =
          gcoll_plan_rank_at(p, p->node_first_rank[pn] + pk->graph.ch[s].ring[pk->nlocal - 1]);
      r->prev_edge = gcoll_plan_edge_between(p, pn, node);
      cross_p2p_in = pn != node && r->prev_edge == GCOLL_EDGE_P2P;
    }
    if (i < L - 1) {
      r->next = gcoll_plan_rank_at(p, F + ch->ring[i + 1]);
      r->next_edge = k->intra_edge;
    } else {
      int nn = p->ring_node_order[(ring_pos + 1) % n];
      const struct gcoll_plan_class *nk = class_of(p, nn);
      r->next = gcoll_plan_rank_at(p, p->node_first_rank[nn] + nk->graph.ch[s].ring[0]);
      r->next_edge = gcoll_plan_edge_between(p, node, nn);
      cross_p2p_out = nn != node && r->next_edge == GCOLL_EDGE_P2P;
    }
  }
  if (i == 0 && !cross_p2p_in && ch->ring_nic_in_name[0]) {
    snprintf(r->nic_in, sizeof(r->nic_in), "%s", ch->ring_nic_in_name);
    r->rail_in = ch->ring_rail_in;
  }
  if (i == L - 1 && !cross_p2p_out && ch->ring_nic_out_name[0]) {
    snprintf(r->nic_out, sizeof(r->nic_out), "%s", ch->ring_nic_out_name);
    r->rail_out = ch->ring_rail_out;
    if (ch->ring_pxn >= 0 && ch->ring_pxn < L && ch->ring_pxn != v->local_rank)
      r->nic_out_via = gcoll_plan_rank_at(p, F + ch->ring_pxn);
  }
}

int gcoll_plan_ring_ranks(const struct gcoll_plan *plan, int channel, int *ranks) {
  if (channel < 0 || channel >= plan->nchannels || plan->nchannels < 2) return -1;
  int S = plan->nchannels / 2, s = channel % S, k = 0;
  for (int j = 0; j < plan->nnodes; j++) {
    int node = plan->ring_node_order[j];
    const struct gcoll_plan_class *c = class_of(plan, node);
    for (int i = 0; i < c->nlocal && k < plan->nranks; i++)
      ranks[k++] = gcoll_plan_rank_at(plan, plan->node_first_rank[node] + c->graph.ch[s].ring[i]);
  }
  return k == plan->nranks ? 0 : -1;
}

static int tree_endpoint(const struct gcoll_plan *p, int node, int s) {
  return gcoll_plan_rank_at(p, p->node_first_rank[node] + class_of(p, node)->graph.ch[s].chain[0]);
}

static void fill_tree(const struct gcoll_plan *p, int node, int s, int c, int S,
                      const int *kids1, int nk1, const int *kids2, int nk2,
                      struct gcoll_rank_view *v) {
  const struct gcoll_plan_class *k = class_of(p, node);
  const struct gcoll_intra_channel *ch = &k->graph.ch[s];
  int L = k->nlocal, F = p->node_first_rank[node];
  int which = c < S ? 1 : 2;
  const int *parent = which == 1 ? p->t1_parent : p->t2_parent;
  const int *kids = which == 1 ? kids1 : kids2;
  int nkids = which == 1 ? nk1 : nk2;
  struct gcoll_tree_link *t = &v->tree[c];
  memset(t, 0, sizeof(*t));
  t->rail = -1;
  t->tree = which;
  t->parent = -1;
  for (int j = 0; j < GCOLL_MAX_TREE_ARITY; j++) t->children[j] = -1;
  int i = position_in(ch->chain, L, v->local_rank);
  if (i > 0) {
    t->parent = gcoll_plan_rank_at(p, F + ch->chain[i - 1]);
    t->parent_edge = k->intra_edge;
  } else if (parent[node] >= 0) {
    t->parent = tree_endpoint(p, parent[node], s);
    t->parent_edge = gcoll_plan_edge_between(p, parent[node], node);
  }
  if (i < L - 1) {
    t->child_edge[t->nchildren] = k->intra_edge;
    t->children[t->nchildren++] = gcoll_plan_rank_at(p, F + ch->chain[i + 1]);
  }
  if (i == 0) {
    /* The chain's NIC serves the endpoint's edges to other nodes; when all
     * of them stay inside its NVLink domain there is none to name. */
    int uses_net = parent[node] >= 0 && t->parent_edge == GCOLL_EDGE_NET;
    for (int j = 0; j < nkids && t->nchildren < GCOLL_MAX_TREE_ARITY; j++) {
      t->child_edge[t->nchildren] = gcoll_plan_edge_between(p, node, kids[j]);
      uses_net |= t->child_edge[t->nchildren] == GCOLL_EDGE_NET;
      t->children[t->nchildren++] = tree_endpoint(p, kids[j], s);
    }
    if ((uses_net || p->node_domain == NULL) && ch->chain_nic_name[0]) {
      snprintf(t->nic, sizeof(t->nic), "%s", ch->chain_nic_name);
      t->rail = ch->chain_rail;
    }
  }
}

/* NVLS heads: the node's own, or, in an NVLink domain, heads spread over
 * the domain's nodes (in ring order, one head of each node before any
 * node's second), since NVLink multicast reaches every GPU of the domain
 * and each head brings its own NIC for the traffic between domains. */
static void fill_nvls(const struct gcoll_plan *p, int node, struct gcoll_rank_view *v) {
  const struct gcoll_plan_class *k = class_of(p, node);
  int d = gcoll_plan_node_domain(p, node), nd = 0, maxh = 0;
  v->nvl_domain = d;
  v->nvl_domain_nnodes = 0;
  v->nvls_nheads = 0;
  if (d < 0) {
    v->nvls_nheads = k->graph.nvls_nheads;
    for (int h = 0; h < v->nvls_nheads; h++)
      v->nvls_heads[h] = gcoll_plan_rank_at(p, p->node_first_rank[node] + k->graph.nvls_heads[h]);
    return;
  }
  for (int j = 0; j < p->nnodes; j++) {
    int m = p->ring_node_order[j];
    if (gcoll_plan_node_domain(p, m) != d) continue;
    nd++;
    if (class_of(p, m)->graph.nvls_nheads > maxh) maxh = class_of(p, m)->graph.nvls_nheads;
  }
  v->nvl_domain_nnodes = nd;
  /* Only a domain whose every node has NVLS heads has NVLS. */
  for (int j = 0; j < p->nnodes; j++) {
    int m = p->ring_node_order[j];
    if (gcoll_plan_node_domain(p, m) == d && class_of(p, m)->graph.nvls_nheads == 0) return;
  }
  for (int round = 0; round < maxh && v->nvls_nheads < GCOLL_MAX_NVLS_HEADS; round++)
    for (int j = 0; j < p->nnodes && v->nvls_nheads < GCOLL_MAX_NVLS_HEADS; j++) {
      int m = p->ring_node_order[j];
      const struct gcoll_plan_class *km = class_of(p, m);
      if (gcoll_plan_node_domain(p, m) != d || round >= km->graph.nvls_nheads) continue;
      v->nvls_heads[v->nvls_nheads++] =
          gcoll_plan_rank_at(p, p->node_first_rank[m] + km->graph.nvls_heads[round]);
    }
}

/* Children of `node` in a tree, increasing node index; more than two would
 * break the arity limit and is reported. */
static int tree_children(const int *parent, int nnodes, int node, int *kids, char *err,
                         size_t errlen, int which) {
  int n = 0;
  for (int m = 0; m < nnodes; m++)
    if (parent[m] == node) {
      if (n == 2) {
        snprintf(err, errlen, "plan: node %d has more than 2 children in tree t%d", node, which);
        return -1;
      }
      kids[n++] = m;
    }
  return n;
}

int gcoll_plan_rank_view(const struct gcoll_plan *plan, int rank, struct gcoll_rank_view *view,
                         char *err, size_t errlen) {
  if (plan == NULL || view == NULL) {
    snprintf(err, errlen, "no plan");
    return -1;
  }
  int node = gcoll_plan_node_of_rank(plan, rank);
  if (node < 0) {
    snprintf(err, errlen, "rank %d is not in the plan (%d ranks)", rank, plan->nranks);
    return -1;
  }
  int S = plan->nchannels / 2;
  if (S < 1 || 2 * S != plan->nchannels || plan->nchannels > GCOLL_MAX_CHANNELS) {
    snprintf(err, errlen, "plan: %d channels, must be even and 2 to %d", plan->nchannels,
             GCOLL_MAX_CHANNELS);
    return -1;
  }
  for (int m = 0; m < plan->nnodes; m++)
    if (check_node(plan, m, err, errlen)) return -1;
  for (int k = 0; k < plan->nclasses; k++)
    if (plan->classes[k].graph.nchannels < S) {
      snprintf(err, errlen, "plan: topology '%s' has %d searched channels, need %d",
               plan->classes[k].name, plan->classes[k].graph.nchannels, S);
      return -1;
    }
  int ring_pos = position_in(plan->ring_node_order, plan->nnodes, node);
  if (ring_pos < 0) {
    snprintf(err, errlen, "plan: node %d is missing from ring.node_order", node);
    return -1;
  }
  int kids1[2], kids2[2];
  int nk1 = tree_children(plan->t1_parent, plan->nnodes, node, kids1, err, errlen, 1);
  int nk2 = tree_children(plan->t2_parent, plan->nnodes, node, kids2, err, errlen, 2);
  if (nk1 < 0 || nk2 < 0) return -1;

  const struct gcoll_plan_class *k = class_of(plan, node);
  int local = gcoll_plan_slot_of(plan, rank) - plan->node_first_rank[node];
  for (int s = 0; s < S; s++)
    if (position_in(k->graph.ch[s].ring, k->nlocal, local) < 0 ||
        position_in(k->graph.ch[s].chain, k->nlocal, local) < 0) {
      snprintf(err, errlen,
               "plan: topology '%s' channel %d: local rank %d missing from ring or chain", k->name,
               s, local);
      return -1;
    }
  if (k->graph.nvls_nheads < 0 || k->graph.nvls_nheads > GCOLL_MAX_NVLS_HEADS) {
    snprintf(err, errlen, "plan: topology '%s' has %d NVLS heads", k->name, k->graph.nvls_nheads);
    return -1;
  }
  memset(view, 0, sizeof(*view));
  view->rank = rank;
  view->nranks = plan->nranks;
  view->node = node;
  view->nnodes = plan->nnodes;
  view->local_rank = local;
  view->local_nranks = k->nlocal;
  view->gpu = k->intra_edge != GCOLL_EDGE_P2P ? -1 : k->has_gpu_map ? k->gpu[local] : local;
  if (k->has_gpu_busids)
    snprintf(view->gpu_busid, sizeof(view->gpu_busid), "%s", k->gpu_busid[local]);
  if (plan->node_host != NULL && plan->node_host[node] != NULL)
    snprintf(view->host, sizeof(view->host), "%s", plan->node_host[node]);
  snprintf(view->topology, sizeof(view->topology), "%s", k->name);
  view->topology_hash = k->hash;
  view->job_id = plan->job.id;
  view->step_id = plan->job.step;
  view->nchannels = plan->nchannels;
  for (int c = 0; c < plan->nchannels; c++) {
    fill_ring(plan, node, ring_pos, c % S, c, view);
    fill_tree(plan, node, c % S, c, S, kids1, nk1, kids2, nk2, view);
  }
  fill_nvls(plan, node, view);
  for (int i = 0; i < k->nlocal; i++)
    view->node_ranks[i] = gcoll_plan_rank_at(plan, plan->node_first_rank[node] + i);
  memcpy(view->ntuning, plan->ntuning, sizeof(view->ntuning));
  memcpy(view->tuning, plan->tuning, sizeof(view->tuning));
  return 0;
}
