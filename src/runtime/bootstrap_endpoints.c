/* Bootstrap backend "endpoints": the ranks reach each other at the
 * endpoints the launcher fixed before they started (issue 16), not through
 * a central store.
 *
 * gcollrun binds one listening socket per rank before it forks, writes
 * where they are to an endpoints file beside the plan (graph/endpoints.h),
 * and hands each rank its own socket (GCOLL_LISTEN_FD) and the file
 * (GCOLL_ENDPOINTS). This handle is used only when everything matches the
 * step: the file reads strictly, names this job (an HMAC of GCOLL_JOB_KEY)
 * and GCOLL_NRANKS ranks, and the inherited descriptor is a listening TCP
 * socket on exactly this rank's port in the file. Anything else is a
 * one-line reason and the store, as before (bootstrap.c).
 *
 * put_to sends a value straight to its one reader's listener
 * (endpoint_server.h), over one authenticated connection per peer, kept for
 * the handle's life; get_from waits for it in this rank's mailbox. Nothing
 * here is collective, so fence has nothing to do: a value is in its reader's
 * mailbox, or on its way, once put_to returned, and get_from waits for it.
 * Plain put, get and barrier (split, shrink, a collective's "which rank
 * died") still need every rank's view: they go to the job's store
 * (GCOLL_KVS_ADDR), opened on first use, so that an init which needs none
 * of them sends it nothing. Under srun --gcoll=plan (the SPANK plugin
 * hands out the endpoints, spank_endpoints.c) there is no launcher's
 * store, so the rank at the root of the plan's tree serves one from its
 * own process for as long as its communicator lives (kvs_thread.h, keyed
 * by GCOLL_JOB_KEY, which never goes on the wire), and init's closing
 * wave, which every rank waits for anyway, carries its address
 * (gcoll_bootstrap_endpoints_host_store and _offer_store, from
 * comm_init.c): no request at init, and a split or a shrink
 * by any subset of ranks, with or without PMI2. Only where the root cannot
 * serve one (an IPv6 endpoint) does the first plain request open the PMI2
 * bootstrap (rank 0's store, found through one PMI2 fence, so that
 * request must come from every rank of the step at once). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/endpoints.h"
#include "kernels/wait.h"
#include "runtime/bootstrap.h"
#include "runtime/endpoint_server.h"
#include "runtime/kvs_thread.h"
#include "runtime/net_tcp.h"

#define HELLO_MAGIC 0x47455048u /* "GEPH", endpoint_server.c's */
#define WIRE_VERSION 1

struct out_conn {
  int peer, fd;
};

struct ep_state {
  struct gcoll_endpoints *ep;
  uint32_t gen;
  struct gcoll_auth_secret secret;
  struct out_conn *out;
  int nout, capout;
  struct gcoll_bootstrap *store;  /* opened on the first plain request */
  char store_addr[64];            /* the tree root's store (IPv4:PORT), or "" */
  struct gcoll_kvs_thread *hosted;  /* that store, when this rank is the root */
  unsigned char *msg;             /* one message, header + key + value */
};

/* Communicators of this process that took their endpoints from the file:
 * the n-th is the n-th on every rank. */
static _Atomic uint32_t generations;

static int ep_detect(void) {
  const char *v = getenv("GCOLL_ENDPOINTS");
  return v != NULL && *v != '\0';
}

static int env_set(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0';
}

/* The store plain requests go to, decided here only, in this order:
 *   LAUNCHER   gcollrun's (GCOLL_KVS_ADDR): it serves the whole job, for
 *              every subset of ranks, and outlives every communicator;
 *   TREE_ROOT  the one the plan tree's root serves when there is no
 *              launcher's store (srun --gcoll=plan), once init's closing
 *              wave brought its address (s->store_addr; "" before);
 *   PMI2       under srun otherwise (an IPv6 root serves none): rank 0's
 *              store, found through a PMI2 fence, so it can only be opened
 *              by every rank of the step at once;
 *   NONE       none of these: plain requests fail with a reason. */
enum store_kind { STORE_NONE, STORE_LAUNCHER, STORE_TREE_ROOT, STORE_PMI2 };

static enum store_kind store_kind(const struct ep_state *s) {
  if (env_set("GCOLL_KVS_ADDR")) return STORE_LAUNCHER;
  if (s != NULL && s->store_addr[0] != '\0') return STORE_TREE_ROOT;
#ifdef HAVE_PMI2
  if (gcoll_bootstrap_pmi2_backend.detect()) return STORE_PMI2;
#endif
  return STORE_NONE;
}

/* Requests a handle and the one it forwards to sent. */
static uint64_t sent(const struct gcoll_bootstrap *b) {
  return b->requests + (b->via != NULL ? b->via->requests : 0);
}
static uint64_t waited(const struct gcoll_bootstrap *b) {
  return b->request_ns + (b->via != NULL ? b->via->request_ns : 0);
}

/* ---- to the store, for what only a store can answer ------------------------ */

static int store(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  struct ep_state *s = bs->impl;
  if (s->store != NULL) return 0;
  enum store_kind kind = store_kind(s);
  if (kind == STORE_TREE_ROOT) {
    char why[512];
    if (gcoll_bootstrap_tcp_open(&s->store, s->store_addr, getenv("GCOLL_JOB_KEY"), bs->rank,
                                 bs->nranks, why, sizeof(why)) != 0) {
      snprintf(err, errlen, "bootstrap(endpoints): the plan tree root's store at %s: %.400s",
               s->store_addr, why);
      return -1;
    }
    return 0;
  }
  const struct gcoll_bootstrap_backend *be = NULL;
  if (kind == STORE_LAUNCHER) be = &gcoll_bootstrap_tcp_backend;
#ifdef HAVE_PMI2
  if (kind == STORE_PMI2) be = &gcoll_bootstrap_pmi2_backend;
#endif
  if (be == NULL) {
    snprintf(err, errlen, "bootstrap(endpoints): this needs the job's store, and there is none "
             "(no GCOLL_KVS_ADDR; under srun add --mpi=pmi2)");
    return -1;
  }
  struct gcoll_bootstrap *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    snprintf(err, errlen, "bootstrap(endpoints): out of memory");
    return -1;
  }
  st->backend = be->name;
  st->timeout_ms = bs->timeout_ms;
  st->opened_ns = gcoll_wait_now_ns();
  if (be->open(st, err, errlen) != 0) {
    free(st);
    return -1;
  }
  s->store = st;
  return 0;
}

/* The store's counts are this handle's: requests to a central store. */
#define VIA_STORE(bs, call)                                                     \
  do {                                                                          \
    struct ep_state *s_ = (bs)->impl;                                           \
    uint64_t r0_ = s_->store ? sent(s_->store) : 0;                             \
    uint64_t n0_ = s_->store ? waited(s_->store) : 0;                           \
    int rc_ = store((bs), err, errlen);                                         \
    if (rc_ == 0) rc_ = (call);                                                 \
    if (s_->store != NULL) {                                                    \
      (bs)->requests += sent(s_->store) - r0_;                                  \
      (bs)->request_ns += waited(s_->store) - n0_;                              \
    }                                                                           \
    return rc_;                                                                 \
  } while (0)

static int ep_put(struct gcoll_bootstrap *bs, const char *key, const void *value, size_t len,
                  char *err, size_t errlen) {
  VIA_STORE(bs, gcoll_bootstrap_put(s_->store, key, value, len, err, errlen));
}

static int ep_get(struct gcoll_bootstrap *bs, const char *key, void *buf, size_t buflen,
                  size_t *len, uint64_t deadline, char *err, size_t errlen) {
  struct ep_state *s = bs->impl;
  /* Asked by the ranks a failure reached, not by all: PMI2's store cannot
   * be opened for them alone (its fence needs every rank), and PMI2 keeps
   * no record of lost ranks anyway. The tree root's store can be asked. */
  enum store_kind kind = store_kind(s);
  if (s->store == NULL && (kind == STORE_PMI2 || kind == STORE_NONE) &&
      strcmp(key, GCOLL_BOOTSTRAP_LOST_RANK_KEY) == 0) {
    snprintf(err, errlen, "bootstrap(endpoints): get '%s': not available without the "
             "launcher's store", key);
    return -1;
  }
  VIA_STORE(bs, gcoll_bootstrap_get(s_->store, key, buf, buflen, len, deadline, err, errlen));
}

static int ep_barrier(struct gcoll_bootstrap *bs, uint64_t deadline, char *err, size_t errlen) {
  VIA_STORE(bs, gcoll_bootstrap_barrier(s_->store, deadline, err, errlen));
}

static int ep_fence(struct gcoll_bootstrap *bs, uint64_t deadline, char *err, size_t errlen) {
  (void)bs;
  (void)deadline;
  (void)err;
  (void)errlen;
  return 0;
}

/* ---- straight to the rank that reads it ------------------------------------ */

static int endpoint_of(const struct gcoll_endpoint *e, struct gcoll_tcp_endpoint *to) {
  memset(to, 0, sizeof(*to));
  to->port = e->port;
  if (inet_pton(AF_INET, e->host, to->ip) == 1) {
    to->family = AF_INET;
    return 0;
  }
  to->family = AF_INET6;
  return inet_pton(AF_INET6, e->host, to->ip) == 1 ? 0 : -1;
}

/* The connection to peer, made (and said hello on) the first time. */
static int conn_to(struct gcoll_bootstrap *bs, int peer, uint64_t deadline, char *err,
                   size_t errlen) {
  struct ep_state *s = bs->impl;
  for (int i = 0; i < s->nout; i++)
    if (s->out[i].peer == peer) return s->out[i].fd;
  if (s->nout == s->capout) {
    int cap = s->capout ? 2 * s->capout : 8;
    struct out_conn *o = realloc(s->out, (size_t)cap * sizeof(*o));
    if (o == NULL) {
      snprintf(err, errlen, "bootstrap(endpoints): out of memory");
      return -1;
    }
    s->out = o;
    s->capout = cap;
  }
  struct gcoll_tcp_endpoint to;
  if (endpoint_of(&s->ep->rank[peer], &to) != 0) {
    snprintf(err, errlen, "bootstrap(endpoints): rank %d's host '%s' is not an address", peer,
             s->ep->rank[peer].host);
    return -1;
  }
  unsigned char hello[GCOLL_EPSRV_HELLO_BYTES] = {0}, answer[GCOLL_TCP_HDR_BYTES];
  gcoll_put_be32(hello, HELLO_MAGIC);
  gcoll_put_be16(hello + 4, WIRE_VERSION);
  gcoll_put_be32(hello + 8, (uint32_t)bs->rank);
  gcoll_put_be32(hello + 12, (uint32_t)peer);
  gcoll_put_be32(hello + 16, s->gen);
  char why[512];
  int fd = gcoll_tcp_hello_connect(&to, &s->secret, GCOLL_EPSRV_PURPOSE, hello, sizeof(hello),
                                   answer, deadline, why, sizeof(why));
  uint64_t step;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(answer, &step, &nb, &proto);
  if (fd >= 0 && proto != GCOLL_TCP_PROTO_ACCEPTED) {
    close(fd);
    fd = -1;
    snprintf(why, sizeof(why), "it did not accept our hello");
  }
  if (fd < 0) {
    snprintf(err, errlen, "bootstrap(endpoints): rank %d at %s:%u: %s", peer,
             s->ep->rank[peer].host, (unsigned)s->ep->rank[peer].port, why);
    return -1;
  }
  s->out[s->nout++] = (struct out_conn){peer, fd};
  bs->peers++;
  return fd;
}

static int ep_put_to(struct gcoll_bootstrap *bs, int reader, const char *key, const void *value,
                     size_t len, char *err, size_t errlen) {
  struct ep_state *s = bs->impl;
  size_t klen = strlen(key);
  if (reader < 0 || reader >= bs->nranks || klen < 1 || klen > GCOLL_EPSRV_MAX_KEY ||
      len > GCOLL_EPSRV_MAX_VALUE) {
    snprintf(err, errlen, "bootstrap(endpoints): put '%.64s' for rank %d: bad rank, key or a "
             "value over %d bytes", key, reader, GCOLL_EPSRV_MAX_VALUE);
    return -1;
  }
  uint64_t t0 = gcoll_wait_now_ns();
  int rc;
  bs->peer_messages++;
  if (reader == bs->rank) {
    rc = gcoll_epsrv_deliver(s->gen, bs->rank, key, value, len, err, errlen);
  } else {
    uint64_t deadline = gcoll_bootstrap_deadline(bs);
    int fd = conn_to(bs, reader, deadline, err, errlen);
    rc = fd < 0 ? -1 : 0;
    if (rc == 0) {
      gcoll_put_be16(s->msg, (uint16_t)klen);
      gcoll_put_be16(s->msg + 2, 0);
      gcoll_put_be32(s->msg + 4, (uint32_t)len);
      memcpy(s->msg + GCOLL_EPSRV_MSG_HDR_BYTES, key, klen);
      if (len > 0) memcpy(s->msg + GCOLL_EPSRV_MSG_HDR_BYTES + klen, value, len);
      if (gcoll_tcp_send_all(fd, s->msg, GCOLL_EPSRV_MSG_HDR_BYTES + klen + len, deadline) != 0) {
        snprintf(err, errlen, "bootstrap(endpoints): sending '%.64s' to rank %d: %s", key, reader,
                 errno == ETIMEDOUT ? "timed out" : strerror(errno));
        rc = -1;
      }
    }
  }
  bs->request_ns += gcoll_wait_now_ns() - t0;
  return rc;
}

static int ep_get_from(struct gcoll_bootstrap *bs, int writer, const char *key, void *buf,
                       size_t buflen, size_t *len, uint64_t deadline, char *err, size_t errlen) {
  struct ep_state *s = bs->impl;
  if (writer < 0 || writer >= bs->nranks) {
    snprintf(err, errlen, "bootstrap(endpoints): get '%.64s' from rank %d of %d", key, writer,
             bs->nranks);
    return -1;
  }
  uint64_t t0 = gcoll_wait_now_ns();
  int rc = gcoll_epsrv_take(s->gen, writer, key, buf, buflen, len, deadline, err, errlen);
  bs->request_ns += gcoll_wait_now_ns() - t0;
  return rc;
}

static void ep_close(struct gcoll_bootstrap *bs) {
  struct ep_state *s = bs->impl;
  /* Our messages are in the kernel's hands once sent; closing delivers
   * them (we never read on these connections, so nothing unread makes the
   * close a reset). */
  for (int i = 0; i < s->nout; i++) close(s->out[i].fd);
  gcoll_epsrv_forget(s->gen);
  gcoll_bootstrap_close(s->store);
  gcoll_kvs_thread_stop(s->hosted);
  gcoll_endpoints_free(s->ep);
  free(s->out);
  free(s->msg);
  free(s);
  free(bs);
}

static const struct gcoll_bootstrap_ops ep_ops = {
    .put = ep_put, .get = ep_get, .fence = ep_fence, .barrier = ep_barrier, .close = ep_close,
    .put_to = ep_put_to, .get_from = ep_get_from};

/* ---- opening: everything must match the step -------------------------------- */

/* The inherited descriptor is a listening TCP socket on this rank's port. */
static int check_listener(int fd, const struct gcoll_endpoint *mine, char *err, size_t errlen) {
  struct stat st;
  int listening = 0;
  socklen_t len = sizeof(listening);
  struct sockaddr_storage sa;
  socklen_t salen = sizeof(sa);
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen, "GCOLL_LISTEN_FD=%d is not an open socket", fd);
    return -1;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
      getsockname(fd, (struct sockaddr *)&sa, &salen) != 0 ||
      (sa.ss_family != AF_INET && sa.ss_family != AF_INET6)) {
    snprintf(err, errlen, "GCOLL_LISTEN_FD=%d is not a listening TCP socket", fd);
    return -1;
  }
  uint16_t port = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                                : ((struct sockaddr_in6 *)&sa)->sin6_port);
  if (port != mine->port) {
    snprintf(err, errlen, "GCOLL_LISTEN_FD=%d listens on port %u, the endpoints file says %u", fd,
             (unsigned)port, (unsigned)mine->port);
    return -1;
  }
  return 0;
}

static int ep_open(struct gcoll_bootstrap *bs, char *err, size_t errlen) {
  const char *path = getenv("GCOLL_ENDPOINTS"), *key = getenv("GCOLL_JOB_KEY");
  long rank, nranks, fd;
  char why[512], job[33];
  if (key == NULL || *key == '\0') {
    snprintf(err, errlen, "GCOLL_JOB_KEY is not set");
    return -1;
  }
  if (gcoll_bootstrap_env_int("GCOLL_NRANKS", 1, 1L << 24, &nranks, err, errlen) != 0 ||
      gcoll_bootstrap_env_int("GCOLL_RANK", 0, nranks - 1, &rank, err, errlen) != 0 ||
      gcoll_bootstrap_env_int("GCOLL_LISTEN_FD", 3, 1L << 20, &fd, err, errlen) != 0)
    return -1;
  struct ep_state *s = calloc(1, sizeof(*s));
  if (s == NULL ||
      (s->msg = malloc(GCOLL_EPSRV_MSG_HDR_BYTES + GCOLL_EPSRV_MAX_KEY + GCOLL_EPSRV_MAX_VALUE)) ==
          NULL) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if ((s->ep = gcoll_endpoints_read_file(path, err, errlen)) == NULL) goto fail;
  if (gcoll_endpoints_job_id(key, job, why, sizeof(why)) != 0 ||
      gcoll_endpoints_check(s->ep, (int)nranks, job, why, sizeof(why)) != 0 ||
      check_listener((int)fd, &s->ep->rank[rank], why, sizeof(why)) != 0) {
    snprintf(err, errlen, "%.256s: %s", path, why);
    goto fail;
  }
  if (gcoll_auth_derive(key, strlen(key), GCOLL_AUTH_LABEL_ENDPOINTS, &s->secret, err, errlen) !=
          0 ||
      gcoll_epsrv_start((int)fd, &s->secret, (int)rank, (int)nranks, err, errlen) != 0)
    goto fail;
  s->gen = atomic_fetch_add(&generations, 1) + 1;
  bs->rank = (int)rank;
  bs->nranks = (int)nranks;
  bs->ops = &ep_ops;
  bs->impl = s;
  bs->peer_routed = 1;
  /* No tree root's store yet: init's closing wave brings it. */
  switch (store_kind(s)) {
    case STORE_LAUNCHER:
      snprintf(bs->store, sizeof(bs->store), "the store at %.256s", getenv("GCOLL_KVS_ADDR"));
      break;
    case STORE_PMI2:
      snprintf(bs->store, sizeof(bs->store), "PMI2 (opened only when needed)");
      break;
    default: snprintf(bs->store, sizeof(bs->store), "no store"); break;
  }
  return 0;
fail:
  if (s != NULL) {
    gcoll_endpoints_free(s->ep);
    free(s->msg);
  }
  free(s);
  return -1;
}

const struct gcoll_bootstrap_backend gcoll_bootstrap_endpoints_backend = {
    .name = "endpoints", .detect = ep_detect, .open = ep_open};

/* ---- the plan tree root's store (see the top of the file) ------------------ */

static struct ep_state *endpoints_state(struct gcoll_bootstrap *bs) {
  return bs != NULL && bs->ops == &ep_ops ? bs->impl : NULL;
}

int gcoll_bootstrap_endpoints_host_store(struct gcoll_bootstrap *bs, char *addr, size_t cap,
                                         char *err, size_t errlen) {
  struct ep_state *s = endpoints_state(bs);
  addr[0] = '\0';
  /* A launcher's store serves the job; IPv6 endpoints fall back to PMI2. */
  if (s == NULL || s->hosted != NULL || store_kind(s) == STORE_LAUNCHER ||
      strchr(s->ep->rank[bs->rank].host, ':') != NULL)
    return 0;
  uint16_t port = 0;
  char why[384];
  if (gcoll_kvs_thread_start(getenv("GCOLL_JOB_KEY"), s->ep->rank[bs->rank].host, bs->nranks,
                             GCOLL_KVS_THREAD_UNTIL_STOPPED, &s->hosted, &port, why,
                             sizeof(why)) != 0) {
    snprintf(err, errlen, "bootstrap(endpoints): the job's store on %s: %s",
             s->ep->rank[bs->rank].host, why);
    return -1;
  }
  snprintf(addr, cap, "%s:%u", s->ep->rank[bs->rank].host, (unsigned)port);
  return 0;
}

int gcoll_bootstrap_endpoints_offer_store(struct gcoll_bootstrap *bs, const char *addr,
                                          char *err, size_t errlen) {
  struct ep_state *s = endpoints_state(bs);
  if (s == NULL || addr[0] == '\0') return 0;
  if (strlen(addr) >= sizeof(s->store_addr) || strchr(addr, ':') == NULL) {
    snprintf(err, errlen, "bootstrap(endpoints): '%.80s' is not a store address", addr);
    return -1;
  }
  snprintf(s->store_addr, sizeof(s->store_addr), "%s", addr);
  if (store_kind(s) == STORE_TREE_ROOT)
    snprintf(bs->store, sizeof(bs->store), "the plan tree root's store at %s (opened only when "
             "needed)", addr);
  return 0;
}
