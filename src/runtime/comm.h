/* The communicator: one rank's share of a job's plan, its connections and
 * its executor. Built by comm_init.c (plan, bootstrap) and comm_connect.c
 * (transports per plan edge); used by comm_coll.c (the collective API) and
 * comm_p2p.c (send/recv, with connections made on first use). */
#ifndef GCOLL_RUNTIME_COMM_H
#define GCOLL_RUNTIME_COMM_H

#include <pthread.h>
#include <stdatomic.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/exec.h"
#include "kernels/host_exec.h"
#include "runtime/bootstrap.h"
#include "runtime/proxy.h"
#include "runtime/transport.h"

/* Connections of one rank: per channel a ring pair and up to 1 + 3 tree
 * peers in both directions. */
#define GCOLL_COMM_MAX_CONNS (GCOLL_MAX_CHANNELS * (2 + 2 * (1 + GCOLL_MAX_TREE_ARITY)))

/* Also the first byte of every published connection address (comm_connect.c),
 * so the values are part of the wire format between ranks: only append.
 * GCOLL_TRANSPORT_IB exists in every build; without libibverbs its table
 * entry is NULL and an address naming it is refused in one line. */
enum gcoll_transport_kind {
  GCOLL_TRANSPORT_SHM = 0,
  GCOLL_TRANSPORT_SOCKET,
  GCOLL_TRANSPORT_IB,
  GCOLL_TRANSPORT_P2P,  /* CUDA builds only, like IB */
  GCOLL_TRANSPORT_PLUGIN, /* an NCCL net plugin, when one loads (net_plugin_load.h) */
  GCOLL_NTRANSPORTS
};

/* Connection id of the send/recv connection between two ranks: past every
 * plan edge's id (channel * 4 + purpose). */
#define GCOLL_CONN_ID_P2P ((uint32_t)GCOLL_MAX_CHANNELS * 4u)

struct gcoll_p2p;

struct gcollComm {
  int rank, nranks, nchannels;
  struct gcoll_rank_view *view;        /* this rank's facts from the plan */
  int *ring_ranks;                     /* nchannels x nranks: ring orders */
  struct gcoll_bootstrap *bs;
  struct gcoll_proxy *proxy;
  struct gcoll_transport *transport[GCOLL_NTRANSPORTS]; /* NULL: not started (net/ib, net/plugin) */
  int nconns;
  int has_net;                         /* some connection goes through the proxy */
  struct gcoll_conn conns[GCOLL_COMM_MAX_CONNS];
  struct gcoll_host_channel channels[GCOLL_MAX_CHANNELS];
  /* Executors by kind (exec.h): the host one from init, the CUDA one made
   * by the first collective on device buffers (NULL until then). */
  struct {
    const struct gcoll_exec_ops *ops;
    struct gcoll_exec *e;
  } exec[GCOLL_NEXECS];
  /* Proxy entry that hands the abort word to queued kernels (which no
   * caller may be waiting on) within a proxy check period. */
  struct gcoll_proxy_entry kernel_abort;
  int kernel_abort_added;
  struct gcoll_p2p *p2p;               /* send/recv connections, NULL until used */
  struct gcoll_premul_op *redops;      /* pre-mul-sum ops (comm_redop.c), by value -
                                          gcollNumOps */
  int nredops, redops_cap;
  /* Set by an abort (gcollInvalidUsage) or a transport that saw a peer die
   * (gcollRemoteError); every wait in the executor polls it. */
  _Atomic int abort_word;
  _Atomic int failed_peer;
  /* Held by a collective while it runs, so an abort from another thread
   * frees nothing under it; host collectives on a communicator with no
   * CUDA executor raise in_call instead (gcoll_coll_run_op says why), and
   * gcoll_comm_wait_calls waits for both. */
  pthread_mutex_t busy;
  _Atomic int in_call;
  /* Forced choices from GCOLL_ALGO / GCOLL_PROTO, -1 when free. */
  int force_algo, force_proto;
  int trace;                           /* GCOLL_DEBUG=TRACE at init: a line per collective */
  /* gcollConfig_t's settings: channel bounds (0: none), the transport
   * between nodes (-1: free), the name log lines show ("" none). */
  int config_min_channels, config_max_channels;
  int net_transport;
  char name[64];
  /* Channels one call may run: the plan's, capped by the CPUs this rank
   * has (comm_init.c, set_channel_cap). */
  int max_run_channels;                /* host calls: channels are threads (CPU cap) */
  int max_device_channels;             /* device calls: channels are GPU blocks, the
                                          plan's unless GCOLL_MAX_NCHANNELS or
                                          GCOLL_MAX_GPU_CHANNELS caps them */
  int min_device_channels;             /* GCOLL_MIN_GPU_CHANNELS, within the plan's */
  /* CPUs this process may use and ranks sharing them; 0 when
   * GCOLL_MAX_NCHANNELS replaced the measurement. */
  int host_cpus, ranks_on_host;
  /* This host's ranks' channel threads outnumber its cores (or the cores
   * are unknown): the tree root's view (comm_init.c's channel cap), the
   * same on every rank, as it decides
   * the host allreduce's gather-form limit (comm_init.c). */
  int shared_cores;
  /* The rank at the root of channel 0's tree (t1), the same on every rank
   * once init agreed on the channel cap (comm_init.c); -1 before. */
  int tree_root;
  size_t slot_bytes;
  int cuda_device;                     /* GPU of the CUDA executor: fixed at init when
                                          the FIFOs are in GPU memory, else by the
                                          first collective on device buffers */
  int gpu_at_init;                     /* the GPU init was given, -1: the calling
                                          thread's current one, looked up only if p2p
                                          is wanted */
  int fifos_on_device;                 /* some plan edge is p2p: device buffers only */
  int nsplits;                         /* gcollCommSplit calls so far: names their keys */
  int nshrinks;                        /* gcollCommShrink calls so far: names their keys */
  uint64_t timeout_ms;
  char job_key[64];
  /* The one-shot board of small host allreduces (comm_oneshot.c), when
   * every rank is on this host; its name on rank 0 until it is removed. */
  void *oneshot_map;
  size_t oneshot_bytes;
  char oneshot_name[GCOLL_SHM_NAME_MAX];
  /* Host allreduces up to this size take the node form (host_exec.h);
   * 0: never. The same on every rank. */
  uint64_t node_form_bytes;
};

/* A pre-mul-sum op as gcollRedOpCreatePreMulSum made it. */
struct gcoll_premul_op {
  int live;
  gcollDataType_t type;
  enum gcoll_premul_kind kind;         /* IMMEDIATE or DEVICE */
  uint64_t k;                          /* the scalar's bits, or its device address */
};

/* op as a collective runs it: built in, or one of comm's live pre-mul-sum
 * ops for dtype (*op then gcollSum and hc's premul set). `what` names the
 * caller in the refusal. */
gcollResult_t gcoll_comm_resolve_op(struct gcollComm *comm, gcollRedOp_t *op,
                                    gcollDataType_t dtype, struct gcoll_host_coll *hc,
                                    const char *what);
void gcoll_comm_redops_free(struct gcollComm *comm);

/* The executor of that kind, created on first use (comm_init.c). */
gcollResult_t gcoll_comm_executor(struct gcollComm *comm, enum gcoll_exec_kind kind);

/* The GPU a rank created by a thread of gcollCommInitAll drives: devlist[i]
 * when given; else, when GCOLL_TRANSPORT forces p2p (the local plans of
 * InitAll/InitRank have no GPU edges otherwise), the calling thread's
 * current GPU; else -1 (comm_connect.c). */
int gcoll_comm_thread_gpu(const int *devlist, int i);

/* Maps the board members (global ranks, in the order of their slots; the
 * first creates it) share, with slots of slot_bytes (a multiple of 64):
 * every rank of the communicator calls it at once, each with its own
 * board's members (the whole one-host job, or its node's ranks; a node
 * of one rank maps nothing). A rank that cannot fails with one line
 * (comm_oneshot.c). close unmaps it. */
gcollResult_t gcoll_comm_oneshot_open(struct gcollComm *comm, const int *members, int nmembers,
                                      uint64_t slot_bytes);
void gcoll_comm_oneshot_close(struct gcollComm *comm);

/* Connects every edge the plan names for this rank (comm_connect.c). */
gcollResult_t gcoll_comm_connect(struct gcollComm *comm);
void gcoll_comm_disconnect(struct gcollComm *comm);

/* One direction of one connection through the transport table and the
 * bootstrap (comm_connect.c), for the plan's edges and send/recv peers. */
/* Bootstrap key of the receiver's address for connection id sender -> receiver. */
void gcoll_comm_conn_key(char *key, size_t len, int sender, int receiver, uint32_t id);
/* Receiver: creates the receive end over `transport` (enum
 * gcoll_transport_kind) and publishes its address. */
gcollResult_t gcoll_comm_conn_recv_setup(struct gcollComm *comm, int peer, uint32_t id,
                                         int transport, struct gcoll_conn *c);
/* Sender: attaches to the address value (as published) the receiver put. */
gcollResult_t gcoll_comm_conn_attach(struct gcollComm *comm, int peer, uint32_t id,
                                     const void *value, size_t len, struct gcoll_conn *c,
                                     uint64_t deadline_ms);
/* Receiver: waits until the sender attached. */
gcollResult_t gcoll_comm_conn_recv_complete(struct gcollComm *comm, struct gcoll_conn *c,
                                            uint64_t deadline_ms);
void gcoll_comm_conn_close(struct gcollComm *comm, struct gcoll_conn *c);
/* The transport for a connection with peer: shm inside this rank's node;
 * across nodes net/ib when this rank started it, else net/socket; unless
 * GCOLL_TRANSPORT forces one (-1 and *rc set when that variable is
 * malformed). */
int gcoll_comm_transport_for_peer(const struct gcollComm *comm, int peer, gcollResult_t *rc);

/* gcollSuccess, or why comm takes no new call: a peer died (naming it) or
 * it was aborted; one line prefixed with what (comm_coll.c). */
gcollResult_t gcoll_comm_check_usable(struct gcollComm *comm, const char *what);

/* Turns an executor or send/recv failure (rc, with the waiter's one-line
 * err) into the caller's reason, naming a dead rank when one is known
 * (comm_coll.c). */
gcollResult_t gcoll_comm_explain(struct gcollComm *comm, const char *what, gcollResult_t rc,
                                 const char *err);

/* Closes the send/recv connections (comm_p2p.c); before gcoll_comm_disconnect. */
void gcoll_p2p_free(struct gcollComm *comm);

/* A collective with its arguments checked and its algorithm chosen, as a
 * group queues it. */
struct gcoll_coll_op {
  struct gcollComm *comm;
  const char *name;            /* the API function, for error lines */
  struct gcoll_host_coll hc;
  enum gcoll_exec_kind exec;   /* by the buffers' memory */
  void *stream;                /* CUstream for device buffers, else NULL */
};
/* Runs one such collective to its end (comm_coll.c). */
gcollResult_t gcoll_coll_run_op(const struct gcoll_coll_op *op);

/* Returns once no collective or send/recv runs on comm in another thread
 * (after an abort word was set, which makes them return). */
void gcoll_comm_wait_calls(struct gcollComm *comm);
/* Adds a collective to this thread's open group (comm_group.c). */
gcollResult_t gcoll_group_enqueue_coll(const struct gcoll_coll_op *op);

/* Nesting depth of gcollGroupStart on this thread (comm_group.c). */
int gcoll_group_depth(void);
/* Ends this thread's group as gcollGroupEnd does but runs nothing: the
 * outermost call drops what was queued (ncclGroupSimulateEnd). */
gcollResult_t gcoll_group_end_unrun(void);
/* Inside a group: remembers the first failed call, so that gcollGroupEnd
 * runs nothing and returns it. Returns rc. */
gcollResult_t gcoll_group_note(gcollResult_t rc);

/* Records a one-line reason for the calling thread (errors.c) and returns
 * `result`, so failures read `return gcoll_fail(gcollInvalidArgument, ...)`. */
gcollResult_t gcoll_fail(gcollResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Debug log (GCOLL_DEBUG=INFO or TRACE) on stderr, prefixed with the rank. */
void gcoll_log_info(const struct gcollComm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* One line per collective when comm->trace (GCOLL_DEBUG=TRACE at init), as
 * NCCL's COLL subsystem; decided at init so a collective looks nothing up. */
void gcoll_log_trace(const struct gcollComm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
