/* Bootstrap backend "local": the ranks are threads of one process
 * (gcollCommInitAll), so the store is a list under a mutex and the
 * collectives are generation counters under a condition variable. Chosen
 * explicitly by the caller, never from the environment: there is nothing
 * for another process to find.
 *
 * A rank that closes its handle before a collective completes (its init
 * failed) fails every pending and later collective at once, so the other
 * threads report its absence instead of waiting out GCOLL_TIMEOUT. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/wait.h"
#include "runtime/bootstrap.h"

struct local_entry {
  struct local_entry *next;
  size_t klen, vlen;
  char data[];               /* key, NUL, value */
};

struct gcoll_bootstrap_local {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int nranks;
  int refs;                  /* the creator plus one per open handle */
  int closed;                /* handles closed so far */
  int first_closed;          /* rank of the first, -1 if none */
  int arrived;               /* ranks inside the current collective */
  uint64_t generation;       /* collectives completed */
  struct local_entry *entries;
};

static void shared_free(struct gcoll_bootstrap_local *s) {
  while (s->entries != NULL) {
    struct local_entry *n = s->entries->next;
    free(s->entries);
    s->entries = n;
  }
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void shared_unref(struct gcoll_bootstrap_local *s) {
  pthread_mutex_lock(&s->mu);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&s->mu);
  if (last) shared_free(s);
}

struct gcoll_bootstrap_local *gcoll_bootstrap_local_create(int nranks, char *err,
                                                           size_t errlen) {
  if (nranks < 1 || nranks > (1 << 20)) {
    snprintf(err, errlen, "bootstrap(local): %d ranks, must be 1 to %d", nranks, 1 << 20);
    return NULL;
  }
  struct gcoll_bootstrap_local *s = calloc(1, sizeof(*s));
  pthread_condattr_t ca;
  if (s == NULL || pthread_condattr_init(&ca) != 0) {
    free(s);
    snprintf(err, errlen, "bootstrap(local): out of memory");
    return NULL;
  }
  /* Deadlines are CLOCK_MONOTONIC milliseconds, like every backend's. */
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&s->mu, NULL);
  s->nranks = nranks;
  s->refs = 1;
  s->first_closed = -1;
  return s;
}

void gcoll_bootstrap_local_release(struct gcoll_bootstrap_local *s) {
  if (s != NULL) shared_unref(s);
}

/* Waits on the condition variable until deadline; 0, or ETIMEDOUT. */
static int wait_until(struct gcoll_bootstrap_local *s, uint64_t deadline_ms) {
  if (gcoll_bootstrap_now_ms() >= deadline_ms) return ETIMEDOUT;
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000u),
                        .tv_nsec = (long)(deadline_ms % 1000u) * 1000000L};
  int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

static const struct local_entry *find(const struct gcoll_bootstrap_local *s, const char *key) {
  size_t klen = strlen(key);
  for (const struct local_entry *e = s->entries; e != NULL; e = e->next)
    if (e->klen == klen && memcmp(e->data, key, klen) == 0) return e;
  return NULL;
}

/* Threads of one process still make requests to one store: init's INFO
 * line counts them as the other backends do. */
static void counted(struct gcoll_bootstrap *bs, uint64_t t0) {
  bs->requests++;
  bs->request_ns += gcoll_wait_now_ns() - t0;
}

static int put_entry(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                     char *err, size_t errlen) {
  struct gcoll_bootstrap_local *s = bs->impl;
  size_t klen = strlen(key);
  if (klen == 0 || klen > GCOLL_BOOTSTRAP_MAX_KEY || len > GCOLL_BOOTSTRAP_MAX_VALUE) {
    snprintf(err, errlen, "bootstrap(local): put '%.64s': key must be 1..%d bytes and the "
                          "value at most %d bytes (it is %zu)",
             key, GCOLL_BOOTSTRAP_MAX_KEY, GCOLL_BOOTSTRAP_MAX_VALUE, len);
    return -1;
  }
  struct local_entry *e = malloc(sizeof(*e) + klen + 1 + len);
  if (e == NULL) {
    snprintf(err, errlen, "bootstrap(local): put '%.64s': out of memory", key);
    return -1;
  }
  e->klen = klen;
  e->vlen = len;
  memcpy(e->data, key, klen + 1);
  if (len) memcpy(e->data + klen + 1, value, len);
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  const struct local_entry *old = find(s, key);
  /* Same rule as the TCP store: written once, an identical re-put is fine. */
  if (old != NULL) {
    if (old->vlen != len || memcmp(old->data + old->klen + 1, value, len) != 0) {
      snprintf(err, errlen, "bootstrap(local): put '%.64s': key already holds another value",
               key);
      rc = -1;
    }
    free(e);
  } else {
    e->next = s->entries;
    s->entries = e;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int local_put(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                     char *err, size_t errlen) {
  uint64_t t0 = gcoll_wait_now_ns();
  int rc = put_entry(bs, key, value, len, err, errlen);
  counted(bs, t0);
  return rc;
}

static int local_get(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
                     size_t *len, uint64_t deadline_ms, char *err, size_t errlen) {
  uint64_t t0 = gcoll_wait_now_ns();
  struct gcoll_bootstrap_local *s = bs->impl;
  uint64_t start = gcoll_bootstrap_now_ms();
  int rc = -1;
  pthread_mutex_lock(&s->mu);
  const struct local_entry *e;
  while ((e = find(s, key)) == NULL && s->closed == 0)
    if (wait_until(s, deadline_ms) == ETIMEDOUT) break;
  if (e != NULL) {
    *len = e->vlen;
    if (e->vlen > buflen)
      snprintf(err, errlen, "bootstrap(local): get '%.64s': value of %zu bytes does not fit %zu",
               key, e->vlen, buflen);
    else {
      memcpy(buf, e->data + e->klen + 1, e->vlen);
      rc = 0;
    }
  } else if (s->closed > 0) {
    snprintf(err, errlen, "bootstrap(local): get '%.64s': rank %d left the job first", key,
             s->first_closed);
  } else {
    snprintf(err, errlen, "bootstrap(local): get '%.64s': no rank put this key within %.3g s "
                          "(deadline from GCOLL_TIMEOUT)",
             key, (double)(gcoll_bootstrap_now_ms() - start) / 1000.0);
  }
  pthread_mutex_unlock(&s->mu);
  counted(bs, t0);
  return rc;
}

/* Puts are visible at once, so fence and barrier are the same rendezvous. */
static int local_collective(struct gcoll_bootstrap *bs, uint64_t deadline_ms, char *err,
                            size_t errlen, const char *what) {
  struct gcoll_bootstrap_local *s = bs->impl;
  uint64_t t0 = gcoll_wait_now_ns();
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  uint64_t gen = s->generation;
  if (++s->arrived == s->nranks) {
    s->arrived = 0;
    s->generation++;
    pthread_cond_broadcast(&s->cv);
  }
  while (s->generation == gen && s->closed == 0)
    if (wait_until(s, deadline_ms) == ETIMEDOUT) break;
  if (s->generation == gen) {
    s->arrived--;
    if (s->closed > 0)
      snprintf(err, errlen, "bootstrap(local): %s: rank %d left the job first", what,
               s->first_closed);
    else
      snprintf(err, errlen, "bootstrap(local): %s: not all %d ranks arrived (deadline from "
                            "GCOLL_TIMEOUT)", what, s->nranks);
    rc = -1;
  }
  pthread_mutex_unlock(&s->mu);
  counted(bs, t0);
  return rc;
}

static int local_fence(struct gcoll_bootstrap *bs, uint64_t deadline_ms, char *err,
                       size_t errlen) {
  return local_collective(bs, deadline_ms, err, errlen, "fence");
}

static int local_barrier(struct gcoll_bootstrap *bs, uint64_t deadline_ms, char *err,
                         size_t errlen) {
  return local_collective(bs, deadline_ms, err, errlen, "barrier");
}

static void local_close(struct gcoll_bootstrap *bs) {
  struct gcoll_bootstrap_local *s = bs->impl;
  pthread_mutex_lock(&s->mu);
  if (s->closed++ == 0) s->first_closed = bs->rank;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  shared_unref(s);
  free(bs);
}

static const struct gcoll_bootstrap_ops local_ops = {
    .put = local_put, .get = local_get, .fence = local_fence, .barrier = local_barrier,
    .close = local_close};

int gcoll_bootstrap_local_open(struct gcoll_bootstrap_local *s, int rank,
                               struct gcoll_bootstrap **out, char *err, size_t errlen) {
  *out = NULL;
  if (rank < 0 || rank >= s->nranks) {
    snprintf(err, errlen, "bootstrap(local): rank %d is not in 0..%d", rank, s->nranks - 1);
    return -1;
  }
  struct gcoll_bootstrap *bs = calloc(1, sizeof(*bs));
  if (bs == NULL) {
    snprintf(err, errlen, "bootstrap(local): out of memory");
    return -1;
  }
  if (gcoll_bootstrap_timeout_from_env(&bs->timeout_ms, err, errlen) != 0) {
    free(bs);
    return -1;
  }
  bs->ops = &local_ops;
  bs->backend = "local";
  bs->opened_ns = gcoll_wait_now_ns();
  bs->rank = rank;
  bs->nranks = s->nranks;
  bs->impl = s;
  snprintf(bs->store, sizeof(bs->store), "this process's in-memory store");
  pthread_mutex_lock(&s->mu);
  s->refs++;
  pthread_mutex_unlock(&s->mu);
  *out = bs;
  return 0;
}
