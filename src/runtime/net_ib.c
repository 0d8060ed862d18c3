/* net/ib: the verbs device of the generic net transport (net.h): steps
 * travel as RDMA writes with immediate over RC queue pairs.
 *
 * Both ends' FIFOs are registered memory regions. Each sent step is one
 * RDMA write with immediate straight into SIMPLE slot s % GCOLL_STEPS of the
 * receiver's FIFO (net_steps.c has decoded an LL step into the sender's own
 * SIMPLE slot). The immediate carries nbytes, the protocol and the step
 * modulo 16 (net_ib_addr.h). A step is sent when its write completed.
 *
 * Flow control: the sender writes step s only when the receiver's head
 * (credit) + GCOLL_STEPS > s, so a write never lands in a slot the consumer
 * still reads. A posted receive (irecv) is a slot the executor freed; the
 * device returns it with a zero-byte send-with-immediate carrying the low
 * 32 bits of the head, at most one in flight (each carries the newest head
 * anyway). The receive work requests that writes with immediate consume
 * are posted when the QP is created and reposted as their completions are
 * taken, so the sender, which may use a slot only after its credit, never
 * meets a receiver that is not ready.
 *
 * The RC pair is connected through the generic hello: the receiver's QP
 * goes in its address, the sender's in its hello, and the receiver brings
 * its QP to RTS (accept) before it answers "accepted"; only then does the
 * sender write. The hello connection stays open for goodbye/blame, and its
 * EOF is how a dead process is noticed at once (RDMA alone notices only on
 * the next write, after the retry timeout).
 *
 * Wake-ups: every CQ reports to the device's completion channel, whose fd
 * is one proxy entry; a connection re-arms its CQ before it polls it, so no
 * completion goes unnoticed while the proxy sleeps. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/net.h"
#include "runtime/net_ib_addr.h"
#include "runtime/net_ib_verbs.h"

#define CREDIT_RECVS 4           /* sender's receives posted for credits */
#define SEND_WR (GCOLL_STEPS + 2)
#define RECV_WR (GCOLL_STEPS + 2)
#define WR_CREDIT UINT64_MAX     /* wr_id of a credit send */

_Static_assert(GCOLL_IB_ADDR_BYTES <= GCOLL_NET_DEV_ADDR_MAX, "net/ib address fits");
_Static_assert(GCOLL_IB_HELLO_BYTES <= GCOLL_NET_DEV_HELLO_MAX, "net/ib hello fits");

struct ib_state {
  struct gcoll_net *n;
  struct gcoll_ib_dev dev;
  struct gcoll_proxy_entry channel_entry;
  int channel_registered;
};

struct ib_conn {
  struct gcoll_net_conn *c;
  struct ibv_mr *mr;
  struct gcoll_ib_qp qp;
  _Atomic int cq_armed;           /* cleared by the channel entry on an event */
  /* Sender: the receiver's head, and where its slots are. */
  uint64_t credit, remote_slots;
  uint32_t rkey;
  /* Receiver: the head the sender knows (or will, when the credit in
   * flight lands) and the newest head to tell it. */
  uint64_t head_sent, free_head;
  int credit_inflight;
};

static struct ib_state *state_of(const struct gcoll_net_conn *c) { return c->n->dev_state; }
static struct ib_conn *ib_of(struct gcoll_net_conn *c) { return c->dev_conn; }

/* ---- the device ---------------------------------------------------------------- */

static int channel_progress(struct gcoll_proxy_entry *e, short revents) {
  struct ib_state *s = (struct ib_state *)((char *)e - offsetof(struct ib_state, channel_entry));
  int moved = 0;
  e->events = POLLIN;
  e->busy = 0;
  /* An unread event keeps the fd readable, so the next poll reports it:
   * no read (a system call) in rounds that saw nothing. */
  if (!(revents & POLLIN)) return 0;
  pthread_mutex_lock(&s->n->lock);
  for (;;) {
    struct ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(s->dev.channel, &cq, &ctx) != 0) break;
    ibv_ack_cq_events(cq, 1);
    atomic_store(&((struct ib_conn *)ctx)->cq_armed, 0);
    moved = 1;
  }
  pthread_mutex_unlock(&s->n->lock);
  return moved;
}

static void ib_close(struct gcoll_net *n) {
  struct ib_state *s = n->dev_state;
  if (s->channel_registered) gcoll_proxy_remove(n->t->cfg.proxy, &s->channel_entry);
  gcoll_ib_dev_close(&s->dev);
  free(s);
  n->dev_state = NULL;
}

static int ib_open(struct gcoll_net *n, char *err, size_t errlen) {
  struct ib_state *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  s->n = n;
  if (gcoll_ib_dev_open(&s->dev, err, errlen) != 0) {
    free(s);
    return -1;
  }
  n->dev_state = s;
  s->channel_entry.fd = s->dev.channel->fd;
  s->channel_entry.events = POLLIN;
  s->channel_entry.progress = channel_progress;
  if (gcoll_proxy_add(n->t->cfg.proxy, &s->channel_entry, err, errlen) != 0) {
    ib_close(n);
    return -1;
  }
  s->channel_registered = 1;
  return 0;
}

/* ---- connections ---------------------------------------------------------------- */

static int post_recv(struct ib_conn *q) {
  struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
  return ibv_post_recv(q->qp.qp, &wr, &bad) == 0 ? 0 : -1;
}

static void ib_conn_free(struct gcoll_net_conn *c) {
  struct ib_conn *q = ib_of(c);
  /* Under the lock: the channel entry must not take an event of this CQ
   * while it is destroyed. The QP goes first, so nothing writes into the
   * FIFO once its region is gone. */
  pthread_mutex_lock(&c->n->lock);
  gcoll_ib_qp_destroy(&q->qp);
  pthread_mutex_unlock(&c->n->lock);
  if (q->mr != NULL) ibv_dereg_mr(q->mr);
  q->mr = NULL;
}

/* The FIFO's memory region, CQ and QP (in INIT, receives posted). */
static int conn_open(struct gcoll_net_conn *c, char *err, size_t errlen) {
  struct ib_state *s = state_of(c);
  struct ib_conn *q = ib_of(c);
  q->c = c;
  atomic_init(&q->cq_armed, 0);
  int access = IBV_ACCESS_LOCAL_WRITE | (c->is_send ? 0 : IBV_ACCESS_REMOTE_WRITE);
  q->mr = ibv_reg_mr(s->dev.pd, c->fifo, c->fifo_map, access);
  if (q->mr == NULL) {
    snprintf(err, errlen, "%s: ibv_reg_mr of a %zu-byte FIFO: %s", s->dev.name, c->fifo_map,
             strerror(errno));
    return -1;
  }
  if (gcoll_ib_qp_create(&s->dev, q, SEND_WR, RECV_WR, &q->qp, err, errlen) != 0) return -1;
  int recvs = c->is_send ? CREDIT_RECVS : GCOLL_STEPS;
  for (int i = 0; i < recvs; i++)
    if (post_recv(q) != 0) {
      snprintf(err, errlen, "%s: ibv_post_recv failed", s->dev.name);
      return -1;
    }
  return 0;
}

static int ib_listen(struct gcoll_net_conn *c, unsigned char *addr, char *err, size_t errlen) {
  if (conn_open(c, err, errlen) != 0) return -1;
  struct ib_conn *q = ib_of(c);
  struct gcoll_ib_addr a = {
      .qp = q->qp.info,
      .slots_addr = (uintptr_t)gcoll_fifo_simple_slot(c->fifo, 0),
      .rkey = q->mr->rkey,
      .slot_bytes = (uint32_t)c->fifo->slot_bytes,
  };
  gcoll_ib_addr_encode(&a, addr);
  return 0;
}

static int ib_connect(struct gcoll_net_conn *c, const unsigned char *addr, unsigned char *hello,
                      uint64_t deadline_ms, char *err, size_t errlen) {
  (void)deadline_ms; /* connecting a QP does not wait for the peer */
  struct gcoll_ib_addr a;
  if (gcoll_ib_addr_decode(addr, c->n->t->cfg.slot_bytes, &a, err, errlen) != 0 ||
      conn_open(c, err, errlen) != 0)
    return -1;
  struct ib_conn *q = ib_of(c);
  q->remote_slots = a.slots_addr;
  q->rkey = a.rkey;
  if (gcoll_ib_qp_connect(&state_of(c)->dev, &q->qp, &a.qp, err, errlen) != 0) return -1;
  gcoll_ib_hello_encode(&q->qp.info, hello);
  return 0;
}

static int ib_accept(struct gcoll_net_conn *c, const unsigned char *hello, char *err,
                     size_t errlen) {
  struct gcoll_ib_qp_info remote;
  if (gcoll_ib_hello_decode(hello, &remote) != 0) {
    snprintf(err, errlen, "rank %d's hello names no valid queue pair", c->peer);
    return -1;
  }
  return gcoll_ib_qp_connect(&state_of(c)->dev, &ib_of(c)->qp, &remote, err, errlen) == 0 ? 0 : -1;
}

/* ---- steps -------------------------------------------------------------------- */

static int ib_isend(struct gcoll_net_conn *c, uint64_t step, const void *data, uint32_t nbytes,
                    uint32_t proto) {
  struct ib_conn *q = ib_of(c);
  if (step >= q->credit + GCOLL_STEPS) return 0;
  struct ibv_sge sge = {.addr = (uintptr_t)data, .length = nbytes, .lkey = q->mr->lkey};
  struct ibv_send_wr wr = {
      .wr_id = step,
      .sg_list = nbytes > 0 ? &sge : NULL,
      .num_sge = nbytes > 0 ? 1 : 0,
      .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
      .send_flags = IBV_SEND_SIGNALED,
      .imm_data = htonl(gcoll_ib_imm_encode(step, nbytes, proto == GCOLL_PROTO_LL)),
      .wr = {.rdma = {.remote_addr = gcoll_ib_slot_addr(q->remote_slots, c->fifo->slot_bytes, step),
                      .rkey = q->rkey}},
  };
  struct ibv_send_wr *bad;
  return ibv_post_send(q->qp.qp, &wr, &bad) == 0 ? 1 : -1;
}

static int ib_irecv(struct gcoll_net_conn *c, uint64_t step, void *buf, size_t max) {
  (void)buf;
  (void)max; /* the sender writes into the slot the address named */
  /* The head that frees this slot; the first GCOLL_STEPS are free from the start. */
  ib_of(c)->free_head = step + 1 >= GCOLL_STEPS ? step + 1 - GCOLL_STEPS : 0;
  return 1;
}

/* Returns freed slots to the sender, one credit in flight at a time. */
static int send_credit(struct gcoll_net_conn *c) {
  struct ib_conn *q = ib_of(c);
  if (q->credit_inflight || q->free_head <= q->head_sent) return 0;
  struct ibv_send_wr wr = {.wr_id = WR_CREDIT,
                           .num_sge = 0,
                           .opcode = IBV_WR_SEND_WITH_IMM,
                           .send_flags = IBV_SEND_SIGNALED,
                           .imm_data = htonl((uint32_t)q->free_head)},
                     *bad;
  if (ibv_post_send(q->qp.qp, &wr, &bad) != 0) {
    gcoll_net_conn_failed(c);
    return 1;
  }
  q->head_sent = q->free_head;
  q->credit_inflight = 1;
  return 1;
}

/* One completion; -1 when the connection is broken. */
static int take_completion(struct gcoll_net_conn *c, const struct ibv_wc *wc) {
  struct ib_conn *q = ib_of(c);
  if (wc->status != IBV_WC_SUCCESS) return -1;
  switch (wc->opcode) {
    case IBV_WC_RDMA_WRITE: /* sender: step `done` is placed remotely */
      if (!c->is_send || wc->wr_id != c->done || c->done >= c->posted) return -1;
      gcoll_net_send_done(c, c->done);
      return 0;
    case IBV_WC_RECV: { /* sender: a credit */
      uint64_t head;
      if (!c->is_send || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
          gcoll_ib_credit_decode(ntohl(wc->imm_data), q->credit, c->posted, &head) != 0)
        return -1;
      q->credit = head;
      return post_recv(q);
    }
    case IBV_WC_RECV_RDMA_WITH_IMM: { /* receiver: step `done` landed in its SIMPLE slot */
      uint32_t nb;
      int is_ll;
      uint32_t imm = ntohl(wc->imm_data);
      if (c->is_send || c->done >= c->posted ||
          gcoll_ib_imm_decode(imm, c->done, c->fifo->slot_bytes, &nb, &is_ll) != 0 ||
          gcoll_net_recv_done(c, c->done, nb, is_ll ? GCOLL_PROTO_LL : GCOLL_PROTO_SIMPLE) != 0)
        return -1;
      return post_recv(q);
    }
    case IBV_WC_SEND: /* receiver: the credit landed */
      if (c->is_send) return -1;
      q->credit_inflight = 0;
      return 0;
    default:
      return -1;
  }
}

/* Re-arms the CQ before polling it: a completion after the poll then
 * raises an event on the channel. */
static void arm_cq(struct ib_conn *q) {
  if (atomic_load_explicit(&q->cq_armed, memory_order_acquire)) return;
  if (ibv_req_notify_cq(q->qp.cq, 0) == 0) atomic_store(&q->cq_armed, 1);
}

/* Drains the CQ, then returns credits. Marks the peer failed on an error
 * while open (after a clean close the peer's QP is gone, and only our
 * leftover credit can fail: not a failure). */
static int ib_test(struct gcoll_net_conn *c, short revents) {
  (void)revents; /* completions come through the channel entry */
  struct ib_conn *q = ib_of(c);
  struct ibv_wc wc[16];
  int moved = 0;
  arm_cq(q);
  for (;;) {
    int got = ibv_poll_cq(q->qp.cq, 16, wc);
    if (got <= 0) {
      if (got < 0 && c->state == GCOLL_NET_OPEN) gcoll_net_conn_failed(c);
      break;
    }
    moved = 1;
    for (int i = 0; i < got; i++) {
      if (c->state == GCOLL_NET_FAILED) continue;
      if (take_completion(c, &wc[i]) != 0 && c->state == GCOLL_NET_OPEN) gcoll_net_conn_failed(c);
    }
  }
  if (!c->is_send && c->state == GCOLL_NET_OPEN) moved |= send_credit(c);
  /* A head not yet returned: nothing but polling notices when the credit
   * in flight lands. */
  c->dev_busy = !c->is_send && c->state == GCOLL_NET_OPEN && q->head_sent < q->free_head;
  return moved;
}

static const struct gcoll_net_dev ib_dev = {
    .name = "net/ib",
    .hello_purpose = "gcoll net/ib hello v3",
    .addr_bytes = GCOLL_IB_ADDR_BYTES,
    .hello_bytes = GCOLL_IB_HELLO_BYTES,
    .conn_bytes = sizeof(struct ib_conn),
    .eager_credits = 1,
    .open = ib_open,
    .close = ib_close,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .conn_free = ib_conn_free,
};

GCOLL_NET_TRANSPORT(gcoll_transport_ib_ops, "net/ib", &ib_dev);
