/* gcollSend/gcollRecv: point-to-point messages over connections made on
 * first use.
 *
 * Connections. The plan names only ring and tree edges, so a connection to
 * any other peer is made when it is first needed, one per ordered pair and
 * direction, through the same transports and bootstrap keys as the plan's
 * edges (comm_connect.c), under id GCOLL_CONN_ID_P2P. The receiver creates
 * its end and publishes the address as soon as its first receive from that
 * peer is posted; the sender polls the bootstrap for that address without
 * blocking, so a rank waiting for an address keeps moving its other
 * operations (the peer may be waiting for one of them before it posts the
 * receive). Data can only arrive once the sender attached, so the receiver
 * needs no separate wait for it. Connections live until gcollCommDestroy.
 *
 * Messages. Each message is a 64-byte header {magic, sender, sequence
 * number, byte count} followed by the data, cut into SIMPLE FIFO steps of at
 * most the slot size (the header shares the first step). Messages on one
 * connection follow each other in call order, which is NCCL's matching
 * rule: the k-th send to a peer meets that peer's k-th receive from us. The
 * receiver compares the announced byte count with its own; on a mismatch it
 * still consumes the whole message (so the next one matches correctly) and
 * fails with gcollInvalidUsage. A zero-byte message is a header alone, so
 * zero-count calls match one to one like any other.
 *
 * Progress. One loop advances every operation as far as its FIFO allows,
 * without blocking, and backs off with the executor's rule (wait.h) when a
 * round moved nothing. Its deadline is GCOLL_TIMEOUT without progress. It
 * polls every communicator's abort word, so gcollCommAbort from another
 * thread and a dead peer (the transports set the word) end it. A send is
 * complete when its last step is in the FIFO: the buffer is free again, and
 * a message that fits the connection's free slots does not wait for the
 * receiver. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce.h"
#include "kernels/wait.h"
#include "runtime/comm.h"
#include "runtime/comm_p2p.h"
#include "runtime/proxy.h"

#define P2P_MAGIC 0x50325047u /* "GP2P" */
#define P2P_HEADER_BYTES 64u
/* The sender looks for a missing address at growing intervals up to this,
 * so a receive posted late costs at most this much latency once. */
#define P2P_ADDR_POLL_MAX_MS 32u

struct p2p_header {
  uint32_t magic;
  int32_t sender;
  uint64_t seq;
  uint64_t bytes;
  unsigned char reserved[P2P_HEADER_BYTES - 24];
};
_Static_assert(sizeof(struct p2p_header) == P2P_HEADER_BYTES, "p2p header size");

enum conn_state { CONN_NONE = 0, CONN_WAIT_ADDR, CONN_READY };

struct p2p_conn {
  struct gcoll_conn c;
  enum conn_state state;
  int completed;            /* receiver: recv_complete done */
  uint64_t seq;             /* messages completed on this connection */
  uint64_t next_poll_ms;    /* sender waiting for the address: next look */
  uint32_t poll_gap_ms;
  char why[384];            /* sender: why the address is still missing */
};

struct gcoll_p2p {
  struct p2p_conn *send, *recv; /* per peer rank */
};

/* Where one operation stands during a run. */
struct op_run {
  const struct gcoll_p2p_op *op;
  struct p2p_conn *pc;      /* NULL for self operations */
  int after;                /* earlier operation on the same connection, -1 */
  int done;
  uint64_t off;             /* header and data bytes moved */
  uint64_t total;           /* receiver: known once the header arrived */
  int have_header;
  struct p2p_header hdr;
  gcollResult_t mismatch;   /* receiver: a size mismatch, reported at the end */
  char why[384];
};

static struct p2p_conn *conn_of(struct gcollComm *comm, const struct gcoll_p2p_op *op) {
  return op->is_send ? &comm->p2p->send[op->peer] : &comm->p2p->recv[op->peer];
}

static gcollResult_t p2p_alloc(struct gcollComm *comm) {
  if (comm->p2p != NULL) return gcollSuccess;
  struct gcoll_p2p *p = calloc(1, sizeof(*p));
  if (p != NULL) {
    p->send = calloc((size_t)comm->nranks, sizeof(*p->send));
    p->recv = calloc((size_t)comm->nranks, sizeof(*p->recv));
  }
  if (p == NULL || p->send == NULL || p->recv == NULL) {
    if (p != NULL) free(p->send), free(p->recv);
    free(p);
    return gcoll_fail(gcollSystemError, "out of memory for send/recv connections");
  }
  comm->p2p = p;
  return gcollSuccess;
}

void gcoll_p2p_free(struct gcollComm *comm) {
  struct gcoll_p2p *p = comm->p2p;
  if (p == NULL) return;
  for (int r = 0; r < comm->nranks; r++) {
    if (p->send[r].state == CONN_READY) gcoll_comm_conn_close(comm, &p->send[r].c);
    if (p->recv[r].state == CONN_READY) gcoll_comm_conn_close(comm, &p->recv[r].c);
  }
  free(p->send);
  free(p->recv);
  free(p);
  comm->p2p = NULL;
}

/* ---- connections ----------------------------------------------------------- */

/* Receive ends are made at once (nothing to wait for); send ends start
 * looking for the receiver's address. */
static gcollResult_t prepare_conn(struct gcollComm *comm, const struct gcoll_p2p_op *op,
                                  struct p2p_conn *pc) {
  if (pc->state != CONN_NONE) return gcollSuccess;
  if (op->is_send) {
    pc->state = CONN_WAIT_ADDR;
    pc->next_poll_ms = 0;
    pc->poll_gap_ms = 1;
    snprintf(pc->why, sizeof(pc->why), "rank %d has not posted a gcollRecv from rank %d",
             op->peer, comm->rank);
    return gcollSuccess;
  }
  gcollResult_t rc;
  int k = gcoll_comm_transport_for_peer(comm, op->peer, &rc);
  if (k < 0) return rc;
  rc = gcoll_comm_conn_recv_setup(comm, op->peer, GCOLL_CONN_ID_P2P, k, &pc->c);
  if (rc != gcollSuccess) return rc;
  pc->state = CONN_READY;
  gcoll_log_info(comm, "send/recv: receive from rank %d over %s", op->peer, pc->c.ops->name);
  return gcollSuccess;
}

/* One look for the receiver's address; attaches when it is there. */
static gcollResult_t try_attach(struct gcollComm *comm, int peer, struct p2p_conn *pc,
                                uint64_t deadline_ms, int *moved) {
  uint64_t now = gcoll_bootstrap_now_ms();
  if (now < pc->next_poll_ms) return gcollSuccess;
  char key[96], err[512];
  unsigned char value[1 + GCOLL_CONN_ADDR_MAX];
  size_t len = 0;
  gcoll_comm_conn_key(key, sizeof(key), comm->rank, peer, GCOLL_CONN_ID_P2P);
  /* A deadline of now: the store answers at once whether the key is there. */
  if (gcoll_bootstrap_get(comm->bs, key, value, sizeof(value), &len, now, err, sizeof(err)) != 0) {
    snprintf(pc->why, sizeof(pc->why), "rank %d has not posted a gcollRecv from rank %d: its "
             "address '%s' is not in the bootstrap store (last answer: %.160s)", peer, comm->rank,
             key, err);
    pc->next_poll_ms = now + pc->poll_gap_ms;
    if (pc->poll_gap_ms < P2P_ADDR_POLL_MAX_MS) pc->poll_gap_ms *= 2;
    return gcollSuccess;
  }
  gcollResult_t rc = gcoll_comm_conn_attach(comm, peer, GCOLL_CONN_ID_P2P, value, len, &pc->c,
                                            deadline_ms);
  if (rc != gcollSuccess) return rc;
  pc->state = CONN_READY;
  *moved = 1;
  gcoll_log_info(comm, "send/recv: send to rank %d over %s", peer, pc->c.ops->name);
  return gcollSuccess;
}

/* ---- moving messages -------------------------------------------------------- */

/* Bytes [off, off+n) of the stream header || data into dst. */
static void stream_out(char *dst, uint64_t off, size_t n, const struct p2p_header *h,
                       const char *data) {
  if (off < P2P_HEADER_BYTES) {
    size_t k = P2P_HEADER_BYTES - off < n ? P2P_HEADER_BYTES - off : n;
    memcpy(dst, (const char *)h + off, k);
    dst += k, off += k, n -= k;
  }
  if (n > 0) memcpy(dst, data + (off - P2P_HEADER_BYTES), n);
}

static int send_steps(struct gcollComm *comm, struct op_run *r) {
  struct gcoll_fifo *f = r->pc->c.fifo;
  uint64_t total = P2P_HEADER_BYTES + r->op->bytes;
  if (r->off == 0)
    r->hdr = (struct p2p_header){.magic = P2P_MAGIC, .sender = comm->rank, .seq = r->pc->seq,
                                 .bytes = r->op->bytes};
  int moved = 0;
  while (r->off < total) {
    uint64_t tail = atomic_load_explicit(&f->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&f->head, memory_order_acquire) >= GCOLL_STEPS) break;
    size_t n = total - r->off < f->slot_bytes ? (size_t)(total - r->off) : (size_t)f->slot_bytes;
    stream_out(gcoll_fifo_simple_slot(f, tail), r->off, n, &r->hdr, r->op->sendbuf);
    f->nbytes[gcoll_fifo_slot(tail)] = (uint32_t)n;
    f->proto[gcoll_fifo_slot(tail)] = GCOLL_PROTO_SIMPLE;
    atomic_store_explicit(&f->tail, tail + 1, memory_order_release);
    r->off += n;
    moved = 1;
  }
  if (r->off == total) {
    r->done = 1;
    r->pc->seq++;
  }
  return moved;
}

/* The header of a message: who, which and how big; a size other than the
 * receive's is a usage error found here, after which the message is still
 * consumed (into nowhere) so the connection stays in step. */
static gcollResult_t take_header(struct gcollComm *comm, struct op_run *r, const void *step) {
  const struct gcoll_p2p_op *op = r->op;
  memcpy(&r->hdr, step, sizeof(r->hdr));
  if (r->hdr.magic != P2P_MAGIC || r->hdr.sender != op->peer || r->hdr.seq != r->pc->seq ||
      r->hdr.bytes > UINT64_MAX - P2P_HEADER_BYTES)
    return gcoll_fail(gcollInternalError,
                      "gcollRecv from rank %d: message %llu has a bad header (magic %08x, "
                      "sender %d, number %llu)", op->peer, (unsigned long long)r->pc->seq,
                      r->hdr.magic, r->hdr.sender, (unsigned long long)r->hdr.seq);
  r->have_header = 1;
  r->total = P2P_HEADER_BYTES + r->hdr.bytes;
  if (r->hdr.bytes != op->bytes) {
    r->mismatch = gcollInvalidUsage;
    snprintf(r->why, sizeof(r->why),
             "a receive of %zu bytes from rank %d on rank %d met a send of %llu bytes "
             "(message %llu between them): counts and types must agree", op->bytes, op->peer,
             comm->rank, (unsigned long long)r->hdr.bytes, (unsigned long long)r->hdr.seq);
  }
  return gcollSuccess;
}

static gcollResult_t recv_steps(struct gcollComm *comm, struct op_run *r, int *moved) {
  struct gcoll_fifo *f = r->pc->c.fifo;
  while (!r->have_header || r->off < r->total) {
    uint64_t head = atomic_load_explicit(&f->head, memory_order_relaxed);
    if (atomic_load_explicit(&f->tail, memory_order_acquire) <= head) break;
    if (!r->pc->completed) {
      gcollResult_t rc = gcoll_comm_conn_recv_complete(comm, &r->pc->c, gcoll_bootstrap_now_ms());
      if (rc != gcollSuccess) return rc;
      r->pc->completed = 1;
    }
    unsigned slot = gcoll_fifo_slot(head);
    size_t n = f->nbytes[slot];
    const char *data = gcoll_fifo_simple_slot(f, head);
    if (f->proto[slot] != GCOLL_PROTO_SIMPLE || n == 0 || n > f->slot_bytes ||
        (!r->have_header && n < P2P_HEADER_BYTES) || (r->have_header && n > r->total - r->off))
      return gcoll_fail(gcollInternalError, "gcollRecv from rank %d: malformed step %llu "
                        "(%zu bytes, protocol %u)", r->op->peer, (unsigned long long)head, n,
                        f->proto[slot]);
    if (!r->have_header) {
      gcollResult_t rc = take_header(comm, r, data);
      if (rc != gcollSuccess) return rc;
      if (n > r->total) return gcoll_fail(gcollInternalError, "gcollRecv from rank %d: step "
                                          "%llu is longer than its message", r->op->peer,
                                          (unsigned long long)head);
    }
    if (r->mismatch == gcollSuccess) {
      uint64_t off = r->off;
      size_t k = n;
      if (off < P2P_HEADER_BYTES) {
        k -= P2P_HEADER_BYTES - off;
        data += P2P_HEADER_BYTES - off;
        off = P2P_HEADER_BYTES;
      }
      if (k > 0) memcpy((char *)r->op->recvbuf + (off - P2P_HEADER_BYTES), data, k);
    }
    atomic_store_explicit(&f->head, head + 1, memory_order_release);
    r->off += n;
    *moved = 1;
  }
  if (r->have_header && r->off == r->total) {
    r->done = 1;
    r->pc->seq++;
  }
  return gcollSuccess;
}

/* ---- one run ---------------------------------------------------------------- */

/* Sends and receives to self are copies, paired in call order. */
static gcollResult_t run_self(struct op_run *runs, int n) {
  for (int i = 0; i < n; i++) {
    const struct gcoll_p2p_op *s = runs[i].op;
    if (!s->is_send || s->peer != s->comm->rank || runs[i].done) continue;
    int j = 0;
    for (; j < n; j++) {
      const struct gcoll_p2p_op *q = runs[j].op;
      if (!q->is_send && q->comm == s->comm && q->peer == q->comm->rank && !runs[j].done) break;
    }
    if (j == n)
      return gcoll_fail(gcollInvalidUsage, "gcollSend to self (rank %d) has no matching gcollRecv "
                        "from self: both must be in one gcollGroupStart/gcollGroupEnd", s->peer);
    const struct gcoll_p2p_op *q = runs[j].op;
    if (q->bytes != s->bytes)
      return gcoll_fail(gcollInvalidUsage, "gcollRecv of %zu bytes from self (rank %d) met a "
                        "gcollSend of %zu bytes: counts and types must agree", q->bytes, q->peer,
                        s->bytes);
    if (s->bytes > 0) memmove(q->recvbuf, s->sendbuf, s->bytes);
    runs[i].done = runs[j].done = 1;
  }
  for (int j = 0; j < n; j++)
    if (!runs[j].done && runs[j].pc == NULL)
      return gcoll_fail(gcollInvalidUsage, "gcollRecv from self (rank %d) has no matching "
                        "gcollSend to self: both must be in one gcollGroupStart/gcollGroupEnd",
                        runs[j].op->peer);
  return gcollSuccess;
}

/* The operation a failed run blames: the first one still pending. */
static void describe_pending(const struct op_run *r, char *buf, size_t len) {
  const struct gcoll_p2p_op *op = r->op;
  if (op->is_send && r->pc->state != CONN_READY)
    snprintf(buf, len, "gcollSend to rank %d: %s", op->peer, r->pc->why);
  else if (op->is_send)
    snprintf(buf, len, "gcollSend of %zu bytes to rank %d: rank %d took %llu of %llu bytes",
             op->bytes, op->peer, op->peer, (unsigned long long)r->off,
             (unsigned long long)(P2P_HEADER_BYTES + op->bytes));
  else
    snprintf(buf, len, "gcollRecv of %zu bytes from rank %d: got %llu bytes (header included)",
             op->bytes, op->peer, (unsigned long long)r->off);
}

/* Advances every runnable operation once. *moved: something changed. */
static gcollResult_t progress_round(struct op_run *runs, int n, uint64_t deadline_ms, int *moved,
                                    int *pending) {
  *pending = 0;
  for (int i = 0; i < n; i++) {
    struct op_run *r = &runs[i];
    if (r->done) continue;
    (*pending)++;
    if (r->after >= 0 && !runs[r->after].done) continue;
    struct gcollComm *comm = r->op->comm;
    gcollResult_t rc = gcollSuccess;
    if (r->op->is_send && r->pc->state == CONN_WAIT_ADDR)
      rc = try_attach(comm, r->op->peer, r->pc, deadline_ms, moved);
    if (rc == gcollSuccess && r->pc->state == CONN_READY) {
      if (r->op->is_send) *moved |= send_steps(comm, r);
      else rc = recv_steps(comm, r, moved);
    }
    if (rc != gcollSuccess) return rc;
    if (r->done) (*pending)--;
  }
  return gcollSuccess;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
  return x < y ? -1 : x > y;
}

/* The distinct communicators of a run, in address order (the order their
 * busy locks are taken in). */
static int distinct_comms(const struct gcoll_p2p_op *ops, int n, struct gcollComm **out) {
  for (int i = 0; i < n; i++) out[i] = ops[i].comm;
  qsort(out, (size_t)n, sizeof(*out), cmp_ptr);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (m == 0 || out[m - 1] != out[i]) out[m++] = out[i];
  return m;
}

static void wake_proxies(struct gcollComm **comms, int ncomms) {
  for (int i = 0; i < ncomms; i++)
    if (comms[i]->has_net) gcoll_proxy_wake(comms[i]->proxy);
}

static gcollResult_t prepare(struct op_run *runs, const struct gcoll_p2p_op *ops, int n) {
  for (int i = 0; i < n; i++) {
    struct op_run *r = &runs[i];
    r->op = &ops[i];
    r->after = -1;
    struct gcollComm *comm = ops[i].comm;
    if (ops[i].peer == comm->rank) continue;
    gcollResult_t rc = p2p_alloc(comm);
    if (rc != gcollSuccess) return rc;
    r->pc = conn_of(comm, &ops[i]);
    for (int j = i - 1; j >= 0 && r->after < 0; j--)
      if (runs[j].pc == r->pc) r->after = j;
    if ((rc = prepare_conn(comm, &ops[i], r->pc)) != gcollSuccess) return rc;
  }
  return run_self(runs, n);
}

static gcollResult_t run_locked(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                                struct gcollComm **comms, int ncomms, const char *what) {
  gcollResult_t rc = prepare(runs, ops, n);
  if (rc != gcollSuccess) return rc;
  uint64_t timeout_ms = 0;
  for (int i = 0; i < ncomms; i++)
    if (comms[i]->timeout_ms > timeout_ms) timeout_ms = comms[i]->timeout_ms;
  uint64_t timeout_ns = timeout_ms > UINT64_MAX / 1000000u ? UINT64_MAX : timeout_ms * 1000000u;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, timeout_ns);
  wake_proxies(comms, ncomms);
  struct gcollComm *failed_comm = comms[0];
  for (;;) {
    int moved = 0, pending = 0;
    uint64_t deadline_ms = gcoll_bootstrap_now_ms() + timeout_ms;
    rc = progress_round(runs, n, deadline_ms, &moved, &pending);
    if (rc != gcollSuccess) return rc;
    if (pending == 0) break;
    for (int i = 0; i < ncomms && rc == gcollSuccess; i++)
      if ((rc = (gcollResult_t)atomic_load(&comms[i]->abort_word)) != gcollSuccess)
        failed_comm = comms[i];
    if (rc == gcollSuccess && moved) {
      /* Progress restarts the clock: GCOLL_TIMEOUT bounds a stall, not a
       * large message. A proxy that fell asleep must see the new steps. */
      gcoll_wait_init(&w, NULL, NULL, timeout_ns);
      wake_proxies(comms, ncomms);
      continue;
    }
    if (rc == gcollSuccess) rc = gcoll_wait_round(&w);
    if (rc != gcollSuccess) {
      char why[512] = "";
      for (int i = 0; i < n; i++)
        if (!runs[i].done) {
          describe_pending(&runs[i], why, sizeof(why));
          if (rc == gcollSystemError) failed_comm = runs[i].op->comm;
          break;
        }
      return gcoll_comm_explain(failed_comm, what, rc, why);
    }
  }
  for (int i = 0; i < n; i++)
    if (runs[i].mismatch != gcollSuccess)
      return gcoll_fail(runs[i].mismatch, "%s: %s", what, runs[i].why);
  return gcollSuccess;
}

gcollResult_t gcoll_p2p_run(const struct gcoll_p2p_op *ops, int n, const char *what) {
  struct op_run *runs = calloc((size_t)n, sizeof(*runs));
  struct gcollComm **comms = calloc((size_t)n, sizeof(*comms));
  if (runs == NULL || comms == NULL) {
    free(runs);
    free(comms);
    return gcoll_fail(gcollSystemError, "%s: out of memory for %d operations", what, n);
  }
  int ncomms = distinct_comms(ops, n, comms);
  /* Held until the result is formed: an abort from another thread frees
   * a communicator as soon as it gets the lock. */
  for (int i = 0; i < ncomms; i++) pthread_mutex_lock(&comms[i]->busy);
  gcollResult_t rc = run_locked(runs, ops, n, comms, ncomms, what);
  for (int i = ncomms - 1; i >= 0; i--) pthread_mutex_unlock(&comms[i]->busy);
  free(runs);
  free(comms);
  return rc;
}

/* ---- the API ------------------------------------------------------------------ */

static gcollResult_t check_p2p(struct gcollComm *comm, const char *name, const void *buf,
                               size_t count, gcollDataType_t type, int peer, void *stream,
                               size_t *bytes) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", name);
  if (stream != NULL)
    return gcoll_fail(gcollInvalidUsage, "%s: stream must be NULL: send and receive run on host "
                                         "memory only in this version", name);
  /* The host copies would touch device memory (a fault on a GPU). */
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  int device = -1;
  if (cuda != NULL && buf != NULL && count > 0 && cuda->owns(buf, &device))
    return gcoll_fail(gcollInvalidUsage, "%s: the buffer is device memory (GPU %d): send and "
                                         "receive run on host memory only in this version",
                      name, device);
  size_t size = gcoll_dtype_size(type);
  if (size == 0)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not a gcollDataType_t", name,
                      (int)type);
  if (peer < 0 || peer >= comm->nranks)
    return gcoll_fail(gcollInvalidArgument, "%s: peer %d is not a rank (0..%d)", name, peer,
                      comm->nranks - 1);
  if (count > (SIZE_MAX - P2P_HEADER_BYTES) / size)
    return gcoll_fail(gcollInvalidArgument, "%s: count %zu overflows the buffer size", name, count);
  if (buf == NULL && count > 0)
    return gcoll_fail(gcollInvalidArgument, "%s: buffer is NULL with count %zu", name, count);
  int aborted = atomic_load(&comm->abort_word);
  if (aborted == gcollRemoteError)
    return gcoll_fail(gcollRemoteError, "%s: rank %d died or closed its connection earlier", name,
                      atomic_load(&comm->failed_peer));
  if (aborted != 0)
    return gcoll_fail((gcollResult_t)aborted, "%s: the communicator was aborted", name);
  *bytes = count * size;
  return gcollSuccess;
}

static gcollResult_t post(const struct gcoll_p2p_op *op, const char *name) {
  if (gcoll_group_depth() > 0) return gcoll_group_enqueue(op);
  return gcoll_p2p_run(op, 1, name);
}

gcollResult_t gcollSend(const void *sendbuff, size_t count, gcollDataType_t datatype, int peer,
                        gcollComm_t comm, void *stream) {
  size_t bytes = 0;
  gcollResult_t rc = check_p2p(comm, "gcollSend", sendbuff, count, datatype, peer, stream, &bytes);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  struct gcoll_p2p_op op = {.comm = comm, .is_send = 1, .peer = peer, .sendbuf = sendbuff,
                            .bytes = bytes};
  return post(&op, "gcollSend");
}

gcollResult_t gcollRecv(void *recvbuff, size_t count, gcollDataType_t datatype, int peer,
                        gcollComm_t comm, void *stream) {
  size_t bytes = 0;
  gcollResult_t rc = check_p2p(comm, "gcollRecv", recvbuff, count, datatype, peer, stream, &bytes);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  struct gcoll_p2p_op op = {.comm = comm, .is_send = 0, .peer = peer, .recvbuf = recvbuff,
                            .bytes = bytes};
  return post(&op, "gcollRecv");
}
