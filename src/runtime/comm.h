/* The communicator: one rank's share of a job's plan, its connections and
 * its executor. Built by comm_init.c (plan, bootstrap) and comm_connect.c
 * (transports per plan edge); used by comm_coll.c (the collective API). */
#ifndef GCOLL_RUNTIME_COMM_H
#define GCOLL_RUNTIME_COMM_H

#include <pthread.h>
#include <stdatomic.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/host_exec.h"
#include "runtime/bootstrap.h"
#include "runtime/transport.h"

/* Connections of one rank: per channel a ring pair and up to 1 + 3 tree
 * peers in both directions. */
#define GCOLL_COMM_MAX_CONNS (GCOLL_MAX_CHANNELS * (2 + 2 * (1 + GCOLL_MAX_TREE_ARITY)))

enum gcoll_transport_kind { GCOLL_TRANSPORT_SHM = 0, GCOLL_TRANSPORT_SOCKET, GCOLL_NTRANSPORTS };

struct gcollComm {
  int rank, nranks, nchannels;
  struct gcoll_rank_view *view;        /* this rank's facts from the plan */
  int *ring_ranks;                     /* nchannels x nranks: ring orders */
  struct gcoll_bootstrap *bs;
  struct gcoll_proxy *proxy;
  struct gcoll_transport *transport[GCOLL_NTRANSPORTS];
  int nconns;
  int has_net;                         /* some connection goes through the proxy */
  struct gcoll_conn conns[GCOLL_COMM_MAX_CONNS];
  struct gcoll_host_channel channels[GCOLL_MAX_CHANNELS];
  struct gcoll_host_exec *exec;
  /* Set by an abort (gcollInvalidUsage) or a transport that saw a peer die
   * (gcollRemoteError); every wait in the executor polls it. */
  _Atomic int abort_word;
  _Atomic int failed_peer;
  /* Held by a collective while it runs, so an abort from another thread
   * frees nothing under it. */
  pthread_mutex_t busy;
  /* Forced choices from GCOLL_ALGO / GCOLL_PROTO, -1 when free. */
  int force_algo, force_proto;
  size_t slot_bytes;
  uint64_t timeout_ms;
  char job_key[64];
};

/* Connects every edge the plan names for this rank (comm_connect.c). */
gcollResult_t gcoll_comm_connect(struct gcollComm *comm);
void gcoll_comm_disconnect(struct gcollComm *comm);

/* Records a one-line reason for the calling thread (errors.c) and returns
 * `result`, so failures read `return gcoll_fail(gcollInvalidArgument, ...)`. */
gcollResult_t gcoll_fail(gcollResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Debug log (GCOLL_DEBUG=INFO or TRACE) on stderr, prefixed with the rank. */
void gcoll_log_info(const struct gcollComm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
