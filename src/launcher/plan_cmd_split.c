/* gcoll-plan split: the plan a sub-communicator of PLAN's job runs on,
 * derived from PLAN alone (gcoll_plan_subset), exactly as the runtime
 * derives it when a group's members all hold ranks of the launcher's plan
 * (gcollCommSplit, or a fresh-id communicator such as a PyTorch
 * new_group). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

const char plan_usage_split[] =
    "usage: gcoll-plan split PLAN --ranks LIST [-q] -o FILE\n"
    "\n"
    "Writes the plan a communicator of some of PLAN's ranks runs on: the\n"
    "runtime derives the same plan when a group is made from the job's ranks\n"
    "(gcollCommSplit / ncclCommSplit, or a new communicator from a fresh id,\n"
    "as PyTorch's new_group does). Member i of LIST becomes rank i. Each node\n"
    "keeps its host and topology class restricted to its members: the rings\n"
    "and chains keep PLAN's order, each GPU keeps the NIC PLAN paired it with,\n"
    "and the class records which GPUs its local ranks drive; trees and tuning\n"
    "are computed for the new node count. No topology is read.\n"
    "\n"
    "  -r, --ranks LIST   PLAN's ranks in the new order: N, N-M or N-M:STEP,\n"
    "                     comma-separated (8-15: a tensor-parallel group;\n"
    "                     0-127:8: every 8th rank, a data-parallel group)\n"
    "  -o, --output FILE  plan file to write ('-' for standard output)\n"
    "  -q, --quiet        no summary line on standard error\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 written, 1 unreadable PLAN or members it cannot plan (a\n"
    "node's members not contiguous in LIST, a rank twice or outside PLAN),\n"
    "2 usage.\n";

#define CMD "split"

struct split_opts {
  const char *path, *ranks, *output;
  int quiet;
};

static int parse_opts(int argc, char **argv, struct split_opts *o) {
  static const struct option longopts[] = {{"ranks", required_argument, NULL, 'r'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"quiet", no_argument, NULL, 'q'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":r:o:qh", longopts, NULL)) != -1) {
    switch (c) {
    case 'r': o->ranks = optarg; break;
    case 'o': o->output = optarg; break;
    case 'q': o->quiet = 1; break;
    case 'h': return -1;
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  if (optind >= argc) return cli_usage_error(CMD, "missing PLAN file");
  if (optind + 1 < argc)
    return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
  if (o->ranks == NULL) return cli_usage_error(CMD, "missing --ranks");
  if (o->output == NULL) return cli_usage_error(CMD, "missing --output");
  o->path = argv[optind];
  return 0;
}

int plan_cmd_split(int argc, char **argv) {
  struct split_opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc < 0) return cli_print_usage(plan_usage_split);
  if (prc > 0) return prc;
  char err[PLAN_CLI_ERRLEN];
  int rc = PLAN_EXIT_FAIL, *members = NULL, n = 0;
  struct gcoll_plan *child = NULL;
  struct gcoll_plan *plan = gcoll_plan_read_file(o.path, err, sizeof(err));
  if (plan == NULL) return cli_fail("%s", err);
  if (gcoll_plan_verify(plan, err, sizeof(err)) != 0) {
    cli_fail("%s: invalid plan: %s", o.path, err);
    goto out;
  }
  if (gcoll_ranklist_parse(o.ranks, plan->nranks - 1, &members, &n, err, sizeof(err)) != 0) {
    rc = cli_usage_error(CMD, "--ranks: %s", err);
    goto out;
  }
  child = gcoll_plan_subset(plan, members, n, err, sizeof(err));
  if (child == NULL) {
    cli_fail("%s: %s", o.path, err);
    goto out;
  }
  int wrc = strcmp(o.output, "-") == 0 ? gcoll_plan_write_stream(child, stdout, err, sizeof(err))
                                       : gcoll_plan_write_file(child, o.output, err, sizeof(err));
  if (wrc != 0) {
    cli_fail("%s", err);
    goto out;
  }
  if (!o.quiet) {
    char summary[256];
    cli_plan_summary(child, summary, sizeof(summary));
    fprintf(stderr, "%s: %s\n", cli_path_name(o.output), summary);
  }
  rc = PLAN_EXIT_OK;
out:
  gcoll_plan_free(child);
  gcoll_plan_free(plan);
  free(members);
  return rc;
}
