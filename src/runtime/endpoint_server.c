/* The rendezvous listener's thread and the mailbox it fills
 * (endpoint_server.h).
 *
 * Wire format, after the listener's challenge (net_tcp.h):
 *   hello  be32 "GEPH", be16 version, be16 0, be32 sender rank,
 *          be32 receiver rank, be32 generation; then its HMAC tag
 *   answer the 16-byte header GCOLL_TCP_PROTO_ACCEPTED
 *   then any number of messages: be16 key length (1..256), be16 0,
 *          be32 value length (0..65536), the key, the value.
 * A connection that breaks the format, or repeats a key, is closed: the
 * sender's reader then misses the value and fails at its deadline, named. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/endpoint_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/service_thread.h"
#include "runtime/net_tcp.h"
#include "runtime/transport.h"

#define HELLO_MAGIC 0x47455048u /* "GEPH" */
#define WIRE_VERSION 1
#define POLL_MS 100             /* hello deadlines are checked this often */

struct reader {
  int fd;
  int from;
  uint32_t gen;
  unsigned char hdr[GCOLL_EPSRV_MSG_HDR_BYTES];
  size_t hdr_got, klen, vlen, got;
  char *buf;                    /* klen + vlen bytes once the header is in */
};

struct mail {
  struct mail *next;
  uint32_t gen;
  int from;
  size_t klen, vlen;
  char data[];                  /* key, then value */
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int started, fd, rank, nranks;
  struct gcoll_auth_secret secret;
  struct gcoll_tcp_hellos hellos;
  struct reader *readers;       /* the server thread's alone */
  int nreaders, cap;
  struct mail *mail;            /* under lock */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static struct mail *find(uint32_t gen, int from, const char *key, size_t klen,
                         struct mail ***link) {
  struct mail **p = &S.mail;
  for (; *p != NULL; p = &(*p)->next)
    if ((*p)->gen == gen && (*p)->from == from && (*p)->klen == klen &&
        memcmp((*p)->data, key, klen) == 0)
      break;
  if (link != NULL) *link = p;
  return *p;
}

/* Files a message; -1 when the key is already there (written twice). */
static int file_mail(uint32_t gen, int from, const char *key, size_t klen, const void *value,
                     size_t vlen) {
  struct mail *m = malloc(sizeof(*m) + klen + vlen);
  if (m == NULL) return -1;
  *m = (struct mail){.gen = gen, .from = from, .klen = klen, .vlen = vlen};
  memcpy(m->data, key, klen);
  if (vlen > 0) memcpy(m->data + klen, value, vlen);
  pthread_mutex_lock(&S.lock);
  struct mail **end;
  int dup = find(gen, from, key, klen, &end) != NULL;
  if (!dup) {
    *end = m;
    pthread_cond_broadcast(&S.cond);
  }
  pthread_mutex_unlock(&S.lock);
  if (dup) free(m);
  return dup ? -1 : 0;
}

/* ---- the listener's thread ------------------------------------------------ */

static int match(void *ctx, const unsigned char *h, int fd) {
  (void)ctx;
  int from = (int32_t)gcoll_get_be32(h + 8), to = (int32_t)gcoll_get_be32(h + 12);
  if (gcoll_get_be32(h) != HELLO_MAGIC || gcoll_get_be16(h + 4) != WIRE_VERSION ||
      to != S.rank || from < 0 || from >= S.nranks)
    return -1;
  if (S.nreaders == S.cap) {
    int cap = S.cap ? 2 * S.cap : 16;
    struct reader *r = realloc(S.readers, (size_t)cap * sizeof(*r));
    if (r == NULL) return -1;
    S.readers = r;
    S.cap = cap;
  }
  unsigned char ok[GCOLL_TCP_HDR_BYTES];
  gcoll_tcp_hdr_encode(ok, 0, 0, GCOLL_TCP_PROTO_ACCEPTED);
  if (send(fd, ok, sizeof(ok), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ok)) return -1;
  S.readers[S.nreaders++] = (struct reader){.fd = fd, .from = from,
                                            .gen = gcoll_get_be32(h + 16)};
  return 0;
}

static void drop_reader(int i) {
  close(S.readers[i].fd);
  free(S.readers[i].buf);
  S.readers[i] = S.readers[--S.nreaders];
}

/* Reads what is there; 0 to keep the connection, -1 to drop it (EOF, a
 * malformed header, a repeated key). */
static int read_some(struct reader *r) {
  for (;;) {
    if (r->hdr_got < sizeof(r->hdr)) {
      ssize_t n = recv(r->fd, r->hdr + r->hdr_got, sizeof(r->hdr) - r->hdr_got, MSG_DONTWAIT);
      if (n < 0 && gcoll_tcp_transient(errno)) return 0;
      if (n <= 0) return -1;
      r->hdr_got += (size_t)n;
      if (r->hdr_got < sizeof(r->hdr)) continue;
      r->klen = gcoll_get_be16(r->hdr);
      r->vlen = gcoll_get_be32(r->hdr + 4);
      if (r->klen < 1 || r->klen > GCOLL_EPSRV_MAX_KEY || gcoll_get_be16(r->hdr + 2) != 0 ||
          r->vlen > GCOLL_EPSRV_MAX_VALUE || (r->buf = malloc(r->klen + r->vlen)) == NULL)
        return -1;
      r->got = 0;
    }
    size_t want = r->klen + r->vlen;
    if (r->got < want) {
      ssize_t n = recv(r->fd, r->buf + r->got, want - r->got, MSG_DONTWAIT);
      if (n < 0 && gcoll_tcp_transient(errno)) return 0;
      if (n <= 0) return -1;
      r->got += (size_t)n;
      if (r->got < want) continue;
    }
    int rc = file_mail(r->gen, r->from, r->buf, r->klen, r->buf + r->klen, r->vlen);
    free(r->buf);
    r->buf = NULL;
    r->hdr_got = 0;
    if (rc != 0) return -1;
  }
}

static void *serve(void *arg) {
  (void)arg;
  struct pollfd *fds = NULL;
  int fcap = 0;
  for (;;) {
    int need = 1 + S.hellos.npending + S.nreaders;
    if (need > fcap) {
      struct pollfd *f = realloc(fds, (size_t)need * sizeof(*f));
      if (f == NULL) {
        nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
        continue;
      }
      fds = f;
      fcap = need;
    }
    int n = 0;
    fds[n++] = (struct pollfd){.fd = S.fd, .events = gcoll_tcp_hellos_listen_events(&S.hellos)};
    for (int i = 0; i < S.hellos.npending; i++)
      fds[n++] = (struct pollfd){.fd = S.hellos.pending[i].fd, .events = POLLIN};
    int first_reader = n;
    for (int i = 0; i < S.nreaders; i++)
      fds[n++] = (struct pollfd){.fd = S.readers[i].fd, .events = POLLIN};
    /* Only a pending hello has a deadline to watch; otherwise the thread
     * sleeps until a connection or a message comes (it lives as long as the
     * process: 10 wake-ups a second, in every rank, for the whole job, were
     * a third of a 256-rank init's growth in CPU while it waited). */
    int timeout = S.hellos.npending > 0 ? POLL_MS : -1;
    if (poll(fds, (nfds_t)n, timeout) < 0 && errno != EINTR) {
      nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
      continue;
    }
    /* Readers first: the hellos' round may add readers and move them. */
    for (int i = S.nreaders - 1; i >= 0; i--)
      if (fds[first_reader + i].revents != 0 && read_some(&S.readers[i]) != 0) drop_reader(i);
    gcoll_tcp_hellos_progress(&S.hellos, S.fd, fds[0].revents & POLLIN, match, NULL);
  }
  return NULL;
}

int gcoll_epsrv_start(int listen_fd, const struct gcoll_auth_secret *secret, int rank,
                      int nranks, char *err, size_t errlen) {
  pthread_mutex_lock(&S.lock);
  int rc = 0;
  if (S.started) {
    if (S.fd != listen_fd || S.rank != rank || S.nranks != nranks ||
        !gcoll_auth_equal(S.secret.bytes, secret->bytes, sizeof(secret->bytes))) {
      snprintf(err, errlen, "the endpoint listener already serves fd %d as rank %d of %d", S.fd,
               S.rank, S.nranks);
      rc = -1;
    }
    pthread_mutex_unlock(&S.lock);
    return rc;
  }
  int fl = fcntl(listen_fd, F_GETFL);
  if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      fcntl(listen_fd, F_SETFD, FD_CLOEXEC) != 0) {
    snprintf(err, errlen, "inherited listener fd %d: %s", listen_fd, strerror(errno));
    pthread_mutex_unlock(&S.lock);
    return -1;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&S.cond, &ca);
  pthread_condattr_destroy(&ca);
  S.fd = listen_fd;
  S.rank = rank;
  S.nranks = nranks;
  S.secret = *secret;
  S.hellos.hello_bytes = GCOLL_EPSRV_HELLO_BYTES;
  S.hellos.secret = &S.secret;
  S.hellos.purpose = GCOLL_EPSRV_PURPOSE;
  int e = gcoll_service_thread_start("gcoll-endpoints", serve, NULL);
  if (e != 0) {
    snprintf(err, errlen, "endpoint listener thread: %s", strerror(e));
    pthread_cond_destroy(&S.cond);
    S.fd = -1;
    rc = -1;
  } else {
    S.started = 1;
  }
  pthread_mutex_unlock(&S.lock);
  return rc;
}

int gcoll_epsrv_deliver(uint32_t gen, int from, const char *key, const void *value, size_t len,
                        char *err, size_t errlen) {
  if (file_mail(gen, from, key, strlen(key), value, len) == 0) return 0;
  snprintf(err, errlen, "endpoints: '%.64s' from rank %d written twice (or out of memory)", key,
           from);
  return -1;
}

int gcoll_epsrv_take(uint32_t gen, int from, const char *key, void *buf, size_t buflen,
                     size_t *len, uint64_t deadline_ms, char *err, size_t errlen) {
  size_t klen = strlen(key);
  struct timespec abs = {.tv_sec = (time_t)(deadline_ms / 1000),
                         .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
  pthread_mutex_lock(&S.lock);
  for (;;) {
    struct mail **link, *m = S.started ? find(gen, from, key, klen, &link) : NULL;
    if (m != NULL) {
      *link = m->next;
      pthread_mutex_unlock(&S.lock);
      *len = m->vlen;
      int rc = 0;
      if (m->vlen > buflen) {
        snprintf(err, errlen, "endpoints: '%.64s' from rank %d: %zu bytes do not fit %zu", key,
                 from, m->vlen, buflen);
        rc = -1;
      } else if (m->vlen > 0) {
        memcpy(buf, m->data + m->klen, m->vlen);
      }
      free(m);
      return rc;
    }
    if (!S.started || gcoll_transport_now_ms() >= deadline_ms) break;
    pthread_cond_timedwait(&S.cond, &S.lock, &abs);
  }
  pthread_mutex_unlock(&S.lock);
  snprintf(err, errlen, "endpoints: rank %d sent no '%.64s' before the deadline (it is late, "
           "gone, or did not take its endpoints from the plan's file; GCOLL_TIMEOUT)", from, key);
  return -1;
}

void gcoll_epsrv_forget(uint32_t gen) {
  pthread_mutex_lock(&S.lock);
  for (struct mail **p = &S.mail; *p != NULL;) {
    struct mail *m = *p;
    if (m->gen == gen) {
      *p = m->next;
      free(m);
    } else {
      p = &m->next;
    }
  }
  pthread_mutex_unlock(&S.lock);
}
