/* gcoll-plan generate: node topologies + job shape -> plan file. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/fabric.h"
#include "graph/tuning.h"
#include "launcher/plan_cli.h"

const char plan_usage_generate[] =
    "usage: gcoll-plan generate --topo TOPO[,TOPO...] [--nodes N] [--hosts LIST]\n"
    "                           [--ranks-per-node K[,K...]] [--channels C]\n"
    "                           [--nvlink-domain N] [--fabric FILE]\n"
    "                           [--job-id J] [--step-id S]\n"
    "                           [--allow-cross-rail] [-q] -o FILE\n"
    "\n"
    "Computes the communication plan of a job and writes it atomically.\n"
    "\n"
    "  -t, --topo TOPO[,...]   node topologies. Each TOPO is a topology file, a\n"
    "                          bare name (dgx-h100) looked up as NAME.yaml in\n"
    "                          $GCOLL_TOPO_DIR, the installed topology directory,\n"
    "                          then the source tree's etc/topologies, or a\n"
    "                          directory of per-node files 0.yaml .. N-1.yaml\n"
    "                          (node i uses i.yaml; as the SPANK plugin writes\n"
    "                          them). With several TOPOs node i uses\n"
    "                          TOPO[i mod count].\n"
    "  -N, --nodes N           number of nodes (default: the number of files in a\n"
    "                          topology directory, else of --hosts names)\n"
    "  -H, --hosts LIST        Slurm host list naming the nodes in order\n"
    "                          (n[001-016]); must expand to exactly N names.\n"
    "                          Default: node00000, node00001, ...\n"
    "  -k, --ranks-per-node K  ranks per node (default: the GPUs of each node;\n"
    "                          required for CPU-only topologies' core count).\n"
    "                          A list gives nodes different counts: node i uses\n"
    "                          K[i mod count] (-k 2,1 on 2 nodes: 3 ranks), and\n"
    "                          K(xR) repeats K R times, as SLURM_TASKS_PER_NODE\n"
    "                          writes it (-k '3(x2),2': 3,3,2)\n"
    "  -g, --gpus LIST         the GPUs of each node the ranks drive, by local\n"
    "                          rank (5,6: a step that owns GPUs 5 and 6; as\n"
    "                          Slurm's SLURM_STEP_GPUS); as many as the ranks\n"
    "                          per node. Default: local rank i drives GPU i\n"
    "  -c, --channels C        upper bound on channels (default: the library's)\n"
    "  -D, --nvlink-domain N   every N consecutive nodes form one multi-node\n"
    "                          NVLink domain (GB200 NVL72: 18 trays), the last\n"
    "                          one possibly smaller: edges between its nodes are\n"
    "                          NVLink (p2p), the network joins domains. Replaces\n"
    "                          the domains the topology files name (a node's\n"
    "                          nvlink_domain, as detection writes it)\n"
    "  -F, --fabric FILE       the switch fabric in Slurm's topology.conf syntax\n"
    "                          (SwitchName=... Switches=... Nodes=..., or\n"
    "                          BlockName=... Nodes=...): the ring visits the\n"
    "                          nodes leaf switch by leaf switch (block by\n"
    "                          block) and the trees follow it, so fewer hops\n"
    "                          cross upper levels. Matched by host name\n"
    "                          (--hosts, else node00000, ...); nodes the file\n"
    "                          does not name come last. Blocks are also NVLink\n"
    "                          domains where the topologies name none\n"
    "      --allow-cross-rail  for fabrics without rails (one switch, a full fat\n"
    "                          tree): rings may leave a node by another rail\n"
    "                          than they enter the next by, where that carries\n"
    "                          more. Default: every ring leaves each node on\n"
    "                          the rail (NIC index, or the topology's `rail`)\n"
    "                          it enters the next by, through an NVLink peer's\n"
    "                          NIC (PXN) where needed\n"
    "  -j, --job-id J          Slurm job id recorded in the plan\n"
    "  -s, --step-id S         Slurm step id recorded in the plan\n"
    "  -o, --output FILE       plan file to write ('-' for standard output)\n"
    "  -q, --quiet             no summary line on standard error\n"
    "  -h, --help              this help\n"
    "\n"
    "Environment: GCOLL_TUNING=key=value,... overrides constants of the tuning\n"
    "model (docs/plan-format.md, 'Tuning').\n\n"
    "Exit status: 0 written, 1 failure (the output is left untouched), 2 usage.\n";

#define CMD "generate"

struct generate_opts {
  const char *topo;
  const char *fabric;        /* --fabric FILE, NULL: node order */
  long long nodes;           /* 0: unset */
  const char *hosts;
  long long ranks_per_node;  /* 0: default */
  int *node_ranks;           /* -k list (malloc'd), NULL: ranks_per_node */
  int nnode_ranks;
  long long channels;        /* 0: default */
  long long nvlink_domain;   /* 0: from the topologies */
  int *gpus;                 /* -g list (malloc'd), NULL: GPU i for local rank i */
  int ngpus;
  long long job_id, step_id; /* -1: unset */
  const char *output;
  int quiet;
  int cross_rail;
};

/* Distinct topologies and which one each node uses: nodes with identical
 * content share one gcoll_topo so that thousands of per-node files cost the
 * memory (and path computation) of one. */
struct topo_set {
  int ntopos;
  struct gcoll_topo **topos;
  int nnodes;
  int *node_topo;            /* index into topos, per node */
};

static void topo_set_free(struct topo_set *s) {
  for (int i = 0; i < s->ntopos; i++) gcoll_topo_free(s->topos[i]);
  free(s->topos);
  free(s->node_topo);
  memset(s, 0, sizeof(*s));
}

/* Adds topo (taking ownership) unless an identical one is known; returns
 * its index, or -1 when out of memory. */
static int topo_set_add(struct topo_set *s, struct gcoll_topo *topo, int *cap) {
  uint32_t h = gcoll_topo_hash(topo);
  for (int i = 0; i < s->ntopos; i++) {
    /* Nodes of different NVLink domains stay apart: the domain is not in
     * the hash (one class serves every rack), but the plan needs it. */
    const struct gcoll_nvl_domain *a = &s->topos[i]->nvl_domain, *b = &topo->nvl_domain;
    int same_domain = a->set == b->set && (!a->set || gcoll_nvl_domain_equal(a, b));
    if (gcoll_topo_hash(s->topos[i]) == h && strcmp(s->topos[i]->name, topo->name) == 0 &&
        same_domain) {
      gcoll_topo_free(topo);
      return i;
    }
  }
  if (s->ntopos == *cap) {
    int ncap = *cap ? 2 * *cap : 4;
    struct gcoll_topo **t = realloc(s->topos, (size_t)ncap * sizeof(*t));
    if (t == NULL) {
      gcoll_topo_free(topo);
      return -1;
    }
    s->topos = t;
    *cap = ncap;
  }
  s->topos[s->ntopos] = topo;
  return s->ntopos++;
}

static int compute_all_paths(struct topo_set *s, char *err, size_t errlen) {
  for (int i = 0; i < s->ntopos; i++) {
    struct gcoll_topo *t = s->topos[i];
    if (t->paths == NULL && gcoll_topo_compute_paths(t, err, errlen) != 0) return -1;
  }
  return 0;
}

/* "17.yaml" -> 17; -1 for any other name. */
static long node_file_index(const char *name) {
  size_t n = strlen(name);
  if (n < 6 || n > 5 + 9 || strcmp(name + n - 5, ".yaml") != 0) return -1;
  long v = 0;
  for (size_t i = 0; i < n - 5; i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  /* "007.yaml" would alias 7.yaml: the plugin writes plain numbers. */
  if (name[0] == '0' && n - 5 > 1) return -1;
  return v;
}

/* Counts the per-node files of dir and checks they are exactly
 * 0.yaml .. count-1.yaml. */
static int count_node_files(const char *dir, int *count, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return -1;
  }
  long n = 0, maxidx = -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long idx = node_file_index(e->d_name);
    if (idx < 0) continue;
    n++;
    if (idx > maxidx) maxidx = idx;
  }
  closedir(d);
  if (n == 0) {
    snprintf(err, errlen, "%s: no per-node topology files (0.yaml, 1.yaml, ...)", dir);
    return -1;
  }
  if (maxidx != n - 1 || n > GCOLL_MAX_NODES) {
    snprintf(err, errlen,
             "%s: per-node topology files must be numbered 0.yaml..%ld.yaml without gaps "
             "(found %ld files, highest %ld.yaml)", dir, n - 1, n, maxidx);
    return -1;
  }
  *count = (int)n;
  return 0;
}

static int load_dir(const char *dir, int nnodes, struct topo_set *s, char *err,
                    size_t errlen) {
  int cap = 0;
  s->nnodes = nnodes;
  s->node_topo = calloc((size_t)nnodes, sizeof(int));
  if (s->node_topo == NULL) {
    snprintf(err, errlen, "out of memory for %d nodes", nnodes);
    return -1;
  }
  for (int i = 0; i < nnodes; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%d.yaml", dir, i);
    struct gcoll_topo *t = gcoll_topo_read_file(path, err, errlen);
    if (t == NULL) return -1;
    if ((s->node_topo[i] = topo_set_add(s, t, &cap)) < 0) {
      snprintf(err, errlen, "out of memory reading %.512s", path);
      return -1;
    }
  }
  return compute_all_paths(s, err, errlen);
}

static int load_list(const char *list, int nnodes, struct topo_set *s, char *err,
                     size_t errlen) {
  char *copy = strdup(list);
  int *file_topo = NULL, nfiles = 0, cap = 0, rc = -1;
  if (copy == NULL) goto oom;
  file_topo = calloc(strlen(list) / 2 + 1, sizeof(int));
  if (file_topo == NULL) goto oom;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    struct gcoll_topo *t = gcoll_topo_load_name(tok, err, errlen);
    if (t == NULL) goto out;
    if ((file_topo[nfiles++] = topo_set_add(s, t, &cap)) < 0) goto oom;
  }
  if (nfiles == 0) {
    snprintf(err, errlen, "--topo: empty topology list");
    goto out;
  }
  s->nnodes = nnodes;
  s->node_topo = calloc((size_t)nnodes, sizeof(int));
  if (s->node_topo == NULL) goto oom;
  for (int i = 0; i < nnodes; i++) s->node_topo[i] = file_topo[i % nfiles];
  rc = compute_all_paths(s, err, errlen);
  goto out;
oom:
  snprintf(err, errlen, "out of memory reading topologies");
out:
  free(file_topo);
  free(copy);
  return rc;
}

static int is_directory(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "-k 2,1" or "-k 3(x2),2": the counts in order, each 1..GCOLL_MAX_LOCAL_RANKS.
 * Returns 0 or a usage error. */
static int parse_rank_list(const char *s, struct generate_opts *o) {
  size_t cap = 16;
  int n = 0, *v = malloc(cap * sizeof(*v));
  if (v == NULL) return cli_fail("out of memory");
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    long k = strtol(p, &end, 10), times = 1;
    if (end == p || *p == '-' || *p == '+' || errno || k < 1 || k > GCOLL_MAX_LOCAL_RANKS)
      goto bad;
    if (*end == '(') {
      const char *q = end + 1;
      if (*q++ != 'x' || *q < '1' || *q > '9') goto bad;
      times = strtol(q, &end, 10);
      if (errno || *end != ')' || times > GCOLL_MAX_NODES) goto bad;
      end++;
    }
    for (long i = 0; i < times; i++) {
      if (n >= GCOLL_MAX_NODES) goto bad;
      if ((size_t)n == cap) {
        int *nv = realloc(v, 2 * cap * sizeof(*v));
        if (nv == NULL) {
          free(v);
          return cli_fail("out of memory");
        }
        v = nv;
        cap *= 2;
      }
      v[n++] = (int)k;
    }
    if (*end == '\0') break;
    if (*end != ',') goto bad;
    p = end + 1;
  }
  free(o->node_ranks);
  o->node_ranks = v;
  o->nnode_ranks = n;
  return 0;
bad:
  free(v);
  return cli_usage_error(CMD, "--ranks-per-node: '%s' is not K or a list of K and K(xR) "
                         "with K in 1..%d", s, GCOLL_MAX_LOCAL_RANKS);
}

/* One INFO line per NIC a class leaves out (down, or below its line rate),
 * naming its first node and how many more share that topology. */
static void report_left_out(const struct gcoll_plan *plan, const struct gcoll_topo **node_topo) {
  for (int k = 0; k < plan->nclasses; k++) {
    const struct gcoll_intra_graph *g = &plan->classes[k].graph;
    int first = -1, count = 0;
    for (int n = 0; n < plan->nnodes; n++)
      if (plan->node_class[n] == k && count++ == 0) first = n;
    if (g->nleft_out == 0 || first < 0) continue;
    const struct gcoll_topo *t = node_topo[first];
    for (int i = 0; i < g->nleft_out; i++) {
      char detail[64] = "";
      int d = gcoll_topo_find(t, g->left_out[i].nic);
      if (d >= 0 && t->dev[d].type == GCOLL_DEV_NIC)
        gcoll_topo_nic_usable(t, t->dev[d].index, NULL, detail, sizeof(detail));
      fprintf(stderr, "gcoll-plan: INFO: %s of node %d (%s%s) left out of the plan: %s\n",
              g->left_out[i].nic, first, plan->node_host[first],
              count > 1 ? ", and the other nodes of its topology" : "",
              detail[0] ? detail : g->left_out[i].why);
    }
  }
}

static int parse_opts(int argc, char **argv, struct generate_opts *o) {
  static const struct option longopts[] = {
      {"topo", required_argument, NULL, 't'},
      {"nodes", required_argument, NULL, 'N'},
      {"hosts", required_argument, NULL, 'H'},
      {"ranks-per-node", required_argument, NULL, 'k'},
      {"channels", required_argument, NULL, 'c'},
      {"nvlink-domain", required_argument, NULL, 'D'},
      {"fabric", required_argument, NULL, 'F'},
      {"gpus", required_argument, NULL, 'g'},
      {"job-id", required_argument, NULL, 'j'},
      {"step-id", required_argument, NULL, 's'},
      {"output", required_argument, NULL, 'o'},
      {"quiet", no_argument, NULL, 'q'},
      {"allow-cross-rail", no_argument, NULL, 'R'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  o->job_id = o->step_id = -1;
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":t:N:H:k:g:c:D:F:j:s:o:qh", longopts, NULL)) != -1) {
    switch (c) {
    case 't': o->topo = optarg; break;
    case 'F': o->fabric = optarg; break;
    case 'N':
      if (cli_parse_long(CMD, "--nodes", optarg, 1, GCOLL_MAX_NODES, &o->nodes)) return 2;
      break;
    case 'H': o->hosts = optarg; break;
    case 'k':
      if (strpbrk(optarg, ",(") != NULL) {
        int lrc = parse_rank_list(optarg, o);
        if (lrc != 0) return lrc;
        o->ranks_per_node = 0;
      } else {
        if (cli_parse_long(CMD, "--ranks-per-node", optarg, 1, GCOLL_MAX_LOCAL_RANKS,
                           &o->ranks_per_node))
          return 2;
        free(o->node_ranks);
        o->node_ranks = NULL;
        o->nnode_ranks = 0;
      }
      break;
    case 'c':
      if (cli_parse_long(CMD, "--channels", optarg, 1, GCOLL_MAX_CHANNELS, &o->channels))
        return 2;
      break;
    case 'g': {
      char why[PLAN_CLI_ERRLEN];
      free(o->gpus);
      if (gcoll_ranklist_parse(optarg, GCOLL_MAX_GPU_INDEX, &o->gpus, &o->ngpus, why,
                               sizeof(why)) != 0)
        return cli_usage_error(CMD, "--gpus: %s", why);
      break;
    }
    case 'j':
      if (cli_parse_long(CMD, "--job-id", optarg, 0, INT64_MAX, &o->job_id)) return 2;
      break;
    case 's':
      if (cli_parse_long(CMD, "--step-id", optarg, 0, INT64_MAX, &o->step_id)) return 2;
      break;
    case 'D':
      if (cli_parse_long(CMD, "--nvlink-domain", optarg, 1, GCOLL_MAX_NODES, &o->nvlink_domain))
        return 2;
      break;
    case 'o': o->output = optarg; break;
    case 'q': o->quiet = 1; break;
    case 'R': o->cross_rail = 1; break;
    case 'h': return -1;
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (optind < argc) return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
  if (o->topo == NULL) return cli_usage_error(CMD, "missing --topo");
  if (o->output == NULL)
    return cli_usage_error(CMD, "missing -o FILE; use '-o -' for standard output");
  return 0;
}

/* Settles the node count from --nodes, the topology directory and
 * --hosts, which must all agree. */
static int resolve_node_count(const struct generate_opts *o, const char *dir,
                              int nhosts, int *nnodes) {
  char err[PLAN_CLI_ERRLEN];
  int n = (int)o->nodes;
  if (dir != NULL) {
    int nfiles;
    if (count_node_files(dir, &nfiles, err, sizeof(err)) != 0) return cli_fail("%s", err);
    if (n != 0 && n != nfiles)
      return cli_fail("--nodes is %d but %s holds %d per-node topology files", n, dir,
                      nfiles);
    n = nfiles;
  }
  if (o->hosts != NULL) {
    if (n != 0 && nhosts != n)
      return cli_fail("--hosts '%s' expands to %d host%s, but the job has %d node%s",
                      o->hosts, nhosts, nhosts == 1 ? "" : "s", n, n == 1 ? "" : "s");
    n = nhosts;
  }
  if (n == 0) return cli_usage_error(CMD, "missing --nodes");
  *nnodes = n;
  return 0;
}

/* --fabric: the ring's node order, by the nodes' host names (the plan's
 * default names where --hosts gave none), and for topology/block each
 * node's block (*blocks NULL for a tree). Both malloc'd. */
static int fabric_order(const char *path, int nnodes, char **hosts, int **order, int **blocks) {
  char err[PLAN_CLI_ERRLEN];
  struct gcoll_fabric *f = gcoll_fabric_read_file(path, err, sizeof(err));
  if (f == NULL) return cli_fail("--fabric: %s", err);
  char (*names)[24] = hosts == NULL ? calloc((size_t)nnodes, sizeof(*names)) : NULL;
  const char **h = calloc((size_t)nnodes, sizeof(*h));
  *order = malloc((size_t)nnodes * sizeof(int));
  int rc = h == NULL || *order == NULL || (hosts == NULL && names == NULL);
  for (int i = 0; !rc && i < nnodes; i++) {
    if (hosts == NULL) snprintf(names[i], sizeof(names[i]), "node%05d", i);
    h[i] = hosts != NULL ? hosts[i] : names[i];
  }
  if (!rc) rc = gcoll_fabric_order(f, h, nnodes, *order) != 0;
  *blocks = rc ? NULL : gcoll_fabric_block_domains(f, h, nnodes);
  if (rc) {
    free(*order);
    *order = NULL;
    cli_fail("out of memory for the fabric order of %d nodes", nnodes);
  }
  gcoll_fabric_free(f);
  free(names);
  free(h);
  return rc ? PLAN_EXIT_FAIL : 0;
}

static int build_and_write(const struct generate_opts *o, const struct topo_set *s,
                           char **hosts) {
  char err[PLAN_CLI_ERRLEN];
  int rc = PLAN_EXIT_FAIL;
  const struct gcoll_topo **node_topo = calloc((size_t)s->nnodes, sizeof(*node_topo));
  int *node_ranks = o->node_ranks ? calloc((size_t)s->nnodes, sizeof(*node_ranks)) : NULL;
  struct gcoll_plan *plan = NULL;
  int *node_gpus = NULL, *node_domain = NULL, *node_order = NULL, *block_domain = NULL;
  if (o->fabric != NULL &&
      fabric_order(o->fabric, s->nnodes, hosts, &node_order, &block_domain) != 0)
    goto out;
  if (o->nvlink_domain > 0 && (node_domain = malloc((size_t)s->nnodes * sizeof(int))) == NULL) {
    cli_fail("out of memory for %d nodes", s->nnodes);
    goto out;
  }
  for (int i = 0; node_domain && i < s->nnodes; i++) {
    if (s->topos[s->node_topo[i]]->ngpu < 1) {
      cli_fail("--nvlink-domain: node %d's topology '%s' has no GPUs to join by NVLink", i,
               s->topos[s->node_topo[i]]->name);
      goto out;
    }
    node_domain[i] = (int)(i / o->nvlink_domain);
  }
  if (node_topo == NULL || (o->node_ranks && node_ranks == NULL)) {
    cli_fail("out of memory for %d nodes", s->nnodes);
    goto out;
  }
  for (int i = 0; i < s->nnodes; i++) node_topo[i] = s->topos[s->node_topo[i]];
  for (int i = 0; node_ranks && i < s->nnodes; i++)
    node_ranks[i] = o->node_ranks[i % o->nnode_ranks];
  /* --gpus: the same GPUs on every node, one per rank of the node. */
  if (o->gpus != NULL) {
    long long total = 0;
    for (int i = 0; i < s->nnodes; i++) {
      long long count = node_ranks ? node_ranks[i]
                        : o->ranks_per_node ? o->ranks_per_node : o->ngpus;
      if (count != o->ngpus) {
        cli_fail("--gpus names %d GPU%s, node %d has %lld ranks", o->ngpus,
                 o->ngpus == 1 ? "" : "s", i, count);
        goto out;
      }
      total += count;
    }
    if ((node_gpus = malloc((size_t)total * sizeof(int))) == NULL) {
      cli_fail("out of memory");
      goto out;
    }
    for (long long k = 0; k < total; k++) node_gpus[k] = o->gpus[k % o->ngpus];
  }
  struct gcoll_plan_input in = {
      .nnodes = s->nnodes,
      .node_topo = node_topo,
      .node_host = (const char **)hosts,
      .ranks_per_node = (int)o->ranks_per_node,
      .max_channels = (int)o->channels,
      .job_id = o->job_id,
      .step_id = o->step_id,
      .node_ranks = node_ranks,
      .node_gpus = node_gpus,
      .node_domain = node_domain,
      .node_order = node_order,
      .block_domain = block_domain,
      .cross_rail = o->cross_rail,
  };
  plan = gcoll_plan_build(&in, err, sizeof(err));
  if (plan == NULL) {
    cli_fail("%s", err);
    goto out;
  }
  /* Site calibration of the tuning model, without a rebuild. */
  if (gcoll_plan_retune(plan, getenv("GCOLL_TUNING"), err, sizeof(err)) != 0) {
    cli_fail("GCOLL_TUNING: %s", err);
    goto out;
  }
  int wrc = strcmp(o->output, "-") == 0
                ? gcoll_plan_write_stream(plan, stdout, err, sizeof(err))
                : gcoll_plan_write_file(plan, o->output, err, sizeof(err));
  if (wrc != 0) {
    cli_fail("%s", err);
    goto out;
  }
  if (!o->quiet) {
    char summary[256];
    cli_plan_summary(plan, summary, sizeof(summary));
    fprintf(stderr, "%s: %s\n", cli_path_name(o->output), summary);
    report_left_out(plan, node_topo);
  }
  rc = PLAN_EXIT_OK;
out:
  gcoll_plan_free(plan);
  free(node_gpus);
  free(node_domain);
  free(node_order);
  free(block_domain);
  free(node_ranks);
  free(node_topo);
  return rc;
}

int plan_cmd_generate(int argc, char **argv) {
  struct generate_opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc != 0) {
    free(o.node_ranks);
    free(o.gpus);
    return prc < 0 ? cli_print_usage(plan_usage_generate) : prc;
  }

  char err[PLAN_CLI_ERRLEN];
  char **hosts = NULL;
  int nhosts = 0, nnodes = 0, rc;
  struct topo_set set = {0};
  const char *dir = is_directory(o.topo) ? o.topo : NULL;

  if (o.hosts != NULL && gcoll_hostlist_expand(o.hosts, &hosts, &nhosts, err, sizeof(err)) != 0) {
    free(o.node_ranks);
    free(o.gpus);
    return cli_fail("--hosts: %s", err);
  }
  rc = resolve_node_count(&o, dir, nhosts, &nnodes);
  if (rc != 0) goto out;
  int lrc = dir ? load_dir(dir, nnodes, &set, err, sizeof(err))
                : load_list(o.topo, nnodes, &set, err, sizeof(err));
  if (lrc != 0) {
    rc = cli_fail("%s", err);
    goto out;
  }
  rc = build_and_write(&o, &set, hosts);
out:
  topo_set_free(&set);
  if (hosts) gcoll_hostlist_free(hosts, nhosts);
  free(o.node_ranks);
  free(o.gpus);
  return rc;
}
