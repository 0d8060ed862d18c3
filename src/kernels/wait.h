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
 * millisecond, since giving the core away only delays its own wake-up,
 * with a yield every GCOLL_WAIT_SPIN_YIELD_ROUNDS in case the scheduler
 * put its peer on the same core after all, and
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
 * Sleeping is on a futex when the wait names the FIFO counter it waits for
 * (gcoll_wait_begin_on; every wait on a host FIFO does, see prims_host.c):
 * the waiter raises the sleep flag next to the counter (fifo.h), re-reads
 * the counter and FUTEX_WAITs on its low 32 bits; the producer, after
 * publishing, reads the flag and, only when it is raised, takes it down
 * and FUTEX_WAKEs (gcoll_fifo_set_tail/set_head, gcoll_wait_wake). So a
 * sleep ends when the step is published, not when a timer fires: a
 * nanosleep costs ~70 us on these VMs however short, and a configuration
 * whose waits all reached the sleeps paid one per step (the README's np=2
 * reduce at 0.27-0.49 ms a call). Such a sleep is still bounded, by
 * wake_timeout_ns (GCOLL_WAIT_WAKE_TIMEOUT_NS) and by the deadline, so
 * abort words, the deadline and a producer that cannot wake (none today;
 * a CUDA kernel writing host memory would be one) cost at most that.
 * The ordering is the store-buffering pattern (Dekker): waiter: flag = 1
 * (seq_cst), then load the counter (seq_cst); producer: store the counter,
 * seq_cst fence, load the flag. In the single total order of those seq_cst
 * operations either the producer's fence comes first, and the waiter's load
 * sees the new counter and does not sleep, or the waiter's store comes
 * first, and the producer sees the flag and wakes; a store landing
 * between the waiter's load and its FUTEX_WAIT makes the kernel's compare
 * fail (EAGAIN), so no wake-up is lost.
 * The producer's fence is on every step, and it drains the store buffer,
 * payload included: measured +5-20% on calls of 0.2-1 us. So where the
 * kernel has membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), the fence moves
 * to the sleeper, the rare side (the asymmetric Dekker of membarrier(2)):
 * a process registers once (gcoll_wait_init), then publishes with only a
 * compiler barrier between its store and its flag load (gcoll_wait_fast,
 * fifo.h), and a waiter about to sleep issues the membarrier between its
 * flag store and its counter load. The call makes every running thread
 * of every registered process pass a full barrier (one not running is
 * past one already), so a producer's store/load pair either completes
 * before that barrier (its store is visible to the waiter's load after
 * the call) or its load comes after it (and sees the flag, stored before
 * the call). A process that could not register keeps the fence; a waiter
 * whose membarrier fails never sleeps on the futex (it nanosleeps as
 * before), since its producer may rely on it. A wait that drives its own
 * connections (w->poll) keeps the nanosleep: nobody else would move the
 * steps that could wake it.
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
/* Within a spin, one sched_yield every this many rounds (about 25 us of
 * pauses here). Ranks that each counted on a core of their own still end
 * up on one now and then (the scheduler wakes a task on its waker's core
 * and moves it later): a spinner that never yields then holds the core
 * its peer needs for its whole spin, about a millisecond, and in a 2-rank
 * broadcast loop that cost 2 ms every 8 calls (one spin on each side per
 * FIFO's worth of steps). A yield with no other runnable thread returns
 * in under a microsecond, so waits on a core of their own barely notice. */
#define GCOLL_WAIT_SPIN_YIELD_ROUNDS 1024u
#define GCOLL_WAIT_SHARED_SPINS 1u
#define GCOLL_WAIT_YIELD_NS 200000u
#define GCOLL_WAIT_MAX_SLEEP_NS 64000u
/* Longest futex sleep: only a missing wake-up or an abort waits this long,
 * so it is long enough that a sleeping waiter does not wake every few tens
 * of microseconds to steal its producer's core (ranks > cores), and short
 * enough that an abort or a dead peer is noticed at once for a human. */
#define GCOLL_WAIT_WAKE_TIMEOUT_NS 1000000u

enum gcoll_wait_reason {
  GCOLL_WAIT_NONE = 0,      /* no wait failed */
  GCOLL_WAIT_ABORTED,       /* an abort word was set; result = its value */
  GCOLL_WAIT_DEADLINE       /* the deadline passed; result = gcollSystemError */
};

struct gcoll_wait {
  uint64_t deadline_ns;          /* CLOCK_MONOTONIC; 0 until a round first reads the clock */
  uint64_t timeout_ns;
  _Atomic int *abort_word;       /* communicator-wide: abort or dead peer */
  _Atomic int *local_abort;      /* executor-wide: a sibling channel failed */
  uint32_t round;                /* rounds in the current wait */
  uint32_t spins;                /* pause rounds before yielding */
  uint32_t sleeps;               /* sleep rounds in the current wait */
  uint64_t yield_end_ns;         /* end of the yield phase; 0 before it */
  enum gcoll_wait_reason reason; /* why the last failed wait failed */
  int (*poll)(void *arg);        /* NULL, or moves steps; nonzero: something moved */
  void *poll_arg;
  /* Where sleeping rounds sleep (gcoll_wait_begin_on): a FIFO counter that
   * must reach sleep_target and its sleep flag; NULL: nanosleep. */
  _Atomic uint64_t *sleep_ctr;
  _Atomic uint32_t *asleep;
  uint64_t sleep_target;
  uint64_t wake_timeout_ns;      /* bound of one futex sleep */
  /* Several waiters may raise *asleep (gcoll_wait_counter_shared): none
   * takes it down, the producer does; 0 for a FIFO's single waiter. */
  int flag_shared;
  uint64_t futex_sleeps;         /* futex sleeps since gcoll_wait_init */
};

uint64_t gcoll_wait_now_ns(void);

/* Registers this process for the fence-free publish above, once. In a
 * process with several threads the registration waits for an RCU grace
 * period (5-16 ms on these VMs, off the CPU); with one thread it is free.
 * So it runs when the library is loaded (a constructor in wait.c, usually
 * before the program starts threads): done at a first collective, it
 * stalled that call's peers by as much. gcoll_wait_init calls it too, for
 * a wait set up before the constructor ran; all but the first call return
 * at once. */
void gcoll_wait_setup(void);

/* Deadline = timeout_ns (saturating) after the first round of any of w's
 * waits that reads the clock (after 32 spins, or at the first yield), not
 * after this call: a call whose waits all end while spinning reads no
 * clock (a clock read was ~8% of a 2-rank 32-byte broadcast), and one that
 * waits longer is bounded from then, microseconds later. GCOLL_WAIT_SPINS
 * spins. Either abort pointer may be NULL. */
void gcoll_wait_init(struct gcoll_wait *w, _Atomic int *abort_word,
                     _Atomic int *local_abort, uint64_t timeout_ns);

static inline void gcoll_wait_begin(struct gcoll_wait *w) {
  w->round = 0;
  w->sleeps = 0;
  w->yield_end_ns = 0;
  w->sleep_ctr = NULL;
  w->flag_shared = 0;
}

/* gcoll_wait_begin for a wait until *ctr >= target, whose producer wakes
 * a waiter that raised *asleep (fifo.h); asleep NULL: the producer does not
 * wake, sleeping rounds nanosleep. */
static inline void gcoll_wait_begin_on(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                       uint64_t target, _Atomic uint32_t *asleep) {
  gcoll_wait_begin(w);
  if (asleep == NULL) return;
  w->sleep_ctr = ctr;
  w->asleep = asleep;
  w->sleep_target = target;
}

/* One back-off round. Returns gcollSuccess to keep polling, the abort word's
 * value (a gcollResult_t) when one is set, or gcollSystemError once the
 * deadline has passed; w->reason says which. */
gcollResult_t gcoll_wait_round(struct gcoll_wait *w);

/* Waits until *ctr >= target (acquire); sleeping on the futex of ctr when
 * asleep is not NULL (see gcoll_wait_begin_on). */
gcollResult_t gcoll_wait_counter(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                 uint64_t target, _Atomic uint32_t *asleep);

/* gcoll_wait_counter for a counter several processes wait on with one
 * sleep flag (host_oneshot.h's arrival counters): a waiter whose sleep
 * ended by its timeout leaves the flag up, since another waiter may sleep
 * behind it; lowering it would leave that one asleep until its own
 * timeout (a millisecond) after the publish. The cost is one needless
 * wake-up call by the producer's next publish. */
gcollResult_t gcoll_wait_counter_shared(struct gcoll_wait *w, _Atomic uint64_t *ctr,
                                        uint64_t target, _Atomic uint32_t *asleep);

/* Nonzero once this process is registered for membarrier's global
 * expedited command: its publishes need no fence (see above). Set once
 * (relaxed): a thread that still reads 0 fences, which is always safe. */
extern _Atomic int gcoll_wait_fast;

/* The other half of a fence-free publish, for a thread that must see
 * the stores of threads of this process that did not fence (they used
 * gcoll_fifo_fence while gcoll_wait_fast was set): membarrier's global
 * expedited command, a full barrier on every thread that runs. Rare
 * callers only (an abort): it is a system call. */
void gcoll_wait_remote_fence(void);

/* The producer's half: wakes every waiter asleep on ctr. Called only when
 * the sleep flag was raised after the publish (fifo.h). */
void gcoll_wait_wake(_Atomic uint64_t *ctr);

/* Process-wide counts (relaxed; for GCOLL_DEBUG=INFO and tests): futex
 * sleeps, those that ended by their timeout, and wake calls made. */
struct gcoll_wait_stats {
  uint64_t futex_sleeps, futex_timeouts, futex_wakes;
};
void gcoll_wait_get_stats(struct gcoll_wait_stats *s);

#endif
