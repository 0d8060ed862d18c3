/* Primitives over one channel: the vocabulary the algorithms are written in.
 *
 * The algorithm headers (algo_ring.h, algo_tree.h) use only what this header
 * names: struct gcoll_prims (opaque to them), gcoll_prims_bind,
 * gcoll_prims_chunk_elems, the gcoll_prim_* operations and gcollResult_t. A
 * CUDA executor provides the same names with device implementations (and
 * its own GCOLL_KERNEL_FN) and includes the same algorithm headers.
 *
 * A prims object has up to GCOLL_PRIMS_MAX_PEERS receive and send
 * connections. Every operation works on all of them at once, which gives the
 * multi-peer forms trees need: with several receive peers the received
 * values are reduced together (tree reduce from up to 3 children), with
 * several send peers the result goes to each (tree broadcast to children).
 * Ring channels have one of each.
 *
 * Operations (seed 004 names) take element offsets into the bound buffers:
 * "src" (the input, e.g. sendbuf) and "dst" (the output, e.g. recvbuf):
 *   send(s)                         peers <- src[s]
 *   recv(d)                         dst[d] <- recv
 *   recvReduceSend(s)               peers <- recv OP src[s]
 *   recvReduceCopy(s, d)            dst[d] <- recv OP src[s]
 *   recvReduceCopySend(s, d)        dst[d] <- recv OP src[s]; peers <- dst[d]
 *   recvCopySend(d)                 dst[d] <- recv; peers <- recv
 *   copySend(s, d)                  dst[d] <- src[s]; peers <- src[s]
 *   copy(s, d)                      dst[d] <- src[s] (local; 1-rank groups)
 * where "recv" is the reduction of the values of all receive peers. src and
 * dst ranges may be the same memory (in-place); other overlap is not allowed.
 *
 * n elements move in ceil(n / step elements) FIFO steps; n = 0 moves nothing,
 * so both ends of a connection must compute the same n for each call (they
 * do: the algorithms derive sizes only from shared arguments). Each returns
 * gcollSuccess, or the wait's failure (abort value, gcollSystemError at the
 * deadline), or gcollInternalError when the peer's step does not match.
 * After a failure the connection's counters are out of step with the peer:
 * the communicator must be torn down.
 */
#ifndef GCOLL_KERNELS_PRIMS_H
#define GCOLL_KERNELS_PRIMS_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "kernels/fifo.h"
#include "kernels/wait.h"

#ifndef GCOLL_KERNEL_FN
#define GCOLL_KERNEL_FN static inline
#endif

#define GCOLL_PRIMS_MAX_PEERS 3
/* Pipelined chunk of the ring algorithms, in steps: half the FIFO, so a
 * rank's first send of a chunk never blocks on a peer that is itself still
 * sending (the ring would otherwise deadlock), and two chunks are in flight. */
#define GCOLL_CHUNK_STEPS (GCOLL_STEPS / 2)
/* Scratch buffers a host prims object needs for LL: one per receive peer
 * plus an accumulator, each gcoll_fifo_payload(f, LL) bytes. */
#define GCOLL_PRIMS_SCRATCH (GCOLL_PRIMS_MAX_PEERS + 1)

struct gcoll_prims {
  int nrecv, nsend;
  struct gcoll_fifo *recv[GCOLL_PRIMS_MAX_PEERS];
  struct gcoll_fifo *send[GCOLL_PRIMS_MAX_PEERS];
  uint64_t recv_step[GCOLL_PRIMS_MAX_PEERS];
  uint64_t send_step[GCOLL_PRIMS_MAX_PEERS];
  enum gcoll_proto proto;
  gcollDataType_t dtype;
  gcollRedOp_t op;          /* avg reduces as sum; the caller finishes it */
  size_t esize;
  size_t step_elems;        /* elements per FIFO step (0 without peers) */
  const char *src;
  char *dst;
  struct gcoll_wait *wait;
  void *scratch[GCOLL_PRIMS_SCRATCH];
  /* A pre-mul-sum (reduce.h): src is scaled by premul_k (the type's bits)
   * through prescale, a step's payload of memory, as operations read it.
   * NULL: none. */
  void *prescale;
  uint64_t premul_k;
  /* Where the last failure happened, for the executor's error line. */
  const char *fail_what;
  int fail_peer;
  uint64_t fail_step;
  const char *fail_unit;    /* what fail_step counts; NULL: FIFO steps */
};

/* Host: binds the connections (FIFOs of equal slot size), loads the step
 * positions from the FIFOs, and sets protocol, type and op. scratch holds
 * GCOLL_PRIMS_SCRATCH buffers of scratch_bytes each (needed for LL only).
 * Returns gcollInvalidArgument (with nothing changed in the FIFOs) when the
 * peer counts, slot sizes, scratch or type are invalid. */
gcollResult_t gcoll_prims_setup(struct gcoll_prims *p,
                                struct gcoll_fifo *const *recv, int nrecv,
                                struct gcoll_fifo *const *send, int nsend,
                                enum gcoll_proto proto, gcollDataType_t dtype,
                                gcollRedOp_t op, struct gcoll_wait *wait,
                                void *const *scratch, size_t scratch_bytes);

/* Host: makes p a pre-mul-sum's (after gcoll_prims_setup, op sum): buf
 * holds one step's payload. */
static inline void gcoll_prims_premul(struct gcoll_prims *p, uint64_t k, void *buf) {
  p->premul_k = k;
  p->prescale = buf;
}

GCOLL_KERNEL_FN void gcoll_prims_bind(struct gcoll_prims *p, const void *src,
                                      void *dst) {
  p->src = (const char *)src;
  p->dst = (char *)dst;
}

/* Elements of one pipelined chunk (GCOLL_CHUNK_STEPS steps). */
GCOLL_KERNEL_FN size_t gcoll_prims_chunk_elems(const struct gcoll_prims *p) {
  return p->step_elems * GCOLL_CHUNK_STEPS;
}

gcollResult_t gcoll_prim_send(struct gcoll_prims *p, size_t src_off, size_t n);
gcollResult_t gcoll_prim_recv(struct gcoll_prims *p, size_t dst_off, size_t n);
gcollResult_t gcoll_prim_recvReduceSend(struct gcoll_prims *p, size_t src_off,
                                        size_t n);
gcollResult_t gcoll_prim_recvReduceCopy(struct gcoll_prims *p, size_t src_off,
                                        size_t dst_off, size_t n);
gcollResult_t gcoll_prim_recvReduceCopySend(struct gcoll_prims *p,
                                            size_t src_off, size_t dst_off,
                                            size_t n);
gcollResult_t gcoll_prim_recvCopySend(struct gcoll_prims *p, size_t dst_off,
                                      size_t n);
gcollResult_t gcoll_prim_copySend(struct gcoll_prims *p, size_t src_off,
                                  size_t dst_off, size_t n);
gcollResult_t gcoll_prim_copy(struct gcoll_prims *p, size_t src_off,
                              size_t dst_off, size_t n);

#endif
