/* Send/recv on device buffers queued on the stream and moved by the GPU
 * (see comm_p2p.c): which runs go there, the connections made first, one
 * gcoll_cuda_p2p launch per communicator. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/wait.h"
#include "runtime/comm.h"
#include "runtime/comm_p2p.h"
#include "runtime/comm_p2p_run.h"
#include "runtime/proxy.h"
#include "runtime/settings.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

/* The host moves data on connections only after the device runs queued on
 * them have finished: the two never share a FIFO at once. */
gcollResult_t gcoll_p2p_wait_gpu_runs(struct gcollComm **comms, int ncomms, const char *what) {
  for (int c = 0; c < ncomms; c++) {
    struct gcollComm *comm = comms[c];
    if (comm->p2p == NULL || !comm->p2p->kernel_queued) continue;
    char err[512];
    gcollResult_t rc = comm->exec[GCOLL_EXEC_CUDA].ops->wait(comm->exec[GCOLL_EXEC_CUDA].e, err,
                                                              sizeof(err));
    if (rc != gcollSuccess) return gcoll_comm_explain(comm, what, rc, err);
    comm->p2p->kernel_queued = 0;
  }
  return gcollSuccess;
}

#ifdef HAVE_CUDA
/* Whether the GPU runs this run itself (gcoll_cuda_p2p, queued on the
 * streams), as NCCL's: every operation on device memory of its
 * communicator's GPU (a zero-byte one without a buffer goes with any), each
 * communicator with some device operation, unless GCOLL_P2P_KERNEL=0.
 * Otherwise the calling thread stages device memory through the host,
 * blocking. On an H100 under MPS the GPU moved 128 MB 3-4.7x faster than
 * staging; several processes sharing one GPU without MPS take turns in
 * time slices and are slower than staging (as are their collectives). */
int gcoll_p2p_on_gpu(const struct gcoll_p2p_op *ops, int n, struct gcollComm **comms, int ncomms) {
  const char *setting = gcoll_setting("GCOLL_P2P_KERNEL");
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  if ((setting != NULL && strcmp(setting, "0") == 0) || cuda == NULL || cuda->launch_p2p == NULL)
    return 0;
  for (int c = 0; c < ncomms; c++) {
    struct gcollComm *comm = comms[c];
    int dev = -1;
    for (int i = 0; i < n; i++) {
      const struct gcoll_p2p_op *op = &ops[i];
      if (op->comm != comm) continue;
      if (op->device < 0 && (op->bytes > 0 || (op->is_send ? op->sendbuf : op->recvbuf) != NULL))
        return 0;
      if (op->device >= 0 && dev >= 0 && op->device != dev) return 0;
      if (op->device >= 0) dev = op->device;
    }
    if (dev < 0) return 0;
    /* One device per rank, as for collectives (comm_coll.c). */
    if (comm->exec[GCOLL_EXEC_CUDA].e == NULL && !comm->fifos_on_device) comm->cuda_device = dev;
    if (dev != comm->cuda_device) return 0;
  }
  return 1;
}

/* Every send attached to its receiver (whose address comes when it posts
 * its receive): the GPU can only write to a FIFO that exists. Bounded by
 * GCOLL_TIMEOUT without progress, ended by an abort. */
static gcollResult_t attach_all(struct op_run *runs, int n, struct gcollComm **comms, int ncomms,
                                const char *what) {
  uint64_t timeout_ms = gcoll_p2p_timeout_ms(comms, ncomms);
  uint64_t timeout_ns = timeout_ms > UINT64_MAX / 1000000u ? UINT64_MAX : timeout_ms * 1000000u;
  struct gcoll_wait w;
  gcoll_wait_init(&w, NULL, NULL, timeout_ns);
  for (;;) {
    int moved = 0;
    struct op_run *waiting = NULL;
    uint64_t deadline_ms = gcoll_bootstrap_now_ms() + timeout_ms;
    for (int i = 0; i < n; i++) {
      struct op_run *r = &runs[i];
      if (r->pc == NULL || !r->op->is_send || r->pc->state != CONN_WAIT_ADDR) continue;
      gcollResult_t rc = gcoll_p2p_try_attach(r->op->comm, r->op->peer, r->pc, deadline_ms, &moved);
      if (rc != gcollSuccess) return rc;
      if (r->pc->state == CONN_WAIT_ADDR && waiting == NULL) waiting = r;
    }
    if (waiting == NULL) return gcollSuccess;
    gcollResult_t rc = gcollSuccess;
    struct gcollComm *failed = waiting->op->comm;
    for (int i = 0; i < ncomms && rc == gcollSuccess; i++)
      if ((rc = (gcollResult_t)atomic_load(&comms[i]->abort_word)) != gcollSuccess)
        failed = comms[i];
    if (rc == gcollSuccess && moved) {
      gcoll_wait_init(&w, NULL, NULL, timeout_ns);
      continue;
    }
    if (rc == gcollSuccess) rc = gcoll_wait_round(&w);
    if (rc != gcollSuccess) {
      char why[512];
      snprintf(why, sizeof(why), "gcollSend to rank %d: %s", waiting->op->peer, waiting->pc->why);
      return gcoll_comm_explain(failed, what, rc, why);
    }
  }
}

/* comm's share of the run as the executor takes it: a queue per
 * connection (its operations in call order, numbered on the connection
 * now), a queue per self copy. */
static gcollResult_t describe(const struct op_run *runs, const int *partner, int n,
                              struct gcollComm *comm, struct gcoll_exec_p2p_op *out, int *nout,
                              void **streams, int *nstreams) {
  const struct p2p_conn **queues = calloc((size_t)n, sizeof(*queues));
  if (queues == NULL) return gcoll_fail(gcollSystemError, "out of memory for %d operations", n);
  int nq = 0, m = 0;
  *nstreams = 0;
  for (int i = 0; i < n; i++) {
    const struct op_run *r = &runs[i];
    const struct gcoll_p2p_op *op = r->op;
    if (op->comm != comm) continue;
    int seen = 0;
    for (int k = 0; k < *nstreams && !seen; k++) seen = streams[k] == op->stream;
    if (!seen) streams[(*nstreams)++] = op->stream;
    if (r->pc == NULL && (!op->is_send || partner[i] < 0)) continue; /* a self receive */
    struct gcoll_exec_p2p_op *d = &out[m++];
    memset(d, 0, sizeof(*d));
    d->bytes = op->bytes;
    d->peer = op->peer;
    if (r->pc == NULL) {
      d->kind = GCOLL_EXEC_P2P_COPY;
      d->src = op->sendbuf;
      d->dst = runs[partner[i]].op->recvbuf;
      d->queue = nq++;
      continue;
    }
    int q = 0;
    while (q < nq && queues[q] != r->pc) q++;
    if (q == nq) queues[nq++] = r->pc;
    d->queue = q;
    d->kind = op->is_send ? GCOLL_EXEC_P2P_SEND : GCOLL_EXEC_P2P_RECV;
    d->fifo = r->pc->c.fifo;
    d->src = op->sendbuf;
    d->dst = op->recvbuf;
    d->seq = r->pc->seq++;
  }
  free(queues);
  *nout = m;
  return gcollSuccess;
}

/* The run queued on the GPU, one launch per communicator; returns once
 * queued (a failure shows in a later call, gcollCommGetAsyncError or
 * destroy, as for device collectives). The caller's current context is
 * current again afterwards. */
gcollResult_t gcoll_p2p_run_on_gpu(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                                struct gcollComm **comms, int ncomms, const char *what) {
  const struct gcoll_cuda_api *cu = gcoll_cuda_api_get(NULL, 0);
  if (cu == NULL) return gcoll_fail(gcollUnhandledCudaError, "%s: no CUDA driver", what);
  gcoll_cu_context prev = NULL;
  if (cu->ctx_get_current(&prev) != GCOLL_CU_SUCCESS) prev = NULL;
  gcollResult_t rc = gcollSuccess;
  for (int i = 0; i < n && rc == gcollSuccess; i++)
    rc = gcoll_p2p_refuse_capture(cu, &ops[i], what);
  if (rc == gcollSuccess) rc = gcoll_p2p_prepare_conns(runs, ops, n);
  int *partner = malloc((size_t)n * sizeof(*partner));
  struct gcoll_exec_p2p_op *descs = calloc((size_t)n, sizeof(*descs));
  void **streams = calloc((size_t)n, sizeof(*streams));
  if (partner == NULL || descs == NULL || streams == NULL)
    rc = gcoll_fail(gcollSystemError, "%s: out of memory for %d operations", what, n);
  if (rc == gcollSuccess) rc = gcoll_p2p_match_self(runs, n, partner);
  if (rc == gcollSuccess) rc = attach_all(runs, n, comms, ncomms, what);
  for (int c = 0; c < ncomms && rc == gcollSuccess; c++) {
    struct gcollComm *comm = comms[c];
    int m = 0, ns = 0;
    char err[512];
    rc = gcoll_p2p_alloc(comm);   /* a run of self copies made none yet */
    if (rc == gcollSuccess) rc = describe(runs, partner, n, comm, descs, &m, streams, &ns);
    if (rc == gcollSuccess) rc = gcoll_comm_executor(comm, GCOLL_EXEC_CUDA);
    if (rc != gcollSuccess) break;
    if (comm->has_net) gcoll_proxy_wake(comm->proxy);
    const struct gcoll_exec_ops *x = comm->exec[GCOLL_EXEC_CUDA].ops;
    struct gcoll_exec *e = comm->exec[GCOLL_EXEC_CUDA].e;
    rc = x->launch_p2p(e, descs, m, streams, ns, err, sizeof(err));
    if (rc == gcollSuccess) {
      if (!comm->p2p->kernel_said)
        gcoll_log_info(comm, "send/recv on device buffers: the GPU moves them (%d operations in "
                       "the first group), queued on the caller's stream", m);
      comm->p2p->kernel_said = 1;
      comm->p2p->kernel_queued = 1;
      rc = x->poll(e, err, sizeof(err));
      if (rc == gcollInProgress) rc = gcollSuccess;
    }
    if (rc != gcollSuccess) rc = gcoll_comm_explain(comm, what, rc, err);
  }
  cu->ctx_set_current(prev);
  free(partner);
  free(descs);
  free(streams);
  return rc;
}
#else
int gcoll_p2p_on_gpu(const struct gcoll_p2p_op *ops, int n, struct gcollComm **comms, int ncomms) {
  (void)ops, (void)n, (void)comms, (void)ncomms;
  return 0;
}

gcollResult_t gcoll_p2p_run_on_gpu(struct op_run *runs, const struct gcoll_p2p_op *ops, int n,
                                struct gcollComm **comms, int ncomms, const char *what) {
  (void)runs, (void)ops, (void)n, (void)comms, (void)ncomms;
  return gcoll_fail(gcollInternalError, "%s: device send/recv in a build without CUDA", what);
}
#endif
