/* The collective API: argument checks, the plan's tuning choice, and one
 * run of the executor. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/fifo.h"
#include "kernels/reduce.h"
#include "runtime/comm.h"
#include "runtime/proxy.h"

struct call {
  const char *name;
  enum gcoll_coll coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;          /* per rank for allgather / reducescatter */
  gcollDataType_t dtype;
  gcollRedOp_t op;
  int root;
  int has_op, has_root;
};

/* Which executor the buffers call for: CUDA when they are device memory
 * (both of them: one host and one device buffer is refused), the host
 * otherwise; a stream goes with device buffers only. */
static gcollResult_t choose_executor(struct gcollComm *comm, const struct call *c, void *stream,
                                     enum gcoll_exec_kind *kind) {
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  int dev_send = -1, dev_recv = -1;
  int send_dev = cuda != NULL && c->sendbuf != NULL && cuda->owns(c->sendbuf, &dev_send);
  /* In place: one question (on a GPU machine each is a driver call). */
  int recv_dev = c->recvbuf == c->sendbuf ? (dev_recv = dev_send, send_dev)
                 : cuda != NULL && c->recvbuf != NULL && cuda->owns(c->recvbuf, &dev_recv);
  int root_only_send = c->coll == GCOLL_COLL_BROADCAST && comm->rank != c->root;
  int root_only_recv = c->coll == GCOLL_COLL_REDUCE && comm->rank != c->root;
  /* A buffer the call does not use on this rank has no say. */
  if (c->sendbuf == NULL || root_only_send) send_dev = recv_dev;
  if (c->recvbuf == NULL || root_only_recv) recv_dev = send_dev;
  if (send_dev != recv_dev)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is %s memory and recvbuff %s memory: "
                      "pass both in device memory or both in host memory", c->name,
                      send_dev ? "device" : "host", recv_dev ? "device" : "host");
  *kind = send_dev ? GCOLL_EXEC_CUDA : GCOLL_EXEC_HOST;
  /* The host executor cannot read FIFOs in GPU memory; a call that moves
   * nothing is the kernel's as well, so that it keeps stream order. */
  if (*kind == GCOLL_EXEC_HOST && comm->fifos_on_device && c->count == 0) {
    *kind = GCOLL_EXEC_CUDA;
    return gcollSuccess;
  }
  if (*kind == GCOLL_EXEC_HOST && comm->fifos_on_device)
    return gcoll_fail(gcollInvalidUsage, "%s: host buffers, but this communicator's connections "
                      "are in GPU %d's memory (p2p transport), which only a kernel can use: pass "
                      "device buffers, or set GCOLL_P2P_DISABLE=1 before init", c->name,
                      comm->cuda_device);
  if (*kind == GCOLL_EXEC_HOST) {
    if (stream != NULL)
      return gcoll_fail(gcollInvalidUsage, "%s: a stream with host buffers: collectives on host "
                                           "memory block and run on no stream (pass NULL, or "
                                           "device buffers)", c->name);
    return gcollSuccess;
  }
  int dev = dev_send >= 0 ? dev_send : dev_recv;
  if (dev_send >= 0 && dev_recv >= 0 && dev_send != dev_recv)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is on GPU %d and recvbuff on GPU %d",
                      c->name, dev_send, dev_recv);
  /* One device per rank, as NCCL: fixed at init when the FIFOs are in GPU
   * memory, else by the first device collective. */
  if (comm->exec[GCOLL_EXEC_CUDA].e == NULL && !comm->fifos_on_device && dev >= 0)
    comm->cuda_device = dev;
  if (dev >= 0 && dev != comm->cuda_device)
    return gcoll_fail(gcollInvalidArgument, "%s: buffers on GPU %d, but this communicator runs "
                      "on GPU %d", c->name, dev, comm->cuda_device);
  return gcollSuccess;
}

gcollResult_t gcoll_comm_check_usable(struct gcollComm *comm, const char *what) {
  int aborted = atomic_load(&comm->abort_word);
  if (aborted == gcollRemoteError)
    return gcoll_fail(gcollRemoteError, "%s: rank %d died or closed its connection earlier",
                      what, atomic_load(&comm->failed_peer));
  if (aborted != 0)
    return gcoll_fail((gcollResult_t)aborted, "%s: the communicator was aborted", what);
  return gcollSuccess;
}

/* *hc gets the op as it runs (a pre-mul-sum resolved to sum and its scalar). */
static gcollResult_t check_args(struct gcollComm *comm, const struct call *c, void *stream,
                                size_t *bytes, enum gcoll_exec_kind *kind,
                                struct gcoll_host_coll *hc) {
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", c->name);
  size_t size = gcoll_dtype_size(c->dtype);
  if (size == 0)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not a gcollDataType_t", c->name,
                      (int)c->dtype);
  hc->op = c->has_op ? c->op : gcollSum;
  if (c->has_op) {
    gcollResult_t rc = gcoll_comm_resolve_op(comm, &hc->op, c->dtype, hc, c->name);
    if (rc != gcollSuccess) return rc;
  }
  if (c->has_root && (c->root < 0 || c->root >= comm->nranks))
    return gcoll_fail(gcollInvalidArgument, "%s: root %d is not a rank (0..%d)", c->name, c->root,
                      comm->nranks - 1);
  int per_rank = c->coll == GCOLL_COLL_ALLGATHER || c->coll == GCOLL_COLL_REDUCESCATTER;
  size_t blocks = per_rank ? (size_t)comm->nranks : 1;
  /* Not SIZE_MAX / size / blocks: two 64-bit divisions were a tenth of a
   * small call's time. */
  if (__builtin_mul_overflow(c->count, size, bytes) ||
      __builtin_mul_overflow(*bytes, blocks, bytes))
    return gcoll_fail(gcollInvalidArgument, "%s: count %zu overflows the buffer size", c->name,
                      c->count);
  if (c->count > 0) {
    int root_only_recv = c->coll == GCOLL_COLL_REDUCE && comm->rank != c->root;
    int root_only_send = c->coll == GCOLL_COLL_BROADCAST && comm->rank != c->root;
    if (c->sendbuf == NULL && !root_only_send)
      return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is NULL with count %zu", c->name,
                        c->count);
    if (c->recvbuf == NULL && !root_only_recv)
      return gcoll_fail(gcollInvalidArgument, "%s: recvbuff is NULL with count %zu", c->name,
                        c->count);
  }
  gcollResult_t rc = gcoll_comm_check_usable(comm, c->name);
  if (rc == gcollSuccess) rc = choose_executor(comm, c, stream, kind);
  if (rc == gcollSuccess && *kind == GCOLL_EXEC_HOST && hc->premul == GCOLL_PREMUL_DEVICE)
    return gcoll_fail(gcollInvalidUsage, "%s: a pre-mul-sum whose scalar is in device memory "
                      "(gcollScalarDevice) on host buffers: the host cannot read that scalar; "
                      "pass device buffers, or make the op with gcollScalarHostImmediate",
                      c->name);
  return rc;
}

/* Host allreduce, allgather and reducescatter up to this size (the whole
 * message, every rank's part for allgather/reducescatter) move their
 * network steps in the executor's own threads (proxy.h's inline polling):
 * a step of a small collective then costs one system call on each side
 * instead of two thread hand-offs, which dominated 4 ranks on 2 virtual
 * nodes over TCP on 2 cores (issue 17). Above it the proxy thread keeps
 * moving the network while the executor reduces and copies, the overlap
 * large messages need. Broadcast and reduce keep the proxy thread at every
 * size: a rank returns as soon as its own part is done (the root of a
 * broadcast once its data is in the FIFO), so back-to-back calls pipeline
 * through the proxies, and inline they measured slower (broadcast 8 B to
 * 32 KiB on 4 ranks over 2 virtual nodes: 11-17 us against 4-10 us). An
 * empty call has nothing to move. */
#define NET_INLINE_MAX_BYTES (64u * 1024u)
static int net_inline(const struct gcollComm *comm, enum gcoll_coll coll, size_t bytes,
                      enum gcoll_exec_kind kind) {
  return comm->has_net && kind == GCOLL_EXEC_HOST && bytes > 0 && bytes <= NET_INLINE_MAX_BYTES &&
         (coll == GCOLL_COLL_ALLREDUCE || coll == GCOLL_COLL_ALLGATHER ||
          coll == GCOLL_COLL_REDUCESCATTER);
}

/* Host reduces whose root is the root of channel 0's tree go up that tree
 * when GCOLL_ALGO=tree asks for it; other roots keep the ring. Each
 * node's partial sum then crosses the network once, where the ring's
 * partial sums cross at each node boundary on their way around (both
 * cross-node edges on two nodes for root 0). Not the default: 4 ranks on
 * 2 virtual nodes over net/socket on 2 cores, 128 B to 8 KiB, the tree
 * was 1.3-2.2x faster over loops of 200-1000 calls (4.3-5.9 us against
 * 6.0-8.4, medians of 9 alternating runs) but 1.2-1.4x slower over the
 * 20 calls that follow other collectives in gcoll-perf and compare-mpi.sh
 * (5.8-8.5 against 4.8-6.1 us, 8 runs), and no faster after 100 warm-up
 * calls (3.8-5.7 against 3.5-5.7). Every rank knows the tree's root
 * (comm->tree_root), so every rank makes the same choice. */
static int reduce_on_tree(const struct gcollComm *comm, const struct call *c,
                          enum gcoll_exec_kind kind) {
  return c->coll == GCOLL_COLL_REDUCE && kind == GCOLL_EXEC_HOST && comm->nranks > 1 &&
         comm->force_algo == GCOLL_ALGO_TREE && comm->tree_root >= 0 &&
         c->root == comm->tree_root;
}

/* The plan's choice for this size, then the environment's overrides, then
 * what the host executor has: tree for allreduce and (forced) for reduce
 * as above, no NVLS or LL128. */
static void choose(const struct gcollComm *comm, const struct call *c, size_t bytes,
                   enum gcoll_exec_kind kind, struct gcoll_host_coll *hc) {
  const struct gcoll_tuning_entry *row = gcoll_rank_view_tuning(comm->view, c->coll, bytes);
  hc->algo = row ? row->algo : GCOLL_ALGO_RING;
  hc->proto = row ? row->proto : GCOLL_PROTO_SIMPLE;
  hc->nchannels = row ? row->nchannels : comm->nchannels;
  if (comm->force_algo >= 0) hc->algo = (enum gcoll_algo)comm->force_algo;
  if (comm->force_proto >= 0) hc->proto = (enum gcoll_proto)comm->force_proto;
  /* Small host allreduces between two nodes take the ring: with their
   * network steps moved inline, 4 ranks on 2 virtual nodes over net/socket
   * on 2 cores measured the ring at 45-65 us from 8 B to 32 KiB and the
   * tree the model picks at 85-150 us, on one channel or two (issue 17).
   * The plan's node count and the size are the same on every rank, so
   * every rank makes the same choice. More nodes keep the model's choice:
   * the ring's steps grow with them, the tree's with their log. */
  if (comm->force_algo < 0 && kind == GCOLL_EXEC_HOST && hc->algo == GCOLL_ALGO_TREE &&
      comm->view->nnodes == 2 && bytes <= NET_INLINE_MAX_BYTES)
    hc->algo = GCOLL_ALGO_RING;
  int tree_reduce = reduce_on_tree(comm, c, kind);
  if (tree_reduce) hc->algo = GCOLL_ALGO_TREE;
  if (hc->algo != GCOLL_ALGO_TREE || (c->coll != GCOLL_COLL_ALLREDUCE && !tree_reduce) ||
      comm->nranks == 1)
    hc->algo = GCOLL_ALGO_RING;   /* one rank has no tree: it is a copy */
  if (hc->proto == GCOLL_PROTO_LL128) hc->proto = GCOLL_PROTO_SIMPLE;
  /* LL's gain on the host is fewer cache lines crossing between cores
   * (graph/tuning.c); where ranks take turns on the cores that does not
   * pay (4 ranks on 2 cores, 8-512 B broadcast and allgather:
   * 0.76-0.94x). shared_cores is the
   * same on every rank, so every rank makes the same choice. */
  if (kind == GCOLL_EXEC_HOST && hc->proto == GCOLL_PROTO_LL && comm->force_proto < 0 &&
      comm->shared_cores)
    hc->proto = GCOLL_PROTO_SIMPLE;
  if (hc->nchannels < 1 || hc->nchannels > comm->nchannels) hc->nchannels = comm->nchannels;
  int cap = kind == GCOLL_EXEC_CUDA ? comm->max_device_channels : comm->max_run_channels;
  if (hc->nchannels > cap) hc->nchannels = cap;
  if (kind == GCOLL_EXEC_CUDA && hc->nchannels < comm->min_device_channels)
    hc->nchannels = comm->min_device_channels;
  /* The double binary tree is two trees: it needs both halves of the channels. */
  if (hc->algo == GCOLL_ALGO_TREE && hc->nchannels < 2 && comm->nchannels >= 2) hc->nchannels = 2;
  /* A reduce goes up channel 0's tree alone: the other trees have other roots. */
  if (tree_reduce) hc->nchannels = 1;
  /* Small allreduces between 2 nodes: each node sums on its board, one
   * step crosses between them (host_exec.h). The size and the plan's
   * shape are the same on every rank; a forced algorithm keeps its own. */
  hc->node_form = kind == GCOLL_EXEC_HOST && c->coll == GCOLL_COLL_ALLREDUCE &&
                  comm->force_algo < 0 && hc->premul == GCOLL_PREMUL_NONE && bytes > 0 &&
                  bytes <= comm->node_form_bytes;
}

/* After a deadline or a step out of protocol: was it because some rank
 * died? A transport of ours may see it (the shm proxy checks peers every
 * ~100 ms), or the bootstrap may know, even of a rank that was not our
 * peer. Asked for up to wait_ms: a step out of protocol comes at once
 * from a peer killed half-way through it, and the death shows a few
 * hundred ms later on a busy host; after a deadline a short look is
 * enough, and a longer one would blame peers that just finished. */
static int lost_rank(struct gcollComm *comm, unsigned wait_ms) {
  char value[16], err[256];
  uint64_t end = gcoll_bootstrap_now_ms() + wait_ms;
  for (;;) {
    int seen = atomic_load(&comm->failed_peer);
    if (seen >= 0) return seen;
    size_t len = 0;
    uint64_t now = gcoll_bootstrap_now_ms();
    if (now >= end) return -1;
    uint64_t step = now + 100 < end ? now + 100 : end;
    if (gcoll_bootstrap_get(comm->bs, GCOLL_BOOTSTRAP_LOST_RANK_KEY, value, sizeof(value) - 1, &len,
                            step, err, sizeof(err)) == 0) {
      value[len] = '\0';
      return atoi(value);
    }
  }
}

gcollResult_t gcoll_comm_explain(struct gcollComm *comm, const char *what, gcollResult_t rc,
                                 const char *err) {
  if (rc == gcollRemoteError)
    return gcoll_fail(rc, "%s: rank %d died or closed its connection (%s)", what,
                      atomic_load(&comm->failed_peer), err);
  /* A deadline, or a step out of protocol (a peer killed half-way through
   * a step), is most often a peer's death that no transport of ours saw
   * yet: the bootstrap may know. */
  int lost = rc == gcollSystemError ? lost_rank(comm, 500)
             : rc == gcollInternalError ? lost_rank(comm, 2000) : -1;
  if (lost >= 0) {
    atomic_store(&comm->abort_word, (int)gcollRemoteError);
    atomic_store(&comm->failed_peer, lost);
    if (rc == gcollInternalError)
      return gcoll_fail(gcollRemoteError, "%s: rank %d died (%s)", what, lost, err);
    return gcoll_fail(gcollRemoteError,
                      "%s: rank %d died (no progress within GCOLL_TIMEOUT, %llu ms)", what, lost,
                      (unsigned long long)comm->timeout_ms);
  }
  if (rc == gcollSystemError)
    return gcoll_fail(rc, "%s: no progress within GCOLL_TIMEOUT (%llu ms): %s", what,
                      (unsigned long long)comm->timeout_ms, err);
  if (atomic_load(&comm->abort_word) == gcollInvalidUsage)
    return gcoll_fail(rc, "%s: the communicator was aborted", what);
  return gcoll_fail(rc, "%s: %s", what, err);
}

/* A host collective on a communicator that has a host executor and no
 * CUDA executor runs without comm->busy: it only has to keep an abort
 * from freeing comm under it, which in_call does. A mutex's lock and
 * unlock are locked instructions, and each waits for the call's stores
 * to reach the cache: the last of them, a small call's line of the
 * one-shot board, waits for the line to come back from the core that
 * read it (a third of a 2-rank 8 B broadcast's root's time). The raise
 * is a plain store; gcoll_comm_wait_calls pairs the fence below with a
 * barrier on every thread (wait.h), as the FIFOs' publishes do. Calls on
 * one communicator never overlap (gcoll.h), so nothing else needs the
 * lock; a CUDA executor keeps it, because gcollCommGetAsyncError polls
 * that executor from the watchdog thread frameworks run. */
static int runs_unlocked(const struct gcollComm *comm, const struct gcoll_coll_op *op) {
  return op->exec == GCOLL_EXEC_HOST && comm->exec[GCOLL_EXEC_HOST].e != NULL &&
         comm->exec[GCOLL_EXEC_CUDA].e == NULL;
}

void gcoll_comm_wait_calls(struct gcollComm *comm) {
  pthread_mutex_lock(&comm->busy);
  pthread_mutex_unlock(&comm->busy);
  gcoll_wait_remote_fence();
  /* A call in progress sees the abort word in its next wait round. */
  while (atomic_load_explicit(&comm->in_call, memory_order_acquire) != 0) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000};
    nanosleep(&ts, NULL);
  }
}

gcollResult_t gcoll_coll_run_op(const struct gcoll_coll_op *op) {
  struct gcollComm *comm = op->comm;
  const int unlocked = runs_unlocked(comm, op);
  char err[512];
  /* Until the result is formed: an abort from another thread frees comm
   * as soon as it gets the lock, or sees in_call fall. */
  if (unlocked) {
    atomic_store_explicit(&comm->in_call, 1, memory_order_relaxed);
    gcoll_fifo_fence();
  } else {
    pthread_mutex_lock(&comm->busy);
  }
  /* A proxy asleep after an idle spell would add up to its poll timeout to
   * the first network step. */
  if (comm->has_net && !op->hc.poll_inline) gcoll_proxy_wake(comm->proxy);
  /* Made at the first call of its kind; an unlocked call has its own. */
  gcollResult_t rc =
      comm->exec[op->exec].e != NULL ? gcollSuccess : gcoll_comm_executor(comm, op->exec);
  if (rc != gcollSuccess) {
    rc = gcoll_fail(rc, "%s: %s", op->name, gcollGetLastError(NULL));
    goto out;
  }
  const struct gcoll_exec_ops *ops = comm->exec[op->exec].ops;
  struct gcoll_exec *e = comm->exec[op->exec].e;
  /* Both executors use the same FIFOs: host threads may start only once
   * every kernel queued before them has finished. */
  struct gcoll_exec *cuda = comm->exec[GCOLL_EXEC_CUDA].e;
  if (op->exec == GCOLL_EXEC_HOST && cuda != NULL)
    rc = comm->exec[GCOLL_EXEC_CUDA].ops->wait(cuda, err, sizeof(err));
  /* Device buffers: the kernel is queued in the order of the caller's
   * stream and the call returns; a failure shows in a later call, in
   * gcollCommGetAsyncError, or in gcollCommDestroy's wait. */
  if (rc == gcollSuccess) rc = ops->launch(e, &op->hc, op->stream, err, sizeof(err));
  if (rc == gcollSuccess) rc = ops->poll(e, err, sizeof(err));
  if (rc == gcollInProgress) rc = gcollSuccess;
  if (rc != gcollSuccess) rc = gcoll_comm_explain(comm, op->name, rc, err);
out:
  /* The last touch of comm: an abort may free it from here on. */
  if (unlocked)
    atomic_store_explicit(&comm->in_call, 0, memory_order_release);
  else
    pthread_mutex_unlock(&comm->busy);
  return rc;
}

/* Checks and chooses now, so a refused call inside a group poisons the
 * group at once; runs now, or at gcollGroupEnd when grouped. */
static gcollResult_t run(struct gcollComm *comm, const struct call *c, void *stream) {
  size_t bytes = 0;
  enum gcoll_exec_kind kind = GCOLL_EXEC_HOST;
  /* Every field by name, no initializer: zero-filling the struct first was
   * a `rep stos`, 8% of a small call. */
  struct gcoll_coll_op op;
  op.comm = comm;
  op.name = c->name;
  op.stream = stream;
  op.exec = GCOLL_EXEC_HOST;
  op.hc.coll = c->coll;
  op.hc.sendbuf = c->sendbuf;
  op.hc.recvbuf = c->recvbuf;
  op.hc.count = c->count;
  op.hc.dtype = c->dtype;
  op.hc.op = gcollSum;
  op.hc.root = c->has_root ? c->root : 0;
  op.hc.algo = GCOLL_ALGO_RING;
  op.hc.proto = GCOLL_PROTO_SIMPLE;
  op.hc.nchannels = 0;
  op.hc.premul = GCOLL_PREMUL_NONE;
  op.hc.premul_k = 0;
  op.hc.poll_inline = 0;
  op.hc.node_form = 0;
  gcollResult_t rc = check_args(comm, c, stream, &bytes, &kind, &op.hc);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  op.exec = kind;
  choose(comm, c, bytes, kind, &op.hc);
  op.hc.poll_inline = net_inline(comm, c->coll, bytes, kind);
  /* Tested here, not only inside: the arguments cost a call each. */
  if (comm->trace)
    gcoll_log_trace(comm, "%s: %zu bytes, %s/%s on %d channels, %s executor, stream %p%s%s%s",
                    c->name, bytes, gcoll_algo_name(op.hc.algo), gcoll_proto_name(op.hc.proto),
                    op.hc.nchannels, kind == GCOLL_EXEC_CUDA ? "CUDA" : "host", stream,
                    op.hc.premul != GCOLL_PREMUL_NONE ? ", pre-mul-sum" : "",
                    op.hc.poll_inline ? ", network steps inline" : "",
                    op.hc.node_form ? ", node form" : "");
  /* A host call that moves nothing returns once its arguments pass, as
   * NCCL's and Open MPI's do: no executor, no proxy wake-up, no wait (it
   * took 0.2-1.1 us, 10-50x Open MPI's, in compare-mpi.sh's 0-byte rows).
   * The count is the same on every rank, so every rank skips it. */
  if (kind == GCOLL_EXEC_HOST && bytes == 0) return gcollSuccess;
  if (gcoll_group_depth() > 0) return gcoll_group_enqueue_coll(&op);
  return gcoll_coll_run_op(&op);
}

gcollResult_t gcollAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                             gcollDataType_t datatype, gcollRedOp_t op, gcollComm_t comm,
                             void *stream) {
  struct call c = {"gcollAllReduce", GCOLL_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op,
                   0, 1, 0};
  return run(comm, &c, stream);
}

gcollResult_t gcollBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                             gcollDataType_t datatype, int root, gcollComm_t comm, void *stream) {
  struct call c = {"gcollBroadcast", GCOLL_COLL_BROADCAST, sendbuff, recvbuff, count, datatype,
                   gcollSum, root, 0, 1};
  return run(comm, &c, stream);
}

gcollResult_t gcollReduce(const void *sendbuff, void *recvbuff, size_t count,
                          gcollDataType_t datatype, gcollRedOp_t op, int root, gcollComm_t comm,
                          void *stream) {
  struct call c = {"gcollReduce", GCOLL_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root,
                   1, 1};
  return run(comm, &c, stream);
}

gcollResult_t gcollAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                             gcollDataType_t datatype, gcollComm_t comm, void *stream) {
  struct call c = {"gcollAllGather", GCOLL_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype,
                   gcollSum, 0, 0, 0};
  return run(comm, &c, stream);
}

gcollResult_t gcollReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                 gcollDataType_t datatype, gcollRedOp_t op, gcollComm_t comm,
                                 void *stream) {
  struct call c = {"gcollReduceScatter", GCOLL_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount,
                   datatype, op, 0, 1, 0};
  return run(comm, &c, stream);
}
