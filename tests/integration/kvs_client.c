/* A rank program for tests/integration/test_gcollrun.sh: checks what
 * gcollrun gives a rank (plan, identity, KVS) and exercises the bootstrap
 * the way the runtime will, fetching only its ring neighbours' keys.
 *
 * usage: kvs_client [MODE]
 *   (none)               ring check: put, fence, get prev/next of channel 0
 *                        from the plan, cross-check their values, barrier
 *   --exit R CODE        as above, but rank R exits CODE before the barrier
 *   --kill R             as above, but rank R SIGKILLs itself before it
 *   --wait-term          after the ring check print "ready", then wait for
 *                        SIGTERM (20 s at most) and report it
 *   --sleep SEC          after the ring check sleep SEC seconds
 *   --wrong-key          connect with a corrupted job key; succeed only if
 *                        the server refuses it
 *   --get-missing        get a key nobody puts; succeed only if the get
 *                        fails with a deadline message
 * Exit status 0 when every check passed; 1 otherwise with one line. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcoll_plan.h"
#include "runtime/bootstrap.h"

#define BLOB_MAX 60000

static int rank_ = -1;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "kvs_client rank %d: %s\n", rank_, msg);
  return 1;
}

static long env_long(const char *name) {
  const char *s = getenv(name);
  char *end;
  if (s == NULL || *s == '\0') return -1;
  long v = strtol(s, &end, 10);
  return *end == '\0' ? v : -1;
}

/* Deterministic per-rank blob of rank-dependent length: exercises values
 * that span many socket reads. */
static size_t blob_of(int r, unsigned char *buf) {
  size_t len = 1000 + ((size_t)r * 7919u) % (BLOB_MAX - 1000);
  uint32_t x = 2166136261u ^ (uint32_t)r;
  for (size_t i = 0; i < len; i++) {
    x = x * 16777619u + 12345u;
    buf[i] = (unsigned char)(x >> 24);
  }
  return len;
}

static int check_identity(struct gcoll_rank_view *v, const struct gcoll_bootstrap *bs) {
  const char *plan = getenv("GCOLL_PLAN");
  char err[1024];
  if (plan == NULL) return fail("GCOLL_PLAN is not set");
  if (access(plan, R_OK) != 0) return fail("GCOLL_PLAN=%s is not readable", plan);
  if (gcoll_plan_load_rank_view(plan, bs->rank, v, err, sizeof(err)) != 0)
    return fail("%s", err);
  if (v->rank != bs->rank || v->nranks != bs->nranks || env_long("GCOLL_RANK") != v->rank ||
      env_long("GCOLL_NRANKS") != v->nranks)
    return fail("plan says rank %d of %d, environment %ld of %ld", v->rank, v->nranks,
                env_long("GCOLL_RANK"), env_long("GCOLL_NRANKS"));
  if (env_long("GCOLL_NODE") != v->node || env_long("GCOLL_LOCAL_RANK") != v->local_rank)
    return fail("plan says node %d local rank %d, environment %ld / %ld", v->node,
                v->local_rank, env_long("GCOLL_NODE"), env_long("GCOLL_LOCAL_RANK"));
  if (v->nchannels < 1) return fail("plan has no channels");
  int p = v->ring[0].prev, n = v->ring[0].next;
  if (p < 0 || p >= v->nranks || n < 0 || n >= v->nranks)
    return fail("ring neighbours %d/%d out of range", p, n);
  return 0;
}

static int publish(struct gcoll_bootstrap *bs, const struct gcoll_rank_view *v) {
  char key[64], val[128], err[1024];
  unsigned char blob[BLOB_MAX];
  snprintf(key, sizeof(key), "test/ring/%d", bs->rank);
  snprintf(val, sizeof(val), "rank=%d prev=%d next=%d", bs->rank, v->ring[0].prev,
           v->ring[0].next);
  if (gcoll_bootstrap_put(bs, key, val, strlen(val) + 1, err, sizeof(err)) != 0)
    return fail("%s", err);
  /* Same value again is fine; a different one must be refused. */
  if (gcoll_bootstrap_put(bs, key, val, strlen(val) + 1, err, sizeof(err)) != 0)
    return fail("identical re-put refused: %s", err);
  if (gcoll_bootstrap_put(bs, key, "other", 6, err, sizeof(err)) == 0 ||
      strstr(err, "already holds") == NULL)
    return fail("conflicting re-put not refused (%s)", err);
  snprintf(key, sizeof(key), "test/blob/%d", bs->rank);
  size_t len = blob_of(bs->rank, blob);
  if (gcoll_bootstrap_put(bs, key, blob, len, err, sizeof(err)) != 0) return fail("%s", err);
  return 0;
}

/* Fetches neighbour `peer`'s ring entry and blob and checks that it names
 * us on the side it should. */
static int check_neighbour(struct gcoll_bootstrap *bs, int peer, int peer_is_next) {
  char key[64], val[128], err[1024];
  unsigned char blob[BLOB_MAX], want[BLOB_MAX];
  size_t len;
  snprintf(key, sizeof(key), "test/ring/%d", peer);
  if (gcoll_bootstrap_get(bs, key, val, sizeof(val), &len, gcoll_bootstrap_deadline(bs), err,
                          sizeof(err)) != 0)
    return fail("%s", err);
  int r, p, n;
  if (len == 0 || val[len - 1] != '\0' || sscanf(val, "rank=%d prev=%d next=%d", &r, &p, &n) != 3)
    return fail("%s: malformed value", key);
  if (r != peer) return fail("%s holds rank %d", key, r);
  if ((peer_is_next ? p : n) != bs->rank)
    return fail("ring is not consistent: my %s is %d, whose %s is %d", peer_is_next ? "next" : "prev",
                peer, peer_is_next ? "prev" : "next", peer_is_next ? p : n);
  snprintf(key, sizeof(key), "test/blob/%d", peer);
  if (gcoll_bootstrap_get(bs, key, blob, sizeof(blob), &len, gcoll_bootstrap_deadline(bs), err,
                          sizeof(err)) != 0)
    return fail("%s", err);
  size_t wlen = blob_of(peer, want);
  if (len != wlen || memcmp(blob, want, len) != 0)
    return fail("%s: %zu bytes, expected %zu, content %s", key, len, wlen,
                len == wlen ? "differs" : "not compared");
  return 0;
}

static int wait_for_term(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  printf("rank %d ready\n", rank_);
  fflush(stdout);
  struct timespec limit = {20, 0};
  if (sigtimedwait(&set, NULL, &limit) != SIGTERM) return fail("no SIGTERM within 20 s");
  printf("rank %d got SIGTERM\n", rank_);
  return 0;
}

static int mode_wrong_key(void) {
  const char *key = getenv("GCOLL_JOB_KEY");
  char bad[128], err[1024];
  snprintf(bad, sizeof(bad), "x%s", key ? key + (key[0] != '\0') : "");
  setenv("GCOLL_JOB_KEY", bad, 1);
  struct gcoll_bootstrap *bs;
  if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) == 0) {
    gcoll_bootstrap_close(bs);
    return fail("a wrong job key was accepted");
  }
  if (strstr(err, "not signed with this job's key") == NULL)
    return fail("unexpected refusal: %s", err);
  printf("%s\n", err);
  return 0;
}

static int mode_get_missing(void) {
  struct gcoll_bootstrap *bs;
  char err[1024], buf[16];
  size_t len;
  if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) != 0) return fail("%s", err);
  int rc = gcoll_bootstrap_get(bs, "test/nobody-puts-this", buf, sizeof(buf), &len,
                               gcoll_bootstrap_deadline(bs), err, sizeof(err));
  gcoll_bootstrap_close(bs);
  if (rc == 0) return fail("get of a missing key succeeded");
  if (strstr(err, "within") == NULL || strstr(err, "GCOLL_TIMEOUT") == NULL)
    return fail("unexpected get failure: %s", err);
  fprintf(stderr, "%s\n", err);
  return 0;
}

struct ring_mode {
  int exit_rank, exit_code, kill_rank, wait_term;
  double sleep_s;
};

static int parse_ring_mode(int argc, char **argv, struct ring_mode *m) {
  memset(m, 0, sizeof(*m));
  m->exit_rank = m->kill_rank = -1;
  if (argc == 4 && strcmp(argv[1], "--exit") == 0) {
    m->exit_rank = atoi(argv[2]);
    m->exit_code = atoi(argv[3]);
  } else if (argc == 3 && strcmp(argv[1], "--kill") == 0) {
    m->kill_rank = atoi(argv[2]);
  } else if (argc == 2 && strcmp(argv[1], "--wait-term") == 0) {
    m->wait_term = 1;
  } else if (argc == 3 && strcmp(argv[1], "--sleep") == 0) {
    m->sleep_s = atof(argv[2]);
  } else if (argc != 1) {
    return fail("bad arguments (see the comment at the top of kvs_client.c)");
  }
  return 0;
}

static int ring_check(struct gcoll_bootstrap *bs, const struct ring_mode *m) {
  struct gcoll_rank_view v;
  char err[1024];
  if (check_identity(&v, bs) || publish(bs, &v)) return 1;
  if (gcoll_bootstrap_fence(bs, gcoll_bootstrap_deadline(bs), err, sizeof(err)) != 0)
    return fail("%s", err);
  if (check_neighbour(bs, v.ring[0].next, 1) || check_neighbour(bs, v.ring[0].prev, 0)) return 1;
  if (bs->rank == m->exit_rank) exit(m->exit_code); /* no goodbye: a crash */
  if (bs->rank == m->kill_rank) raise(SIGKILL);
  if (gcoll_bootstrap_barrier(bs, gcoll_bootstrap_deadline(bs), err, sizeof(err)) != 0)
    return fail("%s", err);
  printf("rank %d/%d node %d local %d: prev %d next %d ok\n", v.rank, v.nranks, v.node,
         v.local_rank, v.ring[0].prev, v.ring[0].next);
  fflush(stdout);
  if (m->wait_term) return wait_for_term();
  if (m->sleep_s > 0) {
    struct timespec ts = {(time_t)m->sleep_s, (long)((m->sleep_s - (time_t)m->sleep_s) * 1e9)};
    nanosleep(&ts, NULL);
  }
  return 0;
}

int main(int argc, char **argv) {
  rank_ = (int)env_long("GCOLL_RANK");
  if (argc == 2 && strcmp(argv[1], "--wrong-key") == 0) return mode_wrong_key();
  if (argc == 2 && strcmp(argv[1], "--get-missing") == 0) return mode_get_missing();
  struct ring_mode m;
  if (parse_ring_mode(argc, argv, &m)) return 1;
  struct gcoll_bootstrap *bs;
  char err[1024];
  if (gcoll_bootstrap_open_from_env(&bs, err, sizeof(err)) != 0) return fail("%s", err);
  int rc = ring_check(bs, &m);
  gcoll_bootstrap_close(bs);
  return rc;
}
