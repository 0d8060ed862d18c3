/* Where a communicator's init spent its time, reported in one INFO line per
 * rank at its end, as NCCL's "Init timings" are: so that a slow init says
 * which phase was slow and how much of it was the bootstrap store, without
 * a profiler. */
#ifndef GCOLL_RUNTIME_COMM_INIT_TIMINGS_H
#define GCOLL_RUNTIME_COMM_INIT_TIMINGS_H

#include <stdint.h>

#include "runtime/bootstrap.h"

struct gcollComm;

/* Nanoseconds of gcoll_wait_now_ns(). The bootstrap's share is not a phase
 * of its own: requests to the store happen in every phase (the connect
 * phase fetches peers' addresses from it), so it is what the bootstrap
 * handle counted, and connect is reported without its store waits. */
struct gcoll_init_timings {
  uint64_t start_ns;         /* init's entry, or the bootstrap's opening if
                              * it was opened earlier for this init */
  uint64_t plan_ns;          /* reading the plan and this rank's view */
  uint64_t connect_ns;       /* setting up the plan's edges, store waits
                              * included */
  uint64_t connect_store_ns; /* the store waits within connect_ns */
  uint64_t executor_ns;      /* starting the executor */
};

/* Starts the clock at now, or at bs's opening when that was earlier. */
void gcoll_init_timings_start(struct gcoll_init_timings *t, const struct gcoll_bootstrap *bs);

/* Logs, at GCOLL_DEBUG=INFO, the line
 *   init timings: total T ms = plan P + bootstrap B + connect C + executor E
 *   + other O; bootstrap requests N: <to whom>[; endpoints from ...]
 * where N counts requests to a central store; with endpoints from the plan
 * (issue 16) the tail says so with the messages sent straight to plan
 * neighbours, and when the plan brought endpoints that could not be used,
 * "endpoints from the store (why)".
 * with `other` what no phase claims: the plan's checks against the job and,
 * for gcollCommInitRank, computing its members' plan before init proper
 * (the store waits of either are in `bootstrap`). */
void gcoll_init_timings_log(const struct gcollComm *comm, const struct gcoll_init_timings *t);

#endif
