/* net/socket: FIFOs forwarded over TCP by the proxy thread.
 *
 * Both ends have local FIFOs (allocated and touched once). The executor
 * writes the send-side FIFO; the sender's proxy drains published steps
 * (tail > sent) into the socket as {header, payload} and frees each slot
 * (head) once its bytes are in the kernel. The receiver's proxy reads
 * headers and payloads into free slots of the receive-side FIFO and
 * publishes them exactly as a local producer would (SIMPLE: data, then
 * nbytes/proto, then tail with release; LL: lines carrying the step's flag,
 * then tail). LL steps travel decoded (their data bytes only, half the
 * lines' size) and are re-encoded on arrival.
 *
 * Connection setup: every process has one listening socket (bound to
 * GCOLL_SOCKET_IFADDR, an address or an interface name, else the first
 * interface other hosts can reach, as NCCL picks one, else 127.0.0.1; on
 * an ephemeral port). The receiver's address carries ip:port, its rank, the
 * connection id and the job tag. The receiver's proxy challenges every
 * connection it accepts with a nonce (net_tcp.h); the sender answers with a
 * hello {magic, version, sender rank, receiver rank, conn_id} and its HMAC
 * under the job's connection secret (auth.h), and the proxy hands the
 * socket to the matching receive connection and answers "accepted", or
 * closes it. Anyone can connect; only the job's ranks can say hello.
 *
 * Wire integers are little-endian; addresses and hellos use network order.
 *
 * Failures: EOF, ECONNRESET, EPIPE or a malformed header on a connection
 * mark the peer failed (abort word = gcollRemoteError). A clean close sends
 * a goodbye header first (after flushing what the executor published); a
 * connection that said goodbye and then closes is not a failure, unless
 * this side still has steps to send to it. A communicator that closes in
 * error (its abort word set) sends no goodbye, so its peers fail at once. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "runtime/net_tcp.h"
#include "runtime/proxy.h"
#include "runtime/transport.h"

#define SOCK_ADDR_MAGIC 0x4743534bu /* "GCSK" */
#define HELLO_MAGIC 0x4748454cu     /* "GHEL" */
#define WIRE_VERSION 2
#define HELLO_PURPOSE "gcoll net/socket hello v2"
#define SOCK_ADDR_BYTES 48
#define HELLO_BYTES 32
_Static_assert(HELLO_BYTES <= GCOLL_TCP_HELLO_MAX, "the hello table must hold our hello");
#define CLOSE_FLUSH_MAX_MS 10000u

/* ---- state ---------------------------------------------------------------- */

enum conn_state { CONN_OPEN = 0, CONN_DONE, CONN_FAILED };

struct sock_state;

struct sock_conn {
  struct gcoll_proxy_entry entry; /* first: the progress callback's handle */
  struct sock_state *s;
  int peer, is_send;
  uint32_t conn_id;
  struct gcoll_fifo *fifo;
  size_t fifo_map;
  char *stage;                    /* LL payloads, decoded: GCOLL_STEPS x stage_slot */
  size_t stage_slot;
  int fd;                         /* proxy side (or the closing thread) only */
  enum conn_state state;
  int goodbye_seen;
  /* Receive side, under s->lock: the listener hands the socket over. */
  int matched_fd, matched;
  struct sock_conn *next_recv;
  /* Send side: steps [sent, staged) have headers (and LL data) ready. */
  uint64_t sent, staged;
  size_t off;                     /* bytes of step `sent` already sent */
  unsigned char shdr[GCOLL_STEPS][GCOLL_TCP_HDR_BYTES];
  int want_out;                   /* the socket was full: wait for POLLOUT */
  unsigned char back[GCOLL_TCP_HDR_BYTES];  /* what the receiver sends back: goodbye */
  size_t back_got;
  /* Receive side: the header of step `recvd` and its payload. */
  uint64_t recvd;
  unsigned char rhdr[GCOLL_TCP_HDR_BYTES], ahead[GCOLL_TCP_HDR_BYTES];
  size_t rhdr_got, pay_got;
  uint32_t rnb, rproto;
  /* Next header bytes read behind an LL step that still waits for its
   * slot. */
  unsigned char held[GCOLL_TCP_HDR_BYTES];
  size_t held_got;
  int polled_in;                  /* last round asked poll for POLLIN */
};

struct sock_state {
  struct gcoll_transport *t;
  struct gcoll_proxy_entry listen_entry;
  int listen_fd, listen_registered;
  struct gcoll_tcp_endpoint self; /* where the listener is */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct sock_conn *recv_conns;
  struct gcoll_tcp_hellos hellos; /* proxy thread only */
};

static struct sock_state *state_of(struct gcoll_transport *t) { return t->impl; }

static void conn_failed_blaming(struct sock_conn *c, int rank) {
  if (c->state == CONN_FAILED) return;
  c->state = CONN_FAILED;
  c->entry.events = 0;
  c->entry.busy = 0;
  gcoll_transport_peer_failed(c->s->t->cfg.abort_word, c->s->t->cfg.failed_peer, rank);
}

static void conn_failed(struct sock_conn *c) { conn_failed_blaming(c, c->peer); }

/* A blame header names the failed rank; a rank out of range is the peer's
 * own fault. */
static void blamed_by_peer(struct sock_conn *c, uint64_t rank) {
  int nranks = c->s->t->cfg.nranks;
  conn_failed_blaming(c, rank < (uint64_t)nranks ? (int)rank : c->peer);
}

/* A broken local invariant (the executor published a step no transport
 * could carry): not the peer's fault, so not a remote error. */
static void conn_internal_error(struct sock_conn *c) {
  c->state = CONN_FAILED;
  c->entry.events = 0;
  c->entry.busy = 0;
  int ok = 0;
  atomic_compare_exchange_strong(c->s->t->cfg.abort_word, &ok, (int)gcollInternalError);
}

/* The peer closed (EOF or reset): clean after a goodbye, a failure before. */
static void peer_closed(struct sock_conn *c) {
  if (c->goodbye_seen) {
    c->state = CONN_DONE;
    c->entry.events = 0;
    c->entry.busy = 0;
  } else {
    conn_failed(c);
  }
}

/* ---- send side ------------------------------------------------------------ */

static size_t step_bytes(const struct sock_conn *c, uint64_t s) {
  return GCOLL_TCP_HDR_BYTES + c->fifo->nbytes[gcoll_fifo_slot(s)];
}

static const void *send_payload(struct sock_conn *c, uint64_t s) {
  unsigned slot = gcoll_fifo_slot(s);
  if (c->fifo->proto[slot] == GCOLL_PROTO_LL) return c->stage + slot * c->stage_slot;
  return gcoll_fifo_simple_slot(c->fifo, s);
}

/* Prepares the header of published step s (and decodes its LL lines);
 * -1 when the step cannot be what an executor publishes. */
static int stage_step(struct sock_conn *c, uint64_t s) {
  struct gcoll_fifo *f = c->fifo;
  unsigned slot = gcoll_fifo_slot(s);
  uint32_t nb = f->nbytes[slot], proto = f->proto[slot];
  if ((proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL) ||
      nb > gcoll_fifo_payload(f, (enum gcoll_proto)proto))
    return -1;
  if (proto == GCOLL_PROTO_LL) {
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    char *out = c->stage + slot * c->stage_slot;
    for (size_t l = 0; 4 * l < nb; l++) {
      uint64_t v = atomic_load_explicit(&lines[l], memory_order_relaxed);
      if (!gcoll_ll_line_ready(v, s)) return -1;
      uint32_t word = (uint32_t)v;
      size_t k = nb - 4 * l < 4 ? nb - 4 * l : 4;
      memcpy(out + 4 * l, &word, k);
    }
  }
  gcoll_tcp_hdr_encode(c->shdr[slot], s, nb, proto);
  return 0;
}

/* Writes as much of steps [sent, staged) as the socket takes. Returns 1 when
 * bytes moved, 0 when the socket is full, -1 on a dead connection. */
static int send_some(struct sock_conn *c) {
  struct iovec iov[2 * GCOLL_STEPS];
  int n = 0;
  size_t skip = c->off;
  for (uint64_t s = c->sent; s < c->staged; s++) {
    unsigned slot = gcoll_fifo_slot(s);
    size_t nb = c->fifo->nbytes[slot];
    const char *parts[2] = {(const char *)c->shdr[slot], send_payload(c, s)};
    size_t lens[2] = {GCOLL_TCP_HDR_BYTES, nb};
    for (int k = 0; k < 2; k++) {
      if (skip >= lens[k]) {
        skip -= lens[k];
        continue;
      }
      iov[n].iov_base = (void *)(parts[k] + skip);
      iov[n].iov_len = lens[k] - skip;
      skip = 0;
      n++;
    }
  }
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0) {
    if (gcoll_tcp_transient(errno)) {
      c->want_out = errno != EINTR;
      return 0;
    }
    return -1;
  }
  c->off += (size_t)w;
  while (c->sent < c->staged && c->off >= step_bytes(c, c->sent)) {
    c->off -= step_bytes(c, c->sent);
    c->sent++;
    atomic_store_explicit(&c->fifo->head, c->sent, memory_order_release);
  }
  c->want_out = c->sent < c->staged;
  return 1;
}

/* The receiver only ever sends a goodbye (or blame); anything else is a
 * broken peer. A second goodbye is one too. */
static int watch_receiver(struct sock_conn *c) {
  uint64_t blamed = 0;
  switch (gcoll_tcp_watch_peer(c->fd, c->back, &c->back_got, &c->goodbye_seen, &blamed)) {
    case GCOLL_TCP_NOTHING:
      return 0;
    case GCOLL_TCP_CLOSED:
      peer_closed(c);
      break;
    case GCOLL_TCP_BLAME:
      blamed_by_peer(c, blamed);
      break;
    case GCOLL_TCP_BROKEN:
      conn_failed(c);
      break;
  }
  return 1;
}

static int send_progress(struct gcoll_proxy_entry *e, short revents) {
  struct sock_conn *c = (struct sock_conn *)e;
  int moved = 0;
  if (c->state == CONN_OPEN && (revents & (POLLIN | POLLHUP | POLLERR)))
    moved |= watch_receiver(c);
  if (c->state == CONN_FAILED) return moved;
  uint64_t tail = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  if (tail > c->sent && (c->goodbye_seen || c->state == CONN_DONE)) {
    /* The receiver left cleanly, yet the executor has more for it. */
    conn_failed(c);
    return 1;
  }
  for (; c->staged < tail; c->staged++) {
    if (stage_step(c, c->staged) != 0) {
      conn_internal_error(c);
      return 1;
    }
    moved = 1;
  }
  if (c->sent < c->staged && (!c->want_out || (revents & (POLLOUT | POLLERR | POLLHUP)))) {
    int r = send_some(c);
    if (r < 0) {
      peer_closed(c);
      return 1;
    }
    moved |= r;
  }
  e->busy = 0;
  e->events = c->state == CONN_OPEN ? (short)(POLLIN | (c->want_out ? POLLOUT : 0)) : 0;
  return moved;
}

/* ---- receive side --------------------------------------------------------- */

static int slot_free(struct sock_conn *c) {
  return atomic_load_explicit(&c->fifo->head, memory_order_acquire) + GCOLL_STEPS > c->recvd;
}

/* Validates a complete header; -1 on a protocol violation. */
static int parse_rhdr(struct sock_conn *c) {
  uint64_t step;
  gcoll_tcp_hdr_decode(c->rhdr, &step, &c->rnb, &c->rproto);
  c->pay_got = 0;
  if (c->rproto == GCOLL_TCP_PROTO_BLAME && c->rnb == 0) {
    blamed_by_peer(c, step);
    return -1;
  }
  if (c->goodbye_seen || step != c->recvd) return -1;
  if (c->rproto == GCOLL_TCP_PROTO_GOODBYE) return c->rnb == 0 ? 0 : -1;
  if (c->rproto != GCOLL_PROTO_SIMPLE && c->rproto != GCOLL_PROTO_LL) return -1;
  return c->rnb <= gcoll_fifo_payload(c->fifo, (enum gcoll_proto)c->rproto) ? 0 : -1;
}

static char *recv_payload_dst(struct sock_conn *c) {
  if (c->rproto == GCOLL_PROTO_LL) return c->stage;
  return gcoll_fifo_simple_slot(c->fifo, c->recvd);
}

/* Publishes the complete step `recvd` as a local producer would. */
static void publish(struct sock_conn *c) {
  struct gcoll_fifo *f = c->fifo;
  uint64_t s = c->recvd;
  unsigned slot = gcoll_fifo_slot(s);
  if (c->rproto == GCOLL_PROTO_LL) {
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    for (size_t l = 0; 4 * l < c->rnb; l++) {
      uint32_t word = 0;
      size_t k = c->rnb - 4 * l < 4 ? c->rnb - 4 * l : 4;
      memcpy(&word, c->stage + 4 * l, k);
      atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
    }
  }
  f->nbytes[slot] = c->rnb;
  f->proto[slot] = c->rproto;
  atomic_store_explicit(&f->tail, s + 1, memory_order_release);
  c->recvd = s + 1;
}

/* Moves the read-ahead header bytes into place for the next step. */
static int next_header(struct sock_conn *c, size_t ahead) {
  memcpy(c->rhdr, c->ahead, ahead);
  c->rhdr_got = ahead;
  return ahead == GCOLL_TCP_HDR_BYTES ? parse_rhdr(c) : 0;
}

/* One read: the rest of the header, or the rest of the payload plus the
 * next header (one system call per step when data streams). Returns 1 when
 * bytes arrived, 0 when none were there, -1 when the connection ended. */
static int recv_some(struct sock_conn *c, size_t *ahead) {
  struct iovec iov[2];
  int n = 0;
  *ahead = 0;
  if (c->rhdr_got < GCOLL_TCP_HDR_BYTES) {
    iov[n++] = (struct iovec){c->rhdr + c->rhdr_got, GCOLL_TCP_HDR_BYTES - c->rhdr_got};
  } else {
    if (c->pay_got < c->rnb)
      iov[n++] = (struct iovec){recv_payload_dst(c) + c->pay_got, c->rnb - c->pay_got};
    iov[n++] = (struct iovec){c->ahead, GCOLL_TCP_HDR_BYTES};
  }
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t r = recvmsg(c->fd, &msg, MSG_DONTWAIT);
  if (r < 0 && gcoll_tcp_transient(errno)) return 0;
  if (r <= 0) return -1;
  size_t got = (size_t)r;
  if (c->rhdr_got < GCOLL_TCP_HDR_BYTES) {
    c->rhdr_got += got;
    return c->rhdr_got == GCOLL_TCP_HDR_BYTES && parse_rhdr(c) != 0 ? -2 : 1;
  }
  size_t pay = c->rnb - c->pay_got < got ? c->rnb - c->pay_got : got;
  c->pay_got += pay;
  *ahead = got - pay;
  return 1;
}

/* Reads and publishes until the socket is empty or the FIFO is full. */
static int recv_stream(struct sock_conn *c, short revents) {
  int moved = 0, may_read = !c->polled_in || (revents & (POLLIN | POLLHUP | POLLERR));
  c->entry.busy = 0;
  for (;;) {
    int header_done = c->rhdr_got == GCOLL_TCP_HDR_BYTES;
    if (header_done && c->rproto == GCOLL_TCP_PROTO_GOODBYE) {
      c->goodbye_seen = 1;
      c->rhdr_got = 0;
      continue;
    }
    if (header_done && c->pay_got == c->rnb) {
      if (!slot_free(c)) break;
      publish(c);
      c->rhdr_got = 0;
      moved = 1;
      continue;
    }
    /* SIMPLE payloads land in their slot, so the slot must be free first. */
    if (header_done && c->rproto == GCOLL_PROTO_SIMPLE && !slot_free(c)) break;
    if (!may_read) return moved;
    size_t ahead;
    int r = recv_some(c, &ahead);
    if (r == 0) return moved;
    if (r == -2) {
      conn_failed(c);
      return 1;
    }
    if (r < 0) {
      peer_closed(c);
      return 1;
    }
    moved = 1;
    if (ahead > 0) {
      /* The payload is complete: publish before the next header takes the
       * header buffer. */
      if (!slot_free(c)) {
        /* Cannot happen for SIMPLE (checked above); an LL step waits in the
         * stage buffer, so keep the read-ahead bytes for later. */
        memcpy(c->held, c->ahead, ahead);
        c->held_got = ahead;
        c->entry.busy = 1;
        return moved;
      }
      publish(c);
      if (next_header(c, ahead) != 0) {
        conn_failed(c);
        return 1;
      }
    }
  }
  /* The FIFO is full: the executor must consume before anything moves. */
  c->entry.busy = 1;
  return moved;
}

static int recv_progress(struct gcoll_proxy_entry *e, short revents) {
  struct sock_conn *c = (struct sock_conn *)e;
  int moved = 0;
  if (c->fd < 0) {
    pthread_mutex_lock(&c->s->lock);
    if (c->matched) {
      c->fd = c->matched_fd;
      c->matched_fd = -1;
      e->fd = c->fd;
      moved = 1;
    }
    pthread_mutex_unlock(&c->s->lock);
    if (c->fd < 0) return 0;
  }
  if (c->state != CONN_OPEN) return moved;
  if (c->held_got > 0) {
    /* An LL step waited for its slot with the next header's bytes held. */
    if (!slot_free(c)) {
      e->busy = 1;
      e->events = 0;
      c->polled_in = 0;
      return moved;
    }
    publish(c);
    size_t ahead = c->held_got;
    memcpy(c->ahead, c->held, ahead);
    c->held_got = 0;
    moved = 1;
    if (next_header(c, ahead) != 0) {
      conn_failed(c);
      return 1;
    }
  }
  moved |= recv_stream(c, revents);
  if (c->state != CONN_OPEN) return moved;
  c->polled_in = !e->busy;
  e->events = e->busy ? 0 : POLLIN;
  return moved;
}

/* ---- listener: accepting and matching connections ------------------------- */

/* Hands the accepted socket to the receive connection its hello names;
 * 0 when matched (the connection owns the fd now). */
static int match_hello(void *ctx, const unsigned char *h, int fd) {
  struct sock_state *s = ctx;
  struct gcoll_transport *t = s->t;
  if (gcoll_get_be32(h) != HELLO_MAGIC || gcoll_get_be16(h + 4) != WIRE_VERSION ||
      (int32_t)gcoll_get_be32(h + 12) != t->cfg.rank)
    return -1;
  int sender = (int32_t)gcoll_get_be32(h + 8);
  uint32_t conn_id = gcoll_get_be32(h + 16);
  int rc = -1;
  pthread_mutex_lock(&s->lock);
  for (struct sock_conn *c = s->recv_conns; c != NULL; c = c->next_recv) {
    if (c->peer != sender || c->conn_id != conn_id || c->matched) continue;
    /* The sender waits for this before it counts as connected, so an
     * evicted or refused hello is retried rather than lost. */
    unsigned char ok[GCOLL_TCP_HDR_BYTES];
    gcoll_tcp_hdr_encode(ok, 0, 0, GCOLL_TCP_PROTO_ACCEPTED);
    if (send(fd, ok, sizeof(ok), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ok)) break;
    c->matched_fd = fd;
    c->matched = 1;
    pthread_cond_broadcast(&s->cond);
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static int listen_progress(struct gcoll_proxy_entry *e, short revents) {
  struct sock_state *s =
      (struct sock_state *)((char *)e - offsetof(struct sock_state, listen_entry));
  int moved = gcoll_tcp_hellos_progress(&s->hellos, s->listen_fd, revents & POLLIN,
                                        match_hello, s);
  e->events = gcoll_tcp_hellos_listen_events(&s->hellos);
  e->busy = 0;
  return moved;
}

/* ---- init ----------------------------------------------------------------- */

static void sock_fini(struct gcoll_transport *t);

static int sock_init(struct gcoll_transport **out, const struct gcoll_transport_config *cfg,
                     char *err, size_t errlen) {
  *out = NULL;
  if (cfg != NULL && cfg->proxy == NULL) {
    snprintf(err, errlen, "net/socket needs the proxy thread");
    return -1;
  }
  struct gcoll_transport *t = calloc(1, sizeof(*t));
  struct sock_state *s = calloc(1, sizeof(*s));
  if (t == NULL || s == NULL) {
    free(t);
    free(s);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (gcoll_transport_base_init(t, &gcoll_transport_socket_ops, cfg, err, errlen) != 0) {
    free(t);
    free(s);
    return -1;
  }
  t->impl = s;
  s->t = t;
  s->listen_fd = -1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  s->hellos.hello_bytes = HELLO_BYTES;
  s->hellos.secret = &t->conn_secret;
  s->hellos.purpose = HELLO_PURPOSE;
  if (gcoll_tcp_pick_address(&s->self, err, errlen) != 0 ||
      (s->listen_fd = gcoll_tcp_listen(&s->self, err, errlen)) < 0) {
    sock_fini(t);
    return -1;
  }
  gcoll_tcp_format(&s->self, t->listen_addr, sizeof(t->listen_addr));
  s->listen_entry.fd = s->listen_fd;
  s->listen_entry.events = POLLIN;
  s->listen_entry.progress = listen_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &s->listen_entry, err, errlen) != 0) {
    sock_fini(t);
    return -1;
  }
  s->listen_registered = 1;
  *out = t;
  return 0;
}

static void sock_fini(struct gcoll_transport *t) {
  if (t == NULL) return;
  struct sock_state *s = state_of(t);
  if (s->listen_registered) gcoll_proxy_remove(t->cfg.proxy, &s->listen_entry);
  gcoll_tcp_hellos_close(&s->hellos);
  if (s->listen_fd >= 0) close(s->listen_fd);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
  gcoll_transport_base_fini(t);
  free(t);
}

/* ---- connections ---------------------------------------------------------- */

static struct sock_conn *conn_alloc(struct gcoll_transport *t, int peer, uint32_t conn_id,
                                    int is_send, char *err, size_t errlen) {
  struct sock_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->s = state_of(t);
  c->peer = peer;
  c->conn_id = conn_id;
  c->is_send = is_send;
  c->fd = -1;
  c->matched_fd = -1;
  c->entry.fd = -1;
  c->fifo = gcoll_local_fifo_alloc(t->cfg.slot_bytes, &c->fifo_map, err, errlen);
  if (c->fifo == NULL) {
    free(c);
    return NULL;
  }
  c->stage_slot = gcoll_fifo_payload(c->fifo, GCOLL_PROTO_LL);
  size_t stage_bytes = (is_send ? GCOLL_STEPS : 1) * c->stage_slot;
  c->stage = malloc(stage_bytes);
  if (c->stage == NULL) {
    snprintf(err, errlen, "out of memory for a %zu-byte stage", stage_bytes);
    gcoll_local_fifo_free(c->fifo, c->fifo_map);
    free(c);
    return NULL;
  }
  memset(c->stage, 0, stage_bytes); /* touched once, here */
  return c;
}

static void conn_free(struct sock_conn *c) {
  gcoll_local_fifo_free(c->fifo, c->fifo_map);
  free(c->stage);
  free(c);
}

static int sock_recv_setup(struct gcoll_transport *t, int peer, uint32_t conn_id,
                           struct gcoll_conn *gc, void *addr, size_t *addrlen, char *err,
                           size_t errlen) {
  struct sock_state *s = state_of(t);
  if (peer < 0 || peer >= t->cfg.nranks) {
    snprintf(err, errlen, "peer rank %d out of range [0, %d)", peer, t->cfg.nranks);
    return -1;
  }
  if (*addrlen < SOCK_ADDR_BYTES) {
    snprintf(err, errlen, "address buffer of %zu bytes, need %d", *addrlen, SOCK_ADDR_BYTES);
    return -1;
  }
  struct sock_conn *c = conn_alloc(t, peer, conn_id, 0, err, errlen);
  if (c == NULL) return -1;
  c->entry.progress = recv_progress;
  pthread_mutex_lock(&s->lock);
  for (struct sock_conn *o = s->recv_conns; o != NULL; o = o->next_recv)
    if (o->peer == peer && o->conn_id == conn_id) {
      pthread_mutex_unlock(&s->lock);
      snprintf(err, errlen, "connection %u from rank %d is set up already", conn_id, peer);
      conn_free(c);
      return -1;
    }
  c->next_recv = s->recv_conns;
  s->recv_conns = c;
  pthread_mutex_unlock(&s->lock);
  if (gcoll_proxy_add(t->cfg.proxy, &c->entry, err, errlen) != 0) {
    pthread_mutex_lock(&s->lock);
    s->recv_conns = c->next_recv;
    pthread_mutex_unlock(&s->lock);
    conn_free(c);
    return -1;
  }
  unsigned char *a = addr;
  memset(a, 0, SOCK_ADDR_BYTES);
  gcoll_put_be32(a, SOCK_ADDR_MAGIC);
  gcoll_put_be16(a + 4, WIRE_VERSION);
  gcoll_put_be16(a + 6, s->self.family == AF_INET ? 4 : 6);
  gcoll_put_be16(a + 8, s->self.port);
  gcoll_put_be32(a + 12, conn_id);
  gcoll_put_be32(a + 16, (uint32_t)t->cfg.rank);
  gcoll_put_be64(a + 24, t->job_hash);
  memcpy(a + 32, s->self.ip, 16);
  *addrlen = SOCK_ADDR_BYTES;
  *gc = (struct gcoll_conn){.fifo = c->fifo, .peer = peer, .is_send = 0,
                            .ops = &gcoll_transport_socket_ops, .impl = c};
  return 0;
}

static int parse_addr(const struct gcoll_transport *t, int peer, uint32_t conn_id,
                      const void *addr, size_t addrlen, struct gcoll_tcp_endpoint *pa, char *err,
                      size_t errlen) {
  const unsigned char *a = addr;
  if (a == NULL || addrlen != SOCK_ADDR_BYTES) {
    snprintf(err, errlen, "socket address of %zu bytes, expected %d", addrlen, SOCK_ADDR_BYTES);
    return -1;
  }
  uint16_t fam = gcoll_get_be16(a + 6);
  uint64_t job = gcoll_get_be64(a + 24);
  if (gcoll_get_be32(a) != SOCK_ADDR_MAGIC || gcoll_get_be16(a + 4) != WIRE_VERSION || (fam != 4 && fam != 6))
    snprintf(err, errlen, "not a gcoll socket address (version %u)", gcoll_get_be16(a + 4));
  else if (job != t->job_hash)
    snprintf(err, errlen, "socket address is from another job (job hash %016llx, ours %016llx)",
             (unsigned long long)job, (unsigned long long)t->job_hash);
  else if ((int32_t)gcoll_get_be32(a + 16) != peer || gcoll_get_be32(a + 12) != conn_id)
    snprintf(err, errlen,
             "socket address is for rank %d connection %u, expected rank %d connection %u",
             (int32_t)gcoll_get_be32(a + 16), gcoll_get_be32(a + 12), peer, conn_id);
  else if (gcoll_get_be16(a + 8) == 0)
    snprintf(err, errlen, "socket address has port 0");
  else {
    pa->family = fam == 4 ? AF_INET : AF_INET6;
    memcpy(pa->ip, a + 32, 16);
    pa->port = gcoll_get_be16(a + 8);
    return 0;
  }
  return -1;
}

static int sock_send_connect(struct gcoll_transport *t, int peer, uint32_t conn_id,
                             const void *addr, size_t addrlen, struct gcoll_conn *gc,
                             uint64_t deadline_ms, char *err, size_t errlen) {
  struct gcoll_tcp_endpoint pa;
  if (parse_addr(t, peer, conn_id, addr, addrlen, &pa, err, errlen) != 0) return -1;
  struct sock_conn *c = conn_alloc(t, peer, conn_id, 1, err, errlen);
  if (c == NULL) return -1;
  unsigned char h[HELLO_BYTES] = {0}, answer[GCOLL_TCP_HDR_BYTES];
  gcoll_put_be32(h, HELLO_MAGIC);
  gcoll_put_be16(h + 4, WIRE_VERSION);
  gcoll_put_be32(h + 8, (uint32_t)t->cfg.rank);
  gcoll_put_be32(h + 12, (uint32_t)peer);
  gcoll_put_be32(h + 16, conn_id);
  char why[512];
  c->fd = gcoll_tcp_hello_connect(&pa, &t->conn_secret, HELLO_PURPOSE, h, sizeof(h), answer,
                                  deadline_ms, why, sizeof(why));
  uint64_t step;
  uint32_t nb, proto;
  gcoll_tcp_hdr_decode(answer, &step, &nb, &proto);
  if (c->fd >= 0 && (proto != GCOLL_TCP_PROTO_ACCEPTED || nb != 0)) {
    snprintf(why, sizeof(why), "answered our hello with a header that is not 'accepted'");
    close(c->fd);
    c->fd = -1;
  }
  if (c->fd < 0) {
    snprintf(err, errlen, "connecting to rank %d: %s", peer, why);
    conn_free(c);
    return -1;
  }
  c->entry.fd = c->fd;
  c->entry.events = POLLIN;
  c->entry.progress = send_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &c->entry, err, errlen) != 0) {
    close(c->fd);
    conn_free(c);
    return -1;
  }
  *gc = (struct gcoll_conn){.fifo = c->fifo, .peer = peer, .is_send = 1,
                            .ops = &gcoll_transport_socket_ops, .impl = c};
  return 0;
}

static int sock_recv_complete(struct gcoll_transport *t, struct gcoll_conn *gc,
                              uint64_t deadline_ms, char *err, size_t errlen) {
  struct sock_conn *c = gc->impl;
  struct sock_state *s = c->s;
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                        .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  while (!c->matched && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  int ok = c->matched;
  pthread_mutex_unlock(&s->lock);
  if (ok) return 0;
  snprintf(err, errlen, "rank %d did not connect (connection %u) before the deadline", c->peer,
           c->conn_id);
  return -1;
}

/* Sends what the executor published before the close, bounded. */
static void flush(struct sock_conn *c, uint64_t deadline_ms) {
  _Atomic int *abort_word = c->s->t->cfg.abort_word;
  uint64_t target = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  short revents = 0;
  while (c->state == CONN_OPEN && c->sent < target && atomic_load(abort_word) == 0) {
    send_progress(&c->entry, revents);
    if (c->state != CONN_OPEN || c->sent >= target) break;
    int ms = gcoll_tcp_remaining_ms(deadline_ms);
    if (ms == 0) break;
    struct pollfd p = {.fd = c->fd, .events = (short)(POLLIN | POLLOUT)};
    revents = poll(&p, 1, ms) > 0 ? p.revents : 0;
  }
}

/* A last header (goodbye or blame), then an orderly shutdown. */
static void last_word_and_close(struct sock_conn *c, uint64_t step, uint32_t proto) {
  unsigned char h[GCOLL_TCP_HDR_BYTES];
  gcoll_tcp_hdr_encode(h, step, 0, proto);
  gcoll_tcp_last_word_and_close(c->fd, h, sizeof(h));
  c->fd = -1;
}

static void sock_conn_close(struct gcoll_transport *t, struct gcoll_conn *gc) {
  struct sock_conn *c = gc->impl;
  if (c == NULL) return;
  struct sock_state *s = c->s;
  gcoll_proxy_remove(t->cfg.proxy, &c->entry);
  if (!c->is_send) {
    pthread_mutex_lock(&s->lock);
    for (struct sock_conn **p = &s->recv_conns; *p != NULL; p = &(*p)->next_recv)
      if (*p == c) {
        *p = c->next_recv;
        break;
      }
    if (c->fd < 0 && c->matched_fd >= 0) c->fd = c->matched_fd;
    c->matched_fd = -1;
    pthread_mutex_unlock(&s->lock);
  } else {
    uint64_t bound = t->cfg.timeout_ms < CLOSE_FLUSH_MAX_MS ? t->cfg.timeout_ms : CLOSE_FLUSH_MAX_MS;
    flush(c, gcoll_transport_now_ms() + bound);
  }
  if (c->fd >= 0) {
    /* No goodbye from a communicator in error: the peer cannot finish what
     * it waits for from us, so it should fail now, not at its deadline,
     * naming the rank we blame. A header can only go between steps. */
    int in_error = atomic_load(t->cfg.abort_word) != 0;
    if (c->state == CONN_FAILED || (in_error && c->is_send && c->off != 0))
      close(c->fd);
    else if (in_error)
      last_word_and_close(c, (uint64_t)gcoll_transport_blame(&t->cfg), GCOLL_TCP_PROTO_BLAME);
    else
      last_word_and_close(c, c->is_send ? c->sent : c->recvd, GCOLL_TCP_PROTO_GOODBYE);
  }
  conn_free(c);
  gc->impl = NULL;
  gc->fifo = NULL;
}

const struct gcoll_transport_ops gcoll_transport_socket_ops = {
    .name = "net/socket",
    .init = sock_init,
    .recv_setup = sock_recv_setup,
    .send_connect = sock_send_connect,
    .recv_complete = sock_recv_complete,
    .conn_close = sock_conn_close,
    .fini = sock_fini,
};
