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
 * gcoll_oneshot_small_areas(nranks) areas of nranks tiny lines, as many of
 * nranks slots of GCOLL_ONESHOT_SMALL_SLOT bytes, then GCOLL_ONESHOT_AREAS
 * areas of nranks slots of slot_bytes. Calls of up to a small slot a rank
 * take the small areas, which stay compact (64 areas of 4 ranks' tiny
 * calls span 32 pages, where slots of 16 KiB would span 1024).
 *
 * Calls of up to GCOLL_ONESHOT_TINY_BYTES a rank take the tiny lines: a
 * rank's input and the call's number in one cache line, which its readers
 * wait on instead of its arrival counter. A reader then fetches one line
 * from the writer's core per call, not two (counter, then slot), and the
 * writer's counter line stays in its own cache: between 2 ranks, where a
 * tiny broadcast or reduce costs about two such transfers, Open MPI's
 * eager fastbox pays one (README, issue 17). Among 3 or more ranks
 * they are 64, not 16: a broadcast's root or a reduce's leaves then run
 * up to 63 calls ahead, and with 4 ranks on 2 cores 8-512 B broadcasts
 * took 0.74-0.81x the time of 16 areas, reduces 0.52-0.60x, allreduces
 * 0.88-0.99x (3 ranks: broadcasts 0.76-0.99x). Between 2 ranks both run
 * and nobody gets far ahead: 64 areas made allreduces 1.05-1.17x slower
 * (each call's lines were colder), so pairs keep 16.
 *
 * Call k (k = 1, 2, ...; every rank counts the same calls, since what
 * decides them is the same on every rank) uses area k % AREAS (of its
 * size's set). A rank
 * copies its input (if the collective has it write one) into its slot
 * there, publishes arrived = k, and waits for the ranks whose slots it
 * reads: all of them (allreduce, allgather, reducescatter, a reduce's
 * root), one (a broadcast's readers wait for the root) or none (the
 * root of a broadcast, the other ranks of a reduce). A rank publishes
 * arrived = k only once it finished call k-1, so before it overwrites its
 * slot of area k % AREAS it needs every rank to have arrived at
 * k - AREAS + 1 (done with call k - AREAS, the area's last use): known
 * at no cost after a call that waited for everybody (AREAS >= 2), and
 * read from the lines now and then otherwise. That lets a broadcast's
 * root or a reduce's leaves run up to AREAS - 1 calls ahead, as eager
 * sends let Open MPI's. Waits sleep on the arrival counter's futex as
 * FIFO waits do (wait.h), and the publisher wakes them.
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
#define GCOLL_ONESHOT_VERSION 5u
/* Areas calls rotate through: how far ahead a rank that waits for nobody
 * may run (see above). */
#define GCOLL_ONESHOT_AREAS 16
/* Small calls among 3 or more ranks rotate through more (see above). */
#define GCOLL_ONESHOT_SMALL_AREAS 64
#define GCOLL_ONESHOT_SMALL_SLOT 512
/* The input a tiny line holds: the rest of the line is the call number. */
#define GCOLL_ONESHOT_TINY_BYTES 56
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

/* A rank's tiny line in an area: written by that rank only, its input
 * first, then (release) the number of the call it belongs to; every rank
 * writes it in a tiny call, input or not, so any rank can be waited on
 * through it. */
struct gcoll_oneshot_tiny {
  unsigned char data[GCOLL_ONESHOT_TINY_BYTES];
  _Atomic uint64_t call;
};
_Static_assert(sizeof(struct gcoll_oneshot_tiny) == 64, "one cache line");
_Static_assert(offsetof(struct gcoll_oneshot_tiny, call) == 56, "board layout");

/* The areas small calls rotate through on a board of nranks ranks. */
static inline uint64_t gcoll_oneshot_small_areas(int nranks) {
  return nranks <= 2 ? GCOLL_ONESHOT_AREAS : GCOLL_ONESHOT_SMALL_AREAS;
}

/* Bytes of a board for nranks ranks and slots of slot_bytes (a multiple
 * of 64); 0 when that overflows or nranks is out of range. */
size_t gcoll_oneshot_bytes(int nranks, uint64_t slot_bytes);

/* Formats zeroed memory of gcoll_oneshot_bytes(nranks, slot_bytes) bytes
 * (the creator, once, before anyone attaches). */
void gcoll_oneshot_format(void *mem, int nranks, uint64_t slot_bytes);

/* Whether mem (bytes long) is a board for nranks ranks; 0 or -1 with one
 * line in err. */
int gcoll_oneshot_check(const void *mem, size_t bytes, int nranks, char *err, size_t errlen);

/* The executor's handle on a board: its own rank and call count, and
 * the call each rank is known to have started (known[r] <= its arrived). */
struct gcoll_oneshot {
  struct gcoll_oneshot_header *hdr;  /* NULL: no board */
  struct gcoll_oneshot_line *lines;
  struct gcoll_oneshot_tiny *tiny;
  char *small_areas, *areas;
  uint64_t slot_bytes;
  int rank, nranks;
  uint64_t calls;
  uint64_t tiny_calls;               /* bit k % 64: call k was tiny */
  uint64_t *known;                   /* nranks */
};

/* Binds a checked board (NULL: none; o->hdr stays NULL). 0, or -1 when
 * out of memory. unbind frees what bind allocated. */
int gcoll_oneshot_bind(struct gcoll_oneshot *o, void *mem, int rank);
void gcoll_oneshot_unbind(struct gcoll_oneshot *o);

/* Whose slots a call involves: every other rank, nobody, or one rank. */
#define GCOLL_ONESHOT_ALL (-1)
#define GCOLL_ONESHOT_NONE (-2)

/* One rank's part in a call: its input (nbytes <= need; 0: it writes
 * nothing), whose slots it reads (ALL, NONE or a rank), and the most any
 * rank writes in this call (<= slot_bytes; the same on every rank: it
 * picks the areas). */
struct gcoll_oneshot_part {
  const void *src;
  size_t nbytes;
  int sources;
  size_t need;
};

/* Call k: copies the input into this rank's slot (once every rank is done
 * with the area's last use), publishes, and waits (w) for the sources. On
 * success *area is the call's area (rank r's slot at r * *stride: a tiny
 * line's input when need <= GCOLL_ONESHOT_TINY_BYTES); on
 * failure *waited_for is the rank it was waiting for. *call is the call's
 * number either way. */
gcollResult_t gcoll_oneshot_run(struct gcoll_oneshot *o, struct gcoll_wait *w,
                                const struct gcoll_oneshot_part *part, const char **area,
                                size_t *stride, int *waited_for, uint64_t *call);

#endif
