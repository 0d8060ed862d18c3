/* Names of the collectives, algorithms and protocols (gcoll_plan.h's
 * enums), as plan files, logs and error lines spell them. In the common
 * layer because every layer names them: the plan format, the tuning
 * table, the runtime's traces and the executors' errors, and the kernels
 * must not reach into the plan code for a string. */
#include <string.h>

#include "common/names.h"
#include "gcoll_plan.h"

static const char *const coll_names[GCOLL_NCOLLS] = {"allreduce", "broadcast", "reduce",
                                                     "allgather", "reducescatter"};
static const char *const algo_names[GCOLL_NALGOS] = {"ring", "tree", "nvls"};
static const char *const proto_names[GCOLL_NPROTOS] = {"simple", "ll", "ll128"};

const char *gcoll_name_at(const char *const *names, int n, int v) {
  return v >= 0 && v < n ? names[v] : "?";
}

int gcoll_name_index(const char *const *names, int n, const char *s) {
  if (s == NULL) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

const char *gcoll_coll_name(enum gcoll_coll c) {
  return gcoll_name_at(coll_names, GCOLL_NCOLLS, (int)c);
}
const char *gcoll_algo_name(enum gcoll_algo a) {
  return gcoll_name_at(algo_names, GCOLL_NALGOS, (int)a);
}
const char *gcoll_proto_name(enum gcoll_proto p) {
  return gcoll_name_at(proto_names, GCOLL_NPROTOS, (int)p);
}
int gcoll_coll_from_name(const char *s) { return gcoll_name_index(coll_names, GCOLL_NCOLLS, s); }
int gcoll_algo_from_name(const char *s) { return gcoll_name_index(algo_names, GCOLL_NALGOS, s); }
int gcoll_proto_from_name(const char *s) { return gcoll_name_index(proto_names, GCOLL_NPROTOS, s); }
