/* What comm_p2p.c (host progress, the API), comm_p2p_stage.c (device
 * buffers staged by the calling thread) and comm_p2p_gpu.c (device buffers
 * moved by the GPU) share: a connection's and an operation's state during a
 * run. Internal to send/recv. */
#ifndef GCOLL_RUNTIME_COMM_P2P_RUN_H
#define GCOLL_RUNTIME_COMM_P2P_RUN_H

#include <stdint.h>

#include "kernels/p2p_wire.h"
#include "runtime/comm.h"
#include "runtime/comm_p2p.h"

enum conn_state { CONN_NONE = 0, CONN_WAIT_ADDR, CONN_READY };

struct p2p_conn {
  struct gcoll_conn c;
  enum conn_state state;
  int completed;            /* receiver: recv_complete done */
  uint64_t seq;             /* messages completed on this connection */
  uint64_t next_poll_ms;    /* sender waiting for the address: next look */
  uint32_t poll_gap_ms;
  char why[384];            /* sender: why the address is still missing */
};

struct gcoll_p2p {
  struct p2p_conn *send, *recv; /* per peer rank */
  int kernel_queued;            /* device runs queued since the host last waited for them */
  int kernel_said;              /* the INFO line about the first one was written */
};

/* Where one operation stands during a run. */
struct op_run {
  const struct gcoll_p2p_op *op;
  struct p2p_conn *pc;      /* NULL for self operations */
  int after;                /* earlier operation on the same connection, -1 */
  int done;
  uint64_t off;             /* header and data bytes moved */
  uint64_t total;           /* receiver: known once the header arrived */
  int have_header;
  struct gcoll_p2p_header hdr;
  gcollResult_t mismatch;   /* receiver: a size mismatch, reported at the end */
  char why[384];
  struct p2p_gpu *gpu;      /* the run's driver state for a device buffer; NULL: host */
  int gpu_dev;              /* the buffer's GPU, an index into gpu->devs */
};

/* ---- comm_p2p.c ---- */
/* comm's per-peer connection table, made on first use. */
gcollResult_t gcoll_p2p_alloc(struct gcollComm *comm);
/* Every operation's connection: receive ends made and published, sends
 * looking for their receiver's address. */
gcollResult_t gcoll_p2p_prepare_conns(struct op_run *runs, const struct gcoll_p2p_op *ops, int n);
/* One look for the receiver's address (rate-limited); attaches when it is
 * there, *moved then set. */
gcollResult_t gcoll_p2p_try_attach(struct gcollComm *comm, int peer, struct p2p_conn *pc,
                                   uint64_t deadline_ms, int *moved);
/* A run's stall limit: the longest GCOLL_TIMEOUT of its communicators. */
uint64_t gcoll_p2p_timeout_ms(struct gcollComm **comms, int ncomms);
/* Self sends and receives paired in call order: partner[i] is the receive
 * of self send i, -1 for other operations; a refusal when unmatched. */
gcollResult_t gcoll_p2p_match_self(const struct op_run *runs, int n, int *partner);

/* ---- comm_p2p_stage.c ---- */
enum gpu_dir { GPU_DTOH, GPU_HTOD };
/* Before a staged run with device buffers: contexts, earlier device work
 * done, streams synchronized; *out stays NULL for host memory only, else
 * gcoll_p2p_stage_end must follow whatever this returns. */
gcollResult_t gcoll_p2p_stage_begin(struct op_run *runs, int n, struct gcollComm **comms,
                                    int ncomms, const char *what, struct p2p_gpu **out);
/* After it: copies to the GPU complete, the caller's context current. */
gcollResult_t gcoll_p2p_stage_end(struct p2p_gpu *g, gcollResult_t rc, const char *what);
/* One synchronous copy between host memory and r's device buffer. */
gcollResult_t gcoll_p2p_gpu_copy(const struct op_run *r, void *dst, const void *src, size_t n,
                                 enum gpu_dir dir);
/* A self send s met its receive q, one of them or both on device memory. */
gcollResult_t gcoll_p2p_gpu_self_copy(const struct op_run *s, const struct op_run *q);

#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
/* gcollInvalidUsage with one line when op is on device memory and its
 * stream is being captured into a CUDA graph (send/recv cannot be), else
 * gcollSuccess. */
gcollResult_t gcoll_p2p_refuse_capture(const struct gcoll_cuda_api *cu,
                                       const struct gcoll_p2p_op *op, const char *what);
#endif

/* ---- comm_p2p_gpu.c ---- */
/* Whether the GPU runs this run itself (see comm_p2p.c). */
int gcoll_p2p_on_gpu(const struct gcoll_p2p_op *ops, int n, struct gcollComm **comms, int ncomms);
/* The run queued on the GPU; returns once queued. */
gcollResult_t gcoll_p2p_run_on_gpu(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                                   struct gcollComm **comms, int ncomms, const char *what);
/* The device runs queued on these communicators done (the host moves data
 * on their connections only then). */
gcollResult_t gcoll_p2p_wait_gpu_runs(struct gcollComm **comms, int ncomms, const char *what);

#endif
