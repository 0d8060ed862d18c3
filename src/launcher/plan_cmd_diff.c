/* gcoll-plan diff: semantic comparison of two plans. Differences are stated
 * in the plan's own terms (classes, nodes, ring order, trees, tuning), and
 * long lists are summarised, so that comparing plans of 10^4 nodes stays
 * readable. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

const char plan_usage_diff[] =
    "usage: gcoll-plan diff [-q] PLAN_A PLAN_B\n"
    "\n"
    "Compares two plans by meaning, not text: job id/step, ranks, nodes,\n"
    "channels, topology classes (added, removed, or changed hash, ranks,\n"
    "bandwidth, ring orders, tree chains, NICs per channel, NVLS heads), each\n"
    "node's class and host, the ring's node order, both trees' roots and\n"
    "parents, and the tuning table. Long lists are summarised: the first 10\n"
    "differences and a count. The creation time and the generator are ignored.\n"
    "\n"
    "  -q, --quiet   print nothing; only the exit status tells\n"
    "  -h, --help    this help\n"
    "\n"
    "Exit status (as diff(1)): 0 equivalent, 1 different, 2 trouble (unreadable\n"
    "plan, usage).\n";

#define CMD "diff"
#define DIFF_SHOW_FIRST 10

struct differ {
  const char *a_name, *b_name;
  int quiet;
  int ndiff;
};

static void say(struct differ *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct differ *d, const char *fmt, ...) {
  if (d->ndiff++ == 0 && !d->quiet) printf("--- %s\n+++ %s\n", d->a_name, d->b_name);
  if (d->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

static void diff_ll(struct differ *d, const char *what, long long a, long long b) {
  if (a != b) say(d, "%s: %lld -> %lld", what, a, b);
}

static void diff_str(struct differ *d, const char *what, const char *a, const char *b) {
  if (strcmp(a, b) != 0) say(d, "%s: %s -> %s", what, a[0] ? a : "(none)", b[0] ? b : "(none)");
}

static int same_ints(const int *a, const int *b, int n) {
  return n <= 0 || memcmp(a, b, (size_t)n * sizeof(int)) == 0;
}

/* "[0 7 6 ...]" into buf, eliding the middle of long lists. */
static const char *fmt_list(const int *v, int n, char *buf, size_t len) {
  size_t pos = 0;
  pos += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < n && pos < len; i++) {
    if (i == 24 && n > 32) {
      pos += (size_t)snprintf(buf + pos, len - pos, " ... (%d more)", n - i);
      break;
    }
    pos += (size_t)snprintf(buf + pos, len - pos, "%s%d", i ? " " : "", v[i]);
  }
  if (pos < len) snprintf(buf + pos, len - pos, "]");
  return buf;
}

static void diff_list(struct differ *d, const char *what, const int *a, int na, const int *b,
                      int nb) {
  if (na == nb && same_ints(a, b, na)) return;
  char ba[512], bb[512];
  say(d, "%s: %s -> %s", what, fmt_list(a, na, ba, sizeof(ba)), fmt_list(b, nb, bb, sizeof(bb)));
}

/* A rail or PXN local rank, -1 printed as "none". */
static void diff_opt(struct differ *d, const char *what, int a, int b) {
  if (a == b) return;
  char ba[16] = "none", bb[16] = "none";
  if (a >= 0) snprintf(ba, sizeof(ba), "%d", a);
  if (b >= 0) snprintf(bb, sizeof(bb), "%d", b);
  say(d, "%s: %s -> %s", what, ba, bb);
}

static void diff_channel(struct differ *d, const char *cname, int s, int nla, int nlb,
                         const struct gcoll_intra_channel *a,
                         const struct gcoll_intra_channel *b) {
  char what[160];
  snprintf(what, sizeof(what), "class %s: ring %d order", cname, s);
  diff_list(d, what, a->ring, nla, b->ring, nlb);
  snprintf(what, sizeof(what), "class %s: ring %d nic_in", cname, s);
  diff_str(d, what, a->ring_nic_in_name, b->ring_nic_in_name);
  snprintf(what, sizeof(what), "class %s: ring %d nic_out", cname, s);
  diff_str(d, what, a->ring_nic_out_name, b->ring_nic_out_name);
  snprintf(what, sizeof(what), "class %s: ring %d rail_in", cname, s);
  diff_opt(d, what, a->ring_rail_in, b->ring_rail_in);
  snprintf(what, sizeof(what), "class %s: ring %d rail_out", cname, s);
  diff_opt(d, what, a->ring_rail_out, b->ring_rail_out);
  snprintf(what, sizeof(what), "class %s: ring %d pxn", cname, s);
  diff_opt(d, what, a->ring_pxn, b->ring_pxn);
  snprintf(what, sizeof(what), "class %s: tree %d chain", cname, s);
  diff_list(d, what, a->chain, nla, b->chain, nlb);
  snprintf(what, sizeof(what), "class %s: tree %d nic", cname, s);
  diff_str(d, what, a->chain_nic_name, b->chain_nic_name);
  snprintf(what, sizeof(what), "class %s: tree %d rail", cname, s);
  diff_opt(d, what, a->chain_rail, b->chain_rail);
}

/* "mlx5_3 (down), mlx5_5 (slow)", or "none". */
static const char *fmt_left_out(const struct gcoll_intra_graph *g, char *buf, size_t len) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int i = 0; i < g->nleft_out && pos < len; i++)
    pos += (size_t)snprintf(buf + pos, len - pos, "%s%s (%s)", i ? ", " : "", g->left_out[i].nic,
                            g->left_out[i].why);
  if (g->left_out_more > 0 && pos < len)
    snprintf(buf + pos, len - pos, " and %d more", g->left_out_more);
  return buf[0] ? buf : "none";
}

static void diff_class(struct differ *d, const struct gcoll_plan_class *a,
                       const struct gcoll_plan_class *b) {
  char what[160];
  const struct gcoll_intra_graph *ga = &a->graph, *gb = &b->graph;
  if (a->hash != b->hash)
    say(d, "class %s: hash %08" PRIx32 " -> %08" PRIx32, a->name, a->hash, b->hash);
  snprintf(what, sizeof(what), "class %s: local ranks", a->name);
  diff_ll(d, what, a->nlocal, b->nlocal);
  snprintf(what, sizeof(what), "class %s: intra", a->name);
  diff_str(d, what, gcoll_edge_name(a->intra_edge), gcoll_edge_name(b->intra_edge));
  /* Without a map local rank i drives GPU i: compare what is driven. */
  int gpu_a[GCOLL_MAX_LOCAL_RANKS], gpu_b[GCOLL_MAX_LOCAL_RANKS];
  for (int i = 0; i < a->nlocal; i++) gpu_a[i] = a->has_gpu_map ? a->gpu[i] : i;
  for (int i = 0; i < b->nlocal; i++) gpu_b[i] = b->has_gpu_map ? b->gpu[i] : i;
  if (a->intra_edge == GCOLL_EDGE_P2P || b->intra_edge == GCOLL_EDGE_P2P) {
    snprintf(what, sizeof(what), "class %s: GPUs", a->name);
    diff_list(d, what, gpu_a, a->nlocal, gpu_b, b->nlocal);
    int n = a->nlocal < b->nlocal ? a->nlocal : b->nlocal;
    if (a->has_gpu_busids != b->has_gpu_busids)
      say(d, "class %s: GPU bus ids %s -> %s", a->name, a->has_gpu_busids ? "given" : "none",
          b->has_gpu_busids ? "given" : "none");
    else
      for (int i = 0; i < n && a->has_gpu_busids; i++)
        if (strcmp(a->gpu_busid[i], b->gpu_busid[i]) != 0)
          say(d, "class %s: local rank %d GPU bus id %s -> %s", a->name, i, a->gpu_busid[i],
              b->gpu_busid[i]);
  }
  /* Bandwidths went through decimal text; compare at the precision plans
   * are written with rather than bit for bit. */
  if (fabs(ga->ring_bw - gb->ring_bw) > 1e-6 || fabs(ga->net_bw - gb->net_bw) > 1e-6)
    say(d, "class %s: bandwidth ring %.1f net %.1f -> ring %.1f net %.1f GB/s", a->name,
        ga->ring_bw, ga->net_bw, gb->ring_bw, gb->net_bw);
  snprintf(what, sizeof(what), "class %s: searched channels", a->name);
  diff_ll(d, what, ga->nchannels, gb->nchannels);
  int common = ga->nchannels < gb->nchannels ? ga->nchannels : gb->nchannels;
  for (int s = 0; s < common; s++)
    diff_channel(d, a->name, s, a->nlocal, b->nlocal, &ga->ch[s], &gb->ch[s]);
  snprintf(what, sizeof(what), "class %s: nvls heads", a->name);
  diff_list(d, what, ga->nvls_heads, ga->nvls_nheads, gb->nvls_heads, gb->nvls_nheads);
  char la[1200], lb[1200];
  fmt_left_out(ga, la, sizeof(la));
  fmt_left_out(gb, lb, sizeof(lb));
  if (strcmp(la, lb) != 0) say(d, "class %s: NICs left out: %s -> %s", a->name, la, lb);
}

static const struct gcoll_plan_class *find_class(const struct gcoll_plan *p, const char *name) {
  for (int k = 0; k < p->nclasses; k++)
    if (strcmp(p->classes[k].name, name) == 0) return &p->classes[k];
  return NULL;
}

static void diff_classes(struct differ *d, const struct gcoll_plan *a,
                         const struct gcoll_plan *b) {
  for (int k = 0; k < a->nclasses; k++) {
    const struct gcoll_plan_class *ca = &a->classes[k], *cb = find_class(b, ca->name);
    char lo[1200];
    if (cb == NULL)
      say(d, "- class %s (hash %08" PRIx32 ", %d local ranks%s%s)", ca->name, ca->hash,
          ca->nlocal, ca->graph.nleft_out ? ", NICs left out: " : "",
          ca->graph.nleft_out ? fmt_left_out(&ca->graph, lo, sizeof(lo)) : "");
    else
      diff_class(d, ca, cb);
  }
  for (int k = 0; k < b->nclasses; k++) {
    const struct gcoll_plan_class *cb = &b->classes[k];
    char lo[1200];
    if (find_class(a, cb->name) == NULL)
      say(d, "+ class %s (hash %08" PRIx32 ", %d local ranks%s%s)", cb->name, cb->hash,
          cb->nlocal, cb->graph.nleft_out ? ", NICs left out: " : "",
          cb->graph.nleft_out ? fmt_left_out(&cb->graph, lo, sizeof(lo)) : "");
  }
}

/* Per-node differences, counted and the first few shown:
 * "node class: 3 nodes differ: 0 (a -> b), 4 (a -> b), 7 (a -> c)". */
struct node_diffs {
  int count;
  char shown[DIFF_SHOW_FIRST * 160];
  size_t len;
};

static void note(struct node_diffs *nd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct node_diffs *nd, const char *fmt, ...) {
  if (nd->count++ >= DIFF_SHOW_FIRST || nd->len >= sizeof(nd->shown)) return;
  if (nd->len > 0)
    nd->len += (size_t)snprintf(nd->shown + nd->len, sizeof(nd->shown) - nd->len, ", ");
  if (nd->len >= sizeof(nd->shown)) return;
  va_list ap;
  va_start(ap, fmt);
  nd->len += (size_t)vsnprintf(nd->shown + nd->len, sizeof(nd->shown) - nd->len, fmt, ap);
  va_end(ap);
}

/* unit is singular ("node"); an 's' makes the plural. */
static void report(struct differ *d, const char *what, const char *unit,
                   const struct node_diffs *nd) {
  if (nd->count == 0) return;
  if (nd->count > DIFF_SHOW_FIRST)
    say(d, "%s: %d %ss differ: %s, ... (%d more)", what, nd->count, unit, nd->shown,
        nd->count - DIFF_SHOW_FIRST);
  else if (nd->count == 1)
    say(d, "%s: 1 %s differs: %s", what, unit, nd->shown);
  else
    say(d, "%s: %d %ss differ: %s", what, nd->count, unit, nd->shown);
}

static void diff_nodes(struct differ *d, const struct gcoll_plan *a, const struct gcoll_plan *b) {
  int n = a->nnodes < b->nnodes ? a->nnodes : b->nnodes;
  struct node_diffs cls = {0}, host = {0}, dom = {0};
  for (int i = 0; i < n; i++) {
    const char *ka = a->classes[a->node_class[i]].name, *kb = b->classes[b->node_class[i]].name;
    if (strcmp(ka, kb) != 0) note(&cls, "%d (%s -> %s)", i, ka, kb);
    if (strcmp(a->node_host[i], b->node_host[i]) != 0)
      note(&host, "%d (%s -> %s)", i, a->node_host[i], b->node_host[i]);
    /* gcoll numbers domains by first appearance: one partition, one numbering. */
    int da = gcoll_plan_node_domain(a, i), db = gcoll_plan_node_domain(b, i);
    if (da != db) note(&dom, "%d (%d -> %d)", i, da, db);
  }
  report(d, "node class", "node", &cls);
  report(d, "node host", "node", &host);
  report(d, "node NVLink domain (-1: none)", "node", &dom);
  /* Which job rank sits where (cyclic layouts, interleaved groups). */
  struct node_diffs order = {0};
  int slots = a->nranks < b->nranks ? a->nranks : b->nranks;
  for (int s = 0; s < slots; s++)
    if (gcoll_plan_rank_at(a, s) != gcoll_plan_rank_at(b, s))
      note(&order, "%d (rank %d -> %d)", s, gcoll_plan_rank_at(a, s), gcoll_plan_rank_at(b, s));
  report(d, "rank order", "slot", &order);
}

static void diff_ring_order(struct differ *d, const struct gcoll_plan *a,
                            const struct gcoll_plan *b) {
  if (a->nnodes != b->nnodes) {
    char ba[512], bb[512];
    say(d, "ring node order: %s -> %s",
        fmt_list(a->ring_node_order, a->nnodes, ba, sizeof(ba)),
        fmt_list(b->ring_node_order, b->nnodes, bb, sizeof(bb)));
    return;
  }
  struct node_diffs nd = {0};
  for (int i = 0; i < a->nnodes; i++)
    if (a->ring_node_order[i] != b->ring_node_order[i])
      note(&nd, "%d (%d -> %d)", i, a->ring_node_order[i], b->ring_node_order[i]);
  report(d, "ring node order", "position", &nd);
}

static void diff_tree(struct differ *d, const char *name, int root_a, int root_b,
                      const int *pa, const int *pb, int n) {
  char what[64];
  snprintf(what, sizeof(what), "tree %s root", name);
  diff_ll(d, what, root_a, root_b);
  struct node_diffs nd = {0};
  for (int i = 0; i < n; i++)
    if (pa[i] != pb[i]) note(&nd, "%d (%d -> %d)", i, pa[i], pb[i]);
  snprintf(what, sizeof(what), "tree %s parent", name);
  report(d, what, "node", &nd);
}

static void diff_trees(struct differ *d, const struct gcoll_plan *a, const struct gcoll_plan *b) {
  int n = a->nnodes < b->nnodes ? a->nnodes : b->nnodes;
  diff_tree(d, "t1", a->t1_root, b->t1_root, a->t1_parent, b->t1_parent, n);
  diff_tree(d, "t2", a->t2_root, b->t2_root, a->t2_parent, b->t2_parent, n);
  if (a->t2_construction != b->t2_construction)
    say(d, "tree t2 construction: %s -> %s",
        a->t2_construction == GCOLL_T2_MIRROR ? "mirror" : "shift",
        b->t2_construction == GCOLL_T2_MIRROR ? "mirror" : "shift");
}

static const char *fmt_row(const struct gcoll_tuning_entry *e, char *buf, size_t len) {
  char size[32];
  if (e->max_bytes == UINT64_MAX)
    snprintf(buf, len, "unlimited %s/%s %dch", gcoll_algo_name(e->algo),
             gcoll_proto_name(e->proto), e->nchannels);
  else
    snprintf(buf, len, "<= %s %s/%s %dch", cli_bytes(e->max_bytes, size, sizeof(size)),
             gcoll_algo_name(e->algo), gcoll_proto_name(e->proto), e->nchannels);
  return buf;
}

static int same_row(const struct gcoll_tuning_entry *a, const struct gcoll_tuning_entry *b) {
  return a->max_bytes == b->max_bytes && a->algo == b->algo && a->proto == b->proto &&
         a->nchannels == b->nchannels;
}

static void diff_tuning(struct differ *d, const struct gcoll_plan *a, const struct gcoll_plan *b) {
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    int na = a->ntuning[c], nb = b->ntuning[c];
    int n = na > nb ? na : nb;
    const char *coll = gcoll_coll_name((enum gcoll_coll)c);
    for (int i = 0; i < n && i < GCOLL_MAX_TUNING; i++) {
      char ra[96], rb[96];
      if (i >= na)
        say(d, "tuning %s row %d: + %s", coll, i, fmt_row(&b->tuning[c][i], rb, sizeof(rb)));
      else if (i >= nb)
        say(d, "tuning %s row %d: - %s", coll, i, fmt_row(&a->tuning[c][i], ra, sizeof(ra)));
      else if (!same_row(&a->tuning[c][i], &b->tuning[c][i]))
        say(d, "tuning %s row %d: %s -> %s", coll, i, fmt_row(&a->tuning[c][i], ra, sizeof(ra)),
            fmt_row(&b->tuning[c][i], rb, sizeof(rb)));
    }
  }
}

static void diff_plans(struct differ *d, const struct gcoll_plan *a, const struct gcoll_plan *b) {
  diff_ll(d, "format version", a->version, b->version);
  diff_ll(d, "job id", a->job.id, b->job.id);
  diff_ll(d, "job step", a->job.step, b->job.step);
  diff_ll(d, "ranks", a->nranks, b->nranks);
  diff_ll(d, "nodes", a->nnodes, b->nnodes);
  diff_ll(d, "channels", a->nchannels, b->nchannels);
  diff_classes(d, a, b);
  diff_nodes(d, a, b);
  diff_ring_order(d, a, b);
  diff_trees(d, a, b);
  diff_tuning(d, a, b);
}

int plan_cmd_diff(int argc, char **argv) {
  static const struct option longopts[] = {{"quiet", no_argument, NULL, 'q'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  struct differ d = {0};
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
    switch (c) {
    case 'q': d.quiet = 1; break;
    case 'h': return cli_print_usage(plan_usage_diff);
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (argc - optind != 2) return cli_usage_error(CMD, "needs exactly two plan files");
  d.a_name = argv[optind];
  d.b_name = argv[optind + 1];

  char err[PLAN_CLI_ERRLEN];
  struct gcoll_plan *a = gcoll_plan_read_file(d.a_name, err, sizeof(err));
  if (a == NULL) {
    cli_fail("%s", err);
    return PLAN_EXIT_USAGE;
  }
  struct gcoll_plan *b = gcoll_plan_read_file(d.b_name, err, sizeof(err));
  if (b == NULL) {
    cli_fail("%s", err);
    gcoll_plan_free(a);
    return PLAN_EXIT_USAGE;
  }
  diff_plans(&d, a, b);
  gcoll_plan_free(a);
  gcoll_plan_free(b);
  return d.ndiff == 0 ? PLAN_EXIT_OK : PLAN_EXIT_FAIL;
}
