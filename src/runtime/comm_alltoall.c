/* gcollAlltoAll, gcollGather and gcollScatter on grouped send/recv, as NCCL
 * builds them: all-to-all is, for every peer p, a send of block p and a
 * receive into block p; gather is a send from every rank to root, where
 * root receives block p from p; scatter is root sending block p to p.
 * The operations of one call go to comm_p2p.c as one run (outside a group)
 * or into the caller's open group (comm_group.c), so every transfer
 * progresses at once and none can wait for another; the own block is a
 * self send/recv, i.e. a copy, skipped when it would copy a block onto
 * itself (gather and scatter in place).
 *
 * Buffers are host memory (stream NULL) or CUDA device memory with a
 * stream, staged through the host FIFOs by the calling thread (comm_p2p.c):
 * such a call blocks until its data is in place. A call's buffers must be
 * of one kind, as for the other collectives. count 0 moves nothing (every
 * rank passes the same count). */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/reduce.h"
#include "runtime/comm.h"
#include "runtime/comm_p2p.h"

enum a2a_kind { A2A_ALLTOALL, A2A_GATHER, A2A_SCATTER };

struct a2a_call {
  const char *name;
  enum a2a_kind kind;
  const void *sendbuf;
  void *recvbuf;
  size_t count;           /* elements per block: per peer, per rank */
  gcollDataType_t dtype;
  int root;               /* gather, scatter */
};

/* The GPU of a device buffer (the CUDA executor's memory), -1 for host
 * memory; as send/recv decide it. */
static int buffer_device(const struct gcollComm *comm, const void *buf) {
  const struct gcoll_exec_ops *cuda = gcoll_exec_ops_of(GCOLL_EXEC_CUDA);
  int dev = -1;
  if (cuda == NULL || buf == NULL || !cuda->owns(buf, &dev)) return -1;
  return dev >= 0 ? dev : comm->cuda_device >= 0 ? comm->cuda_device : 0;
}

static int overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/* Checks the arguments. *device: the GPU of the buffers this rank uses,
 * -1 for host memory; *in_place: the own block need not move. */
static gcollResult_t check_args(struct gcollComm *comm, const struct a2a_call *c, void *stream,
                                int *device, int *in_place) {
  *device = -1;
  *in_place = 0;
  if (comm == NULL) return gcoll_fail(gcollInvalidArgument, "%s: comm is NULL", c->name);
  size_t size = gcoll_dtype_size(c->dtype);
  if (size == 0)
    return gcoll_fail(gcollInvalidArgument, "%s: datatype %d is not a gcollDataType_t", c->name,
                      (int)c->dtype);
  int n = comm->nranks, me = comm->rank;
  if (c->kind != A2A_ALLTOALL && (c->root < 0 || c->root >= n))
    return gcoll_fail(gcollInvalidArgument, "%s: root %d is not a rank (0..%d)", c->name, c->root,
                      n - 1);
  /* No object is larger than PTRDIFF_MAX bytes, which also leaves room for
   * send/recv's message header. */
  if (c->count > (size_t)PTRDIFF_MAX / size / (size_t)n)
    return gcoll_fail(gcollInvalidArgument, "%s: count %zu overflows the buffer size", c->name,
                      c->count);
  gcollResult_t rc = gcoll_comm_check_usable(comm, c->name);
  if (rc != gcollSuccess || c->count == 0) return rc;
  /* The buffers this rank uses, and their extents in bytes. */
  size_t block = c->count * size, all = block * (size_t)n;
  int all_used = c->kind == A2A_ALLTOALL || me == c->root;
  int use_send = c->kind != A2A_SCATTER || all_used, use_recv = c->kind != A2A_GATHER || all_used;
  size_t send_len = c->kind == A2A_GATHER ? block : all;
  size_t recv_len = c->kind == A2A_SCATTER ? block : all;
  if (use_send && c->sendbuf == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is NULL with count %zu", c->name,
                      c->count);
  if (use_recv && c->recvbuf == NULL)
    return gcoll_fail(gcollInvalidArgument, "%s: recvbuff is NULL with count %zu", c->name,
                      c->count);
  int send_dev = use_send ? buffer_device(comm, c->sendbuf) : -2;
  int recv_dev = use_recv ? buffer_device(comm, c->recvbuf) : -2;
  if (send_dev == -2) send_dev = recv_dev;
  if (recv_dev == -2) recv_dev = send_dev;
  if ((send_dev >= 0) != (recv_dev >= 0))
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is %s memory and recvbuff %s memory: "
                      "pass both in device memory or both in host memory", c->name,
                      send_dev >= 0 ? "device" : "host", recv_dev >= 0 ? "device" : "host");
  if (send_dev >= 0 && send_dev != recv_dev)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff is on GPU %d and recvbuff on GPU %d",
                      c->name, send_dev, recv_dev);
  if (send_dev < 0 && stream != NULL)
    return gcoll_fail(gcollInvalidUsage, "%s: a stream with host buffers: collectives on host "
                                         "memory block and run on no stream (pass NULL, or "
                                         "device buffers)", c->name);
  *device = send_dev;
  if (!use_send || !use_recv || !overlap(c->sendbuf, send_len, c->recvbuf, recv_len))
    return gcollSuccess;
  const char *s = c->sendbuf, *r = c->recvbuf;
  if (c->kind == A2A_ALLTOALL)
    return gcoll_fail(gcollInvalidArgument, "%s: sendbuff and recvbuff overlap: in-place "
                      "all-to-all is not supported (as with NCCL)", c->name);
  if (c->kind == A2A_GATHER && s == r + (size_t)me * block) {
    *in_place = 1;
    return gcollSuccess;
  }
  if (c->kind == A2A_SCATTER && r == s + (size_t)me * block) {
    *in_place = 1;
    return gcollSuccess;
  }
  return gcoll_fail(gcollInvalidArgument, "%s: sendbuff and recvbuff overlap, but %s is not "
                    "%s + root * count elements (in place)", c->name,
                    c->kind == A2A_GATHER ? "sendbuff" : "recvbuff",
                    c->kind == A2A_GATHER ? "recvbuff" : "sendbuff");
}

/* Operations being listed, all alike but for direction, peer and buffer. */
struct op_list {
  struct gcoll_p2p_op *ops;
  int n;
  struct gcoll_p2p_op proto;   /* comm, bytes, device, stream */
};

static void add(struct op_list *l, int is_send, int peer, const char *buf) {
  struct gcoll_p2p_op *op = &l->ops[l->n++];
  *op = l->proto;
  op->is_send = is_send;
  op->peer = peer;
  if (is_send) op->sendbuf = buf;
  else op->recvbuf = (char *)buf;
}

/* Fills ops with this rank's sends and receives for the call (at most
 * 2 * nranks); returns their number. */
static int build_ops(struct gcollComm *comm, const struct a2a_call *c, int device, void *stream,
                     int in_place, struct gcoll_p2p_op *ops) {
  int n = comm->nranks, me = comm->rank;
  size_t block = c->count * gcoll_dtype_size(c->dtype);
  const char *s = c->sendbuf, *r = c->recvbuf;
  struct op_list l = {ops, 0, {.comm = comm, .bytes = block, .device = device,
                               .stream = device >= 0 ? stream : NULL}};
  switch (c->kind) {
  case A2A_ALLTOALL:
    /* Rank r posts its peers in the order r, r + 1, ...: the ranks do
     * not all address the same peer first. */
    for (int i = 0; i < n; i++) {
      int to = (me + i) % n, from = (me + n - i) % n;
      add(&l, 1, to, s + (size_t)to * block);
      add(&l, 0, from, r + (size_t)from * block);
    }
    break;
  case A2A_GATHER:
    if (me != c->root) {
      add(&l, 1, c->root, s);
      break;
    }
    for (int i = 0; i < n; i++) {
      int from = (me + i) % n;
      if (from != me) {
        add(&l, 0, from, r + (size_t)from * block);
      } else if (!in_place) {
        add(&l, 1, me, s);
        add(&l, 0, me, r + (size_t)me * block);
      }
    }
    break;
  case A2A_SCATTER:
    if (me != c->root) {
      add(&l, 0, c->root, r);
      break;
    }
    for (int i = 0; i < n; i++) {
      int to = (me + i) % n;
      if (to != me) {
        add(&l, 1, to, s + (size_t)to * block);
      } else if (!in_place) {
        add(&l, 1, me, s + (size_t)me * block);
        add(&l, 0, me, r);
      }
    }
    break;
  }
  return l.n;
}

static gcollResult_t run(struct gcollComm *comm, const struct a2a_call *c, void *stream) {
  int device = -1, in_place = 0;
  gcollResult_t rc = check_args(comm, c, stream, &device, &in_place);
  if (rc != gcollSuccess) return gcoll_group_note(rc);
  if (c->count == 0) return gcollSuccess;
  struct gcoll_p2p_op *ops = calloc(2 * (size_t)comm->nranks, sizeof(*ops));
  if (ops == NULL)
    return gcoll_group_note(gcoll_fail(gcollSystemError, "%s: out of memory for %d operations",
                                       c->name, 2 * comm->nranks));
  int nops = build_ops(comm, c, device, stream, in_place, ops);
  if (gcoll_group_depth() > 0) {
    /* A failed enqueue has poisoned the group already. */
    for (int i = 0; i < nops && rc == gcollSuccess; i++) rc = gcoll_group_enqueue(&ops[i]);
  } else if (nops > 0) {
    rc = gcoll_p2p_run(ops, nops, c->name);
  }
  free(ops);
  return rc;
}

gcollResult_t gcollAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                            gcollDataType_t datatype, gcollComm_t comm, void *stream) {
  struct a2a_call c = {"gcollAlltoAll", A2A_ALLTOALL, sendbuff, recvbuff, count, datatype, 0};
  return run(comm, &c, stream);
}

gcollResult_t gcollGather(const void *sendbuff, void *recvbuff, size_t count,
                          gcollDataType_t datatype, int root, gcollComm_t comm, void *stream) {
  struct a2a_call c = {"gcollGather", A2A_GATHER, sendbuff, recvbuff, count, datatype, root};
  return run(comm, &c, stream);
}

gcollResult_t gcollScatter(const void *sendbuff, void *recvbuff, size_t count,
                           gcollDataType_t datatype, int root, gcollComm_t comm, void *stream) {
  struct a2a_call c = {"gcollScatter", A2A_SCATTER, sendbuff, recvbuff, count, datatype, root};
  return run(comm, &c, stream);
}
