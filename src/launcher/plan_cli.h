/* gcoll-plan: git-style command-line tool over plan and topology files.
 * Each subcommand lives in its own plan_cmd_*.c; this header holds what they
 * share: exit codes, one-line error reporting, option parsing helpers and
 * small formatters. */
#ifndef GCOLL_LAUNCHER_PLAN_CLI_H
#define GCOLL_LAUNCHER_PLAN_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/plan.h"
#include "graph/topo.h"
#include "graph/topo_lookup.h"

#define PLAN_CLI_PROG "gcoll-plan"

/* diff(1)-like convention: 1 means "failed" (or "different" for diff), 2
 * means the command line itself was wrong. */
enum { PLAN_EXIT_OK = 0, PLAN_EXIT_FAIL = 1, PLAN_EXIT_USAGE = 2 };

#define PLAN_CLI_ERRLEN 1024

/* Subcommand entry points: argv[0] is the subcommand name. */
int plan_cmd_generate(int argc, char **argv);
int plan_cmd_show(int argc, char **argv);
int plan_cmd_verify(int argc, char **argv);
int plan_cmd_diff(int argc, char **argv);
int plan_cmd_dot(int argc, char **argv);
int plan_cmd_topo(int argc, char **argv);
int plan_cmd_split(int argc, char **argv);

extern const char plan_usage_generate[];
extern const char plan_usage_show[];
extern const char plan_usage_verify[];
extern const char plan_usage_diff[];
extern const char plan_usage_dot[];
extern const char plan_usage_topo[];
extern const char plan_usage_split[];

/* "gcoll-plan: MESSAGE\n" on stderr; returns PLAN_EXIT_FAIL. Messages are
 * flattened to one line so that a library error can never span several. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "gcoll-plan: CMD: MESSAGE (see 'gcoll-plan CMD --help')"; returns
 * PLAN_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepares getopt_long for a subcommand's argv (resets state, silences
 * getopt's own messages so that ours are the only ones). */
void cli_getopt_reset(void);
/* Reports the option getopt_long rejected ('?' or ':'); returns
 * PLAN_EXIT_USAGE. */
int cli_bad_option(const char *cmd, int getopt_result, char **argv);
/* Strict integer parsing for an option value: the whole string, in range.
 * On failure prints the usage error and returns -1. */
int cli_parse_long(const char *cmd, const char *opt, const char *s, long long min,
                   long long max, long long *out);
/* Prints usage text to stdout; returns PLAN_EXIT_OK. */
int cli_print_usage(const char *usage);

/* Human sizes: 65536 -> "64 KiB", 1536 -> "1.5 KiB". */
const char *cli_bytes(uint64_t bytes, char *buf, size_t buflen);
/* Prints "<= 64 KiB  tree/ll  2ch" rows of one collective's table. */
void cli_print_tuning(FILE *out, const char *indent, const int ntuning[GCOLL_NCOLLS],
                      const struct gcoll_tuning_entry tuning[][GCOLL_MAX_TUNING]);
/* Prints "0-7,9,8" (runs of +1 collapsed) for at most `max_items` numbers,
 * then " ... (N more)". */
void cli_print_ranges(FILE *out, const int *v, int n, int max_items);
/* plan_cmd_show_rails.c: each searched channel's NIC pairs on ring edges
 * between nodes, and the counts of cross-rail edges; one edge's pair
 * (label "in": theirs -> mine is printed as mine <- theirs), with the PXN
 * rank when via >= 0. */
void cli_print_rails(const struct gcoll_plan *plan);
void cli_print_nic_pair(const char *label, const char *mine, int my_rail, const char *theirs,
                        int their_rail, int via);
/* Display name for an output path ("-" is stdout). */
const char *cli_path_name(const char *path);
/* Plan summary shared by generate and verify:
 * "100000 ranks, 12500 nodes, 1 topology class, 16 channels". */
void cli_plan_summary(const struct gcoll_plan *plan, char *buf, size_t buflen);

#endif
