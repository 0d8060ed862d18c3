/* --cpu-bind: which CPUs each rank may run on.
 *
 * Why bind at all: with as many ranks as cores and no binding, the
 * scheduler now and then wakes a rank on its waker's core and leaves the
 * two there for milliseconds while another core idles; ranks that count on
 * a core each then wait for each other (README, issue 17). Open MPI binds
 * by default for the same reason, and srun binds tasks to their share of
 * the allocation. gcollrun gives each rank an equal block of the CPUs it
 * may use itself (hyperthreads of one core stay together), so a
 * multithreaded rank keeps its share, and says so to the rank
 * (GCOLL_CPU_BIND=cores): the runtime then counts those CPUs as the rank's
 * own, not as shared with the host's other ranks. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/gcollrun.h"

struct cpu_place {
  int cpu;
  long package, core;
};

/* -1 when the file is missing or unreadable (containers, odd kernels): the
 * CPUs then keep their numeric order. */
static long topology_value(int cpu, const char *what) {
  char path[96];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
  FILE *f = fopen(path, "re");
  if (f == NULL) return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

static int by_place(const void *a, const void *b) {
  const struct cpu_place *x = a, *y = b;
  if (x->package != y->package) return x->package < y->package ? -1 : 1;
  if (x->core != y->core) return x->core < y->core ? -1 : 1;
  return x->cpu < y->cpu ? -1 : x->cpu > y->cpu;
}

int gcollrun_bind_parse(const char *s, enum gcollrun_bind *out) {
  if (strcmp(s, "cores") == 0) *out = GCOLLRUN_BIND_CORES;
  else if (strcmp(s, "none") == 0) *out = GCOLLRUN_BIND_NONE;
  else return -1;
  return 0;
}

int gcollrun_bind_plan(enum gcollrun_bind mode, int nranks, const cpu_set_t *allowed,
                       cpu_set_t *sets, char *err, size_t errlen) {
  int ncpus = CPU_COUNT(allowed);
  if (mode == GCOLLRUN_BIND_NONE) return 0;
  if (nranks > ncpus) {
    if (mode == GCOLLRUN_BIND_AUTO) return 0;
    snprintf(err, errlen, "--cpu-bind=cores: %d ranks but %d CPUs to bind them to "
             "(use --cpu-bind=none to let them share)", nranks, ncpus);
    return -1;
  }
  struct cpu_place *place = calloc((size_t)ncpus, sizeof(*place));
  if (place == NULL) {
    snprintf(err, errlen, "--cpu-bind: out of memory");
    return -1;
  }
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < ncpus; c++)
    if (CPU_ISSET(c, allowed))
      place[n++] = (struct cpu_place){.cpu = c, .package = topology_value(c, "physical_package_id"),
                                      .core = topology_value(c, "core_id")};
  /* Hyperthreads of one core next to each other: a block of 2 on a
   * 2-way SMT machine is one whole core, not halves of two. */
  qsort(place, (size_t)n, sizeof(*place), by_place);
  /* Blocks as gcollrun_block_layout deals ranks over nodes: every rank
   * n / nranks CPUs, the first n mod nranks one more. */
  int next = 0;
  for (int r = 0; r < nranks; r++) {
    int take = n / nranks + (r < n % nranks ? 1 : 0);
    CPU_ZERO(&sets[r]);
    for (int i = 0; i < take; i++) CPU_SET(place[next++].cpu, &sets[r]);
  }
  free(place);
  return 1;
}
