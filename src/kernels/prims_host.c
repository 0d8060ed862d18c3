/* Host implementation of the primitives (see prims.h and fifo.h). */
#include "kernels/prims.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/reduce.h"

/* What an operation does with its inputs and outputs. */
enum {
  OP_SRC = 1,   /* reads src */
  OP_RECV = 2,  /* receives (and reduces) from every receive peer */
  OP_DST = 4,   /* writes dst */
  OP_SEND = 8   /* sends the result to every send peer */
};

gcollResult_t gcoll_prims_setup(struct gcoll_prims *p,
                                struct gcoll_fifo *const *recv, int nrecv,
                                struct gcoll_fifo *const *send, int nsend,
                                enum gcoll_proto proto, gcollDataType_t dtype,
                                gcollRedOp_t op, struct gcoll_wait *wait,
                                void *const *scratch, size_t scratch_bytes) {
  size_t esize = gcoll_dtype_size(dtype);
  if (nrecv < 0 || nrecv > GCOLL_PRIMS_MAX_PEERS || nsend < 0 ||
      nsend > GCOLL_PRIMS_MAX_PEERS || esize == 0 || wait == NULL ||
      (proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL) ||
      (int)op < 0 || op >= gcollNumOps)
    return gcollInvalidArgument;
  const struct gcoll_fifo *first = nrecv > 0 ? recv[0] : nsend > 0 ? send[0] : NULL;
  for (int i = 0; i < nrecv + nsend; i++) {
    const struct gcoll_fifo *f = i < nrecv ? recv[i] : send[i - nrecv];
    if (f == NULL || f->slot_bytes != first->slot_bytes ||
        !gcoll_fifo_slot_bytes_valid(f->slot_bytes))
      return gcollInvalidArgument;
  }
  size_t payload = first ? gcoll_fifo_payload(first, proto) : 0;
  if (proto == GCOLL_PROTO_LL && first != NULL) {
    if (scratch == NULL || scratch_bytes < payload) return gcollInvalidArgument;
    for (int i = 0; i < GCOLL_PRIMS_SCRATCH; i++)
      if (scratch[i] == NULL) return gcollInvalidArgument;
  }
  *p = (struct gcoll_prims){.nrecv = 0};
  p->nrecv = nrecv;
  p->nsend = nsend;
  for (int i = 0; i < nrecv; i++) {
    p->recv[i] = recv[i];
    /* Only this side writes head, so its own value is exact. */
    p->recv_step[i] = atomic_load_explicit(&recv[i]->head, memory_order_relaxed);
  }
  for (int i = 0; i < nsend; i++) {
    p->send[i] = send[i];
    p->send_step[i] = atomic_load_explicit(&send[i]->tail, memory_order_relaxed);
  }
  p->proto = proto;
  p->dtype = dtype;
  p->op = op;
  p->esize = esize;
  p->step_elems = payload / esize;
  p->wait = wait;
  if (scratch != NULL)
    for (int i = 0; i < GCOLL_PRIMS_SCRATCH; i++) p->scratch[i] = scratch[i];
  return gcollSuccess;
}

static gcollResult_t failed(struct gcoll_prims *p, gcollResult_t r,
                            const char *what, int peer, uint64_t step) {
  p->fail_what = what;
  p->fail_peer = peer;
  p->fail_step = step;
  p->fail_unit = NULL;
  return r;
}

/* Polls line l of step s until its flag is current; *v gets the line. */
static gcollResult_t ll_line(struct gcoll_prims *p, int i, _Atomic uint64_t *line,
                             uint64_t s, uint64_t *v) {
  *v = atomic_load_explicit(line, memory_order_relaxed);
  if (gcoll_ll_line_ready(*v, s)) return gcollSuccess;
  /* Asleep, on tail: bumped after the lines (fifo.h). */
  struct gcoll_fifo *f = p->recv[i];
  gcoll_wait_begin_on(p->wait, &f->tail, s + 1, &f->tail_asleep);
  do {
    gcollResult_t r = gcoll_wait_round(p->wait);
    if (r != gcollSuccess) return failed(p, r, "data from receive peer", i, s);
    *v = atomic_load_explicit(line, memory_order_relaxed);
  } while (!gcoll_ll_line_ready(*v, s));
  return gcollSuccess;
}

/* Unpacks the LL lines of step s into out. Full lines copy a constant 4
 * bytes (a plain store, no memcpy call); only the last line may be short. */
static gcollResult_t ll_receive(struct gcoll_prims *p, int i, size_t nb,
                                char *out) {
  uint64_t s = p->recv_step[i], v;
  _Atomic uint64_t *lines = gcoll_fifo_ll_slot(p->recv[i], s);
  size_t full = nb / 4, l;
  for (l = 0; l < full; l++) {
    gcollResult_t r = ll_line(p, i, &lines[l], s, &v);
    if (r != gcollSuccess) return r;
    uint32_t data = (uint32_t)v;
    memcpy(out + 4 * l, &data, 4);
  }
  if (nb % 4 != 0) {
    gcollResult_t r = ll_line(p, i, &lines[l], s, &v);
    if (r != gcollSuccess) return r;
    uint32_t data = (uint32_t)v;
    memcpy(out + 4 * l, &data, nb % 4);
  }
  return gcollSuccess;
}

static void ll_send(_Atomic uint64_t *lines, const char *in, size_t nb, uint64_t s) {
  size_t full = nb / 4, l;
  for (l = 0; l < full; l++) {
    uint32_t word;
    memcpy(&word, in + 4 * l, 4);
    atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
  }
  if (nb % 4 != 0) {
    uint32_t word = 0;
    memcpy(&word, in + 4 * l, nb % 4);
    atomic_store_explicit(&lines[l], gcoll_ll_line(word, s), memory_order_relaxed);
  }
}

/* Waits for step data from receive peer i; *data points at it. */
static gcollResult_t receive(struct gcoll_prims *p, int i, size_t nb,
                             const void **data) {
  struct gcoll_fifo *f = p->recv[i];
  uint64_t s = p->recv_step[i];
  if (p->proto == GCOLL_PROTO_LL) {
    *data = p->scratch[i];
    return ll_receive(p, i, nb, p->scratch[i]);
  }
  gcollResult_t r = gcoll_wait_counter(p->wait, &f->tail, s + 1, &f->tail_asleep);
  if (r != gcollSuccess) return failed(p, r, "data from receive peer", i, s);
  unsigned slot = gcoll_fifo_slot(s);
  if (f->nbytes[slot] != nb || f->proto[slot] != GCOLL_PROTO_SIMPLE)
    return failed(p, gcollInternalError, "matching step from receive peer", i, s);
  *data = gcoll_fifo_simple_slot(f, s);
  return gcollSuccess;
}

static void release(struct gcoll_prims *p, int i) {
  uint64_t s = p->recv_step[i]++;
  gcoll_fifo_store_head(p->recv[i], s + 1);
}

/* Waits until send peer j has freed the slot of its next step. */
static gcollResult_t send_space(struct gcoll_prims *p, int j) {
  uint64_t s = p->send_step[j];
  if (s < GCOLL_STEPS) {
    if (atomic_load_explicit(&p->send[j]->head, memory_order_acquire) + GCOLL_STEPS > s)
      return gcollSuccess;
  }
  uint64_t need = s >= GCOLL_STEPS ? s - GCOLL_STEPS + 1 : 0;
  gcollResult_t r = gcoll_wait_counter(p->wait, &p->send[j]->head, need,
                                      &p->send[j]->head_asleep);
  if (r != gcollSuccess) return failed(p, r, "a free slot at send peer", j, s);
  return gcollSuccess;
}

static void publish(struct gcoll_prims *p, int j, const void *data, size_t nb) {
  struct gcoll_fifo *f = p->send[j];
  uint64_t s = p->send_step[j]++;
  unsigned slot = gcoll_fifo_slot(s);
  if (p->proto == GCOLL_PROTO_LL) {
    ll_send(gcoll_fifo_ll_slot(f, s), data, nb, s);
  } else {
    void *dst = gcoll_fifo_simple_slot(f, s);
    if (dst != data) memcpy(dst, data, nb);
  }
  f->nbytes[slot] = (uint32_t)nb;
  f->proto[slot] = (uint8_t)p->proto;
  gcoll_fifo_store_tail(f, s + 1);
}

/* After a step's publishes and releases: one fence for all their counters,
 * then wakes the peers that sleep on them (fifo.h, wait.h). */
static void wake_peers(struct gcoll_prims *p, unsigned ops) {
  gcoll_fifo_fence();
  if (ops & OP_SEND)
    for (int j = 0; j < p->nsend; j++) gcoll_fifo_wake_tail(p->send[j]);
  if (ops & OP_RECV)
    for (int i = 0; i < p->nrecv; i++) gcoll_fifo_wake_head(p->recv[i]);
}

/* Where a reduction result goes when it is not written to dst: straight into
 * the first send slot for SIMPLE (saves a copy), else the accumulator. */
static void *result_buffer(struct gcoll_prims *p, unsigned ops, char *dst) {
  if (ops & OP_DST) return dst;
  if ((ops & OP_SEND) && p->proto == GCOLL_PROTO_SIMPLE)
    return gcoll_fifo_simple_slot(p->send[0], p->send_step[0]);
  return p->scratch[GCOLL_PRIMS_MAX_PEERS];
}

static gcollResult_t one_step(struct gcoll_prims *p, unsigned ops,
                              const char *src, char *dst, size_t m) {
  size_t nb = m * p->esize;
  const void *in[GCOLL_PRIMS_MAX_PEERS + 1] = {NULL};
  int nin = 0;
  gcollResult_t r;
  if ((ops & OP_SRC) && p->prescale != NULL) {
    /* A copy scales straight into dst; anything else reads a scaled step. */
    if (!(ops & (OP_RECV | OP_SEND))) {
      gcoll_scale(dst, src, m, p->dtype, p->premul_k);
      return gcollSuccess;
    }
    gcoll_scale(p->prescale, src, m, p->dtype, p->premul_k);
    src = p->prescale;
  }
  if (ops & OP_SRC) in[nin++] = src;
  if (ops & OP_RECV)
    for (int i = 0; i < p->nrecv; i++)
      if ((r = receive(p, i, nb, &in[nin++])) != gcollSuccess) return r;
  if (ops & OP_SEND)
    for (int j = 0; j < p->nsend; j++)
      if ((r = send_space(p, j)) != gcollSuccess) return r;
  const void *res = in[0];
  if (nin == 1) {
    if ((ops & OP_DST) && dst != in[0]) memcpy(dst, in[0], nb);
  } else {
    void *out = result_buffer(p, ops, dst);
    gcoll_reduce(out, in[0], in[1], m, p->dtype, p->op);
    for (int k = 2; k < nin; k++) gcoll_reduce(out, out, in[k], m, p->dtype, p->op);
    res = out;
  }
  if (ops & OP_SEND)
    for (int j = 0; j < p->nsend; j++) publish(p, j, res, nb);
  if (ops & OP_RECV)
    for (int i = 0; i < p->nrecv; i++) release(p, i);
  if (ops & (OP_SEND | OP_RECV)) wake_peers(p, ops);
  return gcollSuccess;
}

static gcollResult_t run(struct gcoll_prims *p, unsigned ops, size_t src_off,
                         size_t dst_off, size_t n) {
  if (n == 0) return gcollSuccess;
  if (((ops & OP_RECV) && p->nrecv == 0) || ((ops & OP_SEND) && p->nsend == 0) ||
      ((ops & OP_SRC) && p->src == NULL) || ((ops & OP_DST) && p->dst == NULL))
    return failed(p, gcollInternalError, "a peer or buffer the operation needs", -1, 0);
  size_t per_step = (ops & (OP_RECV | OP_SEND)) ? p->step_elems : n;
  if (per_step == 0)
    return failed(p, gcollInternalError, "a step size", -1, 0);
  const char *src = (ops & OP_SRC) ? p->src + src_off * p->esize : NULL;
  char *dst = (ops & OP_DST) ? p->dst + dst_off * p->esize : NULL;
  for (size_t done = 0; done < n;) {
    size_t m = n - done < per_step ? n - done : per_step;
    gcollResult_t r = one_step(p, ops, src ? src + done * p->esize : NULL,
                               dst ? dst + done * p->esize : NULL, m);
    if (r != gcollSuccess) return r;
    done += m;
  }
  return gcollSuccess;
}

gcollResult_t gcoll_prim_send(struct gcoll_prims *p, size_t src_off, size_t n) {
  return run(p, OP_SRC | OP_SEND, src_off, 0, n);
}
gcollResult_t gcoll_prim_recv(struct gcoll_prims *p, size_t dst_off, size_t n) {
  return run(p, OP_RECV | OP_DST, 0, dst_off, n);
}
gcollResult_t gcoll_prim_recvReduceSend(struct gcoll_prims *p, size_t src_off,
                                        size_t n) {
  return run(p, OP_SRC | OP_RECV | OP_SEND, src_off, 0, n);
}
gcollResult_t gcoll_prim_recvReduceCopy(struct gcoll_prims *p, size_t src_off,
                                        size_t dst_off, size_t n) {
  return run(p, OP_SRC | OP_RECV | OP_DST, src_off, dst_off, n);
}
gcollResult_t gcoll_prim_recvReduceCopySend(struct gcoll_prims *p,
                                            size_t src_off, size_t dst_off,
                                            size_t n) {
  return run(p, OP_SRC | OP_RECV | OP_DST | OP_SEND, src_off, dst_off, n);
}
gcollResult_t gcoll_prim_recvCopySend(struct gcoll_prims *p, size_t dst_off,
                                      size_t n) {
  return run(p, OP_RECV | OP_DST | OP_SEND, 0, dst_off, n);
}
gcollResult_t gcoll_prim_copySend(struct gcoll_prims *p, size_t src_off,
                                  size_t dst_off, size_t n) {
  return run(p, OP_SRC | OP_DST | OP_SEND, src_off, dst_off, n);
}
gcollResult_t gcoll_prim_copy(struct gcoll_prims *p, size_t src_off,
                              size_t dst_off, size_t n) {
  return run(p, OP_SRC | OP_DST, src_off, dst_off, n);
}
