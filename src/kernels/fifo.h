/* The connection FIFO: one direction of one connection between two ranks.
 *
 * A single-producer single-consumer ring of GCOLL_STEPS slots. The memory may
 * be shared between processes (POSIX shm, mapped at different addresses), or
 * be local to one process and drained/filled by a network proxy, so the
 * layout holds no pointers: only counters, sizes and offsets from the start
 * of the header. The layout is an ABI between processes and executors (a CUDA
 * executor maps the same bytes), hence the static assertions below.
 *
 * Counters count steps since the FIFO was initialised and never wrap in
 * practice (64 bits). Step s uses slot s % GCOLL_STEPS.
 *
 *   tail  written by the producer only: steps 0..tail-1 are published.
 *   head  written by the consumer only: steps 0..head-1 are consumed, their
 *         slots may be overwritten.
 *
 * Each counter has its own 64-byte line so producer and consumer do not
 * false-share. Because each side is the only writer of its counter, an
 * executor recovers its step position from the FIFO itself (its send step is
 * tail, its receive step is head) and keeps no counters between calls.
 *
 * Protocol SIMPLE (bandwidth): the producer waits until head + GCOLL_STEPS >
 * s (acquire), writes the payload into simple slot s%STEPS, stores nbytes and
 * proto for the slot, then publishes with tail = s+1 (release). The consumer
 * waits until tail > s (acquire), reads nbytes and the data, then frees the
 * slot with head = s+1 (release). Release/acquire pairs make the plain data
 * writes visible before the counter that announces them, in both directions.
 *
 * Protocol LL (latency, small messages): data travels in 8-byte lines of
 * {4 data bytes, 4 flag bytes} in a separate LL region (the "LL slot" of a
 * step holds 2x its payload). The flag of every line of step s is
 * (uint32_t)(s+1); each line is written with one 8-byte atomic store, so a
 * consumer that sees the right flag in a line also sees that line's data,
 * and it polls the lines themselves instead of waiting for tail. That saves
 * the producer's fence and the consumer's extra round trip on the counter.
 * Back-pressure still goes through head exactly as in SIMPLE. The producer
 * also stores nbytes/proto and bumps tail after the lines, so a proxy that
 * forwards the FIFO over a network can find published steps without knowing
 * the protocol in advance; a local consumer ignores tail for LL.
 *
 * Sleep flags: next to each counter, in the line its writer already owns,
 * a word that is nonzero while the one waiter on that counter sleeps and
 * wants a wake-up (tail_asleep: the consumer waiting for data; head_asleep:
 * the producer waiting for a free slot; one of each, the FIFO being SPSC).
 * A host writer publishes through gcoll_fifo_set_tail/gcoll_fifo_set_head,
 * which wake it (wait.h has the protocol and its ordering). The CUDA side
 * mirrors the offsets (cuda_work.h). A device kernel never wakes; a host
 * waiter on a FIFO a kernel fills would sleep to its timeout (none exists:
 * the host cannot read GPU memory, kernels wait on the GPU).
 * An LL consumer sleeps on tail as well: the producer bumps tail after the
 * lines, so tail > s means the lines of step s are there.
 *
 * LL has its own region (not the SIMPLE slots) because stale SIMPLE payload
 * is arbitrary bytes that could look like a valid flag. Both protocols share
 * the one step counter, so every flag value in the LL region is unique for
 * 2^32 steps: a stale line can only be mistaken for a current one if exactly
 * 2^32 steps separate them, which needs weeks of nonstop 1-step calls.
 * Zeroed memory (flag 0) never matches because flags start at 1.
 */
#ifndef GCOLL_KERNELS_FIFO_H
#define GCOLL_KERNELS_FIFO_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gcoll_plan.h"
#include "kernels/wait.h"

#define GCOLL_STEPS 8
#define GCOLL_FIFO_ALIGN 64
/* Slot sizes are multiples of 64 so every slot and every LL payload (a
 * quarter of the slot) stays 16-byte aligned for vector loops. */
#define GCOLL_FIFO_MIN_SLOT 64
#define GCOLL_FIFO_MAX_SLOT (64u << 20)

/* enum gcoll_proto (SIMPLE, LL; the host executor has no LL128) comes
 * from the public plan header so plan choices pass through unchanged. */

/* Three lines, by who writes them. The producer's line carries the step
 * descriptions (nbytes, proto) next to tail: the consumer fetches that line
 * to see tail move anyway, so a step's size comes with it instead of costing
 * a second line from the producer's core. The consumer's line holds head.
 * The third is written once at init and only read after, so every reader
 * keeps it cached: the address computations of each step (slot sizes,
 * offsets) then never miss, which matters when a whole step is one line. */
struct gcoll_fifo {
  alignas(64) _Atomic uint64_t tail;
  _Atomic uint32_t tail_asleep;      /* the consumer sleeps on tail */
  uint32_t nbytes[GCOLL_STEPS];      /* payload bytes of the step in a slot */
  uint8_t proto[GCOLL_STEPS];        /* enum gcoll_proto of that step */
  alignas(64) _Atomic uint64_t head;
  _Atomic uint32_t head_asleep;      /* the producer sleeps on head */
  alignas(64) uint64_t slot_bytes;   /* SIMPLE payload bytes per step */
  uint64_t ll_slot_bytes;            /* LL line bytes per step (2x payload) */
  uint64_t simple_offset;            /* from the header start, 64-aligned */
  uint64_t ll_offset;
};

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "FIFO counters must be lock-free to work across processes");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2,
               "FIFO sleeper words must be lock-free to work across processes");
_Static_assert(offsetof(struct gcoll_fifo, tail_asleep) == 8, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, nbytes) == 12, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, proto) == 44, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, head) == 64, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, head_asleep) == 72, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, slot_bytes) == 128, "FIFO layout");
_Static_assert(sizeof(struct gcoll_fifo) == 192, "FIFO layout");
_Static_assert(GCOLL_PROTO_SIMPLE < 256 && GCOLL_PROTO_LL < 256,
               "a step's protocol is stored in one byte");

static inline size_t gcoll_fifo_ll_slot_bytes(size_t slot_bytes) {
  return slot_bytes / 2;
}

/* Payload bytes one step carries under a protocol. */
static inline size_t gcoll_fifo_payload(const struct gcoll_fifo *f,
                                        enum gcoll_proto proto) {
  return proto == GCOLL_PROTO_LL ? (size_t)f->ll_slot_bytes / 2
                                 : (size_t)f->slot_bytes;
}

static inline int gcoll_fifo_slot_bytes_valid(size_t slot_bytes) {
  return slot_bytes >= GCOLL_FIFO_MIN_SLOT && slot_bytes <= GCOLL_FIFO_MAX_SLOT &&
         slot_bytes % GCOLL_FIFO_ALIGN == 0;
}

/* Bytes to allocate (64-byte aligned) for a FIFO with this SIMPLE slot size;
 * 0 when slot_bytes is not a multiple of 64 in [64, 64 MiB]. */
static inline size_t gcoll_fifo_bytes(size_t slot_bytes) {
  if (!gcoll_fifo_slot_bytes_valid(slot_bytes)) return 0;
  return sizeof(struct gcoll_fifo) +
         GCOLL_STEPS * (slot_bytes + gcoll_fifo_ll_slot_bytes(slot_bytes));
}

/* Where the LL region starts: the bytes before it (header and SIMPLE
 * slots) are what a FIFO of this slot size uses when it never runs LL. */
static inline size_t gcoll_fifo_ll_offset(size_t slot_bytes) {
  return sizeof(struct gcoll_fifo) + GCOLL_STEPS * slot_bytes;
}

/* The header of an empty FIFO with this slot size, on its own: for a FIFO
 * in memory the host cannot write directly (GPU memory), whose slots are
 * zeroed by other means. 0, or -1 when slot_bytes is invalid. */
static inline int gcoll_fifo_header_init(struct gcoll_fifo *f, size_t slot_bytes) {
  if (!gcoll_fifo_slot_bytes_valid(slot_bytes)) return -1;
  memset(f, 0, sizeof(*f));
  atomic_init(&f->tail, 0);
  atomic_init(&f->head, 0);
  atomic_init(&f->tail_asleep, 0);
  atomic_init(&f->head_asleep, 0);
  f->slot_bytes = slot_bytes;
  f->ll_slot_bytes = gcoll_fifo_ll_slot_bytes(slot_bytes);
  f->simple_offset = sizeof(struct gcoll_fifo);
  f->ll_offset = gcoll_fifo_ll_offset(slot_bytes);
  return 0;
}

/* As gcoll_fifo_init, for memory known to hold zeros (a fresh anonymous
 * mapping, a new shm file): the header and SIMPLE slots are touched now,
 * the LL region is left as the kernel gave it, which zero flags make an
 * empty one. The host's tuning picks LL only when told to, so its third of
 * every FIFO is otherwise never committed (a rank's FIFOs are most of its
 * init CPU, in first touches); an LL step faults its pages in once. */
static inline struct gcoll_fifo *gcoll_fifo_init_zeroed(void *mem, size_t slot_bytes) {
  size_t total = gcoll_fifo_bytes(slot_bytes);
  if (mem == NULL || total == 0 || (uintptr_t)mem % GCOLL_FIFO_ALIGN != 0)
    return NULL;
  struct gcoll_fifo *f = (struct gcoll_fifo *)mem;
  gcoll_fifo_header_init(f, slot_bytes);
  memset((char *)mem + f->simple_offset, 0, GCOLL_STEPS * slot_bytes);
  return f;
}

/* Formats gcoll_fifo_bytes(slot_bytes) bytes at mem (64-byte aligned) as an
 * empty FIFO and touches every page once, so no step pays first-touch
 * faults: gcoll_fifo_init_zeroed, then the LL region zeroed too. Returns
 * NULL when slot_bytes or the alignment is invalid. Both ends must be
 * idle. */
static inline struct gcoll_fifo *gcoll_fifo_init(void *mem, size_t slot_bytes) {
  struct gcoll_fifo *f = gcoll_fifo_init_zeroed(mem, slot_bytes);
  if (f != NULL) memset((char *)mem + f->ll_offset, 0, GCOLL_STEPS * (size_t)f->ll_slot_bytes);
  return f;
}

/* Orders a publish's counter store before its flag load (wait.h): a
 * full fence, or only a compiler barrier in a process registered for
 * membarrier (a sleeper then fences for it). */
static inline void gcoll_fifo_fence(void) {
  if (atomic_load_explicit(&gcoll_wait_fast, memory_order_relaxed))
    atomic_signal_fence(memory_order_seq_cst);
  else
    atomic_thread_fence(memory_order_seq_cst);
}

/* Publishes a counter (release: what it announces is visible first), then
 * wakes its waiter if it sleeps. gcoll_fifo_fence orders the store before
 * the flag's load (wait.h); on the fast path, nobody asleep, the cost is
 * that and one load of a line this side just wrote. Taking the flag
 * (exchange to 0) makes one wake-up per sleep: a producer that publishes
 * several steps while its waiter is still off the CPU (ranks > cores) would
 * otherwise pay a system call for each. take_asleep is that step alone,
 * for a publisher with several counters under one flag (host_oneshot.c). */
static inline int gcoll_fifo_take_asleep(_Atomic uint32_t *asleep) {
  return atomic_load_explicit(asleep, memory_order_relaxed) != 0 &&
         atomic_exchange_explicit(asleep, 0, memory_order_relaxed) != 0;
}
static inline void gcoll_fifo_wake_if_asleep(_Atomic uint64_t *ctr, _Atomic uint32_t *asleep) {
  if (gcoll_fifo_take_asleep(asleep)) gcoll_wait_wake(ctr);
}

/* The producer publishes steps 0..tail-1; the consumer frees 0..head-1. */
static inline void gcoll_fifo_set_tail(struct gcoll_fifo *f, uint64_t tail) {
  atomic_store_explicit(&f->tail, tail, memory_order_release);
  gcoll_fifo_fence();
  gcoll_fifo_wake_if_asleep(&f->tail, &f->tail_asleep);
}
static inline void gcoll_fifo_set_head(struct gcoll_fifo *f, uint64_t head) {
  atomic_store_explicit(&f->head, head, memory_order_release);
  gcoll_fifo_fence();
  gcoll_fifo_wake_if_asleep(&f->head, &f->head_asleep);
}

/* The same in two halves, for a side that publishes several counters at
 * once (a step of the host primitives: tails to every send peer, heads to
 * every receive peer): the stores, then one fence for all of them, then
 * gcoll_fifo_wake_tail/_head for each. The fence drains the store buffer,
 * payload included, so one per step instead of one per counter matters
 * at a microsecond a call. */
static inline void gcoll_fifo_store_tail(struct gcoll_fifo *f, uint64_t tail) {
  atomic_store_explicit(&f->tail, tail, memory_order_release);
}
static inline void gcoll_fifo_store_head(struct gcoll_fifo *f, uint64_t head) {
  atomic_store_explicit(&f->head, head, memory_order_release);
}
static inline void gcoll_fifo_wake_tail(struct gcoll_fifo *f) {
  gcoll_fifo_wake_if_asleep(&f->tail, &f->tail_asleep);
}
static inline void gcoll_fifo_wake_head(struct gcoll_fifo *f) {
  gcoll_fifo_wake_if_asleep(&f->head, &f->head_asleep);
}

static inline unsigned gcoll_fifo_slot(uint64_t step) {
  return (unsigned)(step % GCOLL_STEPS);
}

/* SIMPLE payload of step `step`. */
static inline void *gcoll_fifo_simple_slot(struct gcoll_fifo *f, uint64_t step) {
  return (char *)f + f->simple_offset + gcoll_fifo_slot(step) * f->slot_bytes;
}

/* LL lines of step `step`: ll_slot_bytes / 8 lines. */
static inline _Atomic uint64_t *gcoll_fifo_ll_slot(struct gcoll_fifo *f,
                                                   uint64_t step) {
  return (_Atomic uint64_t *)((char *)f + f->ll_offset +
                              gcoll_fifo_slot(step) * f->ll_slot_bytes);
}

/* LL line layout: data in the low 32 bits, flag in the high 32 bits. */
static inline uint64_t gcoll_ll_line(uint32_t data, uint64_t step) {
  return (uint64_t)data | ((uint64_t)(uint32_t)(step + 1) << 32);
}
static inline int gcoll_ll_line_ready(uint64_t line, uint64_t step) {
  return (uint32_t)(line >> 32) == (uint32_t)(step + 1);
}

#endif
