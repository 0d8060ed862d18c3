/* What the multi-process checkers (coll_check, p2p_check) share: each is
 * one file run as every rank of a gcollrun job, so the header holds the
 * process's rank and small helpers as statics. */
#ifndef GCOLL_TESTS_CHECK_UTIL_H
#define GCOLL_TESTS_CHECK_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"

static int rank, nranks;

/* A 64-bit finaliser (murmur3's): inputs derived from (rank, index, seed)
 * that every rank can recompute for any other. */
static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

/* Zeroed, so that every page is touched once, before any timed or checked
 * call reuses it. */
static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, n);
    exit(2);
  }
  memset(p, 0, n ? n : 1);
  return p;
}

static inline int check_gcoll(gcollResult_t rc, const char *what) {
  if (rc == gcollSuccess) return 0;
  fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, gcollGetErrorString(rc),
          gcollGetLastError(NULL));
  return -1;
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Thread body for the abort tests: aborts the communicator 0.3 s later. */
static inline void *abort_later(void *arg) {
  usleep(300000);
  gcollCommAbort((gcollComm_t)arg);
  return NULL;
}

#endif
