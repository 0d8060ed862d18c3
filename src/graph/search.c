/* Intra-node channel search: rings and tree chains over the GPUs of one
 * node, the NICs they enter and leave by, and NVLS heads.
 *
 * Like NCCL's search, channels compete for link bandwidth: a channel of
 * bandwidth s subtracts s from every directed link on every hop's path (and
 * from the NIC's line rate), so later channels route around saturated links
 * or fail. For each candidate per-channel bandwidth ("level", descending) we
 * find as many channels as fit; the level with the largest total wins, the
 * higher per-channel bandwidth on ties.
 *
 * Within a level, one channel is a depth-first search over GPU orders with
 * branch-and-bound on a hop cost that ranks path classes lexicographically
 * (one SYS hop costs more than any number of PHB hops, and so on), so a ring
 * crosses sockets as few times as possible, then host bridges, and so on. */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One channel is one thread block and one proxy stream; past about this
 * many GB/s a single channel cannot go faster, so faster fabrics need more
 * channels rather than wider ones. */
#define SEARCH_CHANNEL_BW_MAX 40.0
/* Host-memory bandwidth one CPU channel (one copy thread) sustains. */
#define SEARCH_SHM_CHANNEL_BW 10.0
#define SEARCH_SINGLE_NODE_MIN_CHANNELS 2
#define SEARCH_SINGLE_NODE_MAX_CHANNELS 8
/* Expansion budgets keep 16-GPU searches bounded; 8 GPUs finish far below. */
#define SEARCH_DFS_BUDGET 20000L
#define SEARCH_TOTAL_BUDGET 2000000L
#define SEARCH_MAX_LEVELS 256
#define UNLIMITED 1e30

/* Remaining bandwidth of every directed link (link l out of device d is
 * link[base[d] + l]) and of every NIC in each direction; sized for the
 * topology, which has no fixed device or link count. */
struct capacity {
  double *link;
  int *base;
  double *nic_in, *nic_out;
};

enum dfs_mode {
  DFS_CYCLE,  /* single node: closed ring */
  DFS_NET,    /* multi node: open ring from nic_in to a chosen nic_out */
  DFS_CHAIN   /* tree chain: open path hanging below the NIC */
};

struct dfs {
  const struct gcoll_topo *t;
  struct capacity *cap;
  enum dfs_mode mode;
  int n;
  double s;
  int nic_in;                 /* NIC index, -1 when none */
  int rails;                  /* DFS_NET: leave by a NIC of nic_in's rail */
  int order[GCOLL_TOPO_MAX_GPUS];
  int depth;
  unsigned used;
  uint64_t cost;
  uint64_t lower_bound;
  uint64_t best_cost;
  int best_order[GCOLL_TOPO_MAX_GPUS];
  int best_nic_out;
  int best_pxn;               /* GPU the exit sends through (PXN), -1: direct */
  long budget;
  long *total_budget;
  int done;
};

/* Lexicographic hop cost: each class is one base-32 digit and no ring has
 * 32 hops, so one worse hop outweighs any number of better ones. */
static uint64_t hop_weight(enum gcoll_path_type type) {
  switch (type) {
    case GCOLL_PATH_LOC:
    case GCOLL_PATH_NVL: return 0;
    case GCOLL_PATH_NVB: return 1;
    case GCOLL_PATH_PIX: return 1ull << 5;
    case GCOLL_PATH_PXB: return 1ull << 10;
    case GCOLL_PATH_PHB: return 1ull << 15;
    case GCOLL_PATH_SYS: return 1ull << 20;
    default: return 1ull << 25;
  }
}

static int gpu_dev(const struct gcoll_topo *t, int g) { return t->gpu[g]; }
static int nic_dev(const struct gcoll_topo *t, int k) { return t->nic[k]; }

/* NICs a plan may use: a port that is down or trained below its line rate
 * is left out (the class lists it), so a node with a bad cable plans
 * around it instead of running every channel at the slow port's pace. */
static int nic_ok(const struct gcoll_topo *t, int k) {
  return gcoll_topo_nic_usable(t, k, NULL, NULL, 0);
}

static int usable_nics(const struct gcoll_topo *t) {
  int n = 0;
  for (int k = 0; k < t->nnic; k++) n += nic_ok(t, k);
  return n;
}

static double nic_rate(const struct gcoll_topo *t, int k) {
  double gbps = t->dev[nic_dev(t, k)].u.nic.gbps;
  return gbps > 0 ? gbps / 8.0 : UNLIMITED;
}

static void capacity_free(struct capacity *c) {
  if (c == NULL) return;
  free(c->link);
  free(c->base);
  free(c->nic_in);
  free(c->nic_out);
  free(c);
}

/* Every link and NIC at full bandwidth; NULL when out of memory. */
static struct capacity *capacity_new(const struct gcoll_topo *t) {
  struct capacity *c = calloc(1, sizeof(*c));
  size_t nlinks = 0;
  for (int d = 0; d < t->ndev; d++) nlinks += (size_t)t->dev[d].nlinks;
  if (c == NULL) return NULL;
  c->link = malloc((nlinks + 1) * sizeof(double));
  c->base = malloc(((size_t)t->ndev + 1) * sizeof(int));
  c->nic_in = malloc(((size_t)t->nnic + 1) * sizeof(double));
  c->nic_out = malloc(((size_t)t->nnic + 1) * sizeof(double));
  if (!c->link || !c->base || !c->nic_in || !c->nic_out) {
    capacity_free(c);
    return NULL;
  }
  int at = 0;
  for (int d = 0; d < t->ndev; d++) {
    c->base[d] = at;
    for (int l = 0; l < t->dev[d].nlinks; l++) c->link[at++] = t->dev[d].links[l].bw;
  }
  /* -1: not even a search that reserves nothing (s = 0) fits. */
  for (int k = 0; k < t->nnic; k++)
    c->nic_in[k] = c->nic_out[k] = nic_ok(t, k) ? nic_rate(t, k) : -1;
  return c;
}

static int fits(double have, double s) { return have >= s * (1.0 - 1e-9); }

static int path_fits(const struct capacity *c, const struct gcoll_topo_path *p, double s) {
  if (p->type == GCOLL_PATH_DIS) return 0;
  for (int h = 0; h < p->nhops; h++)
    if (!fits(c->link[c->base[p->hop_dev[h]] + p->hop_link[h]], s)) return 0;
  return 1;
}

static void path_take(struct capacity *c, const struct gcoll_topo_path *p, double s) {
  for (int h = 0; h < p->nhops; h++) c->link[c->base[p->hop_dev[h]] + p->hop_link[h]] -= s;
}

static const struct gcoll_topo_path *gpu_path(const struct gcoll_topo *t, int a, int b) {
  return gcoll_topo_path(t, gpu_dev(t, a), gpu_dev(t, b));
}

/* Orders candidate paths: cheaper class, then wider, then fewer hops. */
static int path_better(const struct gcoll_topo_path *a, const struct gcoll_topo_path *b) {
  uint64_t wa = hop_weight(a->type), wb = hop_weight(b->type);
  if (wa != wb) return wa < wb;
  if (a->bw != b->bw) return a->bw > b->bw;
  return a->nhops < b->nhops;
}

/* ---- one channel: depth-first search ---------------------------------- */

/* How the ring's last GPU reaches the NIC it leaves by: its own PCIe path,
 * or PXN, through the GPU next to that NIC over NVLink: NCCL's rule, taken
 * only where the own path would cross a host bridge (PHB, SYS), which
 * GPUDirect RDMA does badly, and the peer is within PCIe switches (PXB).
 * Keeps rails aligned on nodes like a DGX, where a channel that enters
 * by NIC k at GPU k must leave by NIC k from another GPU. */
struct route {
  uint64_t w;
  int pxn;   /* GPU of the node, -1: direct */
  const struct gcoll_topo_path *a, *b;  /* b NULL when direct */
};

static int route_to_nic(const struct dfs *d, int last, int k, struct route *out) {
  const struct gcoll_topo *t = d->t;
  const struct gcoll_topo_path *p = gcoll_topo_path(t, gpu_dev(t, last), nic_dev(t, k));
  int ok = path_fits(d->cap, p, d->s);
  *out = (struct route){ok ? hop_weight(p->type) : UINT64_MAX, -1, p, NULL};
  if (p->type <= GCOLL_PATH_PXB || !d->rails) return ok;
  for (int g = 0; g < d->n; g++) {
    const struct gcoll_topo_path *a = gpu_path(t, last, g);
    const struct gcoll_topo_path *b = gcoll_topo_path(t, gpu_dev(t, g), nic_dev(t, k));
    if (g == last || a->type != GCOLL_PATH_NVL || b->type > GCOLL_PATH_PXB) continue;
    uint64_t w = hop_weight(a->type) + hop_weight(b->type);
    if (w >= out->w || !path_fits(d->cap, a, d->s) || !path_fits(d->cap, b, d->s)) continue;
    *out = (struct route){w, g, a, b};
    ok = 1;
  }
  return ok;
}

static void route_take(struct capacity *c, const struct route *r, double s) {
  path_take(c, r->a, s);
  if (r->b != NULL) path_take(c, r->b, s);
}

/* NIC the ring leaves by: the best reached that still has room; with
 * rails, only NICs on the rail it entered by (so the hop to the next node
 * stays on one leaf switch). */
static int pick_nic_out(struct dfs *d, int last, struct route *best_route) {
  const struct gcoll_topo *t = d->t;
  int best = -1, rail = d->rails ? gcoll_topo_nic_rail(t, d->nic_in) : -1;
  for (int k = 0; k < t->nnic; k++) {
    struct route r;
    if (rail >= 0 && gcoll_topo_nic_rail(t, k) != rail) continue;
    if (!fits(d->cap->nic_out[k], d->s) || !route_to_nic(d, last, k, &r)) continue;
    if (best < 0 || r.w < best_route->w ||
        (r.w == best_route->w && r.pxn < 0 && best_route->pxn < 0 &&
         path_better(r.a, best_route->a))) {
      best = k;
      *best_route = r;
    }
  }
  return best;
}

static void dfs_leaf(struct dfs *d) {
  int last = d->order[d->n - 1];
  uint64_t cost = d->cost;
  int nic_out = -1;
  struct route r = {0, -1, NULL, NULL};
  if (d->mode == DFS_CYCLE && d->n > 1) {
    const struct gcoll_topo_path *p = gpu_path(d->t, last, d->order[0]);
    if (!path_fits(d->cap, p, d->s)) return;
    cost += hop_weight(p->type);
  } else if (d->mode == DFS_NET && d->nic_in >= 0) {
    nic_out = pick_nic_out(d, last, &r);
    if (nic_out < 0) return;
    cost += r.w;
  }
  if (cost >= d->best_cost) return;
  d->best_cost = cost;
  d->best_nic_out = nic_out;
  d->best_pxn = r.pxn;
  memcpy(d->best_order, d->order, sizeof(d->order));
  if (cost <= d->lower_bound) d->done = 1;
}

struct candidate {
  uint64_t w;
  double bw;
  int gpu;
};

static int sorted_candidates(const struct dfs *d, int last, struct candidate *out) {
  int nc = 0;
  for (int g = 0; g < d->n; g++) {
    if (d->used & (1u << g)) continue;
    const struct gcoll_topo_path *p = gpu_path(d->t, last, g);
    if (p->type == GCOLL_PATH_DIS) continue;
    struct candidate c = {hop_weight(p->type), p->bw, g};
    int i = nc++;
    while (i > 0 && (out[i - 1].w > c.w || (out[i - 1].w == c.w && out[i - 1].bw < c.bw))) {
      out[i] = out[i - 1];
      i--;
    }
    out[i] = c;
  }
  return nc;
}

static void dfs_step(struct dfs *d) {
  if (d->done || d->budget <= 0 || *d->total_budget <= 0) return;
  d->budget--;
  (*d->total_budget)--;
  if (d->depth == d->n) {
    dfs_leaf(d);
    return;
  }
  int last = d->order[d->depth - 1];
  struct candidate cand[GCOLL_TOPO_MAX_GPUS];
  int nc = sorted_candidates(d, last, cand);
  for (int i = 0; i < nc && !d->done; i++) {
    if (d->cost + cand[i].w >= d->best_cost) break;  /* sorted: the rest cost more */
    const struct gcoll_topo_path *p = gpu_path(d->t, last, cand[i].gpu);
    if (!path_fits(d->cap, p, d->s)) continue;
    path_take(d->cap, p, d->s);
    d->order[d->depth++] = cand[i].gpu;
    d->used |= 1u << cand[i].gpu;
    d->cost += cand[i].w;
    dfs_step(d);
    d->cost -= cand[i].w;
    d->used &= ~(1u << cand[i].gpu);
    d->depth--;
    path_take(d->cap, p, -d->s);
  }
}

/* Admissible bound on the intra hops: with the GPUs split into islands of
 * cheapest mutual paths, a cycle through k >= 2 islands needs k hops
 * between islands (a path k-1), each at least the cheapest such hop. */
static uint64_t intra_lower_bound(const struct gcoll_topo *t, int n, int closed) {
  int hops = closed ? n : n - 1;
  if (n <= 1 || hops <= 0) return 0;
  uint64_t wmin = UINT64_MAX;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b && hop_weight(gpu_path(t, a, b)->type) < wmin)
        wmin = hop_weight(gpu_path(t, a, b)->type);
  int island[GCOLL_TOPO_MAX_GPUS];
  for (int g = 0; g < n; g++) island[g] = g;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++)
        if (a != b && hop_weight(gpu_path(t, a, b)->type) == wmin && island[b] > island[a]) {
          island[b] = island[a];
          changed = 1;
        }
  }
  int k = 0;
  uint64_t w2 = UINT64_MAX;
  for (int g = 0; g < n; g++) k += island[g] == g;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (island[a] != island[b] && hop_weight(gpu_path(t, a, b)->type) < w2)
        w2 = hop_weight(gpu_path(t, a, b)->type);
  int cross = k < 2 ? 0 : (closed ? k : k - 1);
  if (cross > hops) cross = hops;
  return (uint64_t)(hops - cross) * wmin + (uint64_t)cross * (cross ? w2 : 0);
}

/* With rails a PXN route may end at the start GPU's NIC path, so the
 * start GPU counts too (a route never weighs less than its last segment). */
static uint64_t best_nic_out_weight(const struct gcoll_topo *t, int n, int start, int rails) {
  uint64_t best = UINT64_MAX;
  for (int g = 0; g < n; g++) {
    if (g == start && n > 1 && !rails) continue;
    for (int k = 0; k < t->nnic; k++) {
      uint64_t w = hop_weight(gcoll_topo_path(t, gpu_dev(t, g), nic_dev(t, k))->type);
      if (w < best) best = w;
    }
  }
  return best == UINT64_MAX ? 0 : best;
}

/* Searches one channel starting at GPU `start`; on success takes its
 * capacity and returns 0 with the order (and nic_out) filled. */
static int search_channel(const struct gcoll_topo *t, struct capacity *cap, enum dfs_mode mode,
                          int n, double s, int nic_in, int rails, int start, long *total_budget,
                          int *order, int *nic_out, int *pxn) {
  struct dfs *d = calloc(1, sizeof(*d));
  if (d == NULL) return -1;
  d->t = t;
  d->cap = cap;
  d->mode = mode;
  d->n = n;
  d->s = s;
  d->nic_in = nic_in;
  d->rails = rails && mode == DFS_NET && nic_in >= 0;
  d->best_cost = UINT64_MAX;
  d->best_nic_out = -1;
  d->best_pxn = -1;
  d->budget = SEARCH_DFS_BUDGET;
  d->total_budget = total_budget;
  d->lower_bound = intra_lower_bound(t, n, mode == DFS_CYCLE);
  const struct gcoll_topo_path *in = NULL;
  if (nic_in >= 0 && mode != DFS_CYCLE) {
    in = gcoll_topo_path(t, nic_dev(t, nic_in), gpu_dev(t, start));
    if (!fits(cap->nic_in[nic_in], s) || !path_fits(cap, in, s)) {
      free(d);
      return -1;
    }
    d->lower_bound += hop_weight(in->type);
    if (mode == DFS_NET) d->lower_bound += best_nic_out_weight(t, n, start, rails);
    path_take(cap, in, s);
    d->cost = hop_weight(in->type);
  }
  d->order[0] = start;
  d->used = 1u << start;
  d->depth = 1;
  dfs_step(d);
  if (in != NULL) path_take(cap, in, -s);
  int ok = d->best_cost != UINT64_MAX;
  if (ok) {
    memcpy(order, d->best_order, sizeof(int) * (size_t)n);
    *nic_out = d->best_nic_out;
    *pxn = d->best_pxn;
    /* Commit: replay the chosen channel's capacity use. */
    if (in != NULL) {
      path_take(cap, in, s);
      cap->nic_in[nic_in] -= s;
    }
    for (int i = 0; i + 1 < n; i++) path_take(cap, gpu_path(t, order[i], order[i + 1]), s);
    if (mode == DFS_CYCLE && n > 1) path_take(cap, gpu_path(t, order[n - 1], order[0]), s);
    if (d->best_nic_out >= 0) {
      struct route r;
      route_to_nic(d, order[n - 1], d->best_nic_out, &r);
      route_take(cap, &r, s);
      cap->nic_out[d->best_nic_out] -= s;
    }
  }
  free(d);
  return ok ? 0 : -1;
}

/* ---- channels at one level --------------------------------------------- */

struct level_ctx {
  const struct gcoll_topo *t;
  int n, multi_node, max_channels;
  int rails;   /* rings leave each node on the rail they entered by */
  const int *want_rail;   /* per channel, the rail it must enter by (-1: any) */
  int nwant;
  long total_budget;
  int start_uses[GCOLL_TOPO_MAX_GPUS];
};

/* GPU a channel entering by NIC k starts at: the closest, spreading ties
 * over GPUs not yet used as a start. */
static int closest_gpu(const struct level_ctx *lc, int k) {
  const struct gcoll_topo *t = lc->t;
  int best = -1;
  for (int g = 0; g < lc->n; g++) {
    if (best < 0) { best = g; continue; }
    const struct gcoll_topo_path *p = gcoll_topo_path(t, nic_dev(t, k), gpu_dev(t, g));
    const struct gcoll_topo_path *q = gcoll_topo_path(t, nic_dev(t, k), gpu_dev(t, best));
    if (path_better(p, q) || (!path_better(q, p) && lc->start_uses[g] < lc->start_uses[best]))
      best = g;
  }
  return best;
}

static int find_ring(struct level_ctx *lc, struct capacity *cap, int c, double s,
                     struct gcoll_intra_channel *ch) {
  const struct gcoll_topo *t = lc->t;
  if (!lc->multi_node || usable_nics(t) == 0) {
    enum dfs_mode mode = lc->multi_node ? DFS_NET : DFS_CYCLE;
    int start = lc->multi_node ? c % lc->n : 0;
    ch->ring_nic_in = ch->ring_nic_out = -1;
    return search_channel(t, cap, mode, lc->n, s, -1, 0, start, &lc->total_budget, ch->ring,
                          &ch->ring_nic_out, &ch->ring_pxn);
  }
  /* Round robin over NICs so the first nnic channels all enter by different NICs. */
  int want = lc->want_rail != NULL && c < lc->nwant ? lc->want_rail[c] : -1;
  for (int i = 0; i < t->nnic; i++) {
    int k = (c + i) % t->nnic;
    if (!fits(cap->nic_in[k], s) || (want >= 0 && gcoll_topo_nic_rail(t, k) != want)) continue;
    int start = closest_gpu(lc, k);
    if (search_channel(t, cap, DFS_NET, lc->n, s, k, lc->rails, start, &lc->total_budget,
                       ch->ring, &ch->ring_nic_out, &ch->ring_pxn) == 0) {
      ch->ring_nic_in = k;
      lc->start_uses[start]++;
      return 0;
    }
  }
  return -1;
}

static int search_level(struct level_ctx *lc, double s, struct gcoll_intra_channel *chs) {
  struct capacity *cap = capacity_new(lc->t);
  if (cap == NULL) return 0;
  memset(lc->start_uses, 0, sizeof(lc->start_uses));
  int found = 0;
  while (found < lc->max_channels && find_ring(lc, cap, found, s, &chs[found]) == 0) found++;
  capacity_free(cap);
  return found;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int add_level(double *lv, int nlv, double v, double top) {
  if (!(v > 0) || v > top * (1 + 1e-12) || nlv >= SEARCH_MAX_LEVELS) return nlv;
  lv[nlv++] = v;
  return nlv;
}

/* Candidate per-channel bandwidths: every link (and NIC rate) divided by a
 * small integer, since a ring's bottleneck is always a link shared by a
 * whole number of hops; capped by the per-channel ceiling. */
static int make_levels(const struct gcoll_topo *t, int n, int multi_node, double *lv) {
  double top = SEARCH_CHANNEL_BW_MAX, pair = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b && gpu_path(t, a, b)->bw > pair) pair = gpu_path(t, a, b)->bw;
  if (n > 1 && pair < top) top = pair;
  if (multi_node && usable_nics(t) > 0) {
    double net = 0;
    for (int k = 0; k < t->nnic; k++) {
      if (!nic_ok(t, k)) continue;
      double r = nic_rate(t, k);
      for (int g = 0; g < n; g++) {
        double b = gcoll_topo_path(t, nic_dev(t, k), gpu_dev(t, g))->bw;
        if ((b < r ? b : r) > net) net = b < r ? b : r;
      }
    }
    if (net < top) top = net;
  }
  int nlv = add_level(lv, 0, top, top);
  for (int d = 0; d < t->ndev; d++)
    for (int l = 0; l < t->dev[d].nlinks; l++)
      for (int k = 1; k <= n + 2; k++) nlv = add_level(lv, nlv, t->dev[d].links[l].bw / k, top);
  for (int i = 0; i < t->nnic; i++)
    for (int k = 1; k <= n + 2 && nic_ok(t, i); k++)
      nlv = add_level(lv, nlv, nic_rate(t, i) / k, top);
  qsort(lv, (size_t)nlv, sizeof(double), cmp_desc);
  int m = 0;
  for (int i = 0; i < nlv; i++)
    if (m == 0 || lv[i] < lv[m - 1] * (1 - 1e-9)) lv[m++] = lv[i];
  return m;
}

/* Actual bandwidth of one channel alone: each directed link divided by how
 * many of the channel's hops use it. Used when no level fits at all. */
static double ring_alone_bw(const struct gcoll_topo *t, const struct gcoll_intra_channel *ch,
                            int n, int closed) {
  /* Hops per directed link, indexed as struct capacity's. */
  struct capacity *use = capacity_new(t);
  if (use == NULL) return SEARCH_CHANNEL_BW_MAX;
  for (int d = 0; d < t->ndev; d++)
    for (int l = 0; l < t->dev[d].nlinks; l++) use->link[use->base[d] + l] = 0;
  const struct gcoll_topo_path *hops[GCOLL_TOPO_MAX_GPUS + 4];
  int nh = 0;
  for (int i = 0; i + 1 < n; i++) hops[nh++] = gpu_path(t, ch->ring[i], ch->ring[i + 1]);
  if (closed && n > 1) hops[nh++] = gpu_path(t, ch->ring[n - 1], ch->ring[0]);
  if (ch->ring_nic_in >= 0)
    hops[nh++] = gcoll_topo_path(t, nic_dev(t, ch->ring_nic_in), gpu_dev(t, ch->ring[0]));
  if (ch->ring_nic_out >= 0 && ch->ring_pxn >= 0) {
    hops[nh++] = gpu_path(t, ch->ring[n - 1], ch->ring_pxn);
    hops[nh++] = gcoll_topo_path(t, gpu_dev(t, ch->ring_pxn), nic_dev(t, ch->ring_nic_out));
  } else if (ch->ring_nic_out >= 0) {
    hops[nh++] = gcoll_topo_path(t, gpu_dev(t, ch->ring[n - 1]), nic_dev(t, ch->ring_nic_out));
  }
  double bw = UNLIMITED;
  for (int i = 0; i < nh; i++)
    for (int h = 0; h < hops[i]->nhops; h++)
      use->link[use->base[hops[i]->hop_dev[h]] + hops[i]->hop_link[h]] += 1;
  for (int d = 0; d < t->ndev; d++)
    for (int l = 0; l < t->dev[d].nlinks; l++) {
      double n_use = use->link[use->base[d] + l];
      if (n_use > 0 && t->dev[d].links[l].bw / n_use < bw) bw = t->dev[d].links[l].bw / n_use;
    }
  capacity_free(use);
  if (ch->ring_nic_in >= 0 && nic_rate(t, ch->ring_nic_in) < bw) bw = nic_rate(t, ch->ring_nic_in);
  if (ch->ring_nic_out >= 0 && nic_rate(t, ch->ring_nic_out) < bw)
    bw = nic_rate(t, ch->ring_nic_out);
  return bw >= UNLIMITED ? SEARCH_CHANNEL_BW_MAX : bw;
}

/* ---- tree chains -------------------------------------------------------- */

/* Chains are the tree's graph: searched on their own capacity, like NCCL's
 * separate tree search, entering at the GPU closest to the channel's NIC. */
static int search_chains(struct level_ctx *lc, struct gcoll_intra_graph *g, double s) {
  const struct gcoll_topo *t = lc->t;
  struct capacity *cap = capacity_new(t);
  if (cap == NULL) return -1;
  memset(lc->start_uses, 0, sizeof(lc->start_uses));
  for (int c = 0; c < g->nchannels; c++) {
    struct gcoll_intra_channel *ch = &g->ch[c];
    ch->chain_nic = ch->ring_nic_in;
    int start = ch->chain_nic >= 0 ? closest_gpu(lc, ch->chain_nic) : ch->ring[0];
    int unused, no_pxn;
    if (search_channel(t, cap, DFS_CHAIN, lc->n, s, ch->chain_nic, 0, start, &lc->total_budget,
                       ch->chain, &unused, &no_pxn) != 0 &&
        search_channel(t, cap, DFS_CHAIN, lc->n, 0, ch->chain_nic, 0, start, &lc->total_budget,
                       ch->chain, &unused, &no_pxn) != 0) {
      /* Budget exhausted on a huge node: the ring's order is a valid chain. */
      memcpy(ch->chain, ch->ring, sizeof(int) * (size_t)lc->n);
    }
    lc->start_uses[start]++;
  }
  capacity_free(cap);
  return 0;
}

/* ---- results ------------------------------------------------------------ */

static void fill_names(const struct gcoll_topo *t, struct gcoll_intra_channel *ch) {
  ch->ring_nic_in_name[0] = ch->ring_nic_out_name[0] = ch->chain_nic_name[0] = '\0';
  ch->ring_rail_in = ch->ring_nic_in >= 0 ? gcoll_topo_nic_rail(t, ch->ring_nic_in) : -1;
  ch->ring_rail_out = ch->ring_nic_out >= 0 ? gcoll_topo_nic_rail(t, ch->ring_nic_out) : -1;
  ch->chain_rail = ch->chain_nic >= 0 ? gcoll_topo_nic_rail(t, ch->chain_nic) : -1;
  if (ch->ring_nic_out < 0) ch->ring_pxn = -1;
  if (ch->ring_nic_in >= 0)
    snprintf(ch->ring_nic_in_name, sizeof(ch->ring_nic_in_name), "%s",
             t->dev[nic_dev(t, ch->ring_nic_in)].name);
  if (ch->ring_nic_out >= 0)
    snprintf(ch->ring_nic_out_name, sizeof(ch->ring_nic_out_name), "%s",
             t->dev[nic_dev(t, ch->ring_nic_out)].name);
  if (ch->chain_nic >= 0)
    snprintf(ch->chain_nic_name, sizeof(ch->chain_nic_name), "%s",
             t->dev[nic_dev(t, ch->chain_nic)].name);
}

static enum gcoll_path_type worst_ring_hop(const struct gcoll_topo *t,
                                           const struct gcoll_intra_graph *g, int closed) {
  enum gcoll_path_type worst = GCOLL_PATH_LOC;
  for (int c = 0; c < g->nchannels; c++)
    for (int i = 0; i < g->nlocal; i++) {
      if (i + 1 == g->nlocal && (!closed || g->nlocal == 1)) break;
      enum gcoll_path_type ty =
          gpu_path(t, g->ch[c].ring[i], g->ch[c].ring[(i + 1) % g->nlocal])->type;
      if (ty > worst) worst = ty;
    }
  return worst;
}

/* NVLS (seed 002): every GPU must reach a multicast NVSwitch directly; each
 * local rank then owns one slice of the buffer (one head per rank). */
static void find_nvls_heads(const struct gcoll_topo *t, int n, struct gcoll_intra_graph *g) {
  g->nvls_nheads = 0;
  if (n < 2) return;
  for (int s = 0; s < t->nnvs; s++) {
    const struct gcoll_topo_dev *sw = &t->dev[t->nvs[s]];
    if (!sw->u.nvs.multicast) continue;
    int all = 1;
    for (int gi = 0; gi < n && all; gi++) {
      const struct gcoll_topo_dev *gd = &t->dev[gpu_dev(t, gi)];
      int linked = 0;
      for (int l = 0; l < gd->nlinks; l++)
        linked |= gd->links[l].peer == t->nvs[s] && gd->links[l].type == GCOLL_LINK_NVL;
      all = linked;
    }
    if (!all) continue;
    g->nvls_nheads = n < GCOLL_MAX_NVLS_HEADS ? n : GCOLL_MAX_NVLS_HEADS;
    for (int h = 0; h < g->nvls_nheads; h++) g->nvls_heads[h] = h;
    return;
  }
}

static int default_max_channels(const struct gcoll_topo *t, int n, int multi_node) {
  if (multi_node) return usable_nics(t) > 1 ? usable_nics(t) : 1;
  double out = 0;
  const struct gcoll_topo_dev *g0 = &t->dev[gpu_dev(t, 0)];
  for (int l = 0; l < g0->nlinks; l++) out += g0->links[l].bw;
  int c = (int)floor(out / SEARCH_CHANNEL_BW_MAX);
  if (c < SEARCH_SINGLE_NODE_MIN_CHANNELS) c = SEARCH_SINGLE_NODE_MIN_CHANNELS;
  if (c > SEARCH_SINGLE_NODE_MAX_CHANNELS) c = SEARCH_SINGLE_NODE_MAX_CHANNELS;
  (void)n;
  return c;
}

static int search_gpus_mode(const struct gcoll_topo *t, int n, int multi_node, int max_channels,
                            int rails, const struct gcoll_search_opts *o,
                            struct gcoll_intra_graph *out, char *err, size_t errlen) {
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b && gpu_path(t, a, b)->type == GCOLL_PATH_DIS) {
        snprintf(err, errlen, "topology '%s': %s cannot reach %s", t->name,
                 t->dev[gpu_dev(t, a)].name, t->dev[gpu_dev(t, b)].name);
        return -1;
      }
  struct level_ctx lc = {.t = t, .n = n, .multi_node = multi_node, .rails = rails,
                         .want_rail = o->want_rail, .nwant = o->nwant,
                         .total_budget = SEARCH_TOTAL_BUDGET};
  lc.max_channels = max_channels > 0 ? max_channels : default_max_channels(t, n, multi_node);
  if (lc.max_channels > GCOLL_MAX_SEARCH_CHANNELS) lc.max_channels = GCOLL_MAX_SEARCH_CHANNELS;
  double levels[SEARCH_MAX_LEVELS];
  int nlv = make_levels(t, n, multi_node, levels);
  struct gcoll_intra_channel *trial = calloc(GCOLL_MAX_SEARCH_CHANNELS, sizeof(*trial));
  if (trial == NULL) {
    snprintf(err, errlen, "out of memory in channel search");
    return -1;
  }
  double best_total = 0, best_s = 0;
  for (int i = 0; i < nlv; i++) {
    if (levels[i] * lc.max_channels <= best_total * (1 + 1e-9)) break;
    int found = search_level(&lc, levels[i], trial);
    if (found > 0 && found >= o->min_channels && found * levels[i] > best_total * (1 + 1e-9)) {
      best_total = found * levels[i];
      best_s = levels[i];
      out->nchannels = found;
      memcpy(out->ch, trial, sizeof(*trial) * (size_t)found);
    }
  }
  free(trial);
  if (out->nchannels == 0) {
    /* No level fits (or budget spent): one channel with no bandwidth
     * reservation, rated at what it really gets alone. */
    struct capacity *cap = capacity_new(t);
    if (cap == NULL) {
      snprintf(err, errlen, "out of memory in channel search");
      return -1;
    }
    lc.total_budget = SEARCH_DFS_BUDGET;
    int rc = find_ring(&lc, cap, 0, 0, &out->ch[0]);
    capacity_free(cap);
    if (rc != 0) {
      snprintf(err, errlen, "topology '%s': no ring through %d GPUs%s", t->name, n,
               multi_node ? " and its NICs" : "");
      return -1;
    }
    out->nchannels = 1;
    best_s = ring_alone_bw(t, &out->ch[0], n, !multi_node);
  }
  out->ring_bw = best_s;
  out->net_bw = multi_node && usable_nics(t) > 0 ? best_s : 0;
  out->ring_worst_path = worst_ring_hop(t, out, !multi_node);
  search_chains(&lc, out, best_s);
  for (int c = 0; c < out->nchannels; c++) fill_names(t, &out->ch[c]);
  find_nvls_heads(t, n, out);
  return 0;
}

/* Rails first: a ring that leaves every node on the rail it entered by
 * stays on one leaf switch between nodes (rail-optimised fabrics put NIC k
 * of every node on leaf k), where a cross-rail hop crosses the spine. Only
 * a node on which no such ring exists at all gets cross-rail rings. */
static int search_gpus(const struct gcoll_topo *t, int n, int multi_node, int max_channels,
                       const struct gcoll_search_opts *o, struct gcoll_intra_graph *out,
                       char *err, size_t errlen) {
  if (multi_node && usable_nics(t) > 0 &&
      search_gpus_mode(t, n, multi_node, max_channels, 1, o, out, err, errlen) == 0) {
    if (!o->cross_rail) return 0;
    /* Fabrics without rails: the cross-rail rings when they carry more. */
    struct gcoll_intra_graph *free_g = calloc(1, sizeof(*free_g));
    char why[256];
    if (free_g != NULL) {
      free_g->nlocal = out->nlocal;
      if (search_gpus_mode(t, n, multi_node, max_channels, 0, o, free_g, why, sizeof(why)) == 0 &&
          free_g->nchannels * free_g->ring_bw > out->nchannels * out->ring_bw * (1 + 1e-9))
        *out = *free_g;
      free(free_g);
    }
    return 0;
  }
  memset(out->ch, 0, sizeof(out->ch));
  out->nchannels = 0;
  return search_gpus_mode(t, n, multi_node, max_channels, 0, o, out, err, errlen);
}

/* ---- CPU-only nodes ----------------------------------------------------- */

/* Ranks go to sockets in blocks proportional to their cores (largest
 * remainder), so rank order 0..n-1 keeps every socket's ranks together and
 * a ring in rank order crosses between sockets only where blocks meet. */
static void ranks_per_socket(const struct gcoll_topo *t, int n, int *count) {
  long total = 0;
  for (int s = 0; s < t->ncpu; s++)
    total += t->dev[t->cpu[s]].u.cpu.cores > 0 ? t->dev[t->cpu[s]].u.cpu.cores : 1;
  int given = 0;
  double *rem = malloc(((size_t)t->ncpu + 1) * sizeof(double));
  if (rem == NULL) {
    /* Out of memory: all ranks on the first socket is still a valid plan. */
    for (int s = 0; s < t->ncpu; s++) count[s] = s == 0 ? n : 0;
    return;
  }
  for (int s = 0; s < t->ncpu; s++) {
    int cores = t->dev[t->cpu[s]].u.cpu.cores > 0 ? t->dev[t->cpu[s]].u.cpu.cores : 1;
    double share = (double)n * cores / (double)total;
    count[s] = (int)floor(share);
    rem[s] = share - count[s];
    given += count[s];
  }
  while (given < n) {
    int best = 0;
    for (int s = 1; s < t->ncpu; s++)
      if (rem[s] > rem[best]) best = s;
    count[best]++;
    rem[best] = -1;
    given++;
  }
  free(rem);
}

static int search_cpus(const struct gcoll_topo *t, int n, int multi_node, int max_channels,
                       struct gcoll_intra_graph *out, char *err, size_t errlen) {
  int nch = max_channels > 0 && max_channels < 2 ? max_channels : 2;
  out->nchannels = nch;
  double bw = SEARCH_SHM_CHANNEL_BW;
  enum gcoll_path_type worst = n > 1 ? GCOLL_PATH_PHB : GCOLL_PATH_LOC;
  if (t->ncpu > 1 && n > 1) {
    int *count = malloc((size_t)t->ncpu * 2 * sizeof(int)), *used = count + t->ncpu, nused = 0;
    if (count == NULL) {
      snprintf(err, errlen, "out of memory in channel search");
      return -1;
    }
    ranks_per_socket(t, n, count);
    for (int s = 0; s < t->ncpu; s++)
      if (count[s] > 0) used[nused++] = s;
    /* Every channel crosses each boundary between consecutive socket
     * blocks (cyclically) once. */
    for (int i = 0; nused > 1 && i < nused; i++) {
      const struct gcoll_topo_path *p =
          gcoll_topo_path(t, t->cpu[used[i]], t->cpu[used[(i + 1) % nused]]);
      if (p->type == GCOLL_PATH_DIS) {
        snprintf(err, errlen, "topology '%s': %s cannot reach %s", t->name,
                 t->dev[t->cpu[used[i]]].name, t->dev[t->cpu[used[(i + 1) % nused]]].name);
        free(count);
        return -1;
      }
      if (p->bw / nch < bw) bw = p->bw / nch;
      if (p->type > worst) worst = p->type;
    }
    free(count);
  }
  int nic = -1;
  for (int k = 0; multi_node && k < t->nnic && nic < 0; k++)
    if (nic_ok(t, k)) nic = k;
  out->ring_bw = bw;
  out->net_bw = 0;
  if (nic >= 0) {
    double r = nic_rate(t, nic);
    if (r >= UNLIMITED && t->ncpu > 0) r = gcoll_topo_path(t, nic_dev(t, nic), t->cpu[0])->bw;
    out->net_bw = r >= UNLIMITED ? SEARCH_SHM_CHANNEL_BW : r / nch;
  }
  out->ring_worst_path = worst;
  for (int c = 0; c < nch; c++) {
    struct gcoll_intra_channel *ch = &out->ch[c];
    for (int i = 0; i < n; i++) ch->ring[i] = ch->chain[i] = i;
    ch->ring_nic_in = ch->ring_nic_out = ch->chain_nic = nic;
    ch->ring_pxn = -1;
    fill_names(t, ch);
  }
  out->nvls_nheads = 0;
  return 0;
}

/* The NICs a multi-node plan leaves out, as the class records them. */
static void note_left_out(const struct gcoll_topo *t, int multi_node, struct gcoll_intra_graph *g) {
  g->nleft_out = 0;
  for (int k = 0; multi_node && k < t->nnic; k++) {
    const char *why;
    if (gcoll_topo_nic_usable(t, k, &why, NULL, 0)) continue;
    if (g->nleft_out == GCOLL_MAX_LEFT_OUT) {
      g->left_out_more++;
      continue;
    }
    snprintf(g->left_out[g->nleft_out].nic, sizeof(g->left_out[0].nic), "%s",
             t->dev[t->nic[k]].name);
    snprintf(g->left_out[g->nleft_out++].why, sizeof(g->left_out[0].why), "%s", why);
  }
}

int gcoll_search_intra(const struct gcoll_topo *topo, int nlocal, int multi_node, int max_channels,
                       struct gcoll_intra_graph *out, char *err, size_t errlen) {
  struct gcoll_search_opts none = {0, NULL, 0, 0};
  return gcoll_search_intra_rails(topo, nlocal, multi_node, max_channels, &none, out, err, errlen);
}

int gcoll_search_intra_rails(const struct gcoll_topo *topo, int nlocal, int multi_node,
                             int max_channels, const struct gcoll_search_opts *opts,
                             struct gcoll_intra_graph *out, char *err, size_t errlen) {
  if (topo == NULL || out == NULL) {
    snprintf(err, errlen, "no topology to search");
    return -1;
  }
  memset(out, 0, sizeof(*out));
  if (topo->paths == NULL) {
    snprintf(err, errlen, "topology '%s': paths not computed", topo->name);
    return -1;
  }
  if (nlocal < 1 || nlocal > GCOLL_MAX_LOCAL_RANKS) {
    snprintf(err, errlen, "topology '%s': %d local ranks, must be 1 to %d", topo->name, nlocal,
             GCOLL_MAX_LOCAL_RANKS);
    return -1;
  }
  if (max_channels < 0) {
    snprintf(err, errlen, "negative channel limit %d", max_channels);
    return -1;
  }
  out->nlocal = nlocal;
  int rc;
  if (topo->ngpu == 0) {
    rc = search_cpus(topo, nlocal, multi_node, max_channels, out, err, errlen);
    note_left_out(topo, multi_node, out);
    return rc;
  }
  if (nlocal > topo->ngpu) {
    snprintf(err, errlen, "topology '%s': %d local ranks but only %d GPUs", topo->name, nlocal,
             topo->ngpu);
    return -1;
  }
  rc = search_gpus(topo, nlocal, multi_node, max_channels, opts, out, err, errlen);
  note_left_out(topo, multi_node, out);
  return rc;
}
