/* The body of gcoll_cuda_p2p (cuda_work.h): send/recv on device buffers,
 * moved by the GPU through the connections' FIFOs in p2p_wire.h's message
 * format, shared by coll_kernels.cu (the fatbin) and the emulator.
 *
 * Thread 0 of a block decides every step: it scans the block's
 * operations in turn (round robin from the one served last) for one whose
 * FIFO has room (send) or data (receive), and whose predecessor on the
 * same connection has finished; the whole block then copies that step
 * (the header, written by thread 0, shares a message's first step), and
 * thread 0 publishes it (tail for a send, after a system fence; head for a
 * receive). When no operation can move, thread 0 backs off with the
 * collectives' rule (prims_cuda.cuh): abort word, sibling abort, deadline.
 * So one kernel runs a whole group, and no operation waits behind another
 * operation's peer.
 *
 * A receive whose message announces another size than the receive's
 * consumes the whole message without storing it (the connection stays in
 * step) and the block reports GCOLL_CUDA_FAIL_SIZE at the end, with the
 * announced size in `step`; a malformed header or step is a protocol
 * failure (GCOLL_CUDA_FAIL_MISMATCH), as for the collectives. */
#ifndef GCOLL_KERNELS_P2P_DEVICE_CUH
#define GCOLL_KERNELS_P2P_DEVICE_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/p2p_wire.h"
#include "kernels/prims_cuda.cuh"

/* Where one operation stands. */
struct gcoll_dev_p2p_state {
  uint64_t off;                    /* message bytes (header included) moved */
  uint64_t total;                  /* the message's bytes; RECV: 0 until the header came */
  int32_t done;
  int32_t discard;                 /* RECV: another size was announced: consumed, not kept */
};

enum { GCOLL_DEV_P2P_IDLE = 0, GCOLL_DEV_P2P_STEP, GCOLL_DEV_P2P_DONE, GCOLL_DEV_P2P_FAIL };

/* A block's shared state: its operations (copied from host-mapped memory
 * once) and the step thread 0 chose for the others to copy. */
struct gcoll_dev_p2p_shared {
  struct gcoll_dev_block blk;
  int nmine;
  int last;                        /* the operation served last */
  int cmd;                         /* GCOLL_DEV_P2P_* for this round */
  int cur;                         /* the operation of this step */
  const char *src;                 /* the step's data copy (n bytes; none when 0) */
  char *dst;
  uint64_t n;
  uint64_t step_bytes;             /* SEND: the step's size, header included */
  uint64_t fifo_step;              /* the FIFO position of this step */
  int setup_failed;
  int size_failed;                 /* a receive met another size: reported at the end */
  int size_peer;
  uint64_t size_announced;
  int prev[GCOLL_CUDA_P2P_MAX_BLOCK_OPS];   /* the previous operation of its queue, -1 */
  struct gcoll_cuda_p2p_op op[GCOLL_CUDA_P2P_MAX_BLOCK_OPS];
  struct gcoll_dev_p2p_state st[GCOLL_CUDA_P2P_MAX_BLOCK_OPS];
};

/* Thread 0: this block's operations, in array order. -1 when there are
 * more than a block keeps. */
GCOLL_DEV static inline int gcoll_dev_p2p_collect(const struct gcoll_cuda_p2p_work &w, int b,
                                                  struct gcoll_dev_p2p_shared *sh) {
  const struct gcoll_cuda_p2p_op *ops = (const struct gcoll_cuda_p2p_op *)w.ops;
  sh->nmine = 0;
  for (int i = 0; i < w.nops; i++) {
    const int q = ops[i].queue;
    if (q < 0 || q % w.nblocks != b) continue;
    if (sh->nmine == GCOLL_CUDA_P2P_MAX_BLOCK_OPS) return -1;
    const int k = sh->nmine++;
    sh->op[k] = ops[i];
    sh->st[k].off = 0;
    sh->st[k].total = ops[i].kind == GCOLL_CUDA_P2P_RECV ? 0
                      : ops[i].kind == GCOLL_CUDA_P2P_SEND ? GCOLL_P2P_HEADER_BYTES + ops[i].bytes
                                                           : ops[i].bytes;
    sh->st[k].done = 0;
    sh->st[k].discard = 0;
    sh->prev[k] = -1;
    for (int j = k - 1; j >= 0 && sh->prev[k] < 0; j--)
      if (sh->op[j].queue == q) sh->prev[k] = j;
  }
  sh->last = sh->nmine - 1;
  return 0;
}

/* Thread 0: sets up the next step of send k if its FIFO has a free slot. */
GCOLL_DEV static inline int gcoll_dev_p2p_try_send(struct gcoll_dev_p2p_shared *sh, int k,
                                                   int rank) {
  const struct gcoll_cuda_p2p_op *op = &sh->op[k];
  struct gcoll_dev_p2p_state *st = &sh->st[k];
  struct gcoll_dev_fifo *f = (struct gcoll_dev_fifo *)op->fifo;
  const uint64_t tail = gcoll_dev_load_relaxed(&f->tail);
  if (tail - gcoll_dev_load_acquire(&f->head) >= GCOLL_STEPS) return 0;
  char *slot = gcoll_dev_simple_slot(f, tail);
  const uint64_t left = st->total - st->off;
  const uint64_t n = left < f->slot_bytes ? left : f->slot_bytes;
  uint64_t data_at = st->off - GCOLL_P2P_HEADER_BYTES; /* valid once past the header */
  sh->dst = slot;
  sh->n = n;
  if (st->off == 0) {   /* slots are >= 64 bytes: the header fits the first step */
    struct gcoll_p2p_header h;
    memset(&h, 0, sizeof(h));
    h.magic = GCOLL_P2P_MAGIC;
    h.sender = rank;
    h.seq = op->seq;
    h.bytes = op->bytes;
    memcpy(slot, &h, sizeof(h));
    sh->dst = slot + GCOLL_P2P_HEADER_BYTES;
    sh->n = n - GCOLL_P2P_HEADER_BYTES;
    data_at = 0;
  }
  sh->src = (const char *)op->buf + data_at;
  sh->step_bytes = n;
  sh->fifo_step = tail;
  return 1;
}

/* Thread 0: sets up the next step of receive k if its FIFO has data; -1
 * after a protocol failure (recorded in the block). */
GCOLL_DEV static inline int gcoll_dev_p2p_try_recv(struct gcoll_dev_p2p_shared *sh, int k) {
  const struct gcoll_cuda_p2p_op *op = &sh->op[k];
  struct gcoll_dev_p2p_state *st = &sh->st[k];
  struct gcoll_dev_fifo *f = (struct gcoll_dev_fifo *)op->fifo;
  const uint64_t head = gcoll_dev_load_relaxed(&f->head);
  if (gcoll_dev_load_acquire(&f->tail) <= head) return 0;
  const unsigned slot_index = (unsigned)(head % GCOLL_STEPS);
  const uint64_t nb = ((volatile uint32_t *)f->nbytes)[slot_index];
  const uint32_t proto = ((volatile uint8_t *)f->proto)[slot_index];
  const char *slot = gcoll_dev_simple_slot(f, head);
  if (proto != GCOLL_PROTO_SIMPLE || nb == 0 || nb > f->slot_bytes ||
      (st->total == 0 && nb < GCOLL_P2P_HEADER_BYTES) ||
      (st->total != 0 && nb > st->total - st->off)) {
    gcoll_dev_fail(&sh->blk, gcollInternalError, GCOLL_CUDA_REASON_NONE, GCOLL_CUDA_FAIL_MISMATCH,
                   op->peer, op->seq);
    return -1;
  }
  uint64_t skip = 0;
  if (st->total == 0) {
    struct gcoll_p2p_header h;
    memcpy(&h, (const void *)slot, sizeof(h));
    if (h.magic != GCOLL_P2P_MAGIC || h.sender != op->peer || h.seq != op->seq ||
        h.bytes > UINT64_MAX - GCOLL_P2P_HEADER_BYTES ||
        nb > GCOLL_P2P_HEADER_BYTES + h.bytes) {
      gcoll_dev_fail(&sh->blk, gcollInternalError, GCOLL_CUDA_REASON_NONE,
                     GCOLL_CUDA_FAIL_MISMATCH, op->peer, op->seq);
      return -1;
    }
    st->total = GCOLL_P2P_HEADER_BYTES + h.bytes;
    if (h.bytes != op->bytes && !st->discard) {
      st->discard = 1;
      if (!sh->size_failed) {
        sh->size_failed = 1;
        sh->size_peer = op->peer;
        sh->size_announced = h.bytes;
      }
    }
    skip = GCOLL_P2P_HEADER_BYTES;
  }
  sh->src = slot + skip;
  sh->dst = (char *)op->buf + (st->off + skip - GCOLL_P2P_HEADER_BYTES);
  sh->n = st->discard ? 0 : nb - skip;
  sh->step_bytes = nb;
  sh->fifo_step = head;
  return 1;
}

/* Thread 0: the next step to copy, or why there is none. */
GCOLL_DEV static inline int gcoll_dev_p2p_pick(struct gcoll_dev_p2p_shared *sh, int rank,
                                               uint32_t *spins) {
  int pending = 0;
  for (int i = 1; i <= sh->nmine; i++) {
    const int k = (sh->last + i) % sh->nmine;
    const struct gcoll_dev_p2p_state *st = &sh->st[k];
    if (st->done) continue;
    pending++;
    if (sh->prev[k] >= 0 && !sh->st[sh->prev[k]].done) continue;
    int got = 0;
    const struct gcoll_cuda_p2p_op *op = &sh->op[k];
    if (op->kind == GCOLL_CUDA_P2P_COPY) {
      sh->src = (const char *)op->buf;
      sh->dst = (char *)op->dst;
      sh->n = op->bytes;
      got = 1;
    } else if (op->kind == GCOLL_CUDA_P2P_SEND) {
      got = gcoll_dev_p2p_try_send(sh, k, rank);
    } else {
      got = gcoll_dev_p2p_try_recv(sh, k);
    }
    if (got < 0) return GCOLL_DEV_P2P_FAIL;
    if (got) {
      sh->cur = k;
      sh->last = k;
      *spins = 0;
      return GCOLL_DEV_P2P_STEP;
    }
  }
  if (pending == 0) return GCOLL_DEV_P2P_DONE;
  const int k = (sh->last + 1) % sh->nmine;
  const int what = sh->op[k].kind == GCOLL_CUDA_P2P_SEND ? GCOLL_CUDA_FAIL_SEND_SLOT
                                                         : GCOLL_CUDA_FAIL_RECV_DATA;
  if (gcoll_dev_backoff(&sh->blk, ++*spins, what, sh->op[k].peer, sh->op[k].seq) != 0)
    return GCOLL_DEV_P2P_FAIL;
  return GCOLL_DEV_P2P_IDLE;
}

/* Thread 0, after the block copied the step: publish it. */
GCOLL_DEV static inline void gcoll_dev_p2p_post(struct gcoll_dev_p2p_shared *sh) {
  const int k = sh->cur;
  const struct gcoll_cuda_p2p_op *op = &sh->op[k];
  struct gcoll_dev_p2p_state *st = &sh->st[k];
  struct gcoll_dev_fifo *f = (struct gcoll_dev_fifo *)op->fifo;
  if (op->kind == GCOLL_CUDA_P2P_COPY) {
    st->done = 1;
    return;
  }
  const unsigned slot_index = (unsigned)(sh->fifo_step % GCOLL_STEPS);
  if (op->kind == GCOLL_CUDA_P2P_SEND) {
    gcoll_dev_fence_system();
    ((volatile uint32_t *)f->nbytes)[slot_index] = (uint32_t)sh->step_bytes;
    ((volatile uint8_t *)f->proto)[slot_index] = (uint8_t)GCOLL_PROTO_SIMPLE;
    gcoll_dev_store_release(&f->tail, sh->fifo_step + 1);
  } else {
    gcoll_dev_store_release(&f->head, sh->fifo_step + 1);
  }
  st->off += sh->step_bytes;
  if (st->off == st->total) st->done = 1;
}

/* Every thread: n bytes from src to dst with the block. */
GCOLL_DEV static inline void gcoll_dev_p2p_copy(const char *src, char *dst, uint64_t n) {
  const void *s = src;
  void *d = dst;
  gcoll_cuda_reduce_copy_t<uint8_t, gcoll_cuda_elt_u8<gcollSum>, false>(
      gcoll_dev_tid(), gcoll_dev_nthreads(), &d, 1, &s, 1, n, 0);
}

/* A self copy within one buffer must read the source as it was (as
 * memmove): overlapping ranges move in pieces no longer than the gap, in
 * the direction that reads each piece before anything overwrites it. */
GCOLL_DEV static inline void gcoll_dev_p2p_move(const char *src, char *dst, uint64_t n) {
  const uint64_t gap = src > dst ? (uint64_t)(src - dst) : (uint64_t)(dst - src);
  if (gap == 0) return;
  if (gap >= n) {
    gcoll_dev_p2p_copy(src, dst, n);
    return;
  }
  if (dst < src) {
    for (uint64_t off = 0; off < n; off += gap) {
      gcoll_dev_p2p_copy(src + off, dst + off, n - off < gap ? n - off : gap);
      gcoll_dev_barrier();
    }
  } else {
    for (uint64_t end = n; end > 0;) {
      const uint64_t k = end < gap ? end : gap;
      gcoll_dev_p2p_copy(src + end - k, dst + end - k, k);
      gcoll_dev_barrier();
      end -= k;
    }
  }
}

/* What block b does, on every thread. */
GCOLL_DEV static inline void gcoll_dev_p2p_block_main(const struct gcoll_cuda_p2p_work &w, int b,
                                                      struct gcoll_dev_p2p_shared *sh) {
  struct gcoll_dev_block *blk = &sh->blk;
  if (gcoll_dev_tid() == 0) {
    gcoll_dev_block_start(blk, w.abort_word, w.local_abort, w.timeout_ns);
    sh->size_failed = 0;
    sh->setup_failed = 0;
    if (w.nblocks < 1 || b >= w.nblocks || gcoll_dev_p2p_collect(w, b, sh) != 0) {
      gcoll_dev_fail(blk, gcollInvalidArgument, GCOLL_CUDA_REASON_NONE, GCOLL_CUDA_FAIL_SETUP, -1,
                     0);
      sh->setup_failed = 1;
    }
  }
  gcoll_dev_barrier();
  uint32_t spins = 0;
  for (;;) {
    if (gcoll_dev_tid() == 0)
      sh->cmd = sh->setup_failed ? GCOLL_DEV_P2P_FAIL : gcoll_dev_p2p_pick(sh, w.rank, &spins);
    gcoll_dev_barrier();
    const int cmd = sh->cmd;
    if (cmd == GCOLL_DEV_P2P_DONE || cmd == GCOLL_DEV_P2P_FAIL) break;
    if (cmd == GCOLL_DEV_P2P_STEP) {
      if (sh->n > 0 && sh->op[sh->cur].kind == GCOLL_CUDA_P2P_COPY)
        gcoll_dev_p2p_move(sh->src, sh->dst, sh->n);
      else if (sh->n > 0)
        gcoll_dev_p2p_copy(sh->src, sh->dst, sh->n);
      gcoll_dev_barrier();
      if (gcoll_dev_tid() == 0) gcoll_dev_p2p_post(sh);
    }
    /* Every thread has read cmd before thread 0 writes the next one. */
    gcoll_dev_barrier();
  }
  gcoll_dev_barrier();
  if (gcoll_dev_tid() == 0) {
    if (blk->result == 0 && sh->size_failed)
      gcoll_dev_fail(blk, gcollInvalidUsage, GCOLL_CUDA_REASON_NONE, GCOLL_CUDA_FAIL_SIZE,
                     sh->size_peer, sh->size_announced);
    const int r = blk->result;
    if (r != 0 && w.local_abort != 0 && blk->what != GCOLL_CUDA_FAIL_SIZE)
      gcoll_dev_cas_system((int *)w.local_abort, 0, r);
    gcoll_dev_block_report(blk, r, (struct gcoll_cuda_status *)w.status + b);
  }
}

#endif
