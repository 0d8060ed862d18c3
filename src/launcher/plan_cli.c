/* gcoll-plan: entry point, subcommand dispatch and the helpers the
 * subcommands share. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "(unversioned build)"
#endif

struct subcommand {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;
  const char *summary;
};

static const struct subcommand subcommands[] = {
    {"generate", plan_cmd_generate, plan_usage_generate,
     "compute a plan from node topologies and write it"},
    {"show", plan_cmd_show, plan_usage_show, "summarise a plan, or print one rank's view"},
    {"verify", plan_cmd_verify, plan_usage_verify,
     "check a plan's invariants (and that it fits a job)"},
    {"diff", plan_cmd_diff, plan_usage_diff, "compare two plans semantically"},
    {"split", plan_cmd_split, plan_usage_split,
     "the plan a sub-communicator of some of a plan's ranks runs on"},
    {"dot", plan_cmd_dot, plan_usage_dot, "draw a plan's rings or trees as Graphviz"},
    {"topo", plan_cmd_topo, plan_usage_topo,
     "print a node topology (detected or from a file), its paths or hash"},
};
#define NSUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

static void print_main_usage(FILE *out) {
  fprintf(out,
          "usage: " PLAN_CLI_PROG " [--version] [--help] COMMAND [ARGS]\n"
          "\n"
          "Compute, inspect and check gcoll communication plans.\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < NSUBCOMMANDS; i++)
    fprintf(out, "  %-9s %s\n", subcommands[i].name, subcommands[i].summary);
  fprintf(out,
          "\n"
          "'" PLAN_CLI_PROG " help COMMAND' or '" PLAN_CLI_PROG
          " COMMAND --help' describes one command.\n"
          "Exit status: 0 success, 1 failure (diff: plans differ), 2 usage error.\n");
}

static const struct subcommand *find_subcommand(const char *name) {
  for (size_t i = 0; i < NSUBCOMMANDS; i++)
    if (strcmp(subcommands[i].name, name) == 0) return &subcommands[i];
  return NULL;
}

static int run_help(int argc, char **argv) {
  if (argc < 2) {
    print_main_usage(stdout);
    return PLAN_EXIT_OK;
  }
  if (argc > 2) return cli_usage_error("help", "takes at most one command name");
  const struct subcommand *sc = find_subcommand(argv[1]);
  if (sc == NULL)
    return cli_fail("help: unknown command '%s' (see '" PLAN_CLI_PROG " --help')", argv[1]);
  return cli_print_usage(sc->usage);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_main_usage(stderr);
    return PLAN_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    print_main_usage(stdout);
    return PLAN_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    printf(PLAN_CLI_PROG " (gcoll) %s\nplan format version %d\n", PACKAGE_VERSION,
           GCOLL_PLAN_VERSION);
    return PLAN_EXIT_OK;
  }
  if (strcmp(cmd, "help") == 0) return run_help(argc - 1, argv + 1);
  const struct subcommand *sc = find_subcommand(cmd);
  if (sc == NULL) {
    if (cmd[0] == '-')
      fprintf(stderr, PLAN_CLI_PROG ": unrecognized option '%s' (see '" PLAN_CLI_PROG
                                    " --help')\n", cmd);
    else
      fprintf(stderr, PLAN_CLI_PROG ": unknown command '%s' (see '" PLAN_CLI_PROG
                                    " --help')\n", cmd);
    return PLAN_EXIT_USAGE;
  }
  int rc = sc->run(argc - 1, argv + 1);
  /* A full disk or closed pipe on stdout must not pass for success. */
  if (fflush(stdout) != 0 && rc == PLAN_EXIT_OK)
    return cli_fail("writing standard output: %s", strerror(errno));
  return rc;
}

/* ---- errors ------------------------------------------------------------- */

static void print_one_line(const char *prefix, const char *msg, const char *suffix) {
  fputs(PLAN_CLI_PROG ": ", stderr);
  if (prefix) fputs(prefix, stderr);
  for (const char *p = msg; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
  if (suffix) fputs(suffix, stderr);
  fputc('\n', stderr);
}

int cli_fail(const char *fmt, ...) {
  char msg[2 * PLAN_CLI_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  print_one_line(NULL, msg, NULL);
  return PLAN_EXIT_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  char msg[2 * PLAN_CLI_ERRLEN], prefix[64], suffix[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(prefix, sizeof(prefix), "%s: ", cmd);
  snprintf(suffix, sizeof(suffix), " (see '" PLAN_CLI_PROG " %s --help')", cmd);
  print_one_line(prefix, msg, suffix);
  return PLAN_EXIT_USAGE;
}

/* ---- option parsing ----------------------------------------------------- */

void cli_getopt_reset(void) {
  /* 0 (not 1) makes glibc re-initialise its permutation state too. */
  optind = 0;
  opterr = 0;
}

int cli_bad_option(const char *cmd, int getopt_result, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : "";
  if (getopt_result == ':') {
    if (optopt != 0 && !(arg[0] == '-' && arg[1] == '-'))
      return cli_usage_error(cmd, "option '-%c' needs a value", optopt);
    return cli_usage_error(cmd, "option '%s' needs a value", arg);
  }
  if (optopt != 0 && !(arg[0] == '-' && arg[1] == '-'))
    return cli_usage_error(cmd, "unrecognized option '-%c'", optopt);
  return cli_usage_error(cmd, "unrecognized option '%s'", arg);
}

int cli_parse_long(const char *cmd, const char *opt, const char *s, long long min,
                   long long max, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (s[0] == '\0' || *end != '\0' || errno == ERANGE) {
    cli_usage_error(cmd, "%s: '%s' is not an integer", opt, s);
    return -1;
  }
  if (v < min || v > max) {
    cli_usage_error(cmd, "%s: %lld is out of range %lld..%lld", opt, v, min, max);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_print_usage(const char *usage) {
  fputs(usage, stdout);
  return PLAN_EXIT_OK;
}

/* ---- formatting --------------------------------------------------------- */

const char *cli_bytes(uint64_t bytes, char *buf, size_t buflen) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  uint64_t whole = bytes;
  while (whole >= 1024 && u < 6) {
    whole /= 1024;
    u++;
  }
  uint64_t unit = (uint64_t)1 << (10 * u);
  if (bytes % unit == 0)
    snprintf(buf, buflen, "%" PRIu64 " %s", whole, units[u]);
  else
    snprintf(buf, buflen, "%.1f %s", (double)bytes / (double)unit, units[u]);
  return buf;
}

void cli_print_tuning(FILE *out, const char *indent, const int ntuning[GCOLL_NCOLLS],
                      const struct gcoll_tuning_entry tuning[][GCOLL_MAX_TUNING]) {
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    int n = ntuning[c] < 0 ? 0 : ntuning[c] > GCOLL_MAX_TUNING ? GCOLL_MAX_TUNING : ntuning[c];
    for (int i = 0; i < n; i++) {
      const struct gcoll_tuning_entry *e = &tuning[c][i];
      char size[48], lim[32], choice[32];
      if (e->max_bytes == UINT64_MAX) {
        if (i == 0)
          snprintf(size, sizeof(size), "any size");
        else
          snprintf(size, sizeof(size), ">  %s", cli_bytes(tuning[c][i - 1].max_bytes, lim,
                                                          sizeof(lim)));
      } else {
        snprintf(size, sizeof(size), "<= %s", cli_bytes(e->max_bytes, lim, sizeof(lim)));
      }
      snprintf(choice, sizeof(choice), "%s/%s", gcoll_algo_name(e->algo),
               gcoll_proto_name(e->proto));
      fprintf(out, "%s%-14s %-13s %-12s %2dch\n", indent,
              i == 0 ? gcoll_coll_name((enum gcoll_coll)c) : "", size, choice, e->nchannels);
    }
  }
}

void cli_print_ranges(FILE *out, const int *v, int n, int max_items) {
  int printed = 0, i = 0;
  while (i < n) {
    if (printed == max_items) {
      fprintf(out, " ... (%d more)", n - i);
      return;
    }
    int j = i;
    while (j + 1 < n && v[j + 1] == v[j] + 1) j++;
    fprintf(out, "%s%d", printed ? "," : "", v[i]);
    if (j > i) fprintf(out, "-%d", v[j]);
    printed++;
    i = j + 1;
  }
}

const char *cli_path_name(const char *path) {
  return strcmp(path, "-") == 0 ? "<stdout>" : path;
}

void cli_plan_summary(const struct gcoll_plan *plan, char *buf, size_t buflen) {
  snprintf(buf, buflen, "%d rank%s, %d node%s, %d topology class%s, %d channels",
           plan->nranks, plan->nranks == 1 ? "" : "s", plan->nnodes,
           plan->nnodes == 1 ? "" : "s", plan->nclasses, plan->nclasses == 1 ? "" : "es",
           plan->nchannels);
}
