/* gcoll: plan-driven collective communication.
 *
 * The types mirror NCCL's (same names with a gcoll prefix, same numeric
 * values), so NCCL users can read this header at a glance and gcoll's
 * NCCL-ABI library can pass values through unchanged.
 *
 * Buffers and streams. On host memory pass stream = NULL and the call is
 * blocking, like a host MPI collective: when it returns, recvbuff holds the
 * result and sendbuff may be reused. On CUDA device memory (builds with the
 * CUDA toolkit) the call is enqueued on `stream` (a cudaStream_t; NULL is
 * the legacy default stream) and returns at once, as with NCCL; a stream
 * being captured into a CUDA graph records the collective, and each replay
 * runs it (replays must be ordered with the communicator's other work, on
 * every rank alike). Every rank of the communicator must make the same calls
 * in the same order with the same count, type, op and root. Calls on one
 * communicator must not overlap (one thread at a time); different
 * communicators are independent.
 *
 * Errors. Functions return a gcollResult_t; gcollGetLastError(comm) gives a
 * one-line reason for the last failure on this thread (comm may be NULL for
 * init failures). A call that fails with gcollRemoteError or gcollSystemError
 * (a peer died, a deadline of GCOLL_TIMEOUT seconds passed) leaves the
 * communicator unusable: destroy it (or abort it). */
#ifndef GCOLL_H
#define GCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GCOLL_MAJOR 0
#define GCOLL_MINOR 1
#define GCOLL_PATCH 0

typedef enum {
  gcollSuccess = 0,
  gcollUnhandledCudaError = 1,
  gcollSystemError = 2,       /* a system call failed, or a deadline passed */
  gcollInternalError = 3,
  gcollInvalidArgument = 4,   /* bad buffer, type, op, root or count */
  gcollInvalidUsage = 5,      /* bad plan, wrong call order */
  gcollRemoteError = 6,       /* a peer died or closed its connection */
  gcollInProgress = 7,
  gcollNumResults = 8
} gcollResult_t;

typedef enum {
  gcollInt8 = 0, gcollChar = 0,
  gcollUint8 = 1,
  gcollInt32 = 2, gcollInt = 2,
  gcollUint32 = 3,
  gcollInt64 = 4,
  gcollUint64 = 5,
  gcollFloat16 = 6, gcollHalf = 6,
  gcollFloat32 = 7, gcollFloat = 7,
  gcollFloat64 = 8, gcollDouble = 8,
  gcollBfloat16 = 9,
  gcollNumTypes = 10
} gcollDataType_t;

typedef enum {
  gcollSum = 0,
  gcollProd = 1,
  gcollMax = 2,
  gcollMin = 3,
  gcollAvg = 4,    /* sum divided by the number of ranks */
  gcollNumOps = 5
} gcollRedOp_t;

/* An opaque communicator: one rank's membership in one job's plan. */
typedef struct gcollComm *gcollComm_t;

/* Human-readable name of a result ("remote process exited or there was a
 * network error", ...). */
const char *gcollGetErrorString(gcollResult_t result);

/* One-line reason for the last failure of a gcoll call on this thread. */
const char *gcollGetLastError(gcollComm_t comm);

/* GCOLL_MAJOR * 10000 + GCOLL_MINOR * 100 + GCOLL_PATCH. */
gcollResult_t gcollGetVersion(int *version);

/* Joins the job described by a plan file as `rank`. plan_path NULL means
 * $GCOLL_PLAN, rank < 0 means $GCOLL_RANK (both set by gcollrun and the
 * SPANK plugin). Connects only the peers the plan names for this rank, after
 * exchanging addresses through the job's bootstrap (gcollrun's key-value
 * store). Collective over all ranks of the plan; bounded by GCOLL_TIMEOUT. */
gcollResult_t gcollCommInitFromPlan(gcollComm_t *comm, const char *plan_path, int rank);

/* An opaque job identifier (NCCL's size), made by gcollGetUniqueId on one
 * process and passed by the user to every rank (MPI_Bcast, a file, ...). */
typedef struct { char internal[128]; } gcollUniqueId;

/* Starts the job's bootstrap store on a thread of this process (it serves
 * until every rank destroyed its communicator, or GCOLL_TIMEOUT after the
 * first rank was lost or after no rank was connected for that long) and
 * writes its address and a random job key into id. The store listens on
 * 127.0.0.1: all ranks run on this host. Fork the processes of the other
 * ranks before calling it, not after: a child forked while the store's
 * thread holds a lock (the allocator's, say) can hang. */
gcollResult_t gcollGetUniqueId(gcollUniqueId *id);

/* Joins the communicator of id as rank of nranks. The members say where
 * they run through id's store: they run on the launcher's plan
 * ($GCOLL_PLAN) when they are its ranks in its order, on a plan derived
 * from it when they are some of its ranks (in any order), else on a plan
 * computed for them (one node per node they run on; each node's members
 * must have consecutive ranks). Collective over all nranks ranks; any
 * number of such communicators may coexist in a process and a job. */
gcollResult_t gcollCommInitRank(gcollComm_t *comm, int nranks, gcollUniqueId id, int rank);

/* Settings of one communicator, as ncclConfig_t's: fill from
 * GCOLL_CONFIG_INITIALIZER and set what you need; every rank must pass the
 * same values (rank 0's channel bounds are the communicator's). */
typedef struct {
  size_t size;            /* sizeof(gcollConfig_t), from the initializer */
  int minChannels;        /* channels a device collective uses at least (NCCL's
                           * minCTAs); 0: the plan's tuning decides */
  int maxChannels;        /* channels any collective uses at most (NCCL's
                           * maxCTAs); 0: no bound beyond the plan's and CPUs' */
  const char *netName;    /* "IB" or "Socket": the transport between nodes
                           * (NCCL's netName); NULL: net/ib where a device
                           * opens, else sockets */
  const char *commName;   /* shown in this communicator's log lines; NULL: none */
} gcollConfig_t;
#define GCOLL_CONFIG_INITIALIZER {sizeof(gcollConfig_t), 0, 0, NULL, NULL}

/* gcollCommInitRank with settings (config NULL: the defaults). */
gcollResult_t gcollCommInitRankConfig(gcollComm_t *comm, int nranks, gcollUniqueId id, int rank,
                                      const gcollConfig_t *config);

/* As NCCL_SPLIT_NOCOLOR: the rank joins no new communicator. */
#define GCOLL_SPLIT_NOCOLOR (-1)

/* Splits comm as ncclCommSplit: the ranks of one colour (>= 0) form a new
 * communicator, ranked by key (ties by rank in comm); GCOLL_SPLIT_NOCOLOR
 * gives *newcomm = NULL. Collective over every rank of comm; the new
 * communicator gets its plan as gcollCommInitRank does. */
gcollResult_t gcollCommSplit(gcollComm_t comm, int color, int key, gcollComm_t *newcomm);

/* gcollCommShrink's flags, as NCCL_SHRINK_DEFAULT and NCCL_SHRINK_ABORT. */
#define GCOLL_SHRINK_DEFAULT 0x00
#define GCOLL_SHRINK_ABORT 0x01

/* As ncclCommShrink: comm's ranks not excluded, each calling with the same list, form newcomm. */
gcollResult_t gcollCommShrink(gcollComm_t comm, const int *exclude, int nexclude,
                              gcollComm_t *newcomm, int flags);

/* As ncclCommRevoke: running and later calls on comm fail; comm stays for shrink and destroy. */
gcollResult_t gcollCommRevoke(gcollComm_t comm);

/* Makes ndev communicators of one job in this process, rank i in comms[i]
 * (devlist: the GPU of each, used when their FIFOs go in GPU memory with
 * GCOLL_TRANSPORT=p2p; may be NULL). Initialises the ranks
 * concurrently on ndev threads; each comm is then used from its own thread
 * (a collective blocks until every rank has called it). */
gcollResult_t gcollCommInitAll(gcollComm_t *comms, int ndev, const int *devlist);

/* Frees a communicator after its last collective. Not collective, but peers
 * still running collectives with this rank will fail with gcollRemoteError. */
gcollResult_t gcollCommDestroy(gcollComm_t comm);

/* Makes every collective in progress on comm (called from another thread)
 * and every later one fail, then frees comm. Use after an error. */
gcollResult_t gcollCommAbort(gcollComm_t comm);

/* The communicator's asynchronous error: gcollSuccess, or the error a peer
 * failure or an abort left (gcollRemoteError names the dead rank through
 * gcollGetLastError). */
gcollResult_t gcollCommGetAsyncError(gcollComm_t comm, gcollResult_t *asyncError);

gcollResult_t gcollCommCount(const gcollComm_t comm, int *count);
gcollResult_t gcollCommUserRank(const gcollComm_t comm, int *rank);

/* recvbuff[i] = op over ranks of sendbuff[i], on every rank. In place when
 * sendbuff == recvbuff. */
gcollResult_t gcollAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                             gcollDataType_t datatype, gcollRedOp_t op, gcollComm_t comm,
                             void *stream);

/* Copies root's sendbuff to every rank's recvbuff (sendbuff is only read on
 * root; in place when sendbuff == recvbuff). */
gcollResult_t gcollBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                             gcollDataType_t datatype, int root, gcollComm_t comm, void *stream);

/* Like AllReduce, but only root's recvbuff receives the result (recvbuff is
 * not touched on other ranks and may be NULL there). */
gcollResult_t gcollReduce(const void *sendbuff, void *recvbuff, size_t count,
                          gcollDataType_t datatype, gcollRedOp_t op, int root, gcollComm_t comm,
                          void *stream);

/* Gathers sendcount elements from every rank into recvbuff (nranks *
 * sendcount elements, in rank order). In place when sendbuff == recvbuff +
 * rank * sendcount elements. */
gcollResult_t gcollAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                             gcollDataType_t datatype, gcollComm_t comm, void *stream);

/* Reduces nranks * recvcount elements over ranks; rank r receives block r.
 * In place when recvbuff == sendbuff + rank * recvcount elements. */
gcollResult_t gcollReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                 gcollDataType_t datatype, gcollRedOp_t op, gcollComm_t comm,
                                 void *stream);

/* Where a pre-mul-sum's scalar lives (NCCL's ncclScalarResidence_t values). */
typedef enum {
  gcollScalarDevice = 0,         /* device memory, read when the collective runs */
  gcollScalarHostImmediate = 1   /* host memory, read once by the create call */
} gcollScalarResidence_t;

/* A pre-mul-sum op of comm (NCCL's ncclRedOpCreatePreMulSum): each rank's
 * input times that rank's scalar (of datatype), summed over ranks. For
 * allreduce, reduce and reducescatter of that datatype, on host buffers
 * (host scalar only) and device buffers, grouped or not. *op gets a value
 * from gcollNumOps up, valid on comm until gcollRedOpDestroy. */
gcollResult_t gcollRedOpCreatePreMulSum(gcollRedOp_t *op, void *scalar, gcollDataType_t datatype,
                                        gcollScalarResidence_t residence, gcollComm_t comm);
/* Frees a pre-mul-sum op; calls already made with it are not affected. */
gcollResult_t gcollRedOpDestroy(gcollRedOp_t op, gcollComm_t comm);

/* As ncclAlltoAll: sendbuff + p * count goes to rank p, rank p's block to recvbuff + p * count. */
gcollResult_t gcollAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                            gcollDataType_t datatype, gcollComm_t comm, void *stream);

/* As ncclGather: each rank's count elements to root's recvbuff + rank * count (in place there). */
gcollResult_t gcollGather(const void *sendbuff, void *recvbuff, size_t count,
                          gcollDataType_t datatype, int root, gcollComm_t comm, void *stream);

/* As ncclScatter: root's sendbuff + p * count to rank p's recvbuff (in place at root's block). */
gcollResult_t gcollScatter(const void *sendbuff, void *recvbuff, size_t count,
                           gcollDataType_t datatype, int root, gcollComm_t comm, void *stream);

/* Point-to-point. gcollSend sends count elements of sendbuff to rank
 * peer; gcollRecv receives count elements from rank peer into recvbuff.
 * Host buffers, stream = NULL. Outside a group both block until done: a
 * send returns once its data is in the connection to peer (sendbuff may be
 * reused), which for a message larger than the connection's buffer (8
 * slots of GCOLL_SLOT_BYTES) or a first message to that peer means the
 * peer has posted the matching receive; a receive returns when the data
 * arrived. A wait longer than GCOLL_TIMEOUT without progress fails with
 * gcollSystemError (gcollRemoteError naming the rank when a peer died).
 * Matching follows NCCL: the k-th send from rank a to rank b meets b's k-th
 * receive from a; count and type of the two must give the same byte count,
 * else the receive fails with gcollInvalidUsage (the message is consumed,
 * the communicator stays usable). count 0 is a message without data that
 * matches like any other. peer may be the own rank: such a send and receive
 * must be in the same group, where they are paired in call order.
 * Connections to peers the plan does not name are made on first use
 * (through the job's bootstrap store, under srun --mpi=pmi2 too) and kept
 * until gcollCommDestroy. */
gcollResult_t gcollSend(const void *sendbuff, size_t count, gcollDataType_t datatype, int peer,
                        gcollComm_t comm, void *stream);
gcollResult_t gcollRecv(void *recvbuff, size_t count, gcollDataType_t datatype, int peer,
                        gcollComm_t comm, void *stream);

/* Groups (per thread, nestable). Between gcollGroupStart and the matching
 * outermost gcollGroupEnd, sends, receives and collectives only check their
 * arguments and queue; gcollGroupEnd runs them and returns when all
 * completed. It runs all sends and receives first, concurrently (of any
 * communicators), so exchanges like "send to next, receive from previous"
 * or an all-to-all cannot deadlock; then the collectives, in call order on
 * each communicator and on different communicators concurrently, so one
 * thread can drive the communicators of gcollCommInitAll (NCCL's one
 * process, several devices pattern). Unlike NCCL, the group's sends do not
 * progress alongside its collectives: a peer must post the matching
 * receive before entering a collective. Buffers must stay valid until
 * gcollGroupEnd returns. A call refused inside a group makes gcollGroupEnd
 * run nothing and return that call's error; of several failures while
 * running, the one called first is returned. gcollGroupEnd without
 * gcollGroupStart fails with gcollInvalidUsage. */
gcollResult_t gcollGroupStart(void);
gcollResult_t gcollGroupEnd(void);

#ifdef __cplusplus
}
#endif
#endif
