/* net/ib: FIFOs forwarded by RDMA writes over RC queue pairs, driven by the
 * proxy thread like net/socket.
 *
 * Both ends have local FIFOs (gcoll_local_fifo_alloc), each registered as a
 * memory region. The sender's proxy turns each published step s into one
 * RDMA write with immediate, straight into SIMPLE slot s % GCOLL_STEPS of
 * the receiver's FIFO (an LL step is first decoded into the sender's own
 * SIMPLE slot of the same step, which the executor leaves unused, and
 * travels as its data bytes only). The immediate carries nbytes, the
 * protocol and the step modulo 16 (net_ib_addr.h). The receiver's proxy
 * takes the write's completion, re-encodes LL lines, and publishes the step
 * exactly as a local producer would (nbytes/proto, then tail with release).
 * The sender frees a local slot (head) when its write completed.
 *
 * Flow control: the sender writes step s only when the receiver's head
 * (credit) + GCOLL_STEPS > s, so a write never lands in a slot the
 * consumer still reads. The receiver's proxy returns slots with a
 * zero-byte send-with-immediate carrying the low 32 bits of its head, at
 * most one in flight (each carries the newest head anyway). Receives are
 * reposted by the proxy as it takes their completions; the sender can only
 * use a slot after the receiver reposted its receive, so there are no
 * receiver-not-ready stalls in the data direction.
 *
 * Connecting an RC pair needs each end's queue pair number, but the
 * transport contract carries one address, receiver -> sender. The other
 * direction goes over a TCP side channel, with net/socket's authenticated
 * hello (net_tcp.h: challenge, hello, HMAC under the job's secret): every
 * transport listens on one socket (on the address net/socket picks); the
 * receiver's address names it. The sender brings its
 * QP to RTS with the receiver's info, connects, sends a hello with its own
 * QP info; the receiver's proxy matches the hello to the receive
 * connection, brings that QP to RTS and answers "ready", and only then does
 * the sender write. The side channel then stays open for the same
 * goodbye/blame protocol as net/socket, and its EOF is how a dead process
 * is noticed at once (RDMA alone notices only on the next write, after the
 * retry timeout).
 *
 * Wake-ups: every CQ reports to the device's completion channel, whose fd
 * is one proxy entry; a connection re-arms its CQ before it polls it, so
 * no completion goes unnoticed while the proxy sleeps. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gcoll.h"
#include "runtime/net_ib_addr.h"
#include "runtime/net_ib_verbs.h"
#include "runtime/net_tcp.h"
#include "runtime/proxy.h"
#include "runtime/transport.h"

#define CLOSE_FLUSH_MAX_MS 10000u
#define IB_HELLO_PURPOSE "gcoll net/ib hello v2"
_Static_assert(GCOLL_IB_HELLO_BYTES <= GCOLL_TCP_HELLO_MAX, "the hello table must hold our hello");
#define CREDIT_RECVS 4           /* sender's receives posted for credits */
#define SEND_WR (GCOLL_STEPS + 2)
#define RECV_WR (GCOLL_STEPS + 2)
#define WR_CREDIT UINT64_MAX     /* wr_id of a credit send */

enum conn_state { CONN_OPEN = 0, CONN_DONE, CONN_FAILED };

struct ib_state;

struct ib_conn {
  struct gcoll_proxy_entry entry; /* first: the progress callback's handle */
  struct ib_state *s;
  int peer, is_send;
  uint32_t conn_id;
  struct gcoll_fifo *fifo;
  size_t fifo_map;
  struct ibv_mr *mr;
  struct gcoll_ib_qp qp;
  _Atomic int cq_armed;           /* cleared by the channel entry on an event */
  int fd;                         /* side channel, proxy side (or closing thread) */
  enum conn_state state;
  int goodbye_seen;
  unsigned char back[GCOLL_IB_HDR_BYTES];
  size_t back_got;
  /* Receive side, under s->lock: the listener hands the side channel over
   * (or says why it could not). */
  int matched_fd, matched, setup_failed;
  char setup_err[192];
  struct ib_conn *next_recv;
  /* Send side: steps [0, completed) written and acked, [completed,
   * posted) in flight; the receiver's head is `credit`. */
  uint64_t posted, completed, credit;
  uint64_t remote_slots;
  uint32_t rkey;
  /* Receive side: steps [0, recvd) published; the sender knows head
   * head_sent (or will, when the credit in flight lands). */
  uint64_t recvd, head_sent;
  int credit_inflight;
};

struct ib_state {
  struct gcoll_transport *t;
  struct gcoll_ib_dev dev;
  struct gcoll_proxy_entry listen_entry, channel_entry;
  int listen_fd, listen_registered, channel_registered;
  struct gcoll_tcp_endpoint self; /* where the side channel listener is */
  /* Guards recv_conns and the hand-over fields, and orders CQ events
   * against CQ destruction. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct ib_conn *recv_conns;
  struct gcoll_tcp_hellos hellos; /* proxy thread only */
};

static struct ib_state *state_of(struct gcoll_transport *t) { return t->impl; }

/* ---- failures --------------------------------------------------------------- */

static void conn_failed_blaming(struct ib_conn *c, int rank) {
  if (c->state == CONN_FAILED) return;
  c->state = CONN_FAILED;
  c->entry.events = 0;
  c->entry.busy = 0;
  gcoll_transport_peer_failed(c->s->t->cfg.abort_word, c->s->t->cfg.failed_peer, rank);
}

static void conn_failed(struct ib_conn *c) { conn_failed_blaming(c, c->peer); }

/* A blame header names the failed rank; a rank out of range is the peer's
 * own fault. */
static void blamed_by_peer(struct ib_conn *c, uint64_t rank) {
  int nranks = c->s->t->cfg.nranks;
  conn_failed_blaming(c, rank < (uint64_t)nranks ? (int)rank : c->peer);
}

/* The executor published a step no transport could carry: not the peer's
 * fault, so not a remote error. */
static void conn_internal_error(struct ib_conn *c) {
  c->state = CONN_FAILED;
  c->entry.events = 0;
  c->entry.busy = 0;
  int ok = 0;
  atomic_compare_exchange_strong(c->s->t->cfg.abort_word, &ok, (int)gcollInternalError);
}

static void peer_closed(struct ib_conn *c) {
  if (!c->goodbye_seen) {
    conn_failed(c);
    return;
  }
  c->state = CONN_DONE;
  c->entry.events = 0;
  c->entry.busy = 0;
}

/* The side channel carries only goodbye or blame once connected; a
 * second goodbye is a broken peer, as on net/socket. */
static int watch_side_channel(struct ib_conn *c) {
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

/* ---- completions ------------------------------------------------------------ */

static int post_recv(struct ib_conn *c) {
  struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
  return ibv_post_recv(c->qp.qp, &wr, &bad) == 0 ? 0 : -1;
}

/* Re-arms the CQ before polling it: a completion after the poll then
 * raises an event on the channel. */
static void arm_cq(struct ib_conn *c) {
  if (atomic_load_explicit(&c->cq_armed, memory_order_acquire)) return;
  if (ibv_req_notify_cq(c->qp.cq, 0) == 0) atomic_store(&c->cq_armed, 1);
}

/* Receiver: step `recvd` landed in its SIMPLE slot. */
static int take_data(struct ib_conn *c, uint32_t imm) {
  struct gcoll_fifo *f = c->fifo;
  uint64_t s = c->recvd;
  uint32_t nb;
  int is_ll;
  if (gcoll_ib_imm_decode(imm, s, f->slot_bytes, &nb, &is_ll) != 0 ||
      atomic_load_explicit(&f->head, memory_order_acquire) + GCOLL_STEPS <= s)
    return -1;
  if (is_ll) {
    const char *data = gcoll_fifo_simple_slot(f, s);
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    for (size_t l = 0; 4 * l < nb; l++) {
      uint32_t word = 0;
      memcpy(&word, data + 4 * l, nb - 4 * l < 4 ? nb - 4 * l : 4);
      atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
    }
  }
  unsigned slot = gcoll_fifo_slot(s);
  f->nbytes[slot] = nb;
  f->proto[slot] = is_ll ? GCOLL_PROTO_LL : GCOLL_PROTO_SIMPLE;
  atomic_store_explicit(&f->tail, s + 1, memory_order_release);
  c->recvd = s + 1;
  return post_recv(c);
}

/* One completion; -1 when the connection is broken. */
static int take_completion(struct ib_conn *c, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) return -1;
  switch (wc->opcode) {
    case IBV_WC_RDMA_WRITE: /* sender: step `completed` is placed remotely */
      if (!c->is_send || wc->wr_id != c->completed || c->completed >= c->posted) return -1;
      c->completed++;
      atomic_store_explicit(&c->fifo->head, c->completed, memory_order_release);
      return 0;
    case IBV_WC_RECV: { /* sender: a credit */
      uint64_t head;
      if (!c->is_send || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
          gcoll_ib_credit_decode(ntohl(wc->imm_data), c->credit, c->posted, &head) != 0)
        return -1;
      c->credit = head;
      return post_recv(c);
    }
    case IBV_WC_RECV_RDMA_WITH_IMM: /* receiver: data */
      return c->is_send ? -1 : take_data(c, ntohl(wc->imm_data));
    case IBV_WC_SEND: /* receiver: the credit landed */
      if (c->is_send) return -1;
      c->credit_inflight = 0;
      return 0;
    default:
      return -1;
  }
}

/* Drains the CQ. Returns whether anything completed; marks the peer failed
 * on an error while open (after a clean close the peer's QP is gone, and
 * only our leftover credit can fail: not a failure). */
static int poll_cq(struct ib_conn *c) {
  struct ibv_wc wc[16];
  int moved = 0;
  for (;;) {
    int n = ibv_poll_cq(c->qp.cq, 16, wc);
    if (n <= 0) {
      if (n < 0 && c->state == CONN_OPEN) conn_failed(c);
      return moved;
    }
    moved = 1;
    for (int i = 0; i < n; i++) {
      if (c->state == CONN_FAILED) continue;
      if (take_completion(c, &wc[i]) != 0 && c->state == CONN_OPEN) conn_failed(c);
    }
  }
}

/* ---- send side -------------------------------------------------------------- */

/* Posts the RDMA write of published step s; -1 when the step cannot be what
 * an executor publishes (*internal) or the QP refused it. */
static int post_step(struct ib_conn *c, uint64_t s, int *internal) {
  struct gcoll_fifo *f = c->fifo;
  unsigned slot = gcoll_fifo_slot(s);
  uint32_t nb = f->nbytes[slot], proto = f->proto[slot];
  *internal = 1;
  if ((proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL) ||
      nb > gcoll_fifo_payload(f, (enum gcoll_proto)proto))
    return -1;
  char *data = gcoll_fifo_simple_slot(f, s);
  if (proto == GCOLL_PROTO_LL) {
    _Atomic uint64_t *lines = gcoll_fifo_ll_slot(f, s);
    for (size_t l = 0; 4 * l < nb; l++) {
      uint64_t v = atomic_load_explicit(&lines[l], memory_order_relaxed);
      if (!gcoll_ll_line_ready(v, s)) return -1;
      uint32_t word = (uint32_t)v;
      memcpy(data + 4 * l, &word, nb - 4 * l < 4 ? nb - 4 * l : 4);
    }
  }
  *internal = 0;
  struct ibv_sge sge = {.addr = (uintptr_t)data, .length = nb, .lkey = c->mr->lkey};
  struct ibv_send_wr wr = {
      .wr_id = s,
      .sg_list = nb > 0 ? &sge : NULL,
      .num_sge = nb > 0 ? 1 : 0,
      .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
      .send_flags = IBV_SEND_SIGNALED,
      .imm_data = htonl(gcoll_ib_imm_encode(s, nb, proto == GCOLL_PROTO_LL)),
      .wr = {.rdma = {.remote_addr = gcoll_ib_slot_addr(c->remote_slots, f->slot_bytes, s),
                      .rkey = c->rkey}},
  };
  struct ibv_send_wr *bad;
  return ibv_post_send(c->qp.qp, &wr, &bad) == 0 ? 0 : -1;
}

static int send_progress(struct gcoll_proxy_entry *e, short revents) {
  struct ib_conn *c = (struct ib_conn *)e;
  int moved = 0;
  if (c->state == CONN_OPEN && (revents & (POLLIN | POLLHUP | POLLERR)))
    moved |= watch_side_channel(c);
  if (c->state == CONN_FAILED) return moved;
  arm_cq(c);
  moved |= poll_cq(c);
  if (c->state == CONN_FAILED) return 1;
  uint64_t tail = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  if (tail > c->posted && (c->goodbye_seen || c->state == CONN_DONE)) {
    /* The receiver left cleanly, yet the executor has more for it. */
    conn_failed(c);
    return 1;
  }
  while (c->posted < tail && c->posted < c->credit + GCOLL_STEPS) {
    int internal;
    if (post_step(c, c->posted, &internal) != 0) {
      if (internal) conn_internal_error(c);
      else conn_failed(c);
      return 1;
    }
    c->posted++;
    moved = 1;
  }
  e->busy = 0;
  e->events = c->state == CONN_OPEN ? POLLIN : 0;
  return moved;
}

/* ---- receive side ----------------------------------------------------------- */

/* Returns consumed slots to the sender, one credit in flight at a time. */
static int send_credit(struct ib_conn *c) {
  uint64_t head = atomic_load_explicit(&c->fifo->head, memory_order_acquire);
  if (c->credit_inflight || head <= c->head_sent) return 0;
  struct ibv_send_wr wr = {.wr_id = WR_CREDIT,
                           .num_sge = 0,
                           .opcode = IBV_WR_SEND_WITH_IMM,
                           .send_flags = IBV_SEND_SIGNALED,
                           .imm_data = htonl((uint32_t)head)},
                     *bad;
  if (ibv_post_send(c->qp.qp, &wr, &bad) != 0) {
    conn_failed(c);
    return 1;
  }
  c->head_sent = head;
  c->credit_inflight = 1;
  return 1;
}

static int recv_progress(struct gcoll_proxy_entry *e, short revents) {
  struct ib_conn *c = (struct ib_conn *)e;
  int moved = 0;
  if (c->fd < 0) {
    pthread_mutex_lock(&c->s->lock);
    if (c->matched) {
      c->fd = c->matched_fd;
      c->matched_fd = -1;
      e->fd = c->fd;
      e->events = POLLIN;
      moved = 1;
    }
    pthread_mutex_unlock(&c->s->lock);
    if (c->fd < 0) return 0;
  }
  if (c->state == CONN_OPEN && (revents & (POLLIN | POLLHUP | POLLERR)))
    moved |= watch_side_channel(c);
  if (c->state == CONN_FAILED) return moved;
  /* After a clean goodbye, writes the sender completed before it may still
   * wait in our CQ: they are the sender's last steps, so keep taking them. */
  arm_cq(c);
  moved |= poll_cq(c);
  if (c->state == CONN_OPEN) moved |= send_credit(c);
  /* Steps the executor has not consumed: its head must go back as a
   * credit, and nothing but our polling will notice it moved. */
  e->busy = c->state == CONN_OPEN && c->head_sent < c->recvd;
  e->events = c->state == CONN_OPEN ? POLLIN : 0;
  return moved;
}

/* ---- the completion channel ------------------------------------------------- */

static int channel_progress(struct gcoll_proxy_entry *e, short revents) {
  struct ib_state *s =
      (struct ib_state *)((char *)e - offsetof(struct ib_state, channel_entry));
  int moved = 0;
  e->events = POLLIN;
  e->busy = 0;
  /* An unread event keeps the fd readable, so the next poll reports it:
   * no read (a system call) in rounds that saw nothing. */
  if (!(revents & POLLIN)) return 0;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    struct ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(s->dev.channel, &cq, &ctx) != 0) break;
    ibv_ack_cq_events(cq, 1);
    atomic_store(&((struct ib_conn *)ctx)->cq_armed, 0);
    moved = 1;
  }
  pthread_mutex_unlock(&s->lock);
  return moved;
}

/* ---- listener: matching hellos to receive connections ---------------------- */

/* Connects the receive QP the hello names and answers ready; 0 when the
 * connection owns the fd now. */
static int match_hello(void *ctx, const unsigned char *buf, int fd) {
  struct ib_state *s = ctx;
  struct gcoll_transport *t = s->t;
  struct gcoll_ib_hello h;
  if (gcoll_ib_hello_decode(buf, t->job_hash, t->cfg.rank, &h) != 0) return -1;
  int rc = -1;
  pthread_mutex_lock(&s->lock);
  for (struct ib_conn *c = s->recv_conns; c != NULL; c = c->next_recv) {
    if (c->peer != h.sender || c->conn_id != h.conn_id || c->matched || c->setup_failed)
      continue;
    char err[160];
    if (gcoll_ib_qp_connect(&s->dev, &c->qp, &h.qp, err, sizeof(err)) != 0) {
      snprintf(c->setup_err, sizeof(c->setup_err), "%s", err);
      c->setup_failed = 1;
    } else {
      unsigned char ready[GCOLL_IB_HDR_BYTES];
      gcoll_ib_hdr_encode(ready, 0, 0, GCOLL_IB_PROTO_READY);
      /* A fresh socket's buffer takes 16 bytes at once. */
      if (send(fd, ready, sizeof(ready), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(ready)) {
        c->matched_fd = fd;
        c->matched = 1;
        rc = 0;
      } else {
        snprintf(c->setup_err, sizeof(c->setup_err), "side channel to rank %d: %s", c->peer,
                 strerror(errno));
        c->setup_failed = 1;
      }
    }
    pthread_cond_broadcast(&s->cond);
    break;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static int listen_progress(struct gcoll_proxy_entry *e, short revents) {
  struct ib_state *s = (struct ib_state *)((char *)e - offsetof(struct ib_state, listen_entry));
  int moved = gcoll_tcp_hellos_progress(&s->hellos, s->listen_fd, revents & POLLIN,
                                        match_hello, s);
  e->events = gcoll_tcp_hellos_listen_events(&s->hellos);
  e->busy = 0;
  return moved;
}

/* The side channel listener: where GCOLL_SOCKET_IFADDR says, as net/socket's. */
static int open_listener(struct ib_state *s, char *err, size_t errlen) {
  char why[160];
  if (gcoll_tcp_pick_address(&s->self, err, errlen) != 0) return -1;
  s->listen_fd = gcoll_tcp_listen(&s->self, why, sizeof(why));
  if (s->listen_fd < 0) {
    snprintf(err, errlen, "net/ib side channel listener: %s", why);
    return -1;
  }
  gcoll_tcp_format(&s->self, s->t->listen_addr, sizeof(s->t->listen_addr));
  return 0;
}

/* ---- init ------------------------------------------------------------------- */

static void ib_fini(struct gcoll_transport *t);

static int ib_init(struct gcoll_transport **out, const struct gcoll_transport_config *cfg,
                   char *err, size_t errlen) {
  *out = NULL;
  if (cfg != NULL && cfg->proxy == NULL) {
    snprintf(err, errlen, "net/ib needs the proxy thread");
    return -1;
  }
  struct gcoll_transport *t = calloc(1, sizeof(*t));
  struct ib_state *s = calloc(1, sizeof(*s));
  if (t == NULL || s == NULL) {
    free(t);
    free(s);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (gcoll_transport_base_init(t, &gcoll_transport_ib_ops, cfg, err, errlen) != 0) {
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
  s->hellos.hello_bytes = GCOLL_IB_HELLO_BYTES;
  s->hellos.secret = &t->conn_secret;
  s->hellos.purpose = IB_HELLO_PURPOSE;
  if (gcoll_ib_dev_open(&s->dev, err, errlen) != 0 || open_listener(s, err, errlen) != 0) {
    ib_fini(t);
    return -1;
  }
  s->channel_entry.fd = s->dev.channel->fd;
  s->channel_entry.events = POLLIN;
  s->channel_entry.progress = channel_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &s->channel_entry, err, errlen) != 0) {
    ib_fini(t);
    return -1;
  }
  s->channel_registered = 1;
  s->listen_entry.fd = s->listen_fd;
  s->listen_entry.events = POLLIN;
  s->listen_entry.progress = listen_progress;
  if (gcoll_proxy_add(t->cfg.proxy, &s->listen_entry, err, errlen) != 0) {
    ib_fini(t);
    return -1;
  }
  s->listen_registered = 1;
  *out = t;
  return 0;
}

static void ib_fini(struct gcoll_transport *t) {
  if (t == NULL) return;
  struct ib_state *s = state_of(t);
  if (s->listen_registered) gcoll_proxy_remove(t->cfg.proxy, &s->listen_entry);
  if (s->channel_registered) gcoll_proxy_remove(t->cfg.proxy, &s->channel_entry);
  gcoll_tcp_hellos_close(&s->hellos);
  if (s->listen_fd >= 0) close(s->listen_fd);
  gcoll_ib_dev_close(&s->dev);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
  gcoll_transport_base_fini(t);
  free(t);
}

/* ---- connections ------------------------------------------------------------ */

static void conn_free(struct ib_conn *c) {
  struct ib_state *s = c->s;
  /* Under the lock: the channel entry must not take an event of this CQ
   * while it is destroyed. The QP goes first, so nothing writes into the
   * FIFO once its region is gone. */
  pthread_mutex_lock(&s->lock);
  gcoll_ib_qp_destroy(&c->qp);
  pthread_mutex_unlock(&s->lock);
  if (c->mr != NULL) ibv_dereg_mr(c->mr);
  gcoll_local_fifo_free(c->fifo, c->fifo_map);
  free(c);
}

/* FIFO, its memory region, CQ and QP (in INIT, receives posted). */
static struct ib_conn *conn_alloc(struct gcoll_transport *t, int peer, uint32_t conn_id,
                                  int is_send, char *err, size_t errlen) {
  struct ib_state *s = state_of(t);
  struct ib_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->s = s;
  c->peer = peer;
  c->conn_id = conn_id;
  c->is_send = is_send;
  c->fd = -1;
  c->matched_fd = -1;
  c->entry.fd = -1;
  atomic_init(&c->cq_armed, 0);
  c->fifo = gcoll_local_fifo_alloc(t->cfg.slot_bytes, &c->fifo_map, err, errlen);
  if (c->fifo == NULL) {
    free(c);
    return NULL;
  }
  int access = IBV_ACCESS_LOCAL_WRITE | (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE);
  c->mr = ibv_reg_mr(s->dev.pd, c->fifo, c->fifo_map, access);
  if (c->mr == NULL) {
    snprintf(err, errlen, "%s: ibv_reg_mr of a %zu-byte FIFO: %s", s->dev.name, c->fifo_map,
             strerror(errno));
    conn_free(c);
    return NULL;
  }
  if (gcoll_ib_qp_create(&s->dev, c, SEND_WR, RECV_WR, &c->qp, err, errlen) != 0) {
    conn_free(c);
    return NULL;
  }
  int recvs = is_send ? CREDIT_RECVS : GCOLL_STEPS;
  for (int i = 0; i < recvs; i++)
    if (post_recv(c) != 0) {
      snprintf(err, errlen, "%s: ibv_post_recv failed", s->dev.name);
      conn_free(c);
      return NULL;
    }
  return c;
}

static int ib_recv_setup(struct gcoll_transport *t, int peer, uint32_t conn_id,
                         struct gcoll_conn *gc, void *addr, size_t *addrlen, char *err,
                         size_t errlen) {
  struct ib_state *s = state_of(t);
  if (peer < 0 || peer >= t->cfg.nranks) {
    snprintf(err, errlen, "peer rank %d out of range [0, %d)", peer, t->cfg.nranks);
    return -1;
  }
  if (*addrlen < GCOLL_IB_ADDR_BYTES) {
    snprintf(err, errlen, "address buffer of %zu bytes, need %d", *addrlen, GCOLL_IB_ADDR_BYTES);
    return -1;
  }
  pthread_mutex_lock(&s->lock);
  for (struct ib_conn *o = s->recv_conns; o != NULL; o = o->next_recv)
    if (o->peer == peer && o->conn_id == conn_id) {
      pthread_mutex_unlock(&s->lock);
      snprintf(err, errlen, "connection %u from rank %d is set up already", conn_id, peer);
      return -1;
    }
  pthread_mutex_unlock(&s->lock);
  struct ib_conn *c = conn_alloc(t, peer, conn_id, 0, err, errlen);
  if (c == NULL) return -1;
  c->entry.progress = recv_progress;
  pthread_mutex_lock(&s->lock);
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
  struct gcoll_ib_addr a = {
      .rank = t->cfg.rank,
      .conn_id = conn_id,
      .job_hash = t->job_hash,
      .qp = c->qp.info,
      .slots_addr = (uintptr_t)gcoll_fifo_simple_slot(c->fifo, 0),
      .rkey = c->mr->rkey,
      .slot_bytes = (uint32_t)c->fifo->slot_bytes,
      .family = s->self.family == AF_INET ? 4 : 6,
      .port = s->self.port,
  };
  memcpy(a.ip, s->self.ip, 16);
  gcoll_ib_addr_encode(&a, addr);
  *addrlen = GCOLL_IB_ADDR_BYTES;
  *gc = (struct gcoll_conn){.fifo = c->fifo, .peer = peer, .is_send = 0,
                            .ops = &gcoll_transport_ib_ops, .impl = c};
  return 0;
}

/* Introduces our QP on the side channel and waits for the receiver's. */
static int side_channel_connect(struct ib_conn *c, const struct gcoll_ib_addr *a,
                                uint64_t deadline_ms, char *err, size_t errlen) {
  struct gcoll_transport *t = c->s->t;
  struct gcoll_tcp_endpoint to = {.family = a->family == 4 ? AF_INET : AF_INET6,
                                   .port = a->port};
  memcpy(to.ip, a->ip, 16);
  struct gcoll_ib_hello h = {.sender = t->cfg.rank, .receiver = c->peer, .conn_id = c->conn_id,
                             .job_hash = t->job_hash, .qp = c->qp.info};
  unsigned char hello[GCOLL_IB_HELLO_BYTES], ready[GCOLL_IB_HDR_BYTES];
  gcoll_ib_hello_encode(&h, hello);
  char why[512];
  _Static_assert(GCOLL_IB_HDR_BYTES == GCOLL_TCP_HDR_BYTES, "ready is a TCP header");
  c->fd = gcoll_tcp_hello_connect(&to, &t->conn_secret, IB_HELLO_PURPOSE, hello, sizeof(hello),
                                  ready, deadline_ms, why, sizeof(why));
  if (c->fd < 0) {
    snprintf(err, errlen, "net/ib side channel to rank %d (connection %u): %s", c->peer,
             c->conn_id, why);
    return -1;
  }
  uint64_t step;
  uint32_t nb, proto;
  gcoll_ib_hdr_decode(ready, &step, &nb, &proto);
  if (proto != GCOLL_IB_PROTO_READY || nb != 0) {
    snprintf(err, errlen, "rank %d answered the net/ib hello with a malformed header", c->peer);
    return -1;
  }
  return 0;
}

static int ib_send_connect(struct gcoll_transport *t, int peer, uint32_t conn_id,
                           const void *addr, size_t addrlen, struct gcoll_conn *gc,
                           uint64_t deadline_ms, char *err, size_t errlen) {
  struct gcoll_ib_addr a;
  if (gcoll_ib_addr_decode(addr, addrlen, t->job_hash, peer, conn_id, t->cfg.slot_bytes, &a, err,
                           errlen) != 0)
    return -1;
  struct ib_conn *c = conn_alloc(t, peer, conn_id, 1, err, errlen);
  if (c == NULL) return -1;
  c->remote_slots = a.slots_addr;
  c->rkey = a.rkey;
  if (gcoll_ib_qp_connect(&c->s->dev, &c->qp, &a.qp, err, errlen) != 0 ||
      side_channel_connect(c, &a, deadline_ms, err, errlen) != 0) {
    if (c->fd >= 0) close(c->fd);
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
                            .ops = &gcoll_transport_ib_ops, .impl = c};
  return 0;
}

static int ib_recv_complete(struct gcoll_transport *t, struct gcoll_conn *gc,
                            uint64_t deadline_ms, char *err, size_t errlen) {
  (void)t;
  struct ib_conn *c = gc->impl;
  struct ib_state *s = c->s;
  struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                        .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  while (!c->matched && !c->setup_failed && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  int ok = c->matched;
  if (!ok && c->setup_failed)
    snprintf(err, errlen, "net/ib connection %u from rank %d: %s", c->conn_id, c->peer,
             c->setup_err);
  else if (!ok)
    snprintf(err, errlen, "rank %d did not connect (net/ib connection %u) before the deadline",
             c->peer, c->conn_id);
  pthread_mutex_unlock(&s->lock);
  return ok ? 0 : -1;
}

/* Writes what the executor published before the close, bounded. The CQ is
 * polled here (the entry is no longer the proxy's), so waits are short
 * sleeps on the side channel. */
static void flush(struct ib_conn *c, uint64_t deadline_ms) {
  _Atomic int *abort_word = c->s->t->cfg.abort_word;
  uint64_t target = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
  short revents = 0;
  while (c->state == CONN_OPEN && c->completed < target && atomic_load(abort_word) == 0) {
    send_progress(&c->entry, revents);
    if (c->state != CONN_OPEN || c->completed >= target || gcoll_tcp_remaining_ms(deadline_ms) == 0) break;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    revents = poll(&p, 1, 1) > 0 ? p.revents : 0;
  }
}

/* A last header (goodbye or blame), then an orderly shutdown. */
static void last_word_and_close(struct ib_conn *c, uint64_t step, uint32_t proto) {
  unsigned char h[GCOLL_IB_HDR_BYTES];
  gcoll_ib_hdr_encode(h, step, 0, proto);
  gcoll_tcp_last_word_and_close(c->fd, h, sizeof(h));
  c->fd = -1;
}

static void ib_conn_close(struct gcoll_transport *t, struct gcoll_conn *gc) {
  struct ib_conn *c = gc->impl;
  if (c == NULL) return;
  struct ib_state *s = c->s;
  gcoll_proxy_remove(t->cfg.proxy, &c->entry);
  if (!c->is_send) {
    pthread_mutex_lock(&s->lock);
    for (struct ib_conn **p = &s->recv_conns; *p != NULL; p = &(*p)->next_recv)
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
    /* As net/socket: a communicator in error says whom it blames instead
     * of goodbye, so the peer fails now rather than at its deadline. */
    int in_error = atomic_load(t->cfg.abort_word) != 0;
    if (c->state == CONN_FAILED)
      close(c->fd);
    else if (in_error)
      last_word_and_close(c, (uint64_t)gcoll_transport_blame(&t->cfg), GCOLL_IB_PROTO_BLAME);
    else
      last_word_and_close(c, c->is_send ? c->completed : c->recvd, GCOLL_IB_PROTO_GOODBYE);
  }
  conn_free(c);
  gc->impl = NULL;
  gc->fifo = NULL;
}

const struct gcoll_transport_ops gcoll_transport_ib_ops = {
    .name = "net/ib",
    .init = ib_init,
    .recv_setup = ib_recv_setup,
    .send_connect = ib_send_connect,
    .recv_complete = ib_recv_complete,
    .conn_close = ib_conn_close,
    .fini = ib_fini,
};
