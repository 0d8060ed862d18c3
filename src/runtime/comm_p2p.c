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
 * receiver.
 *
 * Device buffers (builds with CUDA: memory the CUDA executor owns). A run
 * whose operations are all on device memory of their communicators' GPUs
 * goes to the GPU (gcoll_p2p_run_on_gpu): the connections are made on the host (a
 * send waits in the call for its receiver's address, NCCL's first-use
 * rule), each message is numbered, and one gcoll_cuda_p2p launch per
 * communicator is queued on its executor's stream after each caller
 * stream's earlier work; the call returns at once and failures show
 * through the executor (gcollCommGetAsyncError). The kernel writes the
 * same messages into the same FIFOs, so a device end meets a host end.
 * The host touches such connections again only after those launches are
 * done (gcoll_p2p_wait_gpu_runs).
 *
 * Any other run with device memory (host and device buffers mixed, or
 * GCOLL_P2P_KERNEL=0) is staged: the calling thread moves device buffers
 * through the same host FIFOs, so the wire format, the transports and the
 * peer are those of host buffers. Such an operation takes a stream (the
 * caller's CUstream, or NULL for the legacy default stream); a host buffer
 * with a stream is refused, as with collectives (a NULL buffer of count 0
 * touches nothing and goes with any stream, as NCCL programs pass it).
 * Before touching device memory a run (1) picks a context per
 * GPU: the caller's current one when it is on that GPU (its legacy stream
 * is what a NULL stream means), else the GPU's primary context, retained
 * for the run and made current on the calling thread; (2) waits for the
 * device collectives its communicators queued earlier (all of a
 * communicator's operations run in call order, whatever streams they name,
 * as with NCCL), and (3) synchronizes each distinct stream its device
 * operations name, so earlier work on the stream that produces a send
 * buffer, or still reads a receive buffer, is done. The progress loop then
 * copies with the driver's synchronous cuMemcpyDtoH (device send buffer
 * into a FIFO slot) and cuMemcpyHtoD (FIFO slot into a device receive
 * buffer) where a host operation uses memcpy; self send/recv between two
 * device buffers goes through a bounded host bounce buffer. At the end the
 * legacy stream of each GPU written to is synchronized (a copy from
 * pageable memory may return before its DMA is done) and the caller's
 * current context is current again. So a staged call BLOCKS until the data
 * is in place: work the caller queues on the stream afterwards sees the
 * received data, and the send buffer may be reused at once. Whether an
 * operation is on device memory is decided once per call, so host-buffer
 * operations copy exactly as before. A failed driver call fails the run
 * with gcollUnhandledCudaError and the driver's error text. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/p2p_wire.h"
#include "kernels/reduce.h"
#include "kernels/wait.h"
#include "runtime/comm.h"
#include "runtime/comm_p2p.h"
#include "runtime/comm_p2p_run.h"
#include "runtime/proxy.h"

/* The sender looks for a missing address at growing intervals up to this,
 * so a receive posted late costs at most this much latency once. */
#define P2P_ADDR_POLL_MAX_MS 32u



static struct p2p_conn *conn_of(struct gcollComm *comm, const struct gcoll_p2p_op *op) {
  return op->is_send ? &comm->p2p->send[op->peer] : &comm->p2p->recv[op->peer];
}

gcollResult_t gcoll_p2p_alloc(struct gcollComm *comm) {
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
gcollResult_t gcoll_p2p_try_attach(struct gcollComm *comm, int peer, struct p2p_conn *pc,
                                uint64_t deadline_ms, int *moved) {
  uint64_t now = gcoll_bootstrap_now_ms();
  if (now < pc->next_poll_ms) return gcollSuccess;
  char key[96], err[512];
  unsigned char value[1 + GCOLL_CONN_ADDR_MAX];
  size_t len = 0;
  gcoll_comm_conn_key(key, sizeof(key), comm->rank, peer, GCOLL_CONN_ID_P2P);
  /* A deadline of now: the store answers at once whether the key is there. */
  if (gcoll_bootstrap_get_from(comm->bs, peer, key, value, sizeof(value), &len, now, err,
                               sizeof(err)) != 0) {
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
static void stream_out(char *dst, uint64_t off, size_t n, const struct gcoll_p2p_header *h,
                       const char *data) {
  if (off < GCOLL_P2P_HEADER_BYTES) {
    size_t k = GCOLL_P2P_HEADER_BYTES - off < n ? GCOLL_P2P_HEADER_BYTES - off : n;
    memcpy(dst, (const char *)h + off, k);
    dst += k, off += k, n -= k;
  }
  if (n > 0) memcpy(dst, data + (off - GCOLL_P2P_HEADER_BYTES), n);
}

/* stream_out from r's device send buffer: the header from the host, the
 * data with one driver copy. */
static gcollResult_t stream_out_device(const struct op_run *r, char *dst, size_t n) {
  uint64_t off = r->off;
  if (off < GCOLL_P2P_HEADER_BYTES) {
    size_t k = GCOLL_P2P_HEADER_BYTES - off < n ? GCOLL_P2P_HEADER_BYTES - off : n;
    memcpy(dst, (const char *)&r->hdr + off, k);
    dst += k, off += k, n -= k;
  }
  if (n == 0) return gcollSuccess;
  return gcoll_p2p_gpu_copy(r, dst, (const char *)r->op->sendbuf + (off - GCOLL_P2P_HEADER_BYTES),
                            n, GPU_DTOH);
}

static gcollResult_t send_steps(struct gcollComm *comm, struct op_run *r, int *moved) {
  struct gcoll_fifo *f = r->pc->c.fifo;
  uint64_t total = GCOLL_P2P_HEADER_BYTES + r->op->bytes;
  if (r->off == 0)
    r->hdr = (struct gcoll_p2p_header){
        .magic = GCOLL_P2P_MAGIC, .sender = comm->rank, .seq = r->pc->seq, .bytes = r->op->bytes};
  while (r->off < total) {
    uint64_t tail = atomic_load_explicit(&f->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&f->head, memory_order_acquire) >= GCOLL_STEPS) break;
    size_t n = total - r->off < f->slot_bytes ? (size_t)(total - r->off) : (size_t)f->slot_bytes;
    char *slot = gcoll_fifo_simple_slot(f, tail);
    if (r->gpu == NULL) stream_out(slot, r->off, n, &r->hdr, r->op->sendbuf);
    else {
      gcollResult_t rc = stream_out_device(r, slot, n);
      if (rc != gcollSuccess) return rc;
    }
    f->nbytes[gcoll_fifo_slot(tail)] = (uint32_t)n;
    f->proto[gcoll_fifo_slot(tail)] = GCOLL_PROTO_SIMPLE;
    atomic_store_explicit(&f->tail, tail + 1, memory_order_release);
    r->off += n;
    *moved = 1;
  }
  if (r->off == total) {
    r->done = 1;
    r->pc->seq++;
  }
  return gcollSuccess;
}

/* The header of a message: who, which and how big; a size other than the
 * receive's is a usage error found here, after which the message is still
 * consumed (into nowhere) so the connection stays in step. */
static gcollResult_t take_header(struct gcollComm *comm, struct op_run *r, const void *step) {
  const struct gcoll_p2p_op *op = r->op;
  memcpy(&r->hdr, step, sizeof(r->hdr));
  if (r->hdr.magic != GCOLL_P2P_MAGIC || r->hdr.sender != op->peer || r->hdr.seq != r->pc->seq ||
      r->hdr.bytes > UINT64_MAX - GCOLL_P2P_HEADER_BYTES)
    return gcoll_fail(gcollInternalError,
                      "gcollRecv from rank %d: message %llu has a bad header (magic %08x, "
                      "sender %d, number %llu)", op->peer, (unsigned long long)r->pc->seq,
                      r->hdr.magic, r->hdr.sender, (unsigned long long)r->hdr.seq);
  r->have_header = 1;
  r->total = GCOLL_P2P_HEADER_BYTES + r->hdr.bytes;
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
        (!r->have_header && n < GCOLL_P2P_HEADER_BYTES) ||
        (r->have_header && n > r->total - r->off))
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
      if (off < GCOLL_P2P_HEADER_BYTES) {
        k -= GCOLL_P2P_HEADER_BYTES - off;
        data += GCOLL_P2P_HEADER_BYTES - off;
        off = GCOLL_P2P_HEADER_BYTES;
      }
      char *to = (char *)r->op->recvbuf + (off - GCOLL_P2P_HEADER_BYTES);
      if (k > 0 && r->gpu == NULL) memcpy(to, data, k);
      else if (k > 0) {
        gcollResult_t rc = gcoll_p2p_gpu_copy(r, to, data, k, GPU_HTOD);
        if (rc != gcollSuccess) return rc;
      }
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

/* Sends and receives to self pair up in call order: partner[i] gets, for
 * a self send i, its receive (the k-th send to self meets the k-th
 * receive from self of the same communicator); -1 elsewhere. */
gcollResult_t gcoll_p2p_match_self(const struct op_run *runs, int n, int *partner) {
  for (int i = 0; i < n; i++) partner[i] = -1;
  for (int i = 0; i < n; i++) {
    const struct gcoll_p2p_op *s = runs[i].op;
    if (!s->is_send || s->peer != s->comm->rank) continue;
    int j = 0;
    for (; j < n; j++) {
      const struct gcoll_p2p_op *q = runs[j].op;
      int taken = 0;
      for (int k = 0; k < i && !taken; k++) taken = partner[k] == j;
      if (!q->is_send && q->comm == s->comm && q->peer == q->comm->rank && !taken) break;
    }
    if (j == n)
      return gcoll_fail(gcollInvalidUsage, "gcollSend to self (rank %d) has no matching gcollRecv "
                        "from self: both must be in one gcollGroupStart/gcollGroupEnd", s->peer);
    const struct gcoll_p2p_op *q = runs[j].op;
    if (q->bytes != s->bytes)
      return gcoll_fail(gcollInvalidUsage, "gcollRecv of %zu bytes from self (rank %d) met a "
                        "gcollSend of %zu bytes: counts and types must agree", q->bytes, q->peer,
                        s->bytes);
    partner[i] = j;
  }
  for (int j = 0; j < n; j++) {
    const struct gcoll_p2p_op *q = runs[j].op;
    int taken = 0;
    for (int k = 0; k < n && !taken; k++) taken = partner[k] == j;
    if (!q->is_send && q->peer == q->comm->rank && !taken)
      return gcoll_fail(gcollInvalidUsage, "gcollRecv from self (rank %d) has no matching "
                        "gcollSend to self: both must be in one gcollGroupStart/gcollGroupEnd",
                        q->peer);
  }
  return gcollSuccess;
}

/* Sends and receives to self are copies. */
static gcollResult_t run_self(struct op_run *runs, int n) {
  int *partner = malloc((size_t)n * sizeof(*partner));
  if (partner == NULL) return gcoll_fail(gcollSystemError, "out of memory for %d operations", n);
  gcollResult_t rc = gcoll_p2p_match_self(runs, n, partner);
  for (int i = 0; i < n && rc == gcollSuccess; i++) {
    if (partner[i] < 0) continue;
    struct op_run *s = &runs[i], *q = &runs[partner[i]];
    if (s->op->bytes > 0 && s->gpu == NULL && q->gpu == NULL)
      memmove(q->op->recvbuf, s->op->sendbuf, s->op->bytes);
    else if (s->op->bytes > 0)
      rc = gcoll_p2p_gpu_self_copy(s, q);
    s->done = q->done = 1;
  }
  free(partner);
  return rc;
}

/* The operation a failed run blames: the first one still pending. */
static void describe_pending(const struct op_run *r, char *buf, size_t len) {
  const struct gcoll_p2p_op *op = r->op;
  if (op->is_send && r->pc->state != CONN_READY)
    snprintf(buf, len, "gcollSend to rank %d: %s", op->peer, r->pc->why);
  else if (op->is_send)
    snprintf(buf, len, "gcollSend of %zu bytes to rank %d: rank %d took %llu of %llu bytes",
             op->bytes, op->peer, op->peer, (unsigned long long)r->off,
             (unsigned long long)(GCOLL_P2P_HEADER_BYTES + op->bytes));
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
      rc = gcoll_p2p_try_attach(comm, r->op->peer, r->pc, deadline_ms, moved);
    if (rc == gcollSuccess && r->pc->state == CONN_READY) {
      if (r->op->is_send) rc = send_steps(comm, r, moved);
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

uint64_t gcoll_p2p_timeout_ms(struct gcollComm **comms, int ncomms) {
  uint64_t timeout_ms = 0;
  for (int i = 0; i < ncomms; i++)
    if (comms[i]->timeout_ms > timeout_ms) timeout_ms = comms[i]->timeout_ms;
  return timeout_ms;
}

/* Every operation's connection: receive ends made, sends looking for
 * their receiver's address. */
gcollResult_t gcoll_p2p_prepare_conns(struct op_run *runs, const struct gcoll_p2p_op *ops, int n) {
  for (int i = 0; i < n; i++) {
    struct op_run *r = &runs[i];
    r->op = &ops[i];
    r->after = -1;
    struct gcollComm *comm = ops[i].comm;
    if (ops[i].peer == comm->rank) continue;
    gcollResult_t rc = gcoll_p2p_alloc(comm);
    if (rc != gcollSuccess) return rc;
    r->pc = conn_of(comm, &ops[i]);
    for (int j = i - 1; j >= 0 && r->after < 0; j--)
      if (runs[j].pc == r->pc) r->after = j;
    if ((rc = prepare_conn(comm, &ops[i], r->pc)) != gcollSuccess) return rc;
  }
  return gcollSuccess;
}

static gcollResult_t run_ops(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                             struct gcollComm **comms, int ncomms, const char *what) {
  gcollResult_t rc = gcoll_p2p_prepare_conns(runs, ops, n);
  if (rc == gcollSuccess) rc = run_self(runs, n);
  if (rc != gcollSuccess) return rc;
  uint64_t timeout_ms = gcoll_p2p_timeout_ms(comms, ncomms);
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


/* Device buffers are made ready before anything moves (self copies
 * included), and the caller's CUDA state restored after. */
static gcollResult_t run_locked(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                                struct gcollComm **comms, int ncomms, const char *what) {
  for (int i = 0; i < n; i++) runs[i].op = &ops[i];
  if (gcoll_p2p_on_gpu(ops, n, comms, ncomms))
    return gcoll_p2p_run_on_gpu(runs, ops, n, comms, ncomms, what);
  gcollResult_t rc = gcoll_p2p_wait_gpu_runs(comms, ncomms, what);
  if (rc != gcollSuccess) return rc;
  struct p2p_gpu *gpu = NULL;
  rc = gcoll_p2p_stage_begin(runs, n, comms, ncomms, what, &gpu);
  if (rc == gcollSuccess) rc = run_ops(runs, ops, n, comms, ncomms, what);
  return gcoll_p2p_stage_end(gpu, rc, what);
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

/* The arguments, and where the buffer is: *device gets its GPU when it is
 * device memory (the CUDA executor's), -1 for host memory. */
static gcollResult_t check_p2p(struct gcollComm *comm, const char *name, const void *buf,
                               size_t count, gcollDataType_t type, int peer, void *stream,
                               size_t *bytes, int *device) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", name);
  size_t size = gcoll_dtype_size(type);
  if (size == 0)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not a gcollDataType_t", name,
                      (int)type);
  if (peer < 0 || peer >= comm->nranks)
    return gcoll_fail(gcollInvalidArgument, "%s: peer %d is not a rank (0..%d)", name, peer,
                      comm->nranks - 1);
  if (count > (SIZE_MAX - GCOLL_P2P_HEADER_BYTES) / size)
    return gcoll_fail(gcollInvalidArgument, "%s: count %zu overflows the buffer size", name, count);
  if (buf == NULL && count > 0)
    return gcoll_fail(gcollInvalidArgument, "%s: buffer is NULL with count %zu", name, count);
  /* Device memory is staged by the driver's copies; host threads must not
   * touch it (a fault on a GPU). A NULL buffer of count 0 touches nothing
   * and goes with any stream (as NCCL programs pass it). */
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  *device = -1;
  if (cuda != NULL && buf != NULL && cuda->owns(buf, device)) {
    if (*device < 0) *device = comm->cuda_device >= 0 ? comm->cuda_device : 0;
  } else {
    *device = -1;
    if (stream != NULL && buf != NULL)
      return gcoll_fail(gcollInvalidUsage, "%s: a stream with a host buffer: send and receive on "
                                           "host memory block and run on no stream (pass NULL, or "
                                           "a device buffer)", name);
  }
  gcollResult_t rc = gcoll_comm_check_usable(comm, name);
  if (rc != gcollSuccess) return rc;
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
  int device = -1;
  gcollResult_t rc = check_p2p(comm, "gcollSend", sendbuff, count, datatype, peer, stream, &bytes,
                               &device);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  struct gcoll_p2p_op op = {.comm = comm, .is_send = 1, .peer = peer, .sendbuf = sendbuff,
                            .bytes = bytes, .device = device, .stream = stream};
  return post(&op, "gcollSend");
}

gcollResult_t gcollRecv(void *recvbuff, size_t count, gcollDataType_t datatype, int peer,
                        gcollComm_t comm, void *stream) {
  size_t bytes = 0;
  int device = -1;
  gcollResult_t rc = check_p2p(comm, "gcollRecv", recvbuff, count, datatype, peer, stream, &bytes,
                               &device);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  struct gcoll_p2p_op op = {.comm = comm, .is_send = 0, .peer = peer, .recvbuf = recvbuff,
                            .bytes = bytes, .device = device, .stream = stream};
  return post(&op, "gcollRecv");
}
