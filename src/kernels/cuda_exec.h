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
 * One collective in flight per executor: launch, then poll (or wait) until
 * it reports something other than gcollInProgress before the next launch.
 * The partition of buffers into channels, in-place rules and avg handling
 * are host_exec.h's.
 */
#ifndef GCOLL_KERNELS_CUDA_EXEC_H
#define GCOLL_KERNELS_CUDA_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "gcoll.h"
#include "gcoll_plan.h"
#include "kernels/cuda_loader.h"
#include "kernels/cuda_work.h"

#define GCOLL_CUDA_EXEC_MAX_PEERS GCOLL_CUDA_MAX_PEERS

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

/* Validates the call like gcoll_host_exec_run, clears the status and local
 * abort words, and enqueues the kernel on `stream` (a CUstream; NULL = the
 * executor's own). Returns at once: gcollSuccess when enqueued,
 * gcollInvalidArgument/gcollInvalidUsage (nothing enqueued), or
 * gcollUnhandledCudaError when the driver refused the launch. */
gcollResult_t gcoll_cuda_exec_launch(struct gcoll_cuda_exec *e, const struct gcoll_cuda_coll *c,
                                     void *stream, char *err, size_t errlen);

/* gcollInProgress while the kernel runs; then its result once: gcollSuccess,
 * the abort word's value, gcollSystemError when the GPU deadline passed,
 * gcollInternalError on a protocol mismatch, gcollUnhandledCudaError when
 * the stream failed; err names the first failing channel and what it
 * waited for. gcollInvalidUsage when nothing was launched. */
gcollResult_t gcoll_cuda_exec_poll(struct gcoll_cuda_exec *e, char *err, size_t errlen);

/* Polls until the result is known. Bounded: after timeout_ns plus a grace
 * second without completion (a kernel that never started, e.g. because the
 * GPU is full) it sets the abort word and waits another grace second, then
 * reports gcollSystemError. */
gcollResult_t gcoll_cuda_exec_wait(struct gcoll_cuda_exec *e, char *err, size_t errlen);

/* Makes a running kernel stop at its next check (within microseconds) with
 * result `why` (non-zero). Safe from any thread. Sticky: the FIFO counters
 * are out of step after an abort, so later launches fail with `why`. */
void gcoll_cuda_exec_abort(struct gcoll_cuda_exec *e, gcollResult_t why);

#endif
