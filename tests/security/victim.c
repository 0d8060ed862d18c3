/* The victim of tests/security: an ordinary gcollrun job whose every result
 * element is known, so data injected by another user cannot go unnoticed.
 *
 *   victim [--iters N] [--count C] [--pause-ms MS] [--second-comm]
 *
 * Defaults: N = 20, C = 256, MS = 300.
 *
 * Phase 1: the communicator gcollrun sets up (shm inside a virtual node,
 * net/socket between them); N allreduces (sum, int32, C elements) where
 * element i of rank r in iteration k is (r + 1) * (i % 7 + 1) + k, so the
 * sum is n(n+1)/2 * (i % 7 + 1) + n k. Every element is checked.
 *
 * With --second-comm, phase 2 builds a second communicator the way
 * programs without a launcher do: rank 0 calls gcollGetUniqueId (which
 * starts its own key-value store), broadcasts the id over the first
 * communicator, every rank waits MS milliseconds (the window in which a
 * stranger can find the new store) and joins with gcollCommInitRank on two
 * virtual nodes again (GCOLL_NODES=2: shm and net/socket edges); then the
 * same N checked allreduces on it.
 *
 * One line per rank: "victim rank R: ... right" and exit 0, or a "WRONG"
 * line naming the first bad element (and how many elements carry the
 * attacker's 666) and exit 1; 3 when a communicator cannot be built, 4
 * when a collective fails. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, setenv */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"

#define ATTACK_VALUE 666

static int rank = -1, nranks;

static int fail(const char *what, gcollResult_t rc, gcollComm_t comm, int code) {
  fprintf(stderr, "victim rank %d: %s: %s: %s\n", rank, what, gcollGetErrorString(rc),
          gcollGetLastError(comm));
  return code;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* N checked allreduces; 0, 1 (wrong data) or 4 (a call failed). */
static int check_loop(gcollComm_t comm, const char *name, int iters, size_t count) {
  int32_t *buf = malloc(count * sizeof(*buf));
  if (buf == NULL) {
    fprintf(stderr, "victim rank %d: out of memory\n", rank);
    return 4;
  }
  int status = 0;
  for (int k = 0; k < iters && status == 0; k++) {
    for (size_t i = 0; i < count; i++) buf[i] = (int32_t)((rank + 1) * (int)(i % 7 + 1) + k);
    gcollResult_t rc = gcollAllReduce(buf, buf, count, gcollInt32, gcollSum, comm, NULL);
    if (rc != gcollSuccess) {
      char what[96];
      snprintf(what, sizeof(what), "%s allreduce %d", name, k);
      status = fail(what, rc, comm, 4);
      break;
    }
    size_t wrong = 0, evil = 0, first = 0;
    for (size_t i = 0; i < count; i++) {
      int32_t want = (int32_t)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1) + nranks * k);
      if (buf[i] != want) {
        if (wrong++ == 0) first = i;
        /* The attacker's value, alone or summed with one of ours. */
        evil += buf[i] == ATTACK_VALUE || (buf[i] - want) % ATTACK_VALUE == 0;
      }
    }
    if (wrong > 0) {
      int32_t want = (int32_t)(nranks * (nranks + 1) / 2 * (int)(first % 7 + 1) + nranks * k);
      printf("victim rank %d: WRONG %s allreduce %d: %zu of %zu elements wrong, first [%zu] = %d "
             "instead of %d; %zu look injected (%d)\n",
             rank, name, k, wrong, count, first, buf[first], want, evil, ATTACK_VALUE);
      status = 1;
    }
  }
  if (status == 0)
    printf("victim rank %d: %s: %d allreduces of %zu int32 right\n", rank, name, iters, count);
  fflush(stdout);
  free(buf);
  return status;
}

int main(int argc, char **argv) {
  int iters = 20, second = 0;
  long pause_ms = 300;
  size_t count = 256;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) count = (size_t)atol(argv[++i]);
    else if (strcmp(argv[i], "--pause-ms") == 0 && i + 1 < argc) pause_ms = atol(argv[++i]);
    else if (strcmp(argv[i], "--second-comm") == 0) second = 1;
    else {
      fprintf(stderr, "usage: victim [--iters N] [--count C] [--pause-ms MS] [--second-comm]\n");
      return 2;
    }
  }
  if (iters < 1 || count < 1 || count > (1u << 24) || pause_ms < 0 || pause_ms > 60000) {
    fprintf(stderr, "victim: bad arguments\n");
    return 2;
  }
  gcollComm_t comm;
  gcollResult_t rc = gcollCommInitFromPlan(&comm, NULL, -1);
  if (rc != gcollSuccess) return fail("init", rc, NULL, 3);
  gcollCommUserRank(comm, &rank);
  gcollCommCount(comm, &nranks);
  int status = check_loop(comm, "plan communicator", iters, count);

  if (status == 0 && second) {
    gcollUniqueId id;
    memset(&id, 0, sizeof(id));
    if (rank == 0 && (rc = gcollGetUniqueId(&id)) != gcollSuccess)
      return fail("gcollGetUniqueId", rc, NULL, 3);
    rc = gcollBroadcast(&id, &id, sizeof(id), gcollUint8, 0, comm, NULL);
    if (rc != gcollSuccess) return fail("broadcast of the unique id", rc, comm, 4);
    sleep_ms(pause_ms);
    setenv("GCOLL_NODES", "2", 1);
    gcollComm_t comm2;
    rc = gcollCommInitRank(&comm2, nranks, id, rank);
    if (rc != gcollSuccess) return fail("gcollCommInitRank", rc, NULL, 3);
    status = check_loop(comm2, "unique-id communicator", iters, count);
    rc = gcollCommDestroy(comm2);
    if (rc != gcollSuccess && status == 0) status = fail("destroy (unique id)", rc, NULL, 4);
  }
  rc = gcollCommDestroy(comm);
  if (rc != gcollSuccess && status == 0) status = fail("destroy", rc, NULL, 4);
  return status;
}
