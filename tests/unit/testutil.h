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

/* The four reference topologies as a cmocka group fixture:
 * cmocka_run_group_tests(tests, test_ref_load, test_ref_free). */
enum { TEST_H100, TEST_A100, TEST_PCIE, TEST_CPU, TEST_NREF };
static const char *const test_ref_names[TEST_NREF] __attribute__((unused)) = {
    "dgx-h100", "dgx-a100", "pcie-2s-4gpu", "cpu-only"};
static struct gcoll_topo *test_ref[TEST_NREF] __attribute__((unused));

static inline int test_ref_load(void **state) {
  (void)state;
  for (int i = 0; i < TEST_NREF; i++) test_ref[i] = test_topo_load(test_ref_names[i]);
  return 0;
}

static inline int test_ref_free(void **state) {
  (void)state;
  for (int i = 0; i < TEST_NREF; i++) gcoll_topo_free(test_ref[i]);
  return 0;
}

/* Deterministic PRNG for property tests (xorshift64*). */
static inline unsigned long long test_rand(unsigned long long *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

/* A 64-bit mixer (splitmix64's finaliser) for inputs that are a function
 * of their coordinates, so every rank can compute every other's. */
static inline unsigned long long test_mix(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

/* Input element i of rank r for a seed: an integer in [-range, range].
 * Small integers keep sums and products exact in any reduction order. */
static inline long long test_rank_input(unsigned long long seed, int r, size_t i, int range) {
  unsigned long long h = test_mix(seed ^ test_mix((unsigned long long)r * 0x9e3779b97f4a7c15ULL + i));
  return (long long)(h % (2 * (unsigned long long)range + 1)) - range;
}

#endif
