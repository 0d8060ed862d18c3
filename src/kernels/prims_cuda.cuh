/* Device implementation of the primitives (prims.h's contract, fifo.h's
 * layout), for one thread block per channel.
 *
 * The algorithm headers run on every thread of the block: their control
 * flow depends only on arguments every thread shares, so all threads call
 * the same primitive with the same sizes. Inside a primitive, thread 0 does
 * the counter waits and the posting; all threads move data (reduceCopy, LL
 * lines). Every primitive returns the same gcollResult_t on every thread:
 * failures are collected with __syncthreads_or and read from shared memory
 * after the barrier, so no thread leaves a barrier the others still wait at.
 *
 * Memory ordering (FIFOs may be in this GPU's memory, a peer GPU's memory
 * mapped by IPC, or host-pinned memory polled by a proxy thread, so every
 * access to a counter or LL line is system scope):
 *  - consumer, SIMPLE: thread 0 loads tail with acquire; the barrier that
 *    follows extends that to the block before anyone reads the slot.
 *  - producer: the block writes the slot, barrier, then thread 0 issues
 *    __threadfence_system and stores tail with release (NCCL's pattern: the
 *    barrier orders the block's writes before thread 0's cumulative fence).
 *  - freeing a slot: the block's reads, barrier, then thread 0 stores head
 *    with release, so the producer cannot overwrite data still being read.
 *  - LL: each 8-byte line {data, flag} is one relaxed system-scope atomic
 *    store/load, so a matching flag implies its data; no fence is needed.
 * Every wait polls the communicator's abort word, the launch's sibling
 * abort word and a deadline on %globaltimer, so a dead peer ends the kernel
 * with an error instead of hanging it; long waits back off with __nanosleep
 * so polling host-pinned memory does not flood PCIe.
 *
 * LL receives unpack into per-channel scratch and then reduce from there
 * (not fused into the line loop): simpler, and LL only carries small steps.
 */
#ifndef GCOLL_KERNELS_PRIMS_CUDA_CUH
#define GCOLL_KERNELS_PRIMS_CUDA_CUH

#include <cuda/atomic>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/cuda_work.h"
#include "kernels/reduce_cuda.cuh"

/* Device code, or host code too under GCOLL_CUDA_EMULATE: the CPU
 * emulation test (tests/unit/test_prims_cuda_emu.cu) runs these very
 * functions with pthreads standing in for a block's threads. Nothing else
 * defines GCOLL_CUDA_EMULATE; the fatbin build sees plain __device__ code. */
#if defined(GCOLL_CUDA_EMULATE)
#define GCOLL_DEV __host__ __device__
#else
#define GCOLL_DEV __device__
#endif

/* The names the algorithm headers use (see prims.h). */
#define GCOLL_KERNEL_FN GCOLL_DEV static inline
#define GCOLL_PRIMS_PROVIDED 1
#define GCOLL_PRIMS_MAX_PEERS GCOLL_CUDA_MAX_PEERS
#define GCOLL_STEPS GCOLL_CUDA_FIFO_STEPS
#define GCOLL_CHUNK_STEPS (GCOLL_STEPS / 2)

/* Polls between abort/deadline checks, and polls before sleeping. */
#define GCOLL_DEV_CHECK_EVERY 64u
#define GCOLL_DEV_SPINS_BEFORE_SLEEP 4096u
#define GCOLL_DEV_SLEEP_NS 200u

/* fifo.h's struct gcoll_fifo without C11 atomics (see cuda_work.h). */
struct gcoll_dev_fifo {
  alignas(64) uint64_t tail;
  uint32_t tail_asleep;          /* host waiters only; a kernel never wakes */
  uint32_t nbytes[GCOLL_CUDA_FIFO_STEPS];
  uint8_t proto[GCOLL_CUDA_FIFO_STEPS];
  alignas(64) uint64_t head;
  alignas(64) uint64_t slot_bytes;
  uint64_t ll_slot_bytes;
  uint64_t simple_offset;
  uint64_t ll_offset;
};
static_assert(offsetof(gcoll_dev_fifo, tail) == GCOLL_CUDA_FIFO_OFF_TAIL, "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, head) == GCOLL_CUDA_FIFO_OFF_HEAD, "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, slot_bytes) == GCOLL_CUDA_FIFO_OFF_SLOT_BYTES,
              "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, ll_slot_bytes) == GCOLL_CUDA_FIFO_OFF_LL_SLOT_BYTES,
              "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, simple_offset) == GCOLL_CUDA_FIFO_OFF_SIMPLE_OFFSET,
              "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, ll_offset) == GCOLL_CUDA_FIFO_OFF_LL_OFFSET,
              "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, nbytes) == GCOLL_CUDA_FIFO_OFF_NBYTES, "FIFO layout");
static_assert(offsetof(gcoll_dev_fifo, proto) == GCOLL_CUDA_FIFO_OFF_PROTO, "FIFO layout");
static_assert(sizeof(gcoll_dev_fifo) == GCOLL_CUDA_FIFO_HEADER, "FIFO layout");

/* Per-block state in shared memory: where to look for aborts, the
 * deadline, and the first failure of the block. */
struct gcoll_dev_block {
  int result;
  int what, reason, peer;
  unsigned long long step;
  int *abort_word;
  int *local_abort;
  uint64_t deadline;
  uint64_t pre;                  /* a pre-mul-sum's scalar, in the type's bits */
};

/* ---- the block's threads, real or emulated -------------------------------
 * The emulation (host pass with GCOLL_CUDA_EMULATE) supplies these from the
 * test: per-thread index and count, block barriers, a yield while polling. */
#if !defined(__CUDA_ARCH__) && defined(GCOLL_CUDA_EMULATE)
extern thread_local int gcoll_emu_tid, gcoll_emu_nthreads;
void gcoll_emu_barrier(void);
int gcoll_emu_barrier_or(int v);
void gcoll_emu_pause(void);
#endif

GCOLL_DEV static inline int gcoll_dev_tid(void) {
#if defined(__CUDA_ARCH__)
  return (int)threadIdx.x;
#elif defined(GCOLL_CUDA_EMULATE)
  return gcoll_emu_tid;
#else
  return 0;
#endif
}
GCOLL_DEV static inline int gcoll_dev_nthreads(void) {
#if defined(__CUDA_ARCH__)
  return (int)blockDim.x;
#elif defined(GCOLL_CUDA_EMULATE)
  return gcoll_emu_nthreads;
#else
  return 1;
#endif
}
GCOLL_DEV static inline void gcoll_dev_barrier(void) {
#if defined(__CUDA_ARCH__)
  __syncthreads();
#elif defined(GCOLL_CUDA_EMULATE)
  gcoll_emu_barrier();
#endif
}
/* Barrier that also returns whether any thread passed a non-zero v. */
GCOLL_DEV static inline int gcoll_dev_barrier_or(int v) {
#if defined(__CUDA_ARCH__)
  return __syncthreads_or(v);
#elif defined(GCOLL_CUDA_EMULATE)
  return gcoll_emu_barrier_or(v);
#else
  return v;
#endif
}
GCOLL_DEV static inline void gcoll_dev_fence_system(void) {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}
/* Compare-and-swap on a block-shared int (the first failure wins). */
GCOLL_DEV static inline int gcoll_dev_cas_block(int *p, int expected, int desired) {
#if defined(__CUDA_ARCH__)
  return atomicCAS(p, expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
#endif
}
/* The same on a word other GPUs or the host may also update. */
GCOLL_DEV static inline int gcoll_dev_cas_system(int *p, int expected, int desired) {
#if defined(__CUDA_ARCH__)
  return atomicCAS_system(p, expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
#endif
}
GCOLL_DEV static inline void gcoll_dev_sleep(void) {
#if defined(__CUDA_ARCH__)
  __nanosleep(GCOLL_DEV_SLEEP_NS);
#elif defined(GCOLL_CUDA_EMULATE)
  gcoll_emu_pause();
#endif
}
GCOLL_DEV static inline uint64_t gcoll_dev_now_ns(void) {
#if defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* ---- system-scope accesses --------------------------------------------- */

typedef cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> gcoll_dev_ref64;
typedef cuda::atomic_ref<int, cuda::thread_scope_system> gcoll_dev_ref32;

GCOLL_DEV static inline uint64_t gcoll_dev_load_acquire(uint64_t *p) {
  return gcoll_dev_ref64(*(unsigned long long *)p).load(cuda::memory_order_acquire);
}
GCOLL_DEV static inline uint64_t gcoll_dev_load_relaxed(uint64_t *p) {
  return gcoll_dev_ref64(*(unsigned long long *)p).load(cuda::memory_order_relaxed);
}
GCOLL_DEV static inline void gcoll_dev_store_release(uint64_t *p, uint64_t v) {
  gcoll_dev_ref64(*(unsigned long long *)p).store(v, cuda::memory_order_release);
}
GCOLL_DEV static inline void gcoll_dev_store_relaxed(uint64_t *p, uint64_t v) {
  gcoll_dev_ref64(*(unsigned long long *)p).store(v, cuda::memory_order_relaxed);
}
GCOLL_DEV static inline int gcoll_dev_load_word(int *p) {
  return p == NULL ? 0 : gcoll_dev_ref32(*p).load(cuda::memory_order_relaxed);
}

/* ---- failures and waits -------------------------------------------------- */

/* Records the block's first failure (later ones lose the race) and returns
 * the block's result, which is what every thread will report. */
GCOLL_DEV static inline int gcoll_dev_fail(struct gcoll_dev_block *b, int result, int reason,
                                           int what, int peer, uint64_t step) {
  if (gcoll_dev_cas_block(&b->result, 0, result) == 0) {
    b->reason = reason;
    b->what = what;
    b->peer = peer;
    b->step = step;
  }
  return *(volatile int *)&b->result;
}

/* Thread 0, at a launch's start: no failure yet, where to look for aborts,
 * the deadline counted from now. */
GCOLL_DEV static inline void gcoll_dev_block_start(struct gcoll_dev_block *b, uint64_t abort_word,
                                                   uint64_t local_abort, uint64_t timeout_ns) {
  b->result = 0;
  b->what = GCOLL_CUDA_FAIL_NONE;
  b->reason = GCOLL_CUDA_REASON_NONE;
  b->peer = -1;
  b->step = 0;
  b->abort_word = (int *)abort_word;
  b->local_abort = (int *)local_abort;
  const uint64_t now = gcoll_dev_now_ns();
  b->deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
}

/* Thread 0, at a launch's end: the block's result into its host-mapped
 * status row, `done` last, after a system fence. */
GCOLL_DEV static inline void gcoll_dev_block_report(const struct gcoll_dev_block *b, int result,
                                                    struct gcoll_cuda_status *row) {
  volatile struct gcoll_cuda_status *st = row;
  st->result = (int32_t)result;
  st->what = result == 0 ? GCOLL_CUDA_FAIL_NONE : b->what;
  st->reason = b->reason;
  st->peer = b->peer;
  st->step = b->step;
  gcoll_dev_fence_system();
  st->done = 1;
}

/* One check of everything that ends a wait early; 0 to keep waiting. */
GCOLL_DEV static inline int gcoll_dev_check(struct gcoll_dev_block *b, int what, int peer,
                                            uint64_t step) {
  int r = *(volatile int *)&b->result;
  if (r != 0) return r; /* another thread of this block failed */
  if ((r = gcoll_dev_load_word(b->abort_word)) != 0)
    return gcoll_dev_fail(b, r, GCOLL_CUDA_REASON_ABORTED, what, peer, step);
  if ((r = gcoll_dev_load_word(b->local_abort)) != 0)
    return gcoll_dev_fail(b, r, GCOLL_CUDA_REASON_SIBLING, what, peer, step);
  if (gcoll_dev_now_ns() > b->deadline)
    return gcoll_dev_fail(b, gcollSystemError, GCOLL_CUDA_REASON_DEADLINE, what, peer, step);
  return 0;
}

/* Back-off for poll number `spins` (counted from 1): a check every
 * GCOLL_DEV_CHECK_EVERY polls, sleeping once the wait has gone on a while. */
GCOLL_DEV static inline int gcoll_dev_backoff(struct gcoll_dev_block *b, uint32_t spins,
                                              int what, int peer, uint64_t step) {
  if (spins % GCOLL_DEV_CHECK_EVERY != 0) return 0;
  int r = gcoll_dev_check(b, what, peer, step);
  if (r == 0 && spins >= GCOLL_DEV_SPINS_BEFORE_SLEEP) gcoll_dev_sleep();
  return r;
}

/* Waits until *ctr >= target (acquire). */
GCOLL_DEV static inline int gcoll_dev_wait_ge(struct gcoll_dev_block *b, uint64_t *ctr,
                                              uint64_t target, int what, int peer,
                                              uint64_t step) {
  uint32_t spins = 0;
  while (gcoll_dev_load_acquire(ctr) < target) {
    int r = gcoll_dev_backoff(b, ++spins, what, peer, step);
    if (r != 0) return r;
  }
  return 0;
}

/* ---- the prims object ------------------------------------------------------ */

struct gcoll_prims {
  int nrecv, nsend;
  struct gcoll_dev_fifo *recv[GCOLL_PRIMS_MAX_PEERS];
  struct gcoll_dev_fifo *send[GCOLL_PRIMS_MAX_PEERS];
  uint64_t recv_step[GCOLL_PRIMS_MAX_PEERS];
  uint64_t send_step[GCOLL_PRIMS_MAX_PEERS];
  int proto, dtype;
  size_t esize;
  size_t step_elems;             /* elements per FIFO step (0 without peers) */
  size_t slot_bytes;             /* SIMPLE payload bytes per slot */
  const char *src;
  char *dst;
  char *scratch[GCOLL_CUDA_SCRATCH];
  gcoll_cuda_reduce_fn reduce;   /* the (type, op) instantiation */
  const uint64_t *pre;           /* pre-mul-sum: src is scaled by this as it is read */
  struct gcoll_dev_block *blk;
};

GCOLL_DEV static inline char *gcoll_dev_simple_slot(struct gcoll_dev_fifo *f, uint64_t s) {
  return (char *)f + f->simple_offset + (s % GCOLL_STEPS) * f->slot_bytes;
}
GCOLL_DEV static inline uint64_t *gcoll_dev_ll_slot(struct gcoll_dev_fifo *f, uint64_t s) {
  return (uint64_t *)((char *)f + f->ll_offset + (s % GCOLL_STEPS) * f->ll_slot_bytes);
}

GCOLL_DEV static inline int gcoll_dev_slot_bytes_valid(uint64_t b) {
  return b >= 64 && b <= (64ull << 20) && b % 64 == 0;
}

/* All threads: binds connections, loads step positions from the FIFOs (each
 * side is the only writer of its counter), mirrors gcoll_prims_setup's
 * checks. Returns gcollInvalidArgument on bad connections or scratch. */
GCOLL_DEV static inline gcollResult_t gcoll_dev_prims_setup(
    struct gcoll_prims *p, const uint64_t *recv, int nrecv, const uint64_t *send, int nsend,
    int proto, int dtype, size_t esize, gcoll_cuda_reduce_fn reduce, char *scratch,
    size_t scratch_bytes, struct gcoll_dev_block *blk) {
  p->nrecv = nrecv;
  p->nsend = nsend;
  p->proto = proto;
  p->dtype = dtype;
  p->esize = esize;
  p->reduce = reduce;
  p->blk = blk;
  p->pre = NULL;
  p->src = NULL;
  p->dst = NULL;
  p->slot_bytes = 0;
  if (nrecv < 0 || nrecv > GCOLL_PRIMS_MAX_PEERS || nsend < 0 ||
      nsend > GCOLL_PRIMS_MAX_PEERS || esize == 0 || reduce == NULL ||
      (proto != GCOLL_PROTO_SIMPLE && proto != GCOLL_PROTO_LL))
    return gcollInvalidArgument;
  for (int i = 0; i < nrecv + nsend; i++) {
    struct gcoll_dev_fifo *f = (struct gcoll_dev_fifo *)(i < nrecv ? recv[i] : send[i - nrecv]);
    if (f == NULL || !gcoll_dev_slot_bytes_valid(f->slot_bytes) ||
        (p->slot_bytes != 0 && f->slot_bytes != p->slot_bytes))
      return gcollInvalidArgument;
    p->slot_bytes = f->slot_bytes;
    if (i < nrecv) {
      p->recv[i] = f;
      p->recv_step[i] = gcoll_dev_load_relaxed(&f->head);
    } else {
      p->send[i - nrecv] = f;
      p->send_step[i - nrecv] = gcoll_dev_load_relaxed(&f->tail);
    }
  }
  size_t payload = proto == GCOLL_PROTO_LL ? p->slot_bytes / 4 : p->slot_bytes;
  if (proto == GCOLL_PROTO_LL && nrecv + nsend > 0 &&
      (scratch == NULL || scratch_bytes < payload || scratch_bytes % 16 != 0))
    return gcollInvalidArgument;
  for (int i = 0; i < GCOLL_CUDA_SCRATCH; i++)
    p->scratch[i] = scratch == NULL ? NULL : scratch + (size_t)i * scratch_bytes;
  p->step_elems = payload / esize;
  return gcollSuccess;
}

GCOLL_KERNEL_FN void gcoll_prims_bind(struct gcoll_prims *p, const void *src, void *dst) {
  p->src = (const char *)src;
  p->dst = (char *)dst;
}

GCOLL_KERNEL_FN size_t gcoll_prims_chunk_elems(const struct gcoll_prims *p) {
  return p->step_elems * GCOLL_CHUNK_STEPS;
}

/* ---- one FIFO step ------------------------------------------------------ */

enum { GCOLL_DEV_SRC = 1, GCOLL_DEV_RECV = 2, GCOLL_DEV_DST = 4, GCOLL_DEV_SEND = 8 };

/* Thread 0's waits before a step: SIMPLE data from every receive peer (and
 * a step of the expected size and protocol), a free slot at every send
 * peer. Returns nonzero (recorded in the block) on failure. */
GCOLL_DEV static inline int gcoll_dev_step_waits(struct gcoll_prims *p, unsigned ops,
                                                 uint32_t nb) {
  struct gcoll_dev_block *b = p->blk;
  int r;
  if ((ops & GCOLL_DEV_RECV) && p->proto == GCOLL_PROTO_SIMPLE) {
    for (int i = 0; i < p->nrecv; i++) {
      struct gcoll_dev_fifo *f = p->recv[i];
      uint64_t s = p->recv_step[i];
      if ((r = gcoll_dev_wait_ge(b, &f->tail, s + 1, GCOLL_CUDA_FAIL_RECV_DATA, i, s)) != 0)
        return r;
      unsigned slot = (unsigned)(s % GCOLL_STEPS);
      if (((volatile uint32_t *)f->nbytes)[slot] != nb ||
          ((volatile uint8_t *)f->proto)[slot] != GCOLL_PROTO_SIMPLE)
        return gcoll_dev_fail(b, gcollInternalError, GCOLL_CUDA_REASON_NONE,
                              GCOLL_CUDA_FAIL_MISMATCH, i, s);
    }
  }
  if (ops & GCOLL_DEV_SEND) {
    for (int j = 0; j < p->nsend; j++) {
      uint64_t s = p->send_step[j];
      if (s < GCOLL_STEPS) continue; /* the first STEPS slots start free */
      if ((r = gcoll_dev_wait_ge(b, &p->send[j]->head, s - GCOLL_STEPS + 1,
                                 GCOLL_CUDA_FAIL_SEND_SLOT, j, s)) != 0)
        return r;
    }
  }
  return 0;
}

/* All threads: polls the LL lines of receive peer i's current step and
 * unpacks nb bytes into out (16-byte aligned scratch). */
GCOLL_DEV static inline int gcoll_dev_ll_receive(struct gcoll_prims *p, int i, size_t nb,
                                                 char *out) {
  const uint64_t s = p->recv_step[i];
  uint64_t *lines = gcoll_dev_ll_slot(p->recv[i], s);
  const uint32_t flag = (uint32_t)(s + 1);
  const size_t nlines = (nb + 3) / 4;
  for (size_t l = (size_t)gcoll_dev_tid(); l < nlines; l += (size_t)gcoll_dev_nthreads()) {
    uint64_t v = gcoll_dev_load_relaxed(&lines[l]);
    uint32_t spins = 0;
    while ((uint32_t)(v >> 32) != flag) {
      int r = gcoll_dev_backoff(p->blk, ++spins, GCOLL_CUDA_FAIL_RECV_DATA, i, s);
      if (r != 0) return r;
      v = gcoll_dev_load_relaxed(&lines[l]);
    }
    const uint32_t word = (uint32_t)v;
    if (4 * l + 4 <= nb) {
      ((uint32_t *)out)[l] = word;
    } else {
      for (size_t k = 0; 4 * l + k < nb; k++) out[4 * l + k] = (char)(word >> (8 * k));
    }
  }
  return 0;
}

/* All threads: writes nb bytes of `in` as LL lines of send peer j's step. */
GCOLL_DEV static inline void gcoll_dev_ll_send(struct gcoll_prims *p, int j, const char *in,
                                               size_t nb) {
  const uint64_t s = p->send_step[j];
  uint64_t *lines = gcoll_dev_ll_slot(p->send[j], s);
  const uint64_t flag = (uint64_t)(uint32_t)(s + 1) << 32;
  const size_t nlines = (nb + 3) / 4;
  const int aligned = (uintptr_t)in % 4 == 0;
  for (size_t l = (size_t)gcoll_dev_tid(); l < nlines; l += (size_t)gcoll_dev_nthreads()) {
    uint32_t word = 0;
    if (aligned && 4 * l + 4 <= nb) {
      word = ((const uint32_t *)in)[l];
    } else {
      for (size_t k = 0; k < 4 && 4 * l + k < nb; k++)
        word |= (uint32_t)(unsigned char)in[4 * l + k] << (8 * k);
    }
    gcoll_dev_store_relaxed(&lines[l], (uint64_t)word | flag);
  }
}

/* Thread 0 after the block's barrier: publish the step to every send peer
 * (size and protocol for proxies, then tail) and free the receive slots. */
GCOLL_DEV static inline void gcoll_dev_post(struct gcoll_prims *p, unsigned ops, uint32_t nb) {
  if (ops & GCOLL_DEV_SEND) {
    gcoll_dev_fence_system();
    for (int j = 0; j < p->nsend; j++) {
      struct gcoll_dev_fifo *f = p->send[j];
      uint64_t s = p->send_step[j];
      unsigned slot = (unsigned)(s % GCOLL_STEPS);
      ((volatile uint32_t *)f->nbytes)[slot] = nb;
      ((volatile uint8_t *)f->proto)[slot] = (uint8_t)p->proto;
      gcoll_dev_store_release(&f->tail, s + 1);
    }
  }
  if (ops & GCOLL_DEV_RECV)
    for (int i = 0; i < p->nrecv; i++) gcoll_dev_store_release(&p->recv[i]->head,
                                                               p->recv_step[i] + 1);
}

/* One step of m elements; every thread returns the same result. */
GCOLL_DEV static inline gcollResult_t gcoll_dev_step(struct gcoll_prims *p, unsigned ops,
                                                     const char *src, char *dst, size_t m) {
  const size_t nb = m * p->esize;
  const int ll = p->proto == GCOLL_PROTO_LL;
  int failed = 0;
  if (gcoll_dev_tid() == 0) failed = gcoll_dev_step_waits(p, ops, (uint32_t)nb) != 0;
  if ((ops & GCOLL_DEV_RECV) && ll)
    for (int i = 0; i < p->nrecv && !failed; i++)
      failed = gcoll_dev_ll_receive(p, i, nb, p->scratch[i]) != 0;
  if (gcoll_dev_barrier_or(failed)) return (gcollResult_t)*(volatile int *)&p->blk->result;

  const void *in[GCOLL_CUDA_MAX_SRCS];
  void *out[GCOLL_CUDA_MAX_DSTS];
  int nin = 0, nout = 0;
  if (ops & GCOLL_DEV_SRC) in[nin++] = src;
  if (ops & GCOLL_DEV_RECV)
    for (int i = 0; i < p->nrecv; i++)
      in[nin++] = ll ? (const void *)p->scratch[i]
                     : (const void *)gcoll_dev_simple_slot(p->recv[i], p->recv_step[i]);
  if (ops & GCOLL_DEV_DST) out[nout++] = dst;
  if ((ops & GCOLL_DEV_SEND) && !ll)
    for (int j = 0; j < p->nsend; j++)
      out[nout++] = gcoll_dev_simple_slot(p->send[j], p->send_step[j]);
  /* LL sends pack from `res` after the pass: dst when written, the input
   * itself when there is nothing to combine, else the accumulator. */
  /* A pre-mul-sum's input is never sent or kept as it is. */
  const uint64_t *pre = (ops & GCOLL_DEV_SRC) ? p->pre : NULL;
  const char *res = (const char *)in[0];
  if (ops & GCOLL_DEV_DST) {
    res = dst;
  } else if (ll && (ops & GCOLL_DEV_SEND) && (nin > 1 || pre != NULL)) {
    out[nout++] = p->scratch[GCOLL_CUDA_SCRATCH - 1];
    res = p->scratch[GCOLL_CUDA_SCRATCH - 1];
  }
  const int in_place_copy = nin == 1 && nout == 1 && out[0] == in[0] && pre == NULL;
  if (nout > 0 && !in_place_copy)
    p->reduce(gcoll_dev_tid(), gcoll_dev_nthreads(), out, nout, in, nin, m, pre);
  gcoll_dev_barrier();
  if ((ops & GCOLL_DEV_SEND) && ll) {
    for (int j = 0; j < p->nsend; j++) gcoll_dev_ll_send(p, j, res, nb);
    gcoll_dev_barrier();
  }
  if (gcoll_dev_tid() == 0) gcoll_dev_post(p, ops, (uint32_t)nb);
  if (ops & GCOLL_DEV_SEND)
    for (int j = 0; j < p->nsend; j++) p->send_step[j]++;
  if (ops & GCOLL_DEV_RECV)
    for (int i = 0; i < p->nrecv; i++) p->recv_step[i]++;
  return gcollSuccess;
}

GCOLL_DEV static inline gcollResult_t gcoll_dev_prim(struct gcoll_prims *p, unsigned ops,
                                                     size_t src_off, size_t dst_off,
                                                     size_t n) {
  if (n == 0) return gcollSuccess;
  if (((ops & GCOLL_DEV_RECV) && p->nrecv == 0) || ((ops & GCOLL_DEV_SEND) && p->nsend == 0) ||
      ((ops & GCOLL_DEV_SRC) && p->src == NULL) || ((ops & GCOLL_DEV_DST) && p->dst == NULL) ||
      ((ops & (GCOLL_DEV_RECV | GCOLL_DEV_SEND)) && p->step_elems == 0)) {
    if (gcoll_dev_tid() == 0)
      gcoll_dev_fail(p->blk, gcollInternalError, GCOLL_CUDA_REASON_NONE,
                     GCOLL_CUDA_FAIL_SETUP, -1, 0);
    return gcollInternalError;
  }
  const size_t per_step = (ops & (GCOLL_DEV_RECV | GCOLL_DEV_SEND)) ? p->step_elems : n;
  const char *src = (ops & GCOLL_DEV_SRC) ? p->src + src_off * p->esize : NULL;
  char *dst = (ops & GCOLL_DEV_DST) ? p->dst + dst_off * p->esize : NULL;
  for (size_t done = 0; done < n;) {
    const size_t m = n - done < per_step ? n - done : per_step;
    gcollResult_t r = gcoll_dev_step(p, ops, src ? src + done * p->esize : NULL,
                                     dst ? dst + done * p->esize : NULL, m);
    if (r != gcollSuccess) return r;
    done += m;
  }
  return gcollSuccess;
}

/* ---- prims.h's operations -------------------------------------------------- */

GCOLL_KERNEL_FN gcollResult_t gcoll_prim_send(struct gcoll_prims *p, size_t src_off, size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_SEND, src_off, 0, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_recv(struct gcoll_prims *p, size_t dst_off, size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_RECV | GCOLL_DEV_DST, 0, dst_off, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_recvReduceSend(struct gcoll_prims *p, size_t src_off,
                                                        size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_RECV | GCOLL_DEV_SEND, src_off, 0, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_recvReduceCopy(struct gcoll_prims *p, size_t src_off,
                                                        size_t dst_off, size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_RECV | GCOLL_DEV_DST, src_off, dst_off,
                        n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_recvReduceCopySend(struct gcoll_prims *p,
                                                            size_t src_off, size_t dst_off,
                                                            size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_RECV | GCOLL_DEV_DST | GCOLL_DEV_SEND,
                        src_off, dst_off, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_recvCopySend(struct gcoll_prims *p, size_t dst_off,
                                                      size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_RECV | GCOLL_DEV_DST | GCOLL_DEV_SEND, 0, dst_off, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_copySend(struct gcoll_prims *p, size_t src_off,
                                                  size_t dst_off, size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_DST | GCOLL_DEV_SEND, src_off, dst_off, n);
}
GCOLL_KERNEL_FN gcollResult_t gcoll_prim_copy(struct gcoll_prims *p, size_t src_off,
                                              size_t dst_off, size_t n) {
  return gcoll_dev_prim(p, GCOLL_DEV_SRC | GCOLL_DEV_DST, src_off, dst_off, n);
}

#endif
