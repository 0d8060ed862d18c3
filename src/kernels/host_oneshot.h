/* The one-shot exchange of small host allreduces between the ranks of one
 * host: a board in shared memory that every rank maps, where each rank
 * writes its whole vector and then waits for everyone else's, one wait per
 * call. The gather form (host_exec.h) moves the same vectors around the
 * ring, nranks-1 dependent steps; with more ranks than cores each of those
 * is a trip through the scheduler, and 4 ranks on 2 cores paid three per
 * call where Open MPI's recursive doubling pays two (README, issue 17).
 * Every rank then reduces the vectors as the gather form does (the ring's
 * blocks and order), so the board changes the steps, never the result.
 *
 * Layout (pinned below; every rank checks it on attach): a 64-byte header,
 * one 64-byte line per rank with its arrival counter and sleep flag, then
 * two areas of nranks slots of slot_bytes each.
 *
 * Call k (k = 1, 2, ...; every rank counts the same calls, since the limit
 * that decides them is the same on every rank) uses area k % 2: a rank
 * copies its input into its slot there, publishes arrived = k, and waits
 * until every other rank's arrived reaches k. Reusing area k % 2 at call
 * k + 2 is safe without another wait: a rank starts call k + 2 only after
 * its call k + 1 saw every rank arrive at k + 1, and a rank arrives at
 * k + 1 only after it finished reading call k. Waits sleep on the arrival
 * counter's futex as FIFO waits do (wait.h), and the publisher wakes them.
 *
 * The board is memory the caller owns (the runtime maps it from a POSIX
 * shm segment only this user can open, see runtime/comm_oneshot.c); the
 * kernels know nothing of how it was shared. */
#ifndef GCOLL_KERNELS_HOST_ONESHOT_H
#define GCOLL_KERNELS_HOST_ONESHOT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "kernels/wait.h"

#define GCOLL_ONESHOT_MAGIC 0x484f4347u /* "GCOH" */
#define GCOLL_ONESHOT_VERSION 1u
#define GCOLL_ONESHOT_MAX_RANKS 4096

struct gcoll_oneshot_header {
  uint32_t magic, version;
  uint32_t nranks, unused;
  uint64_t slot_bytes;
  /* Ranks that mapped the board; the one that makes it nranks removes
   * the segment's name (runtime/comm_oneshot.c). */
  _Atomic uint32_t attached;
  uint32_t reserved[9];
};
_Static_assert(sizeof(struct gcoll_oneshot_header) == 64, "board layout");
_Static_assert(offsetof(struct gcoll_oneshot_header, slot_bytes) == 16, "board layout");
_Static_assert(offsetof(struct gcoll_oneshot_header, attached) == 24, "board layout");

/* A rank's line: written by that rank only (its arrivals) and by sleepers
 * raising the flag, read by every other rank. */
struct gcoll_oneshot_line {
  _Atomic uint64_t arrived;          /* the last call whose vector is in place */
  _Atomic uint32_t asleep;           /* a waiter sleeps on arrived (wait.h) */
  uint32_t unused;
  uint64_t reserved[6];
};
_Static_assert(sizeof(struct gcoll_oneshot_line) == 64, "one cache line per rank");
_Static_assert(offsetof(struct gcoll_oneshot_line, asleep) == 8, "board layout");

/* Bytes of a board for nranks ranks and slots of slot_bytes (a multiple
 * of 64); 0 when that overflows or nranks is out of range. */
size_t gcoll_oneshot_bytes(int nranks, uint64_t slot_bytes);

/* Formats zeroed memory of gcoll_oneshot_bytes(nranks, slot_bytes) bytes
 * (the creator, once, before anyone attaches). */
void gcoll_oneshot_format(void *mem, int nranks, uint64_t slot_bytes);

/* Whether mem (bytes long) is a board for nranks ranks; 0 or -1 with one
 * line in err. */
int gcoll_oneshot_check(const void *mem, size_t bytes, int nranks, char *err, size_t errlen);

/* The executor's handle on a board: its own rank and call count. */
struct gcoll_oneshot {
  struct gcoll_oneshot_header *hdr;  /* NULL: no board */
  struct gcoll_oneshot_line *lines;
  char *areas;
  uint64_t slot_bytes;
  int rank, nranks;
  uint64_t calls;
};

/* Binds a checked board (NULL: none; o->hdr stays NULL). */
void gcoll_oneshot_bind(struct gcoll_oneshot *o, void *mem, int rank);

/* Call k: copies nbytes (<= slot_bytes) of src into this rank's slot,
 * publishes, and waits (w) for every rank. On success *area is the
 * call's area (rank r's vector at r * slot_bytes); on failure *waited_for
 * is the rank it was waiting for and *call the call's number. */
gcollResult_t gcoll_oneshot_exchange(struct gcoll_oneshot *o, struct gcoll_wait *w,
                                     const void *src, size_t nbytes, const char **area,
                                     int *waited_for, uint64_t *call);

#endif
