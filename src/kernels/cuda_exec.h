/* The CUDA executor: runs one collective over a rank's channels with the
 * device kernel (coll_kernels.cu), asynchronously on a stream.
 *
 * Not wired into the communicator yet; this is the interface the runtime
 * calls. Everything goes through the driver API loaded by cuda_loader.c,
 * so creating an executor on a machine without driver or GPU fails cleanly
 * (gcollUnhandledCudaError with the probe's reason) and nothing else in
 * libgcoll depends on CUDA.
 *
 * Connections are FIFOs in fifo.h's layout that the caller allocated,
 * formatted (gcoll_fifo_init on the host copy, then copied, or in
 * host-pinned memory) and keeps alive, given as addresses the GPU can use:
 * device memory, a peer GPU's memory opened by IPC, or host-pinned memory
 * mapped for the device. All FIFOs of one channel on every rank must have
 * the same slot size, as for the host executor, and a FIFO must not be used
 * by the host executor and a kernel at the same time.
 *
 * Launches queue: each returns once the kernel is enqueued, and runs on the
 * executor's own stream after the caller's stream's earlier work, with the
 * caller's stream's later work after it (events), so launches never overlap
 * whatever streams callers pass. Up to GCOLL_CUDA_EXEC_SLOTS may be in
 * flight (a status row each); one more waits for the oldest. Results come
 * in launch order (poll, wait); the first failure is sticky: the FIFO
 * counters are out of step after it, so later launches are refused with it.
 * The partition of buffers into channels, in-place rules and avg handling
 * are coll_geometry.h's and host_exec.h's.
 */
#ifndef GCOLL_KERNELS_CUDA_EXEC_H
#define GCOLL_KERNELS_CUDA_EXEC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/cuda_loader.h"
#include "kernels/cuda_work.h"
#include "kernels/reduce.h"

#define GCOLL_CUDA_EXEC_MAX_PEERS GCOLL_CUDA_MAX_PEERS
#define GCOLL_CUDA_EXEC_SLOTS 32

struct gcoll_cuda_exec_channel {
  gcoll_cu_deviceptr ring_recv_prev;   /* 0 when nranks == 1 */
  gcoll_cu_deviceptr ring_send_next;
  const int *ring_ranks;               /* host array, ranks[pos] = global rank; copied */
  int ring_pos;
  int has_tree;                        /* 0: the tree algorithm is unavailable */
  int tree_parent;                     /* global rank, -1 at the root */
  int tree_nchildren;
  gcoll_cu_deviceptr tree_recv_parent, tree_send_parent;
  gcoll_cu_deviceptr tree_recv_child[GCOLL_CUDA_EXEC_MAX_PEERS];
  gcoll_cu_deviceptr tree_send_child[GCOLL_CUDA_EXEC_MAX_PEERS];
  size_t slot_bytes;                   /* the channel's FIFO slot size (sizes LL scratch) */
};

struct gcoll_cuda_exec_config {
  int device;                          /* CUDA device ordinal */
  int rank, nranks;
  int nchannels;                       /* 1..GCOLL_CUDA_MAX_CHANNELS */
  const struct gcoll_cuda_exec_channel *channels;
  uint64_t timeout_ns;                 /* per collective, measured on the GPU */
  /* A host word whose non-zero value aborts the kernels with that result
   * (the communicator's, set when a transport sees a peer die), forwarded
   * whenever the executor polls; NULL: none. */
  _Atomic int *extern_abort;
};

struct gcoll_cuda_coll {
  enum gcoll_coll coll;
  gcoll_cu_deviceptr sendbuf, recvbuf; /* device addresses */
  size_t count;                        /* elements (per rank for allgather/rs) */
  gcollDataType_t dtype;
  gcollRedOp_t op;
  int root;
  enum gcoll_algo algo;                /* ring; tree for allreduce */
  enum gcoll_proto proto;              /* SIMPLE or LL */
  int nchannels;                       /* 0 = all configured */
  enum gcoll_premul_kind premul;       /* reduce.h: op is sum */
  uint64_t premul_k;                   /* IMMEDIATE: the scalar's bits; DEVICE: its address */
};

struct gcoll_cuda_exec;

/* Probes the driver, retains the device's primary context (made current on
 * the calling thread), loads the embedded fatbin, copies the channel table
 * and ring orders to the device, allocates LL scratch and host-mapped status
 * and abort words, and creates a non-blocking stream. NULL with a one-line
 * reason on failure ("no CUDA driver: ...", "no GPU: ...", "GPU 0 is
 * sm_75; the kernels need sm_80 or newer", a driver call's error). */
struct gcoll_cuda_exec *gcoll_cuda_exec_create(const struct gcoll_cuda_exec_config *cfg,
                                               char *err, size_t errlen);
/* Waits (bounded by the timeout) for a collective still in flight, aborting
 * it if needed, then frees everything. */
void gcoll_cuda_exec_destroy(struct gcoll_cuda_exec *e);

/* Validates the call like gcoll_host_exec_run, takes a free status slot
 * (waiting for the oldest launch when all are in flight), and enqueues the
 * kernel ordered with `stream` (a CUstream; NULL = the legacy default
 * stream). Returns once enqueued: gcollSuccess, gcollInvalidArgument/
 * gcollInvalidUsage (nothing enqueued), an earlier launch's sticky failure,
 * or gcollUnhandledCudaError when the driver refused. */
gcollResult_t gcoll_cuda_exec_launch(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                     void *stream, char *err, size_t errlen);

/* Send/recv on device buffers: one group's operations (device addresses:
 * FIFOs as the GPU maps them, buffers), run by gcoll_cuda_p2p on one block
 * per queue up to the executor's channel count (more only where the
 * operations need them, up to GCOLL_CUDA_MAX_CHANNELS), queued on the executor's
 * stream after the earlier work of each of the nstreams callers' streams,
 * which wait for it. Returns once enqueued, as gcoll_cuda_exec_launch;
 * gcollInvalidUsage when a stream is being captured (a replay would reuse
 * the messages' numbers) or a block would get more than
 * GCOLL_CUDA_P2P_MAX_BLOCK_OPS operations. */
/* gcollInvalidUsage with one line when one of the streams is being
 * captured into a CUDA graph (send/recv cannot be), else gcollSuccess. */
gcollResult_t gcoll_cuda_exec_p2p_streams_ok(struct gcoll_cuda_exec *e,
                                             const gcoll_cu_stream *streams, int nstreams,
                                             char *err, size_t errlen);
gcollResult_t gcoll_cuda_exec_launch_p2p(struct gcoll_cuda_exec *e,
                                         const struct gcoll_cuda_p2p_op *ops, int nops,
                                         const gcoll_cu_stream *streams, int nstreams, char *err,
                                         size_t errlen);

/* Collects the results of finished launches, in order, without waiting:
 * gcollInProgress while some still run, else gcollSuccess or the first
 * failure (the abort word's value, gcollSystemError when a GPU deadline
 * passed, gcollInternalError on a protocol mismatch, gcollUnhandledCudaError
 * when the stream failed); err names the first failing channel and what it
 * waited for. */
gcollResult_t gcoll_cuda_exec_poll(struct gcoll_cuda_exec *e, char *err, size_t errlen);

/* Polls until every launch so far (wait), or the first `reaped` launches
 * (wait_until), have a result. Bounded: after timeout_ns plus a grace second
 * without a launch finishing (a kernel that never started, e.g. because the
 * GPU is full) it sets the abort word and waits another grace second, then
 * reports gcollSystemError. */
gcollResult_t gcoll_cuda_exec_wait(struct gcoll_cuda_exec *e, char *err, size_t errlen);
gcollResult_t gcoll_cuda_exec_wait_until(struct gcoll_cuda_exec *e, uint64_t reaped, char *err,
                                         size_t errlen);

/* Where the first failed collective stopped, when a channel of it passed
 * its deadline waiting on a FIFO: the host can then say what those FIFOs
 * hold now (exec_cuda.c), which tells a step that never came from one the
 * GPU did not see. */
struct gcoll_cuda_stall {
  int channel;                         /* the launch's channel (block) */
  enum gcoll_algo algo;
  int what;                            /* GCOLL_CUDA_FAIL_RECV_DATA or _SEND_SLOT */
  int peer;                            /* the index among the channel's receive/send peers */
  uint64_t step;                       /* the FIFO step it waited for */
};

/* 1 with *out filled when the executor's sticky failure is a collective
 * whose channel passed its deadline on a FIFO, else 0. */
int gcoll_cuda_exec_stall(const struct gcoll_cuda_exec *e, struct gcoll_cuda_stall *out);

/* Makes a running kernel stop at its next check (within microseconds) with
 * result `why` (non-zero). Safe from any thread. Sticky: the FIFO counters
 * are out of step after an abort, so later launches fail with `why`. */
void gcoll_cuda_exec_abort(struct gcoll_cuda_exec *e, gcollResult_t why);

#endif
