/* Executors: what runs one collective over a rank's channels. The
 * communicator picks one per call (host threads for host buffers, a CUDA
 * kernel for device buffers) and otherwise sees only this table, so CUDA
 * is one more executor, as a transport is one more table in transport.h.
 *
 * Both executors take the same channels (struct gcoll_host_channel: FIFOs
 * as this process maps them; an executor that runs elsewhere, like the
 * GPU, makes its own view of them at create) and the same collective
 * (struct gcoll_host_coll). The FIFOs' step counters live in the FIFOs, so
 * calls may alternate between executors, one at a time: a launch must have
 * completed (wait) before another executor uses the same channels.
 *
 * Contract, every executor:
 *   owns     cheap, thread-safe, callable before any create.
 *   create   checks the connections and allocates everything a call needs
 *            (threads, scratch, device state); NULL with one line in err.
 *   launch   validates the call (coll_args.h, the buffer rules) and starts
 *            it on `stream` (NULL for the host executor, a CUstream for the
 *            CUDA one, whose launches queue and return at once); the host
 *            executor runs it to completion here. An earlier failure the
 *            executor knows of is returned instead (it is sticky).
 *   poll     the result of the launches so far without waiting:
 *            gcollInProgress while some run, else success or the first
 *            failure.
 *   wait     waits for every launch so far (bounded by the executor's
 *            timeout) and returns as poll would.
 *   launch_p2p  send/recv on device buffers, queued like launch (CUDA only).
 *   abort    makes a running collective stop soon with result `why`; safe
 *            from any thread.
 *   destroy  waits for (or aborts) what is in flight, frees everything. */
#ifndef GCOLL_KERNELS_EXEC_H
#define GCOLL_KERNELS_EXEC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "kernels/host_exec.h"

enum gcoll_exec_kind { GCOLL_EXEC_HOST = 0, GCOLL_EXEC_CUDA, GCOLL_NEXECS };

struct gcoll_exec_config {
  int rank, nranks;
  int nchannels;
  const struct gcoll_host_channel *channels;
  size_t slot_bytes;              /* of every FIFO (the GPU maps that much of each) */
  _Atomic int *abort_word;        /* gcollResult_t; 0 = go on; may be NULL */
  uint64_t timeout_ns;            /* per collective */
  uint32_t spin_rounds;           /* host waits; 0: GCOLL_WAIT_SPINS */
  uint64_t gather_bytes[GCOLL_NPROTOS]; /* host: gather-form allreduce limit (host_exec.h) */
  int device;                     /* CUDA device ordinal (CUDA executor) */
  struct gcoll_exec_poll poll;    /* host: inline network polling (host_exec.h) */
  struct gcoll_exec_peer_reads peer_reads; /* host: single-copy reads (host_direct.h) */
  /* host: the one-shot board every rank of the host maps (host_oneshot.h),
   * checked at create; NULL on every rank or on none. With node.on, the
   * board of this rank's node instead (NULL on a node of one rank). */
  void *oneshot_board;
  size_t oneshot_bytes;
  /* host: the node form of small allreduces between 2 nodes (host_exec.h). */
  struct gcoll_exec_node_form {
    int on;                       /* the same on every rank */
    const int *members;           /* this node's ranks, by board slot */
    int nmembers, index;          /* how many; this rank's slot */
    int entry;                    /* the slot of the node's first rank on channel 0's ring */
    int is_entry, is_exit;        /* this rank receives, sends the step between the nodes */
    int first;                    /* this node's partial comes first in the sum */
    uint64_t max_bytes;           /* calls up to this size (the same on every rank) */
  } node;
};

struct gcoll_exec;

/* One send, receive or self copy of a send/recv group on device buffers
 * (launch_p2p). Messages are p2p_wire.h's. */
enum gcoll_exec_p2p_kind { GCOLL_EXEC_P2P_SEND = 0, GCOLL_EXEC_P2P_RECV, GCOLL_EXEC_P2P_COPY };
struct gcoll_exec_p2p_op {
  enum gcoll_exec_p2p_kind kind;
  struct gcoll_fifo *fifo;        /* the connection's FIFO as this process maps it; NULL: COPY */
  const void *src;                /* SEND, COPY */
  void *dst;                      /* RECV, COPY */
  size_t bytes;
  uint64_t seq;                   /* the message's number on its connection */
  int peer;
  int queue;                      /* operations of one connection share a queue, in order */
};

struct gcoll_exec_ops {
  const char *name;               /* "host", "cuda" */
  /* Whether buffers at ptr are this executor's to run (device memory for
   * CUDA, *device then its ordinal); the host executor takes what no other
   * claims. Never fails: a machine without a driver has no device memory. */
  int (*owns)(const void *ptr, int *device);
  struct gcoll_exec *(*create)(const struct gcoll_exec_config *cfg, char *err, size_t errlen);
  gcollResult_t (*launch)(struct gcoll_exec *e, const struct gcoll_host_coll *c, void *stream,
                          char *err, size_t errlen);
  gcollResult_t (*poll)(struct gcoll_exec *e, char *err, size_t errlen);
  gcollResult_t (*wait)(struct gcoll_exec *e, char *err, size_t errlen);
  /* Send/recv on device buffers (NULL where the executor has none): one
   * group's operations of this communicator, started after the earlier work
   * of each of the nstreams streams, which wait for it in turn; returns
   * once queued, failures show in poll/wait. The FIFOs must have the
   * executor's slot size and stay mapped until destroy. */
  gcollResult_t (*launch_p2p)(struct gcoll_exec *e, const struct gcoll_exec_p2p_op *ops, int nops,
                              void *const *streams, int nstreams, char *err, size_t errlen);
  void (*abort)(struct gcoll_exec *e, gcollResult_t why);
  void (*destroy)(struct gcoll_exec *e);
};

extern const struct gcoll_exec_ops gcoll_exec_host_ops;
/* Only in builds with the CUDA toolkit (HAVE_CUDA): exec_cuda.c. */
extern const struct gcoll_exec_ops gcoll_exec_cuda_ops;

/* The table of an executor kind; NULL when this build lacks it. */
const struct gcoll_exec_ops *gcoll_exec_ops_of(enum gcoll_exec_kind kind);

#endif
