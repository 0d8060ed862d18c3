/* The proxy: one progress thread per process for the transports whose FIFO
 * ends are local memory (the net transport, net.c, whatever its device:
 * socket, ib or an NCCL plugin), plus the periodic liveness checks of shm
 * peers.
 *
 * Transports register entries, one per connection (or listening socket),
 * embedded in their own state so registering allocates nothing. Each round
 * the thread polls the entries' fds (one ppoll for all) and calls every
 * entry's progress callback; about every GCOLL_PROXY_CHECK_MS it calls every
 * entry's check callback.
 *
 * CPU use matters on small machines where the ranks' executors compete with
 * the proxies for cores:
 *   active  while something moved (or a wake-up came) in the last
 *           GCOLL_PROXY_ACTIVE_NS, or GCOLL_PROXY_BUSY_NS while an entry
 *           waits on its local executor (busy: a full receive FIFO): polls
 *           with a zero timeout and sched_yield()s between rounds that moved
 *           nothing, so a runnable executor gets the core at once. The busy
 *           window is bounded so that an application computing between
 *           collectives, with the next one's data already queued, does not
 *           have a proxy spinning beside it;
 *   asleep  otherwise: sleeps in ppoll on the fds and a wake-up eventfd, with
 *           timeouts doubling from GCOLL_PROXY_MIN_SLEEP_NS to
 *           GCOLL_PROXY_MAX_SLEEP_NS while there are socket entries (steps
 *           the executor publishes are noticed within that bound), or until
 *           the next check when there are none;
 *   idle    before the first gcoll_proxy_wake() or inline begin (the
 *           first collective or send/recv): the process is still
 *           connecting its peers, whose progress comes with fd events, so
 *           the thread has no active window and sleeps until the next
 *           check, as with no socket entries. An init that lasts seconds
 *           while a large job's processes start (256 ranks on 2 cores: 3-5
 *           s) otherwise cost each rank ~100 wake-ups a second, and its
 *           init CPU time grew with the job. Not after a quiet spell: a
 *           CUDA graph's replays move network steps with no call to wake
 *           the thread, so the bound above must hold whenever a
 *           collective may run.
 * gcoll_proxy_wake() ends a sleep at once: call it when a collective starts
 * so its first step does not wait for the sleep to end. Before the first
 * call (or inline begin) the thread is idle (above), so whatever publishes
 * steps for it must call it first; gcoll_proxy_add() only ends the sleep
 * for the thread to see the new entry.
 *
 * Inline polling (small collectives, issue 17): the thread that waits for
 * a step can run the round itself (gcoll_proxy_poll: a zero-timeout poll of
 * the entries' fds and every progress callback, under the same lock), so a
 * step goes from the executor to the socket and from the socket to the
 * executor without a hand-off to this thread and back, which costs a
 * wake-up and a scheduler slice on each side when the cores are shared.
 * Between gcoll_proxy_inline_begin() and _end() the thread stands back:
 * it does not spin, and sleeps on the wake-up eventfd only, in rounds of at
 * most GCOLL_PROXY_STANDBY_NS, each followed by one zero-timeout round of
 * its own (so entries nobody polls inline, another communicator's, still
 * move, and the liveness checks still run). _end() runs a last round under
 * the lock and wakes the thread when something is left for it (a socket
 * that took only part of a step, an entry that waits on its executor). Any
 * wake-up during a standby (work that does not run inline started, such
 * as another communicator's large collective or a send/recv) brings the
 * thread back to its usual rounds for GCOLL_PROXY_ACTIVE_NS.
 * An inline round polls only the hot entries' fds, those that moved
 * something or had an event in the last GCOLL_PROXY_HOT_ROUNDS inline
 * rounds, and every fd once every GCOLL_PROXY_COLD_ROUNDS rounds: a
 * small collective steps through one channel's connections, and a
 * communicator has one per channel and peer, each with its fd (17 fds for
 * 2 ranks on 2 nodes of a cpu-only plan). poll()'s cost grows with its
 * set (the kernel looks at each socket), and a wait polls every round:
 * with all 17 fds, a small allreduce between 2 ranks over TCP took 15-17
 * us, with the hot ones 11-12 (a bare exchange of 8 bytes with poll() on
 * one fd: 8.4 us; Open MPI's: 8-10). Every other
 * entry's progress callback still runs every round, so its steps move as
 * before; only its fd events (data from a peer not in this collective,
 * a peer's death) wait up to GCOLL_PROXY_COLD_ROUNDS rounds, a few
 * microseconds each. The thread's own rounds during a standby poll every
 * fd: they are rare, and all the look an idle communicator gets.
 * The standby round is long because every wake-up of a proxy preempts a
 * rank's thread on a shared core: 4 ranks on 2 virtual nodes, 2 cores,
 * took 30-33 us per small allreduce with 10 ms, 33-41 with 1 ms and 41-45
 * with 0.1 ms. What it delays is bounded by it: a peer's death seen by a
 * communicator idle after an inline collective (collectives and send/recv
 * that go through this thread wake it when they start).
 *
 * Entries are only touched under the proxy's lock: callbacks run with it
 * held (they must not call the functions below), and after
 * gcoll_proxy_remove() returns the thread never touches the entry again.
 *
 * Lifetime: gcoll_proxy_create() returns the creator's reference;
 * gcoll_proxy_destroy() stops and joins the thread and drops it. Transports
 * that keep the pointer take their own reference (retain/release), so
 * removing entries after the thread stopped is still valid. */
#ifndef GCOLL_RUNTIME_PROXY_H
#define GCOLL_RUNTIME_PROXY_H

#include <stddef.h>
#include <stdint.h>

#define GCOLL_PROXY_CHECK_MS 100
#define GCOLL_PROXY_ACTIVE_NS 2000000ull
#define GCOLL_PROXY_BUSY_NS 20000000ull
#define GCOLL_PROXY_MIN_SLEEP_NS 20000ull
#define GCOLL_PROXY_MAX_SLEEP_NS 10000000ull
#define GCOLL_PROXY_STANDBY_NS 10000000ull
#define GCOLL_PROXY_HOT_ROUNDS 4096u
#define GCOLL_PROXY_COLD_ROUNDS 16u

struct gcoll_proxy;

struct gcoll_proxy_entry {
  /* Set by the owner; updated by progress callbacks. */
  int fd;        /* polled when >= 0 and events != 0 */
  short events;  /* POLLIN / POLLOUT wanted in the next round */
  int busy;      /* waits on memory the local executor changes */
  /* Moves what it can; revents is this round's poll result for fd (0 when
   * it was not polled). Returns nonzero when something moved. NULL: none. */
  int (*progress)(struct gcoll_proxy_entry *e, short revents);
  /* Liveness check, about every GCOLL_PROXY_CHECK_MS. NULL: none. */
  void (*check)(struct gcoll_proxy_entry *e);
  /* Private to the proxy. */
  struct gcoll_proxy_entry *next, *prev;
  int registered;
  uint64_t hot_until;  /* inline rounds: polled every round before this one */
};

int gcoll_proxy_create(struct gcoll_proxy **p, char *err, size_t errlen);
/* Stops and joins the thread, then drops the creator's reference. */
void gcoll_proxy_destroy(struct gcoll_proxy *p);
void gcoll_proxy_retain(struct gcoll_proxy *p);
void gcoll_proxy_release(struct gcoll_proxy *p);

/* Registers e (fd, events, callbacks set by the caller). */
int gcoll_proxy_add(struct gcoll_proxy *p, struct gcoll_proxy_entry *e, char *err, size_t errlen);
/* Unregisters e; a no-op for an entry that is not registered. */
void gcoll_proxy_remove(struct gcoll_proxy *p, struct gcoll_proxy_entry *e);
/* Ends the thread's sleep; cheap (no system call) while it is active. */
void gcoll_proxy_wake(struct gcoll_proxy *p);

/* Runs one zero-timeout round in the calling thread unless another thread
 * holds the lock right now; returns nonzero when something moved. */
int gcoll_proxy_poll(struct gcoll_proxy *p);
/* Brackets a collective whose waits call gcoll_proxy_poll (see above). */
void gcoll_proxy_inline_begin(struct gcoll_proxy *p);
void gcoll_proxy_inline_end(struct gcoll_proxy *p);

/* Counters since creation, for tests and debug logs: loop rounds, rounds
 * that slept (timeout > 0), rounds that yielded the CPU, and inline rounds
 * (gcoll_proxy_poll, _inline_end, and the thread's own while it stands
 * back). */
struct gcoll_proxy_stats {
  uint64_t rounds, sleeps, yields, inline_rounds;
  uint64_t inline_fds;  /* fds polled by inline rounds, all told */
};
void gcoll_proxy_get_stats(struct gcoll_proxy *p, struct gcoll_proxy_stats *st);

#endif
