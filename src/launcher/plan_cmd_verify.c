/* gcoll-plan verify: read a plan, check every invariant, and optionally that
 * it was made for the job at hand. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

const char plan_usage_verify[] =
    "usage: gcoll-plan verify PLAN [--nodes N] [--ranks R] [--hosts LIST] [--allow-cross-rail]\n"
    "\n"
    "Reads PLAN and checks every invariant of the plan format (each ring\n"
    "channel is one cycle through all ranks, both trees span all nodes, every\n"
    "rank belongs to one node, ...) and that every edge between nodes stays on\n"
    "one rail (leaves a node by a NIC on the leaf switch the next node's NIC\n"
    "is on). The options also check that the plan fits\n"
    "a job, e.g. in a batch script:\n"
    "  gcoll-plan verify plan.yaml --hosts \"$SLURM_JOB_NODELIST\" --ranks \"$SLURM_NTASKS\"\n"
    "\n"
    "  -N, --nodes N      the job has N nodes\n"
    "  -n, --ranks R      the job has R ranks\n"
    "  -H, --hosts LIST   the job's nodes, in node order, as a Slurm host list\n"
    "      --allow-cross-rail  edges between nodes may change rails (fabrics\n"
    "                     without rails: one switch, or a full fat tree)\n"
    "  -q, --quiet        print nothing on success\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 valid (prints \"PLAN: OK (...)\"), 1 invalid or not for this\n"
    "job (prints the first problem), 2 usage.\n";

#define CMD "verify"

struct verify_opts {
  long long nodes, ranks;   /* 0: unchecked */
  const char *hosts;
  int quiet;
  int cross_rail;
  const char *path;
};

static int parse_opts(int argc, char **argv, struct verify_opts *o) {
  static const struct option longopts[] = {{"nodes", required_argument, NULL, 'N'},
                                           {"ranks", required_argument, NULL, 'n'},
                                           {"hosts", required_argument, NULL, 'H'},
                                           {"quiet", no_argument, NULL, 'q'},
                                           {"allow-cross-rail", no_argument, NULL, 'R'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":N:n:H:qh", longopts, NULL)) != -1) {
    switch (c) {
    case 'N':
      if (cli_parse_long(CMD, "--nodes", optarg, 1, GCOLL_MAX_NODES, &o->nodes)) return 2;
      break;
    case 'n':
      if (cli_parse_long(CMD, "--ranks", optarg, 1, GCOLL_MAX_RANKS, &o->ranks)) return 2;
      break;
    case 'H': o->hosts = optarg; break;
    case 'q': o->quiet = 1; break;
    case 'R': o->cross_rail = 1; break;
    case 'h': return -1;
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (optind >= argc) return cli_usage_error(CMD, "missing PLAN file");
  if (optind + 1 < argc)
    return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
  o->path = argv[optind];
  return 0;
}

/* Checks the plan against the job's shape; writes the first mismatch. */
static int check_job(const struct gcoll_plan *plan, const struct verify_opts *o, char *err,
                     size_t errlen) {
  if (o->nodes > 0 && o->nodes != plan->nnodes) {
    snprintf(err, errlen, "plan has %d nodes, job has %lld", plan->nnodes, o->nodes);
    return -1;
  }
  if (o->ranks > 0 && o->ranks != plan->nranks) {
    snprintf(err, errlen, "plan has %d ranks, job has %lld", plan->nranks, o->ranks);
    return -1;
  }
  if (o->hosts == NULL) return 0;
  char **hosts = NULL, why[PLAN_CLI_ERRLEN];
  int nhosts = 0, rc = 0;
  if (gcoll_hostlist_expand(o->hosts, &hosts, &nhosts, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "--hosts: %.900s", why);
    return -1;
  }
  if (nhosts != plan->nnodes) {
    snprintf(err, errlen, "plan has %d nodes, job has %d hosts (%s)", plan->nnodes, nhosts,
             o->hosts);
    rc = -1;
  }
  /* Node order matters: rank r runs on the job's node r / local_ranks, so
   * the same hosts in another order would put ranks on the wrong nodes. */
  for (int i = 0; rc == 0 && i < nhosts; i++) {
    if (strcmp(hosts[i], plan->node_host[i]) != 0) {
      snprintf(err, errlen, "node %d is host %s in the plan but %s in the job", i,
               plan->node_host[i], hosts[i]);
      rc = -1;
    }
  }
  gcoll_hostlist_free(hosts, nhosts);
  return rc;
}

int plan_cmd_verify(int argc, char **argv) {
  struct verify_opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc < 0) return cli_print_usage(plan_usage_verify);
  if (prc > 0) return prc;

  char err[PLAN_CLI_ERRLEN];
  struct gcoll_plan *plan = gcoll_plan_read_file(o.path, err, sizeof(err));
  if (plan == NULL) return cli_fail("%s", err);
  int rc = PLAN_EXIT_OK;
  if (gcoll_plan_verify(plan, err, sizeof(err)) != 0) {
    rc = cli_fail("%s: invalid plan: %s", o.path, err);
  } else if (!o.cross_rail && gcoll_plan_verify_rails(plan, err, sizeof(err)) != 0) {
    rc = cli_fail("%s: %s (on a fabric without rails: --allow-cross-rail)", o.path, err);
  } else if (check_job(plan, &o, err, sizeof(err)) != 0) {
    rc = cli_fail("%s: not for this job: %s", o.path, err);
  } else if (!o.quiet) {
    char summary[256];
    cli_plan_summary(plan, summary, sizeof(summary));
    printf("%s: OK (%s)\n", o.path, summary);
  }
  gcoll_plan_free(plan);
  return rc;
}
