/* The generic net transport's connections (net.h): the listener that
 * matches hellos to receive connections, addresses, setup, close.
 *
 * Connection setup: every transport instance has one listening socket
 * (bound to GCOLL_SOCKET_IFADDR, an address or an interface name, else the
 * first interface other hosts can reach, as NCCL picks one, else
 * 127.0.0.1; on an ephemeral port). The receiver's address carries ip:port,
 * its rank, the connection id and the job tag, then the device's part. The
 * listener challenges every connection it accepts with a nonce
 * (net_tcp.h); the sender answers with a hello {magic, version, sender
 * rank, receiver rank, conn_id, the device's part} and its HMAC under the
 * job's connection secret (auth.h) and a purpose naming the device; the
 * listener hands the connection to the matching receive connection once
 * the device accepted it, and answers "accepted", or closes it. Anyone can
 * connect; only the job's ranks can say hello.
 *
 * Addresses and hellos use network byte order.
 *
 * Close: a sender first sends what the executor published (bounded); then
 * either end says goodbye on the hello connection, or, when its
 * communicator is in error, whom it blames, so the peer fails at once
 * instead of at its deadline. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/net.h"

#define ADDR_MAGIC 0x4743534bu  /* "GCSK" */
#define HELLO_MAGIC 0x4748454cu /* "GHEL" */
#define WIRE_VERSION 2
#define CLOSE_FLUSH_MAX_MS 10000u

_Static_assert(GCOLL_NET_HELLO_HDR_BYTES < GCOLL_TCP_HELLO_MAX, "hello header fits");
_Static_assert(GCOLL_NET_ADDR_HDR_BYTES < GCOLL_CONN_ADDR_MAX, "address header fits");

static struct gcoll_net *net_of(struct gcoll_transport *t) { return t->impl; }

/* ---- listener: matching hellos to receive connections ----------------------- */

/* Hands the accepted connection to the receive connection its hello names,
 * once the device accepted it; 0 when the connection owns the fd now. */
static int match_hello(void *ctx, const unsigned char *h, int fd) {
  struct gcoll_net *n = ctx;
  struct gcoll_transport *t = n->t;
  if (gcoll_get_be32(h) != HELLO_MAGIC || gcoll_get_be16(h + 4) != WIRE_VERSION ||
      (int32_t)gcoll_get_be32(h + 12) != t->cfg.rank)
    return -1;
  int sender = (int32_t)gcoll_get_be32(h + 8);
  uint32_t conn_id = gcoll_get_be32(h + 16);
  int rc = -1;
  pthread_mutex_lock(&n->lock);
  for (struct gcoll_net_conn *c = n->recv_conns; c != NULL; c = c->next_recv) {
    if (c->peer != sender || c->conn_id != conn_id || c->matched || c->setup_failed) continue;
    if (!c->accepted) {
      char err[160] = "";
      int a = n->dev->accept == NULL
                  ? 0
                  : n->dev->accept(c, h + GCOLL_NET_HELLO_HDR_BYTES, err, sizeof(err));
      if (a < 0) {
        snprintf(c->setup_err, sizeof(c->setup_err), "%s", err);
        c->setup_failed = 1;
        pthread_cond_broadcast(&n->cond);
      }
      if (a != 0) break;
      c->accepted = 1;
    }
    /* The sender waits for this before it counts as connected, so an
     * evicted or refused hello is tried again rather than lost. A fresh
     * socket's buffer takes 16 bytes at once. */
    unsigned char ok[GCOLL_TCP_HDR_BYTES];
    gcoll_tcp_hdr_encode(ok, 0, 0, GCOLL_TCP_PROTO_ACCEPTED);
    if (send(fd, ok, sizeof(ok), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ok)) break;
    c->matched_fd = fd;
    c->matched = 1;
    pthread_cond_broadcast(&n->cond);
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&n->lock);
  return rc;
}

static int listen_progress(struct gcoll_proxy_entry *e, short revents) {
  struct gcoll_net *n = (struct gcoll_net *)((char *)e - offsetof(struct gcoll_net, listen_entry));
  int moved = gcoll_tcp_hellos_progress(&n->hellos, n->listen_fd, revents & POLLIN, match_hello, n);
  e->events = gcoll_tcp_hellos_listen_events(&n->hellos);
  e->busy = 0;
  return moved;
}

/* ---- init -------------------------------------------------------------------- */

int gcoll_net_init(struct gcoll_transport **out, const struct gcoll_transport_ops *ops,
                   const struct gcoll_net_dev *dev, const struct gcoll_transport_config *cfg,
                   char *err, size_t errlen) {
  *out = NULL;
  if (cfg != NULL && cfg->proxy == NULL) {
    snprintf(err, errlen, "%s needs the proxy thread", ops->name);
    return -1;
  }
  struct gcoll_transport *t = calloc(1, sizeof(*t));
  struct gcoll_net *n = calloc(1, sizeof(*n));
  if (t == NULL || n == NULL) {
    free(t);
    free(n);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (gcoll_transport_base_init(t, ops, cfg, err, errlen) != 0) {
    free(t);
    free(n);
    return -1;
  }
  t->impl = n;
  n->t = t;
  n->dev = dev;
  n->listen_fd = -1;
  pthread_mutex_init(&n->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&n->cond, &ca);
  pthread_condattr_destroy(&ca);
  n->hellos.hello_bytes = GCOLL_NET_HELLO_HDR_BYTES + dev->hello_bytes;
  n->hellos.secret = &t->conn_secret;
  n->hellos.purpose = dev->hello_purpose;
  char why[160];
  if ((dev->open != NULL && dev->open(n, err, errlen) != 0) ||
      gcoll_tcp_pick_address(&n->self, err, errlen) != 0) {
    gcoll_net_fini(t);
    return -1;
  }
  n->listen_fd = gcoll_tcp_listen(&n->self, why, sizeof(why));
  if (n->listen_fd < 0) {
    snprintf(err, errlen, "%s listener: %s", ops->name, why);
    gcoll_net_fini(t);
    return -1;
  }
  gcoll_tcp_format(&n->self, t->listen_addr, sizeof(t->listen_addr));
  n->listen_entry.fd = n->listen_fd;
  n->listen_entry.events = POLLIN;
  n->listen_entry.progress = listen_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &n->listen_entry, err, errlen) != 0) {
    gcoll_net_fini(t);
    return -1;
  }
  n->listen_registered = 1;
  *out = t;
  return 0;
}

void gcoll_net_fini(struct gcoll_transport *t) {
  if (t == NULL) return;
  struct gcoll_net *n = net_of(t);
  if (n->listen_registered) gcoll_proxy_remove(t->cfg.proxy, &n->listen_entry);
  gcoll_tcp_hellos_close(&n->hellos);
  if (n->listen_fd >= 0) close(n->listen_fd);
  if (n->dev_state != NULL && n->dev->close != NULL) n->dev->close(n);
  pthread_cond_destroy(&n->cond);
  pthread_mutex_destroy(&n->lock);
  free(n);
  gcoll_transport_base_fini(t);
  free(t);
}

/* ---- connections -------------------------------------------------------------- */

static void conn_free(struct gcoll_net_conn *c) {
  if (c->n->dev->conn_free != NULL) c->n->dev->conn_free(c);
  gcoll_local_fifo_free(c->fifo, c->fifo_map);
  free(c->dev_conn);
  free(c);
}

static struct gcoll_net_conn *conn_alloc(struct gcoll_transport *t, int peer, uint32_t conn_id,
                                         int is_send, char *err, size_t errlen) {
  struct gcoll_net *n = net_of(t);
  struct gcoll_net_conn *c = calloc(1, sizeof(*c));
  void *dc = n->dev->conn_bytes > 0 ? calloc(1, n->dev->conn_bytes) : NULL;
  if (c == NULL || (n->dev->conn_bytes > 0 && dc == NULL)) {
    free(c);
    free(dc);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->n = n;
  c->dev_conn = dc;
  c->peer = peer;
  c->conn_id = conn_id;
  c->is_send = is_send;
  c->fd = -1;
  c->matched_fd = -1;
  c->entry.fd = -1;
  c->fifo = gcoll_local_fifo_alloc(t->cfg.slot_bytes, &c->fifo_map, err, errlen);
  if (c->fifo == NULL) {
    free(dc);
    free(c);
    return NULL;
  }
  return c;
}

int gcoll_net_recv_setup(struct gcoll_transport *t, int peer, uint32_t conn_id,
                         struct gcoll_conn *gc, void *addr, size_t *addrlen, char *err,
                         size_t errlen) {
  struct gcoll_net *n = net_of(t);
  size_t need = GCOLL_NET_ADDR_HDR_BYTES + n->dev->addr_bytes;
  if (peer < 0 || peer >= t->cfg.nranks) {
    snprintf(err, errlen, "peer rank %d out of range [0, %d)", peer, t->cfg.nranks);
    return -1;
  }
  if (*addrlen < need) {
    snprintf(err, errlen, "address buffer of %zu bytes, need %zu", *addrlen, need);
    return -1;
  }
  pthread_mutex_lock(&n->lock);
  for (struct gcoll_net_conn *o = n->recv_conns; o != NULL; o = o->next_recv)
    if (o->peer == peer && o->conn_id == conn_id) {
      pthread_mutex_unlock(&n->lock);
      snprintf(err, errlen, "connection %u from rank %d is set up already", conn_id, peer);
      return -1;
    }
  pthread_mutex_unlock(&n->lock);
  struct gcoll_net_conn *c = conn_alloc(t, peer, conn_id, 0, err, errlen);
  if (c == NULL) return -1;
  unsigned char *a = addr;
  memset(a, 0, need);
  if (n->dev->listen != NULL && n->dev->listen(c, a + GCOLL_NET_ADDR_HDR_BYTES, err, errlen) != 0) {
    conn_free(c);
    return -1;
  }
  c->entry.progress = gcoll_net_recv_progress;
  /* Devices that are accepted by polling start busy: the proxy polls them
   * until the hello matched. */
  c->entry.busy = n->dev->setup_progress != NULL;
  pthread_mutex_lock(&n->lock);
  c->next_recv = n->recv_conns;
  n->recv_conns = c;
  pthread_mutex_unlock(&n->lock);
  if (gcoll_proxy_add(t->cfg.proxy, &c->entry, err, errlen) != 0) {
    pthread_mutex_lock(&n->lock);
    n->recv_conns = c->next_recv;
    pthread_mutex_unlock(&n->lock);
    conn_free(c);
    return -1;
  }
  gcoll_put_be32(a, ADDR_MAGIC);
  gcoll_put_be16(a + 4, WIRE_VERSION);
  gcoll_put_be16(a + 6, n->self.family == AF_INET ? 4 : 6);
  gcoll_put_be16(a + 8, n->self.port);
  gcoll_put_be32(a + 12, conn_id);
  gcoll_put_be32(a + 16, (uint32_t)t->cfg.rank);
  gcoll_put_be64(a + 24, t->job_hash);
  memcpy(a + 32, n->self.ip, 16);
  *addrlen = need;
  *gc = (struct gcoll_conn){
      .fifo = c->fifo, .peer = peer, .is_send = 0, .ops = t->ops, .impl = c};
  return 0;
}

static int parse_addr(const struct gcoll_transport *t, int peer, uint32_t conn_id,
                      const void *addr, size_t addrlen, struct gcoll_tcp_endpoint *pa, char *err,
                      size_t errlen) {
  const struct gcoll_net *n = t->impl;
  const unsigned char *a = addr;
  size_t need = GCOLL_NET_ADDR_HDR_BYTES + n->dev->addr_bytes;
  if (a == NULL || addrlen != need) {
    snprintf(err, errlen, "%s address of %zu bytes, expected %zu", t->ops->name, addrlen, need);
    return -1;
  }
  uint16_t fam = gcoll_get_be16(a + 6);
  uint64_t job = gcoll_get_be64(a + 24);
  if (gcoll_get_be32(a) != ADDR_MAGIC || gcoll_get_be16(a + 4) != WIRE_VERSION ||
      (fam != 4 && fam != 6))
    snprintf(err, errlen, "not a gcoll %s address (version %u)", t->ops->name,
             gcoll_get_be16(a + 4));
  else if (job != t->job_hash)
    snprintf(err, errlen, "%s address is from another job (job hash %016llx, ours %016llx)",
             t->ops->name, (unsigned long long)job, (unsigned long long)t->job_hash);
  else if ((int32_t)gcoll_get_be32(a + 16) != peer || gcoll_get_be32(a + 12) != conn_id)
    snprintf(err, errlen, "%s address is for rank %d connection %u, expected rank %d connection %u",
             t->ops->name, (int32_t)gcoll_get_be32(a + 16), gcoll_get_be32(a + 12), peer, conn_id);
  else if (gcoll_get_be16(a + 8) == 0)
    snprintf(err, errlen, "%s address has port 0", t->ops->name);
  else {
    pa->family = fam == 4 ? AF_INET : AF_INET6;
    memcpy(pa->ip, a + 32, 16);
    pa->port = gcoll_get_be16(a + 8);
    return 0;
  }
  return -1;
}

/* Says hello on a fresh connection to the receiver's listener and waits
 * for it to be accepted. */
static int say_hello(struct gcoll_net_conn *c, const struct gcoll_tcp_endpoint *to,
                     unsigned char *h, size_t hlen, uint64_t deadline_ms, char *err,
                     size_t errlen) {
  struct gcoll_transport *t = c->n->t;
  unsigned char answer[GCOLL_TCP_HDR_BYTES];
  gcoll_put_be32(h, HELLO_MAGIC);
  gcoll_put_be16(h + 4, WIRE_VERSION);
  gcoll_put_be32(h + 8, (uint32_t)t->cfg.rank);
  gcoll_put_be32(h + 12, (uint32_t)c->peer);
  gcoll_put_be32(h + 16, c->conn_id);
  char why[512];
  c->fd = gcoll_tcp_hello_connect(to, &t->conn_secret, c->n->dev->hello_purpose, h, hlen, answer,
                                  deadline_ms, why, sizeof(why));
  uint64_t step;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(answer, &step, &nb, &proto);
  if (c->fd >= 0 && (proto != GCOLL_TCP_PROTO_ACCEPTED || nb != 0)) {
    snprintf(why, sizeof(why), "answered our hello with a header that is not 'accepted'");
    close(c->fd);
    c->fd = -1;
  }
  if (c->fd >= 0) return 0;
  snprintf(err, errlen, "connecting to rank %d: %s", c->peer, why);
  return -1;
}

int gcoll_net_send_connect(struct gcoll_transport *t, int peer, uint32_t conn_id,
                           const void *addr, size_t addrlen, struct gcoll_conn *gc,
                           uint64_t deadline_ms, char *err, size_t errlen) {
  struct gcoll_net *n = net_of(t);
  struct gcoll_tcp_endpoint pa;
  if (parse_addr(t, peer, conn_id, addr, addrlen, &pa, err, errlen) != 0) return -1;
  struct gcoll_net_conn *c = conn_alloc(t, peer, conn_id, 1, err, errlen);
  if (c == NULL) return -1;
  unsigned char h[GCOLL_TCP_HELLO_MAX] = {0};
  const unsigned char *dev_addr = (const unsigned char *)addr + GCOLL_NET_ADDR_HDR_BYTES;
  unsigned char *dev_hello = h + GCOLL_NET_HELLO_HDR_BYTES;
  if ((n->dev->connect != NULL &&
       n->dev->connect(c, dev_addr, dev_hello, deadline_ms, err, errlen) != 0) ||
      say_hello(c, &pa, h, GCOLL_NET_HELLO_HDR_BYTES + n->dev->hello_bytes, deadline_ms, err,
                errlen) != 0) {
    conn_free(c);
    return -1;
  }
  c->entry.fd = c->fd;
  c->entry.events = POLLIN;
  c->entry.progress = gcoll_net_send_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &c->entry, err, errlen) != 0) {
    close(c->fd);
    conn_free(c);
    return -1;
  }
  *gc = (struct gcoll_conn){.fifo = c->fifo, .peer = peer, .is_send = 1, .ops = t->ops, .impl = c};
  return 0;
}

int gcoll_net_recv_complete(struct gcoll_transport *t, struct gcoll_conn *gc,
                            uint64_t deadline_ms, char *err, size_t errlen) {
  struct gcoll_net_conn *c = gc->impl;
  struct gcoll_net *n = c->n;
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                        .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
  int rc = 0;
  pthread_mutex_lock(&n->lock);
  while (!c->matched && !c->setup_failed && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&n->cond, &n->lock, &ts);
  int ok = c->matched;
  if (!ok && c->setup_failed)
    snprintf(err, errlen, "%s connection %u from rank %d: %s", t->ops->name, c->conn_id, c->peer,
             c->setup_err);
  else if (!ok)
    snprintf(err, errlen, "rank %d did not connect (%s connection %u) before the deadline",
             c->peer, t->ops->name, c->conn_id);
  pthread_mutex_unlock(&n->lock);
  return ok ? 0 : -1;
}

/* A last header (goodbye or blame), then an orderly shutdown. */
static void last_word_and_close(struct gcoll_net_conn *c, uint64_t step, uint32_t proto) {
  unsigned char h[GCOLL_TCP_HDR_BYTES];
  gcoll_tcp_hdr_encode(h, step, 0, proto);
  gcoll_tcp_last_word_and_close(c->fd, h, sizeof(h));
  c->fd = -1;
}

void gcoll_net_conn_close(struct gcoll_transport *t, struct gcoll_conn *gc) {
  struct gcoll_net_conn *c = gc->impl;
  if (c == NULL) return;
  struct gcoll_net *n = c->n;
  gcoll_proxy_remove(t->cfg.proxy, &c->entry);
  if (!c->is_send) {
    pthread_mutex_lock(&n->lock);
    for (struct gcoll_net_conn **p = &n->recv_conns; *p != NULL; p = &(*p)->next_recv)
      if (*p == c) {
        *p = c->next_recv;
        break;
      }
    if (c->fd < 0 && c->matched_fd >= 0) c->fd = c->matched_fd;
    c->matched_fd = -1;
    pthread_mutex_unlock(&n->lock);
  } else if (c->fd >= 0) {
    uint64_t bound =
        t->cfg.timeout_ms < CLOSE_FLUSH_MAX_MS ? t->cfg.timeout_ms : CLOSE_FLUSH_MAX_MS;
    gcoll_net_flush(c, gcoll_transport_now_ms() + bound);
  }
  if (c->fd >= 0) {
    /* No goodbye from a communicator in error: the peer cannot finish what
     * it waits for from us, so it should fail now, not at its deadline,
     * naming the rank we blame. A header can only go between steps. */
    int in_error = atomic_load(t->cfg.abort_word) != 0;
    if (c->state == GCOLL_NET_FAILED || (in_error && c->mid_step))
      close(c->fd);
    else if (in_error)
      last_word_and_close(c, (uint64_t)gcoll_transport_blame(&t->cfg), GCOLL_TCP_PROTO_BLAME);
    else
      last_word_and_close(c, c->done, GCOLL_TCP_PROTO_GOODBYE);
  }
  conn_free(c);
  gc->impl = NULL;
  gc->fifo = NULL;
}
