/* gcoll-plan dot: a plan's ring and/or tree of one channel as a Graphviz
 * digraph, one cluster per node. Edges come from the same per-rank views
 * the runtime uses, so the picture shows what ranks will actually do. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

#define CMD "dot"
#define DOT_DEFAULT_MAX_RANKS 4096

const char plan_usage_dot[] =
    "usage: gcoll-plan dot PLAN [--channel C] [--ring] [--tree] [--max-ranks N]\n"
    "\n"
    "Writes a Graphviz digraph of PLAN on standard output: one cluster per node\n"
    "(labelled with its host and topology class), one vertex per rank, and the\n"
    "edges of channel C. Ring edges go from each rank to its next; tree edges\n"
    "(dashed) from parent to child. Edges inside a node are blue, edges over the\n"
    "network red. Render with e.g.  gcoll-plan dot plan.yaml | dot -Tsvg > plan.svg\n"
    "\n"
    "  -c, --channel C     channel to draw (default 0)\n"
    "  -r, --ring          draw the ring (the default when neither is given)\n"
    "  -t, --tree          draw the tree (with --ring: both)\n"
    "  -m, --max-ranks N   refuse plans of more than N ranks (default 4096)\n"
    "  -h, --help          this help\n"
    "\n"
    "Exit status: 0 written, 1 unreadable plan or too many ranks, 2 usage.\n";

struct dot_opts {
  long long channel, max_ranks;
  int ring, tree;
  const char *path;
};

/* DOT double-quoted string: only '"' and '\\' need escaping, and newlines
 * must not end up raw in a label. */
static void put_quoted(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    fputc(*s == '\n' || *s == '\r' ? ' ' : *s, out);
  }
  fputc('"', out);
}

static const char *edge_colour(enum gcoll_edge e) {
  return e == GCOLL_EDGE_NET ? "red" : "blue";
}

static void put_clusters(FILE *out, const struct gcoll_plan *plan) {
  for (int n = 0; n < plan->nnodes; n++) {
    const struct gcoll_plan_class *cls = &plan->classes[plan->node_class[n]];
    char label[GCOLL_PLAN_HOST_MAX + GCOLL_PLAN_NAME_MAX + 32];
    snprintf(label, sizeof(label), "node %d: %s (%s)", n, plan->node_host[n], cls->name);
    fprintf(out, "  subgraph cluster_n%d {\n    label=", n);
    put_quoted(out, label);
    fprintf(out, ";\n    style=rounded;\n");
    int first = plan->node_first_rank[n];
    for (int slot = first; slot < first + cls->nlocal; slot++) {
      int r = gcoll_plan_rank_at(plan, slot);
      fprintf(out, "    r%d [label=\"%d\"];\n", r, r);
    }
    fprintf(out, "  }\n");
  }
}

static int put_edges(FILE *out, const struct gcoll_plan *plan, const struct dot_opts *o) {
  char err[PLAN_CLI_ERRLEN];
  struct gcoll_rank_view *v = calloc(1, sizeof(*v));
  if (v == NULL) return cli_fail("out of memory");
  int c = (int)o->channel;
  for (int r = 0; r < plan->nranks; r++) {
    if (gcoll_plan_rank_view(plan, r, v, err, sizeof(err)) != 0) {
      free(v);
      return cli_fail("%s: rank %d: %s", o->path, r, err);
    }
    const struct gcoll_ring_link *ring = &v->ring[c];
    const struct gcoll_tree_link *tree = &v->tree[c];
    if (o->ring && ring->next >= 0 && ring->next_edge != GCOLL_EDGE_SELF)
      fprintf(out, "  r%d -> r%d [color=%s];\n", r, ring->next, edge_colour(ring->next_edge));
    if (o->tree && tree->parent >= 0)
      fprintf(out, "  r%d -> r%d [color=%s, style=dashed];\n", tree->parent, r,
              edge_colour(tree->parent_edge));
  }
  free(v);
  return PLAN_EXIT_OK;
}

static int parse_opts(int argc, char **argv, struct dot_opts *o) {
  static const struct option longopts[] = {{"channel", required_argument, NULL, 'c'},
                                           {"ring", no_argument, NULL, 'r'},
                                           {"tree", no_argument, NULL, 't'},
                                           {"max-ranks", required_argument, NULL, 'm'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  o->max_ranks = DOT_DEFAULT_MAX_RANKS;
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":c:rtm:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'c':
      if (cli_parse_long(CMD, "--channel", optarg, 0, GCOLL_MAX_CHANNELS - 1, &o->channel))
        return 2;
      break;
    case 'r': o->ring = 1; break;
    case 't': o->tree = 1; break;
    case 'm':
      if (cli_parse_long(CMD, "--max-ranks", optarg, 1, GCOLL_MAX_RANKS, &o->max_ranks))
        return 2;
      break;
    case 'h': return -1;
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (optind >= argc) return cli_usage_error(CMD, "missing PLAN file");
  if (optind + 1 < argc)
    return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
  o->path = argv[optind];
  if (!o->ring && !o->tree) o->ring = 1;
  return 0;
}

int plan_cmd_dot(int argc, char **argv) {
  struct dot_opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc < 0) return cli_print_usage(plan_usage_dot);
  if (prc > 0) return prc;

  char err[PLAN_CLI_ERRLEN];
  struct gcoll_plan *plan = gcoll_plan_read_file(o.path, err, sizeof(err));
  if (plan == NULL) return cli_fail("%s", err);
  int rc = PLAN_EXIT_FAIL;
  if (plan->nranks > o.max_ranks) {
    cli_fail("%s: %d ranks is more than --max-ranks %lld; pass --max-ranks %d to draw it "
             "anyway", o.path, plan->nranks, o.max_ranks, plan->nranks);
    goto out;
  }
  if (o.channel >= plan->nchannels) {
    cli_fail("%s: --channel %lld: the plan has channels 0-%d", o.path, o.channel,
             plan->nchannels - 1);
    goto out;
  }
  printf("digraph gcoll_plan {\n  label=");
  char title[256];
  snprintf(title, sizeof(title), "%s: channel %lld%s%s", o.path, o.channel,
           o.ring ? " ring" : "", o.tree ? " tree" : "");
  put_quoted(stdout, title);
  printf(";\n  node [shape=circle, fontsize=10];\n");
  put_clusters(stdout, plan);
  rc = put_edges(stdout, plan, &o);
  if (rc == PLAN_EXIT_OK) printf("}\n");
out:
  gcoll_plan_free(plan);
  return rc;
}
