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

#define GCOLL_STEPS 8
#define GCOLL_FIFO_ALIGN 64
/* Slot sizes are multiples of 64 so every slot and every LL payload (a
 * quarter of the slot) stays 16-byte aligned for vector loops. */
#define GCOLL_FIFO_MIN_SLOT 64
#define GCOLL_FIFO_MAX_SLOT (64u << 20)

/* enum gcoll_proto (SIMPLE, LL; the host executor has no LL128) comes
 * from the public plan header so plan choices pass through unchanged. */

struct gcoll_fifo {
  alignas(64) _Atomic uint64_t tail;
  alignas(64) _Atomic uint64_t head;
  alignas(64) uint64_t slot_bytes;   /* SIMPLE payload bytes per step */
  uint64_t ll_slot_bytes;            /* LL line bytes per step (2x payload) */
  uint64_t simple_offset;            /* from the header start, 64-aligned */
  uint64_t ll_offset;
  uint32_t nbytes[GCOLL_STEPS];      /* payload bytes of the step in a slot */
  uint32_t proto[GCOLL_STEPS];       /* enum gcoll_proto of that step */
};

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "FIFO counters must be lock-free to work across processes");
_Static_assert(offsetof(struct gcoll_fifo, head) == 64, "FIFO layout");
_Static_assert(offsetof(struct gcoll_fifo, slot_bytes) == 128, "FIFO layout");
_Static_assert(sizeof(struct gcoll_fifo) == 256, "FIFO layout");

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

/* The header of an empty FIFO with this slot size, on its own: for a FIFO
 * in memory the host cannot write directly (GPU memory), whose slots are
 * zeroed by other means. 0, or -1 when slot_bytes is invalid. */
static inline int gcoll_fifo_header_init(struct gcoll_fifo *f, size_t slot_bytes) {
  if (!gcoll_fifo_slot_bytes_valid(slot_bytes)) return -1;
  memset(f, 0, sizeof(*f));
  atomic_init(&f->tail, 0);
  atomic_init(&f->head, 0);
  f->slot_bytes = slot_bytes;
  f->ll_slot_bytes = gcoll_fifo_ll_slot_bytes(slot_bytes);
  f->simple_offset = sizeof(struct gcoll_fifo);
  f->ll_offset = f->simple_offset + GCOLL_STEPS * slot_bytes;
  return 0;
}

/* Formats gcoll_fifo_bytes(slot_bytes) bytes at mem (64-byte aligned) as an
 * empty FIFO and touches every page once, so no step pays first-touch
 * faults. Returns NULL when slot_bytes or the alignment is invalid. Both ends
 * must be idle. */
static inline struct gcoll_fifo *gcoll_fifo_init(void *mem, size_t slot_bytes) {
  size_t total = gcoll_fifo_bytes(slot_bytes);
  if (mem == NULL || total == 0 || (uintptr_t)mem % GCOLL_FIFO_ALIGN != 0)
    return NULL;
  memset(mem, 0, total);
  struct gcoll_fifo *f = (struct gcoll_fifo *)mem;
  gcoll_fifo_header_init(f, slot_bytes);
  return f;
}

/* Where the LL region starts: the bytes before it (header and SIMPLE
 * slots) are what a FIFO of this slot size uses when it never runs LL. */
static inline size_t gcoll_fifo_ll_offset(size_t slot_bytes) {
  return sizeof(struct gcoll_fifo) + GCOLL_STEPS * slot_bytes;
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
