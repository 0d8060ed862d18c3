/* The proxy thread (see proxy.h for the rules it follows). */
#define _GNU_SOURCE
#include "runtime/proxy.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/service_thread.h"

/* What poll() is given and, slot for slot, the entry each slot is for. */
struct poll_set {
  struct pollfd *pfd;
  struct gcoll_proxy_entry **entry;
  int cap;
};

struct gcoll_proxy {
  pthread_mutex_t lock;
  pthread_t thread;
  int thread_started;
  int wake_fd;
  _Atomic int stop;
  _Atomic int sleeping;
  _Atomic int refs;
  struct gcoll_proxy_entry *entries;
  int nentries;
  /* Bumped by every add/remove: poll results of a round are only mapped back
   * to entries when the set did not change during the poll. */
  uint64_t generation;
  /* Poll set of the current round, used by the thread without the lock
   * while it polls. add() allocates a bigger set into next when needed
   * (it may fail there, cleanly); the thread swaps it in under the lock. */
  struct poll_set cur, next;
  /* Threads between gcoll_proxy_inline_begin and _end, and the poll set
   * of inline rounds: its own, as the thread may be polling cur without
   * the lock; only used under the lock, so grown directly by add(). */
  _Atomic int inline_users;
  struct poll_set inl;
  _Atomic uint64_t rounds, sleeps, yields, inline_rounds, inline_fds;
  /* Set by the first collective or send/recv (gcoll_proxy_wake, inline
   * begin): until then only connections are being made, whose progress
   * comes with fd events, so the thread neither spins nor polls often. */
  _Atomic int started;
};

static uint64_t now_ns(void) {
  return gcoll_clock_ns();
}

static void drain_wake_fd(struct gcoll_proxy *p) {
  uint64_t v;
  while (read(p->wake_fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
  }
}

static void poll_set_free(struct poll_set *s) {
  free(s->pfd);
  free(s->entry);
  *s = (struct poll_set){0};
}

/* Replaces *s, which has `have` slots, by an empty set of at least `need`
 * (doubling from have, or from 16), when have is less; -1 when out of
 * memory, *s unchanged. */
static int poll_set_grow(struct poll_set *s, int have, int need) {
  if (need <= have) return 0;
  int c = have ? have : 16;
  while (c < need) c *= 2;
  struct poll_set n = {.pfd = calloc((size_t)c, sizeof(*n.pfd)),
                       .entry = calloc((size_t)c, sizeof(*n.entry)), .cap = c};
  if (n.pfd == NULL || n.entry == NULL) {
    poll_set_free(&n);
    return -1;
  }
  poll_set_free(s);
  *s = n;
  return 0;
}

/* Slot *n of s for fd; add() made room for every entry, so the bound is
 * only a guard. */
static void poll_set_put(struct poll_set *s, int *n, int fd, short events,
                         struct gcoll_proxy_entry *e) {
  if (*n >= s->cap) return;
  s->pfd[*n] = (struct pollfd){.fd = fd, .events = events};
  s->entry[(*n)++] = e;
}

/* Fills the poll set from the entries; returns its size. Slot 0 is the
 * wake-up eventfd. *sockets says whether any entry has an fd at all. */
static int build_poll_set(struct gcoll_proxy *p, int *sockets) {
  if (p->next.pfd != NULL) {
    poll_set_free(&p->cur);
    p->cur = p->next;
    p->next = (struct poll_set){0};
  }
  int n = 0;
  *sockets = 0;
  poll_set_put(&p->cur, &n, p->wake_fd, POLLIN, NULL);
  for (struct gcoll_proxy_entry *e = p->entries; e != NULL; e = e->next) {
    if (e->fd < 0) continue;
    *sockets = 1;
    if (e->events != 0) poll_set_put(&p->cur, &n, e->fd, e->events, e);
  }
  return n;
}

static short revents_of(struct gcoll_proxy *p, int n, const struct gcoll_proxy_entry *e) {
  for (int i = 1; i < n; i++)
    if (p->cur.entry[i] == e && p->cur.pfd[i].fd == e->fd) return p->cur.pfd[i].revents;
  return 0;
}

/* One progress pass over every entry; returns whether anything moved and
 * sets *busy when an entry waits on its executor. */
static int progress_all(struct gcoll_proxy *p, int n, int polled, int *busy) {
  int moved = 0;
  *busy = 0;
  for (struct gcoll_proxy_entry *e = p->entries; e != NULL; e = e->next) {
    if (e->progress == NULL) continue;
    short rev = polled ? revents_of(p, n, e) : 0;
    if (e->progress(e, rev)) moved = 1;
    if (e->busy) *busy = 1;
  }
  return moved;
}

static void check_all(struct gcoll_proxy *p) {
  for (struct gcoll_proxy_entry *e = p->entries; e != NULL; e = e->next)
    if (e->check != NULL) e->check(e);
}

/* What an inline round polls (proxy.h): the hot entries' fds (every fd
 * once in GCOLL_PROXY_COLD_ROUNDS), or every fd. */
enum round_polls { POLL_HOT, POLL_ALL };

/* One zero-timeout round on the inline poll set, lock held: poll the fds
 * `polls` says, then every progress callback with its poll result.
 * Returns whether anything moved; *pending (when asked) says whether an
 * entry is left with work only a later round can do (a socket that took
 * part of a step wants POLLOUT; a busy entry waits on its executor). */
static int inline_round(struct gcoll_proxy *p, int *pending, enum round_polls polls) {
  const uint64_t round = atomic_load_explicit(&p->inline_rounds, memory_order_relaxed);
  const int all = polls == POLL_ALL || round % GCOLL_PROXY_COLD_ROUNDS == 0;
  int n = 0;
  for (struct gcoll_proxy_entry *e = p->entries; e != NULL; e = e->next) {
    if (e->fd >= 0 && e->events != 0 && (all || e->hot_until > round))
      poll_set_put(&p->inl, &n, e->fd, e->events, e);
  }
  int r = n > 0 ? poll(p->inl.pfd, (nfds_t)n, 0) : 0;
  int moved = 0, i = 0;
  if (pending != NULL) *pending = 0;
  /* The callbacks cannot add or remove entries, so the list is in the
   * order the set was built in. */
  for (struct gcoll_proxy_entry *e = p->entries; e != NULL; e = e->next) {
    short rev = 0;
    if (i < n && p->inl.entry[i] == e) {
      if (r > 0) rev = p->inl.pfd[i].revents;
      i++;
    }
    if (e->progress == NULL) continue;
    int m = e->progress(e, rev);
    if (m || rev != 0) e->hot_until = round + GCOLL_PROXY_HOT_ROUNDS;
    moved |= m;
    if (pending != NULL && (e->busy || (e->events & POLLOUT))) *pending = 1;
  }
  atomic_fetch_add_explicit(&p->inline_rounds, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->inline_fds, (uint64_t)n, memory_order_relaxed);
  return moved;
}

/* A round while some thread polls inline: sleep on the wake-up eventfd
 * only (its sockets are that thread's to read), then one zero-timeout
 * round of our own, unless the lock is taken: then an inline poller is at
 * work, and waiting for it would make each of its unlocks a futex wake-up,
 * so we sleep again. A wake-up (work that is not inline started: another
 * communicator's large collective, a send/recv, or steps an inline spell
 * left) ends the standby for GCOLL_PROXY_ACTIVE_NS, sets *awake_until.
 * Lock held on entry and return. */
static void standby_round(struct gcoll_proxy *p, uint64_t *last_move, uint64_t *next_check,
                          uint64_t *awake_until) {
  pthread_mutex_unlock(&p->lock);
  int lock_busy = 0;
  for (;;) {
    uint64_t t = now_ns();
    uint64_t to_check = *next_check > t ? *next_check - t : 0;
    uint64_t timeout = to_check < GCOLL_PROXY_STANDBY_NS ? to_check : GCOLL_PROXY_STANDBY_NS;
    /* The periodic check is due but an inline poller holds the lock: it is
     * at work, so the check waits a millisecond more rather than being
     * retried in a spin (a spinning proxy takes the core the poller and
     * its peer need; seen as thousands of rounds a second under load). */
    if (timeout == 0 && lock_busy) timeout = 1000000;
    atomic_store(&p->sleeping, 1);
    /* Pairs with inline_end: it drops its count, then looks at `sleeping`. */
    if (atomic_load(&p->inline_users) == 0 || atomic_load(&p->stop)) timeout = 0;
    struct pollfd w = {.fd = p->wake_fd, .events = POLLIN};
    struct timespec ts = {.tv_sec = (time_t)(timeout / 1000000000ull),
                          .tv_nsec = (long)(timeout % 1000000000ull)};
    atomic_fetch_add_explicit(&p->rounds, 1, memory_order_relaxed);
    if (timeout > 0) atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
    int r = ppoll(&w, 1, &ts, NULL);
    atomic_store(&p->sleeping, 0);
    if (r > 0 && (w.revents & POLLIN)) {
      drain_wake_fd(p);
      *awake_until = now_ns() + GCOLL_PROXY_ACTIVE_NS;
      pthread_mutex_lock(&p->lock);
      break;
    }
    if (pthread_mutex_trylock(&p->lock) == 0) break;
    lock_busy = 1;
    if (atomic_load(&p->inline_users) == 0 || atomic_load(&p->stop)) {
      pthread_mutex_lock(&p->lock);
      break;
    }
  }
  if (atomic_load(&p->stop)) return;
  uint64_t t = now_ns();
  /* Rare (GCOLL_PROXY_STANDBY_NS), and the only look a communicator idle
   * after inline calls gets: every fd. */
  if (inline_round(p, NULL, POLL_ALL)) *last_move = t;
  if (t >= *next_check) {
    check_all(p);
    *next_check = t + GCOLL_PROXY_CHECK_MS * 1000000ull;
  }
}

static void *proxy_main(void *arg) {
  struct gcoll_proxy *p = arg;
  uint64_t last_move = 0, next_check = now_ns() + GCOLL_PROXY_CHECK_MS * 1000000ull;
  uint64_t awake_until = 0;
  uint64_t sleep_ns = GCOLL_PROXY_MIN_SLEEP_NS;
  int busy = 0;
  pthread_mutex_lock(&p->lock);
  while (!atomic_load(&p->stop)) {
    if (atomic_load(&p->inline_users) > 0 && now_ns() >= awake_until) {
      standby_round(p, &last_move, &next_check, &awake_until);
      continue;
    }
    int sockets;
    int n = build_poll_set(p, &sockets);
    uint64_t gen = p->generation, t = now_ns();
    /* Idle (proxy.h) before the first collective. */
    int started = atomic_load_explicit(&p->started, memory_order_relaxed);
    int active =
        started && t - last_move < (busy ? GCOLL_PROXY_BUSY_NS : GCOLL_PROXY_ACTIVE_NS);
    uint64_t timeout = 0;
    if (!active) {
      uint64_t to_check = next_check > t ? next_check - t : 0;
      timeout = sockets && started && sleep_ns < to_check ? sleep_ns : to_check;
      /* Announce the sleep, then look at the FIFOs once more: a waker
       * either sees the announcement or published before this look. */
      atomic_store(&p->sleeping, 1);
      if (progress_all(p, n, 0, &busy)) {
        timeout = 0;
        last_move = t;
        sleep_ns = GCOLL_PROXY_MIN_SLEEP_NS;
        n = build_poll_set(p, &sockets);
        gen = p->generation;
      }
    }
    pthread_mutex_unlock(&p->lock);
    struct timespec ts = {.tv_sec = (time_t)(timeout / 1000000000ull),
                          .tv_nsec = (long)(timeout % 1000000000ull)};
    atomic_fetch_add_explicit(&p->rounds, 1, memory_order_relaxed);
    if (timeout > 0) atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
    int r = ppoll(p->cur.pfd, (nfds_t)n, &ts, NULL);
    atomic_store(&p->sleeping, 0);
    int woken = r > 0 && (p->cur.pfd[0].revents & POLLIN);
    if (woken) drain_wake_fd(p);
    pthread_mutex_lock(&p->lock);
    if (atomic_load(&p->stop)) break;
    int polled = r > 0 && gen == p->generation;
    int moved = progress_all(p, n, polled, &busy);
    t = now_ns();
    if (moved || woken) {
      last_move = t;
      sleep_ns = GCOLL_PROXY_MIN_SLEEP_NS;
    } else if (!active && timeout > 0 && sleep_ns < GCOLL_PROXY_MAX_SLEEP_NS) {
      sleep_ns *= 2;
      if (sleep_ns > GCOLL_PROXY_MAX_SLEEP_NS) sleep_ns = GCOLL_PROXY_MAX_SLEEP_NS;
    }
    if (t >= next_check) {
      check_all(p);
      next_check = t + GCOLL_PROXY_CHECK_MS * 1000000ull;
    }
    if (!moved && active) {
      pthread_mutex_unlock(&p->lock);
      atomic_fetch_add_explicit(&p->yields, 1, memory_order_relaxed);
      sched_yield();
      pthread_mutex_lock(&p->lock);
    }
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Makes room for `need` poll slots: allocated here, swapped in by the
 * thread (it may be polling the current set right now). */
static int grow_poll_set(struct gcoll_proxy *p, int need) {
  return poll_set_grow(&p->next, p->next.pfd != NULL ? p->next.cap : p->cur.cap, need);
}

/* The inline set, under the lock (only lock holders use it). */
static int grow_inline_set(struct gcoll_proxy *p, int need) {
  return poll_set_grow(&p->inl, p->inl.cap, need);
}

static void proxy_free(struct gcoll_proxy *p) {
  if (p->wake_fd >= 0) close(p->wake_fd);
  poll_set_free(&p->inl);
  pthread_mutex_destroy(&p->lock);
  poll_set_free(&p->cur);
  poll_set_free(&p->next);
  free(p);
}

int gcoll_proxy_create(struct gcoll_proxy **out, char *err, size_t errlen) {
  *out = NULL;
  struct gcoll_proxy *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    snprintf(err, errlen, "out of memory for the proxy");
    return -1;
  }
  pthread_mutex_init(&p->lock, NULL);
  atomic_init(&p->stop, 0);
  atomic_init(&p->sleeping, 0);
  atomic_init(&p->refs, 1);
  p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) {
    snprintf(err, errlen, "eventfd: %s", strerror(errno));
    proxy_free(p);
    return -1;
  }
  atomic_init(&p->inline_users, 0);
  if (grow_poll_set(p, 16) != 0 || grow_inline_set(p, 16) != 0) {
    snprintf(err, errlen, "out of memory for the proxy's poll set");
    proxy_free(p);
    return -1;
  }
  int rc = pthread_create(&p->thread, NULL, proxy_main, p);
  if (rc != 0) {
    snprintf(err, errlen, "pthread_create: %s", strerror(rc));
    proxy_free(p);
    return -1;
  }
  gcoll_thread_name(p->thread, "gcoll-proxy");
  p->thread_started = 1;
  *out = p;
  return 0;
}

void gcoll_proxy_retain(struct gcoll_proxy *p) { atomic_fetch_add(&p->refs, 1); }

void gcoll_proxy_release(struct gcoll_proxy *p) {
  if (p != NULL && atomic_fetch_sub(&p->refs, 1) == 1) proxy_free(p);
}

void gcoll_proxy_destroy(struct gcoll_proxy *p) {
  if (p == NULL) return;
  if (p->thread_started) {
    atomic_store(&p->stop, 1);
    uint64_t one = 1;
    if (write(p->wake_fd, &one, sizeof(one)) < 0) {
      /* The counter is saturated, so the thread wakes anyway. */
    }
    pthread_join(p->thread, NULL);
    p->thread_started = 0;
  }
  gcoll_proxy_release(p);
}

/* Ends the thread's sleep, so that it sees a new entry or work at once. */
static void ring_wake(struct gcoll_proxy *p) {
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load(&p->sleeping)) return;
  uint64_t one = 1;
  if (write(p->wake_fd, &one, sizeof(one)) < 0) {
    /* Only EAGAIN (counter saturated) is possible: a wake-up is pending. */
  }
}

int gcoll_proxy_add(struct gcoll_proxy *p, struct gcoll_proxy_entry *e, char *err, size_t errlen) {
  pthread_mutex_lock(&p->lock);
  if (grow_poll_set(p, p->nentries + 2) != 0 || grow_inline_set(p, p->nentries + 2) != 0) {
    pthread_mutex_unlock(&p->lock);
    snprintf(err, errlen, "out of memory for the proxy's poll set");
    return -1;
  }
  e->prev = NULL;
  e->next = p->entries;
  if (p->entries != NULL) p->entries->prev = e;
  p->entries = e;
  e->registered = 1;
  p->nentries++;
  p->generation++;
  pthread_mutex_unlock(&p->lock);
  ring_wake(p);
  return 0;
}

void gcoll_proxy_remove(struct gcoll_proxy *p, struct gcoll_proxy_entry *e) {
  if (p == NULL || e == NULL) return;
  pthread_mutex_lock(&p->lock);
  if (e->registered) {
    if (e->prev != NULL) e->prev->next = e->next;
    else p->entries = e->next;
    if (e->next != NULL) e->next->prev = e->prev;
    e->next = e->prev = NULL;
    e->registered = 0;
    p->nentries--;
    p->generation++;
  }
  pthread_mutex_unlock(&p->lock);
}

static void mark_started(struct gcoll_proxy *p) {
  if (!atomic_load_explicit(&p->started, memory_order_relaxed))
    atomic_store_explicit(&p->started, 1, memory_order_relaxed);
}

void gcoll_proxy_wake(struct gcoll_proxy *p) {
  if (p == NULL) return;
  mark_started(p);
  ring_wake(p);
}

int gcoll_proxy_poll(struct gcoll_proxy *p) {
  if (pthread_mutex_trylock(&p->lock) != 0) return 0;
  int moved = inline_round(p, NULL, POLL_HOT);
  pthread_mutex_unlock(&p->lock);
  return moved;
}

void gcoll_proxy_inline_begin(struct gcoll_proxy *p) {
  mark_started(p);
  atomic_fetch_add(&p->inline_users, 1);
}

void gcoll_proxy_inline_end(struct gcoll_proxy *p) {
  int pending;
  /* Waits for the lock: a step the executor published last (the tree's
   * root sends down and returns) must reach the socket now, not when the
   * thread next looks. (Without its poll, sending only: 0.93-0.99x the
   * time of a 2-rank allreduce over TCP, but 1.02-1.34x on 4 ranks over
   * 2 nodes, whose next call then found its data later.) */
  pthread_mutex_lock(&p->lock);
  inline_round(p, &pending, POLL_HOT);
  pthread_mutex_unlock(&p->lock);
  atomic_fetch_sub(&p->inline_users, 1);
  if (pending) gcoll_proxy_wake(p);
}

void gcoll_proxy_get_stats(struct gcoll_proxy *p, struct gcoll_proxy_stats *st) {
  st->inline_rounds = atomic_load_explicit(&p->inline_rounds, memory_order_relaxed);
  st->rounds = atomic_load_explicit(&p->rounds, memory_order_relaxed);
  st->sleeps = atomic_load_explicit(&p->sleeps, memory_order_relaxed);
  st->yields = atomic_load_explicit(&p->yields, memory_order_relaxed);
  st->inline_fds = atomic_load_explicit(&p->inline_fds, memory_order_relaxed);
}
