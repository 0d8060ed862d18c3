/* The one wait rule of the host primitives.
 *
 * Every wait for a peer (data in a FIFO, a free slot) goes through
 * gcoll_wait_round, so nothing waits forever and waiting ranks give the CPU
 * away: on this project's machines there are often more ranks than cores,
 * and a spinning rank starves the peer it waits for.
 *
 * Back-off within one wait: GCOLL_WAIT_SPINS rounds of a CPU pause (the
 * common case, a peer a few microseconds behind; an executor whose threads
 * each have a core of their own spins GCOLL_WAIT_DEDICATED_SPINS, about a
 * millisecond, since giving the core away only delays its own wake-up, and
 * one whose ranks outnumber the cores GCOLL_WAIT_SHARED_SPINS, as the peer
 * it waits for may need this very core), then sched_yield (hands the core
 * to a runnable peer) for GCOLL_WAIT_YIELD_NS, then nanosleeps doubling from
 * 1 us to GCOLL_WAIT_MAX_SLEEP_NS (a peer that is far behind or gone should
 * cost almost nothing). The yield phase is a time, not a count: a
 * nanosleep, however short, costs about 70 us on this project's VMs (timer
 * slack, an idle vCPU's wake-up), more than a whole small collective, and a
 * yield that finds no other runnable thread returns in well under 1 us, so
 * 16 of them (the old count) reached the sleeps after a few microseconds;
 * measured with 4 ranks on 2 cores, no spinning plus this window took small
 * allreduces from 22-29 us to 6-11 us. Each round checks the abort words;
 * the deadline is checked every round once spinning ends and every 32 spins
 * before (a clock read can be a system call in a VM).
 *
 * A wait may also drive the connections it depends on (w->poll, set by the
 * executor for a collective whose network steps its own threads move, see
 * runtime/proxy.h): called every round before backing off; a round in
 * which it moved something does not yield or sleep, since the condition
 * may hold now or the next step is on its way.
 *
 * Usage:  gcoll_wait_begin(w);
 *         while (!condition) if ((r = gcoll_wait_round(w))) return r;
 */
#ifndef GCOLL_KERNELS_WAIT_H
#define GCOLL_KERNELS_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "gcoll.h"

#define GCOLL_WAIT_SPINS 128u
#define GCOLL_WAIT_DEDICATED_SPINS 32768u
#define GCOLL_WAIT_SHARED_SPINS 1u
#define GCOLL_WAIT_YIELD_NS 200000u
#define GCOLL_WAIT_MAX_SLEEP_NS 64000u

enum gcoll_wait_reason {
  GCOLL_WAIT_NONE = 0,      /* no wait failed */
  GCOLL_WAIT_ABORTED,       /* an abort word was set; result = its value */
  GCOLL_WAIT_DEADLINE       /* the deadline passed; result = gcollSystemError */
};

struct gcoll_wait {
  uint64_t deadline_ns;          /* CLOCK_MONOTONIC */
  _Atomic int *abort_word;       /* communicator-wide: abort or dead peer */
  _Atomic int *local_abort;      /* executor-wide: a sibling channel failed */
  uint32_t round;                /* rounds in the current wait */
  uint32_t spins;                /* pause rounds before yielding */
  uint32_t sleeps;               /* sleep rounds in the current wait */
  uint64_t yield_end_ns;         /* end of the yield phase; 0 before it */
  enum gcoll_wait_reason reason; /* why the last failed wait failed */
  int (*poll)(void *arg);        /* NULL, or moves steps; nonzero: something moved */
  void *poll_arg;
};

uint64_t gcoll_wait_now_ns(void);

/* Deadline = now + timeout_ns (saturating), GCOLL_WAIT_SPINS spins. Either
 * abort pointer may be NULL. */
void gcoll_wait_init(struct gcoll_wait *w, _Atomic int *abort_word,
                     _Atomic int *local_abort, uint64_t timeout_ns);

static inline void gcoll_wait_begin(struct gcoll_wait *w) {
  w->round = 0;
  w->sleeps = 0;
  w->yield_end_ns = 0;
}

/* One back-off round. Returns gcollSuccess to keep polling, the abort word's
 * value (a gcollResult_t) when one is set, or gcollSystemError once the
 * deadline has passed; w->reason says which. */
gcollResult_t gcoll_wait_round(struct gcoll_wait *w);

/* Waits until *ctr >= target (acquire). */
gcollResult_t gcoll_wait_counter(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                 uint64_t target);

#endif
