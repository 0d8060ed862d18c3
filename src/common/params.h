/* Every GCOLL_* environment variable gcoll reads, declared once (as UCX's
 * configuration tables and ompi_info's parameter list): its name, who sets
 * it, the form of its value, its default and one line of documentation.
 * `gcoll-info` prints the table with each variable's value in this process
 * and where it came from; tests/cli/test_params.sh fails when the sources
 * read a GCOLL_* name the table lacks, the table names one nothing reads,
 * or a user setting is missing from the README's table.
 *
 * The table is data only: reading a value stays with settings.h (which
 * adds NCCL's variables and configuration files) and the few readers of
 * launcher-set variables. */
#ifndef GCOLL_COMMON_PARAMS_H
#define GCOLL_COMMON_PARAMS_H

#include <stddef.h>

enum gcoll_param_scope {
  GCOLL_PARAM_USER,        /* set by users and admins to change behaviour */
  GCOLL_PARAM_LAUNCHER,    /* set by gcollrun or the SPANK plugin for each rank */
  GCOLL_PARAM_TEST,        /* test and benchmark hooks */
};

struct gcoll_param {
  const char *name;        /* GCOLL_... */
  enum gcoll_param_scope scope;
  const char *value;       /* the value's form, e.g. "ring|tree", "seconds" */
  const char *fallback;    /* what applies when unset */
  const char *nccl;        /* NCCL variables that give it (settings.h), or NULL */
  const char *doc;         /* one line */
};

/* The table, sorted by name, and its length in *n. A function, not the
 * array: gcoll-info reads it from libgcoll.so, and an exported array would
 * be copied into the program at the size it had when the program was
 * linked. */
const struct gcoll_param *gcoll_param_table(size_t *n);

/* The entry named `name`, or NULL. */
const struct gcoll_param *gcoll_param_find(const char *name);

/* "user", "launcher", "test". */
const char *gcoll_param_scope_name(enum gcoll_param_scope scope);

#endif
