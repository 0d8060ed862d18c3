/* gcoll-plan show: a human summary of a plan, or one rank's view exactly as
 * the runtime loads it. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

const char plan_usage_show[] =
    "usage: gcoll-plan show PLAN [--rank R]\n"
    "\n"
    "Without --rank: summarises the plan (job, ranks, nodes, topology classes\n"
    "with their per-channel ring orders and NICs, trees, tuning table).\n"
    "With --rank R: prints rank R's view, loaded the way the runtime loads it\n"
    "(gcoll_plan_load_rank_view): its node, and per channel its ring neighbours\n"
    "and tree parent/children with the edge kind of each link; an edge to\n"
    "another node shows its NIC pair (this rank's NIC -> the peer's, with\n"
    "rails, 'cross-rail' where they differ, and the rank whose GPU a PXN send\n"
    "goes through). The summary counts the edges between nodes that change\n"
    "rails and lists each channel's NIC pairs.\n"
    "\n"
    "  -r, --rank R   show rank R's view (0 <= R < ranks)\n"
    "  -h, --help     this help\n"
    "\n"
    "Exit status: 0 shown, 1 unreadable plan or rank out of range, 2 usage.\n";

#define CMD "show"
#define SHOW_MAX_RUNS 20      /* node runs listed before eliding */
#define SHOW_MAX_RANGES 32    /* ring node order items before eliding */

static void print_job(const char *path, const struct gcoll_plan *plan) {
  printf("plan:      %s (format %d, written by %s)\n", path, plan->version,
         plan->generator[0] ? plan->generator : "unknown");
  if (plan->job.id >= 0 || plan->job.step >= 0 || plan->job.created[0]) {
    printf("job:       ");
    if (plan->job.id >= 0) printf("id %" PRId64 ", ", plan->job.id);
    if (plan->job.step >= 0) printf("step %" PRId64 ", ", plan->job.step);
    printf("created %s\n", plan->job.created[0] ? plan->job.created : "unknown");
  } else {
    printf("job:       none recorded\n");
  }
  printf("ranks:     %d on %d node%s, %d channels (%d searched per class, each used twice)\n",
         plan->nranks, plan->nnodes, plan->nnodes == 1 ? "" : "s", plan->nchannels,
         plan->nchannels / 2);
}

static void print_perm(const int *v, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", v[i]);
  printf("]");
}

static void print_class(const struct gcoll_plan *plan, int k) {
  const struct gcoll_plan_class *cls = &plan->classes[k];
  const struct gcoll_intra_graph *g = &cls->graph;
  int nodes = 0;
  for (int n = 0; n < plan->nnodes; n++) nodes += plan->node_class[n] == k;
  printf("  %s: hash %08" PRIx32 ", %d node%s, %d local rank%s, intra %s\n", cls->name,
         cls->hash, nodes, nodes == 1 ? "" : "s", cls->nlocal, cls->nlocal == 1 ? "" : "s",
         gcoll_edge_name(cls->intra_edge));
  if (cls->has_gpu_map) {
    printf("    GPUs driven by local ranks 0..%d: ", cls->nlocal - 1);
    print_perm(cls->gpu, cls->nlocal);
    printf("\n");
  }
  if (cls->has_gpu_busids) {
    printf("    GPU bus ids:");
    for (int i = 0; i < cls->nlocal; i++) printf(" %s", cls->gpu_busid[i]);
    printf("\n");
  }
  printf("    bandwidth per channel: ring %.1f GB/s, net %.1f GB/s\n", g->ring_bw, g->net_bw);
  for (int s = 0; s < g->nchannels; s++) {
    const struct gcoll_intra_channel *ch = &g->ch[s];
    printf("    ring %2d: ", s);
    print_perm(ch->ring, cls->nlocal);
    if (ch->ring_nic_in_name[0] || ch->ring_nic_out_name[0])
      printf("  nic in %s out %s", ch->ring_nic_in_name[0] ? ch->ring_nic_in_name : "-",
             ch->ring_nic_out_name[0] ? ch->ring_nic_out_name : "-");
    if (ch->ring_rail_in >= 0 || ch->ring_rail_out >= 0)
      printf(" (rails %d/%d)", ch->ring_rail_in, ch->ring_rail_out);
    if (ch->ring_pxn >= 0) printf(" last sends via local rank %d (PXN)", ch->ring_pxn);
    printf("\n");
  }
  for (int s = 0; s < g->nchannels; s++) {
    const struct gcoll_intra_channel *ch = &g->ch[s];
    printf("    tree %2d: chain ", s);
    print_perm(ch->chain, cls->nlocal);
    if (ch->chain_nic_name[0]) printf("  nic %s", ch->chain_nic_name);
    if (ch->chain_rail >= 0) printf(" (rail %d)", ch->chain_rail);
    printf("\n");
  }
  for (int i = 0; i < g->nleft_out; i++)
    printf("    NIC %s left out: %s\n", g->left_out[i].nic,
           strcmp(g->left_out[i].why, "down") == 0 ? "port down" : "below its line rate");
  if (g->left_out_more > 0) printf("    ... and %d more NICs left out\n", g->left_out_more);
  if (g->nvls_nheads > 0) {
    printf("    nvls heads: ");
    print_perm(g->nvls_heads, g->nvls_nheads);
    printf("\n");
  }
}

static int same_run(const struct gcoll_plan *plan, int a, int b) {
  return plan->node_class[b] == plan->node_class[a] &&
         gcoll_plan_node_domain(plan, b) == gcoll_plan_node_domain(plan, a);
}

/* Prints runs of consecutive nodes of one class (and NVLink domain) as the
 * plan file groups them, with their hosts compressed to a Slurm host list. */
static void print_nodes(const struct gcoll_plan *plan) {
  printf("nodes:\n");
  int runs = 0;
  for (int a = 0; a < plan->nnodes;) {
    int b = a;
    while (b + 1 < plan->nnodes && same_run(plan, a, b + 1)) b++;
    if (runs == SHOW_MAX_RUNS) {
      int left = 0;
      for (int n = a; n < plan->nnodes; n = b + 1, left++) {
        b = n;
        while (b + 1 < plan->nnodes && same_run(plan, n, b + 1)) b++;
      }
      printf("  ... %d more run%s of nodes\n", left, left == 1 ? "" : "s");
      return;
    }
    const struct gcoll_plan_class *cls = &plan->classes[plan->node_class[a]];
    /* Under a rank order each node lists its own ranks. */
    if (plan->rank_of_slot != NULL) b = a;
    char *hosts = gcoll_hostlist_compress(plan->node_host + a, b - a + 1);
    int ranks[GCOLL_MAX_LOCAL_RANKS];
    for (int i = 0; i < cls->nlocal; i++)
      ranks[i] = gcoll_plan_rank_at(plan, plan->node_first_rank[a] + i);
    char *list = plan->rank_of_slot != NULL ? gcoll_ranklist_format(ranks, cls->nlocal) : NULL;
    if (a == b)
      printf("  node %d", a);
    else
      printf("  nodes %d-%d", a, b);
    printf(": %s, %s, ", hosts ? hosts : "(out of memory)", cls->name);
    if (gcoll_plan_node_domain(plan, a) >= 0)
      printf("domain %d, ", gcoll_plan_node_domain(plan, a));
    printf("ranks ");
    if (list != NULL)
      printf("%s\n", list);
    else
      printf("%d-%d\n", plan->node_first_rank[a], plan->node_first_rank[b] + cls->nlocal - 1);
    free(list);
    free(hosts);
    runs++;
    a = b + 1;
  }
}

/* The multi-node NVLink domains: which nodes each holds (node indices as
 * ranges; hosts when they compress to one expression). */
static void print_domains(const struct gcoll_plan *plan) {
  int ndom = 0, alone = 0;
  for (int n = 0; n < plan->nnodes; n++) {
    int d = gcoll_plan_node_domain(plan, n);
    if (d >= ndom) ndom = d + 1;
    alone += d < 0;
  }
  if (ndom == 0) return;
  int *nodes = malloc((size_t)plan->nnodes * sizeof(int));
  char **hosts = malloc((size_t)plan->nnodes * sizeof(char *));
  if (nodes == NULL || hosts == NULL) {
    free(nodes);
    free(hosts);
    printf("nvlink domains: (out of memory)\n");
    return;
  }
  int listed = 0;
  printf("nvlink domains: edges between nodes of one domain are NVLink (p2p), the network "
         "joins domains%s\n", alone ? "; other nodes are in none" : "");
  for (int d = 0; d < ndom; d++) {
    int m = 0;
    for (int n = 0; n < plan->nnodes; n++)
      if (gcoll_plan_node_domain(plan, n) == d) {
        hosts[m] = plan->node_host[n];
        nodes[m++] = n;
      }
    if (m == 0) continue;
    if (listed++ == SHOW_MAX_RUNS) {
      printf("  ... more domains\n");
      break;
    }
    printf("  domain %d: %d node%s (", d, m, m == 1 ? "" : "s");
    cli_print_ranges(stdout, nodes, m, SHOW_MAX_RANGES);
    char *expr = m <= 4096 && gcoll_hostlist_single_run(hosts, m, 256) == m
                     ? gcoll_hostlist_compress(hosts, m) : NULL;
    printf(")%s%s\n", expr ? ", " : "", expr ? expr : "");
    free(expr);
  }
  free(nodes);
  free(hosts);
}

static void print_summary(const char *path, const struct gcoll_plan *plan) {
  print_job(path, plan);
  printf("topology classes: %d\n", plan->nclasses);
  for (int k = 0; k < plan->nclasses; k++) print_class(plan, k);
  print_nodes(plan);
  print_domains(plan);
  printf("ring:      node order ");
  cli_print_ranges(stdout, plan->ring_node_order, plan->nnodes, SHOW_MAX_RANGES);
  printf("\n");
  printf("tree:      double binary, t1 root node %d, t2 root node %d (%s construction)\n",
         plan->t1_root, plan->t2_root,
         plan->t2_construction == GCOLL_T2_MIRROR ? "mirror" : "shift");
  cli_print_rails(plan);
  printf("tuning:\n");
  cli_print_tuning(stdout, "  ", plan->ntuning, plan->tuning);
}

static void print_edge_rank(int rank, enum gcoll_edge e) {
  if (rank < 0)
    printf("none");
  else
    printf("%d (%s)", rank, gcoll_edge_name(e));
}

/* Views of the ranks at the other end of this rank's edges to other
 * nodes, loaded as the runtime loads its own: a handful per rank. */
#define PEER_CACHE 8
struct peers {
  const char *path;
  int n, rank[PEER_CACHE];
  struct gcoll_rank_view *view[PEER_CACHE];
};

static const struct gcoll_rank_view *peer_view(struct peers *p, int rank) {
  for (int i = 0; i < p->n; i++)
    if (p->rank[i] == rank) return p->view[i];
  char err[PLAN_CLI_ERRLEN];
  struct gcoll_rank_view *v = calloc(1, sizeof(*v));
  if (v == NULL || gcoll_plan_load_rank_view(p->path, rank, v, err, sizeof(err)) != 0) {
    free(v);
    return NULL;
  }
  if (p->n == PEER_CACHE) {
    free(p->view[0]);
    memmove(p->view, p->view + 1, (PEER_CACHE - 1) * sizeof(p->view[0]));
    memmove(p->rank, p->rank + 1, (PEER_CACHE - 1) * sizeof(p->rank[0]));
    p->n--;
  }
  p->rank[p->n] = rank;
  p->view[p->n++] = v;
  return v;
}

static void peers_free(struct peers *p) {
  for (int i = 0; i < p->n; i++) free(p->view[i]);
}

static void print_rank_view(const struct gcoll_rank_view *v, struct peers *peers) {
  printf("rank %d of %d\n", v->rank, v->nranks);
  printf("node:      %d of %d, host %s\n", v->node, v->nnodes, v->host);
  printf("local:     rank %d of %d", v->local_rank, v->local_nranks);
  if (v->gpu >= 0) printf(", drives GPU %d of the node", v->gpu);
  if (v->gpu_busid[0] != '\0') printf(" (%s)", v->gpu_busid);
  printf("\n");
  printf("topology:  %s (hash %08" PRIx32 ")\n", v->topology, v->topology_hash);
  if (v->job_id >= 0 || v->step_id >= 0) {
    printf("job:       ");
    if (v->job_id >= 0) printf("id %" PRId64 "%s", v->job_id, v->step_id >= 0 ? ", " : "");
    if (v->step_id >= 0) printf("step %" PRId64, v->step_id);
    printf("\n");
  }
  if (v->nvl_domain >= 0)
    printf("domain:    NVLink domain %d of %d node%s (edges to its other nodes are p2p)\n",
           v->nvl_domain, v->nvl_domain_nnodes, v->nvl_domain_nnodes == 1 ? "" : "s");
  printf("channels:  %d\n", v->nchannels);
  for (int c = 0; c < v->nchannels && c < GCOLL_MAX_CHANNELS; c++) {
    const struct gcoll_ring_link *r = &v->ring[c];
    printf("ring %2d: prev ", c);
    print_edge_rank(r->prev, r->prev_edge);
    printf(" -> %d -> next ", v->rank);
    print_edge_rank(r->next, r->next_edge);
    const struct gcoll_rank_view *pv;
    if (r->nic_in[0] && r->prev_edge == GCOLL_EDGE_NET && (pv = peer_view(peers, r->prev)))
      cli_print_nic_pair("in", r->nic_in, r->rail_in, pv->ring[c].nic_out, pv->ring[c].rail_out,
                         -1);
    else if (r->nic_in[0])
      printf("  nic_in %s", r->nic_in);
    if (r->nic_out[0] && r->next_edge == GCOLL_EDGE_NET && (pv = peer_view(peers, r->next)))
      cli_print_nic_pair("out", r->nic_out, r->rail_out, pv->ring[c].nic_in, pv->ring[c].rail_in,
                         r->nic_out_via);
    else if (r->nic_out[0])
      printf("  nic_out %s", r->nic_out);
    printf("\n");
  }
  for (int c = 0; c < v->nchannels && c < GCOLL_MAX_CHANNELS; c++) {
    const struct gcoll_tree_link *t = &v->tree[c];
    printf("tree %2d (t%d): parent ", c, t->tree);
    print_edge_rank(t->parent, t->parent_edge);
    printf(" children [");
    for (int i = 0; i < t->nchildren && i < GCOLL_MAX_TREE_ARITY; i++) {
      if (i) printf(", ");
      print_edge_rank(t->children[i], t->child_edge[i]);
    }
    printf("]");
    const struct gcoll_rank_view *pv;
    if (t->nic[0] && t->parent >= 0 && t->parent_edge == GCOLL_EDGE_NET &&
        (pv = peer_view(peers, t->parent)))
      cli_print_nic_pair("up", t->nic, t->rail, pv->tree[c].nic, pv->tree[c].rail, -1);
    else if (t->nic[0])
      printf("  nic %s", t->nic);
    printf("\n");
  }
  if (v->nvls_nheads > 0) {
    printf("nvls heads:");
    for (int i = 0; i < v->nvls_nheads && i < GCOLL_MAX_NVLS_HEADS; i++)
      printf(" %d", v->nvls_heads[i]);
    printf("\n");
  } else {
    printf("nvls:      none\n");
  }
  printf("tuning:\n");
  cli_print_tuning(stdout, "  ", v->ntuning, v->tuning);
}

int plan_cmd_show(int argc, char **argv) {
  static const struct option longopts[] = {{"rank", required_argument, NULL, 'r'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  long long rank = -1;
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":r:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'r':
      if (cli_parse_long(CMD, "--rank", optarg, 0, GCOLL_MAX_RANKS - 1, &rank))
        return PLAN_EXIT_USAGE;
      break;
    case 'h': return cli_print_usage(plan_usage_show);
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (optind >= argc) return cli_usage_error(CMD, "missing PLAN file");
  if (optind + 1 < argc) return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
  const char *path = argv[optind];
  char err[PLAN_CLI_ERRLEN];

  if (rank >= 0) {
    struct gcoll_rank_view *view = calloc(1, sizeof(*view));
    if (view == NULL) return cli_fail("out of memory");
    int rc = gcoll_plan_load_rank_view(path, (int)rank, view, err, sizeof(err));
    struct peers peers = {.path = path};
    if (rc == 0) print_rank_view(view, &peers);
    peers_free(&peers);
    free(view);
    return rc == 0 ? PLAN_EXIT_OK : cli_fail("%s", err);
  }
  struct gcoll_plan *plan = gcoll_plan_read_file(path, err, sizeof(err));
  if (plan == NULL) return cli_fail("%s", err);
  print_summary(path, plan);
  gcoll_plan_free(plan);
  return PLAN_EXIT_OK;
}
