/* Shared helpers for the unit tests. */
#ifndef GCOLL_TESTUTIL_H
#define GCOLL_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "graph/topo.h"

/* Directory of the reference topologies: $GCOLL_TOPO_DIR (set by make
 * check), else the source tree's etc/topologies. */
static inline const char *test_topo_dir(void) {
  const char *d = getenv("GCOLL_TOPO_DIR");
  return d && *d ? d : GCOLL_SRC_TOPO_DIR;
}

/* Loads etc/topologies/NAME.yaml with paths computed; aborts the test
 * program with the reader's message if that fails. */
static inline struct gcoll_topo *test_topo_load(const char *name) {
  char path[4096], err[512];
  snprintf(path, sizeof(path), "%s/%s.yaml", test_topo_dir(), name);
  struct gcoll_topo *t = gcoll_topo_read_file(path, err, sizeof(err));
  if (t == NULL || gcoll_topo_compute_paths(t, err, sizeof(err)) != 0) {
    fprintf(stderr, "cannot load %s: %s\n", path, err);
    abort();
  }
  return t;
}

/* Deterministic PRNG for property tests (xorshift64*). */
static inline unsigned long long test_rand(unsigned long long *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

#endif
